"""Op argument specs: what it takes to run an ATen op again on fresh tensors.

A *spec* is a JSON-able description of one dispatched op's arguments, recorded by
``joulebound run --record`` (:class:`~joulebound.runtime.hooks.OpStream` with
``capture_args=True``) in each kernel's ``meta["replay"]`` and read back by the kernel replay of
``joulebound calibrate`` (:mod:`joulebound.measure.calibrate.replay`). Forms:

``{"T": dtype, "shape": [...], "stride": [...], "offset": n, "dev": type}``
    a tensor (``dtype`` as torch names it, e.g. ``"bfloat16"``; ``dev`` its device type,
    ``"cuda"`` / ``"cpu"``); integer and bool tensors also carry ``"lo"``/``"hi"``, the range of
    the recorded values (indices must stay in range).
``{"L": [spec, ...]}``
    a list of tensors (``aten.cat``, ``_foreach_*``).
``{"V": value}``
    a Python number, bool, string, ``None`` or a (nested) list of them.
``{"dtype": name}``, ``{"device": type}``, ``{"enum": text}``
    a ``torch.dtype``, a ``torch.device`` (replayed on the replay device) or a layout / memory
    format (``"torch.contiguous_format"``).
``{"generator": device type}``
    a ``torch.Generator`` (a fresh one on the replay device).
``{"X": type name}``
    anything else: the op cannot be rebuilt from the spec.

Values of floating-point tensors are not recorded (random normal data is used on replay).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Spec = dict[str, Any]

_PLAIN = (bool, int, float, str, type(None))


def _plain(v: Any) -> bool:
    if isinstance(v, _PLAIN):
        return True
    return isinstance(v, list | tuple) and all(_plain(x) for x in v)


def tensor_spec(t: Any) -> Spec:
    """Spec of one tensor (shape, strides, storage offset, dtype; the value range of integer and
    bool tensors). Reads the values of integer tensors once (a device sync on a GPU)."""
    import torch

    d: Spec = {"T": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
               "stride": list(t.stride()), "offset": int(t.storage_offset()),
               "dev": t.device.type}
    if (not t.dtype.is_floating_point and not t.dtype.is_complex and t.numel() > 0
            and t.layout == torch.strided):
        try:
            lo, hi = torch.aminmax(t.detach().reshape(-1).to(torch.int64))
            d["lo"], d["hi"] = int(lo), int(hi)
        except Exception:
            pass
    return d


def arg_spec(v: Any) -> Spec:
    """Spec of one argument (see the module docs)."""
    import torch

    if isinstance(v, torch.Tensor):
        return tensor_spec(v)
    if isinstance(v, list | tuple) and v and all(isinstance(x, torch.Tensor) for x in v):
        return {"L": [tensor_spec(x) for x in v]}
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).removeprefix("torch.")}
    if isinstance(v, torch.device):
        return {"device": v.type}
    if isinstance(v, torch.Generator):
        return {"generator": v.device.type}
    if isinstance(v, torch.layout | torch.memory_format):
        return {"enum": str(v)}
    if _plain(v):
        return {"V": list(v) if isinstance(v, tuple) else v}
    return {"X": type(v).__name__}


def call_spec(args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> Spec:
    """``{"args": [...], "kwargs": {...}}``: the specs of one call's arguments."""
    return {"args": [arg_spec(a) for a in args],
            "kwargs": {str(k): arg_spec(v) for k, v in (kwargs or {}).items()}}
