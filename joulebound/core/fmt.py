"""Number formatting shared by the CLI and the HTML report (no CLI or report imports here)."""

from __future__ import annotations


def fmt_pct(x: float | None, digits: int = 2, *, signed: bool = True, missing: str = "–") -> str:
    """A fraction as a percentage: ``-0.146`` -> ``"-14.60 %"``.

    Args:
        x: the fraction (0.01 = 1 %); ``None`` prints ``missing``.
        digits: decimals shown.
        signed: always show the sign (``+1.00 %``); else only a minus sign (prose).
        missing: text for ``None``.

    A value that rounds to zero (|x| below half the last shown digit, 0.005 % at two decimals)
    prints as ``+0.00 %`` / ``0.00 %``, never ``-0.00 %``.
    """
    if x is None:
        return missing
    v = (0.0 if abs(x) < 0.5 * 10.0 ** -(digits + 2) else x) * 100
    return f"{v:+.{digits}f} %" if signed else f"{v:.{digits}f} %"


def fmt_range(lo: float | None, hi: float | None, digits: int = 1) -> str:
    """A 5–95 % range of fractions as ``"[-13.6, -9.9]"`` (percent, low first); ``"–"`` when
    either end is missing."""
    if lo is None or hi is None:
        return "–"
    a, b = sorted((lo, hi))

    def one(x: float) -> str:
        v = 0.0 if abs(x) < 0.5 * 10.0 ** -(digits + 2) else x * 100
        return f"{v:+.{digits}f}"

    return f"[{one(a)}, {one(b)}]"
