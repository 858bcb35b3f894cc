"""Check (b): Perseus measured plans (A100 PCIe, pipeline parallel, real training runs).

SIDE MODEL: checks a pipeline-plan model of its own (its fitted cap clock is also the A100-PCIe
transfer's, see ``research/write_params.py``), not the product's kernel model.

Data: ``perseus/plans/A100/<model>/N.sched.json.gz`` (the per-instruction SM clock plan of each
rank) and ``perseus/derived/perseus_{plan,rank}_summary.csv`` (measured iteration time and energy
of every plan) from the Perseus SOSP'24 artifact (Chung et al., Apache-2.0).

Prediction, from the max-clock warm-up runs (plans 0 and 1) plus each plan's clock schedule:

1. **Schedule (assumption).** ``power_states`` is not labelled. We assume Merak's 1F1B order: rank
   ``r`` of ``pp`` runs ``w = min(pp-r-1, nmb)`` warm-up forwards, then ``nmb-w`` (forward,
   backward) pairs, then ``w`` backwards; every instruction owns two consecutive entries (the
   lists hold 4·nmb + a few entries; the few trailing extras are the optimizer/flush and are
   ignored); an instruction runs at the higher of its two clocks.
2. **Time.** Each rank's forward/backward duration at max clock is the measured median
   (rank summary). At clock ``f`` it is scaled by the device time curve
   ``g(f) = (1-φ + φ·f_eff(f_max)/f_eff(f)) `` with ``f_eff = min(f, f_cap)`` — ``φ`` the
   clock-scaling fraction of the time, ``f_cap`` the clock the 300 W PCIe limit lets the GPU
   reach at "max clock". The iteration is simulated as the 1F1B dependency graph
   (F(r,m) after F(r-1,m); B(r,m) after B(r+1,m)); the measured-minus-simulated max-clock time is
   a constant per-iteration overhead.
3. **Energy.** Per rank: busy power at max clock from the max-clock run's energy balance
   ``E = P_busy·busy + P_block·(T - busy)`` with the artifact's blocking power 83.64 W; at clock
   ``f``, ``P_busy·h(f)`` with ``h(f) = (c + V(f')²f'/f_max) / (c + V(f_cap)²f_cap/f_max)``,
   ``f' = min(f, f_cap)``, the V–f curve calibrated on the A100-SXM stage profiles (same GA100 die).
4. **Calibration.** The three device parameters ``φ, f_cap, c`` are fitted on the even-indexed
   plans of all four workloads; the odd-indexed plans are held out and reported.
"""

from __future__ import annotations

import functools
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from joulebound.gpumodel.vf import VFCurve
from research.result import CheckResult

WORKLOADS = ("gpt3-xl", "bert-huge-uncased", "t5-3b", "bloom-3b")
BLOCKING_POWER_W = 83.64     # Perseus artifact constant for A100 (P2P blocking power)
F_MAX = 1410.0


@dataclass
class PlanCase:
    """One plan of one workload: per-rank instruction clocks and the measured outcome."""

    model: str
    plan_index: int
    fwd_mhz: list[np.ndarray]     # per rank, per microbatch
    bwd_mhz: list[np.ndarray]
    time_s: float
    energy_j: float


@dataclass
class Workload:
    model: str
    pp: int
    nmb: int
    fwd_s: np.ndarray      # per rank, max-clock median forward (s)
    bwd_s: np.ndarray
    rank_energy_j: np.ndarray   # per rank energy per iteration at max clock (J)
    time0_s: float          # measured max-clock iteration time (s)
    plans: list[PlanCase]


def one_f_one_b(rank: int, pp: int, nmb: int) -> list[tuple[str, int]]:
    """1F1B instruction order of ``rank``: [("F"|"B", microbatch), ...]."""
    w = min(pp - rank - 1, nmb)
    order = [("F", m) for m in range(w)]
    f, b = w, 0
    while f < nmb:
        order.append(("F", f))
        f += 1
        order.append(("B", b))
        b += 1
    order += [("B", m) for m in range(b, nmb)]
    return order


def split_power_states(states: list[int], rank: int, pp: int, nmb: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward clock per microbatch from a rank's ``power_states`` (see module doc)."""
    st = np.asarray(states, float)
    need = 4 * nmb
    if st.size < need:
        raise ValueError(f"rank {rank}: {st.size} power states, expected at least {need}")
    pairs = st[:need].reshape(-1, 2).max(axis=1)
    fwd = np.empty(nmb)
    bwd = np.empty(nmb)
    for (kind, m), f in zip(one_f_one_b(rank, pp, nmb), pairs, strict=True):
        (fwd if kind == "F" else bwd)[m] = f
    return fwd, bwd


@functools.lru_cache(maxsize=32)
def _schedule_1f1b(pp: int, nmb: int) -> tuple[tuple[int, bool, int], ...]:
    """The order in which :func:`simulate_1f1b` can run the ops of a ``pp``-stage pipeline of
    ``nmb`` microbatches: (rank, is forward, microbatch), each after the ops it waits for (the
    previous op of its rank and the same microbatch's op on the neighbouring rank). It does not
    depend on the durations, so it is worked out once per shape."""
    f_done = [[False] * nmb for _ in range(pp)]
    b_done = [[False] * nmb for _ in range(pp)]
    orders = [one_f_one_b(r, pp, nmb) for r in range(pp)]
    pos = [0] * pp
    out: list[tuple[int, bool, int]] = []
    remaining = 2 * pp * nmb
    while remaining:
        progressed = False
        for r in range(pp):
            while pos[r] < len(orders[r]):
                kind, m = orders[r][pos[r]]
                if kind == "F":
                    if r > 0 and not f_done[r - 1][m]:
                        break
                    f_done[r][m] = True
                else:
                    if r < pp - 1 and not b_done[r + 1][m]:
                        break
                    b_done[r][m] = True
                out.append((r, kind == "F", m))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - 1F1B is deadlock free
            raise RuntimeError("pipeline simulation deadlocked")
    return tuple(out)


def simulate_1f1b(fwd: list[np.ndarray], bwd: list[np.ndarray]) -> tuple[float, np.ndarray]:
    """Makespan (s) of a 1F1B pipeline with per-rank, per-microbatch durations; busy time per rank.

    Each op starts when its rank is free and its input is ready (the forward of the previous
    stage, the backward of the next), in the order of :func:`_schedule_1f1b`
    (:func:`simulate_1f1b_many` of this one pipeline)."""
    t, busy = simulate_1f1b_many(np.asarray(fwd, float)[None], np.asarray(bwd, float)[None])
    return float(t[0]), busy[0]


def simulate_1f1b_many(fwd: np.ndarray, bwd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`simulate_1f1b` of ``n`` pipelines of one shape at once: ``fwd`` and ``bwd`` are
    (n, pp, nmb) durations (s); returns the makespans (n,) and the busy time per rank (n, pp).
    The schedule is the same for every pipeline, so each of its ops is one vector step over the
    ``n`` pipelines (the plans of a workload) instead of ``n`` scalar ones."""
    fwd = np.asarray(fwd, float)
    bwd = np.asarray(bwd, float)
    n, pp, nmb = fwd.shape
    fw = np.ascontiguousarray(fwd.transpose(1, 2, 0))    # (pp, nmb, n): one row per op
    bw = np.ascontiguousarray(bwd.transpose(1, 2, 0))
    f_end = np.zeros((pp, nmb, n))
    b_end = np.zeros((pp, nmb, n))
    clock = np.zeros((pp, n))
    last = pp - 1
    for r, forward, m in _schedule_1f1b(pp, nmb):
        c = clock[r]
        if forward:
            start = np.maximum(c, f_end[r - 1, m]) if r > 0 else c
            np.add(start, fw[r, m], out=c)
            f_end[r, m] = c
        else:
            start = np.maximum(c, b_end[r + 1, m]) if r < last else c
            np.add(start, bw[r, m], out=c)
            b_end[r, m] = c
    busy = fwd.sum(axis=2) + bwd.sum(axis=2)
    return clock.max(axis=0), busy


def load_workload(data: Path, model: str) -> Workload:
    import pandas as pd

    root = Path(data) / "perseus"
    plans = pd.read_csv(root / "derived" / "perseus_plan_summary.csv")
    ranks = pd.read_csv(root / "derived" / "perseus_rank_summary.csv")
    sel = (plans.method == "perseus") & (plans.gpu == "A100") & (plans.model == model)
    p = plans[sel]
    if p.empty:
        raise ValueError(f"{root}/derived/perseus_plan_summary.csv: no A100 rows for {model}")
    pp, nmb = int(p.pp.iloc[0]), int(p.num_microbatches.iloc[0])
    r = ranks[(ranks.method == "perseus") & (ranks.gpu == "A100") & (ranks.model == model)
              & (ranks.plan_role == "warmup_maxfreq")].groupby("rank").mean(numeric_only=True)
    warm = p[p.plan_role == "warmup_maxfreq"]
    cases = []
    for _, row in p[p.plan_role == "plan"].iterrows():
        path = root / "plans" / "A100" / model / f"{int(row.plan_index)}.sched.json.gz"
        sched = {d["rank"]: d["power_states"] for d in json.loads(gzip.open(path).read())}
        fw, bw = zip(*(split_power_states(sched[k], k, pp, nmb) for k in range(pp)), strict=True)
        cases.append(PlanCase(model, int(row.plan_index), list(fw), list(bw),
                              float(row.iter_time_s), float(row.iter_energy_j)))
    return Workload(model, pp, nmb, r.fwd_median_s.to_numpy(), r.bwd_median_s.to_numpy(),
                    r.iter_energy_mean_j.to_numpy(), float(warm.iter_time_s.mean()), cases)


@dataclass
class PlanDeviceParams:
    """A100-PCIe device parameters of the plan model (see module doc)."""

    phi: float = 0.9
    f_cap: float = 1200.0
    c: float = 0.5


def predict_workload(wl: Workload, prm: PlanDeviceParams, vf: VFCurve
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Predicted (iteration time s, energy J) of every plan of ``wl``, all plans at once."""
    if not wl.plans:
        return np.empty(0), np.empty(0)
    f_ref = min(F_MAX, prm.f_cap)
    pp, nmb = wl.pp, wl.nmb
    fwd0 = [np.full(nmb, wl.fwd_s[r]) for r in range(pp)]
    bwd0 = [np.full(nmb, wl.bwd_s[r]) for r in range(pp)]
    t_sim0, busy0 = simulate_1f1b(fwd0, bwd0)
    overhead = wl.time0_s - t_sim0
    p_busy = (wl.rank_energy_j - BLOCKING_POWER_W * (wl.time0_s - busy0)) / busy0
    mhz = _plan_clocks(wl)                         # (2, n plans, pp, nmb): forward, backward
    fe = np.minimum(mhz, prm.f_cap)
    g = 1 - prm.phi + prm.phi * f_ref / fe         # time scale at each instruction's clock
    h = (prm.c + vf.dynamic_scale(fe)) / (prm.c + vf.dynamic_scale(f_ref))   # busy power scale
    dur = np.stack([wl.fwd_s, wl.bwd_s])[:, None, :, None] * g             # (2, n, pp, nmb) s
    t_sim, busy = simulate_1f1b_many(dur[0], dur[1])
    t = t_sim + overhead
    active = (dur * h).sum(axis=(0, 3))            # (n, pp): busy seconds × power scale
    e = active @ p_busy + BLOCKING_POWER_W * (pp * t - busy.sum(axis=1))
    return t, e


def _plan_clocks(wl: Workload) -> np.ndarray:
    """The plans' instruction clocks (MHz) as one (2, n plans, pp, nmb) array (forward, backward),
    built once per workload object."""
    cached = wl.__dict__.get("_clocks")
    if cached is None or cached.shape[1] != len(wl.plans):
        cached = np.array([[np.stack(c.fwd_mhz) for c in wl.plans],
                           [np.stack(c.bwd_mhz) for c in wl.plans]], float)
        wl.__dict__["_clocks"] = cached
    return cached


def fit_device(wls: list[Workload], vf: VFCurve, split: str = "even") -> PlanDeviceParams:
    """Fit ``φ, f_cap, c`` on the plans whose index parity is ``split`` (relative errors)."""
    from scipy.optimize import least_squares

    sub = [Workload(w.model, w.pp, w.nmb, w.fwd_s, w.bwd_s, w.rank_energy_j, w.time0_s,
                    [c for c in w.plans if (c.plan_index % 2 == 0) == (split == "even")])
           for w in wls]

    def resid(x: np.ndarray) -> np.ndarray:
        prm = PlanDeviceParams(*x)
        out = []
        for w in sub:
            t, e = predict_workload(w, prm, vf)
            out += list(t / [c.time_s for c in w.plans] - 1) + list(e / [c.energy_j for c in w.plans] - 1)
        return np.array(out)

    best = None
    for f0 in (1150.0, 1300.0, 1400.0):
        sol = least_squares(resid, [0.8, f0, 0.8], bounds=([0.05, 900.0, 0.0], [1.0, 1410.0, 5.0]),
                            diff_step=1e-3)
        if best is None or sol.cost < best.cost:
            best = sol
    return PlanDeviceParams(*best.x)


def run(data: Path, vf: VFCurve) -> tuple[list[CheckResult], PlanDeviceParams]:
    """Held-out (odd-indexed) plans per workload, device parameters fitted on the even ones."""
    wls = [load_workload(data, m) for m in WORKLOADS]
    prm = fit_device(wls, vf, "even")
    out = []
    allp = {k: [] for k in ("tp", "tm", "ep", "em")}
    for w in wls:
        t, e = predict_workload(w, prm, vf)
        odd = np.array([c.plan_index % 2 == 1 for c in w.plans])
        tm = np.array([c.time_s for c in w.plans])
        em = np.array([c.energy_j for c in w.plans])
        for k, v in zip(("tp", "tm", "ep", "em"), (t[odd], tm[odd], e[odd], em[odd]), strict=True):
            allp[k].append(v)
        out.append(CheckResult.from_arrays(
            "perseus-plans", "A100-PCIe-80GB", w.model, t[odd], tm[odd], e[odd], em[odd],
            note=f"pp{w.pp}, {w.nmb} microbatches; odd-indexed plans held out",
            points={"x": np.array([c.plan_index for c in w.plans])[odd], "t_meas": tm[odd],
                    "t_pred": t[odd], "e_meas": em[odd], "e_pred": e[odd]}))
    cat = {k: np.concatenate(v) for k, v in allp.items()}
    out.insert(0, CheckResult.from_arrays(
        "perseus-plans", "A100-PCIe-80GB", "all 4 workloads", cat["tp"], cat["tm"], cat["ep"],
        cat["em"], note=(f"fitted on even plans: phi={prm.phi:.3f}, f_cap={prm.f_cap:.0f} MHz, "
                         f"c={prm.c:.3f}; 1F1B schedule assumed")))
    return out, prm
