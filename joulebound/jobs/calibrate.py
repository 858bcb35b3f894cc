"""Calibrate the mechanistic predictor on the open measured data, and validate it honestly.

    .venv/bin/python -m joulebound.jobs.calibrate --data ../shared/data [--sweep runs.db]

rewrites ``joulebound/jobs/data/mechanistic.json`` (the parameters ``predict`` and ``advise``
use) and prints the validation cuts. Re-run it whenever the GPU model changes: nothing here is a
hand-typed constant.

**Data → jobs** (one observation = one measured optimizer step or pipeline iteration):

======================  ====================================================================
data set                 what it is, and which parameter it constrains
======================  ====================================================================
``mayaki_ecai2025``      1,576 single-GPU steps (A100 PCIe TF32, RTX 2080 Ti FP32), 41k–410k
                         tokens per step: **κ** (framework factor) on large steps. Its energy
                         is CodeCarbon GPU+CPU+RAM at a near-constant ≈ 98 W whatever the
                         utilization (see :func:`mayaki_power_check`), so it constrains time
                         only, and the host power (:mod:`joulebound.jobs.host`).
``zeus_nsdi23``          BERT-base SQuAD single-GPU steps on A40 / V100 / RTX 6000 / P100 at
                         every power limit, 1.5k–28k tokens, fp16 mixed precision (see
                         :data:`ZEUS_DTYPE_NOTE`): κ on small steps, the **launch floor τ** and
                         **per-step overhead**; NVML energy checks the power path (incl. power
                         limits). (Sentiment140 rows are left out:
                         their sequence length is not recorded and the measured steps are 2.5–4×
                         faster than any S = 128 BERT-base step, i.e. the tweets were padded
                         dynamically.)
``perseus``              pipeline-parallel iterations (A100 PCIe pp4, A40 pp8 over 2 nodes, A40
                         dp2·tp2·pp4 over 4 nodes) at maximum clocks, NVML energy: κ at fp16
                         with recomputation, the 1F1B schedule, **ρ** through the bubbles.
                         T5-3B is left out (encoder–decoder with d_kv·h ≠ d, not in the traces).
``sweep`` (optional)     the project's own sweep store: any strategy, measured energy.
======================  ====================================================================

**Fit.** ``(log κ, log τ, t_step, log ρ)`` by robust least squares (soft-L1) on log time of every
observation and log GPU energy of the NVML-metered ones, each data set weighted equally. The
interval widths (:class:`~joulebound.jobs.mechanistic.MechParams` ``sigma``) come from the
residuals: ``compute`` = the between-data-set spread of κ (floored at 0.5, inflated for the few
data sets) combined with the pooled within-data-set spread, ``power`` = the RMS log
residual of average power, ``device`` = the spread of per-GPU mean residuals, ``pipeline`` = the
RMS residual of the pipeline iterations; ``comm`` stays a prior (0.7: no open data has a
measured DDP/FSDP/TP run) and ``overhead`` is the RMS residual of the steps where overhead is
more than a fifth of the step (prior 0.7 when none).

**Cuts** (:func:`cuts`): in-sample, leave-one-data-set-out, leave-one-GPU-out, large → small
steps, each data set's upper → lower half of step sizes, single-GPU → multi-GPU. Per cut and
quantity: MAPE, median predicted/measured, median |error|, share within ×1.25 and ×2, coverage
of the 90 % interval (computed from the training side's parameters only).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MEASURED
from joulebound.jobs.job import Job, resolve
from joulebound.jobs.mechanistic import (
    MechParams,
    Step,
    compose,
    fabric_for,
    interval,
    params_path,
    work_keys,
)
from joulebound.jobs.stepcost import characterize_parts

log = logging.getLogger("joulebound.jobs.calibrate")  # also when run as __main__

DATASETS = ("mayaki_ecai2025", "zeus_nsdi23", "perseus", "vtrain")
TARGETS = {"median_abs_err": 0.20, "within_x2": 0.90, "coverage90": 0.80}


@dataclass
class Obs:
    """One measured step: the job and what was measured (s, J summed over the job's GPUs)."""

    dataset: str
    family: str
    job: Job
    time_s: float
    energy_j: float
    energy_basis: str  # "nvml" (GPU boards) | "codecarbon" (GPU+CPU+RAM, run average)
    meta: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# data sets → observations


def mayaki_obs(data: Path) -> list[Obs]:
    """Mayaki ECAI 2025 rows (time per step s, CodeCarbon energy per step J)."""
    from joulebound.jobs.datasets import load_mayaki

    df = load_mayaki(data / "mayaki_ecai2025")
    out = []
    for r in df.itertuples():
        job = Job(layers=int(r.layers), hidden=int(r.hidden), heads=int(r.heads), seq=int(r.seq),
                  arch="gpt" if r.arch == "gpt" else "bert", ff=2048, vocab=1000, batch=int(r.batch),
                  dtype="tf32", device=str(r.device), name=f"mayaki/{r.family}", flash_attention=False)
        out.append(Obs("mayaki_ecai2025", f"{r.device}/{r.family}", job, float(r.time_s),
                       float(r.energy_j), "codecarbon"))
    return out


def zeus_obs(data: Path) -> list[Obs]:
    """Zeus NSDI'23 BERT-base SQuAD rows at every power limit (per step: s, J)."""
    import pandas as pd

    from joulebound.jobs.datasets import ZEUS_BERT, ZEUS_GPUS

    out = []
    meta = ZEUS_BERT["squad"]
    for f in sorted((data / "zeus_nsdi23").glob("summary_power_*.csv")):
        gpu = f.stem.replace("summary_power_", "")
        dev = ZEUS_GPUS.get(gpu, (gpu, None))[0]
        raw = pd.read_csv(f)
        raw = raw[raw["network"].str.contains("bert", case=False) & (raw["dataset"] == "squad")]
        dtype = "fp16"  # mixed precision: in FP32 the measured steps would need 82-106 % of the
        # V100/RTX 6000/P100 FP32 peak (6·N·T + attention FLOPs / measured time), see ZEUS_DTYPE_NOTE
        for r in raw.itertuples():
            t = float(r.time_per_epoch) * int(r.batch_size) / meta["samples"]
            job = Job(layers=12, hidden=768, heads=12, seq=meta["seq"], arch="bert", ff=3072,
                      vocab=30522, batch=int(r.batch_size), dtype=dtype, device=dev, flash_attention=False,
                      power_limit_w=float(r.power_limit), name=f"zeus/{dev}/b{r.batch_size}")
            out.append(Obs("zeus_nsdi23", f"{dev}/b{r.batch_size}", job, t,
                           t * float(r.average_power), "nvml",
                           {"power_limit_w": float(r.power_limit), "top_limit": False}))
    for o in out:  # mark each GPU's highest limit
        top = max(x.meta["power_limit_w"] for x in out if x.job.device == o.job.device)
        o.meta["top_limit"] = o.meta["power_limit_w"] == top
    return out


#: why the Zeus BERT-base rows are priced in fp16 (AMP)
ZEUS_DTYPE_NOTE = ("Zeus does not record the precision. At its highest power limit BERT-base SQuAD "
                   "(88,524 features × 384 tokens) needs 3.2 TFLOP per 12-sequence step; the measured "
                   "epochs give 14.8 TFLOP/s on the V100 (FP32 peak 14.0), 13.4 on the RTX 6000 "
                   "(16.3) and 8.2 on the P100 (9.3): impossible or implausible in FP32, so the runs "
                   "used fp16 mixed precision (AMP)")
_PERSEUS_VOCAB = {"gpt3-xl": 50257, "gpt3-2.7b": 50257, "gpt3-6.7b": 50257, "bert-huge-uncased": 30522,
                  "bloom-3b": 250880}
_PERSEUS_INIT = {"gpt": 2, "bert": 1, "bloom": 1}  # Merak's embedding modules before the layers


def _stages(partition: str, layers: int, pp: int, n_init: int) -> tuple[int, ...]:
    if not str(partition).startswith("custom:"):
        base, extra = divmod(layers, pp)
        return tuple(base + (1 if i < extra else 0) for i in range(pp))
    b = [int(x) for x in str(partition).split(":", 1)[1].split(",")]
    out = []
    for lo, hi in zip(b[:-1], b[1:], strict=True):
        out.append(sum(1 for m in range(lo, hi) if n_init <= m < n_init + layers))
    if sum(out) != layers or len(out) != pp or min(out) < 1:
        raise JouleboundError(f"Perseus partition {partition!r} does not split {layers} layers into {pp}")
    return tuple(out)


def perseus_obs(data: Path) -> list[Obs]:
    """Perseus pipeline iterations at maximum clocks (s, J summed over GPUs).

    Each row of :func:`~joulebound.jobs.datasets.load_perseus` is matched to its workload
    definition (``perseus/workloads/dp*+pp*+tp*/models_<GPU>.csv``): degrees, micro-batch size,
    micro-batches and Merak's layer partition (module boundaries, with 2 embedding modules before
    the layers for GPT, 1 for BERT and BLOOM). Merak trains in fp16 with activation
    checkpointing on by default; 4 GPUs per node, InfiniBand between nodes (HDR assumed)."""
    import pandas as pd

    from joulebound.jobs.datasets import PERSEUS_MODELS, load_perseus

    p = data / "perseus"
    df = load_perseus(p)
    work = {}
    for f in sorted((p / "workloads").glob("*/*.csv")):
        gpu = "A100" if "A100" in f.name else "A40"
        for r in pd.read_csv(f).itertuples():
            work[(gpu, r.model, int(r.dp) * int(r.tp) * int(r.pp))] = r
    out = []
    for r in df.itertuples():
        gpu = "A100" if str(r.device).startswith("a100") else "A40"
        w = work.get((gpu, r.family, int(r.gpus)))
        if r.arch == "t5" or w is None:
            continue
        m = PERSEUS_MODELS[r.family]
        heads = 16 if r.family == "bert-huge-uncased" else int(m["heads"])  # bert-large config
        stages = _stages(w.partition_method, int(m["layers"]), int(w.pp), _PERSEUS_INIT[m["arch"]])
        job = Job(layers=int(m["layers"]), hidden=int(m["hidden"]), heads=heads, seq=int(m["seq"]),
                  arch="bert" if m["arch"] == "bert" else "gpt", ff=int(m["ff"]),
                  vocab=_PERSEUS_VOCAB[r.family], batch=int(w.microbatch_size),
                  grad_accum=int(w.num_microbatches), dtype="fp16", recompute=True,
                  device=str(r.device), gpus=int(r.gpus), strategy="pp", tp=int(w.tp), pp=int(w.pp),
                  pp_stages=stages, gpus_per_node=4, inter_node="ib-hdr", flash_attention=False,
                  name=f"perseus/{gpu}/{r.family}")
        out.append(Obs("perseus", f"{gpu}/{r.family}", job, float(r.time_s), float(r.energy_j),
                       "nvml", {"origin": getattr(r, "origin", "")}))
    return out


#: vTrain's Megatron-DeepSpeed runs (``vtrain/README`` in the shared data): A100 nodes of 8 GPUs,
#: 800 Gb/s InfiniBand per node (4 × HDR), NVLink 3 inside a node, fp16 mixed precision
#: (Megatron's default; not stated upstream), full activation recomputation (``use_checkpoint``),
#: 1F1B, gradients all-reduced after the backward pass (``use_gradient_bucket`` false), GPT-2's
#: 50,257-token vocabulary padded to a multiple of 128·tp (Megatron's default); the eager
#: attention of 2022's Megatron-DeepSpeed (fused softmax, no FlashAttention)
VTRAIN_DEVICE = "a100-sxm4-80gb"


def _megatron_vocab(tp: int, vocab: int = 50257, divisible_by: int = 128) -> int:
    step = divisible_by * tp
    return -(-vocab // step) * step


def vtrain_obs(data: Path) -> list[Obs]:
    """vTrain's measured Megatron-DeepSpeed iteration times (time only, no energy): 1,440
    single-node rows (2–8 A100) and 109 multi-node rows (64–512 A100), family = model size."""
    import pandas as pd

    out = []
    for fname, kind in (("ground_truth_single.csv", "single-node"), ("ground_truth_multi.csv", "multi-node")):
        f = data / "vtrain" / fname
        if not f.exists():
            continue
        raw = pd.read_csv(f, encoding="utf-8-sig")
        for r in raw.itertuples(index=False):
            row = dict(zip(raw.columns, r, strict=True))
            tp, dp, pp = int(row["tensor parallelism"]), int(row["data parallelism"]), int(row["pipeline parallelism"])
            L, d, h = int(row["# layers"]), int(row["hidden size"]), int(row["attention heads"])
            mb, gb = int(row["micro batch"]), int(row["global batch"])
            size = f"h{d}-L{L}"
            job = Job(layers=L, hidden=d, heads=h, seq=int(row["sequence length"]), arch="gpt",
                      vocab=_megatron_vocab(tp), batch=mb, global_batch=gb, grad_accum=gb // (mb * dp),
                      dtype="fp16", recompute=True, device=VTRAIN_DEVICE, gpus=tp * dp * pp,
                      strategy="ddp" if dp > 1 else ("pp" if pp > 1 else "tp"), tp=tp, pp=pp,
                      interconnect="nvlink3", inter_node="ib-hdr", gpus_per_node=8, nics_per_node=4,
                      framework="megatron", flash_attention=False, name=f"vtrain/{size}")
            out.append(Obs("vtrain", size, job, float(row["iteration time (ms)"]) / 1e3, float("nan"),
                           "none", {"node": kind, "gpus": tp * dp * pp}))
    return out


def sweep_obs(db: Path, device: str | None = None, skipped: list[str] | None = None) -> list[Obs]:
    """A sweep store's GPU rows with measured energy (per step); rows the predictor cannot model
    (e.g. tensor parallelism that does not divide the heads) are skipped with their reason
    appended to ``skipped``."""
    from joulebound.jobs.datasets import load_sweep

    df = load_sweep(db, device)
    out = []
    for r in df.itertuples():
        if r.device == "cpu" or not (r.energy_j == r.energy_j) or r.energy_provenance != MEASURED:
            continue
        job = Job(layers=int(r.layers), hidden=int(r.hidden), heads=int(r.heads), seq=int(r.seq),
                  arch="gpt" if r.arch == "gpt" else "bert", ff=int(r.ff), global_batch=int(r.batch),
                  dtype=str(r.dtype), device=str(r.device), gpus=int(r.gpus),
                  strategy=str(r.strategy), name=f"sweep/{r.config_id}")
        try:
            resolve(job)
        except JouleboundError as exc:
            if skipped is not None:
                skipped.append(f"{r.config_id}: {exc}")
            continue
        out.append(Obs("sweep", str(r.family), job, float(r.time_s), float(r.energy_j), "nvml"))
    return out


def load_observations(data: str | Path, sweep: str | Path | None = None,
                      device: str | None = None) -> list[Obs]:
    """Every usable measured step of the open data (and a sweep store)."""
    d = Path(data)
    obs: list[Obs] = []
    for name, fn in (("mayaki_ecai2025", mayaki_obs), ("zeus_nsdi23", zeus_obs), ("perseus", perseus_obs),
                     ("vtrain", vtrain_obs)):
        if (d / name).exists():
            obs += fn(d)
    if sweep is not None:
        obs += sweep_obs(Path(sweep), device)
    if not obs:
        raise JouleboundError(f"{d}: none of {', '.join(DATASETS)} found (pass the shared data folder)")
    return obs


# ---------------------------------------------------------------------------------------------
# prepared observations (the GPU model runs once; the free parameters act afterwards)


@dataclass
class Prepared:
    obs: list[Obs]
    resolved: list
    parts: list
    fabrics: list

    def subset(self, idx: np.ndarray) -> Prepared:
        return Prepared([self.obs[i] for i in idx], [self.resolved[i] for i in idx],
                        [self.parts[i] for i in idx], [self.fabrics[i] for i in idx])

    def __len__(self) -> int:
        return len(self.obs)

    def col(self, attr: str) -> np.ndarray:
        return np.array([getattr(o, attr) for o in self.obs])


def prepare(obs: list[Obs]) -> Prepared:
    rs = [resolve(o.job) for o in obs]
    keys = [work_keys(r) for r in rs]
    parts = characterize_parts(keys)
    return Prepared(obs, rs, [parts[k] for k in keys], [fabric_for(r) for r in rs])


def steps(prep: Prepared, prm: MechParams) -> list[Step]:
    return [compose(r, pa, prm, fb) for r, pa, fb in zip(prep.resolved, prep.parts, prep.fabrics,
                                                         strict=True)]


class _Fast:
    """Vectorized time and GPU energy of the single-GPU observations (the same arithmetic as
    :func:`~joulebound.jobs.mechanistic.compose` for one GPU, checked by a test); the
    multi-GPU ones go through ``compose``. Used inside the fit, where it is evaluated ~100×."""

    def __init__(self, prep: Prepared) -> None:
        self.prep = prep
        self.single = np.array([r.gpus == 1 for r in prep.resolved])
        t_k, e_k, seg_of = [], [], []
        seg_mult, seg_n, seg_row = [], [], []
        n = len(prep)
        self.opt = np.zeros((n, 5))  # c0+c1·P+ovh (s), same for J, floor kernels, sgd factor, m
        self.idle = np.array([pa.idle_w for pa in prep.parts])
        self.framework = np.array([r.framework for r in prep.resolved])
        for i in np.flatnonzero(self.single):
            r, pa = prep.resolved[i], prep.parts[i]
            m, L = r.grad_accum, r.job.layers
            for part in ("layer_f", "layer_b", "pre_f", "pre_b", "post_f", "post_b"):
                mult = m * (L if part.startswith("layer") else 1)
                seg_of.append(np.full(len(pa.t[part]), len(seg_mult)))
                t_k.append(pa.t[part])
                e_k.append(pa.e[part])
                seg_mult.append(float(mult))
                seg_n.append(len(pa.t[part]))
                seg_row.append(i)
            P = r.params
            sgd = 20 / 28 if r.job.optimizer == "sgd" else 1.0
            ovh = pa.kernel_overhead_s * (L - 1)
            base_t, base_e = pa.opt_t[0] + pa.opt_t[1] * P, pa.opt_e[0] + pa.opt_e[1] * P
            self.opt[i] = (base_t + ovh, base_e + ovh * base_e / max(base_t, 1e-30), L + 3, sgd, m)
        self.t_k = np.concatenate(t_k) if t_k else np.zeros(0)
        self.e_k = np.concatenate(e_k) if e_k else np.zeros(0)
        self.seg = np.concatenate(seg_of) if seg_of else np.zeros(0, int)
        self.seg_mult = np.array(seg_mult, float)
        self.seg_n = np.array(seg_n, float)
        self.seg_row = np.array(seg_row, int)
        self.n = n

    def __call__(self, prm: MechParams, kappa_rows: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """(time s, GPU energy J) per observation; ``kappa_rows`` overrides κ row by row."""
        tau = prm.launch_s
        fws = np.unique(self.framework)
        kap = np.empty(self.n)
        host = np.empty(self.n)
        for f in fws:
            kap[self.framework == f] = prm.kappa_for(str(f))
            host[self.framework == f] = prm.host_for(str(f))
        if kappa_rows is not None:
            kap = np.asarray(kappa_rows, float)
        ns = len(self.seg_mult)
        kseg = kap[self.seg_row]
        tk = self.t_k * kseg[self.seg]
        te = np.maximum(tk, tau)
        s_tk = np.bincount(self.seg, tk, ns)
        s_t = np.maximum(np.bincount(self.seg, te, ns), self.seg_n * host[self.seg_row])
        t_fb = np.bincount(self.seg_row, self.seg_mult * s_t, self.n)
        gap = np.bincount(self.seg_row, self.seg_mult * (s_t - s_tk), self.n)
        e_fb = kap * np.bincount(self.seg_row, self.seg_mult * np.bincount(self.seg, self.e_k, ns), self.n)
        o = self.opt
        tko = np.maximum(kap * o[:, 0], 0.0) * o[:, 3]
        eko = np.maximum(kap * o[:, 1], 0.0) * o[:, 3]
        t_opt = np.maximum(tko, np.maximum(tau, host) * o[:, 2])
        t = t_fb + t_opt + prm.step_s
        p_wait = prm.wait_ratio * self.idle
        e = e_fb + eko + p_wait * (gap + (t_opt - tko) + prm.step_s)
        with_kappa: dict[tuple[str, float], MechParams] = {}  # one per (framework, cell κ)
        for i in np.flatnonzero(~self.single):
            f, kk = str(self.framework[i]), float(kap[i])
            p_i = with_kappa.get((f, kk))
            if p_i is None:
                fw = {**prm.frameworks, f: {**prm.frameworks.get(f, {"host_s": prm.host_for(f)}), "kappa": kk}}
                p_i = with_kappa[(f, kk)] = replace(prm, kappa=kk, frameworks=fw)
            x = compose(self.prep.resolved[i], self.prep.parts[i], p_i, self.prep.fabrics[i])
            t[i], e[i] = x.time_s, x.gpu_energy_j
        return t, e


def predicted(prep: Prepared, prm: MechParams) -> dict[str, np.ndarray]:
    """Predicted time (s), GPU and GPU+host energy (J) and their log-space σ (time, energy)."""
    st = steps(prep, prm)
    t = np.array([s.time_s for s in st])
    eg = np.array([s.gpu_energy_j for s in st])
    eh = np.array([s.host_energy_j for s in st])
    sig = [interval(r, s, prm, pa.key.device) for r, s, pa in zip(prep.resolved, st, prep.parts,
                                                                   strict=True)]
    return {"time": t, "gpu": eg, "total": eg + eh, "s_t": np.array([x[0] for x in sig]),
            "s_e": np.array([x[1] for x in sig]),
            "overhead_share": np.array([s.overhead_s / s.time_s for s in st]),
            "compute_share": np.array([s.compute_s / s.time_s for s in st])}


# ---------------------------------------------------------------------------------------------
# fit


def _weights(prep: Prepared, mask: np.ndarray | None = None) -> np.ndarray:
    ds = prep.col("dataset")
    w = np.zeros(len(ds))
    sel = np.ones(len(ds), bool) if mask is None else mask
    for d in np.unique(ds[sel]):
        m = sel & (ds == d)
        w[m] = 1.0 / math.sqrt(m.sum())
    return w


#: the Perseus artifact's blocking power (W) of a GPU waiting on communication (published
#: constants of Chung et al., SOSP'24: A100 83.64 W, A40 70.38 W)
BLOCKING_POWER_W = {"a100-pcie-80gb": 83.64, "a40": 70.38}


def wait_ratio_from_blocking() -> tuple[float, dict]:
    """ρ = mean over the GPUs of P_block (published) / P_idle (the GPU model's idle power)."""
    from joulebound.gpumodel import params_for, resolve_device

    ratios = {d: w / params_for(resolve_device(d)).idle_w for d, w in BLOCKING_POWER_W.items()}
    return float(np.mean(list(ratios.values()))), ratios


def fit(prep: Prepared, base: MechParams | None = None, framework_known: bool = False) -> MechParams:
    """Fit (κ, τ, t_step) on ``prep``'s times, set ρ from the published blocking powers, and
    derive the interval widths (module docstring). ``framework_known``: the data are the user's
    own runs of the framework they will predict (a sweep store), so the between-data-set term of
    the interval is left out."""
    base = base or MechParams()
    rho, rho_src = wait_ratio_from_blocking()
    base = replace(base, wait_ratio=rho)
    t_meas = prep.col("time_s").astype(float)
    ds = prep.col("dataset")
    dev = np.array([pa.key.device for pa in prep.parts])
    cell_names = sorted({(str(a), str(b)) for a, b in zip(ds, dev, strict=True)})
    cell = np.array([cell_names.index((str(a), str(b))) for a, b in zip(ds, dev, strict=True)])
    fast = _Fast(prep)
    sol, make = _fit_times(prep, base, fast, t_meas, cell_names, cell, framework_known)
    nc = len(cell_names)
    prm = make(sol.x)
    pr = predicted(prep, prm)
    r_t = np.log(pr["time"] / t_meas)
    sig = _interval_sigmas(prep, prm, fast, sol.x[:nc], cell_names, cell, pr, r_t,
                           framework_known)
    prm = replace(prm, frameworks=_framework_entries(prm.frameworks, sig, prep, r_t))
    devs = np.unique(dev)
    toks = np.array([r.micro_batch * r.job.seq for r in prep.resolved], float)
    from joulebound.jobs.mechanistic import kinds

    seen = sorted({k for r in prep.resolved for k in kinds(r)})
    prm = replace(prm, sigma=sig, devices_seen=tuple(sorted(str(d) for d in devs)),
                  strategies_seen=tuple(seen),
                  tokens_range=(float(toks.min()), float(toks.max())),
                  max_gpus_seen=int(max(r.gpus for r in prep.resolved)))
    cell_kappa = {f"{a}/{b}": float(math.exp(v)) for (a, b), v in zip(cell_names, sol.x[:nc], strict=True)}
    nvml = prep.col("energy_basis") == "nvml"
    prm.provenance = {
        "calibration": "fit",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "rows": {str(d): int((ds == d).sum()) for d in np.unique(ds)},
        "devices": [str(d) for d in devs],
        "energy_rows_nvml": int(nvml.sum()),
        "fit": {"cost": float(sol.cost), "nfev": int(sol.nfev), "status": int(sol.status),
                "loss": "soft_l1 on log time, f_scale 0.2, data sets weighted equally"},
        "wait_ratio_from": {"published_blocking_power_w": BLOCKING_POWER_W,
                            "ratio_to_gpu_model_idle": rho_src,
                            "source": "Perseus artifact constants (Chung et al., SOSP'24), published"},
        "median_time_ratio_by_dataset": {str(d): float(np.exp(np.median(r_t[ds == d])))
                                         for d in np.unique(ds)},
        "kappa_by_dataset_and_gpu": cell_kappa,
        "kappa_rule": "κ of a framework = exp(mean over its data sets of the mean log κ of their GPUs)",
        "framework_of_dataset": _dataset_frameworks(prep),
        "constrains": CONSTRAINS,
        "gpu_model": prep.parts[0].model_meta if prep.parts else {},
    }
    return prm


def _dataset_frameworks(prep: Prepared) -> dict[str, str]:
    """The ``--framework`` of each data set's runs (one per data set)."""
    return {str(o.dataset): str(r.framework) for o, r in zip(prep.obs, prep.resolved, strict=True)}


#: bounds of a fitted host dispatch time per analytic-trace kernel (s)
HOST_BOUNDS = (2e-6, 2e-3)


def _fit_times(prep: Prepared, base: MechParams, fast: _Fast, t_meas: np.ndarray,
               cell_names: list[tuple[str, str]], cell: np.ndarray, framework_known: bool = False
               ) -> tuple[Any, Callable[[np.ndarray], MechParams]]:
    """Robust least squares on log step time: one log κ per (data set, GPU) cell, t_step and
    the log host dispatch time per kernel of Megatron (vTrain's small tensor-parallel layers are
    host-bound) and — for the user's own runs (``framework_known``) — of their framework too
    (their host is not ours; Hugging Face's default is measured,
    :mod:`joulebound.workload.dispatch`). Returns scipy's solution and ``make(x) -> MechParams``
    (each framework's κ from its cells')."""
    from scipy.optimize import least_squares
    from threadpoolctl import threadpool_limits

    from joulebound.workload.dispatch import FRAMEWORKS

    w_t = _weights(prep)
    nc = len(cell_names)
    ds_fw = _dataset_frameworks(prep)
    present = sorted(set(ds_fw.values()))
    fit_host = [f for f in present if f == "megatron" or framework_known]

    def prior_host(f: str) -> float:
        return base.host_for(f) or (MEGATRON_HOST_PRIOR_S if f == "megatron" else FRAMEWORKS[f].host_s)

    def make(x: np.ndarray) -> MechParams:
        fws: dict[str, dict] = {}
        for name in present:
            sel = [i for i, (d, _) in enumerate(cell_names) if ds_fw[d] == name]
            lk = _global_log_kappa(x[:nc][sel], [cell_names[i] for i in sel])
            host = (math.exp(x[nc + 1 + fit_host.index(name)]) if name in fit_host
                    else FRAMEWORKS[name].host_s)
            fws[name] = {"kappa": float(math.exp(lk)), "host_s": float(host)}
        kap = fws.get("hf", next(iter(fws.values())))["kappa"]
        return replace(base, kappa=float(kap), launch_s=0.0, step_s=max(x[nc], 0.0), frameworks=fws)

    def resid(x: np.ndarray) -> np.ndarray:
        t, _ = fast(make(x), np.exp(x[:nc])[cell])
        return w_t * np.log(t / t_meas)

    # no per-kernel launch floor τ any more: the host bound (dispatch per kernel) replaces it
    nh = len(fit_host)
    lo = np.r_[np.full(nc, math.log(0.2)), 0.0, np.full(nh, math.log(HOST_BOUNDS[0]))]
    hi = np.r_[np.full(nc, math.log(10.0)), 0.5, np.full(nh, math.log(HOST_BOUNDS[1]))]
    x0 = np.r_[np.full(nc, math.log(base.kappa)), base.step_s, [math.log(prior_host(f)) for f in fit_host]]
    xs = np.r_[np.full(nc, 0.3), 0.01, np.full(nh, 0.3)]
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    with threadpool_limits(1):  # BLAS threads thrash on an 11-column Jacobian
        sol = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.2,
                            x_scale=xs, max_nfev=200)
    return sol, make


#: prior of Megatron's host time per analytic-trace kernel (s), the fit's start
MEGATRON_HOST_PRIOR_S = 60e-6
#: between-stack spread of a Megatron-family framework's κ (log units): vTrain is the only open
#: measured Megatron data set, so how much another Megatron / NeMo stack differs is a prior
SIGMA_MEGATRON_BETWEEN = 0.15
#: extra spread (log units) for a framework with no measured run (eager, compiled)
SIGMA_UNCALIBRATED_FRAMEWORK = 0.3


def _framework_entries(fws: dict[str, dict], sig: dict[str, float], prep: Prepared,
                       r_t: np.ndarray) -> dict[str, dict]:
    """Every ``--framework``'s κ, host time per kernel and compute spread, with sources: the
    calibrated ones from the fit; ``eager`` (hf's κ) and ``compiled`` (hf's κ over TorchInductor's
    published speedup) have no open measured runs: their own host time and a wider spread."""
    from joulebound.workload.dispatch import DISPATCH_S, FRAMEWORKS, INDUCTOR_TRAIN_SPEEDUP

    def measured_host(fw) -> str:
        return (f"measured: {DISPATCH_S[fw.dispatch] * 1e6:.1f} µs per launched kernel (H200 host, "
                f"docs/gpu-validation.md) × {fw.kernels_per_trace_kernel:.2f} launched kernels per "
                "trace kernel")

    ds_fw = _dataset_frameworks(prep)
    fw_rows = np.array([r.framework for r in prep.resolved])
    out: dict[str, dict] = {}
    for name, e in fws.items():
        sets = sorted(d for d, f in ds_fw.items() if f == name)
        within = float(np.sqrt(np.mean(r_t[fw_rows == name] ** 2))) if (fw_rows == name).any() else 0.0
        if name == "hf":
            s_c = sig["compute"]
        else:
            s_c = math.hypot(within, SIGMA_MEGATRON_BETWEEN)
        fitted_host = name == "megatron" or sets == ["sweep"]
        host_src = "fitted on " + ", ".join(sets) if fitted_host else measured_host(FRAMEWORKS[name])
        out[name] = {**e, "sigma_compute": float(s_c), "kappa_source": "fitted on " + ", ".join(sets),
                     "host_source": host_src}
    hf = out.get("hf")
    for name, factor, why in (
            ("eager", 1.0, "assumed: hf's κ (no open measured eager runs)"),
            ("compiled", 1.0 / INDUCTOR_TRAIN_SPEEDUP,
             f"calibrated on published figures: hf's κ / {INDUCTOR_TRAIN_SPEEDUP} (TorchInductor's "
             "training speedup over eager, geometric mean of 180+ models on A100, Ansel et al. "
             "ASPLOS'24)")):
        if name in out or hf is None:
            continue
        fw = FRAMEWORKS[name]
        out[name] = {"kappa": hf["kappa"] * factor, "host_s": fw.host_s,
                     "sigma_compute": float(math.hypot(hf["sigma_compute"], SIGMA_UNCALIBRATED_FRAMEWORK)),
                     "kappa_source": why, "host_source": measured_host(fw)}
    return out


def _interval_sigmas(prep: Prepared, prm: MechParams, fast: _Fast, log_kappa: np.ndarray,
                     cell_names: list[tuple[str, str]], cell: np.ndarray,
                     pr: dict[str, np.ndarray], r_t: np.ndarray,
                     framework_known: bool) -> dict[str, float]:
    """The interval's log-scale widths from the residuals of the fitted ``prm`` (its cells'
    ``log_kappa``; module docstring): compute, between frameworks, within, power, device,
    pipeline and overhead terms."""
    t_meas = prep.col("time_s").astype(float)
    e_meas = prep.col("energy_j").astype(float)
    nvml = prep.col("energy_basis") == "nvml"
    ds = prep.col("dataset")
    t_cell, _ = fast(prm, np.exp(log_kappa)[cell])
    r_cell = np.log(t_cell / t_meas)  # residual with each cell's own κ
    sig = dict(prm.sigma)
    ds_fw = _dataset_frameworks(prep)
    main = "hf" if "hf" in ds_fw.values() else next(iter(ds_fw.values()))
    keep = [i for i, (d, _) in enumerate(cell_names) if ds_fw[d] == main]  # κ spreads: one framework
    if keep:
        rows = np.isin(cell, keep)
        remap = {c: k for k, c in enumerate(keep)}
        sub_cell = np.array([remap[c] for c in cell[rows]])
        sig["compute"], sig["framework_between"], sig["within"] = _framework_sigma(
            log_kappa[keep], [cell_names[i] for i in keep], r_cell[rows], sub_cell, framework_known)
    if nvml.any():
        r_p = np.log((pr["gpu"] / pr["time"]) / (e_meas / t_meas))[nvml]
        sig["power"] = _balanced_rms(r_p, ds[nvml])
    sig["device"] = _device_sigma(log_kappa[keep], [cell_names[i] for i in keep])
    pipe = np.array([r.pp > 1 for r in prep.resolved])
    if pipe.sum() >= 3:
        sig["pipeline"] = float(max(np.sqrt(np.mean((r_t[pipe] - np.mean(r_t[pipe])) ** 2)), 0.05))
    ovh = pr["overhead_share"] > 0.2
    if ovh.sum() >= 5:
        sig["overhead"] = float(max(np.sqrt(np.mean(r_cell[ovh] ** 2)) / np.mean(pr["overhead_share"][ovh]),
                                    0.1))
    return sig


#: which data constrains which parameter (also in docs/scaling.md)
CONSTRAINS = {
    "kappa": "time of every data set: Mayaki (large single-GPU steps, TF32/FP32), Zeus (BERT-base "
             "SQuAD small steps, 4 GPUs, power limits), Perseus (fp16 pipeline stages)",
    "launch_s": "retired (0): the per-kernel launch floor is replaced by each framework's host dispatch "
                "time per kernel (hf: measured on the H200 host; megatron: fitted on vTrain's "
                "single-node runs, whose small tensor-parallel layers are host-bound)",
    "frameworks": "κ per framework from its data sets (hf: Mayaki, Zeus, Perseus; megatron: vTrain)",
    "step_s": "small steps (Zeus) against large ones (Mayaki, Perseus)",
    "wait_ratio": "published blocking power of the Perseus artifact (A100 83.64 W, A40 70.38 W) over "
                  "the GPU model's idle power; checked by Perseus NVML energy (bubbles)",
    "host": "Mayaki CodeCarbon CPU/RAM shares (CodeCarbon estimates)",
    "comm_eff_scale": "not fitted: no open measured DDP/FSDP/TP job run (1.0; the collectives themselves are "
                      "fitted on measured NCCL tables where the links were measured, joulebound/hw/nccl.py)",
    "sigma": "residuals of the same fit (see MechParams)",
}


#: prior floor of the between-framework spread of κ (log units): a new framework or data set is
#: assumed within ×/÷2.3 of the calibrated κ at 90 % even when the calibration sets agree
SIGMA_FRAMEWORK_PRIOR = 0.5


def _global_log_kappa(log_k: np.ndarray, cells: list[tuple[str, str]]) -> float:
    """Mean over data sets of the mean log κ of each data set's GPUs."""
    by: dict[str, list[float]] = {}
    for (d, _), v in zip(cells, log_k, strict=True):
        by.setdefault(d, []).append(float(v))
    return float(np.mean([np.mean(v) for v in by.values()]))


def _device_sigma(log_k: np.ndarray, cells: list[tuple[str, str]]) -> float:
    """Spread of a GPU's κ around its data set's mean (how much an unseen GPU may differ)."""
    by: dict[str, list[float]] = {}
    for (d, _), v in zip(cells, log_k, strict=True):
        by.setdefault(d, []).append(float(v))
    dev = [v - np.mean(vs) for vs in by.values() if len(vs) >= 2 for v in vs]
    n = sum(len(vs) - 1 for vs in by.values() if len(vs) >= 2)
    return float(max(math.sqrt(np.sum(np.square(dev)) / n), 0.05)) if n else 0.25


def _framework_sigma(log_k: np.ndarray, cells: list[tuple[str, str]], r_cell: np.ndarray,
                     cell: np.ndarray, known: bool = False) -> tuple[float, float, float]:
    """(σ_compute, σ_between, σ_within) in log units.

    A job the predictor is asked about comes from a framework it was not calibrated on, so σ is
    the between-data-set spread of κ (floored at :data:`SIGMA_FRAMEWORK_PRIOR`, inflated by
    √(1 + 1/k) for k data sets) combined with the within-cell residual spread (what the shape
    dependence of the model misses). ``known``: the user's own framework, no between term."""
    by: dict[str, list[float]] = {}
    for (d, _), v in zip(cells, log_k, strict=True):
        by.setdefault(d, []).append(float(v))
    means = np.array([np.mean(v) for v in by.values()])
    within = float(np.sqrt(np.mean([np.mean(r_cell[cell == c] ** 2) for c in np.unique(cell)])))
    between = float(np.std(means, ddof=1)) if len(means) >= 2 else 0.0
    between = 0.0 if known else max(between, SIGMA_FRAMEWORK_PRIOR) * math.sqrt(1 + 1 / len(means))
    return float(math.hypot(within, between)), between, within


def _balanced_rms(r: np.ndarray, groups: np.ndarray) -> float:
    u = np.unique(groups)
    return float(math.sqrt(np.mean([np.mean(r[groups == g] ** 2) for g in u])))


# ---------------------------------------------------------------------------------------------
# validation cuts


def metrics(pred: np.ndarray, meas: np.ndarray, s_log: np.ndarray) -> dict:
    """MAPE, median ratio, median |error|, shares within ×1.25 / ×2, 90 % interval coverage."""
    ratio = pred / meas
    lr = np.abs(np.log(ratio))
    lo, hi = pred * np.exp(-1.6449 * s_log), pred * np.exp(1.6449 * s_log)
    return {"n": int(len(meas)), "mape": float(np.mean(np.abs(ratio - 1))),
            "median_ratio": float(np.median(ratio)), "median_abs_err": float(np.median(np.abs(ratio - 1))),
            "within_x1_25": float(np.mean(lr <= math.log(1.25))), "within_x2": float(np.mean(lr <= math.log(2))),
            "coverage90": float(np.mean((meas >= lo) & (meas <= hi))),
            "median_interval_factor": float(np.median(np.exp(1.6449 * s_log)))}


def _eval(prep: Prepared, prm: MechParams, test: np.ndarray) -> dict:
    sub = prep.subset(np.flatnonzero(test))
    pr = predicted(sub, prm)
    t = sub.col("time_s").astype(float)
    e = sub.col("energy_j").astype(float)
    basis = sub.col("energy_basis")
    out = {"time": metrics(pr["time"], t, pr["s_t"])}
    nv = basis == "nvml"
    if nv.any():
        out["energy"] = metrics(pr["gpu"][nv], e[nv], pr["s_e"][nv])
    cc = basis == "codecarbon"
    if cc.any():
        out["energy_codecarbon"] = metrics(pr["total"][cc], e[cc], pr["s_e"][cc])
    own = np.where(cc, pr["total"], pr["gpu"])  # what each row's meter covers
    metered = nv | cc  # vTrain measured time only
    if metered.any():
        out["energy_own_meter"] = metrics(own[metered], e[metered], pr["s_e"][metered])
    out["datasets"] = sorted(set(sub.col("dataset")))
    return out


def cut_plan(prep: Prepared) -> list[tuple[str, str, np.ndarray]]:
    """(cut, what is tested, test mask) of every validation cut; the rest is the training side
    (all rows for ``in-sample``)."""
    ds = prep.col("dataset")
    dev = np.array([pa.key.device for pa in prep.parts])
    gpus = np.array([r.gpus for r in prep.resolved])
    tok = np.array([r.tokens_per_step for r in prep.resolved], float)
    plan: list[tuple[str, str, np.ndarray]] = [("in-sample", "all", np.ones(len(prep), bool))]
    for d in np.unique(ds):
        plan.append(("leave-one-dataset-out", str(d), ds == d))
    for d in np.unique(dev):
        plan.append(("leave-one-GPU-out", str(d), dev == d))
    plan.append(("large -> small steps", "train >= 32k tokens/step, test < 32k", tok < 32768))
    lower = np.zeros(len(prep), bool)
    for d in np.unique(ds):
        m = ds == d
        lower |= m & (tok < np.median(tok[m]))
    plan.append(("upper -> lower half of step sizes", "each data set split at its median", lower))
    plan.append(("single-GPU -> multi-GPU", "train 1 GPU, test > 1 GPU", gpus > 1))
    return [(c, w, t) for c, w, t in plan if t.any() and (c == "in-sample" or (~t).any())]


def cuts(prep: Prepared, progress=None) -> list[dict]:
    """The mechanistic predictor on every cut of :func:`cut_plan` (fitted on each training side)."""
    rows = []
    for cut, what, test in cut_plan(prep):
        train = test if cut == "in-sample" else ~test
        prm = fit(prep.subset(np.flatnonzero(train)))
        rows.append({"cut": cut, "test": what, "train_rows": int(train.sum()), **_eval(prep, prm, test),
                     "params": {"kappa": prm.kappa, "launch_s": prm.launch_s, "step_s": prm.step_s,
                                "wait_ratio": prm.wait_ratio}})
        if progress:
            progress(f"{cut}: {what}")
    return rows


def legacy_frame(prep: Prepared):  # -> pandas.DataFrame
    """The observations in the legacy laws' common schema (energy per step summed over GPUs)."""
    import pandas as pd

    from joulebound.jobs.lawinputs import law_device, law_peak

    rows = []
    for o, r, pa in zip(prep.obs, prep.resolved, prep.parts, strict=True):
        hw = law_device(pa.key.device)
        rows.append({"dataset": o.dataset, "family": o.family, "arch": r.arch, "layers": r.job.layers,
                     "hidden": r.job.hidden, "heads": r.job.heads, "ff": r.ff, "params": r.params,
                     "seq": r.job.seq, "batch": r.global_batch,
                     "dtype": "fp16" if r.dtype in ("fp16", "bf16") else "fp32", "device": hw.name,
                     "peak_flops": law_peak(hw.peak_flops, "fp16" if r.dtype in ("fp16", "bf16") else "fp32",
                                           hw.name),
                     "strategy": "pp" if r.pp > 1 else ("single" if r.gpus == 1 else r.strategy),
                     "gpus": r.gpus, "time_s": o.time_s, "energy_j": o.energy_j,
                     "energy_provenance": MEASURED, "speedup": np.nan})
    return pd.DataFrame(rows)


def legacy_cuts(prep: Prepared, law: str, progress=None) -> list[dict]:
    """A legacy energy law (``fit --law NAME``) on the same cuts: energy per step against each
    row's measured energy (its own meter: CodeCarbon for Mayaki, NVML otherwise); the 90 %
    interval is the split-conformal half-width of the training side (pre-run law only)."""
    from joulebound.jobs.laws import make_law
    from joulebound.jobs.metrics import conformal_quantile

    df = legacy_frame(prep)
    y = df["energy_j"].to_numpy(float)
    rows = []
    metered = np.isfinite(y)  # the laws predict energy: rows without (vTrain) sit out
    for cut, what, test in cut_plan(prep):
        train = (test if cut == "in-sample" else ~test) & metered
        test = test & metered
        if not test.any() or not train.any():
            continue
        dtr = df[train].reset_index(drop=True)
        try:
            m = make_law(law).fit(dtr)
            pred = np.exp(m.predict_log(df[test].reset_index(drop=True)))
            q = conformal_quantile(np.abs(np.log(y[train]) - m.predict_log(dtr)), 0.1)
        except Exception as exc:  # a law that cannot be fitted on this side is reported
            rows.append({"cut": cut, "test": what, "law": law, "note": str(exc)[:120]})
            continue
        s_log = np.full(len(pred), q / 1.6449 if np.isfinite(q) else np.inf)
        rows.append({"cut": cut, "test": what, "law": law, "train_rows": int(train.sum()),
                     "energy_own_meter": metrics(pred, y[test], s_log)})
        if progress:
            progress(f"{law} {cut}: {what}")
    return rows


def meets_targets(m: dict) -> bool:
    return (m["median_abs_err"] <= TARGETS["median_abs_err"] and m["within_x2"] >= TARGETS["within_x2"]
            and m["coverage90"] >= TARGETS["coverage90"])


def mayaki_power_check(data: str | Path) -> dict:
    """How Mayaki's GPU power varies with utilization (it does not: a run average)."""
    import pandas as pd

    from joulebound.jobs.datasets import load_mayaki
    from joulebound.jobs.laws import measured_eta
    from joulebound.jobs.laws import prepare as prep_law

    df = prep_law(load_mayaki(Path(data) / "mayaki_ecai2025"))
    raw = pd.read_csv(Path(data) / "mayaki_ecai2025" / "SubsetDataForTransformer_energyModel.csv")
    gpu_w = (df["energy_j"] / df["time_s"]).to_numpy() * (raw["total_gpu_energy_kWh"] / raw["total_energy_kWh"]).to_numpy()
    mfu = measured_eta(df)
    out = {}
    for d in sorted(df["device"].unique()):
        m = (df["device"] == d).to_numpy()
        out[d] = {"mfu_range": [float(np.quantile(mfu[m], 0.05)), float(np.quantile(mfu[m], 0.95))],
                  "gpu_w_range": [float(np.quantile(gpu_w[m], 0.05)), float(np.quantile(gpu_w[m], 0.95))],
                  "corr_power_mfu": float(np.corrcoef(gpu_w[m], mfu[m])[0, 1])}
    return out


def calibrate(data: str | Path, sweep: str | Path | None = None, out: str | Path | None = None,
              with_cuts: bool = True, progress=None) -> dict:
    """Fit on all data, write the parameters JSON, return {params, cuts, mayaki_power}."""
    from joulebound.jobs.host import mayaki_host_watts

    d = Path(data)
    obs = load_observations(d, sweep)
    prep = prepare(obs)
    base = MechParams()
    if (d / "mayaki_ecai2025").exists():
        base = replace(base, host=mayaki_host_watts(d / "mayaki_ecai2025"))
    prm = fit(prep, base)
    res: dict = {"params": prm.to_json()}
    if with_cuts:
        res["cuts"] = cuts(prep, progress)
        prm.provenance["cuts"] = [{k: v for k, v in c.items() if k != "params"} for c in res["cuts"]]
    if (d / "mayaki_ecai2025").exists():
        res["mayaki_power"] = mayaki_power_check(d)
        prm.provenance["mayaki_power"] = res["mayaki_power"]
    path = Path(out) if out else params_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prm.to_json(), indent=1) + "\n")
    res["path"] = str(path)
    res["params"] = prm.to_json()
    return res


def _main() -> None:  # pragma: no cover - maintenance entry point
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--sweep", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-cuts", action="store_true")
    a = ap.parse_args()
    from joulebound.core.logs import show_progress

    show_progress()
    res = calibrate(a.data, a.sweep, a.out, not a.no_cuts, progress=lambda s: log.info("cut %s", s))
    p = res["params"]
    print(json.dumps({k: p[k] for k in ("kappa", "launch_s", "step_s", "wait_ratio", "sigma")}, indent=1))
    for c in res.get("cuts", []):
        line = f"{c['cut']:34s} {c['test']:40s}"
        for q in ("time", "energy", "energy_codecarbon"):
            if q in c:
                m = c[q]
                line += (f" | {q} n={m['n']} med|err| {m['median_abs_err']:.0%} x2 {m['within_x2']:.0%}"
                         f" cov {m['coverage90']:.0%} ratio {m['median_ratio']:.2f}")
        print(line)
    print("wrote", res["path"])


if __name__ == "__main__":  # pragma: no cover
    _main()
