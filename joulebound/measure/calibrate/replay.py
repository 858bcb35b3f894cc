"""Kernel replay: the distinct ops of a recorded iteration, rebuilt on fresh tensors.

From a recorded op stream (``joulebound run --record ops.json``: one kernel per dispatched ATen op,
named by its op key, with the call's argument specs in ``meta["replay"]``,
:mod:`joulebound.workload.opspec`) :func:`replay_set` builds the iteration's *distinct* ops (one
per op key, with how often it runs per iteration) and :func:`build_call` turns one into a
zero-argument callable on freshly allocated tensors of the recorded shapes, strides and dtypes:

* floating-point tensors get standard normal values (GEMM power depends on the operands' values;
  N(0, 1) is the distribution of activations after normalisation and of initialised weights up to
  a scale), integer and bool tensors uniform values in the recorded range (indices stay valid);
* a tensor with overlapping or padded strides is a strided view of one buffer, as recorded;
* scalar arguments, lists, dtypes and memory formats are passed as recorded; a ``device`` is the
  replay device.

A recording made without argument specs (an older ``run --record``) is rebuilt from the op key's
shapes where the op's schema needs no scalar argument without a default.

Ops that cannot be replayed are listed with the reason (:class:`Unreplayable`) and fall back to
the model: communication (collectives), custom kernels (not an ATen op), data-dependent output
shapes (``nonzero``, ``masked_select``, ``unique``, boolean indexing, ``.item()``), random-number
generation that reseeds, and ops whose arguments could not be rebuilt. A profiled trace (Kineto
import / ``joulebound profile``) names CUDA kernels, not ops: its kernels are listed as not
replayable (record the op stream instead).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from joulebound.core.errors import JouleboundError
from joulebound.runtime.opkeys import parse_key
from joulebound.workload.trace import Trace

log = logging.getLogger(__name__)

#: ops whose output shape depends on the data, or which synchronise with the host
DATA_DEPENDENT = frozenset({
    "aten.nonzero", "aten.nonzero_static", "aten.masked_select", "aten.unique",
    "aten._unique", "aten._unique2", "aten.unique_consecutive", "aten.unique_dim",
    "aten._local_scalar_dense", "aten.item", "aten.bincount", "aten.repeat_interleave",
    "aten.masked_scatter", "aten.argwhere", "aten._assert_async", "aten.equal", "aten.is_nonzero",
})
#: namespaces / name fragments of communication ops
COMMUNICATION = ("c10d", "_c10d_functional", "nccl", "all_reduce", "allreduce", "all_gather",
                 "reduce_scatter", "broadcast_", "send", "recv")


class ReplayError(JouleboundError):
    """An op could not be rebuilt or failed when run."""


@dataclass
class ReplayOp:
    """One distinct op of the iteration.

    Attributes:
        name: the kernel name in the trace (the op key, e.g.
            ``"aten.mm.default[8x64,64x192]float32"``).
        op: the ATen overload (``"aten.mm.default"``).
        spec: argument specs (:func:`~joulebound.workload.opspec.call_spec`), ``None`` when the
            recording kept none (rebuilt from the key's shapes).
        count: invocations per iteration.
    """

    name: str
    op: str
    spec: dict[str, Any] | None
    count: int = 1


@dataclass
class Unreplayable:
    """A distinct kernel that is not replayed (it keeps the model's figures).

    Attributes:
        name: kernel name; op: the op (or the CUDA kernel's launching op); reason: why;
        count: invocations per iteration.
    """

    name: str
    op: str
    reason: str
    count: int = 1


@dataclass
class ReplaySet:
    """The distinct ops of a trace: those that can be replayed and those that cannot."""

    ops: list[ReplayOp] = field(default_factory=list)
    skipped: list[Unreplayable] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"replayable": [{"name": o.name, "op": o.op, "count": o.count} for o in self.ops],
                "not_replayable": [{"name": u.name, "op": u.op, "reason": u.reason,
                                    "count": u.count} for u in self.skipped]}


def _base(op: str) -> str:
    """``"aten.mm.default"`` -> ``"aten.mm"``."""
    parts = op.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else op


def _spec_items(spec: Any) -> list[dict[str, Any]] | None:
    """The argument records of an op spec (``args`` then ``kwargs`` values), or ``None`` when
    the spec is not in the op-stream format (a hand-edited or damaged file)."""
    if not isinstance(spec, dict):
        return None
    args, kwargs = spec.get("args", []), spec.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return None
    items = [*args, *kwargs.values()]
    if not all(isinstance(a, dict) for a in items):
        return None
    for a in items:
        if "L" in a and not (isinstance(a["L"], list) and all(isinstance(t, dict) for t in a["L"])):
            return None
    return items


def _tensor_devices(items: list[dict[str, Any]]) -> set[str]:
    """Devices of the tensors in argument records (``{"T": ..., "dev": ...}`` or a list of
    them under ``"L"``)."""
    out: set[str] = set()
    for a in items:
        for t in ([a] if "T" in a else a.get("L", [])):
            out.add(str(t.get("dev", "?")))
    return out


def why_not_replayable(op: str, category: str = "", spec: dict[str, Any] | None = None,
                       on_gpu: bool = False) -> str | None:
    """The reason an op cannot be replayed, or ``None`` when it can be tried (``on_gpu``: the
    recording ran on a GPU, so an op on CPU tensors only is host work)."""
    low = op.lower()
    if category == "communication" or any(c in low for c in COMMUNICATION):
        return "communication (needs the other ranks)"
    if not op.startswith("aten."):
        return "custom kernel (not an ATen op)"
    if _base(op) in DATA_DEPENDENT:
        return "data-dependent output shape or host sync"
    if spec is None:
        return None
    items = _spec_items(spec)
    if items is None:
        return "its recorded arguments are not in the op-stream format (damaged or hand-edited)"
    if on_gpu and _tensor_devices(items) <= {"cpu"}:
        return "runs on the host (CPU tensors only): no GPU kernel"
    for a in items:
        if "X" in a:
            return f"argument of type {a['X']} cannot be rebuilt"
    if _base(op) in ("aten.index", "aten.index_put", "aten.index_put_"):
        for a in spec.get("args", []):
            for t in a.get("L", []):
                if t.get("T") == "bool":
                    return "boolean-mask indexing (data-dependent shape)"
    return None


def replay_set(trace: Trace) -> ReplaySet:
    """The distinct ops of ``trace`` (one per kernel name, first occurrence order) split into
    replayable ops and the rest (with reasons)."""
    counts: dict[str, int] = {}
    first: dict[str, Any] = {}
    for k in trace.kernels:
        counts[k.name] = counts.get(k.name, 0) + 1
        first.setdefault(k.name, k)
    out = ReplaySet()
    on_gpu = any("cuda" in _tensor_devices(_spec_items(k.meta["replay"]) or [])
                 for k in first.values()
                 if "replay" in k.meta)
    profiled = trace.meta.get("source") not in (None, "joulebound.runtime.hooks") \
        and not any("replay" in k.meta for k in trace.kernels)
    for name, k in first.items():
        spec = k.meta.get("replay")
        op = parse_key(name)[0] if "[" in name else str(k.meta.get("op", name))
        if profiled and spec is None:
            out.skipped.append(Unreplayable(
                name, str(k.meta.get("op", op)), "profiled CUDA kernel: replay needs the op "
                "stream (record it with `joulebound run --record ops.json -- python train.py`)",
                counts[name]))
            continue
        reason = why_not_replayable(op, k.category, spec, on_gpu)
        if reason is None and spec is None and "[" not in name:
            reason = "no recorded arguments"
        if reason is not None:
            out.skipped.append(Unreplayable(name, op, reason, counts[name]))
        else:
            out.ops.append(ReplayOp(name, op, spec, counts[name]))
    return out


# -- rebuilding calls -------------------------------------------------------------------------------
def resolve_overload(op: str) -> Any:
    """The ``torch.ops`` overload of ``"aten.mm.default"``; raises :class:`ReplayError`."""
    import torch

    parts = op.split(".")
    if len(parts) != 3:
        raise ReplayError(f"{op}: not an ATen overload name (namespace.op.overload)")
    try:
        return getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except (AttributeError, RuntimeError) as exc:
        raise ReplayError(f"{op}: not found in this torch ({exc})") from None


def _dtype(name: str) -> Any:
    import torch

    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ReplayError(f"unknown dtype {name!r}")
    return dt


def make_tensor(spec: dict[str, Any], device: Any, gen: Any) -> Any:
    """A fresh tensor for a tensor spec: recorded shape, strides, storage offset and dtype;
    normal values (floating point), uniform in the recorded range (integer), random (bool)."""
    import torch

    dt = _dtype(spec["T"])
    shape = [int(x) for x in spec["shape"]]
    stride = [int(x) for x in spec.get("stride") or _contiguous(shape)]
    offset = int(spec.get("offset", 0))
    if str(device) == "meta":      # shapes and schema only, no values
        return torch.empty_strided(shape, stride, dtype=dt, device="meta")
    if spec.get("dev") == "cpu" and not shape:
        device = "cpu"             # a 0-d CPU tensor beside device tensors (a scalar) stays there
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, stride, strict=True)) \
        if all(n > 0 for n in shape) else 0
    size = offset + extent
    if dt.is_floating_point or dt.is_complex:
        base = torch.randn(size, generator=gen, dtype=torch.float32).to(dt)
    elif dt == torch.bool:
        base = torch.randint(0, 2, (size,), generator=gen).to(torch.bool)
    else:
        lo, hi = int(spec.get("lo", 0)), int(spec.get("hi", 1))
        base = torch.randint(lo, max(hi, lo) + 1, (size,), generator=gen, dtype=torch.int64).to(dt)
    return base.to(device).as_strided(shape, stride, offset)


def _contiguous(shape: list[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return out[::-1]


def _value(spec: dict[str, Any], device: Any, gen: Any) -> Any:
    import torch

    if "T" in spec:
        return make_tensor(spec, device, gen)
    if "L" in spec:
        return [make_tensor(s, device, gen) for s in spec["L"]]
    if "V" in spec:
        return spec["V"]
    if "dtype" in spec:
        return _dtype(spec["dtype"])
    if "device" in spec:
        return torch.device(device)
    if "generator" in spec:    # a fresh generator (none on the meta device: nothing is drawn)
        if str(device) == "meta":
            return None
        return torch.Generator(device=torch.device(device)).manual_seed(int(gen.initial_seed()))
    if "enum" in spec:
        name = spec["enum"].removeprefix("torch.")
        v = getattr(torch, name, None)
        if v is None:
            raise ReplayError(f"unknown torch constant {spec['enum']!r}")
        return v
    raise ReplayError(f"argument cannot be rebuilt: {spec}")


def _spec_from_key(rop: ReplayOp, fn: Any) -> dict[str, Any]:
    """Argument specs from the op key's shapes and the op's schema (recordings without specs):
    tensor arguments take the key's shapes in order; other arguments need a schema default."""
    _, shapes, dtype = parse_key(rop.name)
    args: list[dict[str, Any]] = []
    it = iter(shapes)
    for a in fn._schema.arguments:
        if a.kwarg_only:
            break
        tname = str(a.type)
        if tname.startswith("Tensor") and "[]" not in tname:
            s = next(it, None)
            if s is None:
                if a.has_default_value():
                    break
                raise ReplayError(f"{rop.op}: the key has fewer tensors than the schema")
            args.append({"T": dtype if dtype != "-" else "float32", "shape": list(s),
                         "stride": None})
        elif tname.startswith("Tensor") or tname.startswith("List[Tensor"):
            s = next(it, None)
            if not isinstance(s, list):
                raise ReplayError(f"{rop.op}: tensor-list argument not in the key")
            args.append({"L": [{"T": dtype, "shape": list(x), "stride": None} for x in s]})
        elif a.has_default_value():
            break
        else:
            raise ReplayError(f"{rop.op}: argument {a.name!r} ({tname}) was not recorded; "
                              "record the op stream again with this joulebound")
    return {"args": args, "kwargs": {}}


def build_call(rop: ReplayOp, device: Any = "cpu", seed: int = 0) -> Callable[[], Any]:
    """A zero-argument callable running ``rop`` once on fresh tensors on ``device``.

    The tensors are allocated once (in-place ops keep updating them); raises
    :class:`ReplayError` when the op cannot be rebuilt."""
    import torch

    fn = resolve_overload(rop.op)
    spec = rop.spec if rop.spec is not None else _spec_from_key(rop, fn)
    gen = torch.Generator().manual_seed(seed)
    try:
        args = [_value(s, device, gen) for s in spec.get("args", [])]
        kwargs = {k: _value(s, device, gen) for k, s in spec.get("kwargs", {}).items()}
    except ReplayError:
        raise
    except Exception as exc:
        raise ReplayError(f"{rop.name}: cannot allocate its inputs ({exc})") from exc

    def call() -> Any:
        return fn(*args, **kwargs)

    return call


def check_call(rop: ReplayOp, device: Any = "cpu", seed: int = 0) -> Callable[[], Any]:
    """:func:`build_call`, run once (under ``torch.no_grad``-free autograd-off replay); raises
    :class:`ReplayError` with the op's error when it fails."""
    import torch

    call = build_call(rop, device, seed)
    try:
        with torch.no_grad():
            call()
    except Exception as exc:
        raise ReplayError(f"{rop.name}: fails when replayed ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200]})") from exc
    return call
