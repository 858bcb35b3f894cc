"""What the energy laws are built from, without scikit-learn: one configuration's row
(:func:`config_frame`, :func:`law_config`), the prepared frame
(:func:`prepare`), measured and predicted efficiency (:func:`measured_eta`,
:class:`EfficiencyModel`, :func:`parallel_eta`) and category indicators.

Kept apart from the estimators (:mod:`~joulebound.jobs.laws`) so that the pre-run predictor
and the advisor import them without importing scikit-learn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.jobs.proxies import add_proxies, dtype_bytes
from joulebound.jobs.strategy import check_gpus, normalize_strategy

if TYPE_CHECKING:  # pragma: no cover
    from joulebound.jobs.job import Job

#: Architecture defaults for ``--model`` (vocabulary for the embedding / LM-head FLOPs).
MODEL_DEFAULTS = {"bert": {"vocab": 30522}, "gpt": {"vocab": 50257}, "t5": {"vocab": 32128}}


def prepare(df: pd.DataFrame, need_energy: bool = True) -> pd.DataFrame:
    """Validate, normalise strategies, add proxies. Raises naming the missing column."""
    from joulebound.jobs.datasets import validate

    need = ("layers", "hidden", "heads", "seq", "batch", "device", "peak_flops", "strategy", "gpus")
    validate(df, df.attrs.get("source", "dataset"), need + (("energy_j",) if need_energy else ()))
    out = df.copy()
    out["strategy"] = [normalize_strategy(s) for s in out["strategy"]]
    check_gpus(out["gpus"])
    if "dtype" not in out:
        out["dtype"] = "fp32"
    if "tdp_w" not in out or "mem_bw" not in out:
        from joulebound.jobs.lawinputs import law_device

        hws = {d: law_device(d) for d in out["device"].unique()}
        out["tdp_w"] = out["device"].map(lambda d: float(hws[d].power_limit_default_w))
        out["mem_bw"] = out["device"].map(lambda d: float(hws[d].mem_bandwidth_bps))
    if "family" not in out:
        out["family"] = "all"
    return add_proxies(out)


def config_frame(*, model: str = "bert", layers: int, hidden: int, heads: int, seq: int, batch: int,
                 gpus: int = 1, strategy: str = "single", device: str = "rtx2080ti",
                 dtype: str = "fp32", ff: int | None = None, vocab: int | None = None,
                 params: float | None = None, peak_flops: Mapping[str, float] | None = None,
                 mem_bw: float | None = None, tdp_w: float | None = None) -> pd.DataFrame:
    """One-row common-schema frame for a configuration (``params`` defaults to the standard count
    from the shape and vocabulary: L·(4d² + 2d·ff) + (vocab + seq)·d). ``peak_flops`` (dtype ->
    FLOP/s), ``mem_bw`` (bytes/s) and ``tdp_w`` (W) give the figures of a device outside the
    catalog (e.g. a TPU, named ``device``); by default the catalog's
    (:func:`~joulebound.jobs.lawinputs.law_device`)."""
    from joulebound.jobs.lawinputs import law_device, law_peak
    from joulebound.jobs.proxies import total_params

    n = int(check_gpus(gpus))
    strategy = normalize_strategy(strategy)
    if n == 1:
        strategy = "single"
    elif strategy == "single":
        raise JouleboundError(f"strategy 'single' needs --gpus 1 (got {n}); choose ddp, fsdp, tp or pp")
    for name, v in (("layers", layers), ("hidden", hidden), ("heads", heads), ("seq", seq), ("batch", batch),
                    ("ff", ff), ("vocab", vocab)):
        if v is not None and int(v) < 1:
            raise JouleboundError(f"--{name} must be >= 1 (got {v})")
    if hidden % heads:
        raise JouleboundError(f"--heads {heads} does not divide --hidden {hidden} (head size must be an "
                              f"integer); pick heads among {[h for h in range(1, hidden + 1) if hidden % h == 0][:12]}")
    arch = model.lower()
    if arch not in MODEL_DEFAULTS:
        raise JouleboundError(f"unknown --model {model!r}." + did_you_mean(arch, list(MODEL_DEFAULTS)))
    vocab = vocab if vocab is not None else MODEL_DEFAULTS[arch]["vocab"]
    ff = ff if ff is not None else 4 * hidden
    if peak_flops is None:
        spec = law_device(device)
        name, peak_flops = spec.name, spec.peak_flops
        mem_bw, tdp_w = float(spec.mem_bandwidth_bps), float(spec.power_limit_default_w)
    else:
        name = device
    return pd.DataFrame([{
        "dataset": "query", "family": "query", "arch": arch, "layers": layers, "hidden": hidden,
        "heads": heads, "ff": ff,
        "params": float(params) if params else float(total_params(layers, hidden, ff, vocab, seq)),
        "seq": seq, "batch": batch, "dtype": dtype, "device": name,
        "peak_flops": law_peak(peak_flops, dtype, name), "mem_bw": mem_bw, "tdp_w": tdp_w,
        "strategy": strategy, "gpus": n}])


def law_config(job: Job) -> dict:
    """The keywords of :func:`config_frame` for a :class:`~joulebound.jobs.job.Job`, in the laws'
    semantics: ``batch`` is the **global** batch (sequences per optimizer step, as the laws'
    training data counts it), fp16/bf16 both price as fp16 and anything else as fp32."""
    from joulebound.jobs.job import resolve

    r = resolve(job)
    return dict(model=r.arch, layers=job.layers, hidden=job.hidden, heads=job.heads, seq=job.seq,
                batch=r.global_batch, device=job.device,
                dtype="fp16" if r.dtype in ("fp16", "bf16") else "fp32", ff=r.ff, vocab=r.vocab,
                gpus=r.gpus, strategy=r.strategy if r.gpus > 1 else "single")


def measured_eta(df: pd.DataFrame) -> np.ndarray:
    """Post-run efficiency η = F_train / (N · peak · t): the model-FLOPs utilization (MFU).

    On one GPU this is the hardware efficiency (the ECAI paper's HEF of the whole step); on N GPUs
    it is hardware efficiency × parallel efficiency S(N)/N."""
    return (df["F_train"] / (df["gpus"] * df["peak_flops"] * df["time_s"])).to_numpy(float)


def dummies(values: pd.Series, levels: list[str], prefix: str) -> tuple[np.ndarray, list[str]]:
    """Indicator columns of ``values`` for ``levels[1:]`` (``levels[0]`` is the reference) and
    their names ``prefix[level]``."""
    cols = [np.asarray(values == lv, dtype=float) for lv in levels[1:]]
    names = [f"{prefix}[{lv}]" for lv in levels[1:]]
    return (np.column_stack(cols) if cols else np.empty((len(values), 0))), names


# --------------------------------------------------------------------------------------------
# hardware-efficiency model (pre-run)


class EfficiencyModel:
    """Pre-run step time on one GPU, hence hardware efficiency η̂_hw = F_train/(peak·t̂).

    ``t̂ = θ1·F_dense/peak + θ2·F_attn/peak + θ3·A·b/BW + θ4·L + θ5``  (s), θ ≥ 0 by NNLS with
    relative-error weights, pooled over devices (peak and bandwidth normalise them), where A is
    the attention-matrix elements per step and b bytes per element. Physically: 1/θ1 is the
    achieved fraction of peak on the weight matmuls, 1/θ2 on the attention products, θ3 the
    passes over the score matrices, θ4 the per-layer launch/overhead time and θ5 the per-step
    overhead. Fitted on single-GPU-equivalent time t·N·η̂_par of the training rows only.
    """

    names = ("theta_dense", "theta_attn", "theta_attn_mem", "t_layer_s", "t_step_s")

    @staticmethod
    def _X(df: pd.DataFrame) -> np.ndarray:
        nb = np.array([dtype_bytes(x) for x in df["dtype"]], dtype=float)
        return np.column_stack([df["F_dense"] / df["peak_flops"], df["F_attn"] / df["peak_flops"],
                                df["A_elems"] * nb / df["mem_bw"], df["layers"].astype(float),
                                np.ones(len(df))])

    def fit(self, df: pd.DataFrame, t1: np.ndarray) -> EfficiencyModel:
        """NNLS on the training rows (relative-error weights).

        Terms that the training rows cannot tell apart (e.g. the per-layer term when every row has
        the same L, or the attention terms when S and h never vary) are left out — greedily, in
        the order θ1, θ5, θ2, θ3, θ4 — so that an unidentifiable split cannot explode when the law
        extrapolates; ``self.active_`` lists the terms kept."""
        from scipy.optimize import nnls

        X = self._X(df)
        sc = np.maximum(np.abs(X).max(axis=0), 1e-300)
        w = 1.0 / t1
        Xw = X / sc * w[:, None]
        active: list[int] = []
        for j in (0, 4, 1, 2, 3):
            trial = active + [j]
            sv = np.linalg.svd(Xw[:, trial], compute_uv=False)
            if sv[-1] > 1e-7 * sv[0]:
                active = trial
        c = np.zeros(X.shape[1])
        c[active], _ = nnls(Xw[:, active], t1 * w)
        self.active_ = [self.names[j] for j in sorted(active)]
        self.theta_ = c / sc
        return self

    def time(self, df: pd.DataFrame) -> np.ndarray:
        """Predicted 1-GPU time of one unit of work (s)."""
        return np.maximum(self._X(df) @ self.theta_, 1e-12)

    def eta(self, df: pd.DataFrame) -> np.ndarray:
        return (df["F_train"] / (df["peak_flops"] * self.time(df))).to_numpy(float)

    def to_json(self) -> dict[str, float]:
        return dict(zip(self.names, map(float, self.theta_), strict=True))

    @classmethod
    def from_json(cls, d: dict[str, float]) -> EfficiencyModel:
        m = cls()
        m.theta_ = np.array([d[k] for k in cls.names], dtype=float)
        return m


def parallel_eta(df: pd.DataFrame, t1: np.ndarray, speedup_fits: dict | None = None) -> np.ndarray:
    """Pre-run η̂_par per row: a fitted speedup law for the row's strategy when given, else the
    communication model (:func:`~joulebound.jobs.lawinputs.predicted_efficiency`) with the row's
    predicted 1-GPU time ``t1`` as compute time. 1 for single-GPU rows."""
    from joulebound.jobs.lawinputs import predicted_efficiency

    out = np.ones(len(df))
    # only the multi-GPU rows are visited (a row-by-row walk over a mostly single-GPU dataset
    # cost ~0.1 s per call); NaN GPU counts are visited, as before
    multi = ~(df["gpus"].to_numpy(float) <= 1) & (df["strategy"].to_numpy() != "single")
    for i in np.flatnonzero(multi):
        r = df.iloc[i]
        n = float(r["gpus"])
        fit = (speedup_fits or {}).get(r["strategy"])
        if fit is not None:
            out[i] = float(fit.efficiency(n))
            continue
        flops = float(r["F_train"])
        eff = flops / (float(r["peak_flops"]) * float(t1[i]))
        out[i] = float(predicted_efficiency(
            r["strategy"], n, flops=flops, params=float(r["params"]), B=float(r["batch"]),
            S=float(r["seq"]), d=float(r["hidden"]), L=float(r["layers"]), device=r["device"],
            dtype=str(r["dtype"]), compute_eff=eff))
    return np.clip(out, 1e-3, 1.0)
