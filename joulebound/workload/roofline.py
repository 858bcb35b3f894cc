"""Roofline summary of a trace: work per phase and category, and what bounds each category.

For kernel ``i`` with ``F_i`` FLOP, ``Q_i`` DRAM bytes and math dtype ``dtype_i`` on a device with
dense peak ``P(dtype)`` FLOP/s and bandwidth ``W`` bytes/s (both at top clocks):

* compute time ``F_i / P(dtype_i)``, memory time ``Q_i / W``; the roofline lower bound of the
  kernel's time is ``max`` of the two (a *modeled* figure, no launch overhead, no tail effects).
* a category is **compute-bound** when its summed compute time exceeds its summed memory time —
  for a single dtype this is the classic test ``intensity = F/Q > ridge = P/W``.

Everything here is a pure function of the trace and a :class:`~joulebound.hw.spec.DeviceSpec`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from joulebound.hw.spec import DeviceSpec
from joulebound.workload.trace import CATEGORIES, PHASES, Trace


@dataclass
class CategoryRow:
    """Totals of one kernel category (optionally within one phase).

    Attributes:
        category: kernel category.
        kernels: number of kernels.
        flops: FLOP.
        bytes: DRAM bytes read + written.
        intensity: FLOP per byte (``None`` when no bytes are known).
        dtype: math dtype carrying most of the FLOPs (decides the ridge point).
        ridge: device ridge point for ``dtype`` (FLOP/byte), ``None`` without a device.
        bound: ``"compute"``, ``"memory"`` or ``"unknown"`` (no FLOPs/bytes known, no device).
        compute_bound_kernels: kernels whose own intensity is above their ridge point.
        roofline_time_s: sum over kernels of ``max(F/P, Q/W)`` (modeled lower bound, s).
        measured_time_s: sum of measured kernel durations (s) when the trace has them.
    """

    category: str
    kernels: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    intensity: float | None = None
    dtype: str = ""
    ridge: float | None = None
    bound: str = "unknown"
    compute_bound_kernels: int = 0
    roofline_time_s: float | None = None
    measured_time_s: float | None = None


@dataclass
class PhaseRow:
    """Totals of one phase: kernels, FLOP, bytes, per-category kernel counts."""

    phase: str
    kernels: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    by_category: dict[str, int] = field(default_factory=dict)
    roofline_time_s: float | None = None
    measured_time_s: float | None = None


@dataclass
class RooflineSummary:
    """Per-phase and per-category totals of a trace, with roofline bounds on ``device``."""

    trace: str
    source: str
    kernels: int
    flops: float
    bytes: float
    phases: list[PhaseRow]
    categories: list[CategoryRow]
    device: str | None = None
    peak_flops: dict[str, float] = field(default_factory=dict)
    bandwidth_bps: float | None = None
    roofline_time_s: float | None = None
    measured_time_s: float | None = None

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes > 0 else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["intensity"] = self.intensity
        return d


def summarize(trace: Trace, device: DeviceSpec | None = None) -> RooflineSummary:
    """Summarize ``trace`` per phase and per category; roofline bounds when ``device`` is given."""
    cats: dict[str, CategoryRow] = {}
    phases: dict[str, PhaseRow] = {}
    cat_dtype_flops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    cat_tc: dict[str, float] = defaultdict(float)
    cat_tm: dict[str, float] = defaultdict(float)
    bw = device.mem_bandwidth_bps if device else None
    peaks: dict[str, float] = {}
    total_roof = 0.0
    measured_any = False

    def peak(dtype: str) -> float:
        if dtype not in peaks:
            peaks[dtype] = device.peak(dtype)  # type: ignore[union-attr]
        return peaks[dtype]

    for k in trace.kernels:
        c = cats.get(k.category) or cats.setdefault(k.category, CategoryRow(k.category))
        p = phases.get(k.phase) or phases.setdefault(k.phase, PhaseRow(k.phase))
        c.kernels += 1
        c.flops += k.flops
        c.bytes += k.bytes
        p.kernels += 1
        p.flops += k.flops
        p.bytes += k.bytes
        p.by_category[k.category] = p.by_category.get(k.category, 0) + 1
        cat_dtype_flops[k.category][k.dtype] += k.flops
        if k.duration_s is not None:
            measured_any = True
            c.measured_time_s = (c.measured_time_s or 0.0) + k.duration_s
            p.measured_time_s = (p.measured_time_s or 0.0) + k.duration_s
        if device is not None:
            tc = k.flops / peak(k.dtype)
            tm = k.bytes / bw  # type: ignore[operator]
            cat_tc[k.category] += tc
            cat_tm[k.category] += tm
            if k.flops > 0 and tc > tm:
                c.compute_bound_kernels += 1
            t = max(tc, tm)
            c.roofline_time_s = (c.roofline_time_s or 0.0) + t
            p.roofline_time_s = (p.roofline_time_s or 0.0) + t
            total_roof += t

    for name, c in cats.items():
        c.intensity = c.flops / c.bytes if c.bytes > 0 else None
        dt = cat_dtype_flops[name]
        c.dtype = max(dt, key=dt.get) if dt else ""  # type: ignore[arg-type]
        if device is not None:
            c.ridge = peak(c.dtype) / device.mem_bandwidth_bps
            if c.flops > 0 or c.bytes > 0:
                c.bound = "compute" if cat_tc[name] > cat_tm[name] else "memory"

    order_c = {n: i for i, n in enumerate(CATEGORIES)}
    order_p = {n: i for i, n in enumerate(PHASES)}
    return RooflineSummary(
        trace=trace.name, source=str(trace.meta.get("source", "")), kernels=len(trace),
        flops=sum(c.flops for c in cats.values()), bytes=sum(c.bytes for c in cats.values()),
        phases=sorted(phases.values(), key=lambda r: order_p.get(r.phase, 99)),
        categories=sorted(cats.values(), key=lambda r: order_c.get(r.category, 99)),
        device=device.name if device else None,
        peak_flops=dict(device.peak_flops) if device else {},
        bandwidth_bps=bw,
        roofline_time_s=total_roof if device else None,
        measured_time_s=(sum(p.measured_time_s or 0.0 for p in phases.values())
                         if measured_any else None),
    )


@dataclass
class KernelRow:
    """Totals of all invocations of one kernel name (within one category)."""

    name: str
    category: str
    count: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    intensity: float | None = None
    bound: str = "unknown"
    roofline_time_s: float | None = None
    measured_time_s: float | None = None


def top_kernels(trace: Trace, device: DeviceSpec | None = None, n: int = 10) -> list[KernelRow]:
    """The ``n`` kernel names that take the most time: measured time when the trace has
    durations, else the roofline time on ``device``, else FLOPs."""
    rows: dict[tuple[str, str], KernelRow] = {}
    tc: dict[tuple[str, str], float] = defaultdict(float)
    tm: dict[tuple[str, str], float] = defaultdict(float)
    for k in trace.kernels:
        key = (k.name, k.category)
        r = rows.get(key) or rows.setdefault(key, KernelRow(k.name, k.category))
        r.count += 1
        r.flops += k.flops
        r.bytes += k.bytes
        if k.duration_s is not None:
            r.measured_time_s = (r.measured_time_s or 0.0) + k.duration_s
        if device is not None:
            c, m = k.flops / device.peak(k.dtype), k.bytes / device.mem_bandwidth_bps
            tc[key] += c
            tm[key] += m
            r.roofline_time_s = (r.roofline_time_s or 0.0) + max(c, m)
    for key, r in rows.items():
        r.intensity = r.flops / r.bytes if r.bytes > 0 else None
        if device is not None and (r.flops > 0 or r.bytes > 0):
            r.bound = "compute" if tc[key] > tm[key] else "memory"

    def weight(r: KernelRow) -> float:
        if r.measured_time_s is not None:
            return r.measured_time_s
        return r.roofline_time_s if r.roofline_time_s is not None else r.flops

    return sorted(rows.values(), key=weight, reverse=True)[:max(n, 0)]
