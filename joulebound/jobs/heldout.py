"""Held-out checks of the job predictor's *decisions*, beside its errors (issue 27 item 6).

Every function here refits the predictor without the rows it tests (or tests rows it never saw)
and returns plain dicts (figures are **modeled vs measured**):

* :func:`vtrain_size_cuts` — vTrain's measured Megatron-DeepSpeed iteration times, one model size
  held out at a time (fit on every other data set and size): median and mean |time error|,
  single-node and multi-node, beside vTrain's own published mean error on the same rows (8.37 % /
  14.73 %, Bang et al., MICRO'24 — a cited reference column, not our output);
* :func:`layout_ranking` — within each group of vTrain runs of one model, GPU count and global
  batch (the choice ``advise`` makes: which TP × PP × DP × micro-batch), the share of layout
  pairs that the predictor orders as measured (pairs whose measured times differ by > 5 %), and
  whether its fastest layout is measured within 5 % of the measured fastest;
* :func:`gpu_count_direction` — for the same model and global batch on 2, 4 and 8 GPUs (vTrain
  single node, best layout per count), whether adding GPUs raises the GPU-seconds per sample
  (the direction of energy per token at equal power per GPU; vTrain measured time only);
* :func:`h200_hf_steps` — the project's own H200 measurement of eager Hugging Face steps
  (``docs/measurements/h200-2026-12-04-hf-grid.json``), host-bound to GPU-bound: time and GPU
  energy on a GPU outside the calibration data.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: vTrain's published mean error of its own simulator on these rows (%), Bang et al. MICRO'24
VTRAIN_PUBLISHED_MEAN_ERR = {"single-node": 8.37, "multi-node": 14.73}
#: pairs of layouts whose measured times differ by less than this are not ranked
RANK_TIE = 0.05
HF_GRID = Path(__file__).resolve().parents[2] / "docs" / "measurements" / "h200-2026-12-04-hf-grid.json"


def _abs_err(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(pred / meas - 1.0)


def vtrain_size_cuts(prep, fit: Callable, predict: Callable, progress=None) -> dict:
    """Leave one vTrain model size out (``prep``: :class:`~joulebound.jobs.calibrate.Prepared`
    with the vTrain rows; ``fit(sub) -> MechParams``; ``predict(sub, prm) -> dict`` as
    :func:`~joulebound.jobs.calibrate.predicted`). Returns per node kind the median / mean |time
    error| (fractions), 90 % coverage and the predictions for the ranking checks."""
    ds = prep.col("dataset")
    vt = np.flatnonzero(ds == "vtrain")
    fam = np.array([prep.obs[i].family for i in vt])
    pred = np.full(len(prep), np.nan)
    s_t = np.full(len(prep), np.nan)
    for f in sorted(set(fam)):
        test = vt[fam == f]
        train = np.setdiff1d(np.arange(len(prep)), test)
        prm = fit(prep.subset(train))
        pr = predict(prep.subset(test), prm)
        pred[test], s_t[test] = pr["time"], pr["s_t"]
        if progress:
            progress(f"vTrain size {f} held out")
    from joulebound.jobs.calibrate import metrics

    meas = prep.col("time_s").astype(float)
    node = np.array([o.meta.get("node", "") for o in prep.obs])
    out: dict = {"sizes": sorted(set(fam)), "rows": {}}
    for kind in ("single-node", "multi-node"):
        m = (ds == "vtrain") & (node == kind)
        if not m.any():
            continue
        mt = metrics(pred[m], meas[m], s_t[m])  # the cut table's figures (mape = mean |error|)
        out["rows"][kind] = {**mt, "mean_abs_err": mt["mape"],
                             "published_mean_err_pct": VTRAIN_PUBLISHED_MEAN_ERR[kind]}
    out["pred"] = pred
    return out


def _groups(prep, idx: np.ndarray) -> dict[tuple, list[int]]:
    g: dict[tuple, list[int]] = {}
    for i in idx:
        r = prep.resolved[i]
        g.setdefault((prep.obs[i].family, r.gpus, r.global_batch), []).append(int(i))
    return g


def layout_ranking(prep, pred: np.ndarray) -> dict:
    """Pairwise order agreement and best-layout hits within each (model, GPUs, global batch)
    group of vTrain rows (``pred``: held-out predicted times aligned with ``prep``)."""
    ds = prep.col("dataset")
    meas = prep.col("time_s").astype(float)
    idx = np.flatnonzero((ds == "vtrain") & np.isfinite(pred))
    agree = pairs = hits = groups = 0
    regret = []
    for members in _groups(prep, idx).values():
        if len(members) < 2:
            continue
        groups += 1
        t, p = meas[members], pred[members]
        for a in range(len(members)):
            for b in range(a + 1, len(members)):
                if abs(t[a] / t[b] - 1) <= RANK_TIE:
                    continue
                pairs += 1
                agree += (t[a] < t[b]) == (p[a] < p[b])
        chosen = int(np.argmin(p))
        regret.append(t[chosen] / t.min() - 1)
        hits += regret[-1] <= RANK_TIE
    return {"groups": groups, "pairs": pairs, "pair_agreement": agree / pairs if pairs else float("nan"),
            "best_within_5pct": hits / groups if groups else float("nan"),
            "median_regret": float(np.median(regret)) if regret else float("nan"),
            "max_regret": float(np.max(regret)) if regret else float("nan")}


def gpu_count_direction(prep, pred: np.ndarray) -> dict:
    """Does adding GPUs raise the GPU-seconds per sample? Per vTrain model and global batch, the
    fastest measured layout at each GPU count against the fastest predicted one; each pair of
    consecutive counts is one decision."""
    ds = prep.col("dataset")
    meas = prep.col("time_s").astype(float)
    idx = np.flatnonzero((ds == "vtrain") & np.isfinite(pred))
    by: dict[tuple, dict[int, tuple[float, float]]] = {}
    for i in idx:
        r = prep.resolved[i]
        key = (prep.obs[i].family, r.global_batch)
        best = by.setdefault(key, {}).get(r.gpus, (math.inf, math.inf))
        by[key][r.gpus] = (min(best[0], meas[i] * r.gpus), min(best[1], pred[i] * r.gpus))
    right = total = up_meas = up_pred = 0
    for counts in by.values():
        ns = sorted(counts)
        for a, b in zip(ns[:-1], ns[1:], strict=True):
            m_up = counts[b][0] > counts[a][0]
            p_up = counts[b][1] > counts[a][1]
            total += 1
            right += m_up == p_up
            up_meas += m_up
            up_pred += p_up
    return {"pairs": total, "direction_right": right / total if total else float("nan"),
            "more_gpu_seconds_measured": up_meas / total if total else float("nan"),
            "more_gpu_seconds_predicted": up_pred / total if total else float("nan")}


def h200_hf_steps(prm, path: Path | None = None) -> dict:
    """The predictor (framework ``hf``, H200) against the project's measured eager Hugging Face
    steps: per row and median |error| of time and GPU energy, 90 % coverage."""
    from joulebound.jobs.job import Job
    from joulebound.jobs.mechanistic import predict_jobs

    src = Path(path or HF_GRID)
    if not src.is_file():
        from joulebound.core.errors import JouleboundError

        raise JouleboundError(f"{src}: the H200 measurement is in a joulebound checkout's docs/measurements/ "
                              "(not in an installed package); pass its path")
    data = json.loads(src.read_text())
    jobs = []
    for r in data["rows"]:
        gpt = r["model"] == "gpt2"
        jobs.append(Job(layers=12, hidden=768, heads=12, seq=int(r["seq"]), arch="gpt" if gpt else "bert",
                        vocab=50257 if gpt else 30522, batch=int(r["batch"]), dtype="bf16",
                        device="h200-sxm", framework="hf", name=r["model"]))
    preds = predict_jobs(jobs, prm)
    rows = []
    for r, p in zip(data["rows"], preds, strict=True):
        rows.append({"model": r["model"], "batch": r["batch"], "seq": r["seq"],
                     "time_s": r["step_s"], "time_pred_s": p.time_s,
                     "time_in_interval": p.time_lo_s <= r["step_s"] <= p.time_hi_s,
                     "gpu_j": r["step_j"], "gpu_pred_j": p.gpu_energy_j,
                     "gpu_in_interval": p.gpu_energy_lo_j <= r["step_j"] <= p.gpu_energy_hi_j})
    et = _abs_err(np.array([x["time_pred_s"] for x in rows]), np.array([x["time_s"] for x in rows]))
    ee = _abs_err(np.array([x["gpu_pred_j"] for x in rows]), np.array([x["gpu_j"] for x in rows]))
    return {"gpu": data.get("gpu"), "date": data.get("date_utc"), "rows": rows,
            "time_median_abs_err": float(np.median(et)), "energy_median_abs_err": float(np.median(ee)),
            "time_coverage90": float(np.mean([x["time_in_interval"] for x in rows])),
            "energy_coverage90": float(np.mean([x["gpu_in_interval"] for x in rows]))}
