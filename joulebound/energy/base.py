"""The interface every energy backend implements, and the no-sensor backend.

A *backend* exposes one or more *channels* (a GPU, a CPU package, a DRAM domain). For each channel
it can read a cumulative energy counter (J, already corrected for counter resets and wraparound) and
an instantaneous power (W). Either may be missing (``None``): a GPU without an energy counter is
metered by integrating sampled power.

Backends receive the meter's timestamp ``t`` (s, epoch-aligned, monotonic) on every read. Hardware
backends ignore it and read the sensor now; the simulated and replay backends evaluate their power
series at ``t``, which makes them deterministic under an injected clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from joulebound.core.provenance import MEASURED, MODELED

Kind = Literal["gpu", "cpu", "dram"]


@dataclass(frozen=True)
class Channel:
    """One metered device.

    Attributes:
        uuid: stable identity of the physical device (NVML UUID ``GPU-...``, ``rapl:<host>:<zone>``,
            ``SIM-GPU-<n>``). Used to count each physical device once across ranks.
        index: the device index as the user names it (CUDA-visible index for GPUs, RAPL zone
            number for CPU/DRAM).
        kind: ``"gpu"``, ``"cpu"`` or ``"dram"``.
        name: product or zone name.
        source: how energy is obtained, e.g. ``"nvml.energy_counter"``,
            ``"nvml.power_integration"``, ``"rapl"``, ``"simulated"``, ``"replay"``.
        sensor_period_s: the sensor's update period (s) when known; windows shorter than it are
            flagged ``short_window``.
    """

    uuid: str
    index: int
    kind: Kind = "gpu"
    name: str = ""
    source: str = ""
    sensor_period_s: float | None = None


@dataclass
class CounterEvent:
    """Something that happened to a counter (reset, wraparound, glitch), at time ``t`` (s)."""

    t: float
    uuid: str
    kind: Literal["reset", "wraparound", "glitch"]
    detail: str = ""


class Backend:
    """Base class: a set of channels with energy/power reads.

    Subclasses set ``name``, ``provenance``, ``channels`` and override :meth:`read_energy_j` and/or
    :meth:`read_power_w`. ``notes`` hold plain-language remarks shown to the user (e.g. why no
    sensor is available, MIG caveats). ``events`` collects counter resets/wraparounds.
    """

    name: str = "base"
    provenance: str = MEASURED

    def __init__(self) -> None:
        #: serialises reads from the meter and the sampler thread (counter unwrapping has state)
        self.lock = threading.RLock()
        self.channels: list[Channel] = []
        self.notes: list[str] = []
        self.events: list[CounterEvent] = []

    def has_counter(self, i: int) -> bool:
        """True when channel ``i`` has a cumulative energy counter."""
        return False

    def read_energy_j(self, i: int, t: float) -> float | None:
        """Cumulative energy of channel ``i`` in J (monotonic, reset/wrap corrected) or ``None``."""
        return None

    def read_power_w(self, i: int, t: float) -> float | None:
        """Power of channel ``i`` in W, or ``None`` when the backend cannot read power."""
        return None

    def energy_reader(self, channels: Sequence[int]) -> Callable[[float], list[float]]:
        """A function reading the counters of ``channels`` at ``t`` (s) in one call: the same
        values as :meth:`read_energy_j` per channel (J, floats), prepared once so a window edge
        does no per-channel set-up. It raises at the first failing read, or when a counter
        gives no reading (the caller then reads channel by channel to record which failed; an
        already-taken reading is not lost, counters are cumulative)."""
        chans = list(channels)
        read_one = self.read_energy_j

        def read(t: float) -> list[float]:
            out = [read_one(i, t) for i in chans]
            if None in out:
                raise ValueError("an energy counter gave no reading")
            return [float(e) for e in out]  # type: ignore[arg-type]

        return read

    def channel_provenance(self, i: int) -> str:
        """Provenance of channel ``i``'s figures (the backend's, unless it combines several)."""
        return self.provenance

    def sync(self) -> None:
        """Wait for queued device work (e.g. ``torch.cuda.synchronize``) before a window edge."""

    def close(self) -> None:
        """Release the sensor (e.g. ``nvmlShutdown``)."""


class NoneBackend(Backend):
    """No energy sensor: windows record time only (``energy_j`` is ``None``, never 0)."""

    name = "none"
    provenance = MEASURED  # the duration is measured; there is no energy figure at all

    def __init__(self, reason: str = "no energy sensor selected (backend='none')") -> None:
        super().__init__()
        self.reason = reason
        if reason:
            self.notes.append(reason)


class CompositeBackend(Backend):
    """Several backends as one (e.g. NVML GPUs + RAPL CPU/DRAM): channels are concatenated;
    counter events and notes of the parts are carried over."""

    def __init__(self, parts: list[Backend]) -> None:
        super().__init__()
        if not parts:
            raise ValueError("CompositeBackend needs at least one backend")
        self.parts = parts
        self.name = "+".join(p.name for p in parts)
        # the window's provenance is the GPU energy's: that of the parts with GPU channels
        gpu_parts = [p for p in parts if any(c.kind == "gpu" for c in p.channels)] or parts
        provs = {p.provenance for p in gpu_parts}
        self.provenance = provs.pop() if len(provs) == 1 else MODELED
        self._map: list[tuple[Backend, int]] = []
        self._seen = [0] * len(parts)
        for p in parts:
            for j, ch in enumerate(p.channels):
                self.channels.append(ch)
                self._map.append((p, j))
            self.notes.extend(p.notes)

    def _collect(self) -> None:
        for k, p in enumerate(self.parts):
            if len(p.events) > self._seen[k]:
                self.events.extend(p.events[self._seen[k]:])
                self._seen[k] = len(p.events)

    def has_counter(self, i: int) -> bool:
        p, j = self._map[i]
        return p.has_counter(j)

    def channel_provenance(self, i: int) -> str:
        p, j = self._map[i]
        return p.channel_provenance(j)

    def read_energy_j(self, i: int, t: float) -> float | None:
        p, j = self._map[i]
        e = p.read_energy_j(j, t)
        self._collect()
        return e

    def read_power_w(self, i: int, t: float) -> float | None:
        p, j = self._map[i]
        return p.read_power_w(j, t)

    def sync(self) -> None:
        for p in self.parts:
            p.sync()

    def close(self) -> None:
        for p in self.parts:
            p.close()
