"""Replay one iteration under a clock plan on the device model, with switch latency.

Rules (the same the switch-aware planner assumes):

* a clock switch requested at time ``t`` takes effect at ``t + L``; the kernel running at that
  moment finishes at the old clocks, the next kernel to start runs at the new ones;
* one request at a time: the next request can be issued only once the previous one took effect
  ("a clock cannot change faster than L");
* ``lookahead=True``: the controller knows the schedule (the plan and the modeled kernel times)
  and issues each phase's request ``L`` before the phase's predicted start (never before the
  actuator is free; requests for the first phase boundary may be issued before the iteration
  starts, as the schedule is known in advance). ``lookahead=False``: a reactive controller issues
  the request when the phase's first kernel starts, so that kernel and the next ones within ``L``
  run at the previous clocks;
* a switch optionally costs energy ``switch_energy_j`` (J) and a stall ``switch_time_s`` (s);
* ``plan=None`` replays the baseline: every kernel at the governor ("auto") column (or the top
  clocks when "auto" is not characterized), no switches.

With ``L = 0`` (and no switch costs) the replay reproduces the planner's predicted totals up to
float rounding; with ``L > 0`` it shows what a plan that ignored switching really costs.
Optional multiplicative sensor noise per sensor period gives a noisy "reading" of the energy
beside the exact modeled value. Everything is modeled (provenance ``"modeled"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MODELED
from joulebound.gpumodel.characterization import Characterization
from joulebound.planning.plan import Plan
from joulebound.planning.solve.problem import baseline_column


@dataclass
class Timeline:
    """Per-kernel replay record (arrays of length K).

    Attributes:
        start_s / end_s: kernel start and end (s from the iteration start).
        config: column (into the characterization's configs) the kernel actually ran at.
        planned: column the plan wanted.
        energy_j: kernel energy (J) at the clocks it ran at.
    """

    start_s: np.ndarray
    end_s: np.ndarray
    config: np.ndarray
    planned: np.ndarray
    energy_j: np.ndarray

    @property
    def off_plan(self) -> np.ndarray:
        """True where a kernel ran at clocks other than planned (a late switch)."""
        return self.config != self.planned


@dataclass
class SimResult:
    """Outcome of one replayed iteration (modeled).

    Attributes:
        time_s: iteration time including switch stalls (s).
        energy_j: iteration energy including switch energy (J).
        switches: clock changes that took effect.
        timeline: per-kernel :class:`Timeline`.
        late_kernels: kernels that ran at clocks other than planned.
        sensor_energy_j: what a noisy energy sensor would read (== energy_j without noise).
        switch_latency_s: L used (s).
        lookahead: whether requests were issued ahead of the phases.
        provenance: ``"modeled"``.
    """

    time_s: float
    energy_j: float
    switches: int
    timeline: Timeline
    late_kernels: int
    sensor_energy_j: float
    switch_latency_s: float
    lookahead: bool
    provenance: str = MODELED
    meta: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """JSON-friendly totals (no timeline)."""
        return {"time_s": self.time_s, "energy_j": self.energy_j, "switches": self.switches,
                "late_kernels": self.late_kernels, "sensor_energy_j": self.sensor_energy_j,
                "switch_latency_s": self.switch_latency_s, "lookahead": self.lookahead,
                "provenance": self.provenance}


def plan_columns(char: Characterization, plan: Plan) -> np.ndarray:
    """Column of ``char`` each plan kernel runs at, (K,) int.

    Raises :class:`JouleboundError` when the plan's kernels are not ``char``'s rows (naming the
    first disagreement) or the plan uses clock configs ``char`` lacks (naming them)."""
    if list(plan.kernel_names) != list(char.kernel_names):
        if len(plan.kernel_names) != char.n_kernels:
            raise JouleboundError(f"the plan has {len(plan.kernel_names)} kernels, the "
                                  f"characterization {char.n_kernels}; plan and replay the same trace")
        bad = [i for i, (a, b) in enumerate(zip(plan.kernel_names, char.kernel_names, strict=True))
               if a != b]
        raise JouleboundError(f"plan and characterization disagree at kernel {bad[0]} "
                              f"({plan.kernel_names[bad[0]]!r} vs {char.kernel_names[bad[0]]!r}) "
                              f"and {len(bad) - 1} more")
    table = np.full(len(plan.configs), -1, np.int64)
    missing: set[str] = set()
    for i in np.unique(plan.choice):
        try:
            table[i] = char.config_index(plan.configs[i])
        except KeyError:
            missing.add(plan.configs[i].label)
    if missing:
        raise JouleboundError(f"the plan uses clock configs the characterization lacks: "
                              f"{', '.join(sorted(missing))}")
    return table[plan.choice]


def simulate(char: Characterization, plan: Plan | None = None, switch_latency_s: float = 0.0,
             lookahead: bool = True, *, switch_energy_j: float = 0.0, switch_time_s: float = 0.0,
             initial: int | None = None, sensor_noise: float = 0.0, sensor_period_s: float = 0.02,
             seed: int | None = None) -> SimResult:
    """Replay ``char``'s kernels in order under ``plan`` (``None``: the baseline).

    Args:
        char: time (s) and energy (J) per kernel × configuration, rows in execution order.
        plan: the clock plan; ``None`` replays the governor baseline.
        switch_latency_s: L (s) from a request to the new clocks.
        lookahead: issue requests L ahead from the known schedule (else reactively).
        switch_energy_j / switch_time_s: energy (J) and stall (s) per switch.
        initial: column in effect when the iteration starts (default: the plan's first).
        sensor_noise: relative standard deviation of the energy reading per sensor period.
        sensor_period_s: sensor update period (s) for the noisy reading.
        seed: random seed of the sensor noise.
    """
    k_n = char.n_kernels
    if plan is None:
        planned = np.full(k_n, baseline_column(char), np.int64)
    else:
        planned = plan_columns(char, plan)
    times, energies = char.time_s, char.energy_j
    rows = np.arange(k_n)
    pdur = times[rows, planned]
    pcum = np.concatenate([[0.0], np.cumsum(pdur)])
    cuts = np.flatnonzero(np.diff(planned)) + 1
    p_start = np.concatenate([[0], cuts]).astype(np.int64)
    p_cfg = planned[p_start] if k_n else np.zeros(0, np.int64)
    n_p = len(p_start)
    cur = int(planned[0] if initial is None else initial) if k_n else 0
    start = np.empty(k_n)
    end = np.empty(k_n)
    used = np.empty(k_n, np.int64)
    ekern = np.empty(k_n)
    t = 0.0
    energy = 0.0
    switches = 0
    pending: tuple[float, int] | None = None
    free_at = -np.inf
    nxt = 1
    lat = float(switch_latency_s)
    for k in range(k_n):
        if pending is not None and pending[0] <= t + 1e-12 * (abs(t) + 1e-9):
            free_at = pending[0]
            if pending[1] != cur:
                cur = pending[1]
                switches += 1
                t += switch_time_s
                energy += switch_energy_j
            pending = None
        if pending is None and nxt < n_p:
            # skip phases that are already over (their boundary and the next one have passed)
            while nxt + 1 < n_p and p_start[nxt + 1] <= k:
                nxt += 1
            if lookahead:
                if p_start[nxt] >= k:
                    issue = t + (pcum[p_start[nxt]] - pcum[k]) - lat
                else:
                    issue = t
                issue = max(issue, free_at)
            elif p_start[nxt] <= k:
                issue = max(t, free_at)
            else:
                issue = None
            if issue is not None:
                target = int(p_cfg[nxt])
                nxt += 1
                if target != cur or lat > 0:
                    pending = (issue + lat, target)
                    free_at = issue + lat
                    if pending[0] <= t + 1e-12 * (abs(t) + 1e-9):   # L = 0: already in effect
                        if target != cur:
                            cur = target
                            switches += 1
                            t += switch_time_s
                            energy += switch_energy_j
                        pending = None
        d = times[k, cur]
        en = energies[k, cur]
        start[k] = t
        used[k] = cur
        ekern[k] = en
        t += d
        energy += en
        end[k] = t
    sensor = energy
    if sensor_noise > 0 and k_n:
        rng = np.random.default_rng(seed)
        window = np.floor(start / max(sensor_period_s, 1e-12)).astype(np.int64)
        per = np.bincount(window, weights=ekern)
        sensor = float((per * (1.0 + sensor_noise * rng.standard_normal(len(per)))).sum())
        sensor += switches * switch_energy_j
    tl = Timeline(start, end, used, planned, ekern)
    return SimResult(time_s=t, energy_j=energy, switches=switches, timeline=tl,
                     late_kernels=int(np.count_nonzero(used != planned)), sensor_energy_j=sensor,
                     switch_latency_s=lat, lookahead=lookahead)
