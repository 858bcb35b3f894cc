"""Results of the energy meter: one device's energy in a window, and one finished window.

Plain data (no behaviour beyond derived properties and :class:`Deferred` fields), shared by the
meter (:mod:`~joulebound.energy.meter`), the store (:mod:`~joulebound.energy.store`), the
multi-rank aggregation (:mod:`~joulebound.energy.distributed`) and the exporters.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from joulebound.core.provenance import MODELED


@dataclass
class DeviceEnergy:
    """Energy of one device in one window.

    Attributes:
        uuid: physical device identity (counts each GPU once across ranks).
        index: device index as the user names it (CUDA-visible index for GPUs).
        energy_j: energy (J), ``None`` when it could not be measured.
        avg_power_w: ``energy_j / duration_s`` (W), ``None`` for zero-length windows.
        peak_power_w: highest sampled power in the window (W), ``None`` without power reads.
        source: e.g. ``"nvml.energy_counter"``, ``"nvml.power_integration"``, ``"simulated"``.
        kind: ``"gpu"``, ``"cpu"`` or ``"dram"``.
        n_samples: power samples that fell in the window.
        provenance: ``"measured"`` or ``"modeled"`` for this device ("" in stores written
            before the field existed: then the window's).
        uncertainty_j: bound of the error of ``energy_j`` (J) from the sensor's update period and
            any unmeasured gap; ``None`` when ``energy_j`` is.
    """

    uuid: str
    index: int
    energy_j: float | None
    avg_power_w: float | None
    peak_power_w: float | None
    source: str
    kind: str = "gpu"
    n_samples: int = 0
    provenance: str = ""
    uncertainty_j: float | None = None


class Deferred(tuple):  # type: ignore[type-arg]
    """A field value computed when it is first read: ``Deferred((fn, *args))`` stands for
    ``fn(result, *args)``, which then replaces it. The energy meter's window edge gives the
    per-device figures this way (they are computed from the edge readings it kept, the same
    figures, only later: most windows' devices are never read). A tuple, so it is built
    without a Python call and pickles as it is."""

    __slots__ = ()


class _DeferredField:
    """A dataclass field (descriptor-typed, with ``default`` unless ``MISSING``) whose value may
    be a :class:`Deferred`: it is computed on the first read and stored in its place."""

    def __init__(self, default: Any = MISSING) -> None:
        self.default = default
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:                     # the class's default (dataclass asks for it)
            if self.default is MISSING:
                raise AttributeError(self.name)
            return self.default
        d = obj.__dict__
        v = d[self.name]
        if v.__class__ is Deferred:
            v = d[self.name] = v[0](obj, *v[1:])
        return v

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.name] = value


@dataclass
class WindowResult:
    """One finished window.

    Attributes:
        name: the window name.
        start_s / end_s: edges (s, Unix epoch, from a monotonic clock).
        duration_s: ``end_s - start_s`` (s), always measured.
        energy_j: total GPU energy (J) over ``devices`` of kind ``"gpu"``; ``None`` when there is
            no GPU sensor (never 0 for "unknown").
        devices: per-device results.
        provenance: of the GPU energy ``energy_j``: ``"measured"`` (sensor), ``"modeled"``
            (simulated backend) or what a replayed log says; ``None`` when no GPU was metered
            (no figure, no label). The duration is always measured; the CPU/DRAM figure has
            its own :attr:`cpu_provenance`. :attr:`gpu_provenance` is this label only where
            ``energy_j`` has a value.
        flags: see the module docstring.
        cpu_energy_j: CPU + DRAM energy (J): from RAPL (measured) or the TDP model
            (modeled, see :mod:`~joulebound.energy.cpu_model`), ``None`` when neither.
        rank / host: where it was measured (for :func:`~joulebound.energy.distributed.aggregate`).
        backend: backend name.
        energy_uncertainty_j: bound of the error of ``energy_j`` (J), the sum over GPUs of
            :attr:`DeviceEnergy.uncertainty_j`; ``None`` when ``energy_j`` is.

    ``devices`` and ``energy_uncertainty_j`` may be given as :class:`Deferred` (computed when
    first read, the same figures).
    """

    name: str
    start_s: float
    end_s: float
    duration_s: float
    energy_j: float | None
    devices: list[DeviceEnergy] = _DeferredField()  # type: ignore[assignment]
    provenance: str | None  # type: ignore[misc]
    flags: list[str] = field(default_factory=list)
    cpu_energy_j: float | None = None
    rank: int = 0
    host: str = ""
    backend: str = ""
    energy_uncertainty_j: float | None = _DeferredField(None)  # type: ignore[assignment]

    @property
    def avg_power_w(self) -> float | None:
        """Average GPU power over the window (W)."""
        if self.energy_j is None or self.duration_s <= 0:
            return None
        return self.energy_j / self.duration_s

    @property
    def gpu_provenance(self) -> str | None:
        """Provenance of :attr:`energy_j` (GPU), ``None`` when there is no such figure: the one
        label every output (CLI, JSON, store, HTML) shows beside the GPU energy."""
        return self.provenance or None if self.energy_j is not None else None

    @property
    def cpu_provenance(self) -> str | None:
        """Provenance of :attr:`cpu_energy_j` (``None`` without CPU/DRAM channels)."""
        provs = {d.provenance or self.provenance for d in self.devices if d.kind != "gpu"}
        if not provs:
            return None
        return provs.pop() if len(provs) == 1 else MODELED

    @property
    def peak_power_w(self) -> float | None:
        """Sum over GPUs of each GPU's peak power (W) — an upper bound of the job's peak."""
        peaks = [d.peak_power_w for d in self.devices if d.kind == "gpu"]
        if not peaks or any(p is None for p in peaks):
            return None
        return float(sum(peaks))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WindowResult:
        d = dict(d)
        d["devices"] = [DeviceEnergy(**x) for x in d.get("devices", [])]
        return cls(**d)


_FIELDS = ("name", "start_s", "end_s", "duration_s", "energy_j", "devices", "provenance", "flags",
           "cpu_energy_j", "rank", "host", "backend", "energy_uncertainty_j")
if tuple(f.name for f in fields(WindowResult)) != _FIELDS:  # pragma: no cover - a new field
    raise ImportError("window_result() lists WindowResult's fields: add the new one there")
_new = object.__new__


def window_result(name: str, start_s: float, end_s: float, duration_s: float,
                  energy_j: float | None, devices: list[DeviceEnergy] | Deferred,
                  provenance: str | None, flags: list[str], cpu_energy_j: float | None, rank: int,
                  host: str, backend: str,
                  energy_uncertainty_j: float | Deferred | None) -> WindowResult:
    """``WindowResult(...)`` with every field given, as the dataclass builds it but without its
    per-field descriptor calls: the energy meter's window edge builds one per window."""
    r = _new(WindowResult)
    r.__dict__ = {"name": name, "start_s": start_s, "end_s": end_s, "duration_s": duration_s,
                  "energy_j": energy_j, "devices": devices, "provenance": provenance,
                  "flags": flags, "cpu_energy_j": cpu_energy_j, "rank": rank, "host": host,
                  "backend": backend, "energy_uncertainty_j": energy_uncertainty_j}
    return r
