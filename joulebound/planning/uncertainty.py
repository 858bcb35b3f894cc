"""Intervals on modeled savings from the device parameters' uncertainty.

A shipped parameter file carries ``draws``: the calibration refitted on resampled data
(bootstrap; :mod:`joulebound.gpumodel.fit`). For a plan made on the central parameters, each
draw gives another characterization of the same trace at the same clock configs; on it:

* **re-evaluated** — the chosen plan's energy and time change against that draw's auto
  baseline: what the plan would save if that draw were the truth (the interval printed beside
  every modeled saving);
* **re-planned** — a new plan of the same granularity and allowed slowdown on that draw: how
  much a plan could save under that draw (switch-free plans only; the switch-aware program is
  too slow to rerun per draw in an interactive command).

The interval is the 5 %–95 % range over the draws. It covers parameter uncertainty only, not
the model's structural error: every figure is shown beside the held-out error of the fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from joulebound.gpumodel.characterization import Characterization
from joulebound.planning.plan import Plan

#: quantiles of the reported interval
QUANTILES = (0.05, 0.95)


@dataclass
class Interval:
    """A 5–95 % range over parameter draws (fractions, like the plan's deltas)."""

    energy_lo: float
    energy_hi: float
    time_lo: float
    time_hi: float
    n_draws: int
    replan_energy_lo: float | None = None
    replan_energy_hi: float | None = None

    def to_json(self) -> dict:
        return {"energy_delta_lo": self.energy_lo, "energy_delta_hi": self.energy_hi,
                "time_delta_lo": self.time_lo, "time_delta_hi": self.time_hi,
                "replan_energy_delta_lo": self.replan_energy_lo,
                "replan_energy_delta_hi": self.replan_energy_hi, "n_draws": self.n_draws,
                "quantiles": list(QUANTILES), "covers": "device-parameter uncertainty"}


def draw_characterizations(trace, device, params, configs, n_draws: int | None = None
                           ) -> list[Characterization]:
    """One characterization of ``trace`` per parameter draw (same configs), or ``[]`` when the
    parameters carry no draws (uncalibrated defaults)."""
    from joulebound.gpumodel.characterize import characterize

    if not params.draws:
        return []
    n = len(params.draws) if n_draws is None else min(n_draws, len(params.draws))
    return [characterize(trace, device, configs=configs, include_auto=False,
                         params=params.draw(i)) for i in range(n)]


def evaluate(plan: Plan, char: Characterization) -> tuple[float, float]:
    """The plan's (energy Δ, time Δ) on ``char`` against its auto column."""
    from joulebound.planning.solve.problem import baseline_column

    rows = np.arange(char.n_kernels)
    b = baseline_column(char)
    e = char.energy_j[rows, plan.choice].sum() / char.energy_j[:, b].sum() - 1.0
    t = char.time_s[rows, plan.choice].sum() / char.time_s[:, b].sum() - 1.0
    return float(e), float(t)


def plan_interval(plan: Plan, chars: list[Characterization], replan=None
                  ) -> Interval | None:
    """The interval of :mod:`this module <joulebound.planning.uncertainty>` for one plan;
    ``replan(char) -> Plan`` adds the re-planned range. ``None`` without draws."""
    if not chars:
        return None
    ev = np.array([evaluate(plan, c) for c in chars])
    lo, hi = QUANTILES
    out = Interval(float(np.quantile(ev[:, 0], lo)), float(np.quantile(ev[:, 0], hi)),
                   float(np.quantile(ev[:, 1], lo)), float(np.quantile(ev[:, 1], hi)), len(chars))
    if replan is not None:
        re = np.array([replan(c).energy_delta for c in chars])
        out.replan_energy_lo = float(np.quantile(re, lo))
        out.replan_energy_hi = float(np.quantile(re, hi))
    return out


def study_intervals(study, trace, device, params, n_draws: int | None = None,
                    replan: bool = True) -> dict[str, Interval]:
    """Intervals for every row of a planning study (keyed by row label); re-planning for the
    switch-free rows when ``replan``."""
    from joulebound.planning.solve.objectives import solve

    chars = draw_characterizations(trace, device, params, study.char.configs, n_draws)
    out: dict[str, Interval] = {}
    done: dict[int, Interval] = {}
    if not chars:
        return out
    for r in study.rows:
        if id(r.plan) in done:          # the same plan replayed at another latency
            out[r.label] = done[id(r.plan)]
            continue
        fn = None
        if replan and r.granularity in ("iteration", "pass", "layer", "kernel") \
                and r.plan_latency_s == 0.0:
            obj = r.plan.objective
            eps = (r.slowdown or None) if obj in ("edp", "ed2p") else r.slowdown

            def fn(c, r=r, obj=obj, eps=eps):
                # a certified 1 % gap is enough for a range (no exact core re-solve per draw)
                return solve(c, objective=obj, slowdown=eps, granularity=r.granularity,
                             trace=trace, tol=1e-2)
        iv = plan_interval(r.plan, chars, fn)
        if iv is not None:
            out[r.label] = done[id(r.plan)] = iv
    return out
