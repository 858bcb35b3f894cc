"""Background power sampler: a daemon thread that reads every channel's power every ``interval_s``.

Memory stays O(channels x open windows) however long the run: per channel the sampler keeps a
running trapezoid integral of power (J) and the last reading, and per *watched* window the peak
power and sample count. Samples are handed to a sink (the SQLite store) in batches, about every
second. Timestamps are the meter's clock (s, epoch-aligned, monotonic).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .base import Backend


@dataclass(frozen=True)
class Sample:
    """One reading of one channel: time ``t`` (s), ``power_w`` (W), cumulative ``energy_j`` (J)."""

    t: float
    channel: int
    power_w: float | None
    energy_j: float | None


@dataclass
class WindowStats:
    """Running power statistics of one open window: peak (W) and sample count per channel."""

    peak_w: dict[int, float] = field(default_factory=dict)
    n: dict[int, int] = field(default_factory=dict)

    def update(self, s: Sample) -> None:
        self.n[s.channel] = self.n.get(s.channel, 0) + 1
        if s.power_w is not None and s.power_w > self.peak_w.get(s.channel, float("-inf")):
            self.peak_w[s.channel] = s.power_w


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
        self._last: dict[int, tuple[float, float]] = {}
        self._watch: dict[str, WindowStats] = {}
        self.errors: list[str] = []
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
            self.sample_now()
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
                self._error(exc)
            if self.backend.has_counter(i):
                try:
                    with self.backend.lock:
                        e = self.backend.read_energy_j(i, t)
                    ok = True
                except Exception as exc:
                    self._error(exc)
            if ok:
                out.append(Sample(t, i, p, e))
        self.add(out)
        self.n_reads += 1
        return out

    def _error(self, exc: Exception) -> None:
        if len(self.errors) < 20:
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def add(self, samples: list[Sample]) -> None:
        """Fold readings into the running integrals and the watched windows' statistics."""
        with self._lock:
            for smp in samples:
                if smp.power_w is not None:
                    last = self._last.get(smp.channel)
                    if last is not None and smp.t > last[0]:
                        self.integral_j[smp.channel] = self.integral_j.get(smp.channel, 0.0) + \
                            0.5 * (last[1] + smp.power_w) * (smp.t - last[0])
                    if last is None or smp.t >= last[0]:
                        self._last[smp.channel] = (smp.t, smp.power_w)
                for w in self._watch.values():
                    w.update(smp)
            if self.sink is not None:
                self._pending.extend(samples)

    def integral(self, channel: int) -> float:
        """Trapezoid integral of ``channel``'s power since the first reading (J)."""
        with self._lock:
            return self.integral_j.get(channel, 0.0)

    def watch(self, name: str) -> WindowStats:
        """Start collecting peak power / sample counts for window ``name``."""
        with self._lock:
            self._watch[name] = st = WindowStats()
            return st

    def unwatch(self, name: str) -> WindowStats:
        with self._lock:
            return self._watch.pop(name, WindowStats())

    def flush(self) -> None:
        """Hand pending samples to the sink."""
        if self.sink is None:
            return
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            try:
                self.sink(batch)
            except Exception as exc:  # a sink failure must not kill the thread
                if len(self.errors) < 20:
                    self.errors.append(f"sink: {type(exc).__name__}: {exc}")
