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
- ``mig``: a GPU has MIG enabled — the figure is the whole physical GPU's;
- ``cut_short``: the window was still open when the run ended (an exception, Ctrl-C, a signal,
  ``close()`` or interpreter exit): it ends at the run's end and is kept, not dropped.

Nothing is lost silently: failed reads, samples the store could not take and windows it refused are
counted in :attr:`EnergyMeter.losses` and described in :attr:`EnergyMeter.notes`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import socket
import sys
import time
import uuid as uuidlib
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.energy import stopsignals
from joulebound.energy.base import Backend, NoneBackend
from joulebound.energy.counter import Edge, edge_uncertainty, uncertainty_of
from joulebound.energy.results import Deferred, DeviceEnergy, WindowResult, window_result
from joulebound.energy.sampler import PowerEdge, Sample, Sampler, readings_between
from joulebound.energy.status import FINISHED, KILLED, from_exception

if TYPE_CHECKING:  # pragma: no cover
    from joulebound.energy.store import Store

BACKENDS = ("auto", "nvml", "rapl", "cpu-model", "simulated", "replay", "none")
#: environment variable ``joulebound measure`` sets for its command: its run id, recorded as
#: ``parent_run`` by a meter with a store inside the command (the training callbacks, an
#: EnergyMeter), so the two runs are linked (``runs --json``: ``parent_run``)
PARENT_RUN_ENV = "JOULEBOUND_PARENT_RUN"


#: an open window, as its end needs it (a plain tuple: one is built at every window start):
#: ``(start (s), counter events seen then, the start edge)``, the edge as
#: :meth:`Sampler.window_edge` returns it: ``(counter estimates, the sampler's snapshot, its
#: fast-path edge count, the estimates' sum or None)``
_Open = tuple[float, int, tuple[Any, ...]]


def _make_clock() -> Callable[[], float]:
    """Epoch-aligned monotonic clock (s): ``perf_counter()`` plus its ``offset`` attribute, the
    difference ``time.time() - perf_counter()`` at creation (the window edges add it inline)."""
    perf = time.perf_counter
    offset = time.time() - perf()

    def clock() -> float:
        return perf() + offset

    clock.offset = offset  # type: ignore[attr-defined]
    return clock


def _cuda_sync(devices: Sequence[int]) -> Callable[[], None] | bool | None:
    """A function synchronising each metered CUDA device (all of them when ``devices`` is empty)
    when torch is already imported and CUDA is initialised; ``None`` when there is nothing to
    wait for yet (no torch, or CUDA not initialised: look again later); ``False`` when this
    process has no CUDA at all (``torch.cuda.is_available()`` is false: never look again — the
    check costs ~2.5 µs, at every window edge otherwise)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return False
        if not torch.cuda.is_initialized():
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
        from joulebound.energy.simulated import SimulatedBackend

        return SimulatedBackend(**kwargs)
    if backend == "replay":
        from joulebound.energy.replay import ReplayBackend

        if "path" not in kwargs:
            raise JouleboundError("backend='replay' needs path=<recorded log (.csv/.jsonl) or "
                                  "store .db>")
        return ReplayBackend.open(**kwargs)
    if backend == "nvml":
        from joulebound.energy.nvml import NvmlBackend

        return NvmlBackend(gpus=gpus, **kwargs)
    if backend == "rapl":
        from joulebound.energy.rapl import RaplBackend

        return RaplBackend(**kwargs)
    if backend == "cpu-model":
        from joulebound.energy.cpu_model import CpuModelBackend

        return CpuModelBackend(tdp_w=kwargs.get("cpu_tdp_w", kwargs.get("tdp_w")))
    # auto: NVML GPUs, plus RAPL CPU/DRAM when readable, else modeled CPU/DRAM (labeled)
    notes: list[str] = []
    parts: list[Backend] = []
    try:
        from joulebound.energy.nvml import NvmlBackend

        parts.append(NvmlBackend(gpus=gpus))
    except JouleboundError as exc:
        notes.append(f"GPU: {exc}")
    try:
        from joulebound.energy.rapl import RaplBackend

        parts.append(RaplBackend())
    except JouleboundError as exc:
        notes.append(f"CPU: {exc}")
        try:
            from joulebound.energy.cpu_model import CpuModelBackend

            parts.append(CpuModelBackend(tdp_w=kwargs.get("cpu_tdp_w")))
        except JouleboundError as exc2:
            notes.append(f"CPU model: {exc2}")
    if len(parts) == 2:
        from joulebound.energy.base import CompositeBackend

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
        meta: run metadata stored with the run (the store's ``runs.meta_json``), e.g. the
            carbon-intensity setting ``{"carbon": {...}}``; shown by ``joulebound report``.
            Inside a command run by ``joulebound measure`` (:data:`PARENT_RUN_ENV` set), the
            measure run's id is added as ``parent_run``.
        backend_kwargs: passed to the backend constructor (e.g. ``power=`` for simulated).
    """

    def __init__(self, backend: str | Backend = "auto", gpus: Sequence[int] | str | None = None,
                 interval_s: float = 0.1, store: Store | str | os.PathLike | None = None,
                 sync: bool = True, clock: Callable[[], float] | None = None,
                 run_id: str | None = None, rank: int | None = None,
                 command: str = "", keep_results: int | None = 10000,
                 meta: dict[str, Any] | None = None, **backend_kwargs: Any) -> None:
        if keep_results is not None and (isinstance(keep_results, bool) or
                                         not isinstance(keep_results, int) or keep_results < 0):
            raise JouleboundError(f"keep_results must be a whole number >= 0 or None (keep every "
                                  f"window), got {keep_results!r}")
        #: the default clock's offset (s): its time is ``perf_counter() + offset``, which the
        #: window edges compute inline; ``None`` with a given clock
        self._clock_offset: float | None = None
        self._perf = time.perf_counter
        if clock is None:
            clock = _make_clock()
            self._clock_offset = clock.offset   # type: ignore[attr-defined]
        self.clock = clock
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
        #: finished windows, oldest first: the most recent ``keep_results`` of them (a
        #: :class:`collections.deque`: iterate, index, ``len``, ``clear``; ``list(...)`` to
        #: slice). A new window past the bound drops the oldest in O(1).
        self.results: deque[WindowResult] = deque(maxlen=keep_results)
        self.keep_results = keep_results
        #: finished windows dropped from :attr:`results` by the ``keep_results`` bound
        self.results_dropped = 0
        self._cuda_sync_fn: Callable[[], None] | bool | None = None
        self.run_id = run_id or uuidlib.uuid4().hex
        #: provenance of the windows' GPU energy (``energy_j``); ``None`` without a metered GPU
        #: (the CPU/DRAM figures carry their own, :attr:`WindowResult.cpu_provenance`)
        self.gpu_provenance: str | None = (
            self.backend.provenance
            if any(self.backend.channels[i].kind == "gpu" for i in self.channels) else None)
        self.store = None
        if store is not None:
            from joulebound.energy.store import Store

            self.store = store if isinstance(store, Store) else Store(store)
            parent = os.environ.get(PARENT_RUN_ENV)
            if parent and parent != self.run_id:   # metered inside `joulebound measure -- CMD`
                meta = {**(meta or {}), "parent_run": parent}
            self.store.begin_run(self.run_id, backend=self.backend.name,
                                 provenance=self.gpu_provenance, command=command,
                                 notes=self.notes, rank=self.rank, host=self.host,
                                 devices=[asdict(self.backend.channels[i]) for i in self.channels],
                                 meta=meta)
        sink = None
        if self.store is not None:
            chans = self.backend.channels
            store_ = self.store

            def sink(batch: list[Sample]) -> None:
                store_.add_samples(self.run_id, [(s.t, chans[s.channel].uuid, chans[s.channel].kind,
                                                  s.power_w, s.energy_j) for s in batch])
        # what every window needs about the channels, looked up once: (channel, uuid, index,
        # source, kind, provenance, has a counter) in channel order
        chans = self.backend.channels
        self._chan_info = [(i, chans[i].uuid, chans[i].index, chans[i].source, chans[i].kind,
                            self.backend.channel_provenance(i), self.backend.has_counter(i))
                           for i in self.channels]
        #: windows shorter than this (s, the longest sensor period metered) are short windows
        self._short_below = max([chans[i].sensor_period_s or 0.0 for i in self.channels],
                                default=0.0)
        self._is_gpu = [chans[i].kind == "gpu" for i in self.channels]
        self._events = self.backend.events          # (appended to, never replaced)
        self._provenance = self.gpu_provenance
        self._backend_name = self.backend.name
        self._n_gpu = sum(self._is_gpu)
        self._n_cpu = len(self.channels) - self._n_gpu
        self._gpu_metered = self._n_gpu > 0
        self._gpu_indices = [chans[i].index for i in self.channels if chans[i].kind == "gpu"]
        self._backend_sync = (None if type(self.backend).sync is Backend.sync
                              else self.backend.sync)
        #: a metered GPU has MIG enabled (its note is the backend's, made when it opened)
        self._mig = bool(self.channels) and any(n.startswith("MIG") for n in self.backend.notes)
        self.sampler = Sampler(self.backend, self.channels, self.clock,
                               interval_s=interval_s or 1.0, sink=sink)
        if self.channels and interval_s > 0:
            self.sampler.start()
        self._closed = False
        # SIGTERM/SIGHUP unwind (killed, open windows kept) as Ctrl-C does
        self._stop_signals = stopsignals.acquire()
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
        if fn:                                      # (False: no CUDA in this process)
            fn()

    # -- windows ------------------------------------------------------------------------------
    def begin_window(self, name: str, sync: bool = True) -> None:
        """Start window ``name`` (any string not already open)."""
        open_ = self._open
        if name in open_:
            raise JouleboundError(f"window {name!r} is already open; end it first or use another "
                                  f"name (open: {', '.join(open_)})")
        if sync and self.sync_enabled:
            self._sync()
        off = self._clock_offset
        t = self._perf() + off if off is not None else self.clock()
        open_[name] = (t, len(self._events), self.sampler.window_edge(name, t))

    def end_window(self, name: str, sync: bool = True, cancel: bool = False) -> WindowResult:
        """End window ``name`` and return its :class:`WindowResult` (committed to the store;
        ``cancel``: returned only).

        When both edges read every channel's counter in one batch and every channel is a GPU,
        the energy is the difference of the edges' sums of counter estimates; else, per channel,
        the energy from its counter estimates at both edges, or (no counter, or its read failed
        at an edge) from the power integral (:meth:`_power_fallback`, read now); the GPU total
        (``None`` unless every GPU's energy is known), the CPU total, and the flags. The
        per-device figures and the uncertainty are
        :class:`~joulebound.energy.results.Deferred`: computed from the two edges
        (:func:`_devices`) when first read."""
        st = self._open.pop(name, None)
        if st is None:
            raise self._no_window(name)
        if sync and self.sync_enabled:
            try:
                self._sync()
            except BaseException:
                self._open[name] = st         # the window stays open
                raise
        off = self._clock_offset
        t1 = self._perf() + off if off is not None else self.clock()
        t0 = st[0]
        dur = t1 - t0
        end = self.sampler.window_edge(name, t1, False)
        start = st[2]
        s0 = start[3]
        fallback: dict[int, tuple[float | None, float | None, str, int]] | None = None
        flags: list[str] = [] if self._gpu_metered else ["no_energy_sensor"]  # energy_j None
        if dur <= 0.0:
            dur = 0.0
            flags.append("zero_length")
        elif dur < self._short_below:
            flags.append("short_window")
        if s0 is not None and end[3] is not None:  # batched edges, every channel a GPU
            energy: float | None = end[3] - s0
            cpu: float | None = None
        else:
            energy, cpu, fallback = self._channel_energies(st, t1, dur, end, flags)
        if start[1] is not end[1] and end[1][3] > start[1][3]:
            flags.append("read_error")        # a read failed in the window
        res = window_result(    # positional, in field order
            name, t0, t1, dur, energy,
            Deferred((_devices, self._chan_info, dur, start, end, fallback)),
            self._provenance, flags, cpu, self.rank, self.host, self._backend_name,
            None if energy is None else _GPU_UNCERTAINTY)
        if len(self._events) > st[1] or self._mig:
            self._event_flags(st, flags)      # appends to res.flags (the same list)
        if not cancel:                        # _keep, inlined: this is the per-window hot path
            results = self.results
            if len(results) == results.maxlen:
                self.results_dropped += 1      # the oldest one goes
            results.append(res)
            if self.store is not None:
                self._commit(res)
        return res

    def _keep(self, res: WindowResult) -> None:
        """Add a finished window to :attr:`results` (the oldest goes when full, counted) and
        commit it to the store (what :meth:`end_window` does inline)."""
        results = self.results
        if len(results) == results.maxlen:
            self.results_dropped += 1      # the oldest one goes
        results.append(res)
        if self.store is not None:
            self._commit(res)

    def _channel_energies(self, st: _Open, t1: float, dur: float, end: tuple[Any, ...],
                          flags: list[str]
                          ) -> tuple[float | None, float | None,
                                     dict[int, tuple[float | None, float | None, str, int]] | None]:
        """A window's GPU and CPU energy (J) channel by channel: ``(GPU total, CPU total, the
        power-metered channels' figures by position)``; appends ``energy_unavailable`` (some
        GPU's energy is unknown: the GPU total is ``None``) and the power fallback's flags."""
        start = st[2]
        gpu_e = cpu_e = 0.0
        gpu_known = cpu_known = True
        fallback: dict[int, tuple[float | None, float | None, str, int]] | None = None
        is_gpu = self._is_gpu
        for k, (v0, v1) in enumerate(zip(start[0], end[0], strict=True)):
            if v0 is not None and v1 is not None:
                d = v1[0] - v0[0]
                if d > 0.0:
                    if is_gpu[k]:
                        gpu_e += d
                    else:
                        cpu_e += d
                continue
            if fallback is None:
                fallback = {}
            fallback[k] = got = self._power_fallback(k, st, v0, t1, dur, end, flags)
            if got[0] is not None:
                if is_gpu[k]:
                    gpu_e += got[0]
                else:
                    cpu_e += got[0]
            elif is_gpu[k]:
                gpu_known = False
            else:
                cpu_known = False
        energy: float | None = gpu_e if self._n_gpu and gpu_known else None
        if self._n_gpu and not gpu_known and "no_energy_sensor" not in flags:
            flags.append("energy_unavailable")
        return energy, cpu_e if self._n_cpu and cpu_known else None, fallback

    def _no_window(self, name: str) -> JouleboundError:
        """The error for ending a window that is not open."""
        choices = list(self._open)
        hint = did_you_mean(name, choices) if choices else " No window is open."
        return JouleboundError(f"no open window named {name!r}.{hint}")

    def _power_fallback(self, k: int, st: _Open, v0: Edge | None, t1: float, dur: float,
                        end: tuple[Any, ...], flags: list[str]
                        ) -> tuple[float | None, float | None, str, int]:
        """Channel ``k`` (position) metered by power over the window: ``(energy, uncertainty,
        source, sample count)``. A counter channel whose read failed at an edge reads power
        now (counted in the window) and is labeled ``...->power_integration``."""
        i, _uuid, _index, source, _kind, _prov, counter = self._chan_info[k]
        start = st[2]
        peaks = end[4]
        n = readings_between(start, end, i)
        if counter:   # the counter failed at an edge: power instead
            p = self.sampler.read_power(i, t1)
            if p is not None:
                self.sampler.add([Sample(t1, i, p, None)])
                n += 1
                if p > peaks.get(i, float("-inf")):
                    peaks[i] = p
            source = f"{source}->power_integration"
        energy, unc = self._power_energy(i, st, v0, t1, dur, flags)
        return energy, unc, source, n

    def _event_flags(self, st: _Open, flags: list[str]) -> None:
        """Counter resets / wraparounds / glitches seen since the window began, and MIG."""
        events = self.backend.events
        if len(events) > st[1]:
            for ev in events[st[1]:]:
                f = {"reset": "counter_reset", "glitch": "counter_glitch"}.get(
                    ev.kind, "counter_wraparound")
                if f not in flags:
                    flags.append(f)
        if self._mig and "mig" not in flags:
            flags.append("mig")

    def _commit(self, res: WindowResult) -> None:
        """Commit ``res`` to the store (a failure is counted and flagged, never raised)."""
        try:
            self.store.add_window(self.run_id, res)  # type: ignore[union-attr]
        except Exception as exc:  # a full disk must not stop training; it is reported
            self.windows_not_stored += 1
            self.store_error = f"{type(exc).__name__}: {exc}"
            if "not_stored" not in res.flags:
                res.flags.append("not_stored")

    def _power_energy(self, i: int, st: _Open, v0: Edge | None, t1: float, dur: float,
                      flags: list[str]) -> tuple[float | None, float | None]:
        """Energy of channel ``i`` over the window from the power integral, with its unmeasured
        part as the uncertainty; ``None`` when it is mostly unmeasured or there is no reading.
        ``v0``: the channel's counter estimate at the start (``None`` without one). Flags
        ``power_read_failed`` / ``no_power_samples``."""
        def flag(f: str) -> None:
            if f not in flags:
                flags.append(f)

        sampler = self.sampler
        t0 = st[0]
        _, state, fails, _, _ = st[2][1]          # the sampler's snapshot at the start
        fails0 = fails.get(i, 0)
        p0 = (PowerEdge(0.0, 0.0, 0.0, fails0, False) if state is None
              else sampler.power_edge_from(state, i, fails0, t0))
        p1 = sampler.power_edge(i, t1)
        if p1.failures > p0.failures:
            flag("power_read_failed")
        if not p1.has_reading:
            flag("no_power_samples")
            return None, None
        energy = max(p1.integral_j - p0.integral_j, 0.0)
        gap_t = p1.gap_time_s - p0.gap_time_s
        unc = max(p1.gap_energy_j - p0.gap_energy_j, 0.0)
        track = sampler.track(i)
        if track is not None and v0 is not None and track.t_read is not None and \
                track.t_read > t0 and track.integral_at_read is not None:
            # the counter worked until t_read: counter up to there, power after
            energy = max(track.e_cur - v0[0], 0.0) + \
                max(p1.integral_j - track.integral_at_read, 0.0)   # type: ignore[operator]
            unc += edge_uncertainty(v0) + track.rate_w() * (track.period or 0.0)
        elif not p0.has_reading:       # no reading before the first one inside the window
            first = sampler.first_power_t(i)
            if first is not None and first > t0:
                gap_t += first - t0
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
        self._end_open_windows(status)
        self._closed = True
        atexit.unregister(self._atexit)
        stopsignals.release(self._stop_signals)
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

    def _end_open_windows(self, status: str) -> None:
        """End every window still open (innermost first), flagged ``cut_short``, and commit it:
        an interrupted run keeps its ``train`` / ``epoch`` windows up to its end. A window that
        cannot be ended is noted, never raised at the end of a run."""
        cut = []
        for name in reversed(list(self._open)):
            try:
                res = self.end_window(name, sync=False, cancel=True)
            except Exception as exc:  # reported in the notes
                self._open.pop(name, None)
                self.backend.notes.append(f"window {name!r} open at the run's end could not be "
                                          f"ended ({type(exc).__name__}: {exc})")
                continue
            res.flags.append("cut_short")
            self._keep(res)
            cut.append(name)
        if cut:
            self.backend.notes.append(
                f"{len(cut)} window(s) still open when the run ended ({status}) were ended there "
                f"and flagged cut_short: {', '.join(cut)}")

    def __enter__(self) -> EnergyMeter:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        status, code = from_exception(exc)
        self.close(status=status, exit_code=code)

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.sampler._stop.set()


def _devices(res: WindowResult, chan_info: list[tuple[Any, ...]], dur: float,
             start: tuple[Any, ...], end: tuple[Any, ...],
             fallback: dict[int, tuple[float | None, float | None, str, int]] | None
             ) -> list[DeviceEnergy]:
    """The per-device figures of a window (``res.devices``, computed when first read) from the
    meter's channel info and the window's two edges (:meth:`Sampler.window_edge`'s): each
    counter channel's energy (J) from its estimates at both edges with their bound
    (:func:`~joulebound.energy.counter.uncertainty_of`), the power-metered ones as
    :meth:`EnergyMeter.end_window` found them (``fallback``, by position); average and peak
    power (W) over the window's ``dur`` (s), and the readings in the window."""
    peaks = end[4]
    same = start[1][4] is end[1][4]      # no reading but fast-path edges in between
    n_fast = end[2] - start[2]
    out = []
    gpu_unc = 0.0
    e0s, e1s = start[0], end[0]          # (as long as chan_info: zip(strict=True) costs ~0.5 us)
    for k, (i, uuid, index, source, kind, prov, _) in enumerate(chan_info):
        if fallback is not None and k in fallback:
            energy, unc, source, n = fallback[k]
            if energy is None:
                unc = None
        else:
            v0, v1 = e0s[k], e1s[k]
            energy = v1[0] - v0[0]
            if energy < 0.0:
                energy = 0.0
            unc = uncertainty_of(v0, v1, dur)
            n = n_fast if same else readings_between(start, end, i)
        if kind == "gpu" and unc:
            gpu_unc += unc
        out.append(DeviceEnergy(uuid, index, energy,
                                energy / dur if energy is not None and dur > 0 else None,
                                peaks.get(i), source, kind, n, prov, unc))
    d = res.__dict__
    if d.get("energy_uncertainty_j") is _GPU_UNCERTAINTY:   # computed here at no extra cost:
        d["energy_uncertainty_j"] = gpu_unc                  # what _gpu_uncertainty sums
    return out


def _gpu_uncertainty(res: WindowResult) -> float:
    """``res.energy_uncertainty_j``: the sum over its GPUs of their bounds (J); :func:`_devices`
    stores the same sum when the devices are read first."""
    devices = res.devices
    got = res.__dict__.get("energy_uncertainty_j")
    if got is not None and got.__class__ is not Deferred:   # _devices just stored it
        return got
    total = 0.0
    for d in devices:
        if d.kind == "gpu" and d.uncertainty_j:
            total += d.uncertainty_j
    return total


#: the window's uncertainty, computed from its devices when first read
_GPU_UNCERTAINTY = Deferred((_gpu_uncertainty,))


def _close_at_exit(ref: weakref.ReferenceType[EnergyMeter]) -> None:
    """``atexit`` handler: close a meter left open, as ``failed`` after an uncaught exception."""
    meter = ref()
    if meter is None or meter._closed:
        return
    exc = getattr(sys, "last_value", None)
    if stopsignals.received is not None:      # SIGTERM/SIGHUP unwound the program
        sig = stopsignals.received
        meter.backend.notes.append(f"closed at interpreter exit after {signal.Signals(sig).name}")
        status, code = KILLED, 128 + sig
    elif exc is not None:
        meter.backend.notes.append(f"closed at interpreter exit after an uncaught "
                                   f"{type(exc).__name__}")
        status, code = from_exception(exc)     # Ctrl-C: killed / 130, an error: failed
        if code is None:
            code = 1
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
        from joulebound.energy.ranks import default_gpus

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
