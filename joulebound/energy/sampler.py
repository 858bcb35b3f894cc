"""Background power sampler: a daemon thread that reads every channel's power every ``interval_s``.

Memory stays O(channels x open windows) however long the run: per channel the sampler keeps a
running trapezoid integral of power (J), the last reading, the energy counter's
:class:`~joulebound.energy.counter.CounterTrack` and how many readings it folded in, and per
*watched* (open) window the peak power. Samples are handed to a sink (the SQLite store) in batches,
about every second. Timestamps are the meter's clock (s, epoch-aligned, monotonic).

Nothing is lost silently: every failed read is counted per channel (:attr:`Sampler.failures`) with
its message, every sample the sink could not take is counted (:attr:`Sampler.samples_lost`), and
:meth:`Sampler.problems` says so in words for the run's notes. Across failed power reads (or, while
the thread runs, readings further apart than :attr:`Sampler.gap_s`: a stalled thread) the integral
still bridges linearly, but the bridged time and energy are accumulated (``gap_time_s`` /
``gap_energy_j``) so a window can tell how much of it was really measured.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from joulebound.energy.base import Backend
from joulebound.energy.counter import CounterTrack, Edge, observe_counters

#: the failure counts of a snapshot taken before any failure (shared: never modified; a plain
#: dict, so a window's kept edges pickle)
_NO_FAILURES: dict[int, int] = {}


@dataclass(slots=True)
class Sample:
    """One reading of one channel: time ``t`` (s), ``power_w`` (W), cumulative ``energy_j`` (J)."""

    t: float
    channel: int
    power_w: float | None
    energy_j: float | None


def readings_between(start: tuple[Any, ...], end: tuple[Any, ...], channel: int) -> int:
    """Readings of ``channel`` folded in between two window edges (:meth:`Sampler.window_edge`'s
    results: after the start's, up to the end's)."""
    n = end[2] - start[2]
    c0, c1 = start[1][4], end[1][4]
    if c1 is not c0:
        n += c1.get(channel, 0) - c0.get(channel, 0)
    return n


@dataclass(slots=True)
class PowerEdge:
    """The power integral of one channel evaluated at a window edge.

    Attributes:
        integral_j: trapezoid integral up to the edge (J); after the last reading the last power
            is held.
        gap_time_s / gap_energy_j: cumulative time and energy not backed by readings (bridged
            gaps and the held tail when it is longer than ``gap_s``).
        failures: cumulative failed power reads of the channel.
        has_reading: False before the channel's first good power reading.
    """

    integral_j: float
    gap_time_s: float
    gap_energy_j: float
    failures: int
    has_reading: bool


class Sampler:
    """Reads ``backend`` power (and energy counters) for ``channels`` every ``interval_s`` seconds.

    Args:
        backend: the backend to read.
        channels: channel indices into ``backend.channels``.
        clock: the time source (s).
        interval_s: sampling period (s); the default 0.1 s matches NVML's typical update period.
        sink: called with each batch of new samples (from the sampler thread), e.g. the store.
        flush_s: how often (s) batches are handed to ``sink``.
    """

    def __init__(self, backend: Backend, channels: list[int], clock: Callable[[], float],
                 interval_s: float = 0.1, sink: Callable[[list[Sample]], None] | None = None,
                 flush_s: float = 1.0) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0 s, got {interval_s}")
        self.backend = backend
        self.channels = list(channels)
        self.clock = clock
        self.interval_s = float(interval_s)
        self.sink = sink
        self.flush_s = float(flush_s)
        self.integral_j: dict[int, float] = {i: 0.0 for i in self.channels}
        self.gap_time_s: dict[int, float] = {i: 0.0 for i in self.channels}
        self.gap_energy_j: dict[int, float] = {i: 0.0 for i in self.channels}
        periods = [backend.channels[i].sensor_period_s or 0.0 for i in self.channels]
        #: power readings further apart than this (s) are a gap, not a measurement
        self.gap_s = max([3.0 * self.interval_s, *[1.5 * p for p in periods]])
        self.tracks: dict[int, CounterTrack] = {
            i: CounterTrack(backend.channels[i].sensor_period_s) for i in self.channels
            if backend.has_counter(i)}
        self._last: dict[int, tuple[float, float]] = {}
        self._first: dict[int, float] = {}
        self._failed_since: set[int] = set()   # a power read failed since the last good one
        #: open window name -> peak power per channel (W) since it began
        self._watch: dict[str, dict[int, float]] = {}
        #: readings folded in per channel (besides the fast path's edges, :attr:`_fast_edges`)
        self._n_read: dict[int, int] = {}
        #: window edges the fast path folded in (a reading of every channel each)
        self._fast_edges = 0
        #: bumped by every change a window's figures depend on, other than a fast-path edge:
        #: readings folded in (power, counters, their counts) and failed reads
        self._version = 0
        self._snap: tuple[Any, ...] = (-1,)   # :meth:`_snapshot`, taken at ``_snap[0]``
        self._fast_version = -1   # _version at the last fast-path edge (:meth:`_fast_changed`)
        #: the counter tracks in channel order when every channel has one (the fast path; also
        #: with no channel at all: a time-only edge)
        self._fast_tracks = ([self.tracks[i] for i in self.channels]
                             if len(self.tracks) == len(self.channels) else None)
        #: every channel's counter read in one batched call (when every channel has one)
        self._batch_read: Callable[[float], list[float]] | None = (
            backend.energy_reader(self.channels) if self._fast_tracks is not None else None)
        #: the window-edge fast path's read: :attr:`_batch_read` once every track knows its
        #: rate (then it stays so), ``None`` before
        self._fast_read: Callable[[float], list[float]] | None = None
        #: the fast path's edges sum their estimates (every channel a GPU: the sum is the
        #: window total's share of the edge)
        self.fast_sums = bool(self.channels) and self._fast_tracks is not None and all(
            backend.channels[i].kind == "gpu" for i in self.channels)
        self._counter_channels = [i for i in self.channels if backend.has_counter(i)]
        self._power_channels = [i for i in self.channels if not backend.has_counter(i)]
        #: failed reads per channel
        self.failures: Counter[int] = Counter()
        #: sum of :attr:`failures` (one integer a window edge can compare)
        self.failures_total = 0
        self._messages: Counter[str] = Counter()
        #: samples the sink could not take, and the last reason
        self.samples_lost = 0
        self.sink_error: str | None = None
        self._pending: list[Sample] = []
        #: one lock for the backend's reads and the sampler's state: the backend's (re-entrant),
        #: so a window edge reads and folds its readings in one acquisition
        self._lock = backend.lock
        self._acquire, self._release = self._lock.acquire, self._lock.release
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.n_reads = 0

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> Sampler:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="joulebound-sampler",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5 * self.interval_s + 1.0)
            self._thread = None
        self.flush()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _run(self) -> None:
        import time

        next_t = time.perf_counter()
        last_flush = next_t
        while not self._stop.is_set():
            try:
                self.sample_now()
            except Exception as exc:  # never let the thread die silently
                self.record_failure(None, "sampler", exc)
            now = time.perf_counter()
            if self.sink is not None and now - last_flush >= self.flush_s:
                self.flush()
                last_flush = now
            next_t += self.interval_s
            if next_t < now:  # fell behind (slow reads): skip missed ticks, never burst
                next_t = now + self.interval_s
            self._stop.wait(next_t - now)

    # -- reading ------------------------------------------------------------------------------
    def sample_now(self) -> list[Sample]:
        """Read every channel once (also used for the edge reads of windows)."""
        t = self.clock()
        out = []
        for i in self.channels:
            p = e = None
            ok = False
            try:
                with self.backend.lock:
                    p = self.backend.read_power_w(i, t)
                ok = True
            except Exception as exc:  # a sensor hiccup must not kill the thread
                self.record_failure(i, "power", exc)
            if self.backend.has_counter(i):
                try:
                    with self.backend.lock:
                        e = self.backend.read_energy_j(i, t)
                    ok = True
                except Exception as exc:
                    self.record_failure(i, "energy counter", exc)
            if ok:
                out.append(Sample(t, i, p, e))
        self.add(out)
        self.n_reads += 1
        return out

    def record_failure(self, channel: int | None, what: str, exc: BaseException) -> None:
        """Count a failed read (``channel`` ``None``: the sampler itself)."""
        with self._lock:
            if channel is not None:
                self.failures[channel] += 1
                self.failures_total += 1
                self._version += 1
                if what == "power":
                    self._failed_since.add(channel)
            ch = "" if channel is None else f"{self._label(channel)} "
            self._messages[f"{ch}{what} read failed: {type(exc).__name__}: {exc}"] += 1

    def _label(self, i: int) -> str:
        c = self.backend.channels[i]
        return f"{c.kind} {c.index} ({c.uuid})"

    @property
    def errors(self) -> list[str]:
        """Distinct failure messages, with counts."""
        with self._lock:
            return [f"{m} (x{n})" if n > 1 else m for m, n in self._messages.items()]

    def problems(self) -> list[str]:
        """What was lost, in words (empty when nothing was)."""
        out = self.errors
        if self.samples_lost:
            out.append(f"{self.samples_lost:,} power sample(s) could not be written to the store "
                       f"({self.sink_error}); the windows themselves are unaffected")
        return out

    def add(self, samples: list[Sample]) -> None:
        """Fold readings into the running integrals, the counter tracks and the watched windows'
        statistics."""
        with self._lock:
            self._add_locked(samples)

    def _add_locked(self, samples: list[Sample], t_edge: float | None = None
                    ) -> dict[int, Edge | None] | None:
        """:meth:`add` with the lock held. With ``t_edge`` (a window edge, s) it also returns
        the estimate at ``t_edge`` of each counter channel read in ``samples`` (``None`` where
        the read failed)."""
        edges: dict[int, Edge | None] | None = None if t_edge is None else {}
        tracks = self.tracks
        last = self._last
        integral = self.integral_j
        n_read = self._n_read
        for smp in samples:
            ch = smp.channel
            p = smp.power_w
            if p is not None:
                self._fold_power(smp)
                for peaks in self._watch.values():
                    if p > peaks.get(ch, float("-inf")):
                        peaks[ch] = p
            track = tracks.get(ch)
            if track is not None:
                integ = integral.get(ch, 0.0) if ch in last else None
                if edges is None:
                    track.observe(smp.t, smp.energy_j, p, integral_j=integ)
                elif smp.energy_j is not None:   # observe, then the estimate at the edge
                    edges[ch] = track.observe_edge_raw(smp.t, smp.energy_j, p, integ,
                                                       t_edge)  # type: ignore[arg-type]
                else:
                    track.observe(smp.t, None, p, integral_j=integ)
                    edges[ch] = None
            n_read[ch] = n_read.get(ch, 0) + 1
        if samples:
            self._version += 1
        if self.sink is not None:
            self._pending.extend(samples)
        return edges

    def _fold_power(self, smp: Sample) -> None:
        """A power reading into the channel's trapezoid integral and gap accounting (under the
        lock)."""
        ch = smp.channel
        last = self._last.get(ch)
        if last is not None and smp.t > last[0]:
            dt = smp.t - last[0]
            e = 0.5 * (last[1] + smp.power_w) * dt  # type: ignore[operator]
            self.integral_j[ch] = self.integral_j.get(ch, 0.0) + e
            if ch in self._failed_since or (self.running and dt > self.gap_s):
                self.gap_time_s[ch] = self.gap_time_s.get(ch, 0.0) + dt
                self.gap_energy_j[ch] = self.gap_energy_j.get(ch, 0.0) + e
        if last is None or smp.t >= last[0]:
            self._last[ch] = (smp.t, smp.power_w)  # type: ignore[assignment]
        self._first.setdefault(ch, smp.t)
        self._failed_since.discard(ch)

    def power_edge(self, channel: int, t: float) -> PowerEdge:
        """The power integral at ``t`` (the last power held after the last reading)."""
        with self._lock:
            return self._power_edge(channel, t)

    def _power_edge(self, channel: int, t: float) -> PowerEdge:
        return self.power_edge_from(None, channel, self.failures.get(channel, 0), t)

    def _snapshot(self) -> tuple[Any, ...]:
        """What a window's end needs of the sampler's state at its start, as it is now (under
        the lock): ``(version, power state, failed reads per channel, their total, readings per
        channel)`` — the power state (per channel the integral (J), gap time (s) and energy (J),
        the last reading ``(t, W)``, and the channels whose read failed since; ``None`` before
        any power reading) for :meth:`power_edge_from`. Copied again only after a change (a
        copy is never modified, so the windows opened in between share it)."""
        snap = self._snap
        if snap[0] != self._version:
            state = ((self.integral_j.copy(), self.gap_time_s.copy(), self.gap_energy_j.copy(),
                      self._last.copy(), self._failed_since.copy()) if self._last else None)
            total = self.failures_total
            fails = dict(self.failures) if total else _NO_FAILURES
            snap = self._snap = (self._version, state, fails, total, self._n_read.copy())
        return snap

    def power_edge_from(self, state: tuple[dict[int, float], dict[int, float], dict[int, float],
                                           dict[int, tuple[float, float]], set[int]] | None,
                        channel: int, failures: int, t: float) -> PowerEdge:
        """The power edge of ``channel`` at ``t`` from a power state of :meth:`_snapshot` taken
        then (``None``: the state now, under the lock); ``failures``: its failed reads then."""
        integral, gap_time, gap_energy, lasts, failed_since = (
            (self.integral_j, self.gap_time_s, self.gap_energy_j, self._last, self._failed_since)
            if state is None else state)
        integ = integral.get(channel, 0.0)
        gap_t = gap_time.get(channel, 0.0)
        gap_e = gap_energy.get(channel, 0.0)
        last = lasts.get(channel)
        if last is not None and t > last[0]:
            held_t = t - last[0]
            held_e = last[1] * held_t
            integ += held_e
            if channel in failed_since or held_t > self.gap_s:
                gap_t += held_t
                gap_e += held_e
        return PowerEdge(integ, gap_t, gap_e, failures, last is not None)

    # -- window edges -------------------------------------------------------------------------
    def window_edge(self, name: str, t: float, start: bool = True) -> tuple[Any, ...]:
        """A window's edge at ``t`` (s): every channel read and folded in under one lock.

        The fast path reads every counter in one batched call (when every channel has one and
        every track knows its rate) and, when all reads succeed, folds the readings in without
        building samples; else the channels are read one by one (:meth:`_slow_edge`).

        Returns ``(estimates, snapshot, fast edges, total)`` at a start (``start``; the window
        is watched from then on) and ``(estimates, snapshot, fast edges, total, peaks)`` at an
        end: the counter estimates at ``t`` (:data:`~joulebound.energy.counter.Edge` s in
        channel order, ``None`` where a channel has no counter or its read failed), the state
        then (:meth:`_snapshot`; the same object at both edges when nothing but fast-path edges
        happened in between), the fast path's edge count then, the sum of the estimates' values
        (J) on the fast path when every channel is a GPU (:attr:`fast_sums`; else ``None``),
        and the peak power per channel since the start (W)."""
        self._acquire()                # (cheaper than `with`, at every window edge)
        try:
            read = self._fast_read
            if read is not None:
                try:
                    energies = read(t)
                except Exception:     # read again channel by channel, to record which failed
                    read = None
                else:
                    if self._version != self._fast_version:
                        self._fast_changed()
                    edges: list[Edge] = []
                    total = observe_counters(self._fast_tracks, t, energies,  # type: ignore[arg-type]
                                             t, edges)
                    self._fast_edges = n = self._fast_edges + 1
                    if self.sink is not None:
                        self._pending.extend([Sample(t, i, None, e) for i, e in
                                              zip(self.channels, energies, strict=True)])
                    if start:
                        self._watch[name] = {}
                        return edges, self._snap, n, total if self.fast_sums else None
                    return (edges, self._snap, n, total if self.fast_sums else None,
                            self._watch.pop(name, None) or {})
            if start:
                self._watch[name] = {}
                return self._slow_edge(t)
            return (*self._slow_edge(t), self._watch.pop(name, None) or {})
        finally:
            self._release()

    def _slow_edge(self, t: float) -> tuple[Any, ...]:
        """A window edge read channel by channel (under the lock; :meth:`_edge_samples`: failed
        reads counted, power read where needed), folded in by :meth:`_add_locked`:
        ``(estimates, snapshot, fast edges, None)``. Enables the fast path once every track
        knows its rate."""
        got = self._add_locked(self._edge_samples(t), t)
        edges = [got.get(i) for i in self.channels]  # type: ignore[union-attr]
        if self._fast_read is None and self._batch_read is not None and \
                all(tr.has_rate for tr in self._fast_tracks):  # type: ignore[union-attr]
            self._fast_read = self._batch_read
        return edges, self._snapshot(), self._fast_edges, None

    def _fast_changed(self) -> None:
        """Before a fast-path edge after a change (under the lock): the snapshot taken again,
        and the power integral now as each track's integral at its reading (J, for a counter
        lost later; it changes only with the state, so this is done only after a change)."""
        self._fast_version = self._version
        self._snapshot()
        last, integral = self._last, self.integral_j
        for i, tr in zip(self.channels, self._fast_tracks or (), strict=True):
            if i in last:
                tr.integral_at_read = integral.get(i, 0.0)

    def _edge_samples(self, t: float) -> list[Sample]:
        """A window edge's readings at ``t``, channel by channel (under the lock): every counter
        channel's counter (energy ``None`` where the read failed, which is counted; a power
        reading too while the counter's rate is not known yet), then the power of the channels
        metered by power integration."""
        samples = []
        tracks = self.tracks
        backend = self.backend
        for i in self._counter_channels:
            try:
                e = backend.read_energy_j(i, t)
            except Exception as exc:
                self.record_failure(i, "energy counter", exc)
                e = None
            p = None
            track = tracks.get(i)
            if e is not None and track is not None and not track.has_rate:
                p = self.read_power(i, t, quiet=True)   # seeds the rate until 2 steps seen
            samples.append(Sample(t, i, p, e))
        for i in self._power_channels:
            p = self.read_power(i, t)
            if p is not None:
                samples.append(Sample(t, i, p, None))
        return samples

    def read_power(self, i: int, t: float, quiet: bool = False) -> float | None:
        """Channel ``i``'s power now (W); ``None`` when the read fails (counted unless
        ``quiet``)."""
        try:
            with self._lock:
                return self.backend.read_power_w(i, t)
        except Exception as exc:
            if not quiet:
                self.record_failure(i, "power", exc)
            return None

    def first_power_t(self, channel: int) -> float | None:
        """Time of the channel's first good power reading (s), ``None`` before it."""
        with self._lock:
            return self._first.get(channel)

    def track(self, channel: int) -> CounterTrack | None:
        return self.tracks.get(channel)

    def flush(self) -> None:
        """Hand pending samples to the sink; what it cannot take is counted, not hidden."""
        if self.sink is None:
            return
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            try:
                self.sink(batch)
            except Exception as exc:  # a sink failure must not kill the thread
                with self._lock:
                    self.samples_lost += len(batch)
                    self.sink_error = f"{type(exc).__name__}: {exc}"
