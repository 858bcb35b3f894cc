"""A *modeled* CPU package and DRAM energy where no RAPL counter is readable (VMs, containers,
non-root on Linux >= 5.10), attributed to the measured process tree.

Model (labeled ``modeled``, never mixed with measured figures):

- CPU energy ``E = w × CPU-seconds``: ``w`` is the power of one busy hardware thread (W) and
  CPU-seconds the user + system time of the measured process tree (``psutil``): the process
  itself (:class:`EnergyMeter` in a training script) or the command and its descendants
  (``joulebound measure``), including children that already ended and were waited for. Other
  tenants of the machine are not charged to the run. This is CodeCarbon 3.x's ``cpu_load`` model
  in ``tracking_mode="process"`` (``TDP × process CPU load / threads``; codecarbon
  ``external/hardware.py``), integrated exactly: the figure does not depend on how often it is
  read.
- ``w``: the CPU's TDP per hardware thread from joulebound's table (``data/cpu_tdp.toml``, vendor
  specifications, matched on the ``/proc/cpuinfo`` model name); for a CPU not in the table
  4 W per thread, CodeCarbon 3.x's default for an unknown CPU (``DEFAULT_POWER_PER_CORE = 4``,
  "W per thread", codecarbon ``core/cpu.py``); or ``joulebound measure --cpu-tdp W`` (the TDP of
  the visible threads, so ``w = W / threads``).
- Its interval: from the point (the tree pays only for the threads it kept busy) to the point
  plus an idle floor of 10 % of the visible CPUs' TDP for the window's duration (CodeCarbon
  3.3's minimum in its machine-wide ``cpu_load`` mode): :func:`cpu_energy_interval_j`. No
  held-out error: joulebound's machines have no readable RAPL counter to check it against.
- DRAM power ``P = 0.375 W/GB × the tree's resident memory`` (RSS, summed over its processes;
  shared pages count once per process): the share of the machine's DRAM power (0.375 W/GB of
  installed memory, CodeCarbon 2.x's "3 W per 8 GB") that the run's memory occupies. CodeCarbon
  3.x instead charges at least two DIMMs (2 × 5 W) to any process (``external/ram.py``):
  docs/measurement.md compares the two.
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
from typing import Any

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MODELED
from joulebound.energy.base import Backend, Channel

#: DRAM power per GB of resident memory (W/GB): CodeCarbon 2.x's 3 W per 8 GB
DRAM_W_PER_GB = 0.375
#: power of one busy hardware thread of a CPU not in the table (W): CodeCarbon 3.x's
#: ``DEFAULT_POWER_PER_CORE`` ("4 W per thread", codecarbon/core/cpu.py)
DEFAULT_W_PER_THREAD = 4.0
#: idle floor (share of the visible CPUs' TDP) of the upper end of the interval: CodeCarbon
#: 3.3's minimum in its machine-wide cpu_load mode (``max(tdp * load, tdp * 0.1)``)
IDLE_FLOOR_HIGH = 0.1
SOURCE_CPU = "cpu_time"
SOURCE_DRAM = "rss"

#: ``() -> (CPU-seconds, resident bytes)`` of the measured process tree
Usage = Callable[[], tuple[float, float]]


@dataclass(frozen=True)
class CpuInfo:
    """What the model knows about the CPU.

    Attributes:
        model_name: ``/proc/cpuinfo`` model name ("" if unknown).
        sockets: physical packages seen.
        threads: hardware threads this OS sees (``os.cpu_count()``).
        tdp_w: TDP of the visible threads (W); one busy thread draws ``tdp_w / threads``.
        tdp_source: where ``tdp_w`` comes from (table entry and its source, default, user).
        memory_gb: installed memory (GB, 1e9 bytes).
    """

    model_name: str
    sockets: int
    threads: int
    tdp_w: float
    tdp_source: str
    memory_gb: float

    @property
    def w_per_thread(self) -> float:
        """Power of one busy hardware thread (W)."""
        return self.tdp_w / max(1, self.threads)


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
        return CpuInfo(model, sockets, threads, float(tdp_w),
                       f"{tdp_w:g} W for the {threads} visible threads, given by the user",
                       mem_gb)
    for row in tdp_table():
        if model and re.search(row["pattern"], model, re.I):
            per_socket = int(row["threads"])
            w = float(row["tdp_w"]) / per_socket
            src = (f"{row['tdp_w']:g} W TDP / {per_socket} threads per socket = {w:.2f} W per "
                   f"thread ({row['source']})")
            return CpuInfo(model, sockets, threads, w * threads, src, mem_gb)
    return CpuInfo(model, sockets, threads, DEFAULT_W_PER_THREAD * threads,
                   f"{DEFAULT_W_PER_THREAD:g} W per thread, CodeCarbon 3.x's default for an "
                   f"unknown CPU: {model or 'the CPU model'!r} is not in joulebound's table; "
                   "pass the TDP (joulebound measure --cpu-tdp W)", mem_gb)


def cpu_energy_interval_j(energy_j: float, duration_s: float, tdp_w: float) -> tuple[float, float]:
    """``(low, high)`` of a window's modeled CPU energy (J): low = the point (the tree pays for
    the threads it kept busy), high adds an idle floor of 10 % of the visible CPUs' TDP
    ``tdp_w`` (W) over ``duration_s`` (s): ``E + 0.1 TDP T``."""
    return energy_j, energy_j + IDLE_FLOOR_HIGH * tdp_w * max(0.0, duration_s)


class ProcessTree:
    """CPU time and resident memory of a process and its descendants (``psutil``).

    Args:
        pid: the root (default: this process).
        include_self: count the root's own CPU time and memory (``False``: only its
            descendants, e.g. joulebound measure's command, not joulebound itself).

    CPU time is a sum of increments, process by process (a process is its pid and start time):
    each process of the tree adds what its user + system time, and the time of the children it
    waited for, grew by since the previous read; a process born since then adds all of its time.
    A process that ended and was waited for by its parent in the tree moves its whole time into
    that parent's children time: what was already counted of it is taken back then, so it counts
    once. A process that leaves the tree alive (re-parented to init) keeps what was counted and
    adds no more. The figure never decreases.
    """

    def __init__(self, pid: int | None = None, include_self: bool = True) -> None:
        import psutil

        self._psutil = psutil
        self.root = psutil.Process(pid if pid is not None else os.getpid())
        self.include_self = include_self
        self._prev: dict[Any, float] | None = None    # process -> its counted CPU time (s)
        self._raw = 0.0       # sum of increments (s): may dip for a read when a reap is half seen
        self._cpu = 0.0       # the figure returned: never below an earlier one (s)

    def reset(self, include_self: bool) -> None:
        """Count the root itself or not from now on (the figure restarts from 0)."""
        self.include_self = include_self
        self._prev, self._raw, self._cpu = None, 0.0, 0.0

    def _times(self) -> tuple[dict[Any, float], float]:
        """Each process of the tree -> its CPU time to count (s), and the tree's RSS (bytes)."""
        ps = self._psutil
        out: dict[Any, float] = {}
        rss = 0.0
        try:
            t = self.root.cpu_times()
            out[self.root] = (t.children_user + t.children_system
                              + (t.user + t.system if self.include_self else 0.0))
            if self.include_self:
                rss += self.root.memory_info().rss
            kids = self.root.children(recursive=True)
        except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
            kids = []
        for p in kids:
            try:
                t = p.cpu_times()
                out[p] = t.user + t.system + t.children_user + t.children_system
            except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
                if self._prev is not None and p in self._prev and p.is_running():
                    out[p] = self._prev[p]     # unreadable this once: no change, not gone
                continue
            try:
                rss += p.memory_info().rss
            except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
                pass
        return out, rss

    def __call__(self) -> tuple[float, float]:
        """``(CPU-seconds counted since the first read, resident bytes now)`` of the tree."""
        cur, rss = self._times()
        prev = self._prev
        if prev is not None:
            inc = 0.0
            for p, v in cur.items():
                before = prev.get(p)
                inc += v if before is None else v - before
            for p, before in prev.items():
                if p not in cur and not p.is_running():   # ended: its parent took its time
                    inc -= before
            self._raw += inc
        self._prev = cur
        self._cpu = max(self._cpu, self._raw)
        return self._cpu, rss


class CpuModelBackend(Backend):
    """Modeled CPU package (``kind="cpu"``) and DRAM (``kind="dram"``) channels of a process tree.

    Args:
        tdp_w: TDP of the visible CPUs (W); default from :func:`cpu_info`.
        usage: callable returning ``(CPU-seconds, resident bytes)`` of the measured tree (tests
            inject one); default :class:`ProcessTree` of ``pid``.
        info: a :class:`CpuInfo` (tests inject one).
        pid: root of the measured tree (default: this process).
        include_self: count the root itself (see :class:`ProcessTree`).
    """

    name = "cpu-model"
    provenance = MODELED

    def __init__(self, tdp_w: float | None = None, usage: Usage | None = None,
                 info: CpuInfo | None = None, pid: int | None = None,
                 include_self: bool = True) -> None:
        super().__init__()
        self.info = info or cpu_info(tdp_w)
        if usage is None:
            try:
                usage = ProcessTree(pid, include_self)
            except ImportError as exc:
                raise JouleboundError("modeled CPU energy needs psutil: pip install psutil"
                                      ) from exc
            except Exception as exc:   # psutil.NoSuchProcess / AccessDenied
                raise JouleboundError(f"modeled CPU energy unavailable: {exc}") from exc
        self._usage = usage
        try:
            first = self._usage()
        except (JouleboundError, OSError, ValueError) as exc:
            raise JouleboundError(f"modeled CPU energy unavailable: {exc}") from exc
        self._cache: tuple[float | None, tuple[float, float]] = (None, first)
        host = socket.gethostname()
        label = self.info.model_name or "CPU"
        # one device per measured tree: two ranks' trees on one host are two figures to add,
        # not one device read twice (distributed.combine keeps one reading per uuid)
        tree = f"model:{host}:pid{pid if pid is not None else os.getpid()}"
        self.channels = [
            Channel(uuid=f"{tree}:cpu", index=0, kind="cpu",
                    name=f"{label} ({self.info.w_per_thread:.2f} W per busy thread, modeled)",
                    source=SOURCE_CPU),
            Channel(uuid=f"{tree}:dram", index=0, kind="dram",
                    name=f"DRAM {DRAM_W_PER_GB} W/GB of resident memory (modeled)",
                    source=SOURCE_DRAM),
        ]
        # per channel: counter state (t, usage, total J) and power-read state (t, usage)
        self._ctr: list[tuple[float | None, tuple[float, float], float]] = [(None, first, 0.0)] * 2
        self._pw: list[tuple[float | None, tuple[float, float]]] = [(None, first)] * 2
        self.notes.append(
            "CPU/DRAM energy is modeled (no readable RAPL counter), for the metered process "
            f"tree only: CPU = {self.info.w_per_thread:.2f} W x its CPU-seconds "
            f"({self.info.tdp_source}); DRAM = {DRAM_W_PER_GB} W/GB x its resident memory; "
            "other processes on the machine and its idle power are not counted")

    def exclude_root(self) -> None:
        """Stop counting the tree's root itself (joulebound's own process under ``measure``):
        only its descendants, from the next read on (under the backend's lock: the sampling
        thread may be reading)."""
        with self.lock:
            if isinstance(self._usage, ProcessTree) and self._usage.include_self:
                self._usage.reset(include_self=False)
                first = self._usage()
                self._cache = (None, first)
                self._ctr = [(None, first, c[2]) for c in self._ctr]
                self._pw = [(None, first)] * 2

    def _read(self, t: float) -> tuple[float, float]:
        """The usage at ``t``: read once per instant (every channel of a sample shares it)."""
        ct, u = self._cache
        if ct != t:
            u = self._usage()
            self._cache = (t, u)
        return u

    @property
    def w_per_thread(self) -> float:
        """Power of one busy hardware thread (W)."""
        return self.info.w_per_thread

    def has_counter(self, i: int) -> bool:
        return True

    def read_energy_j(self, i: int, t: float) -> float | None:
        t0, u0, total = self._ctr[i]
        u1 = self._read(t)
        if self.channels[i].kind == "cpu":
            total += self.w_per_thread * max(0.0, u1[0] - u0[0])
        elif t0 is not None and t > t0:
            total += DRAM_W_PER_GB * (u0[1] + u1[1]) / 2e9 * (t - t0)
        self._ctr[i] = (t, u1, total)
        return total

    def read_power_w(self, i: int, t: float) -> float | None:
        t0, u0 = self._pw[i]
        u1 = self._read(t)
        self._pw[i] = (t, u1)
        if self.channels[i].kind == "dram":
            return DRAM_W_PER_GB * u1[1] / 1e9
        if t0 is None or t <= t0:
            return None
        return self.w_per_thread * max(0.0, u1[0] - u0[0]) / (t - t0)
