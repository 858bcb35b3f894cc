"""Hooks that show the controller every op a PyTorch program runs.

* :class:`OpStream` — a ``TorchDispatchMode`` that sees every ATen op as it is dispatched (forward,
  backward — the autograd engine carries the mode into its threads — and optimizer ``_foreach``
  ops), turns it into a key (op name, input shapes, dtype; :func:`op_key`), interns the key and calls
  a callback *before* the op runs. Used for eager-mode training.
* :class:`PeriodicSchedule` — for CUDA-graph replays or ``torch.compile``'d steps, where individual
  ops are not dispatched from Python: the plan's switches become time offsets from the start of
  the step (from the characterized kernel times, moved earlier by the switch latency), fired by a
  timer thread after each :meth:`PeriodicSchedule.step_begin`.
* :class:`EventAligner` — on a GPU the CPU runs ahead of the device, so a switch decided when an op
  is *dispatched* must happen when the device *reaches* that op. The aligner records a CUDA event
  at the dispatch point and an actuator thread waits on it before switching. On CPU ops run
  synchronously and the controller switches directly.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from joulebound.core.clocks import ClockConfig
from joulebound.runtime.lookahead import lookahead_commands
from joulebound.runtime.nextop import KeyInterner
from joulebound.runtime.opkeys import OpKey, dtype_name, key_str

__all__ = ["EventAligner", "OpKey", "OpStream", "PeriodicSchedule", "key_str",
           "launches_no_kernel", "op_key"]


def _shapes_dtype(args: Sequence[Any], tensor_type: type) -> tuple[tuple, Any]:
    """One pass over an op's arguments: the tensor arguments' shapes (a list of tensors gives a
    tuple of shapes) and the first tensor's ``torch.dtype`` (``None`` without tensors)."""
    out = []
    dtype = None
    for a in args:
        if isinstance(a, tensor_type):
            out.append(tuple(a.shape))
            if dtype is None:
                dtype = a.dtype
        elif isinstance(a, list | tuple) and a and isinstance(a[0], tensor_type):
            out.append(tuple(tuple(t.shape) for t in a if isinstance(t, tensor_type)))
            if dtype is None:
                dtype = a[0].dtype
    return tuple(out), dtype


def op_key(func: Any, args: Sequence[Any]) -> OpKey:
    """Key of one dispatched op: ``(name, input shapes, dtype)``.

    ``name`` is the ATen overload (``"aten.mm.default"``); shapes are those of the tensor
    arguments (lists of tensors, as in ``aten.cat`` or ``_foreach_*``, give a tuple of shapes);
    dtype is the first tensor argument's. Scalars are left out: they rarely change the kernel.
    """
    import torch

    shapes, dtype = _shapes_dtype(args, torch.Tensor)
    return (str(func), shapes, dtype_name(dtype))


_NO_KERNEL = frozenset({"aten._unsafe_view", "aten.empty", "aten.empty_like",
                        "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
                        "aten.lift_fresh", "aten.detach", "aten.alias"})


def launches_no_kernel(func: Any) -> bool:
    """True for ops that launch no device kernel: views/aliases (``view``, ``t``, ``expand``,
    ``detach``, ``slice``...), allocation-only ops (``empty*``) and non-ATen markers
    (``profiler._record_function_*``). They are metadata work, not GPU time or energy."""
    name = str(func).rsplit(".", 1)[0]         # "aten.view.default" -> "aten.view"
    return (bool(getattr(func, "is_view", False)) or name in _NO_KERNEL
            or not name.startswith("aten."))


# The current process id, refreshed in forked children. A forked child (e.g. a DataLoader worker)
# inherits the dispatch mode of the thread that forked; its ops must not drive the parent's
# controller or actuator, so OpStream compares its creator's pid with this one. The fork hook is
# registered when the first OpStream starts, not at import.
_PID = [os.getpid()]
_FORK_HOOK = [False]


def _after_fork_in_child() -> None:
    _PID[0] = os.getpid()


def _watch_forks() -> None:
    if not _FORK_HOOK[0]:
        _FORK_HOOK[0] = True
        _PID[0] = os.getpid()
        os.register_at_fork(after_in_child=_after_fork_in_child)


def _dispatch_mode_base() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


class OpStream:
    """Context manager: observe every ATen op dispatched in the ``with`` block.

    Args:
        on_op: called with the interned key id of each op *before* it runs (``None``: only
            record).
        interner: key interner (shared with the controller); keys are interned by their text
            form (:func:`key_str`), so ids match a plan's ``kernel_names``.
        record: keep the key ids in :attr:`keys` (to build a trace/plan from a recorded loop).
        kernels_only: ignore ops that launch no kernel (:func:`launches_no_kernel`: views,
            aliases, allocation-only ops, profiler markers); they carry no GPU time or energy.
        capture_args: keep, for each distinct key, the argument specs of its first call
            (:func:`joulebound.workload.opspec.call_spec`: shapes, strides, dtypes, scalar
            arguments) in :attr:`arg_specs` (key id -> spec), so the op can be replayed.

    Usage::

        with OpStream(record=True) as ops:
            train_step()
        names = [ops.name(k) for k in ops.keys]
    """

    def __init__(self, on_op: Callable[[int], None] | None = None,
                 interner: KeyInterner | None = None, record: bool = False,
                 kernels_only: bool = True, capture_args: bool = False) -> None:
        self.on_op = on_op
        self.capture_args = capture_args
        self.arg_specs: dict[int, dict[str, Any]] = {}
        self.interner = interner if interner is not None else KeyInterner()
        self.record = record
        self.kernels_only = kernels_only
        self.keys: list[int] = []
        self.n_ops = 0
        self.n_skipped = 0
        self._cache: dict[OpKey, int] = {}
        self._skip: dict[Any, bool] = {}
        self._mode: Any = None
        self._pid = _PID[0]
        self._tensor: type | None = None     # torch.Tensor, set on entering the mode

    def name(self, key_id: int) -> str:
        return str(self.interner.key(key_id))

    def _on_dispatch(self, func: Any, args: Sequence[Any], kwargs: Any = None) -> None:
        if self.kernels_only:
            skip = self._skip.get(func)
            if skip is None:
                skip = self._skip[func] = launches_no_kernel(func)
            if skip:
                self.n_skipped += 1
                return
        shapes, dtype = _shapes_dtype(args, self._tensor)  # type: ignore[arg-type]
        key = (func, shapes, dtype)
        kid = self._cache.get(key)
        if kid is None:
            kid = self.interner.intern(key_str((str(func), shapes, dtype_name(dtype))))
            self._cache[key] = kid
            if self.capture_args and kid not in self.arg_specs:
                from joulebound.workload.opspec import call_spec

                self.arg_specs[kid] = call_spec(args, kwargs)
        self.n_ops += 1
        if self.record:
            self.keys.append(kid)
        if self.on_op is not None:
            self.on_op(kid)

    def __enter__(self) -> OpStream:
        import torch

        base = _dispatch_mode_base()
        stream = self
        self._tensor = torch.Tensor

        class _Mode(base):  # type: ignore[misc, valid-type]
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if stream._pid == _PID[0]:
                    stream._on_dispatch(func, args, kwargs)
                return func(*args, **(kwargs or {}))

        _watch_forks()
        self._pid = _PID[0]
        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None


class PeriodicSchedule:
    """Fire a plan's clock switches at fixed time offsets within each step.

    For steps that run as one CUDA-graph replay or compiled region. The offsets come from the
    characterized kernel times under the plan (:meth:`from_plan`); the step is assumed to start
    on the device when :meth:`step_begin` is called (launch the replay right after it).

    Args:
        switches: ``[(offset_s, config), ...]`` from the start of the step, or use
            :meth:`from_plan`.
        apply: callable that applies a config (e.g. ``controller.command`` or an actuator's
            ``set_clocks``).
    """

    def __init__(self, switches: Sequence[tuple[float, ClockConfig]],
                 apply: Callable[[ClockConfig], None]) -> None:
        self.switches = sorted(((max(0.0, float(t)), c) for t, c in switches), key=lambda x: x[0])
        self.apply = apply
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self.fired: list[tuple[float, ClockConfig]] = []

    @classmethod
    def from_plan(cls, plan: Any, kernel_time_s: Sequence[float], switch_latency_s: float,
                  apply: Callable[[ClockConfig], None]) -> PeriodicSchedule:
        """Offsets (s from step start) where the eager controller's lookahead commands change.

        Same rule as :func:`~joulebound.runtime.controller.lookahead_commands`: each switch
        is issued ``switch_latency_s`` before its phase (the first phase's switch near the end of
        the previous step), and phases shorter than the latency are skipped.
        ``kernel_time_s[k]``: modeled time of kernel ``k`` at its planned config (s)."""
        import numpy as np

        t = np.asarray(kernel_time_s, float)
        starts = np.concatenate([[0.0], np.cumsum(t)])[:-1]
        cmd = lookahead_commands(plan.choice, t, switch_latency_s)
        changes = np.flatnonzero(cmd != np.roll(cmd, 1))
        return cls([(float(starts[j]), plan.configs[int(cmd[j])]) for j in changes], apply)

    def step_begin(self) -> None:
        """Call when a step (graph replay) is launched; fires this step's switches on time."""
        self.wait()
        self._cancel.clear()
        t0 = time.monotonic()

        def run() -> None:
            for off, cfg in self.switches:
                delay = t0 + off - time.monotonic()
                if delay > 0 and self._cancel.wait(delay):
                    return
                self.apply(cfg)
                self.fired.append((time.monotonic() - t0, cfg))

        self._thread = threading.Thread(target=run, name="joulebound-schedule", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Wait for the current step's switches to have fired."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def cancel(self) -> None:
        self._cancel.set()
        self.wait()


class EventAligner:
    """Apply switches when the GPU reaches the op they were decided at.

    ``submit(config)`` records an event on the current stream (``event_factory()``, by default
    ``torch.cuda.Event``) and queues it; an actuator thread waits for the event (device progress)
    and then calls ``apply(config)``. Switches stay in order. ``event_factory`` can be replaced
    by any object with ``record()`` and ``synchronize()`` (tests use a fake).
    """

    def __init__(self, apply: Callable[[ClockConfig], None],
                 event_factory: Callable[[], Any] | None = None) -> None:
        if event_factory is None:
            import torch

            def event_factory() -> Any:
                return torch.cuda.Event()
        self.apply = apply
        self.event_factory = event_factory
        self._q: queue.Queue[tuple[Any, ClockConfig] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="joulebound-actuator",
                                        daemon=True)
        self.errors: list[BaseException] = []
        self._thread.start()

    def submit(self, config: ClockConfig) -> None:
        ev = self.event_factory()
        ev.record()
        self._q.put((ev, config))

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            ev, cfg = item
            try:
                ev.synchronize()
                self.apply(cfg)
            except BaseException as exc:
                self.errors.append(exc)

    def close(self) -> None:
        """Drain the queue (waits for the device to reach the last switch) and stop the thread."""
        self._q.put(None)
        self._thread.join()
        if self.errors:
            raise self.errors[0]
