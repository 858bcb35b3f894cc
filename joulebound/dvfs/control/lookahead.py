"""Clock-switch placement: the config to command at each op so switches land on time.

Pure functions over a plan's per-kernel choice and modeled kernel times, shared by the eager
controller (:class:`~joulebound.dvfs.control.controller.Controller`) and the timed schedule for
graph replays (:class:`~joulebound.dvfs.control.hooks.PeriodicSchedule`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def lookahead_commands(choice: Sequence[int], kernel_time_s: Sequence[float],
                       switch_latency_s: float) -> np.ndarray:
    """Config index to command when op ``j`` is dispatched, for a cyclic iteration.

    ``command[j] = choice[s]`` where ``s`` is the first op (cyclically, in later iterations too)
    that starts at least ``switch_latency_s`` after op ``j`` starts, i.e. the first op that a
    switch issued at ``j`` can still reach. With zero latency this is the plan itself. Switches
    are serial, so a commanded phase shorter than the latency is skipped over (it keeps the
    clocks before it): such kernels cannot get their own clocks.

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
    reps = 3 + (int(np.ceil(lat / period)) if period > 0 else 1)
    starts = np.concatenate([[0.0], np.cumsum(np.tile(t, reps))])[:-1]
    s = np.searchsorted(starts, starts[:k] + lat - 1e-15, side="left")
    s = np.minimum(s, len(starts) - 1)
    cmd = choice[s % k]
    return _drop_superseded(cmd, starts, lat)


def _drop_superseded(cmd: np.ndarray, starts: np.ndarray, lat: float) -> np.ndarray:
    """Remove switches whose successor is due before they complete.

    Clock switches are serial (one NVML call at a time, ``lat`` each): a switch issued less than
    ``lat`` after the previous one would queue behind it and land late. So a change is kept only
    when the next change comes at least ``lat`` later; otherwise the short phase keeps the
    previous clocks. Walks three iterations and returns the middle (steady-state) one."""
    k = len(cmd)
    n = 3 * k
    c3 = np.tile(cmd, 3)
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
            c3[i:i2] = cur          # superseded before it could take effect
        else:
            cur = c3[i]
        i = i2
    return c3[k:2 * k].copy()
