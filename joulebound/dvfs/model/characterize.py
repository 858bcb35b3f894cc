"""``characterize(trace, device)``: modeled time and energy of every kernel at every clock pair."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...clocks import ClockConfig
from ...devices.spec import DeviceSpec
from ...errors import JouleboundError
from ...workload.trace import Trace
from ..characterization import Characterization
from .kernel import KernelWork, kernel_time, kernel_time_energy
from .params import TENSOR_CATEGORIES, DeviceParams, params_for

MODEL_VERSION = "joulebound-gpu-model/1"


def resolve_device(device: str | DeviceSpec) -> DeviceSpec:
    """A :class:`DeviceSpec` from a catalog name (case-insensitive, aliases) or a spec."""
    if isinstance(device, DeviceSpec):
        return device
    from ...devices.catalog import get_device

    return get_device(device)


def resolve_clocks(spec: DeviceSpec, configs: Sequence[ClockConfig]) -> tuple[np.ndarray, np.ndarray]:
    """Concrete (core, memory) MHz per config; "auto" in a domain means the governor's top clock.

    Raises :class:`JouleboundError` naming unsupported configs.
    """
    bad = [c.label for c in configs if not spec.supports(c)]
    if bad:
        raise JouleboundError(
            f"{spec.name}: clock config(s) {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''} "
            f"not supported; memory clocks are {spec.mem_clocks_mhz} MHz, see "
            f"`joulebound devices show {spec.name}` for the core clocks")
    core = np.empty(len(configs))
    mem = np.empty(len(configs))
    for i, c in enumerate(configs):
        m = spec.max_mem_mhz if c.mem_mhz is None else c.mem_mhz
        f = (max(spec.supported_clocks.get(m, [spec.max_core_mhz])) if c.core_mhz is None
             else c.core_mhz)
        core[i], mem[i] = f, m
    return core, mem


def trace_work(trace: Trace, spec: DeviceSpec, params: DeviceParams) -> KernelWork:
    """Compute and memory time (s) of each kernel at the top clocks.

    Tensor-core categories (gemm, attention) use the kernel dtype's dense peak, others the fp32
    rate; both times are scaled by the category's achieved efficiency. Kernels with a measured
    ``duration_s`` have both parts scaled so that the modeled time at the governor's clocks equals
    the measured duration (the measurement is assumed taken under the default governor). A trace of
    CPU ops (``meta["kind"] == "cpu"``: profiled without CUDA) has CPU times, which say nothing
    about GPU kernel time; they are not used.
    """
    ks = trace.kernels
    peak = np.array([spec.peak(k.dtype if k.category in TENSOR_CATEGORIES else "fp32")
                     for k in ks], float)
    eff = np.array([params.compute_eff.get(k.category, params.compute_eff.get("other", 0.4))
                    for k in ks], float)
    tc = trace.flops() / (peak * eff)
    tm = trace.bytes() / (params.bw_eff * spec.mem_bandwidth_bps)
    dur = trace.durations()
    known = np.isfinite(dur) & (trace.meta.get("kind") != "cpu")
    if known.any():
        t, _, _ = kernel_time(KernelWork(tc[known], tm[known]), spec.max_core_mhz, spec.max_mem_mhz,
                              spec.max_core_mhz, spec.max_mem_mhz, params)
        body = np.maximum(t - params.launch_overhead_s, 1e-12)
        target = np.maximum(dur[known] - params.launch_overhead_s, 0.0)
        scale = np.where((tc[known] + tm[known]) > 0, target / body, 0.0)
        tc[known] *= scale
        tm[known] *= scale
        # a kernel with no FLOPs and no bytes but a measured duration: treat it as memory time
        empty = known.copy()
        empty[known] = (tc[known] + tm[known]) == 0
        tm[empty] = np.maximum(dur[empty] - params.launch_overhead_s, 0.0)
    return KernelWork(tc, tm)


def characterize(trace: Trace, device: str | DeviceSpec,
                 configs: Sequence[ClockConfig] | None = None, include_auto: bool = True,
                 params: DeviceParams | None = None,
                 work: KernelWork | None = None) -> Characterization:
    """Modeled time (s) and energy (J) of every kernel of ``trace`` at every clock config.

    Args:
        trace: the kernels of one iteration.
        device: catalog name (``"rtx3080ti"``) or a :class:`DeviceSpec`.
        configs: clock configs (default: every supported (core, memory) pair).
        include_auto: put the governor baseline ``ClockConfig()`` ("auto") first when ``configs``
            is None (or append it when missing from a given list).
        params: model parameters (default: shipped calibration for the device, else datasheet
            defaults).
        work: per-kernel compute/memory times and activity (default: from the trace's FLOPs and
            bytes via :func:`trace_work`; :func:`~joulebound.dvfs.model.calibrate.fit_trace_work`
            fits them to measured cells).

    Returns:
        A :class:`Characterization` with every cell ``modeled`` (``measured`` all False); ``meta``
        holds the model version, parameter provenance and the effective (power-capped) clocks.
    """
    spec = resolve_device(device)
    prm = params if params is not None else params_for(spec)
    if configs is None:
        cfgs = spec.clock_pairs(include_auto=include_auto)
    else:
        cfgs = list(configs)
        if include_auto and ClockConfig() not in cfgs:
            cfgs = [ClockConfig(), *cfgs]
    if not cfgs:
        raise JouleboundError("no clock configs to characterize")
    if len(trace) == 0:
        raise JouleboundError(f"trace {trace.name!r} has no kernels")
    core, mem = resolve_clocks(spec, cfgs)
    if work is None:
        work = trace_work(trace, spec, prm)
    act = np.ones(len(trace)) if work.activity is None else np.asarray(work.activity, float)
    # identical invocations share one row of the computation
    keys = np.stack([work.tc_max, work.tm_max, act], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    uw = KernelWork(uniq[:, :1], uniq[:, 1:2], uniq[:, 2:])
    out = kernel_time_energy(uw, core[None, :], mem[None, :], spec.max_core_mhz,
                             spec.max_mem_mhz, prm)
    time_s = out["time_s"][inverse]
    energy_j = out["energy_j"][inverse]
    meta = {
        "trace": trace.name, "model": MODEL_VERSION, "params_calibration": prm.calibration,
        "params_sources": prm.sources, "power_limit_w": prm.power_limit_w,
        "n_unique_kernels": int(uniq.shape[0]),
        "capped_cells_fraction": float(out["capped"].mean()),
    }
    return Characterization(
        kernel_names=trace.names(), configs=cfgs, time_s=time_s, energy_j=energy_j,
        measured=np.zeros(time_s.shape, bool), device=spec.name, meta=meta,
    )
