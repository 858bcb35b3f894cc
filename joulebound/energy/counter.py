"""Apportion a stepping energy counter over time, so short windows add up.

A GPU energy counter (NVML ``nvmlDeviceGetTotalEnergyConsumption``) does not move continuously: it
steps once per sensor update (about every 100 ms on A100/H100, the catalog's ``sensor_period_s``).
Read at a window's edges, a window shorter than the period either catches a whole step or none:
500 windows of 20 ms at a constant 100 W each got 0 J or 10 J — and replacing the zeros with
power x duration made them sum to 1,800 J for 1,000 J true.

:class:`CounterTrack` turns the readings of one counter into a continuous, non-decreasing estimate
``E(t)`` evaluated at each window edge:

* every reading (the meter's edge reads and the sampler's) is an *observation*; a reading that
  differs from the previous one is a *step*, which happened at an unknown instant between the
  previous reading and this one (its *bracket*). The step is placed at the bracket's middle (the
  first reading of all, whose bracket is unknown, half a sensor period before it);
* between steps the counter is extrapolated at the recent rate (the slope over the last steps, or a
  power reading before there are two steps), for at most one sensor period;
* the estimate never decreases (an overshoot is absorbed by the following windows).

So contiguous windows share their edge values and **telescope**: their energies sum to the
enclosing window's (the gaps between consecutive edges, microseconds, aside), and each short window
gets its time share of the steps instead of 0 or a whole step.

Each edge value comes with an error bound ``uncertainty_j``: the rate times (half the step's
bracket + the time extrapolated), i.e. what the estimate can be off if the power between two counter
updates is anywhere between 0 and twice the recent rate, plus anything the monotone clamp added.
A window's uncertainty (:func:`uncertainty_of`) is the sum over its two edges — or, when no
counter step fell between them, the rate times the window's duration (both edges then share the
same extrapolation, so only its slope is in doubt). It is of the order of the window's own energy
for a window much shorter than the sensor period (the counter cannot resolve it) and vanishes
relative to long windows.

Pure state, no I/O: the sampler feeds it under its lock. An edge is computed as a plain tuple of
its terms (:data:`Edge`: what the estimate was made of), from which the :class:`EdgeValue` fields
and the bounds are derived only where they are read (:func:`edge_value`, :func:`uncertainty_of`):
the energy meter computes one per channel at every window edge, and reads most windows' totals only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class EdgeValue:
    """The counter's estimated cumulative energy at a window edge.

    Attributes:
        energy_j: estimated energy at the edge (J, same origin as the counter).
        uncertainty_j: bound of its error (J).
        interpolated: True when it differs from the counter reading at that time.
        segment: how many counter steps had been seen (two edges with the same segment have no
            step between them).
        rate_w: the rate bound used (W).
        clamp_j: what the non-decreasing clamp added (J).
    """

    energy_j: float
    uncertainty_j: float
    interpolated: bool
    segment: int = 0
    rate_w: float = 0.0
    clamp_j: float = 0.0


#: a counter's estimate at an edge, as :func:`observe_counters` computes it: ``(value,
#: estimate before the clamp, counter value, time span, segment, rate bound)`` — the value (J),
#: the extrapolated estimate before the non-decreasing clamp (J), the latest counter reading (J),
#: half the step's bracket plus the time extrapolated (s), the steps seen, and the rate bound (W)
Edge = tuple[float, float, float, float, int, float]


def edge_value(edge: Edge) -> EdgeValue:
    """The :class:`EdgeValue` of an :data:`Edge`: the bound is the rate bound times the span
    plus the clamp; interpolated when the value differs from the counter by more than 1e-12 J."""
    v, est, e_cur, span, segment, rho = edge
    clamp = v - est
    return EdgeValue(v, rho * span + clamp, abs(v - e_cur) > 1e-12, segment, rho, clamp)


def edge_uncertainty(edge: Edge) -> float:
    """The error bound (J) of an :data:`Edge`'s value (:attr:`EdgeValue.uncertainty_j`)."""
    return edge[5] * edge[3] + (edge[0] - edge[1])


def uncertainty_of(e0: Edge, e1: Edge, duration_s: float) -> float:
    """Error bound (J) of the energy ``e1[0] - e0[0]`` of a window lasting ``duration_s`` (s)
    between two :data:`Edge` s: with no counter step between them (the same segment), the larger
    rate bound times the duration plus both clamps; else the sum of the edges' bounds."""
    if e0[4] == e1[4]:
        return ((e0[5] if e0[5] >= e1[5] else e1[5]) * max(duration_s, 0.0) + (e0[0] - e0[1])
                + (e1[0] - e1[1]))
    return e0[5] * e0[3] + (e0[0] - e0[1]) + (e1[5] * e1[3] + (e1[0] - e1[1]))  # both bounds


class CounterTrack:
    """Readings of one stepping counter -> edge values (see the module docs).

    Args:
        period_s: the sensor update period (s); ``None`` or 0: a continuous counter (edges are the
            readings as they are, uncertainty 0).
        steps_for_rate: how many recent steps the rate is measured over.
    """

    __slots__ = ("period", "e_cur", "t_step", "half_bracket", "t_read", "power_w",
                 "integral_at_read", "_steps", "_v_last", "n_steps", "_rate", "_rho", "_p")

    def __init__(self, period_s: float | None, steps_for_rate: int = 3) -> None:
        self.period = float(period_s) if period_s else 0.0
        self.e_cur: float | None = None     # latest counter value (J)
        self.t_step = 0.0                   # estimated instant of the latest step (s)
        self.half_bracket = 0.0             # half the latest step's bracket (s)
        self.t_read: float | None = None    # time of the latest reading (s)
        self.power_w: float | None = None   # latest power reading (W)
        self.integral_at_read: float | None = None   # power integral at the latest reading (J)
        self._steps: deque[tuple[float, float]] = deque(maxlen=max(2, steps_for_rate))
        self._v_last = float("-inf")        # the last edge value (the clamp's floor, J)
        self.n_steps = 0
        self._rate = 0.0                    # rate_w(), kept current (W)
        self._rho = 0.0                     # max(rate, power reading): the error-bound rate (W)
        self._p = 0.0                       # the power reading, 0 before one (W)

    @property
    def has_rate(self) -> bool:
        """True once the rate is known (two steps, or a power reading)."""
        return len(self._steps) >= 2 or self.power_w is not None

    def _set_power(self, power_w: float) -> None:
        """A power reading (W): the rate until two steps are seen, and the error-bound rate."""
        p = self.power_w = self._p = float(power_w)
        steps = self._steps     # the slope over the recent steps, once they span some time
        r = self._rate if len(steps) >= 2 and steps[-1][0] > steps[0][0] else p
        self._rate = r
        self._rho = r if r >= p else p

    def observe(self, t: float, energy_j: float | None, power_w: float | None = None,
                integral_j: float | None = None) -> None:
        """One reading at ``t`` (s): the counter (J) and/or a power value (W); ``integral_j``:
        the power integral then (J)."""
        if energy_j is None:
            if power_w is not None:
                self._set_power(power_w)
            return
        v_last = self._v_last        # a plain observation does not advance the edge clamp
        self.observe_edge_raw(t, energy_j, power_w, integral_j, t)
        self._v_last = v_last

    def observe_edge(self, t: float, energy_j: float, power_w: float | None,
                     integral_j: float | None, t_edge: float) -> EdgeValue:
        """:meth:`observe` of a counter reading (not ``None``) at ``t`` then :meth:`edge` at
        ``t_edge``, in one call."""
        return edge_value(self.observe_edge_raw(t, energy_j, power_w, integral_j, t_edge))

    def observe_edge_raw(self, t: float, energy_j: float, power_w: float | None,
                         integral_j: float | None, t_edge: float) -> Edge:
        """:meth:`observe_edge` as an :data:`Edge` (:func:`observe_counters` of this one
        track, after the power reading if any)."""
        if power_w is not None:
            self._set_power(power_w)
        out: list[Edge] = []
        observe_counters((self,), t, (float(energy_j),), t_edge, out)
        if integral_j is not None:
            self.integral_at_read = integral_j
        return out[0]

    def rate_w(self) -> float:
        """Recent rate of the counter (W): slope over the last steps, else the power reading."""
        return self._rate

    def edge(self, t: float) -> EdgeValue | None:
        """The estimate at ``t`` (s), after the reading at ``t`` was observed; ``None`` before
        any reading. Advances the non-decreasing clamp."""
        if self.e_cur is None:
            return None
        t_read: float = self.t_read  # type: ignore[assignment]
        return edge_value(self.observe_edge_raw(t_read, self.e_cur, None, None, t))


def observe_counters(tracks: Sequence[CounterTrack], t: float, energies: Sequence[float],
                     t_edge: float, out: list[Edge]) -> float:
    """One counter reading per track at ``t`` (s), ``energies[k]`` (J, a float) for
    ``tracks[k]`` (as many as tracks: the caller's invariant, not checked here), and each track's estimate at ``t_edge`` (s) as an :data:`Edge`, appended to
    ``out`` in track order. Returns the sum of the estimates' values (J): what a window edge
    over these tracks adds to the total (the window's energy is the difference of its two edges'
    sums, the values being non-decreasing).

    The one implementation of a reading and of the estimate (:meth:`CounterTrack.observe`,
    :meth:`~CounterTrack.observe_edge_raw` and :meth:`~CounterTrack.edge` use it), written out in
    one loop over the tracks: the energy meter calls it once per window edge for all its
    channels.
    (The rate is the slope over the recent steps: with one step, ``_steps[0]`` is that step,
    no slope, and the power reading is the rate.)"""
    total = 0.0
    k = 0
    for tr in tracks:       # (indexing: cheaper than a zip, which costs ~0.3 us to make)
        e = energies[k]
        k += 1
        e_cur = tr.e_cur
        period = tr.period
        if e_cur is None:                       # the first reading: its step half a period before
            tt = t
            tr.half_bracket = half = period / 2
            tr.t_step = ts = tt - half
            tr.e_cur = e_cur = e
            n_steps, rate, rho = tr.n_steps, tr._rate, tr._rho
        else:
            t_read = tr.t_read
            tt = t if t >= t_read else t_read   # reads may be stamped slightly out of order
            if e > e_cur:                       # a step, placed in the middle of its bracket
                bracket = tt - t_read
                if bracket > period and period:
                    bracket = period
                half = bracket / 2
                ts = tt - half
                steps = tr._steps
                steps.append((ts, e))
                t0, e0 = steps[0]
                p = tr._p
                if ts > t0:                     # steps only go up: the slope is > 0
                    rate = (e - e0) / (ts - t0)
                else:                           # one step, or all at one instant: no slope
                    rate = p
                rho = rate if rate >= p else p
                e_cur = tr.e_cur = e
                tr.half_bracket = half
                tr.t_step = ts
                n_steps = tr.n_steps = tr.n_steps + 1
                tr._rate = rate
                tr._rho = rho
            else:
                ts = tr.t_step
                half = tr.half_bracket
                n_steps = tr.n_steps
                rate = tr._rate
                rho = tr._rho
        tr.t_read = tt
        if period:
            span = t_edge - ts
            if span < 0.0:
                span = 0.0
            elif span > period:
                span = period
            est = e_cur + rate * span
            v = tr._v_last
            if est >= v:
                v = tr._v_last = est
            out.append((v, est, e_cur, half + span, n_steps, rho))
        else:                                   # a continuous counter: its readings as they are
            v = tr._v_last
            if e_cur >= v:
                v = tr._v_last = e_cur
            out.append((v, e_cur, e_cur, 0.0, n_steps, 0.0))
        total += v
    return total
