"""The runtime controller: apply a :class:`~joulebound.dvfs.plan.Plan` while a program runs.

For every dispatched op (from :class:`~joulebound.dvfs.control.hooks.OpStream`) the controller

1. feeds the op's key to a :class:`~joulebound.dvfs.predict.NextKernelPredictor` primed with the
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

On a GPU, pass an :class:`~joulebound.dvfs.control.hooks.EventAligner` so switches wait for the
device to reach the op they were decided at; on CPU ops are synchronous and switches are direct.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ...clocks import AUTO, ClockConfig
from ..plan import Plan
from ..predict import UNKNOWN, KeyInterner, NextKernelPredictor
from .actuators import Actuator


def lookahead_commands(choice: Sequence[int], kernel_time_s: Sequence[float],
                       switch_latency_s: float) -> np.ndarray:
    """Config index to command when op ``j`` is dispatched, for a cyclic iteration.

    ``command[j] = choice[s]`` where ``s`` is the first op (cyclically, in later iterations too)
    that starts at least ``switch_latency_s`` after op ``j`` starts, i.e. the first op that a
    switch issued at ``j`` can still reach. With zero latency this is the plan itself. Switches
    are serial, so a commanded phase shorter than the latency is skipped over (it keeps the
    clocks before it): such kernels cannot get their own clocks.

    Args:
        choice: config index per kernel (K,).
        kernel_time_s: modeled time per kernel at its planned config (s), (K,).
        switch_latency_s: clock-switch latency (s).
    """
    choice = np.asarray(choice, dtype=np.int64)
    t = np.asarray(kernel_time_s, dtype=float)
    k = len(choice)
    if k == 0:
        return choice.copy()
    if t.shape != (k,) or np.any(~np.isfinite(t)) or np.any(t < 0):
        raise ValueError("kernel_time_s must be finite, >= 0, one per kernel")
    lat = float(switch_latency_s)
    if lat <= 0:
        return choice.copy()
    period = float(t.sum())
    reps = 3 + (int(np.ceil(lat / period)) if period > 0 else 1)
    starts = np.concatenate([[0.0], np.cumsum(np.tile(t, reps))])[:-1]
    s = np.searchsorted(starts, starts[:k] + lat - 1e-15, side="left")
    s = np.minimum(s, len(starts) - 1)
    cmd = choice[s % k]
    return _drop_superseded(cmd, starts, lat)


def _drop_superseded(cmd: np.ndarray, starts: np.ndarray, lat: float) -> np.ndarray:
    """Remove switches whose successor is due before they complete.

    Clock switches are serial (one NVML call at a time, ``lat`` each): a switch issued less than
    ``lat`` after the previous one would queue behind it and land late. So a change is kept only
    when the next change comes at least ``lat`` later; otherwise the short phase keeps the
    previous clocks. Walks three iterations and returns the middle (steady-state) one."""
    k = len(cmd)
    n = 3 * k
    c3 = np.tile(cmd, 3)
    cur = c3[-1]
    i = 0
    while i < n:
        if c3[i] == cur:
            i += 1
            continue
        i2 = i + 1
        while i2 < n and c3[i2] == c3[i]:
            i2 += 1
        if i2 < n and starts[i2] < starts[i] + lat - 1e-15:
            c3[i:i2] = cur          # superseded before it could take effect
        else:
            cur = c3[i]
        i = i2
    return c3[k:2 * k].copy()


@dataclass
class ControllerStats:
    """Counts since the controller started."""

    ops: int = 0
    planned_ops: int = 0       # ops for which the plan's command was followed
    safe_ops: int = 0          # ops run under the safe pair (unknown / low confidence)
    switches: int = 0


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
        self._n_ops = self._n_planned = self._n_safe = self._n_switches = 0
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
            self._fh = open(log, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
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
        labels = pred._labels
        label = labels[-1]
        if label < 0 and self._last_label >= 0:
            # continuity with the plan: the op the plan has next after the previous one.
            # Written back into the history so later iterations that follow it keep the label.
            nxt = self._last_label + 1
            if nxt == self.k:
                nxt = 0
            if self.keys[nxt] == key:
                label = labels[-1] = nxt
        self._last_label = label
        self._n_ops += 1
        # configs are canonical objects, so identity is equality here
        if label >= 0 and pred._nc >= self.min_confidence:
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
        return ControllerStats(self._n_ops, self._n_planned, self._n_safe, self._n_switches)

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

    def hook(self) -> Any:
        """An :class:`OpStream` that feeds this controller (use as a context manager)."""
        from .hooks import OpStream

        return OpStream(on_op=self.on_op, interner=self.interner)


def trace_from_ops(names: Sequence[str], name: str = "recorded") -> Any:
    """A :class:`~joulebound.workload.trace.Trace` with one kernel per recorded op key.

    FLOPs and bytes are estimated from the key's shapes (matmul-like ops: 2·M·N·K FLOP; others:
    one FLOP per output element; bytes: inputs + output at the key's element size) so a device
    model can characterize them; the kernel's math dtype is the key's (``bfloat16`` -> ``bf16``,
    so tensor-core peaks apply); the names are the keys, so a plan over this trace drives the
    controller.
    """
    from ...workload.trace import Kernel, Trace

    kernels = []
    for n in names:
        op, shapes = _parse_key(n)
        dtype, size = _TORCH_DTYPES.get(n.rsplit("]", 1)[-1], ("fp32", 4))
        flops, nbytes, cat = _estimate(op, shapes, size)
        kernels.append(Kernel(name=n, category=cat, phase="other", layer=None, flops=flops,
                              bytes=nbytes, dtype=dtype))
    return Trace(kernels=kernels, name=name, meta={"source": "joulebound.dvfs.control.hooks"})


def _parse_key(name: str) -> tuple[str, list[list[int]]]:
    op, _, rest = name.partition("[")
    body = rest.rsplit("]", 1)[0]
    shapes: list[list[int]] = []
    for part in body.replace("(", "").replace(")", "").split(","):
        part = part.strip()
        if part and part != "scalar":
            try:
                shapes.append([int(x) for x in part.split("x")])
            except ValueError:
                continue
    return op, shapes


#: torch dtype name (as in an op key) -> (math dtype of the device model, bytes per element)
_TORCH_DTYPES: dict[str, tuple[str, int]] = {
    "float32": ("fp32", 4), "float64": ("fp32", 8), "float16": ("fp16", 2),
    "bfloat16": ("bf16", 2), "float8_e4m3fn": ("fp8", 1), "float8_e5m2": ("fp8", 1),
}


def _estimate(op: str, shapes: list[list[int]], size: int = 4) -> tuple[float, float, str]:
    numel = [float(np.prod(s)) if s else 1.0 for s in shapes]
    nbytes = float(size) * (sum(numel) + (max(numel) if numel else 0.0))
    base = op.split(".")[1] if "." in op else op
    if base in ("mm", "addmm", "bmm", "matmul", "linear") and len(shapes) >= 2:
        a, b = shapes[-2], shapes[-1]
        m = float(np.prod(a[:-1])) if len(a) > 1 else 1.0
        flops = 2.0 * m * a[-1] * (b[-1] if len(b) > 1 else 1.0)
        return flops, nbytes, "gemm"
    if "attention" in base:
        q = shapes[0] if shapes else [1]
        s = q[-2] if len(q) >= 2 else 1
        return 4.0 * float(np.prod(q)) * s, nbytes, "attention"
    if "foreach" in base or "adam" in base:
        return (max(numel) if numel else 0.0), nbytes, "optimizer"
    return (max(numel) if numel else 0.0), nbytes, "elementwise"
