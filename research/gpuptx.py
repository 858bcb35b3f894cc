"""Check (e): the memory-clock dimension on real time *and* power — GTX Titan X (gpuPTXModel).

PRODUCT: validates the product's kernel model (``joulebound.gpumodel``) on memory × core clocks.

Data (``gpuptxmodel/``, hpc-ulisboa/gpuPTXModel, BSD-3-Clause — cite Guerreiro, Ilic, Roma,
Tomás, *GPU Static Modeling Using PTX and Deep Structured Learning*, IEEE Access 7, 2019): total
kernel time (ms) and mean board power (W) at 2 memory (810, 3505 MHz) × 16 core clocks
(595–1164 MHz) for 140 microbenchmarks and 25 applications (GDDR5).

Protocol (Guerreiro's: train on microbenchmarks, test on applications). The kernel model's
*device* parameters — V–f curve, core and memory power terms, the relative GDDR5 voltage at
810 MHz, the core-clock share of memory time, the overlap exponent — are fitted on the
microbenchmarks jointly with each microbenchmark's own work (compute time, memory time, power
activity), on all 32 pairs. The applications are never seen by that fit. For each application,
its three work numbers are then fitted on three clock pairs — the default (975/3505), low core
at the top memory clock (595/3505) and the top core at the low memory clock (1164/810), the
experimental design ``joulebound calibrate`` uses — and its time and power at the other 29
pairs are predicted. The published gpmTOOL power error (4.6 %, TPDS'19, another benchmark set)
is the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from joulebound.gpumodel.fit import FreeParam
from joulebound.gpumodel.kernel import KernelWork, kernel_time_energy
from joulebound.gpumodel.params import DeviceParams
from joulebound.gpumodel.vf import VFCurve
from research.result import CheckResult

F_MAX, M_MAX = 1164.0, 3505.0
#: calibration pairs per application (core, memory MHz)
CALIB = ((975, 3505), (595, 3505), (1164, 810))
POWER_LIMIT_W = 250.0     # GTX Titan X board power target (NVIDIA specifications)
PUBLISHED = {"value": 4.6, "source": "Guerreiro et al., IEEE TPDS 30(11):2494-2506, 2019 "
             "(abstract; gpmTOOL power, GTX Titan X, 42 benchmarks: power only)"}


@dataclass
class Blocks:
    """One file: ``names[b]`` and arrays ``(B, 32)`` of memory/core clock, time (ms), power (W)."""

    names: list[str]
    mem: np.ndarray
    core: np.ndarray
    time: np.ndarray
    power: np.ndarray


def load(path: Path) -> Blocks:
    """Parse a gpuPTXModel aggregated dataset (a name line, then 32 ``mem,core,time,power,
    energy`` rows per block). A repeated name gets a ``#2`` suffix."""
    names: list[str] = []
    rows: list[list[list[float]]] = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if "," not in line:
            name = line
            while name in names:
                name = f"{line}#{sum(1 for x in names if x.split('#')[0] == line) + 1}"
            names.append(name)
            rows.append([])
            continue
        if not rows:
            raise ValueError(f"{path}:{n}: data row before the first application name")
        vals = [float(x) for x in line.split(",")]
        if len(vals) != 5:
            raise ValueError(f"{path}:{n}: expected mem,core,time,power,energy")
        rows[-1].append(vals)
    if not rows or any(len(r) != 32 for r in rows):
        raise ValueError(f"{path}: every block must have 32 clock rows")
    a = np.array(rows)
    return Blocks(names, a[:, :, 0], a[:, :, 1], a[:, :, 2], a[:, :, 3])


def base_params() -> DeviceParams:
    """Starting parameters of the GTX Titan X (Maxwell, GDDR5, 250 W)."""
    return DeviceParams(
        device="gtx-titan-x", idle_w=40.0, core_dyn_w=120.0, core_base_frac=0.25,
        mem_static_w=30.0, mem_dyn_w=40.0, vf=VFCurve(900.0, 0.95, F_MAX),
        power_limit_w=POWER_LIMIT_W, overlap_p=4.0, launch_overhead_s=0.0,
        memory_type="GDDR5", mem_v=[[810 / M_MAX, 0.6], [3300 / 4005, 1.0]],
        tested_mem_fracs=[810 / M_MAX, 1.0], calibration="fit",
        core_mem_frac={k: 0.1 for k in ("other",)})


DEVICE_FREE = [
    FreeParam("vf.knee_mhz", 600.0, 1150.0, transform="lin"),
    FreeParam("vf.v_min", 0.6, 1.0, transform="lin"),
    FreeParam("core_dyn_w", 5.0, 600.0),
    FreeParam("core_base_frac", 0.01, 0.95, transform="logit"),
    FreeParam("idle_w", 1.0, 200.0),
    FreeParam("mem_static_w", 0.5, 200.0),
    FreeParam("mem_dyn_w", 0.5, 300.0),
    FreeParam("mem_v.0", 0.2, 1.0, transform="lin"),
    FreeParam("core_mem_frac.other", 0.0, 1.0, transform="logit"),
    FreeParam("overlap_p", 1.0, 30.0),
]


def model(prm: DeviceParams, tc: np.ndarray, tm: np.ndarray, act: np.ndarray, core: np.ndarray,
          mem: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Time (same unit as ``tc``/``tm``) and power (W) of each block (rows) at its clocks."""
    out = kernel_time_energy(KernelWork(tc[:, None], tm[:, None], act[:, None]), core, mem,
                             F_MAX, M_MAX, prm)
    return out["time_s"], out["power_w"]


def _apply(base: DeviceParams, x: np.ndarray) -> DeviceParams:
    return base.set({p.path: p.from_x(v) for p, v in zip(DEVICE_FREE, x, strict=True)})


def _initial_work(b: Blocks) -> np.ndarray:
    """Start per block: log(tc), log(tm), log(activity) from the time at the top/low clocks."""
    t_top = b.time[(b.mem == M_MAX) & (b.core == F_MAX)]
    return np.c_[np.log(0.6 * t_top), np.log(0.4 * t_top), np.zeros(len(t_top))]


def fit_device(micro: Blocks, base: DeviceParams | None = None) -> tuple[DeviceParams, np.ndarray]:
    """Joint least squares over the device parameters and every microbenchmark's work on all
    its clock pairs (relative time and power errors). Returns the device parameters and the
    per-benchmark work ``(B, 3)`` (log tc, log tm, log activity)."""
    from scipy.optimize import least_squares
    from scipy.sparse import lil_matrix

    base = base or base_params()
    B, C = micro.time.shape
    nd = len(DEVICE_FREE)
    x0 = np.r_[[p.to_x(base.get(p.path)) for p in DEVICE_FREE], _initial_work(micro).ravel()]
    lo = np.r_[[p.x_bounds()[0] for p in DEVICE_FREE], np.full(3 * B, -30.0)]
    hi = np.r_[[p.x_bounds()[1] for p in DEVICE_FREE], np.full(3 * B, 30.0)]
    lo[nd + 2::3], hi[nd + 2::3] = -3.0, 3.0

    def resid(x: np.ndarray) -> np.ndarray:
        prm = _apply(base, x[:nd])
        w = x[nd:].reshape(B, 3)
        t, p = model(prm, np.exp(w[:, 0]), np.exp(w[:, 1]), np.exp(w[:, 2]), micro.core,
                     micro.mem)
        return np.r_[np.log(t / micro.time).ravel(), np.log(p / micro.power).ravel()]

    sparsity = lil_matrix((2 * B * C, nd + 3 * B), dtype=int)
    sparsity[:, :nd] = 1
    for b in range(B):
        for half in (0, B * C):
            sparsity[half + b * C: half + (b + 1) * C, nd + 3 * b: nd + 3 * b + 3] = 1
    sol = least_squares(resid, np.clip(x0, lo + 1e-9, hi - 1e-9), bounds=(lo, hi),
                        jac_sparsity=sparsity, x_scale=1.0, max_nfev=300, xtol=1e-10,
                        ftol=1e-10)
    return _apply(base, sol.x[:nd]), sol.x[nd:].reshape(B, 3)


def fit_apps(prm: DeviceParams, apps: Blocks, pairs: tuple[tuple[int, int], ...] = CALIB
             ) -> np.ndarray:
    """Each application's work (log tc, log tm, log activity) fitted on ``pairs`` only."""
    from scipy.optimize import least_squares

    out = np.empty((len(apps.names), 3))
    init = _initial_work(apps)
    for b in range(len(apps.names)):
        cols = [int(np.flatnonzero((apps.core[b] == c) & (apps.mem[b] == m))[0]) for c, m in pairs]
        core, mem = apps.core[b, cols][None, :], apps.mem[b, cols][None, :]
        tt, pp = apps.time[b, cols], apps.power[b, cols]

        def resid(w: np.ndarray, core=core, mem=mem, tt=tt, pp=pp) -> np.ndarray:
            t, p = model(prm, np.exp(w[:1]), np.exp(w[1:2]), np.exp(w[2:]), core, mem)
            return np.r_[np.log(t[0] / tt), np.log(p[0] / pp)]

        out[b] = least_squares(resid, init[b], bounds=([-30, -30, -3], [30, 30, 3])).x
    return out


def predict_apps(prm: DeviceParams, apps: Blocks, work: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Modeled time and power of every application at its 32 pairs."""
    return model(prm, np.exp(work[:, 0]), np.exp(work[:, 1]), np.exp(work[:, 2]), apps.core,
                 apps.mem)


def heldout_mask(apps: Blocks, pairs: tuple[tuple[int, int], ...] = CALIB) -> np.ndarray:
    """True at every (application, pair) that is not a calibration pair."""
    calib = np.zeros(apps.time.shape, bool)
    for c, m in pairs:
        calib |= (apps.core == c) & (apps.mem == m)
    return ~calib


def run(data: Path) -> tuple[list[CheckResult], DeviceParams]:
    """The check: rows for all applications and per memory clock; returns the fitted Titan X
    parameters (their ``mem_v`` is the GDDR5 voltage fit)."""
    root = Path(data) / "gpuptxmodel"
    micro = load(root / "micro_gtxtitanx.csv")
    apps = load(root / "real_gtxtitanx.csv")
    prm, _ = fit_device(micro)
    work = fit_apps(prm, apps)
    t, p = predict_apps(prm, apps, work)
    ho = heldout_mask(apps)
    v810 = prm.mem_v[0][1]
    note = (f"device parameters fitted on {len(micro.names)} microbenchmarks x 32 pairs; each "
            f"of {len(apps.names)} applications calibrated on 3 pairs "
            f"({', '.join(f'{c}/{m}' for c, m in CALIB)}), the other 29 predicted; fitted GDDR5 "
            f"voltage at 810 MHz {v810:.2f} x, core-clock share of memory time "
            f"{prm.lam('other'):.2f}, overlap p {prm.overlap_p:.1f}")
    out = [CheckResult.from_arrays("gpuptx", "GTX Titan X", "25 apps, 29 held-out pairs each",
                                   t[ho], apps.time[ho], p[ho], apps.power[ho], note=note,
                                   energy_quantity="power", published=PUBLISHED,
                                   points={"t_meas": apps.time[ho], "t_pred": t[ho],
                                           "e_meas": apps.power[ho], "e_pred": p[ho],
                                           "x": apps.mem[ho]})]
    for m in (810, 3505):
        k = ho & (apps.mem == m)
        out.append(CheckResult.from_arrays("gpuptx", "GTX Titan X", f"memory {m} MHz", t[k],
                                           apps.time[k], p[k], apps.power[k],
                                           energy_quantity="power", note="subset of the row above"))
    # ablation: the memory-clock physics off (time follows the core clock only above the
    # roofline; memory voltage fixed at 1.0) -- what the planner would get without them
    flat = replace(prm, mem_v=[[0.0, 1.0], [1.0, 1.0]])
    wf = fit_apps(flat, apps)
    tf, pf = predict_apps(flat, apps, wf)
    out.append(CheckResult.from_arrays("gpuptx", "GTX Titan X", "ablation: memory voltage 1.0",
                                       tf[ho], apps.time[ho], pf[ho], apps.power[ho],
                                       energy_quantity="power",
                                       note="same protocol, GDDR5 voltage curve removed"))
    return out, prm
