"""A planning study: plans at several granularities / latencies, replayed, with provenance.

Used by ``joulebound plan``, ``joulebound demo`` and the HTML report. Pure computation over a
trace and its characterization; printing and files live in :mod:`joulebound.cli` and
:mod:`joulebound.report`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from joulebound.core import provenance
from joulebound.gpumodel.characterization import Characterization
from joulebound.planning.plan import Plan
from joulebound.planning.simulate import SimResult, simulate
from joulebound.planning.solve import (
    Frontier,
    baseline_column,
    baseline_totals,
    pareto_frontier,
    plan_switch_aware,
    solve,
)
from joulebound.workload.trace import Trace

#: Spaan, Chen, Varbanescu, "Reducing Compute Waste in LLMs through Kernel-Level DVFS",
#: arXiv 2601.08539 (ACM Computing Frontiers 2026): GPT-3-XL on an RTX 3080 Ti.
PUBLISHED_CITATION = ("Spaan, Chen, Varbanescu: Reducing Compute Waste in LLMs through "
                      "Kernel-Level DVFS, arXiv 2601.08539 (2026)")
PUBLISHED: list[dict] = [
    {"granularity": "kernel", "energy_delta": -0.146, "time_delta": 0.006,
     "what": "measured (sum of isolated kernel measurements)"},
    {"granularity": "kernel", "energy_delta": -0.1564, "time_delta": 0.0,
     "what": "solver estimate"},
    {"granularity": "pass", "energy_delta": -0.0207, "time_delta": -0.001,
     "what": "measured"},
]


def published_for(trace: Trace, device: str) -> list[dict]:
    """The published reference figures that apply to this trace and device (else none)."""
    name = (trace.name or "").lower()
    if "gpt3-xl" in name and device.lower() in ("rtx3080ti", "rtx 3080 ti"):
        return [dict(r, provenance=provenance.PUBLISHED, source=PUBLISHED_CITATION)
                for r in PUBLISHED]
    return []


@dataclass
class StudyRow:
    """One plan of the study.

    Attributes:
        label: short row name (``"kernel"``, ``"phase L=6ms"``).
        granularity: ``iteration``/``pass``/``layer``/``kernel``/``phase``.
        slowdown: allowed ε.
        plan_latency_s: latency the plan assumed (0 for switch-free plans).
        plan: the plan.
        replay: the plan replayed by the simulator at ``replay_latency_s`` (look-ahead).
        replay_latency_s: latency of the replay (s).
    """

    label: str
    granularity: str
    slowdown: float
    plan_latency_s: float
    plan: Plan
    replay: SimResult
    replay_latency_s: float

    @property
    def replay_energy_delta(self) -> float:
        """Relative energy of the replay against the baseline the plan's deltas use."""
        return self.replay.energy_j / self.plan.baseline_energy_j - 1.0

    @property
    def replay_time_delta(self) -> float:
        """Relative time of the replay against the baseline the plan's deltas use."""
        return self.replay.time_s / self.plan.baseline_time_s - 1.0

    def to_json(self) -> dict:
        p = self.plan
        return {
            "label": self.label, "granularity": self.granularity, "objective": p.objective,
            "slowdown": self.slowdown, "plan_switch_latency_s": self.plan_latency_s,
            "energy_delta": p.energy_delta, "time_delta": p.time_delta,
            "switches": p.n_switches, "predicted_energy_j": p.predicted_energy_j,
            "predicted_time_s": p.predicted_time_s, "provenance": p.provenance,
            "solver": p.meta.get("solver") or p.meta.get("dp") or p.meta.get("method"),
            "gap_bound": p.meta.get("gap_bound"),
            "solver_time_limit_s": p.meta.get("solver_time_limit_s"),
            "time_limit_hit": bool(p.meta.get("time_limit_hit", False)),
            "replay": {"switch_latency_s": self.replay_latency_s,
                       "energy_delta": self.replay_energy_delta,
                       "time_delta": self.replay_time_delta,
                       "switches": self.replay.switches, "late_kernels": self.replay.late_kernels,
                       "provenance": self.replay.provenance},
        }


@dataclass
class Study:
    """Everything a planning report shows (all figures modeled unless labeled published)."""

    trace: Trace
    char: Characterization
    rows: list[StudyRow]
    frontiers: dict[str, Frontier]
    published: list[dict]
    baseline_time_s: float
    baseline_energy_j: float
    baseline_config: str
    meta: dict = field(default_factory=dict)

    def row(self, label: str) -> StudyRow:
        return next(r for r in self.rows if r.label == label)


def category_savings(trace: Trace, char: Characterization, plan: Plan) -> list[dict]:
    """Energy saved per kernel category (J and %), against the baseline column (modeled)."""
    b = baseline_column(char)
    rows = np.arange(char.n_kernels)
    e_base = char.energy_j[:, b]
    e_plan = char.energy_j[rows, plan.choice]
    t_base = char.time_s[:, b]
    t_plan = char.time_s[rows, plan.choice]
    cats = np.array(trace.categories())
    total_saved = float((e_base - e_plan).sum())
    out = []
    for c in sorted(set(cats)):
        m = cats == c
        eb, ep = float(e_base[m].sum()), float(e_plan[m].sum())
        out.append({"category": c, "kernels": int(m.sum()), "baseline_energy_j": eb,
                    "plan_energy_j": ep, "saved_j": eb - ep,
                    "energy_delta": ep / eb - 1.0 if eb > 0 else 0.0,
                    "time_delta": float(t_plan[m].sum() / t_base[m].sum() - 1.0),
                    "share_of_saving": (eb - ep) / total_saved if total_saved else 0.0,
                    "provenance": plan.provenance})
    return sorted(out, key=lambda r: -r["saved_j"])


def kernel_clocks(trace: Trace, plan: Plan) -> list[dict]:
    """The clock pair per kernel, with the kernel's name, category, phase and layer."""
    out = []
    for i, (k, c) in enumerate(zip(trace.kernels, plan.choice, strict=True)):
        cfg = plan.configs[int(c)]
        out.append({"index": i, "name": k.name, "category": k.category, "phase": k.phase,
                    "layer": k.layer, "clock": cfg.label, "core_mhz": cfg.core_mhz,
                    "mem_mhz": cfg.mem_mhz})
    return out


def run_study(trace: Trace, char: Characterization, *, granularities: list[str],
              slowdowns: list[float], objective: str = "waste",
              latencies: list[float] | None = None,
              latency_slowdown: float | list[float] | None = None,
              replay_latency_s: float = 0.0, frontier: bool = True, tie: bool = False,
              progress=None) -> Study:
    """Plans for every granularity × slowdown, switch-aware plans for every latency.

    Args:
        granularities: subset of iteration/pass/layer/kernel.
        slowdowns: allowed slowdowns ε; ``objective`` ``waste`` at ε = 0 and ``relaxed`` above
            (``edp``/``ed2p``: ε caps the slowdown).
        latencies: switch latencies (s) for switch-aware plans (``phase`` rows).
        latency_slowdown: ε (or a list of ε) for the switch-aware plans (default: the largest
            of ``slowdowns``); with several, labels carry ``@ε``.
        replay_latency_s: latency at which switch-free plans are replayed (look-ahead).
        tie: one configuration for identical kernel invocations (switch-free plans).
        progress: optional callable(str) for progress messages.
    """
    tb, eb = baseline_totals(char)
    rows: list[StudyRow] = []
    say = progress or (lambda _msg: None)
    for eps in slowdowns:
        for g in granularities:
            say(f"{g} plan, slowdown {eps:.1%}")
            if objective in ("edp", "ed2p"):
                p = solve(char, objective=objective, slowdown=eps if eps else None,
                          granularity=g, trace=trace, tie=tie)
            else:
                p = solve(char, objective="waste" if eps == 0 else "relaxed", slowdown=eps,
                          granularity=g, trace=trace, tie=tie)
            sim = simulate(char, p, replay_latency_s)
            label = g if len(slowdowns) == 1 else f"{g} @{eps:+.0%}"
            rows.append(StudyRow(label, g, eps, 0.0, p, sim, replay_latency_s))
    if latency_slowdown is None:
        eps_list = [max(slowdowns)]
    elif isinstance(latency_slowdown, list | tuple):
        eps_list = list(latency_slowdown)
    else:
        eps_list = [latency_slowdown]
    for eps_l in eps_list:
        tag = f" @{eps_l:+.0%}" if len(eps_list) > 1 else ""
        for lat in latencies or []:
            say(f"switch-aware plan, L = {lat * 1e3:g} ms, slowdown {eps_l:.1%}")
            p = plan_switch_aware(char, slowdown=eps_l, switch_latency_s=lat)
            sim = simulate(char, p, lat)
            rows.append(StudyRow(f"phase L={lat * 1e3:g}ms{tag}", "phase", eps_l, lat, p, sim, lat))
            # the switch-oblivious kernel plan replayed at the same latency, for contrast
            ko = next((r for r in rows if r.granularity == "kernel" and r.slowdown == eps_l
                       and r.plan_latency_s == 0.0 and r.replay_latency_s == replay_latency_s),
                      None)
            if ko is not None and lat > 0 and lat != replay_latency_s:
                rows.append(StudyRow(f"kernel L-blind @L={lat * 1e3:g}ms{tag}", "kernel", eps_l,
                                     0.0, ko.plan, simulate(char, ko.plan, lat), lat))
    fronts: dict[str, Frontier] = {}
    if frontier:
        say("Pareto frontiers")
        for g in granularities:
            # a plot: each point certified within 1 % of optimal (no exact core re-solve per point)
            fronts[g] = pareto_frontier(char, np.linspace(0.0, 0.1, 41), granularity=g, trace=trace,
                                        tol=1e-2)
    return Study(trace=trace, char=char, rows=rows, frontiers=fronts,
                 published=published_for(trace, char.device), baseline_time_s=tb,
                 baseline_energy_j=eb, baseline_config=char.configs[baseline_column(char)].label)
