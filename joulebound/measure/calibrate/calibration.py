"""``joulebound calibrate``: measure a kernel-level characterization on the user's own GPU.

:func:`calibrate` runs the whole procedure on a backend (:mod:`.backends`):

1. **Replay set** — the trace's distinct ops, rebuilt on the device (:mod:`.replay`); the ones
   that cannot be replayed are listed and keep the model's figures.
2. **Design** — per kernel the clock pairs to measure (:mod:`.design`): ``clocks="auto"`` the
   default clocks only (read-only: no clock is ever changed), ``"3"`` up to three pairs chosen
   from the model, ``"full"`` every supported pair the planner uses.
3. **Budget** — ``budget_s`` bounds the device time; kernels are measured in order of their share
   of the iteration's modeled time, and those that do not fit keep the model (listed). A budget
   too small for one measurement is an error before anything runs.
4. **Measure** — one clock pair at a time (:class:`~.clocks.ClockSession`: validated against the
   card's table, defaults restored on every way out), every kernel that needs it
   (:func:`~.measure.measure_cell`), with a progress callback.
5. **Fit and write** — each measured kernel's compute/memory work and activity are fitted to its
   cells (:func:`~joulebound.gpumodel.fit_measured.fit_trace_work`), every cell is modeled from the
   fit, measured cells replace modeled ones (``measured = True``); the rest are
   *modeled-from-fit* (calibrated kernels) or *modeled* (kernels not measured).
6. **Report** — the model's error at the default clocks per measured kernel (the prior model,
   before the fit: MAPE and worst kernels), GPU-seconds spent and what a full sweep would have
   taken; on the simulated backend the energy of the 0 %-slowdown kernel plan from this
   characterization and from a full sweep, both evaluated on the simulated truth.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from joulebound.core.clocks import ClockConfig, is_supported
from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MEASURED, MODELED, SIMULATED
from joulebound.gpumodel.characterization import Characterization
from joulebound.measure.calibrate.design import design_pairs
from joulebound.measure.calibrate.measure import CellMeasurement, WindowSettings, measure_cell
from joulebound.measure.calibrate.replay import ReplayError, ReplaySet, Unreplayable, replay_set
from joulebound.workload.trace import Trace

log = logging.getLogger(__name__)

CLOCK_MODES = ("auto", "3", "full")


@dataclass
class CalibrationResult:
    """What a calibration measured and wrote (see :meth:`to_json` for the keys)."""

    char: Characterization
    cells: list[CellMeasurement]
    replay: ReplaySet
    mode: str
    backend: str
    gpu_name: str
    gpu_seconds: float
    full_sweep_gpu_seconds: float
    full_sweep_cells: int
    wall_s: float
    clock_switches: int
    not_measured_budget: list[str] = field(default_factory=list)
    auto_error: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def measured_cells(self) -> int:
        return len(self.cells)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document (keys documented in docs/calibrate.md)."""
        measured_kernels = sorted({c.name for c in self.cells})
        cell_prov = SIMULATED if self.backend == "simulated" else MEASURED
        d: dict[str, Any] = {
            "device": self.char.device, "gpu": self.gpu_name, "backend": self.backend,
            "clocks": self.mode,
            "distinct_kernels": len(self.replay.ops) + len(self.replay.skipped),
            "replayable_kernels": len(self.replay.ops),
            "measured_kernels": len(measured_kernels),
            "measured_cells": self.measured_cells,
            "pairs_per_kernel_max": max((sum(1 for c in self.cells if c.name == k)
                                         for k in measured_kernels), default=0),
            "gpu_seconds": self.gpu_seconds,
            "full_sweep_gpu_seconds": self.full_sweep_gpu_seconds,
            "full_sweep_cells": self.full_sweep_cells,
            "gpu_seconds_fraction_of_full_sweep": (self.gpu_seconds / self.full_sweep_gpu_seconds
                                                   if self.full_sweep_gpu_seconds else None),
            "wall_s": self.wall_s, "clock_switches": self.clock_switches,
            "not_replayable": [{"name": u.name, "op": u.op, "reason": u.reason, "count": u.count}
                               for u in self.replay.skipped],
            "not_measured_budget": self.not_measured_budget,
            "model_error_at_auto": self.auto_error,
            "cells": [c.to_json() for c in self.cells],
            "notes": self.notes,
            "provenance": {"cells": cell_prov, "char_measured_cells": cell_prov,
                           "char_other_cells_of_calibrated_kernels": "modeled-from-fit",
                           "char_cells_of_other_kernels": MODELED,
                           "model_error_at_auto": "measured vs modeled (prior model)",
                           "plan_energy_delta": "simulated truth (modeled)"},
        }
        d.update(self.plan)
        return d


def _order_by_time_share(names: list[str], counts: dict[str, int], t_auto: dict[str, float]
                         ) -> list[str]:
    return sorted(names, key=lambda n: -counts[n] * t_auto.get(n, 0.0))


def calibrate(trace: Trace, device: str, backend: Any, clocks: str = "3",
              budget_s: float | None = None, window: WindowSettings | None = None,
              pairs: int = 3, progress: Callable[[int, int, str], None] | None = None
              ) -> CalibrationResult:
    """Calibrate ``trace``'s kernels on ``backend`` (see the module docs).

    Args:
        trace: the recorded iteration (``run --record`` output).
        device: catalog name of the GPU model (clock table, model parameters).
        backend: :class:`~.backends.NvmlBackend` or :class:`~.backends.SimulatedBackend`.
        clocks: ``"auto"`` (read-only), ``"3"`` (few-clock) or ``"full"``.
        budget_s: device time allowed (s); ``None``: unbounded.
        window: window settings (default: the backend's sensor period, 5 periods, 2 repeats).
        pairs: pairs per kernel in ``"3"`` mode (1-3).
        progress: called ``(done, total, label)`` after each measurement.
    """
    from joulebound.gpumodel.characterize import characterize, planning_configs, resolve_device
    from joulebound.gpumodel.measured import characterize_from_table
    from joulebound.gpumodel.params import params_for

    t_wall = time.monotonic()
    if clocks not in CLOCK_MODES:
        raise JouleboundError(f"--clocks {clocks!r}: use one of {', '.join(CLOCK_MODES)}")
    if not 1 <= pairs <= 3:
        raise JouleboundError("pairs per kernel must be 1, 2 or 3")
    spec = resolve_device(device)
    prm = params_for(spec)
    ws = window or WindowSettings(sensor_period_s=backend.sensor_period_s)
    notes: list[str] = []

    # 1. replay set -------------------------------------------------------------------------------
    rs = replay_set(trace)
    ops, calls = [], []
    for op in rs.ops:
        try:
            calls.append(backend.build(op))
            ops.append(op)
        except ReplayError as exc:
            rs.skipped.append(Unreplayable(op.name, op.op, str(exc), op.count))
    rs.ops = ops
    if not ops:
        reasons = sorted({u.reason for u in rs.skipped})
        raise JouleboundError(
            f"{trace.name}: no replayable kernels among its {len(rs.skipped)} distinct kernel(s) "
            f"({'; '.join(reasons[:3]) or 'the trace is empty'}); nothing was measured and no "
            "clock was changed. Record the op stream with `joulebound run --record ops.json -- "
            "python train.py` and calibrate that")
    backend.set_ops(ops, calls)

    # 2. design -----------------------------------------------------------------------------------
    first: dict[str, Any] = {}
    for k in trace.kernels:              # each op's first kernel, one pass (not one scan per op)
        first.setdefault(k.name, k)
    distinct = Trace([first[o.name] for o in ops], name=trace.name, meta=dict(trace.meta))
    plan_cfgs, _ = planning_configs(spec, prm)
    sup = backend.supported
    top_mem = max(sup)
    core_cfgs = [ClockConfig(c, top_mem) for c in sorted(sup[top_mem])
                 if spec.supports(ClockConfig(c, top_mem))]
    prior = characterize(distinct, spec, configs=[ClockConfig(), *core_cfgs], params=prm)
    t_auto = {n: float(prior.time_s[i, 0]) for i, n in enumerate(prior.kernel_names)}
    tested = sorted({c.mem_mhz for c in plan_cfgs if c.mem_mhz is not None})
    want: dict[str, list[ClockConfig]] = {}
    for i, op in enumerate(ops):
        if clocks == "auto":
            want[op.name] = [ClockConfig()]
        elif clocks == "full":
            want[op.name] = [c for c in plan_cfgs if c.is_auto or (
                c.core_mhz is not None and c.mem_mhz is not None and is_supported(c, sup))]
        else:
            e_core = {c.core_mhz: float(prior.energy_j[i, j + 1])
                      for j, c in enumerate(core_cfgs)}
            want[op.name] = design_pairs(e_core, sup, tested, n=pairs)

    # 3. budget -------------------------------------------------------------------------------------
    per_cell = ws.estimate_s()
    counts = {o.name: o.count for o in ops}
    order = _order_by_time_share([o.name for o in ops], counts, t_auto)
    if budget_s is not None:
        if budget_s < per_cell:
            raise JouleboundError(
                f"--budget {budget_s:g} s is too small for one measurement (about {per_cell:.2f} s "
                f"each: {ws.warmup_s:g} s warm-up, {ws.repeats} window(s) of {ws.k_periods} "
                f"sensor periods of {ws.sensor_period_s:g} s); give at least {per_cell:.1f} s. "
                "Nothing was measured and no clock was changed")
        kept, used = [], 0.0
        for n in order:
            cost = per_cell * len(want[n])
            if used + cost > budget_s:
                if not kept and clocks != "auto":       # at least the first kernel at auto
                    want[n] = want[n][:max(1, int(budget_s // per_cell))]
                    kept.append(n)
                    used += per_cell * len(want[n])
                continue
            kept.append(n)
            used += cost
        skipped_budget = [n for n in order if n not in kept]
    else:
        kept, skipped_budget = order, []
    if skipped_budget:
        notes.append(f"{len(skipped_budget)} kernel(s) did not fit the budget and keep the "
                     "model's figures (the least time first)")

    # 4. measure: one clock pair at a time, every kernel that needs it -------------------------
    index = {o.name: i for i, o in enumerate(ops)}
    by_cfg: dict[ClockConfig, list[str]] = {}
    for n in kept:
        for c in want[n]:
            by_cfg.setdefault(c, []).append(n)
    cfg_order = sorted(by_cfg, key=lambda c: (not c.is_auto, -(c.mem_mhz or 0),
                                              -(c.core_mhz or 0)))
    total = sum(len(v) for v in by_cfg.values())
    cells: list[CellMeasurement] = []
    runner = backend.runner
    t0 = runner.now()
    needs_clocks = any(not c.is_auto for c in by_cfg)
    session = backend.open_clocks() if needs_clocks else None
    stopped = False
    try:
        for cfg in cfg_order:
            if session is not None:
                session.set(cfg)
            for n in by_cfg[cfg]:
                if budget_s is not None and runner.now() - t0 + per_cell > budget_s:
                    stopped = True
                    break
                cells.append(measure_cell(runner, backend.probe, index[n], n, cfg, ws))
                if progress:
                    progress(len(cells), total, f"{cfg.label} {n[:60]}")
            if stopped:
                break
    finally:
        if session is not None:
            session.close()
    switches = session.switches if session is not None else 0
    if stopped:
        notes.append(f"the budget ran out after {len(cells)} of {total} measurements; the rest "
                     "keep the model")
    if session is None:
        notes.append("read-only: the default clocks only, no GPU setting was changed")
    gpu_seconds = float(runner.now() - t0)

    # 5. fit and write ---------------------------------------------------------------------------
    table = {(c.name, c.config): (c.time_s, c.energy_j, c.time_sd_s, c.energy_sd_j, c.calls)
             for c in cells}
    char = characterize_from_table(trace, spec, table, params=prm, source="<calibrate>")
    char.meta.update({
        "source": "joulebound calibrate", "backend": backend.name, "gpu": backend.gpu_name,
        "clocks": clocks, "measured_cells": len(cells),
        "cell_provenance": "measured where `measured` is True; other cells of calibrated "
                           "kernels modeled-from-fit; kernels not measured modeled",
        "not_replayable": [u.name for u in rs.skipped],
        "not_measured_budget": skipped_budget,
        "window": {"sensor_period_s": ws.sensor_period_s, "k_periods": ws.k_periods,
                   "warmup_s": ws.warmup_s, "repeats": ws.repeats},
    })

    # 6. report ------------------------------------------------------------------------------------
    auto_err = _auto_error(cells, prior)
    measured_s = [c.gpu_seconds for c in cells]
    # the full sweep = what clocks="full" measures: auto and every supported pair at the memory
    # clocks the planner uses
    n_pairs = 1 + sum(1 for c in plan_cfgs if c.core_mhz is not None and c.mem_mhz is not None
                      and is_supported(c, sup))
    full_cells = len(ops) * n_pairs
    full_s = float(np.mean(measured_s)) * full_cells if measured_s else 0.0
    res = CalibrationResult(
        char=char, cells=cells, replay=rs, mode=clocks, backend=backend.name,
        gpu_name=backend.gpu_name, gpu_seconds=gpu_seconds, full_sweep_gpu_seconds=full_s,
        full_sweep_cells=full_cells, wall_s=time.monotonic() - t_wall, clock_switches=switches,
        not_measured_budget=skipped_budget, auto_error=auto_err, notes=notes)
    if backend.name == "simulated":
        res.plan = simulated_plan_check(char, trace, backend.sim)
    return res


def _auto_error(cells: list[CellMeasurement], prior: Characterization) -> dict[str, Any]:
    """The prior model's per-kernel error at the default clocks (modeled / measured - 1)."""
    row = {n: i for i, n in enumerate(prior.kernel_names)}
    rows = []
    for c in cells:
        if not c.config.is_auto or c.name not in row:
            continue
        i = row[c.name]
        rows.append({"name": c.name, "time_measured_s": c.time_s, "energy_measured_j": c.energy_j,
                     "time_modeled_s": float(prior.time_s[i, 0]),
                     "energy_modeled_j": float(prior.energy_j[i, 0]),
                     "time_error": float(prior.time_s[i, 0] / c.time_s - 1),
                     "energy_error": float(prior.energy_j[i, 0] / max(c.energy_j, 1e-30) - 1)})
    if not rows:
        return {}
    te = np.array([abs(r["time_error"]) for r in rows])
    ee = np.array([abs(r["energy_error"]) for r in rows])
    worst = sorted(rows, key=lambda r: -max(abs(r["time_error"]), abs(r["energy_error"])))
    return {"kernels": len(rows), "time_mape": float(te.mean()), "energy_mape": float(ee.mean()),
            "time_error_median": float(np.median(te)), "energy_error_median": float(np.median(ee)),
            "worst": worst[:5], "per_kernel": rows}


def plan_on_truth(char: Characterization, truth_t: np.ndarray, truth_e: np.ndarray,
                  slowdown: float = 0.0) -> tuple[float, float]:
    """The kernel plan made from ``char`` at ``slowdown`` (0: no slower than the default clocks,
    by ``char``'s own figures), evaluated on the true table (same rows and configs):
    ``(energy delta, time delta)`` against the default clocks, true figures."""
    from joulebound.planning.solve import solve

    if slowdown > 0:
        plan = solve(char, objective="relaxed", slowdown=slowdown, granularity="kernel")
    else:
        plan = solve(char, objective="waste", granularity="kernel")
    col = {c: j for j, c in enumerate(char.configs)}
    idx = np.array([col[plan.configs[int(k)]] for k in plan.choice])
    rows = np.arange(len(idx))
    a = char.auto_index
    e0, t0 = truth_e[:, a].sum(), truth_t[:, a].sum()
    return float(truth_e[rows, idx].sum() / e0 - 1), float(truth_t[rows, idx].sum() / t0 - 1)


def simulated_plan_check(char: Characterization, trace: Trace, sim: Any) -> dict[str, Any]:
    """On the simulated GPU: the kernel plan at 0 % slowdown from ``char`` and from a full sweep
    (every cell of every supported pair, without measurement noise: the simulated truth), both
    evaluated on the truth.

    A plan from an imperfect characterization can run slightly slower than the default clocks on
    the truth (``plan_time_delta`` > 0), and near 0 % slowdown a few 0.1 % of time can buy several
    % of energy; so the gap is also given against the full-sweep plan at the *same true time*
    (``full_sweep_plan_energy_delta_same_time``, ``plan_energy_gap_vs_full_sweep``)."""
    from joulebound.gpumodel.characterize import host_times

    names = char.kernel_names
    uniq = list(dict.fromkeys(names))
    host = dict(zip(trace.names(), host_times(trace), strict=True))
    tu, eu = sim.true_table(uniq, list(char.configs), np.array([host.get(n, 0.0) for n in uniq]))
    pos = {n: i for i, n in enumerate(uniq)}
    inv = np.array([pos[n] for n in names])
    truth_t, truth_e = tu[inv], eu[inv]
    d_cal, dt_cal = plan_on_truth(char, truth_t, truth_e)
    full = Characterization(names, list(char.configs), truth_t, truth_e,
                            np.ones(truth_t.shape, bool), device=char.device)
    d_full, dt_full = plan_on_truth(full, truth_t, truth_e)
    d_same, _ = plan_on_truth(full, truth_t, truth_e, max(dt_cal, 0.0))
    return {"plan_energy_delta": d_cal, "plan_time_delta": dt_cal,
            "full_sweep_plan_energy_delta": d_full, "full_sweep_plan_time_delta": dt_full,
            "full_sweep_plan_energy_delta_same_time": d_same,
            "plan_energy_gap_vs_full_sweep": (1 + d_cal) / (1 + d_same) - 1}
