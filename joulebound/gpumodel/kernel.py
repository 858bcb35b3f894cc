"""Vectorized kernel time and power at (core, memory) clocks, with power-limit capping.

Everything broadcasts: pass per-kernel arrays of shape ``(K, 1)`` and per-config arrays of shape
``(1, C)`` to get ``(K, C)`` results.

Time (roofline with partial overlap)::

    tc = tc_max · f_max/f                                        compute part, core clock
    tm = tm_max · ((1-λ) · S_q(m_max/(η_m·m), κ·f_max/f) / S_q(1, κ) + λ · f_max/f)   memory
    t  = overhead + (tc**p + tm**p)**(1/p)                       smooth max = overlap
    wall = max(t, h)                                             host dispatch (idle gap)

``η_m`` is the memory governor's effective speed when the memory clock is left to it (auto),
1.0 for a locked memory clock. ``λ`` (per category) is the share of the memory time that
follows the core clock in any case (L2 / load-store issue in the core domain).

**Memory-level parallelism** (``S_q(a, b) = (a**q + b**q)**(1/q)``, a smooth maximum): the SMs
keep a bounded number of bytes in flight each, issued at the core clock (Little's law), so the
bandwidth they can draw is ``n_SM · B · f`` for ``B`` bytes per SM per cycle (per category,
``mlp_bytes_per_cycle``). ``κ = f_knee/f_max`` with ``f_knee = achieved DRAM bandwidth /
(n_SM · B)`` is the core clock below which the SMs, not the DRAM, limit a streaming kernel:
above it the memory time follows the memory clock, below it the core clock (a kernel's time then
rises as the core clock falls). ``κ = 0`` (no ``B``) is the linear-λ model. Dividing by
``S_q(1, κ)`` keeps ``tm_max`` the memory time at the top clocks.

**Host dispatch**: ``h`` is the time the host needs to launch the kernel (per kernel, from the
framework's dispatch cost or a measured timeline). When the GPU finishes first it idles for
``h - t`` at the idle power of its clocks::

    P_gap = idle + mem_static · Vm(m)² m/m_max + idle_clk · V(f)² f/f_max

(``idle_clk_w``: the clock tree of an idle GPU, measured per locked clock on A100/H100). The
kernel itself is modeled as if back to back (``h = 0``) unless ``h`` is given.

Power::

    P = idle + mem_static · Vm(m)² m/m_max
        + a · [ core_dyn · (base + (1-base)·tc/t) · V(f)² f/f_max · (1 + δ_auto)
                + mem_dyn · tm/t · Vm(m)² m/m_max ]

with ``a`` the kernel's activity (1 = the device's calibrated average), ``V`` the core V–f
curve, ``Vm`` the memory technology's voltage curve and ``δ_auto`` the core governor's extra
power when the core clock is left to it; where the memory clock is left to its governor both
memory terms are ``1 + δ_mem`` times larger (``auto_mem_power_frac``).

Power cap: when ``P(f) > limit`` the GPU runs at the highest clock ``f_eff < f`` with
``P(f_eff) = limit`` (vectorized bisection) — for locked and governed clocks alike. Energy =
P·t + P_gap·(wall - t).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from joulebound.gpumodel.params import DeviceParams
from joulebound.hw import memory


@dataclass
class KernelWork:
    """Per-kernel model inputs (arrays of equal length K).

    Attributes:
        tc_max: compute time (s) at the top core clock (FLOPs / achieved FLOP/s).
        tm_max: memory time (s) at the top memory clock (DRAM bytes / achieved bandwidth).
        activity: optional per-kernel multiplier (>= 0) of the dynamic (core and memory) power,
            1.0 = the device's calibrated average; fitted from measurements by
            :func:`joulebound.gpumodel.fit_measured.fit_kernel`.
        lam: optional per-kernel share of the memory time that follows the core clock
            (default: the parameters' ``core_mem_frac["other"]``).
        knee: optional per-kernel memory-level-parallelism knee ``κ = f_knee/f_max`` (fraction;
            default 0 = none): below ``κ·f_max`` the SMs cannot keep DRAM busy at the top memory
            clock (:func:`mlp_knee`).
        host_s: optional per-kernel host dispatch time (s; default 0): the kernel's wall time is
            at least this, the GPU idling for the rest.
    """

    tc_max: np.ndarray
    tm_max: np.ndarray
    activity: np.ndarray | None = None
    lam: np.ndarray | None = None
    knee: np.ndarray | None = None
    host_s: np.ndarray | None = None

    def take(self, idx: np.ndarray) -> KernelWork:
        """The kernels at ``idx`` (same shape conventions)."""
        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.asarray(a)[idx]
        return KernelWork(pick(self.tc_max), pick(self.tm_max), pick(self.activity),
                          pick(self.lam), pick(self.knee), pick(self.host_s))


def mlp_knee(bw_bps: np.ndarray | float, sm_count: int, f_max_mhz: float,
             bytes_per_cycle: np.ndarray | float) -> np.ndarray:
    """``κ = f_knee / f_max``: the core clock (as a fraction of the top one) below which ``sm_count``
    SMs keeping ``bytes_per_cycle`` bytes each in flight per core cycle draw less than the achieved
    DRAM bandwidth ``bw_bps`` (B/s). 0 where ``bytes_per_cycle`` or ``sm_count`` is 0 (no knee)."""
    b = np.asarray(bytes_per_cycle, float)
    ok = (b > 0) & (sm_count > 0)
    return np.where(ok, np.asarray(bw_bps, float)
                    / np.where(ok, sm_count * b * f_max_mhz * 1e6, 1.0), 0.0)


def knee_norm(knee: np.ndarray | float, q: float) -> np.ndarray:
    """``S_q(1, κ)``: the knee's factor at the top clocks, divided out so that ``tm_max`` stays
    the memory time at the top clocks (what ``bw_eff`` and measured durations describe); the
    knee then changes only how the time moves with the clocks."""
    return (1.0 + np.asarray(knee, float) ** q) ** (1.0 / q)


def smooth_max(a: np.ndarray, b: np.ndarray, q: float) -> np.ndarray:
    """``(a**q + b**q)**(1/q)`` for ``a, b >= 0``, as ``big·(1 + (small/big)**q)**(1/q)``: one of
    the two ratios is exactly 1.0 (the larger over itself), so this is the same float at one
    fractional power per cell, not two. The compute/memory overlap and the
    memory-level-parallelism knee both use it."""
    big = np.maximum(a, b)
    safe = np.where(big > 0, big, 1.0)
    return np.where(big > 0, safe * (1.0 + (np.minimum(a, b) / safe) ** q) ** (1.0 / q), 0.0)


def memory_scale(m_mhz: np.ndarray, m_max: float, params: DeviceParams,
                 mem_auto: np.ndarray | bool = False) -> np.ndarray:
    """``Vm(m)² · m/m_max``: memory power at clock ``m`` relative to the top memory clock, times
    ``1 + auto_mem_power_frac`` where the memory clock is left to its governor."""
    frac = np.asarray(m_mhz, float) / m_max
    ms = memory.relative_voltage(params.mem_v, frac) ** 2 * frac
    if params.auto_mem_power_frac:
        ms = ms * (1.0 + np.where(mem_auto, params.auto_mem_power_frac, 0.0))
    return ms


def _lam(work: KernelWork, params: DeviceParams) -> np.ndarray | float:
    return params.lam("other") if work.lam is None else np.asarray(work.lam, float)


def _knee(work: KernelWork) -> np.ndarray | float:
    return 0.0 if work.knee is None else np.asarray(work.knee, float)


def with_host_gaps(time_s: np.ndarray, energy_j: np.ndarray, host_s: np.ndarray,
                   gap_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(wall time, energy)`` of cells whose kernel waits ``host_s`` (s) for the host: where a
    cell is shorter, its time becomes ``host_s`` and the GPU idles for the rest at ``gap_w``
    (W, :func:`gap_power`). Broadcasts; idempotent (a cell that already includes its gap is
    unchanged). The one place the idle-gap energy is computed."""
    wall = np.maximum(time_s, host_s)
    return wall, energy_j + gap_w * (wall - time_s)


def gap_power(f_mhz: np.ndarray, m_mhz: np.ndarray, m_max: float, params: DeviceParams,
              mem_auto: np.ndarray | bool = False) -> np.ndarray:
    """Board power (W) of an idle GPU at core clock ``f_mhz`` and memory clock ``m_mhz`` (MHz):
    what it draws while it waits for the host between kernels."""
    return (params.idle_w + params.mem_static_w * memory_scale(m_mhz, m_max, params, mem_auto)
            + params.idle_clk_w * params.vf.dynamic_scale(np.asarray(f_mhz, float)))


def kernel_time(work: KernelWork, f_mhz: np.ndarray, m_mhz: np.ndarray, f_max: float,
                m_max: float, params: DeviceParams, mem_auto: np.ndarray | bool = False
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Time (s) of each kernel at core clock ``f_mhz`` and memory clock ``m_mhz`` (MHz).

    ``mem_auto``: where True the memory clock is governed (its effective speed is
    ``params.auto_mem_eff × m``). Returns ``(t, tc, tm)``: total time and its compute and memory
    parts (s), broadcast shape.
    """
    f = np.asarray(f_mhz, float)
    m = np.asarray(m_mhz, float)
    lam = _lam(work, params)
    m_eff = np.where(mem_auto, params.auto_mem_eff, 1.0) * m
    tc = work.tc_max * (f_max / f)
    mem = m_max / m_eff
    knee = _knee(work)
    if np.any(np.asarray(knee) > 0):
        mem = smooth_max(np.broadcast_to(mem, np.broadcast(mem, f, knee).shape),
                         knee * (f_max / f), params.mlp_q) / knee_norm(knee, params.mlp_q)
    tm = work.tm_max * ((1.0 - lam) * mem + lam * (f_max / f))
    return params.launch_overhead_s + smooth_max(tc, tm, params.overlap_p), tc, tm


def kernel_power(t: np.ndarray, tc: np.ndarray, tm: np.ndarray, f_mhz: np.ndarray,
                 m_mhz: np.ndarray, f_max: float, m_max: float,
                 params: DeviceParams, activity: np.ndarray | float = 1.0,
                 core_auto: np.ndarray | bool = False,
                 mem_auto: np.ndarray | bool = False) -> np.ndarray:
    """Average board power (W) while a kernel with parts ``(t, tc, tm)`` runs (uncapped);
    ``activity`` scales the dynamic terms; ``core_auto`` / ``mem_auto`` mark governed clocks."""
    f = np.asarray(f_mhz, float)
    u_c = np.clip(tc / t, 0.0, 1.0)
    gov = 1.0 + np.where(core_auto, params.auto_power_frac, 0.0)
    core = params.core_dyn_w * (params.core_base_frac + (1 - params.core_base_frac) * u_c) \
        * params.vf.dynamic_scale(f) * gov
    u_m = np.clip(tm / t, 0.0, 1.0)
    ms = memory_scale(m_mhz, m_max, params, mem_auto)
    return params.idle_w + params.mem_static_w * ms + activity * (core + params.mem_dyn_w * u_m * ms)


def kernel_time_energy(work: KernelWork, f_mhz: np.ndarray, m_mhz: np.ndarray, f_max: float,
                       m_max: float, params: DeviceParams, f_min: float | None = None,
                       iters: int = 22, core_auto: np.ndarray | bool = False,
                       mem_auto: np.ndarray | bool = False) -> dict[str, np.ndarray]:
    """Time (s), energy (J), power (W) and effective core clock (MHz) under the power limit.

    Args:
        work: per-kernel compute/memory times at top clocks (shape ``(K, 1)`` arrays to broadcast
            against ``(1, C)`` clocks).
        f_mhz, m_mhz: requested core and memory clocks (MHz); for a governed (auto) core, the
            governor's ceiling.
        f_max, m_max: the GPU's top core and memory clocks (MHz).
        params: model parameters (power limit included).
        f_min: lowest core clock the cap may push to (default 20 % of ``f_max``).
        iters: bisection steps for the capped clock (22 give < 0.001 MHz).
        core_auto, mem_auto: per config, whether that clock domain is left to the governor.

    Returns:
        dict with ``time_s``, ``energy_j``, ``power_w``, ``f_eff_mhz``, ``capped`` (bool).
    """
    f_req = np.asarray(f_mhz, float)
    m = np.asarray(m_mhz, float)
    ca = np.asarray(core_auto, bool)
    ma = np.asarray(mem_auto, bool)
    t, tc, tm = kernel_time(work, f_req, m, f_max, m_max, params, ma)
    act = 1.0 if work.activity is None else np.asarray(work.activity, float)
    p = kernel_power(t, tc, tm, f_req, m, f_max, m_max, params, act, ca, mem_auto=ma)
    f_req, m, t, ca, ma = np.broadcast_arrays(f_req, m, t, ca, ma)
    p = np.broadcast_to(p, t.shape)
    capped = p > params.power_limit_w
    f_eff = np.array(f_req, dtype=float)
    if capped.any():
        lo = np.full(int(capped.sum()), f_min if f_min is not None else 0.2 * f_max)
        hi = f_req[capped].copy()
        lam = _lam(work, params)
        sub = KernelWork(np.broadcast_to(work.tc_max, t.shape)[capped],
                         np.broadcast_to(work.tm_max, t.shape)[capped],
                         lam=np.broadcast_to(lam, t.shape)[capped],
                         knee=np.broadcast_to(_knee(work), t.shape)[capped])
        ac = np.broadcast_to(act, t.shape)[capped]
        mc, cac, mac = m[capped], ca[capped], ma[capped]
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            tt, cc, mm = kernel_time(sub, mid, mc, f_max, m_max, params, mac)
            over = kernel_power(tt, cc, mm, mid, mc, f_max, m_max, params, ac, cac,
                                mem_auto=mac) > params.power_limit_w
            hi = np.where(over, mid, hi)
            lo = np.where(over, lo, mid)
        f_eff[capped] = lo
        t = np.array(t)
        p = np.array(p)
        tt, cc, mm = kernel_time(sub, lo, mc, f_max, m_max, params, mac)
        t[capped] = tt
        p[capped] = kernel_power(tt, cc, mm, lo, mc, f_max, m_max, params, ac, cac,
                                 mem_auto=mac)
    energy = p * t
    if work.host_s is not None and np.any(np.asarray(work.host_s) > 0):
        t, energy = with_host_gaps(t, energy, np.asarray(work.host_s, float),
                                   gap_power(f_req, m, m_max, params, ma))
        p = energy / t
    return {"time_s": t, "energy_j": energy, "power_w": p, "f_eff_mhz": f_eff, "capped": capped}
