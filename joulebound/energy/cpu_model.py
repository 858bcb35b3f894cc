"""A *modeled* CPU package and DRAM energy where no RAPL counter is readable (VMs, containers,
non-root on Linux >= 5.10).

Model (labeled ``modeled``, never mixed with measured figures):

- CPU package power ``P = TDP_visible × u``, ``u`` = share of the visible CPUs that were busy
  (``/proc/stat``: everything but idle and iowait, over the interval between two reads). This is
  CodeCarbon's CPU-load model and Green Algorithms' usage-factor model (Lannelongue, Grealey,
  Inouye, *Green Algorithms*, Adv. Sci. 2021). Its interval: from ``TDP × u`` (no idle power) to
  ``TDP × (0.5 + 0.5 u)`` (an idle floor of half the TDP, CodeCarbon's "constant mode" guess for
  an unknown load): see :func:`cpu_energy_interval_j`. No held-out error: joulebound's machines
  have no readable RAPL counter to check it against.
- ``TDP_visible``: the CPU's TDP from joulebound's table (``data/cpu_tdp.toml``, matched on the
  ``/proc/cpuinfo`` model name) times the share of the package's hardware threads this machine
  sees, per socket; for a CPU not in the table, 85 W (CodeCarbon's default for an unknown CPU),
  or ``tdp_w=`` / ``joulebound measure --cpu-tdp W``.
- DRAM power ``P = 0.375 W/GB × memory size`` (CodeCarbon's 3 W per 8 GB), constant.

Reads are exact integrals of that model between reads: the counter adds ``P(u) × Δt`` with ``u``
the utilization over the same ``Δt``, so a window's energy does not depend on how often it is read.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MODELED
from joulebound.energy.base import Backend, Channel

#: CodeCarbon's DRAM power per GB of memory (3 W per 8 GB)
DRAM_W_PER_GB = 0.375
#: CodeCarbon's TDP for a CPU it does not know (W)
DEFAULT_TDP_W = 85.0
#: idle floor (share of TDP) of the upper end of the interval (CodeCarbon's constant mode: 50 %)
IDLE_FLOOR_HIGH = 0.5
SOURCE_CPU = "tdp_model"
SOURCE_DRAM = "dram_model"


@dataclass(frozen=True)
class CpuInfo:
    """What the model knows about the CPU.

    Attributes:
        model_name: ``/proc/cpuinfo`` model name ("" if unknown).
        sockets: physical packages seen.
        threads: hardware threads this OS sees (``os.cpu_count()``).
        tdp_w: TDP used for the visible threads (W).
        tdp_source: where ``tdp_w`` comes from (table entry and its source, default, user).
        memory_gb: total memory (GB, 1e9 bytes).
    """

    model_name: str
    sockets: int
    threads: int
    tdp_w: float
    tdp_source: str
    memory_gb: float


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def tdp_table() -> list[dict]:
    """The shipped CPU table: ``[{pattern, tdp_w, threads, source}, ...]``."""
    path = resources.files("joulebound.energy") / "data" / "cpu_tdp.toml"
    return tomllib.loads(path.read_text(encoding="utf-8"))["cpu"]


def cpu_info(tdp_w: float | None = None, cpuinfo: str | None = None, meminfo: str | None = None,
             threads: int | None = None) -> CpuInfo:
    """Look the CPU up (``/proc/cpuinfo``, ``/proc/meminfo`` unless given as text)."""
    cpuinfo = _read("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    meminfo = _read("/proc/meminfo") if meminfo is None else meminfo
    names = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    model = names[0].strip() if names else ""
    sockets = max(1, len(set(re.findall(r"^physical id\s*:\s*(\d+)$", cpuinfo, re.M))))
    threads = int(threads or os.cpu_count() or max(1, len(names)))
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", meminfo, re.M)
    mem_gb = int(m.group(1)) * 1024 / 1e9 if m else 0.0
    if tdp_w is not None:
        if not tdp_w > 0:
            raise JouleboundError(f"CPU TDP must be > 0 W, got {tdp_w}")
        return CpuInfo(model, sockets, threads, float(tdp_w), "given by the user", mem_gb)
    for row in tdp_table():
        if model and re.search(row["pattern"], model, re.I):
            per_socket = int(row["threads"])
            share = min(1.0, threads / (per_socket * sockets))
            tdp = float(row["tdp_w"]) * sockets * share
            src = (f"{row['tdp_w']:g} W TDP per socket ({row['source']}) x {sockets} socket(s) x "
                   f"{threads}/{per_socket * sockets} of its threads visible")
            return CpuInfo(model, sockets, threads, tdp, src, mem_gb)
    return CpuInfo(model, sockets, threads, DEFAULT_TDP_W,
                   f"default {DEFAULT_TDP_W:g} W (CodeCarbon's TDP for an unknown CPU): "
                   f"{model or 'the CPU model'!r} is not in joulebound's table; pass the TDP "
                   "(joulebound measure --cpu-tdp W)", mem_gb)


def read_proc_stat(text: str | None = None) -> tuple[int, int]:
    """``(busy, total)`` jiffies of all CPUs from ``/proc/stat``'s first line."""
    text = _read("/proc/stat") if text is None else text
    line = next((ln for ln in text.splitlines() if ln.startswith("cpu ")), "")
    vals = [int(x) for x in line.split()[1:]]
    if len(vals) < 4:
        raise JouleboundError("cannot read CPU utilization: /proc/stat has no 'cpu' line")
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    total = sum(vals[:8])   # guest time is already counted in user/nice
    return total - idle, total


def cpu_energy_interval_j(energy_j: float, duration_s: float, tdp_w: float) -> tuple[float, float]:
    """``(low, high)`` of a window's modeled CPU energy (J): the model is linear in ``u``, so the
    window's mean utilization is ``E / (TDP T)``; low = the point (no idle power), high adds an
    idle floor of half the TDP: ``0.5 TDP T + 0.5 E``."""
    return energy_j, max(energy_j, IDLE_FLOOR_HIGH * tdp_w * duration_s
                         + (1 - IDLE_FLOOR_HIGH) * energy_j)


class CpuModelBackend(Backend):
    """Modeled CPU package (``kind="cpu"``) and DRAM (``kind="dram"``) channels.

    Args:
        tdp_w: TDP for the visible CPUs (W); default from :func:`cpu_info`.
        stat: callable returning ``(busy, total)`` jiffies (tests inject one).
        info: a :class:`CpuInfo` (tests inject one).
    """

    name = "cpu-model"
    provenance = MODELED

    def __init__(self, tdp_w: float | None = None,
                 stat: Callable[[], tuple[int, int]] | None = None,
                 info: CpuInfo | None = None) -> None:
        super().__init__()
        self.info = info or cpu_info(tdp_w)
        self._stat = stat or read_proc_stat
        try:
            first = self._stat()
        except (JouleboundError, OSError, ValueError) as exc:
            raise JouleboundError(f"modeled CPU energy unavailable: {exc}") from exc
        host = socket.gethostname()
        label = self.info.model_name or "CPU"
        self.channels = [
            Channel(uuid=f"model:{host}:cpu", index=0, kind="cpu",
                    name=f"{label} (TDP {self.info.tdp_w:.0f} W, modeled)", source=SOURCE_CPU),
            Channel(uuid=f"model:{host}:dram", index=0, kind="dram",
                    name=f"DRAM {self.info.memory_gb:.1f} GB (modeled)", source=SOURCE_DRAM),
        ]
        self.dram_w = DRAM_W_PER_GB * self.info.memory_gb
        # per channel: counter state (t, stat, total J) and power-read state (t, stat)
        self._ctr: list[tuple[float | None, tuple[int, int], float]] = [(None, first, 0.0)] * 2
        self._pw: list[tuple[float | None, tuple[int, int]]] = [(None, first)] * 2
        self.notes.append(
            f"CPU/DRAM energy is modeled (no readable RAPL counter): package = TDP x "
            f"utilization with TDP {self.info.tdp_w:.0f} W ({self.info.tdp_source}); DRAM = "
            f"{DRAM_W_PER_GB} W/GB x {self.info.memory_gb:.1f} GB = {self.dram_w:.1f} W")

    def _util(self, a: tuple[int, int], b: tuple[int, int]) -> float:
        db, dt = b[0] - a[0], b[1] - a[1]
        return min(max(db / dt, 0.0), 1.0) if dt > 0 else 0.0

    def _power(self, i: int, u: float) -> float:
        return self.info.tdp_w * u if self.channels[i].kind == "cpu" else self.dram_w

    def has_counter(self, i: int) -> bool:
        return True

    def read_energy_j(self, i: int, t: float) -> float | None:
        t0, s0, total = self._ctr[i]
        s1 = self._stat()
        if t0 is not None and t > t0:
            total += self._power(i, self._util(s0, s1)) * (t - t0)
        self._ctr[i] = (t, s1, total)
        return total

    def read_power_w(self, i: int, t: float) -> float | None:
        t0, s0 = self._pw[i]
        s1 = self._stat()
        self._pw[i] = (t, s1)
        if self.channels[i].kind == "dram":
            return self.dram_w
        if t0 is None:
            return None
        return self._power(i, self._util(s0, s1))
