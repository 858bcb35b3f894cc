"""Op keys: how the runtime names a dispatched op, in tuple and text form, and back.

A key is ``(op name, input shapes, dtype)`` (:data:`OpKey`); its text form (:func:`key_str`) is
the kernel name of a recorded op stream and of a plan made over it
(``"aten.mm.default[8x64,64x192]float32"``). :func:`parse_key` reads the text form back for the
cost model (:func:`~joulebound.runtime.controller.trace_from_ops`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from joulebound.workload.opcost import Arg

OpKey = tuple[str, tuple, str]


def dtype_name(dtype: Any) -> str:
    """``torch.float32`` -> ``"float32"``; ``None`` -> ``"-"``."""
    return "-" if dtype is None else str(dtype).removeprefix("torch.")


def key_str(key: Hashable) -> str:
    """Stable text form of a key, used as ``Kernel.name`` / ``Plan.kernel_names``.

    ``("aten.mm.default", ((8, 64), (64, 192)), "float32")`` ->
    ``"aten.mm.default[8x64,64x192]float32"``; a 0-d tensor is ``scalar``, a tensor list
    ``(shape,shape,...)``."""
    if isinstance(key, str):
        return key
    name, shapes, dtype = key  # type: ignore[misc]

    def fmt(s: Any) -> str:
        if s and isinstance(s[0], tuple):
            return "(" + ",".join(fmt(x) for x in s) + ")"
        return "x".join(map(str, s)) if s else "scalar"

    return f"{name}[{','.join(fmt(s) for s in shapes)}]{dtype}"


def _shape(text: str) -> tuple[int, ...] | None:
    """The shape ``"8x64"`` -> ``(8, 64)`` (``"scalar"`` -> ``()``); ``None`` when the text is
    not one: a negative size (a hand-edited or damaged plan) is not a shape, and priced as one
    it gave negative FLOPs and bytes, which the GPU model cannot take."""
    text = text.strip()
    if text == "scalar":
        return ()
    try:
        dims = tuple(int(x) for x in text.split("x"))
    except ValueError:
        return None
    return None if any(d < 0 for d in dims) else dims


def parse_key(name: str) -> tuple[str, list[Arg | None], str]:
    """``(op, tensor inputs, dtype name)`` of a key's text form (inverse of :func:`key_str`).

    Inputs are shapes (``()`` for ``scalar``) or lists of shapes (``(…)``); a part that is not a
    shape gives ``None``. A name without ``[...]`` has no inputs and dtype ``"-"``."""
    op, sep, rest = name.partition("[")
    if not sep:
        return op, [], "-"
    body, _, dtype = rest.rpartition("]")
    parts: list[str] = []
    depth, cur = 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    if cur:
        parts.append(cur)
    inputs: list[Arg | None] = []
    for part in parts:
        part = part.strip()
        if part.startswith("(") and part.endswith(")"):
            shapes = [_shape(x) for x in part[1:-1].split(",") if x.strip()]
            inputs.append([s for s in shapes if s is not None])
        else:
            inputs.append(_shape(part))
    return op, inputs, dtype
