"""CPU package and DRAM energy through Linux powercap / RAPL (``/sys/class/powercap/intel-rapl*``).

Each top-level zone ``intel-rapl:N`` is a CPU package (kind ``"cpu"``); its sub-zones named
``dram`` are DRAM (kind ``"dram"``); other sub-zones (``core``, ``uncore``) are part of the package
and skipped to avoid double counting. ``energy_uj`` (µJ) wraps at ``max_energy_range_uj``; reads are
unwrapped the same way as NVML's counter. AMD CPUs expose the same interface on recent kernels.

Since Linux 5.10 ``energy_uj`` is readable by root only (CVE-2020-8694); a clear note explains what
to do. Many VMs and containers have no powercap at all (as on joulebound's development machines).
"""

from __future__ import annotations

import socket
from pathlib import Path

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MEASURED
from joulebound.energy.base import Backend, Channel, CounterEvent

POWERCAP = Path("/sys/class/powercap")


class RaplBackend(Backend):
    """RAPL package and DRAM energy counters.

    Args:
        root: the powercap directory (tests point it at a fake tree).
        sensor_period_s: RAPL updates about every 1 ms.
    """

    name = "rapl"
    provenance = MEASURED

    def __init__(self, root: str | Path | None = None, sensor_period_s: float = 0.001) -> None:
        super().__init__()
        root = Path(root) if root is not None else POWERCAP
        zones = sorted(root.glob("intel-rapl:*")) if root.is_dir() else []
        packages = [z for z in zones if z.name.count(":") == 1]
        if not packages:
            raise JouleboundError(f"RAPL not available: no {root}/intel-rapl:* zones (no RAPL "
                                  "driver, or a VM/container without powercap)")
        host = socket.gethostname()
        self._files: list[Path] = []
        self._range: list[int] = []
        self._last: list[int | None] = []
        self._total: list[float] = []
        self._prev_t: list[float | None] = []
        self._prev_e: list[float | None] = []
        for pkg in packages:
            subs = [z for z in sorted(pkg.glob(f"{pkg.name}:*"))
                    if _read_text(z / "name") == "dram"]
            for kind, z in [("cpu", pkg)] + [("dram", s) for s in subs]:
                f = z / "energy_uj"
                try:
                    f.read_text()
                except PermissionError as exc:
                    raise JouleboundError(
                        f"RAPL present but {f} is not readable (root-only since Linux 5.10, "
                        "CVE-2020-8694). Run as root or grant read access: "
                        "sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj "
                        "/sys/class/powercap/intel-rapl:*:*/energy_uj") from exc
                except OSError as exc:
                    raise JouleboundError(f"RAPL zone {z} cannot be read: {exc}") from exc
                rng = _read_text(z / "max_energy_range_uj")
                self.channels.append(Channel(
                    uuid=f"rapl:{host}:{z.name}", index=int(z.name.split(":")[1]), kind=kind,
                    name=_read_text(z / "name") or z.name, source="rapl",
                    sensor_period_s=sensor_period_s))
                self._files.append(f)
                self._range.append(int(rng) if rng and rng.isdigit() else 1 << 32)
                self._last.append(None)
                self._total.append(0.0)
                self._prev_t.append(None)
                self._prev_e.append(None)
        self.notes.append(
            "CPU/DRAM energy is measured by RAPL for the whole CPU package and its DRAM: every "
            "process on the machine, not the measured command alone")

    def has_counter(self, i: int) -> bool:
        return True

    def read_energy_j(self, i: int, t: float) -> float | None:
        raw = int(self._files[i].read_text().strip())
        last = self._last[i]
        self._last[i] = raw
        if last is not None:
            if raw >= last:
                self._total[i] += (raw - last) / 1e6
            else:
                self._total[i] += (raw + self._range[i] - last) / 1e6
                self.events.append(CounterEvent(t, self.channels[i].uuid, "wraparound",
                                                f"{last} -> {raw} µJ"))
        return self._total[i]

    def read_power_w(self, i: int, t: float) -> float | None:
        """Average power (W) since the previous power read of this channel (RAPL has no power
        field); ``None`` on the first read."""
        e = self.read_energy_j(i, t)
        pt, pe = self._prev_t[i], self._prev_e[i]
        self._prev_t[i], self._prev_e[i] = t, e
        if pt is None or pe is None or e is None or t <= pt:
            return None
        return (e - pe) / (t - pt)


def _read_text(p: Path) -> str:
    try:
        return p.read_text().strip()
    except OSError:
        return ""
