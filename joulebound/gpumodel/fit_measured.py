"""The product's fit of measured kernels: each measured kernel's compute time, memory time and
power activity fitted to its measured cells (:func:`fit_kernel`), and a trace's kernel work with
every measured kernel replaced by its fit (:func:`fit_trace_work`). ``joulebound characterize
--measured`` and ``joulebound calibrate`` use it; the model is :mod:`joulebound.gpumodel.kernel`'s.
"""

from __future__ import annotations

import numpy as np

from joulebound.core.clocks import ClockConfig
from joulebound.gpumodel.kernel import KernelWork
from joulebound.gpumodel.params import DeviceParams
from joulebound.hw.spec import DeviceSpec
from joulebound.workload.trace import Trace


def fit_kernel(tc0: float, tm0: float, f_mhz: np.ndarray, m_mhz: np.ndarray, t_meas: np.ndarray,
               e_meas: np.ndarray, f_max: float, m_max: float, params: DeviceParams,
               prior: float = 0.02, lam: float | None = None, knee: float = 0.0,
               core_auto: np.ndarray | bool = False, mem_auto: np.ndarray | bool = False
               ) -> tuple[float, float, float]:
    """Fit one kernel's compute time, memory time (s, at top clocks) and power activity to its
    measured time (s) / energy (J) at a few clocks.

    Starts from the roofline estimate ``(tc0, tm0)`` and fits multiplicative factors (log scale)
    by least squares on relative errors; a weak prior (weight ``prior``) keeps the compute/memory
    split and activity near the roofline estimate when too few clocks are measured (one clock
    cannot separate them; three at different core and memory clocks can). ``lam``: the kernel's
    share of memory time that follows the core clock (default: the parameters' "other");
    ``knee``: its memory-level-parallelism knee (:func:`~joulebound.gpumodel.kernel.mlp_knee`);
    ``core_auto``/``mem_auto``: per measured clock, whether that domain was governed.

    Returns ``(tc_max, tm_max, activity)``.
    """
    from scipy.optimize import least_squares

    from joulebound.gpumodel.kernel import KernelWork, kernel_time_energy

    f = np.asarray(f_mhz, float)
    m = np.asarray(m_mhz, float)
    t_meas = np.asarray(t_meas, float)
    e_meas = np.asarray(e_meas, float)
    lam_a = None if lam is None else np.array([float(lam)])
    knee_a = np.array([float(knee)])
    if tc0 + tm0 <= 0:  # no FLOP/byte counts (e.g. an imported kernel): start from an even split
        tc0 = tm0 = 0.5 * float(np.median(t_meas))
    total = tc0 + tm0
    tc0 = max(tc0, 1e-3 * total)
    tm0 = max(tm0, 1e-3 * total)
    kw = {"core_auto": core_auto, "mem_auto": mem_auto}
    # start from the scale that matches the measured times on average
    t_mod = kernel_time_energy(KernelWork(np.array([tc0]), np.array([tm0]), lam=lam_a,
                                          knee=knee_a), f, m, f_max, m_max, params,
                               **kw)["time_s"]
    s0 = float(np.log(np.median(t_meas / np.maximum(t_mod, 1e-15))))

    def resid(x: np.ndarray) -> np.ndarray:
        w = KernelWork(np.array([tc0 * np.exp(x[0])]), np.array([tm0 * np.exp(x[1])]),
                       np.array([np.exp(x[2])]), lam_a, knee_a)
        out = kernel_time_energy(w, f, m, f_max, m_max, params, **kw)
        return np.r_[out["time_s"] / t_meas - 1, out["energy_j"] / np.maximum(e_meas, 1e-15) - 1,
                     prior * (x[0] - x[1]), prior * x[2]]

    s0 = float(np.clip(s0, -19.0, 19.0))
    sol = least_squares(resid, [s0, s0, 0.0], bounds=([-20, -20, -5], [20, 20, 3]))
    a, b, g = np.exp(sol.x)
    return float(tc0 * a), float(tm0 * b), float(g)


def fit_trace_work(trace: Trace, spec: DeviceSpec, params: DeviceParams,
                   table: dict[tuple[str, ClockConfig], tuple]) -> tuple[KernelWork, list[str]]:
    """Per-kernel-name calibration of a trace's work from a measured table
    (:func:`joulebound.gpumodel.measured.read_table`). Every invocation of a measured kernel
    name gets the fitted factors of that name; others keep the roofline estimate.

    Returns the work and the kernel names that were calibrated.
    """
    from joulebound.gpumodel.characterize import resolve_clocks, trace_work

    work = trace_work(trace, spec, params)
    tc, tm = work.tc_max.copy(), work.tm_max.copy()
    lam = work.lam if work.lam is not None else np.full(len(trace), params.lam("other"))
    knee = work.knee if work.knee is not None else np.zeros(len(trace))
    act = np.ones(len(trace))
    names = np.array(trace.names())
    by_name: dict[str, list[tuple[ClockConfig, float, float]]] = {}
    for (k, c), vals in table.items():
        by_name.setdefault(k, []).append((c, vals[0], vals[1]))
    done = []
    for k, cells in by_name.items():
        idx = np.flatnonzero(names == k)
        if idx.size == 0:
            continue
        rc = resolve_clocks(spec, [c for c, _, _ in cells], params)
        i0 = idx[0]
        new_tc, new_tm, g = fit_kernel(tc[i0], tm[i0], rc.core_mhz, rc.mem_mhz,
                                       np.array([t for _, t, _ in cells]),
                                       np.array([e for _, _, e in cells]), spec.max_core_mhz,
                                       spec.max_mem_mhz, params, lam=float(lam[i0]),
                                       knee=float(knee[i0]), core_auto=rc.core_auto, mem_auto=rc.mem_auto)
        ra = new_tc / max(tc[i0], 1e-300) if tc[i0] > 0 else 0.0
        rb = new_tm / max(tm[i0], 1e-300) if tm[i0] > 0 else 0.0
        tc[idx] = np.where(tc[idx] > 0, tc[idx] * ra, new_tc)
        tm[idx] = np.where(tm[idx] > 0, tm[idx] * rb, new_tm)
        act[idx] = g
        done.append(k)
    return KernelWork(tc, tm, act, lam, knee, work.host_s), done
