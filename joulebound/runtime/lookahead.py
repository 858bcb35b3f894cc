"""Clock-switch placement: the config to command at each op so switches land on time.

Pure functions over a plan's per-kernel choice and modeled kernel times, shared by the eager
controller (:class:`~joulebound.runtime.controller.Controller`) and the timed schedule for
graph replays (:class:`~joulebound.runtime.hooks.PeriodicSchedule`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: iterations of switch latency spanned exactly; a longer latency is reduced by whole iterations
_MAX_SPAN = 8


def lookahead_commands(choice: Sequence[int], kernel_time_s: Sequence[float],
                       switch_latency_s: float) -> np.ndarray:
    """Config index to command when op ``j`` is dispatched, for a cyclic iteration.

    The switch for a phase that starts at op ``s`` is issued at the last op that starts at least
    ``switch_latency_s`` before ``s`` (cyclically, in the iteration before for the first phase),
    so it lands before the phase starts; the ops between the landing and ``s`` (less than an op
    dispatch apart) already run at the new clocks. So ``command[j] = choice[m]`` where ``m`` is
    the last op that starts less than ``switch_latency_s`` after op ``j + 1`` starts: the last
    op whose phase must be switched to no later than at ``j``. (Commanding instead the first op
    a switch issued at ``j`` can reach makes every phase start late, and never commands a phase
    whose first op is reachable from no dispatch — a one-op phase after an op shorter than the
    gap between two dispatches.) With zero latency this is the plan itself.

    Switches are serial. A planned phase shorter than the latency is skipped over when the
    switch out of it is due less than the latency after the switch into it (it keeps the clocks
    before it): such kernels cannot get their own clocks. A phase that lasts the latency always
    gets them: its switch is issued at least the latency before it starts and the next one no
    earlier than its start (should float rounding of the start times make the two a hair closer,
    the next switch waits for the first to land instead of dropping it).

    Args:
        choice: config index per kernel (K,).
        kernel_time_s: modeled time per kernel at its planned config (s), (K,).
        switch_latency_s: clock-switch latency (s).
    """
    choice = np.asarray(choice, dtype=np.int64)
    t = np.asarray(kernel_time_s, dtype=float)
    k = len(choice)
    if k == 0:
        return choice.copy()
    if t.shape != (k,) or np.any(~np.isfinite(t)) or np.any(t < 0):
        raise ValueError("kernel_time_s must be finite, >= 0, one per kernel")
    lat = float(switch_latency_s)
    if lat <= 0:
        return choice.copy()
    period = float(t.sum())
    # where a switch lands, cyclically: whole iterations of latency do not change which op it
    # reaches, so a latency of many iterations (a plan for a far slower GPU, a hand-edited
    # file) is taken modulo them instead of tiling the timeline once per iteration it spans
    reach = lat
    if period > 0 and lat > _MAX_SPAN * period:
        reach = math.fmod(lat, period) + (_MAX_SPAN - 1) * period   # fmod is exact
    reps = 3 + (int(np.ceil(reach / period)) if period > 0 else 1)
    starts = np.concatenate([[0.0], np.cumsum(np.tile(t, reps))])[:-1]
    # last op starting before (start of op j + 1) + L: a switch issued at j + 1 would land after
    # it started, so its phase is switched to at j at the latest
    s = np.searchsorted(starts, starts[1:k + 1] + reach - 1e-15, side="left") - 1
    cmd = choice[s % k]
    # duration of the planned phase (cyclic: the last one joins the first when they match) that
    # each command is for
    cuts = np.flatnonzero(np.diff(choice)) + 1
    phase = np.zeros(k, np.int64)
    phase[cuts] = 1
    phase = np.cumsum(phase)
    dur = np.bincount(phase, weights=t)
    if len(cuts) and choice[0] == choice[-1]:
        dur[0] = dur[-1] = dur[0] + dur[-1]
        phase[phase == phase[-1]] = 0
    return _serialize(cmd, dur[phase[s % k]], starts, lat)


def _serialize(cmd: np.ndarray, phase_s: np.ndarray, starts: np.ndarray,
               lat: float) -> np.ndarray:
    """Commands ``cmd`` made serial: a switch is issued only once the previous one has landed.

    Clock switches are serial (one NVML call at a time, ``lat`` each): a switch issued less than
    ``lat`` after the previous one would queue behind it and land late. When a commanded run is
    shorter than ``lat``: if its planned phase (``phase_s``, s, per command) is shorter too, the
    run is dropped (the short phase keeps the previous clocks); otherwise (with the issue rule of
    :func:`lookahead_commands` only by float rounding of ``starts``) it is kept and the next
    switch waits until it has landed. Walks three iterations and returns the middle
    (steady-state) one."""
    k = len(cmd)
    n = 3 * k
    c3 = np.tile(cmd, 3)
    p3 = np.tile(phase_s, 3)
    cur = c3[-1]
    i = 0
    while i < n:
        if c3[i] == cur:
            i += 1
            continue
        i2 = i + 1
        while i2 < n and c3[i2] == c3[i]:
            i2 += 1
        if i2 < n and starts[i2] < starts[i] + lat - 1e-15:
            if p3[i] < lat - 1e-15:
                c3[i:i2] = cur      # superseded before it could take effect
                i = i2
                continue
            # the next switch waits for this one to land
            i3 = int(np.searchsorted(starts, starts[i] + lat - 1e-15, side="left"))
            c3[i2:min(i3, n)] = c3[i]
            i2 = i3
        cur = c3[i]
        i = i2
    return c3[k:2 * k].copy()
