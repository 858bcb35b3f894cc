"""``EnergyMeter``: named measurement windows over GPU (and CPU) energy, Zeus style.

```python
from joulebound.energy.meter import EnergyMeter

meter = EnergyMeter()                # backend="auto": NVML if a GPU is readable, else time only
meter.begin_window("epoch")
...                                  # work
res = meter.end_window("epoch")      # WindowResult: duration_s, energy_j (None without a sensor)

with meter.window("step"):           # context manager
    ...

@meter.window("eval")                # decorator
def evaluate(): ...
```

Windows are named and may nest or overlap freely. At each edge the meter synchronises queued GPU
work (``torch.cuda.synchronize`` when torch with CUDA is present), then reads each channel's energy
counter. A counter steps once per sensor period, so its steps are **apportioned by time**
(:mod:`joulebound.energy.counter`): contiguous windows sum to the enclosing window's energy and a
short window gets its share, with an error bound (``energy_uncertainty_j``). Channels without a
counter are metered by integrating the power samples (trapezoid rule, with reads at both edges).
Every result carries its provenance and flags:

- ``no_energy_sensor``: no sensor; ``energy_j`` is ``None`` (never a silent 0);
- ``zero_length``: the window lasted 0 s;
- ``short_window``: shorter than a channel's sensor update period — see the uncertainty;
- ``counter_reset`` / ``counter_wraparound``: a counter jumped backwards inside the window (driver
  reload / overflow); ``counter_glitch``: it read a little lower once and was held;
- ``read_error``: a read failed in the window (the notes say which and why);
- ``power_read_failed``: power reads failed in the window; the energy bridges the gap (and counts
  it in the uncertainty), or is ``None`` when less than half of the window was measured;
- ``no_power_samples``: a power-integrated channel had no power reading at all (energy ``None``);
- ``energy_unavailable``: some GPU's energy is unknown, so the total is ``None``;
- ``not_stored``: the store could not take the window (it is still returned);
- ``mig``: a GPU has MIG enabled — the figure is the whole physical GPU's.

Nothing is lost silently: failed reads, samples the store could not take and windows it refused are
counted in :attr:`EnergyMeter.losses` and described in :attr:`EnergyMeter.notes`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import socket
import sys
import time
import uuid as uuidlib
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..errors import JouleboundError, did_you_mean
from .base import Backend, NoneBackend
from .counter import EdgeValue, uncertainty_of, window_uncertainty
from .results import DeviceEnergy, WindowResult
from .sampler import PowerEdge, Sample, Sampler
from .status import FAILED, FINISHED, from_exception

if TYPE_CHECKING:  # pragma: no cover
    from .store import Store

BACKENDS = ("auto", "nvml", "rapl", "cpu-model", "simulated", "replay", "none")


@dataclass(slots=True)
class _Open:
    """An open window: its start (s), counter estimates and power edges at the start (the power
    edges either as :class:`PowerEdge` objects or, from the fast path, as the sampler's power
    state — ``None`` when no channel had a power reading — turned into edges only if an end
    needs them; the estimates then as :class:`EdgeValue` field tuples in channel order),
    failure counts then, and how many counter events had been seen."""

    start: float
    edges: dict[int, EdgeValue | None]
    events_seen: int
    power: dict[int, PowerEdge] | tuple[Any, ...] | None
    failures: Mapping[int, int]
    failures_total: int = -1        # >= 0: opened by the fast path (every counter read)


def _make_clock() -> Callable[[], float]:
    """Epoch-aligned monotonic clock (s): ``time.time()`` at creation + ``perf_counter`` since."""
    epoch0, perf0 = time.time(), time.perf_counter()
    return lambda: epoch0 + (time.perf_counter() - perf0)


def _cuda_sync(devices: Sequence[int]) -> Callable[[], None] | None:
    """A function synchronising each metered CUDA device (all of them when ``devices`` is empty)
    when torch is already imported and CUDA is initialised; else ``None`` (nothing to wait for)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return None
        n = torch.cuda.device_count()
    except Exception:  # pragma: no cover - broken CUDA setups
        return None
    devs = [d for d in devices if 0 <= d < n] or list(range(n))

    def sync() -> None:
        for d in devs:
            torch.cuda.synchronize(d)

    return sync


def make_backend(backend: str | Backend, gpus: Sequence[int] | str | None = None,
                 **kwargs: Any) -> Backend:
    """Build a backend by name. ``"auto"`` combines NVML (GPUs) and RAPL (CPU/DRAM) when readable,
    else falls back to ``"none"`` with a note saying why (the notes of every attempt are kept)."""
    if isinstance(backend, Backend):
        return backend
    if backend not in BACKENDS:
        raise JouleboundError(f"unknown energy backend {backend!r}.{did_you_mean(backend, BACKENDS)}")
    if backend == "none":
        return NoneBackend()
    if backend == "simulated":
        from .simulated import SimulatedBackend

        return SimulatedBackend(**kwargs)
    if backend == "replay":
        from .replay import ReplayBackend

        if "path" not in kwargs:
            raise JouleboundError("backend='replay' needs path=<recorded log (.csv/.jsonl) or "
                                  "store .db>")
        return ReplayBackend.open(**kwargs)
    if backend == "nvml":
        from .nvml import NvmlBackend

        return NvmlBackend(gpus=gpus, **kwargs)
    if backend == "rapl":
        from .rapl import RaplBackend

        return RaplBackend(**kwargs)
    if backend == "cpu-model":
        from .cpu_model import CpuModelBackend

        return CpuModelBackend(tdp_w=kwargs.get("cpu_tdp_w", kwargs.get("tdp_w")))
    # auto: NVML GPUs, plus RAPL CPU/DRAM when readable, else modeled CPU/DRAM (labeled)
    notes: list[str] = []
    parts: list[Backend] = []
    try:
        from .nvml import NvmlBackend

        parts.append(NvmlBackend(gpus=gpus))
    except JouleboundError as exc:
        notes.append(f"GPU: {exc}")
    try:
        from .rapl import RaplBackend

        parts.append(RaplBackend())
    except JouleboundError as exc:
        notes.append(f"CPU: {exc}")
        try:
            from .cpu_model import CpuModelBackend

            parts.append(CpuModelBackend(tdp_w=kwargs.get("cpu_tdp_w")))
        except JouleboundError as exc2:
            notes.append(f"CPU model: {exc2}")
    if len(parts) == 2:
        from .base import CompositeBackend

        both = CompositeBackend(parts)
        both.notes.extend(notes)
        return both
    if parts:
        parts[0].notes.extend(notes)
        return parts[0]
    none = NoneBackend(reason="")
    none.notes = ["no energy sensor available; recording duration only"] + notes
    return none


class EnergyMeter:
    """Measure time and energy of named windows.

    Args:
        backend: ``"auto"`` (NVML, then RAPL, else time only), ``"nvml"``, ``"rapl"``,
            ``"simulated"``, ``"replay"``, ``"none"``, or a :class:`~joulebound.energy.base.Backend`.
        gpus: CUDA-visible GPU indices to meter; ``None`` = the GPU this rank owns under torchrun
            (``LOCAL_RANK``) or else all visible GPUs; ``"all"`` = all visible GPUs.
        interval_s: background power-sampling period (s); ``0`` disables the sampler (channels
            without an energy counter then only get edge reads).
        store: a :class:`~joulebound.energy.store.Store` or a path; each window is committed to it
            as it ends, samples every second.
        sync: synchronise CUDA at window edges (when torch with CUDA is in use).
        clock: time source (s); default: epoch-aligned ``perf_counter``.
        run_id: the store's run id (default: a new UUID).
        rank: this process's rank (default: ``RANK`` env or 0).
        keep_results: how many finished windows :attr:`results` keeps in memory (the most recent;
            older ones are dropped and counted in :attr:`results_dropped`); ``None`` keeps every
            window. The store, when given, still holds every window. Bounds memory on long runs
            with a window per step; :func:`~joulebound.energy.distributed.aggregate` of the meter
            covers the kept windows only (aggregate the store's windows for the whole run).
        backend_kwargs: passed to the backend constructor (e.g. ``power=`` for simulated).
    """

    def __init__(self, backend: str | Backend = "auto", gpus: Sequence[int] | str | None = None,
                 interval_s: float = 0.1, store: Store | str | os.PathLike | None = None,
                 sync: bool = True, clock: Callable[[], float] | None = None,
                 run_id: str | None = None, rank: int | None = None,
                 command: str = "", keep_results: int | None = 10000,
                 **backend_kwargs: Any) -> None:
        if keep_results is not None and (isinstance(keep_results, bool) or
                                         not isinstance(keep_results, int) or keep_results < 0):
            raise JouleboundError(f"keep_results must be a whole number >= 0 or None (keep every "
                                  f"window), got {keep_results!r}")
        self.clock = clock or _make_clock()
        self.backend = make_backend(backend, gpus=gpus, **backend_kwargs)
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else int(rank)
        self.host = socket.gethostname()
        self.sync_enabled = sync
        self.channels = _select_channels(self.backend, gpus)
        self.interval_s = float(interval_s)
        # open windows (single dict operations: atomic, no lock needed)
        self._open: dict[str, _Open] = {}
        #: windows the store could not take, and why (the windows are still returned)
        self.windows_not_stored = 0
        self.store_error: str | None = None
        #: finished windows, oldest first: the most recent ``keep_results`` of them
        self.results: list[WindowResult] = []
        self.keep_results = keep_results
        #: finished windows dropped from :attr:`results` by the ``keep_results`` bound
        self.results_dropped = 0
        self._cuda_sync_fn: Callable[[], None] | None = None
        self.run_id = run_id or uuidlib.uuid4().hex
        self.store = None
        if store is not None:
            from .store import Store

            self.store = store if isinstance(store, Store) else Store(store)
            self.store.begin_run(self.run_id, backend=self.backend.name,
                                 provenance=self.backend.provenance, command=command,
                                 notes=self.notes, rank=self.rank, host=self.host,
                                 devices=[asdict(self.backend.channels[i]) for i in self.channels])
        sink = None
        if self.store is not None:
            chans = self.backend.channels
            store_ = self.store

            def sink(batch: list[Sample]) -> None:
                store_.add_samples(self.run_id, [(s.t, chans[s.channel].uuid, chans[s.channel].kind,
                                                  s.power_w, s.energy_j) for s in batch])
        self._counter_channels = [i for i in self.channels if self.backend.has_counter(i)]
        self._power_channels = [i for i in self.channels if not self.backend.has_counter(i)]
        # what every window needs about the channels, looked up once
        self._chan_info = [(i, self.backend.channels[i], self.backend.has_counter(i))
                           for i in self.channels]
        self._gpu_metered = any(ch.kind == "gpu" for _, ch, _ in self._chan_info)
        self._gpu_indices = [ch.index for _, ch, _ in self._chan_info if ch.kind == "gpu"]
        self._backend_sync = (None if type(self.backend).sync is Backend.sync
                              else self.backend.sync)
        self._mig_notes = (-1, False)          # (len(notes) when checked, any MIG note)
        # the window-edge fast path: every metered channel has a counter (one batched read)
        self._fast_read: Callable[[float], list[float | None]] | None = (
            self.backend.energy_reader(self.channels)
            if self.channels and not self._power_channels else None)
        self._fast_info = [(ch.uuid, ch.index, ch.sensor_period_s or 0.0, ch.source, ch.kind,
                            self.backend.channel_provenance(i)) for i, ch, _ in self._chan_info]
        self.sampler = Sampler(self.backend, self.channels, self.clock,
                               interval_s=interval_s or 1.0, sink=sink)
        if self.channels and interval_s > 0:
            self.sampler.start()
        self._closed = False
        # close the run at interpreter exit if nobody does (a weak reference: the meter may
        # still be garbage collected; close() unregisters this)
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)

    # -- info ---------------------------------------------------------------------------------
    @property
    def notes(self) -> list[str]:
        """Plain-language remarks about the sensors (why none, MIG caveats, ...) and about
        anything lost: failed reads, samples or windows the store could not take."""
        out = list(self.backend.notes)
        sampler = getattr(self, "sampler", None)   # notes are asked for before it exists
        for n in (sampler.problems() if sampler is not None else []):
            if n not in out:
                out.append(n)
        if self.windows_not_stored:
            out.append(f"{self.windows_not_stored} window(s) could not be written to the store "
                       f"({self.store_error}); they are in the results")
        return out

    @property
    def losses(self) -> dict[str, int]:
        """What was lost so far: ``read_failures`` (failed sensor reads), ``samples_not_stored``
        and ``windows_not_stored`` (store writes that failed)."""
        return {"read_failures": int(sum(self.sampler.failures.values())),
                "samples_not_stored": int(self.sampler.samples_lost),
                "windows_not_stored": int(self.windows_not_stored)}

    @property
    def lost_anything(self) -> bool:
        return any(self.losses.values())

    @property
    def has_sensor(self) -> bool:
        return bool(self.channels)

    @property
    def open_windows(self) -> list[str]:
        return list(self._open)

    def _sync(self) -> None:
        if not self.sync_enabled:
            return
        if self._backend_sync is not None:
            self._backend_sync()
        fn = self._cuda_sync_fn
        if fn is None:  # look again until CUDA is initialised; from then on it stays so
            if "torch" not in sys.modules:          # no torch: nothing queued to wait for
                return
            fn = self._cuda_sync_fn = _cuda_sync(self._gpu_indices)
        if fn is not None:
            fn()

    # -- windows ------------------------------------------------------------------------------
    def begin_window(self, name: str, sync: bool = True) -> None:
        """Start window ``name`` (any string not already open)."""
        if name in self._open:
            raise JouleboundError(f"window {name!r} is already open; end it first or use another "
                                  f"name (open: {', '.join(self._open)})")
        if sync and self.sync_enabled:
            self._sync()
        t = self.clock()
        energies = self._fast_energies(t)
        if energies is not None:
            got = self.sampler.begin_edge_fast(name, self.channels, energies,  # type: ignore[arg-type]
                                               t)
            if got is not None:
                self._open[name] = _Open(t, got[0], len(self.backend.events),  # type: ignore[arg-type]
                                         got[1], got[2], got[3])
                return
        edges, power, fails = self.sampler.begin_edge(
            name, self._counter_samples(t, energies),
            self._power_samples(t) if self._power_channels else [], t, self.channels)
        self._open[name] = _Open(t, edges, len(self.backend.events), power, fails)

    def _fast_energies(self, t: float) -> list[float | None] | None:
        """Every channel's counter read at ``t`` in one batch (the fast path), or ``None`` when
        the fast path does not apply (a channel without counter) or a read failed or gave
        nothing (then :meth:`_counter_samples` reads channel by channel and records why)."""
        read = self._fast_read
        if read is None:
            return None
        try:
            with self.backend.lock:
                energies = read(t)
        except Exception:
            return None
        return None if None in energies else energies

    def _counter_samples(self, t: float, energies: list[float | None] | None = None
                         ) -> list[Sample]:
        """Every counter channel read at ``t`` (energy ``None`` where the read failed; a power
        reading too while the counter's rate is not known yet). ``energies``: the channels'
        counter readings already taken at ``t`` by :meth:`_fast_energies` (none failed)."""
        samples = []
        tracks = self.sampler.tracks
        backend = self.backend
        with backend.lock:                      # one acquisition for all channels (re-entrant)
            for k, i in enumerate(self._counter_channels):
                if energies is not None:
                    e = energies[k]
                else:
                    try:
                        e = backend.read_energy_j(i, t)
                    except Exception as exc:
                        self.sampler.record_failure(i, "energy counter", exc)
                        e = None
                p = None
                track = tracks.get(i)
                if e is not None and track is not None and not track.has_rate:
                    p = self._read_power(i, t, quiet=True)   # seeds the rate until 2 steps seen
                samples.append(Sample(t, i, p, e))
        return samples

    def _read_energy(self, i: int, t: float) -> float | None:
        """Counter read; a failing read (GPU lost, driver error) gives ``None`` and is counted."""
        try:
            with self.backend.lock:
                return self.backend.read_energy_j(i, t)
        except Exception as exc:
            self.sampler.record_failure(i, "energy counter", exc)
            return None

    def _read_power(self, i: int, t: float, quiet: bool = False) -> float | None:
        try:
            with self.backend.lock:
                return self.backend.read_power_w(i, t)
        except Exception as exc:
            if not quiet:
                self.sampler.record_failure(i, "power", exc)
            return None

    def _power_samples(self, t: float) -> list[Sample]:
        """Power reads at an edge for the channels metered by power integration."""
        samples = []
        for i in self._power_channels:
            p = self._read_power(i, t)
            if p is not None:
                samples.append(Sample(t, i, p, None))
        return samples

    def end_window(self, name: str, sync: bool = True, cancel: bool = False) -> WindowResult:
        """End window ``name`` and return its :class:`WindowResult` (committed to the store)."""
        st = self._pop_window(name, sync)
        t1 = self.clock()
        t0 = st.start
        dur = max(t1 - t0, 0.0)
        flags: list[str] = []
        if not self._gpu_metered:
            flags.append("no_energy_sensor")   # no GPU sensor: energy_j is None
        if dur == 0.0:
            flags.append("zero_length")
        energies = self._fast_energies(t1)
        got = None
        if energies is not None and st.failures_total >= 0:
            got = self.sampler.end_edge_fast(name, self.channels, energies,  # type: ignore[arg-type]
                                             t1)
        if got is not None:
            res = self._result_fast(name, st, t1, dur, got[0], got[1], flags)
        else:
            edges1, stats = self.sampler.end_edge(
                name, self._counter_samples(t1, energies),
                self._power_samples(t1) if self._power_channels else [], t1)
            if st.failures_total >= 0:           # opened by the fast path: its edges as objects
                st.power = self._power_edges_of(st)
                st.edges = {i: EdgeValue(*v)  # type: ignore[misc]
                            for i, v in zip(self.channels, st.edges, strict=True)}
            devices = self._device_energies(st, t1, dur, edges1, stats, flags)
            res = self._result(name, t0, t1, dur, devices, flags)
        if len(self.backend.events) > st.events_seen or self._mig_notes[1] or \
                len(self.backend.notes) != self._mig_notes[0]:
            self._event_flags(st, flags)      # appends to res.flags (the same list)
        if cancel:
            return res
        self._keep(res)
        return res

    def _pop_window(self, name: str, sync: bool) -> _Open:
        """The open window ``name``, removed from the open ones (after syncing the device)."""
        if name not in self._open:
            choices = list(self._open)
            hint = did_you_mean(name, choices) if choices else " No window is open."
            raise JouleboundError(f"no open window named {name!r}.{hint}")
        if sync and self.sync_enabled:
            self._sync()
        return self._open.pop(name)

    def _power_edges_of(self, st: _Open) -> dict[int, PowerEdge]:
        """The start's power edges of a window the fast path opened (from its power states)."""
        fails = st.failures
        if st.power is None:
            return {i: PowerEdge(0.0, 0.0, 0.0, fails.get(i, 0), False) for i in self.channels}
        edge = self.sampler.power_edge_from
        return {i: edge(st.power, i, fails.get(i, 0), st.start)  # type: ignore[arg-type]
                for i in self.channels}

    def _result_fast(self, name: str, st: _Open, t1: float, dur: float, edges1: list[Any],
                     stats: Any, flags: list[str]) -> WindowResult:
        """:meth:`_device_energies` and :meth:`_result` in one pass, when every counter read of
        the window succeeded: the counter estimates at both edges (:class:`EdgeValue` field
        tuples) apportioned per channel with their bound
        (:func:`~joulebound.energy.counter.uncertainty_of`), the totals, and the same flags."""
        devices: list[DeviceEnergy] = []
        peak, n_samples = stats.peak_w, stats.n
        short = False
        gpu_e = gpu_u = cpu_e = 0.0
        n_gpu = n_cpu = 0
        for i, v0, v1, (uuid, index, period, source, kind, prov) in zip(
                self.channels, st.edges, edges1, self._fast_info, strict=True):
            if 0 < dur < period:
                short = True
            energy = v1[0] - v0[0]
            if energy < 0.0:
                energy = 0.0
            unc = uncertainty_of(v0, v1, dur)
            if kind == "gpu":
                n_gpu += 1
                gpu_e += energy
                gpu_u += unc
            else:
                n_cpu += 1
                cpu_e += energy
            devices.append(DeviceEnergy(uuid, index, energy, energy / dur if dur > 0 else None,
                                        peak.get(i), source, kind, n_samples.get(i, 0), prov,
                                        float(unc)))
        if short:
            flags.append("short_window")
        if self.sampler.failures_total > st.failures_total:
            flags.append("read_error")
        backend = self.backend
        return WindowResult(name, st.start, t1, dur, float(gpu_e) if n_gpu else None, devices,
                            backend.provenance, flags, float(cpu_e) if n_cpu else None,
                            self.rank, self.host, backend.name,
                            float(gpu_u) if n_gpu else None)

    def _device_energies(self, st: _Open, t1: float, dur: float,
                         edges1: dict[int, EdgeValue | None], stats: Any,
                         flags: list[str]) -> list[DeviceEnergy]:
        """Energy of every metered channel over the window: counter edges apportioned, else the
        power integral; flags what the figures need to be read with."""
        def flag(f: str) -> None:
            if f not in flags:
                flags.append(f)

        devices: list[DeviceEnergy] = []
        failures = self.sampler.failures
        fails0 = st.failures
        edges0 = st.edges
        peak, n_samples = stats.peak_w, stats.n
        provenance = self.backend.channel_provenance
        for i, ch, counter in self._chan_info:
            period = ch.sensor_period_s
            if period is not None and 0 < dur < period and "short_window" not in flags:
                flags.append("short_window")
            source = ch.source
            energy: float | None
            unc: float | None
            v0 = edges0.get(i) if counter else None
            v1 = edges1.get(i) if counter else None
            if v0 is not None and v1 is not None:
                energy = v1.energy_j - v0.energy_j
                if energy < 0.0:
                    energy = 0.0
                unc = window_uncertainty(v0, v1, dur)
            else:
                if counter:   # the counter failed at an edge: power instead
                    p = self._read_power(i, t1)
                    if p is not None:
                        edge = Sample(t1, i, p, None)
                        self.sampler.add([edge])
                        stats.update(edge)
                    source = f"{source}->power_integration"
                energy, unc = self._power_energy(i, st, t1, dur, flag)
            if failures.get(i, 0) > fails0.get(i, 0) and "read_error" not in flags:
                flags.append("read_error")
            devices.append(DeviceEnergy(
                ch.uuid, ch.index, energy,
                (energy / dur) if (energy is not None and dur > 0) else None,
                peak.get(i), source, ch.kind, n_samples.get(i, 0), provenance(i),
                None if energy is None or unc is None else float(unc)))
        return devices

    def _event_flags(self, st: _Open, flags: list[str]) -> None:
        """Counter resets / wraparounds / glitches seen since the window began, and MIG."""
        events = self.backend.events
        if len(events) > st.events_seen:
            for ev in events[st.events_seen:]:
                f = {"reset": "counter_reset", "glitch": "counter_glitch"}.get(
                    ev.kind, "counter_wraparound")
                if f not in flags:
                    flags.append(f)
        notes = self.backend.notes
        if self._mig_notes[0] != len(notes):   # notes only grow: look again when they did
            self._mig_notes = (len(notes), any(n.startswith("MIG") for n in notes))
        if self._mig_notes[1] and self.channels and "mig" not in flags:
            flags.append("mig")

    def _result(self, name: str, t0: float, t1: float, dur: float, devices: list[DeviceEnergy],
                flags: list[str]) -> WindowResult:
        """The window's result: GPU total (``None`` unless every GPU's energy is known), CPU
        total, uncertainty."""
        n_gpu = n_cpu = 0
        gpu_e: float | None = 0.0
        gpu_u = 0.0
        cpu_e: float | None = 0.0
        for d in devices:          # one pass: GPU total (known only if every GPU is), CPU total
            e = d.energy_j
            if d.kind == "gpu":
                n_gpu += 1
                if e is None or gpu_e is None:
                    gpu_e = None
                else:
                    gpu_e += e
                    gpu_u += d.uncertainty_j or 0.0
            else:
                n_cpu += 1
                cpu_e = None if e is None or cpu_e is None else cpu_e + e
        known = n_gpu > 0 and gpu_e is not None
        backend = self.backend
        res = WindowResult(     # positional, in field order (the window-edge path)
            name, t0, t1, dur, float(gpu_e) if known else None,  # type: ignore[arg-type]
            devices, backend.provenance, flags,
            float(cpu_e) if n_cpu and cpu_e is not None else None,
            self.rank, self.host, backend.name, float(gpu_u) if known else None)
        if n_gpu and not known and "no_energy_sensor" not in flags:
            flags.append("energy_unavailable")
        return res

    def _keep(self, res: WindowResult) -> None:
        """Add ``res`` to :attr:`results` (bounded) and commit it to the store."""
        self.results.append(res)
        over = 0 if self.keep_results is None else len(self.results) - self.keep_results
        if over > 0:
            del self.results[:over]
            self.results_dropped += over
        if self.store is not None:
            try:
                self.store.add_window(self.run_id, res)
            except Exception as exc:  # a full disk must not stop training; it is reported
                self.windows_not_stored += 1
                self.store_error = f"{type(exc).__name__}: {exc}"
                if "not_stored" not in res.flags:
                    res.flags.append("not_stored")

    def _power_energy(self, i: int, st: _Open, t1: float, dur: float,
                      flag: Callable[[str], None]) -> tuple[float | None, float | None]:
        """Energy of channel ``i`` over the window from the power integral, with its unmeasured
        part as the uncertainty; ``None`` when it is mostly unmeasured or there is no reading."""
        p0, p1 = st.power[i], self.sampler.power_edge(i, t1)
        if p1.failures > p0.failures:
            flag("power_read_failed")
        if not p1.has_reading:
            flag("no_power_samples")
            return None, None
        energy = max(p1.integral_j - p0.integral_j, 0.0)
        gap_t = p1.gap_time_s - p0.gap_time_s
        unc = max(p1.gap_energy_j - p0.gap_energy_j, 0.0)
        track = self.sampler.track(i)
        v0 = st.edges.get(i)
        if track is not None and v0 is not None and track.t_read is not None and \
                track.t_read > st.start and track.integral_at_read is not None:
            # the counter worked until t_read: counter up to there, power after
            energy = max(track.e_cur - v0.energy_j, 0.0) + \
                max(p1.integral_j - track.integral_at_read, 0.0)   # type: ignore[operator]
            unc += v0.uncertainty_j + track.rate_w() * (track.period or 0.0)
        elif not p0.has_reading:       # no reading before the first one inside the window
            first = self.sampler.first_power_t(i)
            if first is not None and first > st.start:
                gap_t += first - st.start
        if dur > 0 and gap_t > 0.5 * dur:
            flag("power_read_failed")
            return None, None
        return energy, unc

    def window(self, name: str) -> _Window:
        """A context manager *and* decorator measuring ``name``; ``.result`` holds the last result.

        ```python
        with meter.window("step") as w: ...
        print(w.result.energy_j)
        ```
        """
        return _Window(self, name)

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self, status: str = FINISHED, exit_code: int | None = None) -> None:
        """Stop the sampler, flush samples to the store, end the run (``status``, one of
        :data:`~joulebound.energy.status.STATUSES`; ``exit_code``), release the sensor.
        Idempotent; also called at interpreter exit for a meter nobody closed."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._atexit)
        self.sampler.stop()
        if self.store is not None:
            try:
                self.store.end_run(self.run_id, status=status, exit_code=exit_code,
                                   notes=self.notes)
            except Exception as exc:  # reported, never a traceback at the end of a run
                self.store_error = f"{type(exc).__name__}: {exc}"
                self.backend.notes.append(f"the run's end could not be written to the store "
                                          f"({self.store_error})")
        self.backend.close()

    def __enter__(self) -> EnergyMeter:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        status, code = from_exception(exc)
        self.close(status=status, exit_code=code)

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.sampler._stop.set()


def _close_at_exit(ref: weakref.ReferenceType[EnergyMeter]) -> None:
    """``atexit`` handler: close a meter left open, as ``failed`` after an uncaught exception."""
    meter = ref()
    if meter is None or meter._closed:
        return
    exc = getattr(sys, "last_value", None)
    if exc is not None:
        meter.backend.notes.append(f"closed at interpreter exit after an uncaught "
                                   f"{type(exc).__name__}")
        status, code = FAILED, 1
    else:
        meter.backend.notes.append("closed at interpreter exit (close() was not called)")
        status, code = FINISHED, None
    with contextlib.suppress(Exception):
        meter.close(status=status, exit_code=code)


class _Window(contextlib.ContextDecorator):
    """``meter.window(name)``: use with ``with`` or as a decorator."""

    def __init__(self, meter: EnergyMeter, name: str) -> None:
        self.meter = meter
        self.name = name
        self.result: WindowResult | None = None

    def __enter__(self) -> _Window:
        self.meter.begin_window(self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        self.result = self.meter.end_window(self.name)


def _select_channels(backend: Backend, gpus: Sequence[int] | str | None) -> list[int]:
    """Channel indices to meter: non-GPU channels always; GPU channels per ``gpus``."""
    chans = backend.channels
    gpu_idx = [c.index for c in chans if c.kind == "gpu"]
    if isinstance(gpus, str):
        if gpus == "all":
            want = set(gpu_idx)
        else:
            want = {int(x) for x in gpus.split(",") if x.strip()}
    elif gpus is None:
        from .ranks import default_gpus

        want = set(default_gpus(gpu_idx))
    else:
        want = {int(x) for x in gpus}
    missing = sorted(want - set(gpu_idx))
    if missing and not gpu_idx:  # no GPU sensor at all: say so, keep recording time
        note = f"GPU(s) {missing} requested but the {backend.name} backend has no GPU sensor"
        if note not in backend.notes:
            backend.notes.append(note)
    elif missing and gpus is not None:
        raise JouleboundError(f"GPU index {missing} not found by the {backend.name} backend "
                              f"(visible GPU indices: {sorted(gpu_idx) or 'none'}); check --gpus "
                              "and CUDA_VISIBLE_DEVICES")
    return [i for i, c in enumerate(chans) if c.kind != "gpu" or c.index in want]
