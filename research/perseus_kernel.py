"""Kernel-level calibration and check on the Perseus stage profiles (A100-SXM, A40).

PRODUCT: validates the product's kernel model (``joulebound.gpumodel``) and fits its shipped
A100-SXM4 / A40 parameters.

The kernel model (:mod:`joulebound.gpumodel.kernel`, what ``characterize`` and the planner
use) is fitted **at kernel level**: a stage's time and energy at SM clock ``f`` are the sums over
the kernels of its analytic per-GPU trace (:func:`~.perseus_stage.stage_trace`: the stage's
layers at 1/TP of each layer's FLOPs and bytes), each kernel modeled at ``f`` and the top
memory clock. Only the absolute level of a series is not predicted (the traces have no
communication kernels and Perseus's stage work unit is undocumented): every series gets one
time scale and one energy scale (geometric means over its *calibration* clocks — lowest, middle
and highest — exactly as the stage check (a)); every other clock of the series is predicted.

Protocol (held-out clocks **and** held-out model): the device parameters are fitted on every
clock of one model's series (GPT-3 175B or BLOOM) and predict the other model's held-out
clocks, and vice versa; the table reports the pooled held-out error per GPU. The shipped
parameters are fitted on both models (a deployment choice, not a reported error), with a
bootstrap over series for their uncertainty.

Free parameters and what constrains them (memory clock fixed, so no memory-clock terms): the
time-vs-clock shape fixes the share of each series' time that scales with the core clock —
GEMM efficiency, GEMM DRAM traffic (reuse tile), DRAM bandwidth efficiency, the core-clock share
of memory time and the overlap exponent; the power-vs-clock shape fixes the V–f curve and the
static-to-dynamic power ratio; where time stops falling fixes the power limit (and with it the
absolute dynamic power).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from joulebound.gpumodel.characterize import trace_work
from joulebound.gpumodel.fit import FitResult, FreeParam, bootstrap, fit_params
from joulebound.gpumodel.kernel import KernelWork, kernel_time_energy
from joulebound.gpumodel.params import DeviceParams, default_params
from joulebound.hw.catalog import get_device
from joulebound.hw.spec import DeviceSpec
from joulebound.workload.trace import Trace
from research.perseus_stage import (
    DEVICES,
    GPUS,
    MODELS,
    StageData,
    load_stage_profiles,
    stage_trace,
)
from research.result import CheckResult


def free_params(spec: DeviceSpec, base: DeviceParams) -> list[FreeParam]:
    """The parameters fitted on stage profiles. Per-category efficiencies and the core-clock
    share of memory time were tried too: the stage profiles do not move them from their priors
    (one memory clock, every series the same kernel mix), so they stay defaults here."""
    fm = spec.max_core_mhz
    return [
        FreeParam("vf.knee_mhz", 0.35 * fm, 0.97 * fm, transform="lin"),
        FreeParam("vf.v_min", 0.45, 0.99, transform="lin"),
        FreeParam("core_dyn_w", 20.0, 2000.0, prior_sd=1.0),
        FreeParam("core_base_frac", 0.02, 0.9, prior=0.25, prior_sd=1.0, transform="logit"),
        FreeParam("idle_w", 5.0, 400.0, prior_sd=1.0),
        FreeParam("power_limit_w", 0.5 * spec.power_limit_default_w,
                  1.05 * spec.power_limit_default_w, prior=spec.power_limit_default_w,
                  prior_sd=0.1),
        FreeParam("gemm_tile", 32.0, 1e5, prior=base.gemm_tile, prior_sd=1.5),
        FreeParam("overlap_p", 1.0, 30.0, prior=4.0, prior_sd=0.7),
    ]


#: the parameters :func:`free_params` fits (their ``sources`` entry names this check)
FITTED = ("vf", "core_dyn_w", "core_base_frac", "idle_w", "power_limit_w", "gemm_tile", "overlap_p")


@dataclass
class StageSet:
    """The data and analytic traces of one GPU, ready for repeated model evaluation.

    The analytic traces are reduced once to their distinct kernels (``distinct[key]``, with
    ``counts[key]`` invocations each); every series of the same trace shares them."""

    sd: StageData
    spec: DeviceSpec
    distinct: dict[tuple[str, int, str], Trace]
    counts: dict[tuple[str, int, str], np.ndarray]
    key_of: list[tuple[str, int, str]]     # per series: its trace key
    clocks: np.ndarray                     # distinct SM clocks of the files (MHz)
    col: np.ndarray                        # per row: column of its clock in ``clocks``
    model_of: np.ndarray                   # per row: model name


def stage_set(data: Path, gpu: str) -> StageSet:
    """Read one GPU's stage profiles and build its analytic stage traces."""
    sd = load_stage_profiles(data, gpu)
    spec = get_device(DEVICES[gpu])
    key_of = [(m, 7 if s == 7 else 0, ph) for (m, s, ph) in sd.series]
    distinct, counts = {}, {}
    for k in dict.fromkeys(key_of):
        distinct[k], counts[k] = stage_trace(*k).distinct()
    clocks = np.unique(sd.freq)
    col = np.searchsorted(clocks, sd.freq)
    names = np.array([s[0] for s in sd.series])
    return StageSet(sd, spec, distinct, counts, key_of, clocks, col, names[sd.sid])


def series_sums(ss: StageSet, params: DeviceParams, activity: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Modeled (unscaled) stage time (s) and energy (J) per row of ``ss.sd``, each series's
    kernels at its power ``activity``."""
    spec = ss.spec
    works = {k: trace_work(tr, spec, params) for k, tr in ss.distinct.items()}
    S = len(ss.key_of)
    tc = np.concatenate([works[k].tc_max for k in ss.key_of])
    tm = np.concatenate([works[k].tm_max for k in ss.key_of])
    lam = np.concatenate([works[k].lam for k in ss.key_of])
    cnt = np.concatenate([ss.counts[k] for k in ss.key_of])
    owner = np.concatenate([np.full(len(ss.counts[k]), i) for i, k in enumerate(ss.key_of)])
    work = KernelWork(tc[:, None], tm[:, None], activity[owner][:, None], lam[:, None])
    out = kernel_time_energy(work, ss.clocks[None, :].astype(float),
                             np.full((1, len(ss.clocks)), float(spec.max_mem_mhz)),
                             spec.max_core_mhz, spec.max_mem_mhz, params)
    agg = np.zeros((S, len(owner)))
    agg[owner, np.arange(len(owner))] = cnt
    T, E = agg @ out["time_s"], agg @ out["energy_j"]
    return T[ss.sd.sid, ss.col], E[ss.sd.sid, ss.col]


def _group_mean(ss: StageSet, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mean of ``values`` (given on ``rows``) per series; 0 for a series without rows."""
    S = len(ss.sd.series)
    n = np.bincount(ss.sd.sid[rows], minlength=S).astype(float)
    return np.bincount(ss.sd.sid[rows], values, S) / np.maximum(n, 1.0)


def predict(ss: StageSet, params: DeviceParams, scale_rows: np.ndarray, iters: int = 2
            ) -> tuple[np.ndarray, np.ndarray]:
    """Stage time (s) and energy (J) per row, each series's time scale and power activity set
    on its rows in ``scale_rows`` (a few fixed-point steps: the activity changes the capped
    clock, hence the time)."""
    sd = ss.sd
    act = np.ones(len(sd.series))
    static = params.idle_w + params.mem_static_w
    for i in range(iters + 1):
        t, e = series_sums(ss, params, act)
        kt = np.exp(_group_mean(ss, scale_rows, np.log(sd.time[scale_rows] / t[scale_rows])))
        if i == iters:
            break
        p_meas = (sd.energy / sd.time)[scale_rows]
        p_mod = (e / t)[scale_rows]
        ratio = np.exp(_group_mean(ss, scale_rows, np.log(p_meas / p_mod)))
        dyn = _group_mean(ss, scale_rows, np.maximum(p_mod - static, 0.0) / p_mod)
        act = act * np.clip(1 + (ratio - 1) / np.maximum(dyn, 0.2), 0.3, 3.0)
    return t * kt[sd.sid], e * kt[sd.sid]


def residuals_fn(ss: StageSet, fit_rows: np.ndarray):  # -> Residuals
    """Relative time and energy errors on ``fit_rows`` (series scaled on those same rows); the
    resampling unit is the series."""
    sd = ss.sd

    def resid(p: DeviceParams) -> tuple[np.ndarray, np.ndarray]:
        ts, es = predict(ss, p, fit_rows)
        r = np.r_[np.log(ts[fit_rows] / sd.time[fit_rows]),
                  np.log(es[fit_rows] / sd.energy[fit_rows])]
        return r, np.r_[sd.sid[fit_rows], sd.sid[fit_rows]]

    return resid


def start_params(ss: StageSet) -> DeviceParams:
    """Default parameters of the GPU with the memory terms of its technology."""
    return default_params(ss.spec)


def fit(ss: StageSet, models: tuple[str, ...] | list[str] = MODELS,
        base: DeviceParams | None = None) -> FitResult:
    """Fit the kernel model on every clock of the series of ``models``."""
    base = base if base is not None else start_params(ss)
    rows = np.isin(ss.model_of, list(models))
    return fit_params(base, free_params(ss.spec, base), residuals_fn(ss, rows))


def predict_heldout(ss: StageSet, params: DeviceParams, models: tuple[str, ...] | list[str]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predictions on the held-out (non-calibration) clocks of ``models``'s series, each series
    scaled on its own 3 calibration clocks. Returns ``(rows, time, energy)``."""
    sd = ss.sd
    ts, es = predict(ss, params, sd.calib)
    rows = ~sd.calib & np.isin(ss.model_of, list(models))
    return rows, ts[rows], es[rows]


def run(data: Path) -> tuple[list[CheckResult], dict[str, FitResult]]:
    """Held-out-model check per GPU (fit on one model's series, predict the other's held-out
    clocks, both ways, pooled), plus the fits on both models (returned for shipping)."""
    out: list[CheckResult] = []
    fits: dict[str, FitResult] = {}
    for gpu, info in GPUS.items():
        ss = stage_set(data, gpu)
        sd = ss.sd
        tp, tm, ep, em = [], [], [], []
        per = {}
        for m in MODELS:
            other = [x for x in MODELS if x != m]
            res = fit(ss, other)
            rows, t, e = predict_heldout(ss, res.params, [m])
            tp.append(t)
            ep.append(e)
            tm.append(sd.time[rows])
            em.append(sd.energy[rows])
            per[m] = (t, sd.time[rows], e, sd.energy[rows])
        full = fit(ss)
        fits[gpu] = full
        out.append(CheckResult.from_arrays(
            "perseus-kernel", info["label"], "kernel model, held-out model and clocks",
            np.concatenate(tp), np.concatenate(tm), np.concatenate(ep), np.concatenate(em),
            note=f"kernel-level fit ({len(free_params(ss.spec, start_params(ss)))} device "
                 "parameters) on every clock of one model's series, predicting the other "
                 "model's held-out clocks (GPT-3 <-> BLOOM); per-series time/energy scale on "
                 "its 3 calibration clocks; analytic stage traces, TP=8 share, no "
                 "communication kernels"))
        for m in MODELS:
            t, tmeas, e, emeas = per[m]
            out.append(CheckResult.from_arrays(
                "perseus-kernel", info["label"], f"{m} (fitted on the other model)", t, tmeas,
                e, emeas, note="subset of the row above"))
    return out, fits


def draws(data: Path, gpu: str, full: FitResult, n_draws: int = 24, seed: int = 0,
          progress=None) -> list[dict[str, float]]:
    """Bootstrap over series (units) around the full fit: the shipped ``draws``."""
    ss = stage_set(data, gpu)
    base = start_params(ss)
    rows = np.ones(len(ss.sd.freq), bool)
    return bootstrap(base, free_params(ss.spec, base), residuals_fn(ss, rows),
                     n_units=len(ss.sd.series), n_draws=n_draws, seed=seed, start=full,
                     progress=progress)
