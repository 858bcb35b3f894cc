"""Check (d): Zeus NSDI'23 power-limit traces — predict lower power limits from the highest one.

SIDE MODEL: checks a power-limit model of its own, not the product's kernel model.

Data: ``zeus_nsdi23/summary_power_{a40,v100,rtx6000,p100}.csv`` (You, Chung, Chowdhury, Zeus,
NSDI'23; Apache-2.0): time per epoch (s) and average power (W) of 6 workloads × batch sizes ×
power limits, measured once each.

Model, per workload (dataset, network, batch size), from its highest-limit point
``(t_h, P_h)`` only:

* the workload runs at the top clock there; board power ``P(f) = P_s + (P_h - P_s)·s(f)`` with
  ``s(f) = V(f)² f`` relative to the top clock (knee/floor V–f curve);
* under a lower limit ``L < P_h`` the GPU runs at the clock ``f_L`` with ``P(f_L) = L`` and draws
  ``L``; time ``t_h·(1 - φ + φ/f_L)``.

Device-level parameters ``P_s`` (W, static + memory), ``φ`` (clock-scaling fraction), ``κ``
(the average power the limiter holds, as a fraction of the limit: ``P(f_L) = κ·L``) and the V–f
knee/floor are fitted per GPU with **leave-one-network-out**: the parameters used for a network's
workloads are fitted on the other five networks' points only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from joulebound.gpumodel.vf import VFCurve
from research.result import CheckResult

GPUS = {"a40": "A40", "v100": "V100", "rtx6000": "RTX 6000", "p100": "P100"}


def load(data: Path, gpu: str):  # -> pandas.DataFrame
    import pandas as pd

    path = Path(data) / "zeus_nsdi23" / f"summary_power_{gpu}.csv"
    df = pd.read_csv(path)
    need = {"dataset", "network", "batch_size", "power_limit", "time_per_epoch", "average_power"}
    if need - set(df.columns):
        raise ValueError(f"{path}: missing columns {sorted(need - set(df.columns))}")
    df["workload"] = df.dataset + "/" + df.network + "/b" + df.batch_size.astype(str)
    return df


def _arrays(df):  # per row: the workload's highest-limit point
    top = df.loc[df.groupby("workload").power_limit.idxmax(), ["workload", "power_limit",
                                                              "time_per_epoch", "average_power"]]
    top = top.set_index("workload")
    L = df.power_limit.to_numpy(float)
    th = top.loc[df.workload, "time_per_epoch"].to_numpy(float)
    ph = top.loc[df.workload, "average_power"].to_numpy(float)
    lh = top.loc[df.workload, "power_limit"].to_numpy(float)
    return L, th, ph, lh


def predict(theta: np.ndarray, L: np.ndarray, th: np.ndarray, ph: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Predicted (time per epoch s, average power W) at limits ``L``."""
    p_s, phi, knee, vmin, kappa = theta
    vf = VFCurve(knee, vmin, 1.0, smooth_mhz=0.02)
    grid = np.linspace(0.05, 1.0, 400)
    sg = vf.dynamic_scale(grid)
    held = kappa * L                      # average power the limiter holds under a limit L
    frac = np.clip((held - p_s) / np.maximum(ph - p_s, 1e-9), 0.0, None)
    f_l = np.where(held >= ph, 1.0, np.interp(frac, sg, grid, left=grid[0], right=1.0))
    t = th * (1 - phi + phi / f_l)
    p = np.minimum(ph, held)
    return t, p


def fit_theta(df) -> np.ndarray:
    from scipy.optimize import least_squares

    L, th, ph, _ = _arrays(df)
    t, p = df.time_per_epoch.to_numpy(float), df.average_power.to_numpy(float)
    low = L < np.array(_arrays(df)[3])

    def resid(x: np.ndarray) -> np.ndarray:
        tp, pp = predict(x, L[low], th[low], ph[low])
        return np.r_[tp / t[low] - 1, pp / p[low] - 1]

    best = None
    for x0 in ([40.0, 0.6, 0.5, 0.8, 0.95], [70.0, 0.8, 0.7, 0.7, 0.95],
               [20.0, 0.4, 0.6, 0.9, 0.95]):
        sol = least_squares(resid, x0, bounds=([0.0, 0.0, 0.1, 0.4, 0.7],
                                               [200.0, 1.0, 0.95, 1.0, 1.1]))
        if best is None or sol.cost < best.cost:
            best = sol
    return best.x


def run(data: Path) -> list[CheckResult]:
    out = []
    for gpu, label in GPUS.items():
        df = load(data, gpu)
        L, th, ph, lh = _arrays(df)
        t_meas, p_meas = df.time_per_epoch.to_numpy(float), df.average_power.to_numpy(float)
        t_pred = np.full(len(df), np.nan)
        p_pred = np.full(len(df), np.nan)
        thetas = {}
        for net in df.network.unique():
            test = (df.network == net).to_numpy()
            theta = fit_theta(df[~test])
            thetas[net] = theta
            tp, pp = predict(theta, L[test], th[test], ph[test])
            t_pred[test], p_pred[test] = tp, pp
        ho = L < lh
        th_all = np.median(np.array(list(thetas.values())), axis=0)
        out.append(CheckResult.from_arrays(
            "zeus-power-limit", label, f"all ({df.workload.nunique()} workloads)", t_pred[ho],
            t_meas[ho], p_pred[ho], p_meas[ho], energy_quantity="avg_power",
            note=(f"leave-one-network-out device params (median P_s={th_all[0]:.0f} W, "
                  f"phi={th_all[1]:.2f}, kappa={th_all[4]:.2f}); predicted from each "
                  "workload's highest limit"),
            points={"x": L[ho], "t_meas": t_meas[ho], "t_pred": t_pred[ho], "e_meas": p_meas[ho],
                    "e_pred": p_pred[ho]}))
        bert = (df.network == "bert_base_uncased").to_numpy() & ho
        if bert.any():
            out.append(CheckResult.from_arrays(
                "zeus-power-limit", label, "bert_base_uncased (transformer)", t_pred[bert],
                t_meas[bert], p_pred[bert], p_meas[bert], energy_quantity="avg_power",
                note="subset of the row above"))
    return out
