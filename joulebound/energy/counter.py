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
A window's uncertainty (:func:`window_uncertainty`) is the sum over its two edges — or, when no
counter step fell between them, the rate times the window's duration (both edges then share the
same extrapolation, so only its slope is in doubt). It is of the order of the window's own energy
for a window much shorter than the sensor period (the counter cannot resolve it) and vanishes
relative to long windows.

Pure state, no I/O: the sampler feeds it under its lock.
"""

from __future__ import annotations

from collections import deque
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


def window_uncertainty(v0: EdgeValue, v1: EdgeValue, duration_s: float) -> float:
    """Error bound (J) of the energy ``v1 - v0`` of a window lasting ``duration_s`` (s)."""
    if v0.segment == v1.segment:
        return max(v0.rate_w, v1.rate_w) * max(duration_s, 0.0) + v0.clamp_j + v1.clamp_j
    return v0.uncertainty_j + v1.uncertainty_j


class CounterTrack:
    """Readings of one stepping counter -> edge values (see the module docs).

    Args:
        period_s: the sensor update period (s); ``None`` or 0: a continuous counter (edges are the
            readings as they are, uncertainty 0).
        steps_for_rate: how many recent steps the rate is measured over.
    """

    def __init__(self, period_s: float | None, steps_for_rate: int = 3) -> None:
        self.period = float(period_s) if period_s else 0.0
        self.e_cur: float | None = None     # latest counter value (J)
        self.t_step = 0.0                   # estimated instant of the latest step (s)
        self.half_bracket = 0.0             # half the latest step's bracket (s)
        self.t_read: float | None = None    # time of the latest reading (s)
        self.power_w: float | None = None   # latest power reading (W)
        self.integral_at_read: float | None = None   # power integral at the latest reading (J)
        self._steps: deque[tuple[float, float]] = deque(maxlen=max(2, steps_for_rate))
        self._v_last: float | None = None
        self.n_steps = 0

    @property
    def has_rate(self) -> bool:
        """True once the rate is known (two steps, or a power reading)."""
        return len(self._steps) >= 2 or self.power_w is not None

    def observe(self, t: float, energy_j: float | None, power_w: float | None = None,
                integral_j: float | None = None) -> None:
        """One reading at ``t`` (s): the counter (J) and/or a power value (W)."""
        if power_w is not None:
            self.power_w = float(power_w)
        if energy_j is None:
            return
        if self.t_read is not None and t < self.t_read:
            t = self.t_read                 # reads may be stamped slightly out of order
        e = float(energy_j)
        if self.e_cur is None:
            self.e_cur = e
            self.half_bracket = self.period / 2
            self.t_step = t - self.half_bracket
        elif e > self.e_cur:
            bracket = t - self.t_read if self.t_read is not None else self.period
            if self.period:
                bracket = min(bracket, self.period)
            self.half_bracket = bracket / 2
            self.t_step = t - self.half_bracket
            self.e_cur = e
            self._steps.append((self.t_step, e))
            self.n_steps += 1
        self.t_read = t
        if integral_j is not None:
            self.integral_at_read = integral_j

    def observe_edge(self, t: float, energy_j: float, power_w: float | None,
                     integral_j: float | None, t_edge: float) -> EdgeValue:
        """:meth:`observe` of a counter reading (not ``None``) at ``t`` then :meth:`edge` at
        ``t_edge``, in one call: the meter's window-edge path (same arithmetic, fewer look-ups)."""
        if power_w is not None:
            self.power_w = float(power_w)
        t_read = self.t_read
        if t_read is not None and t < t_read:
            t = t_read
        e = float(energy_j)
        period = self.period
        e_cur = self.e_cur
        if e_cur is None:
            self.e_cur = e_cur = e
            self.half_bracket = period / 2
            self.t_step = t - self.half_bracket
        elif e > e_cur:
            bracket = t - t_read if t_read is not None else period
            if period:
                bracket = min(bracket, period)
            self.half_bracket = bracket / 2
            self.t_step = t - self.half_bracket
            self.e_cur = e_cur = e
            self._steps.append((self.t_step, e))
            self.n_steps += 1
        self.t_read = t
        if integral_j is not None:
            self.integral_at_read = integral_j
        v_last = self._v_last
        if not period:
            v = e_cur if v_last is None else max(v_last, e_cur)
            self._v_last = v
            return EdgeValue(v, v - e_cur, v != e_cur, self.n_steps, 0.0, v - e_cur)
        steps = self._steps
        r = 0.0
        if len(steps) >= 2:
            (t0, e0), (t1, e1) = steps[0], steps[-1]
            if t1 > t0:
                r = max((e1 - e0) / (t1 - t0), 0.0)
            else:
                r = self.power_w or 0.0
        else:
            r = self.power_w or 0.0
        span = t_edge - self.t_step
        if span < 0.0:
            span = 0.0
        elif span > period:
            span = period
        est = e_cur + r * span
        v = est if v_last is None or est >= v_last else v_last
        self._v_last = v
        p = self.power_w or 0.0
        rho = r if r >= p else p
        u = rho * (self.half_bracket + span) + (v - est)
        d = v - e_cur
        return EdgeValue(v, u, d > 1e-12 or d < -1e-12, self.n_steps, rho, v - est)

    def rate_w(self) -> float:
        """Recent rate of the counter (W): slope over the last steps, else the power reading."""
        if len(self._steps) >= 2:
            (t0, e0), (t1, e1) = self._steps[0], self._steps[-1]
            if t1 > t0:
                return max((e1 - e0) / (t1 - t0), 0.0)
        return self.power_w or 0.0

    def edge(self, t: float) -> EdgeValue | None:
        """The estimate at ``t`` (s), after the reading at ``t`` was observed; ``None`` before
        any reading. Advances the non-decreasing clamp."""
        if self.e_cur is None:
            return None
        if not self.period:
            v = self.e_cur if self._v_last is None else max(self._v_last, self.e_cur)
            self._v_last = v
            return EdgeValue(v, v - self.e_cur, v != self.e_cur, self.n_steps, 0.0,
                             v - self.e_cur)
        r = self.rate_w()
        span = min(max(t - self.t_step, 0.0), self.period)
        est = self.e_cur + r * span
        v = est if self._v_last is None else max(self._v_last, est)
        self._v_last = v
        rho = max(r, self.power_w or 0.0)
        u = rho * (self.half_bracket + span) + (v - est)
        return EdgeValue(v, u, abs(v - self.e_cur) > 1e-12, self.n_steps, rho, v - est)
