"""Reading durations and fractions typed by a user, so that units cannot be misread.

- :func:`parse_duration`: the one duration grammar of every option and input that takes a
  time: ``"200us"``, ``"6ms"``, ``"150 ms"``, ``"1.5s"``, ``"90m"`` / ``"2min"``, ``"12h"``,
  ``"2d"`` -> seconds (``m`` is minutes; milliseconds are ``ms``). A bare number is seconds; :func:`duration_warning` says when a bare number is
  suspiciously large for what it sets (``--switch-latency 6`` is 6 s, not 6 ms).
- :func:`parse_fraction`: ``"5%"`` -> 0.05, ``"0.05"`` -> 0.05. A bare number >= 1 (``5``,
  i.e. +500 %) is refused unless forced, since it is almost always a percentage without ``%``.
"""

from __future__ import annotations

import math

from joulebound.core.errors import JouleboundError

#: unit suffix -> seconds, longest suffixes first so "ms" is not read as "s"
_DURATION_UNITS: tuple[tuple[str, float], ...] = (
    ("min", 60.0), ("us", 1e-6), ("µs", 1e-6), ("ms", 1e-3), ("ns", 1e-9), ("s", 1.0),
    ("m", 60.0), ("h", 3600.0), ("d", 86400.0),
)
_DURATION_EXAMPLES = "e.g. '200us', '6ms', '0.15s', '90m', '12h', '2d'"


def split_duration(text: str | float) -> tuple[float, bool]:
    """``(seconds, had_unit)`` for a duration; a bare number is seconds (``had_unit`` False).

    Raises :class:`JouleboundError` for text that is not a duration or for a negative one."""
    if isinstance(text, bool):
        raise JouleboundError(f"cannot parse duration {text!r}: use {_DURATION_EXAMPLES}")
    if isinstance(text, int | float):
        value, had_unit = float(text), False
    else:
        s = text.strip().lower().replace(" ", "")
        num, scale, had_unit = s, 1.0, False
        for unit, factor in _DURATION_UNITS:
            if s.endswith(unit):
                num, scale, had_unit = s[: -len(unit)], factor, True
                break
        try:
            value = float(num) * scale
        except ValueError:
            raise JouleboundError(f"cannot parse duration {text!r}: use {_DURATION_EXAMPLES} "
                                  "(a bare number is seconds)") from None
    if not math.isfinite(value):
        raise JouleboundError(f"duration must be finite, got {text!r}")
    if value < 0:
        raise JouleboundError(f"duration must be >= 0, got {text!r}")
    return value, had_unit


def parse_duration(text: str | float) -> float:
    """Seconds from ``"200us"``, ``"10ms"``, ``"150 ms"``, ``"1.5s"``, ``"90m"``, ``"2min"``,
    ``"12h"``, ``"2d"`` or a number (seconds)."""
    return split_duration(text)[0]


def duration_warning(text: str | float, option: str, warn_above_s: float = 1.0) -> str | None:
    """A warning when ``text`` is a bare number above ``warn_above_s`` seconds (likely meant in
    milliseconds), else ``None``. E.g. ``--switch-latency 6`` -> 6 s = 6000 ms."""
    value, had_unit = split_duration(text)
    if had_unit or value <= warn_above_s:
        return None
    return (f"{option} {text} has no unit and is read as {value:g} s ({value * 1e3:g} ms); "
            f"write e.g. {option} {value:g}ms if you meant milliseconds")


def parse_fraction(text: str | float, option: str = "--slowdown", force: bool = False) -> float:
    """A fraction from ``"5%"`` (0.05) or ``"0.05"``. A bare number with ``|x| >= 1`` is refused
    unless ``force`` (``5`` would mean +500 %)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        s, pct = str(text), False
    else:
        s = str(text).strip().replace(" ", "")
        pct = s.endswith("%")
        if pct:
            s = s[:-1]
    try:
        value = float(s)
    except ValueError:
        raise JouleboundError(f"cannot read {option} {text!r}: write a percentage such as 5% or a "
                              "fraction such as 0.05") from None
    if not math.isfinite(value):
        raise JouleboundError(f"{option} must be finite, got {text!r}")
    if pct:
        return value / 100.0
    if abs(value) >= 1 and not force:
        raise JouleboundError(f"{option} {text} is a fraction: {value:g} means {value * 100:+g} %. "
                              f"Write {option} {value:g}% for {value:g} percent, or add --force if "
                              f"you mean {value * 100:+g} %")
    return value
