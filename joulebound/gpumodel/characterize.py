"""``characterize(trace, device)``: modeled time and energy of every kernel at every clock pair."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError
from joulebound.gpumodel.characterization import Characterization
from joulebound.gpumodel.kernel import (
    KernelWork,
    gap_power,
    kernel_time,
    kernel_time_energy,
    mlp_knee,
    with_host_gaps,
)
from joulebound.gpumodel.kernel_table import config_terms, fill_table, keys_work
from joulebound.gpumodel.params import TENSOR_CATEGORIES, DeviceParams, params_for
from joulebound.hw import memory
from joulebound.hw.spec import DeviceSpec
from joulebound.workload.trace import Trace

MODEL_VERSION = "joulebound-gpu-model/2"


def resolve_device(device: str | DeviceSpec) -> DeviceSpec:
    """A :class:`DeviceSpec` from a catalog name (case-insensitive, aliases) or a spec."""
    if isinstance(device, DeviceSpec):
        return device
    from joulebound.hw.catalog import get_device

    return get_device(device)


@dataclass(frozen=True)
class ResolvedClocks:
    """Concrete clocks of a list of configs (arrays over configs).

    Attributes:
        core_mhz: locked core clock, or the governor's ceiling where the core is auto (MHz).
        mem_mhz: locked memory clock, or the top memory clock where the memory is auto (MHz).
        core_auto, mem_auto: whether that domain is left to the GPU's governor.
    """

    core_mhz: np.ndarray
    mem_mhz: np.ndarray
    core_auto: np.ndarray
    mem_auto: np.ndarray


def governor_core_mhz(spec: DeviceSpec, params: DeviceParams, mem_mhz: int) -> float:
    """The core clock (MHz) the governor aims for at memory clock ``mem_mhz`` before the power
    cap: the sustained boost ceiling ``params.auto_core_mhz`` (default: the top of the table),
    never above the highest core clock the card pairs with that memory clock."""
    top = float(max(spec.supported_clocks.get(mem_mhz, [spec.max_core_mhz])))
    ceiling = params.auto_core_mhz if params.auto_core_mhz else top
    return float(min(ceiling, top))


def resolve_clocks(spec: DeviceSpec, configs: Sequence[ClockConfig],
                   params: DeviceParams | None = None) -> ResolvedClocks:
    """Concrete (core, memory) MHz per config; "auto" in a domain means that domain is left to
    the governor: memory at its top clock, core at :func:`governor_core_mhz` (both then limited
    by the power cap in the model).

    Raises :class:`JouleboundError` naming unsupported configs (including pairs the card does
    not honour, e.g. 405 MHz memory with a core clock above 420 MHz on GA102).
    """
    prm = params if params is not None else params_for(spec)
    bad = [c.label for c in configs if not spec.supports(c)]
    if bad:
        raise JouleboundError(
            f"{spec.name}: clock config(s) {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''} "
            f"not supported; memory clocks are {spec.mem_clocks_mhz} MHz, see "
            f"`joulebound devices show {spec.name}` for the core clocks")
    n = len(configs)
    core, mem = np.empty(n), np.empty(n)
    ca, ma = np.zeros(n, bool), np.zeros(n, bool)
    for i, c in enumerate(configs):
        m = spec.max_mem_mhz if c.mem_mhz is None else c.mem_mhz
        core[i] = governor_core_mhz(spec, prm, m) if c.core_mhz is None else c.core_mhz
        mem[i] = m
        ca[i], ma[i] = c.core_mhz is None, c.mem_mhz is None
    return ResolvedClocks(core, mem, ca, ma)


ELEMENT_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}


def _kinds(trace: Trace) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """Each kernel's index into the trace's distinct (category, dtype) pairs, and those pairs
    (first-appearance order): per-kernel parameters are then looked up once per pair."""
    pairs = list(map(attrgetter("category", "dtype"), trace.kernels))
    kinds = list(dict.fromkeys(pairs))
    idx = {kd: i for i, kd in enumerate(kinds)}
    return np.fromiter(map(idx.__getitem__, pairs), np.intp, len(pairs)), kinds


def _per_kind(fn, kinds: list[tuple[str, str]], codes: np.ndarray) -> np.ndarray:
    """``fn(category, dtype)`` for every kernel (evaluated once per distinct pair)."""
    return np.array([fn(c, d) for c, d in kinds], float).reshape(-1)[codes]


def _dram_bytes(trace: Trace, flops: np.ndarray, params: DeviceParams, codes: np.ndarray,
                kinds: list[tuple[str, str]]) -> np.ndarray:
    b = trace.bytes().astype(float)
    if not params.gemm_tile or params.gemm_tile <= 0:
        return b
    size = _per_kind(lambda c, d: ELEMENT_BYTES.get(d, 2) if c in TENSOR_CATEGORIES else 0.0,
                     kinds, codes)
    return b + np.where(size > 0, size * flops / params.gemm_tile, 0.0)


def dram_bytes(trace: Trace, params: DeviceParams) -> np.ndarray:
    """DRAM traffic (bytes) per kernel: the trace's bytes (compulsory traffic: every operand read
    once, every result written once) plus, for tensor-core GEMMs, the re-reads of operand panels
    that tiling cannot avoid: ``element size × FLOPs / gemm_tile`` (a C[M,N] = A[M,K]·B[K,N]
    GEMM with T×T output tiles re-reads A and B ``N/T`` and ``M/T`` times: ``2·M·N·K/T``
    elements = FLOPs / T)."""
    return _dram_bytes(trace, trace.flops(), params, *_kinds(trace))


def trace_work(trace: Trace, spec: DeviceSpec, params: DeviceParams) -> KernelWork:
    """Compute and memory time (s) of each kernel at the top clocks, its memory-time share that
    follows the core clock, its memory-level-parallelism knee and its host dispatch time.

    Tensor-core categories (gemm, attention) use the kernel dtype's dense peak, others the fp32
    rate; compute time is scaled by the category's achieved efficiency, memory time (DRAM bytes
    of :func:`dram_bytes`) by the category's achieved bandwidth. The knee ``κ`` is
    :func:`~.kernel.mlp_knee` of the category's achieved bandwidth, the device's SM count and the
    category's bytes in flight per SM-cycle. Kernels with a measured ``duration_s`` have both
    parts scaled so that the modeled time at the governor's clocks equals the measured duration
    (the measurement is assumed taken under the default governor). A trace of CPU ops
    (``meta["kind"] == "cpu"``: profiled without CUDA) has CPU times, which say nothing about GPU
    kernel time; they are not used.

    Host dispatch time per kernel (:func:`host_times`): from a measured timeline, the interval
    the host took to launch the next kernel where the GPU waited for it; else the trace's
    ``meta["host_dispatch_s"]`` (the framework's cost per kernel launch, s); else 0.
    """
    codes, kinds = _kinds(trace)
    peak = _per_kind(lambda c, d: spec.peak(d if c in TENSOR_CATEGORIES else "fp32"), kinds,
                     codes)
    eff = _per_kind(lambda c, d: params.eff(c), kinds, codes)
    bw = _per_kind(lambda c, d: params.bw(c), kinds, codes)
    lam = _per_kind(lambda c, d: params.lam(c), kinds, codes)
    knee = _per_kind(lambda c, d: float(mlp_knee(params.bw(c) * spec.mem_bandwidth_bps,
                                                 spec.sm_count, spec.max_core_mhz,
                                                 params.mlp(c))), kinds, codes)
    flops = trace.flops()
    tc = flops / (peak * eff)
    tm = _dram_bytes(trace, flops, params, codes, kinds) / (bw * spec.mem_bandwidth_bps)
    dur = trace.durations()
    known = np.isfinite(dur) & (trace.meta.get("kind") != "cpu")
    if known.any():
        f_auto = governor_core_mhz(spec, params, spec.max_mem_mhz)
        t, _, _ = kernel_time(KernelWork(tc[known], tm[known], lam=lam[known], knee=knee[known]),
                              f_auto, spec.max_mem_mhz, spec.max_core_mhz, spec.max_mem_mhz,
                              params, mem_auto=True)
        body = np.maximum(t - params.launch_overhead_s, 1e-12)
        target = np.maximum(dur[known] - params.launch_overhead_s, 0.0)
        scale = np.where((tc[known] + tm[known]) > 0, target / body, 0.0)
        tc[known] *= scale
        tm[known] *= scale
        # a kernel with no FLOPs and no bytes but a measured duration: treat it as memory time
        empty = known.copy()
        empty[known] = (tc[known] + tm[known]) == 0
        tm[empty] = np.maximum(dur[empty] - params.launch_overhead_s, 0.0)
    host = host_times(trace)
    return KernelWork(tc, tm, lam=lam, knee=knee, host_s=host if host.any() else None)


def host_times(trace: Trace) -> np.ndarray:
    """Host dispatch time (s) of each kernel, 0 where the GPU did not wait for the host.

    A kernel profiled with the GPU idle after it (``meta["gap_after_s"]``, from the timeline:
    the next kernel started that long after every earlier one had ended) took the host its
    measured duration plus that gap to follow; at other clocks its wall time is at least that.
    Otherwise the trace's ``meta["host_dispatch_s"]`` (s per kernel launch: the framework's
    dispatch cost) applies to every kernel; else 0 (kernels back to back, as measured alone in a
    loop)."""
    n = len(trace.kernels)
    dispatch = float(trace.meta.get("host_dispatch_s") or 0.0)
    out = np.full(n, dispatch if np.isfinite(dispatch) and dispatch > 0 else 0.0)
    for i, k in enumerate(trace.kernels):
        gap = k.meta.get("gap_after_s") if k.meta else None
        if isinstance(gap, int | float) and gap > 0 and k.duration_s is not None:
            out[i] = max(out[i], float(k.duration_s) + float(gap))
    return out


def planning_configs(spec: DeviceSpec, params: DeviceParams, include_auto: bool = True,
                     allow_untested: bool = False) -> tuple[list[ClockConfig], list[int]]:
    """Every supported (core, memory) pair, plus auto and the per-domain governed configs
    (``auto/MEM`` for every memory clock and ``CORE/auto`` for every core clock of the top
    memory clock, as NVML allows locking one domain), without memory clocks never measured on
    the device's memory technology unless ``allow_untested``.

    Returns ``(configs, excluded memory clocks in MHz)``.
    """
    tested = set(memory.tested_clocks(spec.mem_clocks_mhz, spec.max_mem_mhz,
                                      params.tested_mem_fracs))
    mems = [m for m in spec.mem_clocks_mhz if allow_untested or m in tested]
    excluded = [m for m in spec.mem_clocks_mhz if m not in mems]
    cfgs: list[ClockConfig] = [ClockConfig()] if include_auto else []
    for m in mems:
        cfgs.append(ClockConfig(None, m))
    cfgs += [ClockConfig(c, None) for c in spec.core_clocks_mhz(spec.max_mem_mhz)]
    for m in mems:
        cfgs += [ClockConfig(c, m) for c in spec.core_clocks_mhz(m)]
    return cfgs, excluded


def _check_costs(trace: Trace) -> None:
    """Refuse kernels whose FLOPs or bytes are negative or not finite (the compiled table path
    assumes non-negative work: such a kernel once corrupted its memory)."""
    costs = np.array([(k.flops, k.bytes) for k in trace.kernels], float)
    bad = ~np.isfinite(costs).all(axis=1) | (costs < 0).any(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        k = trace.kernels[i]
        raise JouleboundError(f"trace {trace.name!r}: kernel {i} ({k.name!r}) has {k.flops!r} FLOPs and "
                              f"{k.bytes!r} bytes; a kernel's work must be finite and >= 0 "
                              f"({int(bad.sum())} such kernel(s))")


def characterize(trace: Trace, device: str | DeviceSpec,
                 configs: Sequence[ClockConfig] | None = None, include_auto: bool = True,
                 params: DeviceParams | None = None,
                 work: KernelWork | None = None,
                 allow_untested: bool = False, chunk_cells: int = 1 << 15) -> Characterization:
    """Modeled time (s) and energy (J) of every kernel of ``trace`` at every clock config.

    Args:
        trace: the kernels of one iteration.
        device: catalog name (``"rtx3080ti"``) or a :class:`DeviceSpec`.
        configs: clock configs (default: :func:`planning_configs` — every supported pair and
            the per-domain governed configs, without untested memory clocks).
        include_auto: put the governor baseline ``ClockConfig()`` ("auto") first when ``configs``
            is None (or prepend it when missing from a given list).
        params: model parameters (default: shipped calibration for the device, else datasheet
            defaults).
        work: per-kernel compute/memory times and activity (default: from the trace's FLOPs and
            bytes via :func:`trace_work`; :func:`~joulebound.gpumodel.fit_measured.fit_trace_work`
            fits them to measured cells).
        allow_untested: with ``configs=None``, also include memory clocks never measured on the
            device's memory technology.
        chunk_cells: kernel × config cells modeled at a time (bounds the temporaries; the result
            does not depend on it).

    Returns:
        A :class:`Characterization` with every cell ``modeled`` (``measured`` all False); ``meta``
        holds the model version, parameter provenance, the memory clocks left out as untested
        and the share of power-capped cells.
    """
    spec = resolve_device(device)
    prm = params if params is not None else params_for(spec)
    excluded: list[int] = []
    if configs is None:
        cfgs, excluded = planning_configs(spec, prm, include_auto, allow_untested)
    else:
        cfgs = list(configs)
        if include_auto and ClockConfig() not in cfgs:
            cfgs = [ClockConfig(), *cfgs]
    if not cfgs:
        raise JouleboundError("no clock configs to characterize")
    if len(trace) == 0:
        raise JouleboundError(f"trace {trace.name!r} has no kernels")
    _check_costs(trace)
    rc = resolve_clocks(spec, cfgs, prm)
    if work is None:
        work = trace_work(trace, spec, prm)
    table = evaluate(work, rc, spec, prm, chunk_cells=chunk_cells)
    time_s, energy_j = table.time_s, table.energy_j
    meta = {
        "trace": trace.name, "model": MODEL_VERSION, "params_calibration": prm.calibration,
        "params_sources": prm.sources, "power_limit_w": prm.power_limit_w,
        "n_unique_kernels": table.n_unique,
        "capped_cells_fraction": table.capped_fraction,
        "untested_mem_mhz_excluded": excluded,
    }
    return Characterization(
        kernel_names=trace.names(), configs=cfgs, time_s=time_s, energy_j=energy_j,
        measured=np.zeros(time_s.shape, bool), device=spec.name, meta=meta,
    )


def apply_host_gaps(time_s: np.ndarray, energy_j: np.ndarray, host_s: np.ndarray | None,
                    rc: ResolvedClocks, spec: DeviceSpec, params: DeviceParams
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(time, energy)`` of a (K, C) table with each kernel's host dispatch time ``host_s`` (K,)
    kept: where a cell is shorter, its time becomes ``host_s`` and the idle gap is paid at the
    clocks' gap power (:func:`~.kernel.gap_power`). Idempotent (a cell that already includes its
    gap is unchanged): measured cells of kernels replayed back to back get the gaps the training
    step has."""
    if host_s is None or not np.any(np.asarray(host_s) > 0):
        return time_s, energy_j
    pg = gap_power(rc.core_mhz, rc.mem_mhz, spec.max_mem_mhz, params, rc.mem_auto)
    return with_host_gaps(time_s, energy_j, np.asarray(host_s, float).reshape(-1, 1), pg[None, :])


def _work_keys(work: KernelWork, params: DeviceParams) -> np.ndarray:
    """(K, 6) model inputs per kernel (:data:`~.kernel_table.KEY_COLUMNS`): compute time, memory
    time, activity, memory-time share following the core clock, memory-level-parallelism knee,
    host dispatch time (identical rows model identically)."""
    n = len(work.tc_max)

    def col(a: np.ndarray | None, default: float) -> np.ndarray:
        return np.full(n, default) if a is None else np.asarray(a, float).reshape(-1)

    return np.stack([np.asarray(work.tc_max, float).reshape(-1),
                     np.asarray(work.tm_max, float).reshape(-1), col(work.activity, 1.0),
                     col(work.lam, params.lam("other")), col(work.knee, 0.0),
                     col(work.host_s, 0.0)], axis=1)


def _distinct_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)`` of the distinct rows of ``keys`` (K, n), bit for bit: the index of
    each distinct row's first occurrence, and each row's distinct-row number.

    Rows are hashed to one 64-bit word and the words deduplicated (a sort of K integers instead
    of K 4-field records); rows that share a hash are checked bit for bit against the first
    one and, on a collision, everything is recomputed by ``np.unique(keys, axis=0)``."""
    bits = np.ascontiguousarray(keys, float).view(np.uint64)
    h = bits[:, 0] * np.uint64(0x9E3779B97F4A7C15)
    for j in range(1, bits.shape[1]):
        h ^= bits[:, j] + np.uint64(0x9E3779B97F4A7C15) + (h << np.uint64(6)) + \
            (h >> np.uint64(2))
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    rep = first[inverse]
    merged = np.flatnonzero(rep != np.arange(len(rep)))      # rows that share a hash
    if len(merged) and not np.array_equal(bits[merged], bits[rep[merged]]):
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    return first, inverse


@dataclass
class ModelTable:
    """The kernel model over a kernel × config table.

    Attributes:
        time_s, energy_j: (K, C) time (s) and energy (J) of every kernel at every config.
        n_unique: distinct kernel rows modeled (identical rows model identically).
        capped_fraction: share of the distinct rows' cells the power limit capped.
        power_w, f_eff_mhz: (K, C) average power (W) and effective core clock (MHz) — from the
            reference method only (``None`` from the fast one).
    """

    time_s: np.ndarray
    energy_j: np.ndarray
    n_unique: int
    capped_fraction: float
    power_w: np.ndarray | None = None
    f_eff_mhz: np.ndarray | None = None


#: how :func:`evaluate` computes the table
METHODS = ("fast", "reference")


def evaluate(work: KernelWork, rc: ResolvedClocks, spec: DeviceSpec, params: DeviceParams, *,
             method: str = "fast", chunk_cells: int = 1 << 15) -> ModelTable:
    """THE kernel model: time (s) and energy (J) of every kernel of ``work`` at the clocks
    ``rc`` on ``spec`` with ``params`` — the one entry point every product caller uses.

    Two implementations of one model (:mod:`.kernel`'s formulas):

    * ``method="reference"`` — the specification: :func:`~.kernel.kernel_time_energy`,
      vectorized numpy formula by formula (a 22-step bisection for power-capped cells), on the
      distinct kernel rows; also returns power and the effective core clock;
    * ``method="fast"`` (default) — the compiled path (:func:`~.kernel_table.fill_table`:
      per-config terms computed once, a tabulated smooth maximum, the power cap solved once per
      kernel and config group, numba loops), within 1e-8 relative of the reference cell for cell
      (1e-7 pinned by the tests). When most kernels repeat (an analytic trace: every layer and
      iteration) the distinct rows are modeled once and copied out; when most are distinct (a
      profiled trace) every row is modeled in place, with no second table.

    ``chunk_cells``: cells modeled at a time by the fast path (the result does not depend on it).
    The share of power-capped cells is counted over the distinct rows.
    """
    if method == "reference":
        return _evaluate_reference(work, rc, spec, params)
    if method != "fast":
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    keys = _work_keys(work, params)
    n, c_n = len(keys), len(rc.core_mhz)
    ct = config_terms(rc.core_mhz, rc.mem_mhz, spec.max_core_mhz, spec.max_mem_mhz, params,
                      rc.core_auto, rc.mem_auto)
    first, inverse = _distinct_rows(keys)
    n_unique = len(first)
    time_s = np.empty((n, c_n))
    energy_j = np.empty((n, c_n))
    if n_unique <= n // 2:
        tu, eu = np.empty((n_unique, c_n)), np.empty((n_unique, c_n))
        capped = int(fill_table(keys[first], ct, spec.max_core_mhz, spec.max_mem_mhz, params,
                                tu, eu, chunk_cells=chunk_cells).sum())
        np.take(tu, inverse, axis=0, out=time_s)
        np.take(eu, inverse, axis=0, out=energy_j)
    else:
        per_row = fill_table(keys, ct, spec.max_core_mhz, spec.max_mem_mhz, params, time_s,
                             energy_j, chunk_cells=chunk_cells)
        capped = int(per_row[first].sum())
    return ModelTable(time_s, energy_j, n_unique, capped / max(n_unique * c_n, 1))


def _evaluate_reference(work: KernelWork, rc: ResolvedClocks, spec: DeviceSpec,
                        params: DeviceParams) -> ModelTable:
    """:func:`evaluate`'s reference method: :func:`kernel_time_energy` on the distinct kernel
    rows, expanded to every kernel."""
    keys = _work_keys(work, params)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    uw = keys_work(uniq)
    out = kernel_time_energy(uw, rc.core_mhz[None, :], rc.mem_mhz[None, :], spec.max_core_mhz,
                             spec.max_mem_mhz, params, core_auto=rc.core_auto[None, :],
                             mem_auto=rc.mem_auto[None, :])
    n_unique = int(uniq.shape[0])
    return ModelTable(out["time_s"][inverse], out["energy_j"][inverse], n_unique,
                      float(out["capped"].sum()) / max(out["capped"].size, 1),
                      out["power_w"][inverse], out["f_eff_mhz"][inverse])
