"""Import torch.profiler / Kineto Chrome traces (``prof.export_chrome_trace(path)``) as a Trace.

What is read
------------
* **GPU traces** (``ProfilerActivity.CUDA``): every event with ``cat`` ``kernel``,
  ``gpu_memcpy`` or ``gpu_memset`` (older Kineto: ``Kernel``, ``Memcpy``, ``Memset``) becomes one
  :class:`~joulebound.workload.trace.Kernel` in GPU start-time order: name, measured ``dur``
  (µs -> ``duration_s``), stream and device in ``meta``. The launching CPU op is found by
  (1) the kernel's ``External id`` = the op's ``External id``; else (2) its ``correlation`` = the
  ``correlation`` of a ``cuda_runtime`` / ``cuda_driver`` launch event (or of an ``ac2g`` flow
  start), whose innermost enclosing ``cpu_op`` on the same thread is the launcher. The op's name
  and, with ``record_shapes=True``, its ``Input Dims`` / ``Input type`` go to ``meta``.
* **CPU-only traces** (no GPU events): one kernel per *leaf compute op*: a ``cpu_op`` event with
  no nested compute ``cpu_op``. View / metadata / allocation ops (:data:`NON_COMPUTE_OPS`) and
  the autograd bookkeeping nodes (``autograd::engine::evaluate_function: …``, ``…Backward0``,
  ``AccumulateGrad``) never count as compute; the GEMM / attention ops and the ops whose only
  compute children are copies or fills (``copy_``, ``fill_``, ``zero_``) are kept whole, their
  children folded in. So ``aten::linear`` gives its ``aten::addmm``, ``aten::layer_norm`` gives
  ``aten::native_layer_norm``, ``AddmmBackward0`` gives its ``aten::mm`` calls.

Phases
------
An op under ``autograd::engine::evaluate_function: …`` (on any thread) is ``backward``; under an
``Optimizer.step#…`` or ``Optimizer.zero_grad#…`` annotation ``optimizer``. Inside a
``ProfilerStep#N`` ops that start before the step's first backward op are ``forward`` (model and
loss). Without ``ProfilerStep`` markers (a plain ``with profile():`` around several iterations)
the optimizer ops delimit iterations: ops after an optimizer op (or the trace start) whose next
marked op is a backward op are ``forward``. The rest, and everything in a trace without backward markers,
is ``other``. GPU kernels take the phase of their launching op.

Categories
----------
Kernel (GPU) or op (CPU) names are matched against :data:`CATEGORY_RULES`, first match wins,
case-insensitive; the fallback is ``elementwise``. Kernels in the optimizer phase that would be
``elementwise``, ``reduction`` or ``memcpy`` are counted as ``optimizer`` (the for-each /
per-parameter update ops). ``gpu_memcpy`` / ``gpu_memset`` events are always ``memcpy``.

FLOPs and bytes
---------------
From the launching op and its recorded shapes (:func:`op_cost`, the aten cost model of
:mod:`joulebound.workload.opcost`: GEMMs ``2·M·N·K`` FLOP and ``(MK + KN + MN)·size`` bytes,
scaled-dot-product attention as FlopCounterMode counts it, softmax / layer-norm / elementwise /
reductions by element count). When one op launches several kernels, the op's cost goes to
its longest kernel and the others get 0 (``meta["cost"] = "shared"``). Memcpy / memset events
carry their ``bytes``. Without shapes, or for ops not modeled, FLOPs and bytes are 0 and
``meta["cost"] = "unknown"`` — the roofline summary then reports the category as ``unknown``.
"""

from __future__ import annotations

import functools
import json
import math
import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from pathlib import Path
from typing import Any

from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.workload.opcost import ELEMENT_TYPES, Arg, OpCost, aten_cost, element_type
from joulebound.workload.trace import Kernel, Trace

#: (category, regex) in match order; case-insensitive search on the kernel or op name.
CATEGORY_RULES: tuple[tuple[str, str], ...] = (
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|"
                      r"gloo|c10d|record_param_comms"),
    ("memcpy", r"memcpy|memset|aten::(copy_|zero_|fill_|_to_copy|clone|contiguous)$|"
               r"direct_copy_kernel|fillfunctor"),
    ("optimizer", r"adam|multi_tensor_apply|foreach|\bsgd|\blamb\b|\blion\b|optimizer"),
    ("attention", r"flash|fmha|attention|sdpa|_efficient_attention|xformers|\bmha\b"),
    ("gemm", r"gemm|sm\d+_xmma|cutlass|cublas|matmul|(?<![a-z])mm(?![a-z])|addmm|bmm|linear|"
             r"gemv|wgmma|nvjet|triton_tem_"),
    ("softmax", r"softmax|cross_entropy|nll_loss|classnllcriterion"),
    ("norm", r"layer_?norm|rms_?norm|batch_?norm|group_?norm|gammabeta|cucomputegradgammabeta|"
             r"cuapplylayernorm"),
    ("embedding", r"embedding|index_select|indexselect|gather|scatter_add"),
    ("reduction", r"reduce|aten::(sum|mean|norm|amax|amin|max|min|var|std|argmax|argmin|"
                  r"linalg_vector_norm|_foreach_norm)$|cub::|^triton_(red|per)_"),
)
_RULES = tuple((cat, re.compile(rx, re.IGNORECASE)) for cat, rx in CATEGORY_RULES)

#: ops that only change metadata, allocate or synchronise: never counted as compute kernels.
NON_COMPUTE_OPS = frozenset("""
aten::view aten::_unsafe_view aten::reshape aten::_reshape_alias aten::t aten::transpose
aten::permute aten::expand aten::expand_as aten::as_strided aten::empty aten::empty_like
aten::empty_strided aten::resize_ aten::detach aten::detach_ detach aten::alias aten::slice
aten::select aten::unsqueeze aten::squeeze aten::unsqueeze_ aten::squeeze_ aten::resolve_conj
aten::resolve_neg aten::to aten::item aten::_local_scalar_dense aten::lift_fresh aten::numpy_T
aten::split aten::split_with_sizes aten::chunk aten::unbind aten::narrow aten::view_as
aten::flatten aten::unflatten aten::set_ aten::is_nonzero aten::result_type aten::contiguous
aten::_has_compatible_shallow_copy_type aten::record_stream aten::lift aten::size aten::stride
aten::unfold aten::diagonal aten::expand_copy aten::_nested_tensor_from_mask aten::is_same_size
aten::requires_grad_ aten::zeros_like aten::ones_like aten::full_like aten::zeros aten::ones
aten::full aten::scalar_tensor aten::to_dense aten::_unique2 aten::cudnn_is_acceptable
""".split())
_FOLDABLE = frozenset({"aten::copy_", "aten::fill_", "aten::zero_", "aten::_to_copy"})
_WHOLE_OPS = re.compile(r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_dot_product|"
                        r"scaled_dot_product|convolution|_convolution|cudnn_convolution)",
                        re.IGNORECASE)

_COMM_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "In split size",
              "Out split size", "Group size", "dtype", "Process Group Name")
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
_STACK_CATS = {"cpu_op", "user_annotation", "python_function", "operator"}


@functools.lru_cache(maxsize=4096)
def _name_category(name: str) -> str:
    """The first :data:`CATEGORY_RULES` category whose regex matches ``name`` (else
    ``elementwise``); cached per name: a trace repeats a few dozen kernel names thousands of
    times."""
    for c, rx in _RULES:
        if rx.search(name):
            return c
    return "elementwise"


def categorize(name: str, phase: str | None = None) -> str:
    """Category of a kernel or op ``name`` by :data:`CATEGORY_RULES` (see the module docs)."""
    cat = _name_category(name)
    if phase == "optimizer" and cat in ("elementwise", "reduction", "memcpy"):
        return "optimizer"
    return cat


def is_chrome_trace(doc: Any) -> bool:
    """True for a Chrome trace object (``{"traceEvents": [...]}``) or a bare event list."""
    if isinstance(doc, dict):
        return isinstance(doc.get("traceEvents"), list)
    return isinstance(doc, list) and all(isinstance(e, dict) for e in doc[:10])


def load_chrome_trace(path: str | Path, *, doc: Any = None, name: str | None = None) -> Trace:
    """Read a torch.profiler ``export_chrome_trace`` JSON file (``.json`` or ``.json.gz``)."""
    from joulebound.core.jsonio import read_json

    if doc is None:
        doc = read_json(path)
    if not is_chrome_trace(doc):
        raise SchemaError(path, "traceEvents",
                          "missing: not a Chrome/Kineto trace (export it with "
                          "torch.profiler's prof.export_chrome_trace(path))")
    return from_chrome_trace(doc, name=name or Path(path).name.removesuffix(".gz")
                             .removesuffix(".json"), path=path)


# -- shapes -> cost ------------------------------------------------------------------------------
def op_inputs(dims: Any, types: Any = None) -> list[Arg]:
    """The tensor inputs of one profiled op for :func:`~joulebound.workload.opcost.aten_cost`.

    ``dims`` is the profiler's ``Input Dims`` (one entry per argument: a shape, a list of shapes
    for a tensor list, ``[]`` for a scalar / ``None`` / 0-d tensor), ``types`` its ``Input type``.
    A ``[]`` whose type is an element type is a 0-d tensor (shape ``()``); other ``[]`` entries
    are not tensors and are left out."""
    if not isinstance(dims, list):
        return []
    types = types if isinstance(types, list) else []
    out: list[Arg] = []
    for i, d in enumerate(dims):
        if not isinstance(d, list):
            continue
        if d and all(isinstance(x, int) and not isinstance(x, bool) for x in d):
            out.append(tuple(d))
        elif not d:
            t = types[i] if i < len(types) else None
            if isinstance(t, str) and t.lower() in ELEMENT_TYPES:
                out.append(())
        elif all(isinstance(x, list) for x in d):
            out.append([tuple(x) for x in d
                        if all(isinstance(y, int) and not isinstance(y, bool) for y in x)])
    return out


def op_cost(op: str, dims: Any, types: Any = None) -> OpCost | None:
    """FLOPs, DRAM bytes and math dtype of one aten op from its recorded input shapes.

    Args:
        op: op name, e.g. ``"aten::addmm"``.
        dims: the profiler's ``Input Dims`` (list of shapes; ``[]`` for scalars / None).
        types: the profiler's ``Input type`` (``"float"``, ``"c10::BFloat16"``, ...).

    Returns:
        ``(flops, bytes, dtype)`` (an :class:`~joulebound.workload.opcost.OpCost`) or ``None``
        when the op is not modeled or shapes are missing (:func:`~joulebound.workload.opcost.
        aten_cost` has the rules).
    """
    dtype, size = element_type(types if isinstance(types, list) else None)
    return aten_cost(op, op_inputs(dims, types), dtype, size)


# -- event tree ----------------------------------------------------------------------------------
def _key(v: Any) -> Any:
    """A dict key for an id field of any JSON type (lists and objects are not hashable)."""
    if isinstance(v, list | dict):
        return json.dumps(v, sort_keys=True, default=str)
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    return v


_FIX = ("; the file is damaged or was not written by torch.profiler: re-export it with "
        "prof.export_chrome_trace(path)")


def _time_us(e: dict[str, Any], key: str, i: int, path: str | Path, default: float | None) -> float:
    """A finite, non-negative-for-``dur`` time field (µs) of event ``i``; errors name the field."""
    v = e.get(key)
    if v is None:
        if default is None:
            raise SchemaError(path, f"traceEvents[{i}].{key}", "missing on a complete ('X') event"
                              + _FIX)
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise SchemaError(path, f"traceEvents[{i}].{key}",
                          f"expected a finite number of microseconds, got {v!r:.40}" + _FIX)
    if key == "dur" and v < 0:
        raise SchemaError(path, f"traceEvents[{i}].dur", f"negative duration {v!r}" + _FIX)
    return float(v)


class _Ev:
    __slots__ = ("e", "name", "cat", "ts", "end", "parent", "phase_marker", "idx", "children",
                 "key", "args")

    def __init__(self, e: dict[str, Any], idx: int, ts: float = 0.0, dur: float = 0.0) -> None:
        self.e = e
        self.name = str(e.get("name", ""))
        self.cat = str(e.get("cat", "")).lower()
        self.ts = ts
        self.end = ts + dur
        self.parent: _Ev | None = None
        self.phase_marker: str | None = None
        self.idx = idx
        self.children: list[_Ev] = []
        self.key = (_key(e.get("pid")), _key(e.get("tid")))
        a = e.get("args")
        self.args: dict[str, Any] = a if isinstance(a, dict) else {}


def _marker(name: str) -> str | None:
    if name.startswith("autograd::engine::evaluate_function"):
        return "backward"
    if name.startswith("Optimizer.step") or name.startswith("Optimizer.zero_grad"):
        return "optimizer"
    if name.startswith("ProfilerStep#"):
        return "step"
    return None


def _build_tree(events: list[_Ev]) -> None:
    """Set ``parent`` / ``children`` by time containment per (pid, tid); propagate markers.

    Sorts ``events`` in place by (start, longest first), so parents precede their children.
    """
    events.sort(key=lambda v: (v.ts, -(v.end - v.ts), v.idx))
    stacks: dict[Any, list[_Ev]] = defaultdict(list)
    for ev in events:
        stack = stacks[ev.key]
        while stack and ev.end > stack[-1].end + 1e-3:  # not inside the top: pop (µs, rounding)
            stack.pop()
        ev.parent = stack[-1] if stack else None
        if ev.parent is not None:
            ev.parent.children.append(ev)
        own = _marker(ev.name)
        inherited = ev.parent.phase_marker if ev.parent else None
        ev.phase_marker = inherited if inherited in ("backward", "optimizer") else (own or inherited)
        if ev.cat in _STACK_CATS:
            stack.append(ev)


def _step_of(ev: _Ev) -> _Ev | None:
    p: _Ev | None = ev
    while p is not None:
        if p.name.startswith("ProfilerStep#"):
            return p
        p = p.parent
    return None


def _phase_fn(ops: list[_Ev], steps: list[_Ev]) -> Any:
    """Phase of an op event: backward / optimizer markers, else forward before the first
    backward op of its step, else other."""
    first_bwd: dict[int, float] = {}
    steps_sorted = sorted(steps, key=lambda s: s.ts)
    starts = [s.ts for s in steps_sorted]

    def step_index(ts: float) -> int:
        i = bisect_right(starts, ts) - 1
        if i >= 0 and steps_sorted[i].ts <= ts <= steps_sorted[i].end:
            return i
        return -1

    for ev in ops:
        if ev.phase_marker == "backward":
            i = step_index(ev.ts)
            first_bwd[i] = min(first_bwd.get(i, math.inf), ev.ts)

    # without ProfilerStep markers (a plain ``with profile():`` around several iterations) the
    # optimizer ops delimit the iterations: an op after an optimizer op (or the trace start) whose
    # next marked op is a backward op is forward, as within a step
    marks = sorted((ev.ts, ev.phase_marker) for ev in ops
                   if ev.phase_marker in ("backward", "optimizer"))
    mark_ts = [m[0] for m in marks]

    def forward_between_markers(ts: float) -> bool:
        i = bisect_left(mark_ts, ts)  # marks[i]: the next marked op, marks[i - 1]: the previous
        return (i < len(marks) and marks[i][1] == "backward"
                and (i == 0 or marks[i - 1][1] == "optimizer"))

    def phase(ev: _Ev | None) -> str:
        if ev is None:
            return "other"
        if ev.phase_marker in ("backward", "optimizer"):
            return str(ev.phase_marker)
        if not steps_sorted:
            return "forward" if forward_between_markers(ev.ts) else "other"
        i = step_index(ev.ts)
        if i in first_bwd and ev.ts < first_bwd[i]:
            return "forward"
        return "other"

    return phase


_AUTOGRAD_NODE = re.compile(r"^autograd::|Backward\d*$|AccumulateGrad")
_COMM = _RULES[0][1]


def _is_compute(ev: _Ev) -> bool:
    """A cpu_op that does work: not a view/alloc op, not an autograd node, an ``ns::op`` name
    (or a collective such as ``gloo:all_reduce``)."""
    n = ev.name
    return (ev.cat == "cpu_op" and n not in NON_COMPUTE_OPS and not _AUTOGRAD_NODE.search(n)
            and ("::" in n or bool(_COMM.search(n))))


def _leaf_compute_ops(events: list[_Ev]) -> list[_Ev]:
    """Leaf compute ops (module docs). ``events`` sorted parents-first (see ``_build_tree``)."""
    below: dict[int, bool] = {}  # id -> a non-foldable compute op is nested below
    for ev in reversed(events):
        flag = False
        for c in ev.children:
            if (_is_compute(c) and c.name not in _FOLDABLE) or below.get(id(c), False):
                flag = True
                break
        below[id(ev)] = flag
    kept: dict[int, bool] = {}
    swallowed: dict[int, bool] = {}
    out: list[_Ev] = []
    for ev in events:
        p = ev.parent
        sw = p is not None and (swallowed.get(id(p), False) or kept.get(id(p), False))
        swallowed[id(ev)] = sw
        keep = (not sw and _is_compute(ev)
                and (bool(_WHOLE_OPS.match(ev.name)) or not below[id(ev)]))
        kept[id(ev)] = keep
        if keep:
            out.append(ev)
    return out


# -- main entry ----------------------------------------------------------------------------------
def from_chrome_trace(doc: Any, name: str = "trace", path: str | Path = "<trace>") -> Trace:
    """Convert a parsed Chrome trace (see the module docs for the rules)."""
    raw = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(raw, list):
        raise SchemaError(path, "traceEvents", "missing or not a list: not a Chrome/Kineto trace "
                          "(export it with torch.profiler's prof.export_chrome_trace(path))")
    cpu: list[_Ev] = []
    gpu: list[_Ev] = []
    launches: dict[Any, _Ev] = {}
    flows: dict[Any, _Ev] = {}
    for i, e in enumerate(raw):
        if not isinstance(e, dict):
            raise SchemaError(path, f"traceEvents[{i}]", "expected an event object" + _FIX)
        ph = e.get("ph")
        cat = str(e.get("cat", "")).lower()
        if ph == "X" and (cat in _GPU_CATS or cat in _STACK_CATS or cat in _LAUNCH_CATS):
            if e.get("args") is not None and not isinstance(e.get("args"), dict):
                raise SchemaError(path, f"traceEvents[{i}].args",
                                  f"expected an object, got {e['args']!r:.40}" + _FIX)
            ev = _Ev(e, i, _time_us(e, "ts", i, path, None), _time_us(e, "dur", i, path, 0.0))
            if cat in _GPU_CATS:
                gpu.append(ev)
            else:
                cpu.append(ev)
                if cat in _LAUNCH_CATS:
                    corr = ev.args.get("correlation")
                    if corr is not None:
                        launches[_key(corr)] = ev
        elif ph == "s" and cat == "ac2g":
            flows[_key(e.get("id"))] = _Ev({**e, "cat": "flow"}, i,
                                           _time_us(e, "ts", i, path, None))
    _build_tree(cpu)
    ops = [ev for ev in cpu if ev.cat == "cpu_op"]
    by_ext: dict[Any, _Ev] = {}
    for ev in ops:
        ext = _key(ev.args.get("External id"))
        if ext is not None and ext not in by_ext:
            by_ext[ext] = ev
    steps = [ev for ev in cpu if ev.name.startswith("ProfilerStep#")]
    phase_of = _phase_fn(ops, steps)
    meta: dict[str, Any] = {"source": "kineto", "file": str(path), "steps": len(steps),
                            "record_shapes": bool(doc.get("record_shapes"))
                            if isinstance(doc, dict) else None}
    if isinstance(doc, dict) and isinstance(doc.get("deviceProperties"), list):
        meta["devices"] = [str(d.get("name")) for d in doc["deviceProperties"]
                           if isinstance(d, dict)]

    if gpu:
        kernels = _gpu_kernels(gpu, launches, flows, by_ext, cpu, phase_of)
        meta["kind"] = "gpu"
    else:
        kernels = _cpu_kernels(_leaf_compute_ops(cpu), phase_of)
        meta["kind"] = "cpu"
    if not kernels:
        raise JouleboundError(f"{path}: the trace holds no GPU kernels and no CPU ops; record it "
                              "with torch.profiler.profile(activities=[CPU, CUDA]) around a "
                              "training step")
    meta["phases_found"] = sorted({k.phase for k in kernels})
    return Trace(kernels=kernels, name=name, meta=meta)


def _innermost_op(ev: _Ev | None) -> _Ev | None:
    while ev is not None and ev.cat != "cpu_op":
        ev = ev.parent
    return ev


def _enclosing_op_at(by_key: dict[Any, tuple[list[float], list[_Ev]]], key: Any,
                     ts: float) -> _Ev | None:
    """Innermost cpu_op on thread ``key`` that contains time ``ts`` (µs)."""
    if key not in by_key:
        return None
    starts, evs = by_key[key]
    i = bisect_right(starts, ts) - 1
    ev: _Ev | None = evs[i] if i >= 0 else None
    while ev is not None and not (ev.ts <= ts <= ev.end + 1e-3 and ev.cat == "cpu_op"):
        ev = ev.parent
    return ev


def _cost_op(op: _Ev | None) -> tuple[_Ev, tuple[float, float, str]] | None:
    """The first op from ``op`` upwards whose shapes give a cost."""
    p = op
    while p is not None:
        if p.cat == "cpu_op":
            cost = _safe_cost(p.name, p.args)
            if cost is not None:
                return p, cost
        p = p.parent
    return None


def _safe_cost(name: str, args: dict[str, Any]) -> tuple[float, float, str] | None:
    """:func:`op_cost` from an event's args; ``None`` (cost unknown) for shapes that make no
    sense (negative, huge, not integers) instead of an error or a non-finite figure."""
    try:
        cost = op_cost(name, args.get("Input Dims"), args.get("Input type"))
    except (OverflowError, ValueError, TypeError, IndexError):
        return None
    if cost is None or not all(math.isfinite(x) and x >= 0 for x in cost[:2]):
        return None
    return cost


def _launchers(gpu: list[_Ev], launches: dict[Any, _Ev], flows: dict[Any, _Ev],
               by_ext: dict[Any, _Ev], cpu: list[_Ev]) -> list[_Ev | None]:
    """The op that launched each device event: through the runtime launch with the same
    correlation id, else the flow arrow's start, else the external id; ``None`` when unknown."""
    launcher: list[_Ev | None] = []
    by_key: dict[Any, tuple[list[float], list[_Ev]]] | None = None
    for ev in gpu:
        args = ev.args
        op = None
        corr = _key(args.get("correlation"))
        if corr in launches:
            op = _innermost_op(launches[corr].parent)
        if op is None and corr in flows:
            if by_key is None:  # built on first need: per thread, op starts and ops
                by_key = {}
                for c in cpu:  # parents-first order: starts are sorted per thread
                    if c.cat == "cpu_op":
                        lst = by_key.setdefault(c.key, ([], []))
                        lst[0].append(c.ts)
                        lst[1].append(c)
            fl = flows[corr]
            op = _enclosing_op_at(by_key, fl.key, fl.ts)
        ext = _key(args.get("External id", args.get("external id")))
        if op is None and ext in by_ext:
            op = by_ext[ext]
        launcher.append(op)
    return launcher


def _cost_owners(gpu: list[_Ev], launcher: list[_Ev | None]
                 ) -> tuple[dict[int, tuple[_Ev, tuple[float, float, str]]], set[int]]:
    """One op's cost goes to its longest kernel: ``{kernel index: (op, cost)}`` and the ids of
    the ops so costed."""
    cost_owner: dict[int, tuple[int, _Ev, tuple[float, float, str]]] = {}
    for i, (ev, op) in enumerate(zip(gpu, launcher, strict=True)):
        if ev.cat != "kernel":
            continue
        found = _cost_op(op)
        if found is None:
            continue
        cop, cost = found
        cur = cost_owner.get(id(cop))
        if cur is None or (ev.end - ev.ts) > (gpu[cur[0]].end - gpu[cur[0]].ts):
            cost_owner[id(cop)] = (i, cop, cost)
    owner_of = {i: (cop, cost) for i, cop, cost in cost_owner.values()}
    return owner_of, {id(cop) for _, cop, _ in cost_owner.values()}


def _kernel_meta(ev: _Ev, op: _Ev | None) -> dict[str, Any]:
    """A device event's metadata: stream, device, correlation, launch shape, launching op."""
    args = ev.args
    meta: dict[str, Any] = {"stream": args.get("stream", ev.e.get("tid")),
                            "device": args.get("device", ev.e.get("pid")),
                            "correlation": args.get("correlation")}
    for key in ("grid", "block"):
        if key in args:
            meta[key] = args[key]
    if op is not None:
        oargs = op.args
        meta["op"] = op.name
        comm = {k: oargs[k] for k in _COMM_ARGS if k in oargs}
        if comm:  # record_param_comms: collective, message sizes, group size
            meta["comm"] = comm
        if "Input Dims" in oargs:
            meta["input_dims"] = oargs["Input Dims"]
            meta["input_types"] = oargs.get("Input type")
    return meta


def _memcpy_bytes(args: dict[str, Any]) -> float:
    """Bytes of a copy/set event (0 when absent or not a plausible count)."""
    b = args.get("bytes")
    return float(b) if isinstance(b, int | float) and not isinstance(b, bool) and \
        math.isfinite(b) and 0 <= b < 1e18 else 0.0


def _gpu_kernels(gpu: list[_Ev], launches: dict[Any, _Ev], flows: dict[Any, _Ev],
                 by_ext: dict[Any, _Ev], cpu: list[_Ev], phase_of: Any) -> list[Kernel]:
    gpu.sort(key=lambda v: (v.ts, v.idx))
    launcher = _launchers(gpu, launches, flows, by_ext, cpu)
    owner_of, costed_ops = _cost_owners(gpu, launcher)
    kernels: list[Kernel] = []
    for i, (ev, op) in enumerate(zip(gpu, launcher, strict=True)):
        phase = phase_of(op)
        meta = _kernel_meta(ev, op)
        dtype = _name_dtype(ev.name) or element_type(op.args.get("Input type") if op else None)[0]
        flops = nbytes = 0.0
        if ev.cat in ("gpu_memcpy", "gpu_memset", "memcpy", "memset"):
            category = "memcpy"
            nbytes = _memcpy_bytes(ev.args)
            meta["cost"] = "bytes" if nbytes else "unknown"
        else:
            category = categorize(ev.name, phase)
            if i in owner_of:
                _, (flops, nbytes, cdtype) = owner_of[i]
                meta["cost"] = "shapes"
                dtype = _name_dtype(ev.name) or cdtype
            else:
                found = _cost_op(op)
                meta["cost"] = "shared" if found and id(found[0]) in costed_ops else "unknown"
        kernels.append(Kernel(ev.name, category, phase, None, flops, nbytes,
                              _math_dtype(category, dtype), max(ev.end - ev.ts, 0.0) * 1e-6,
                              _clean(meta)))
    _mark_idle_gaps(gpu, kernels)
    return kernels


def _mark_idle_gaps(gpu: list[_Ev], kernels: list[Kernel]) -> None:
    """``meta["gap_after_s"]`` (s) on each device event after which the GPU sat idle: the next
    event started that long after every earlier one had ended (events in start order; all
    streams of the trace together). The GPU was waiting for the host there (a launch, a copy
    from the host, a synchronization): the kernel model keeps that wait when clocks change."""
    end = -math.inf
    for i in range(len(gpu) - 1):
        end = max(end, gpu[i].end)
        gap = gpu[i + 1].ts - end
        if gap > 0:
            kernels[i].meta["gap_after_s"] = gap * 1e-6


def _clean(v: Any) -> Any:
    """``v`` with non-finite floats replaced by ``None``: trace files stay strict JSON."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    return v


def _math_dtype(category: str, dtype: str) -> str:
    """GEMMs and attention run at the data dtype (tensor cores); everything else computes in
    fp32 on CUDA cores, as in :mod:`joulebound.workload.analytic`."""
    return dtype if category in ("gemm", "attention") else "fp32"


def _name_dtype(name: str) -> str | None:
    n = name.lower()
    if "bf16" in n or "bfloat16" in n:
        return "bf16"
    if "tf32" in n:
        return "tf32"
    if re.search(r"f16|fp16|half|h884|h1688|h16816", n):
        return "fp16"
    if "e4m3" in n or "e5m2" in n or "fp8" in n:
        return "fp8"
    return None


def _cpu_kernels(leaves: list[_Ev], phase_of: Any) -> list[Kernel]:
    kernels = []
    for ev in sorted(leaves, key=lambda v: (v.ts, v.idx)):
        args = ev.args
        phase = phase_of(ev)
        cost = _safe_cost(ev.name, args)
        meta: dict[str, Any] = {"thread": ev.e.get("tid")}
        if "Input Dims" in args:
            meta["input_dims"] = args["Input Dims"]
            meta["input_types"] = args.get("Input type")
        if cost is None:
            flops, nbytes, dtype = 0.0, 0.0, element_type(args.get("Input type"))[0]
            meta["cost"] = "unknown"
        else:
            flops, nbytes, dtype = cost
            meta["cost"] = "shapes"
        category = categorize(ev.name, phase)
        kernels.append(Kernel(ev.name, category, phase, None, flops, nbytes,
                              _math_dtype(category, dtype), max(ev.end - ev.ts, 0.0) * 1e-6,
                              _clean(meta)))
    return kernels
