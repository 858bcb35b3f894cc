"""Background power sampler: a daemon thread that reads every channel's power every ``interval_s``.

Samples are kept in memory (trimmed to what open windows still need) and optionally handed to a
sink (the SQLite store) in batches. Timestamps are the meter's clock (s, epoch-aligned, monotonic).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from .base import Backend


@dataclass(frozen=True)
class Sample:
    """One reading of one channel: time ``t`` (s), ``power_w`` (W), cumulative ``energy_j`` (J)."""

    t: float
    channel: int
    power_w: float | None
    energy_j: float | None


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
        self.samples: list[Sample] = []
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
            try:
                p = self.backend.read_power_w(i, t)
                e = self.backend.read_energy_j(i, t) if self.backend.has_counter(i) else None
            except Exception as exc:  # a sensor hiccup must not kill the thread
                if len(self.errors) < 20:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            out.append(Sample(t, i, p, e))
        self.add(out)
        self.n_reads += 1
        return out

    def add(self, samples: list[Sample]) -> None:
        with self._lock:
            self.samples.extend(samples)
            if self.sink is not None:
                self._pending.extend(samples)

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

    def window(self, channel: int, start: float, end: float) -> list[Sample]:
        """Samples of ``channel`` with ``start <= t <= end``, in time order."""
        with self._lock:
            return [s for s in self.samples if s.channel == channel and start <= s.t <= end]

    def trim(self, before: float) -> None:
        """Drop samples older than ``before`` (s) — nothing open still needs them."""
        with self._lock:
            k = 0
            while k < len(self.samples) and self.samples[k].t < before:
                k += 1
            if k:
                del self.samples[:k]
