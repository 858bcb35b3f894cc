"""The runtime controller: apply a :class:`~joulebound.planning.plan.Plan` while a program runs.

For every dispatched op (from :class:`~joulebound.runtime.hooks.OpStream`) the controller

1. feeds the op's key to a :class:`~joulebound.runtime.nextop.NextKernelPredictor` primed with the
   plan's op sequence, which says where in the planned iteration the stream is (the op's plan
   position, its *label*) and how confident it is that the stream keeps following the plan;
2. looks up the config to *command* at that position. Commands are the plan shifted earlier by
   the switch latency (:func:`lookahead_commands`): the switch for a phase that starts at op
   ``s`` is issued at the last op ``j`` that starts at least ``switch_latency_s`` (modeled
   device time) before ``s``, so the phase starts at its clocks;
3. with an unknown op (label -1) or a confidence below ``min_confidence`` commands the *safe*
   pair instead (the GPU's default, ``auto``), and returns to the plan as soon as the predictor
   is confident again; before issuing a planned switch it also checks that the predicted next
   ``horizon`` ops are the planned ones;
4. issues the switch only when the commanded config changes, and logs it (JSON lines).

On a GPU, pass an :class:`~joulebound.runtime.hooks.EventAligner` so switches wait for the
device to reach the op they were decided at; on CPU ops are synchronous and switches are direct.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from joulebound.core.clocks import AUTO, ClockConfig
from joulebound.planning.plan import Plan
from joulebound.runtime.actuators import Actuator
from joulebound.runtime.hooks import OpStream
from joulebound.runtime.lookahead import lookahead_commands
from joulebound.runtime.nextop import UNKNOWN, KeyInterner, NextKernelPredictor
from joulebound.runtime.opkeys import parse_key
from joulebound.workload.dispatch import dispatch_cost
from joulebound.workload.kineto import categorize
from joulebound.workload.opcost import aten_cost, element_type
from joulebound.workload.trace import Kernel, Trace


@dataclass
class ControllerStats:
    """Counts since the controller started."""

    ops: int = 0
    planned_ops: int = 0       # ops for which the plan's command was followed
    safe_ops: int = 0          # ops run under the safe pair (unknown / low confidence)
    #: switches requested (one switch-log line each); the actuator's ``realized`` and
    #: ``skipped`` say how many were made (``joulebound run``'s ``switches_*`` keys)
    switches: int = 0
    held_ops: int = 0          # ops run at the safe pair while held (:meth:`Controller.hold`)


class Controller:
    """Apply ``plan`` through ``actuator`` as ops are dispatched.

    Args:
        plan: the plan; ``plan.kernel_names`` must be op keys as :class:`OpStream` writes them
            (a plan made over a recorded op stream, see :func:`trace_from_ops`).
        actuator: where switches go (dry-run, simulated, NVML, helper).
        kernel_time_s: modeled time of each plan kernel at its planned config (s); needed for a
            nonzero switch latency (typically ``char.time_s[k, col(plan.choice[k])]``).
        switch_latency_s: clock-switch latency (s); default ``plan.switch_latency_s``.
        safe: the pair used when the prediction fails (default: the GPU's default, ``auto``).
        min_confidence: predictor confidence needed to follow the plan (0..1).
        horizon: ops of lookahead verified before a planned switch (0 = off).
        interner: key interner shared with the hook (one is made if omitted).
        aligner: optional :class:`EventAligner` (GPU); switches then wait for device progress.
        log: path or open text file for the JSON-lines switch log.
        log_capacity: switches kept in memory (:attr:`log`); the file keeps all.
    """

    def __init__(self, plan: Plan, actuator: Actuator, *,
                 kernel_time_s: Sequence[float] | None = None,
                 switch_latency_s: float | None = None, safe: ClockConfig = AUTO,
                 min_confidence: float = 0.75, horizon: int = 8,
                 interner: KeyInterner | None = None, aligner: Any = None,
                 log: str | Path | TextIO | None = None,
                 predictor: NextKernelPredictor | None = None,
                 log_capacity: int = 100_000) -> None:
        self.plan = plan
        self.actuator = actuator
        self.min_confidence = float(min_confidence)
        self.horizon = int(horizon)
        self.interner = interner if interner is not None else KeyInterner()
        self.aligner = aligner
        lat = plan.switch_latency_s if switch_latency_s is None else float(switch_latency_s)
        self.switch_latency_s = lat
        if lat > 0 and kernel_time_s is None:
            raise ValueError("Controller: a nonzero switch latency needs kernel_time_s "
                             "(modeled time per plan kernel) to place switches early enough")
        times = np.zeros(len(plan.choice)) if kernel_time_s is None else kernel_time_s
        self.commands = lookahead_commands(plan.choice, times, lat)
        canon: dict[ClockConfig, ClockConfig] = {}
        self.safe = canon.setdefault(safe, safe)
        cfgs = [canon.setdefault(c, c) for c in plan.configs]
        self._cmd_cfg = [cfgs[int(c)] for c in self.commands]
        self.keys = [self.interner.intern(n) for n in plan.kernel_names]
        self.predictor = predictor if predictor is not None else NextKernelPredictor()
        self.predictor.prime(self.keys)
        self._n_ops = self._n_planned = self._n_safe = self._n_switches = self._n_held = 0
        self._held = False
        self.commanded: ClockConfig = canon.get(actuator.current, actuator.current)
        # bounded in memory (long runs); the file log (``log=``) keeps everything
        self._log: deque[tuple[float, int, int, ClockConfig, str, int]] = deque(
            maxlen=log_capacity)
        self._own_fh = False
        self._fh: TextIO | None
        if log is None:
            self._fh = None
        elif isinstance(log, str | Path):
            Path(log).parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(log, "w", encoding="utf-8")
            self._own_fh = True
        else:
            self._fh = log
        self._t0 = time.monotonic()
        self.k = len(self.keys)
        self._last_label = UNKNOWN

    # -- per op -----------------------------------------------------------------------------
    def on_op(self, key: int) -> None:
        """Called by the hook before op ``key`` (interned id) runs."""
        pred = self.predictor
        pred.observe(key)
        label = pred._ll                    # pred.last_label, without the property call
        if label < 0 and self._last_label >= 0:
            # continuity with the plan: the op the plan has next after the previous one.
            # Written back into the history so later iterations that follow it keep the label.
            nxt = self._last_label + 1
            if nxt == self.k:
                nxt = 0
            if self.keys[nxt] == key:
                label = nxt
                pred.set_last_label(nxt)
        self._last_label = label
        self._n_ops += 1
        # configs are canonical objects, so identity is equality here
        if self._held:
            self._n_held += 1
            if self.safe is not self.commanded:
                self._switch(self.safe, "hold", label, key)
        elif label >= 0 and pred._nc >= self.min_confidence:
            target = self._cmd_cfg[label]
            if target is self.commanded:
                self._n_planned += 1
            elif self.horizon and not self._future_ok(label):
                self._n_safe += 1
                if self.safe is not self.commanded:
                    self._switch(self.safe, "unexpected-future", label, key)
            else:
                self._n_planned += 1
                self._switch(target, "plan", label, key)
        else:
            self._n_safe += 1
            if self.safe is not self.commanded:
                self._switch(self.safe, "unknown-op" if label < 0 else "low-confidence",
                             label, key)
        self.actuator.on_op(label)

    @property
    def stats(self) -> ControllerStats:
        """Counts since the controller started."""
        return ControllerStats(self._n_ops, self._n_planned, self._n_safe, self._n_switches,
                               self._n_held)

    def hold(self, on: bool = True) -> None:
        """Hold the safe pair (``on``) or follow the plan again (``False``).

        While held every op runs at the safe pair (the GPU's default, ``auto``) and the switch
        to it is issued at once (reason ``hold``); the predictor keeps observing, so the plan
        resumes at the next op after ``hold(False)``. ``joulebound run --verify`` holds the
        controller for its *auto* blocks."""
        self._held = bool(on)
        if on and self.safe is not self.commanded:
            self._switch(self.safe, "hold", UNKNOWN, UNKNOWN)

    @property
    def held(self) -> bool:
        """True while :meth:`hold` keeps the safe pair."""
        return self._held

    def _future_ok(self, label: int) -> bool:
        """The predicted next ``horizon`` ops are the plan's next positions."""
        _, labels, _ = self.predictor.predict_ahead(self.horizon)
        k = self.k
        return all(lab == (label + 1 + i) % k for i, lab in enumerate(labels))

    def command(self, config: ClockConfig, reason: str = "schedule") -> None:
        """Issue ``config`` now (used by :class:`PeriodicSchedule`)."""
        if config != self.commanded:
            config = self.safe if config == self.safe else config
            self._switch(config, reason, UNKNOWN, UNKNOWN)

    def _switch(self, target: ClockConfig, reason: str, label: int, key: int) -> None:
        self.commanded = target
        self._n_switches += 1
        if self.aligner is not None:
            self.aligner.submit(target)
        else:
            self.actuator.set_clocks(target)
        entry = (time.monotonic() - self._t0, self._n_ops - 1, label, target, reason, key)
        self._log.append(entry)
        if self._fh is not None:
            self._fh.write(json.dumps(self._record(entry)) + "\n")

    def _record(self, entry: tuple[float, int, int, ClockConfig, str, int]) -> dict[str, Any]:
        t, op, label, cfg, reason, key = entry
        return {"t_s": round(t, 6), "op": op, "label": int(label), "config": cfg.label,
                "reason": reason,
                "key": str(self.interner.key(key)) if key != UNKNOWN else None}

    @property
    def log(self) -> list[dict[str, Any]]:
        """The most recent switches (up to ``log_capacity``) as switch-log records."""
        return [self._record(e) for e in self._log]

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Back to the default clocks, drain the aligner, close the log."""
        if self.commanded != AUTO:
            self._switch(AUTO, "close", UNKNOWN, UNKNOWN)
        if self.aligner is not None:
            self.aligner.close()
        self.actuator.close()
        if self._fh is not None:
            self._fh.flush()
            if self._own_fh:
                self._fh.close()
            self._fh = None

    def __enter__(self) -> Controller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def hook(self) -> OpStream:
        """An :class:`OpStream` that feeds this controller (use as a context manager)."""
        return OpStream(on_op=self.on_op, interner=self.interner)


def trace_from_ops(names: Sequence[str], name: str = "recorded",
                   arg_specs: dict[str, dict] | None = None) -> Trace:
    """A :class:`~joulebound.workload.trace.Trace` with one kernel per recorded op key.

    FLOPs and bytes come from the key's op, shapes and dtype through the aten cost model
    (:func:`~joulebound.workload.opcost.aten_cost`, the one the profiler-trace importer uses;
    ops it does not model get 0), the category from the importer's name rules
    (:func:`~joulebound.workload.kineto.categorize`), the kernel's dtype from the key (``bfloat16``
    -> ``bf16``, so tensor-core peaks apply to its GEMMs); the names are the keys, so a plan over this trace drives the controller.
    The trace's ``host_dispatch_s`` is eager PyTorch's measured dispatch cost per op
    (:mod:`joulebound.workload.dispatch`).
    """
    kernels = []
    for n in names:
        op, inputs, dtype_text = parse_key(n)
        dtype, size = element_type(dtype_text)
        cost = aten_cost(op, inputs, dtype, size)
        if cost is not None and not (0 <= cost.flops < math.inf and 0 <= cost.bytes < math.inf):
            cost = None     # never a negative or infinite cost: the GPU model cannot take one
        category = categorize(op)
        kernels.append(Kernel(name=n, category=category, phase="other", layer=None,
                              flops=cost.flops if cost else 0.0,
                              bytes=cost.bytes if cost else 0.0,
                              dtype=dtype,
                              meta={"cost": "shapes" if cost else "unknown",
                                    **({"replay": arg_specs[n]} if arg_specs and n in arg_specs
                                       else {})}))
    # eager PyTorch: the host launches every op (the kernel model keeps that time per kernel)
    return Trace(kernels=kernels, name=name, meta={"source": "joulebound.runtime.hooks",
                                                   "host_dispatch_s": dispatch_cost("eager")})
