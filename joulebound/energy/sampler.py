"""Background power sampler: a daemon thread that reads every channel's power every ``interval_s``.

Memory stays O(channels x open windows) however long the run: per channel the sampler keeps a
running trapezoid integral of power (J), the last reading, the energy counter's
:class:`~joulebound.energy.counter.CounterTrack`, and per *watched* window the peak power and
sample count. Samples are handed to a sink (the SQLite store) in batches, about every second.
Timestamps are the meter's clock (s, epoch-aligned, monotonic).

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
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .base import Backend
from .counter import CounterTrack, EdgeValue

#: the failure counts of a window that began with none anywhere (read-only, shared)
_NO_FAILURES: Any = MappingProxyType({})


@dataclass(slots=True)
class Sample:
    """One reading of one channel: time ``t`` (s), ``power_w`` (W), cumulative ``energy_j`` (J)."""

    t: float
    channel: int
    power_w: float | None
    energy_j: float | None


@dataclass(slots=True)
class WindowStats:
    """Running power statistics of one open window: peak (W) and sample count per channel."""

    peak_w: dict[int, float] = field(default_factory=dict)
    n: dict[int, int] = field(default_factory=dict)

    def update(self, s: Sample) -> None:
        self.n[s.channel] = self.n.get(s.channel, 0) + 1
        if s.power_w is not None and s.power_w > self.peak_w.get(s.channel, float("-inf")):
            self.peak_w[s.channel] = s.power_w


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
        self._watch: dict[str, WindowStats] = {}
        #: failed reads per channel
        self.failures: Counter[int] = Counter()
        #: sum of :attr:`failures` (one integer a window edge can compare)
        self.failures_total = 0
        self._rated = False      # every counter track knows its rate (then it stays so)
        self._power_version = 0  # bumped by every change of the power state
        self._power_snapshot: tuple[int, Any] = (-1, None)   # (version, _power_state())
        self._messages: Counter[str] = Counter()
        #: samples the sink could not take, and the last reason
        self.samples_lost = 0
        self.sink_error: str | None = None
        self._pending: list[Sample] = []
        self._lock = threading.Lock()
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
                if what == "power":
                    self._failed_since.add(channel)
                    self._power_version += 1
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

    def _add_locked(self, samples: list[Sample]) -> None:
        """:meth:`add` with the lock held."""
        for smp in samples:
            ch = smp.channel
            if smp.power_w is not None:
                self._fold_power(smp)
            track = self.tracks.get(ch)
            if track is not None:
                track.observe(smp.t, smp.energy_j, smp.power_w,
                              integral_j=self.integral_j.get(ch, 0.0)
                              if ch in self._last else None)
            for w in self._watch.values():
                w.update(smp)
        if self.sink is not None:
            self._pending.extend(samples)

    def _fold_power(self, smp: Sample) -> None:
        """A power reading into the channel's trapezoid integral and gap accounting (under the
        lock)."""
        ch = smp.channel
        self._power_version += 1
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

    def _power_state(self) -> tuple[dict[int, float], dict[int, float], dict[int, float],
                                    dict[int, tuple[float, float]], set[int]]:
        """A copy of what power edges need, as it is now (under the lock): per channel the
        integral (J), gap time (s) and energy (J), the last reading ``(t, W)``, and the channels
        whose read failed since. Copied again only after the state changed (a copy is never
        modified, so windows opened in between share it)."""
        version, state = self._power_snapshot
        if version != self._power_version:
            state = (self.integral_j.copy(), self.gap_time_s.copy(), self.gap_energy_j.copy(),
                     self._last.copy(), self._failed_since.copy())
            self._power_snapshot = (self._power_version, state)
        return state

    def power_edge_from(self, state: tuple[dict[int, float], dict[int, float], dict[int, float],
                                           dict[int, tuple[float, float]], set[int]] | None,
                        channel: int, failures: int, t: float) -> PowerEdge:
        """The power edge of ``channel`` at ``t`` from a :meth:`_power_state` taken then
        (``None``: the state now, under the lock); ``failures``: its failed reads then."""
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

    def _counter_edges_locked(self, samples: list[Sample],
                              t: float) -> dict[int, EdgeValue | None]:
        out: dict[int, EdgeValue | None] = {}
        tracks = self.tracks
        last = self._last
        integral = self.integral_j
        watched = list(self._watch.values())
        for smp in samples:
            ch = smp.channel
            if smp.power_w is not None:
                self._fold_power(smp)
            track = tracks.get(ch)
            value = None
            if track is not None:
                integ = integral.get(ch, 0.0) if ch in last else None
                if smp.energy_j is not None:   # observe, then the estimate at t
                    value = track.observe_edge(smp.t, smp.energy_j, smp.power_w, integ, t)
                else:
                    track.observe(smp.t, None, smp.power_w, integral_j=integ)
            out[ch] = value
            for w in watched:
                w.update(smp)
        if self.sink is not None:
            self._pending.extend(samples)
        return out

    def begin_edge(self, name: str, counter: list[Sample], power: list[Sample], t: float,
                   channels: list[int]) -> tuple[dict[int, EdgeValue | None],
                                                 dict[int, PowerEdge], dict[int, int]]:
        """A window's start at ``t``, under one lock: the counter readings folded in with their
        estimates at ``t`` (:meth:`_counter_edges_locked`), the power readings folded in (:meth:`add`),
        then the window watched (:meth:`watch`); returns the counter estimates, the power edges
        of ``channels`` (:meth:`power_edge`) and their failure counts."""
        with self._lock:
            edges = self._counter_edges_locked(counter, t)
            if power:
                self._add_locked(power)
            self._watch[name] = WindowStats()
            pe = {i: self._power_edge(i, t) for i in channels}
            failures = self.failures
            fails = {i: failures.get(i, 0) for i in channels}
        return edges, pe, fails

    def end_edge(self, name: str, counter: list[Sample], power: list[Sample],
                 t: float) -> tuple[dict[int, EdgeValue | None], WindowStats]:
        """A window's end at ``t``, under one lock: the readings folded in (counted in the
        window), the counter estimates at ``t``, and the window's statistics (watched since
        :meth:`begin_edge`)."""
        with self._lock:
            edges = self._counter_edges_locked(counter, t)
            if power:
                self._add_locked(power)
            return edges, self._watch.pop(name, None) or WindowStats()

    # -- the window-edge fast path ------------------------------------------------------------
    def _edges_fast(self, channels: list[int], energies: list[float], t: float
                    ) -> list[tuple[float, float, bool, int, float, float]] | None:
        """Counter readings at ``t`` (no power reading, none failed) folded in, with their
        estimates at ``t`` as :class:`~joulebound.energy.counter.EdgeValue` field tuples — what
        :meth:`_counter_edges_locked` does with such samples, without building them — or
        ``None`` (nothing folded in) while some track still needs a power reading to know its
        rate. Under the lock."""
        tracks = self.tracks
        if not self._rated:
            if not all(tracks[i].has_rate for i in channels):
                return None
            self._rated = True
        last = self._last
        integral = self.integral_j
        out = []
        for i, e in zip(channels, energies, strict=True):
            out.append(tracks[i].observe_edge_values(
                t, e, None, integral.get(i, 0.0) if i in last else None, t))
        if self._watch:
            for w in self._watch.values():
                n = w.n
                for i in channels:
                    n[i] = n.get(i, 0) + 1
        if self.sink is not None:
            self._pending.extend([Sample(t, i, None, e)
                                  for i, e in zip(channels, energies, strict=True)])
        return out

    def begin_edge_fast(self, name: str, channels: list[int], energies: list[float], t: float
                        ) -> tuple[list[tuple[float, float, bool, int, float, float]],
                                   Any, Any, int] | None:
        """:meth:`begin_edge` for counter channels whose readings all succeeded: the counter
        estimates at ``t``; the power state (``None`` when no channel ever had a power reading:
        then every power edge is empty) for :meth:`power_edge_from`; the failure counts and
        their total. ``None`` (nothing changed) while a track needs a power reading."""
        with self._lock:
            edges = self._edges_fast(channels, energies, t)
            if edges is None:
                return None
            self._watch[name] = WindowStats()
            state = self._power_state() if self._last else None
            total = self.failures_total
            fails = {i: self.failures.get(i, 0) for i in channels} if total else _NO_FAILURES
        return edges, state, fails, total

    def end_edge_fast(self, name: str, channels: list[int], energies: list[float], t: float
                      ) -> tuple[list[tuple[float, float, bool, int, float, float]],
                                 WindowStats] | None:
        """:meth:`end_edge` for counter channels whose readings all succeeded (see
        :meth:`begin_edge_fast`); ``None`` (nothing changed) while a track needs a power
        reading."""
        with self._lock:
            edges = self._edges_fast(channels, energies, t)
            if edges is None:
                return None
            return edges, self._watch.pop(name, None) or WindowStats()

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
