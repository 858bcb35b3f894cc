"""What ``joulebound plan`` computes, as one library call: load a trace, characterize it on a
device (or load a measured characterization), run the planning study at the clock-switch latency
and draw the parameter intervals — returned as a :class:`PlanResult` with ``to_json()``.

The CLI parses options, calls :func:`plan_clocks` and prints; a Python user calls the same::

    from joulebound.planning.workflow import plan_clocks
    res = plan_clocks("gpt2-small", "rtx3080ti", slowdown=0.01, switch_latency="6ms")
    res.plan.save("plan.json"); res.to_json()["rows"][0]["energy_delta"]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joulebound.core.errors import InputError
from joulebound.core.vocab import PLAN_GRANULARITIES, PLAN_OBJECTIVES
from joulebound.planning.plan import Plan
from joulebound.planning.study import Study

#: granularities a plan can have, finest last
GRANULARITIES = PLAN_GRANULARITIES
#: objectives of the clock choice
OBJECTIVES = PLAN_OBJECTIVES


@dataclass
class PlanResult:
    """A planning study and the row whose plan is *the* plan (the switch-aware plan when a
    switch latency is planned for, else the finest granularity asked for).

    Attributes:
        study: every granularity's plan, its replay and intervals (modeled).
        label: the main row's label.
        target: the model preset or trace file planned.
        objective: ``waste`` / ``relaxed`` / ``edp`` / ``ed2p``.
        slowdown: the allowed slowdown vs auto (fraction; 0.01 = 1 %).
        switch_latency_s: the clock-switch latency planned for (s), ``None`` = switching free.
        latency_source: where the latency comes from, in words.
        notes: remarks for the user (the latency used, a step that does not fit in memory).
        memory_warning: the memory remark alone (``None`` when the step fits).
    """

    study: Study
    label: str
    target: str
    objective: str
    slowdown: float
    switch_latency_s: float | None
    latency_source: str = ""
    notes: list[str] = field(default_factory=list)
    memory_warning: str | None = None

    @property
    def plan(self) -> Plan:
        """The main row's plan (clock pair per kernel; ``.save(path)`` writes the plan JSON)."""
        return self.study.row(self.label).plan

    def to_json(self) -> dict[str, Any]:
        """The ``plan --json`` object (keys in ``joulebound plan --help``)."""
        return study_json(self.study, self.target, self.objective, self.slowdown,
                          self.switch_latency_s, self.label)


def plan_latency(text: str | float | None, device: str) -> tuple[float | None, str | None, str]:
    """The switch latency to plan with (s), a note for the user (or ``None``) and where it
    comes from (a few words).

    ``text`` in the duration grammar (``"6ms"``; a bare number is seconds; ``0`` = switching
    free); ``None`` = the device's catalog latency (published or a labeled estimate), or
    switching free when the entry has none."""
    from joulebound.core.units import duration_warning, parse_duration
    from joulebound.hw.latency import device_switch_latency

    if text is not None:
        return (parse_duration(text), duration_warning(text, "--switch-latency"),
                "given with --switch-latency")
    dl = device_switch_latency(device)
    if dl is None:
        return None, (f"{device} has no clock-switch latency in the catalog: planning as if "
                      "switching were free; pass --switch-latency (e.g. 20ms)"), ""
    return dl.seconds, (f"planning for the {device} clock-switch latency {dl.describe()}; "
                        "--switch-latency L overrides it, --switch-latency 0 plans as if "
                        "switching were free"), f"the catalog's {dl.kind} for {dl.device}"


def plan_clocks(target: str | Path, device: str, *, slowdown: float = 0.0,
                objective: str = "waste", granularity: str = "all",
                switch_latency: str | float | None = None,
                characterization: str | Path | None = None, tie: bool = False,
                frontier: bool = True, allow_untested: bool = False, n_draws: int = 24,
                progress: Callable[[str], None] | None = None) -> PlanResult:
    """Plan GPU clocks for one iteration of ``target`` on ``device`` (what ``joulebound plan``
    does).

    Args:
        target: a model preset (``gpt3-xl``, ``gpt2-small``, ...) or a trace file.
        device: a catalog name (``rtx3080ti``) or a device TOML.
        slowdown: allowed slowdown vs auto (fraction).
        objective: ``waste`` (least energy within the time budget), ``relaxed``, ``edp``,
            ``ed2p``.
        granularity: ``kernel``, ``layer``, ``pass``, ``iteration`` or ``all``.
        switch_latency: the clock-switch latency (duration text or seconds; ``None``: the
            catalog's; ``0``: free).
        characterization: a measured characterization (.npz) instead of the model.
        tie: one clock pair for identical kernel invocations.
        frontier: also compute the Pareto frontiers (seconds of solver work; the HTML report
            plots them).
        allow_untested: also plan memory clocks never measured on this memory technology.
        n_draws: parameter draws for the 5-95 % intervals (modeled characterizations only).
        progress: called with a short message as the work advances.

    Raises :class:`~joulebound.core.errors.InputError` for an unknown objective or
    granularity."""
    from joulebound.gpumodel import characterize, params_for, resolve_device
    from joulebound.gpumodel.characterization import Characterization
    from joulebound.planning.solve import align
    from joulebound.planning.study import run_study
    from joulebound.planning.uncertainty import study_intervals
    from joulebound.workload import load_trace
    from joulebound.workload.memory import trace_memory_warning

    if objective not in OBJECTIVES:
        raise InputError(f"unknown --objective {objective!r}; one of {', '.join(OBJECTIVES)}")
    grans = list(GRANULARITIES) if granularity == "all" else [granularity]
    if any(g not in GRANULARITIES for g in grans):
        raise InputError(f"unknown --granularity {granularity!r}; one of kernel, layer, pass, "
                         "iteration, all")
    say = progress or (lambda msg: None)
    lat, lat_note, lat_src = plan_latency(switch_latency, device)
    say("reading the trace ...")
    trace = load_trace(target)
    spec = resolve_device(device)
    mem_warning = trace_memory_warning(trace, spec) if spec is not None else None
    if characterization is not None:
        char = align(Characterization.load(characterization), trace)
    else:
        say(f"characterizing {len(trace.kernels)} kernels ...")
        char = characterize(trace, spec, allow_untested=allow_untested)
    say("planning ...")
    study = run_study(trace, char, granularities=grans, slowdowns=[slowdown],
                      objective=objective, latencies=[lat] if lat is not None else None,
                      replay_latency_s=lat or 0.0, frontier=frontier, tie=tie, progress=say)
    if characterization is None and n_draws:
        say("intervals over parameter draws ...")
        study.meta["intervals"] = study_intervals(study, trace, spec, params_for(spec), n_draws)
    study.meta["heldout"] = params_for(spec).heldout if characterization is None else {}
    study.meta["memory_warning"] = mem_warning
    label = next((r.label for r in study.rows if r.granularity == "phase"), None) or study.rows[
        [r.granularity for r in study.rows].index(grans[-1])].label
    notes = [n for n in (lat_note, mem_warning) if n]
    return PlanResult(study, label, str(target), objective, slowdown, lat, lat_src, notes,
                      mem_warning)


def study_json(study: Study, target: str, objective: str, slowdown: float,
               lat: float | None, label: str) -> dict[str, Any]:
    """A study as the ``plan --json`` object, its main plan being row ``label``."""
    from joulebound.planning.study import category_savings, kernel_clocks

    main = study.row(label)
    return {
        "target": target, "device": study.char.device, "objective": objective,
        "slowdown": slowdown, "switch_latency_s": lat,
        "baseline": {"config": study.baseline_config, "time_s": study.baseline_time_s,
                     "energy_j": study.baseline_energy_j, "provenance": study.char.provenance()},
        "rows": [dict(r.to_json(), **interval_json(study, r.label)) for r in study.rows],
        "model_heldout_error": study.meta.get("heldout") or None,
        "memory_warning": study.meta.get("memory_warning"),
        "untested_mem_mhz_excluded": study.char.meta.get("untested_mem_mhz_excluded", []),
        "published": study.published,
        "plan": {"label": label,
                 "per_category": category_savings(study.trace, study.char, main.plan),
                 "kernels": kernel_clocks(study.trace, main.plan)},
    }


def interval_json(study: Study, label: str) -> dict[str, Any]:
    """``energy_delta_lo/hi`` etc. of a row (``None`` when the parameters carry no draws)."""
    iv = study.meta.get("intervals", {}).get(label)
    if iv is None:
        return {"energy_delta_lo": None, "energy_delta_hi": None, "time_delta_lo": None,
                "time_delta_hi": None, "replan_energy_delta_lo": None,
                "replan_energy_delta_hi": None}
    return iv.to_json()


@dataclass
class CharacterizeResult:
    """What ``joulebound characterize`` computes: the characterization and the whole-iteration
    summary (least-energy pair vs auto, its interval over parameter draws, its sensitivity to
    the DRAM bytes, the parameters' held-out error).

    Attributes:
        char: time and energy of every kernel at every clock config (measured or modeled).
        trace: the trace characterized (``None`` for a measured table alone).
        spec: the device (:class:`~joulebound.hw.spec.DeviceSpec`).
        name: the trace's name (or the table's path).
        best: index of the least-energy config of the whole iteration.
        best_energy_delta: its energy vs auto (fraction), ``None`` without an auto column.
        best_energy_delta_lo / best_energy_delta_hi: 5-95 % over parameter draws (``None``
            without draws or for measured cells).
        bytes_sensitivity: ``{"0.5", "1", "2"}`` -> the best pair's delta with every kernel's
            DRAM bytes scaled by that factor (modeled).
        heldout: the parameters' held-out error on real data.
        memory_warning: text when the training step does not fit the device's memory.
    """

    char: Any
    trace: Any
    spec: Any
    name: str
    best: int
    best_energy_delta: float | None
    best_energy_delta_lo: float | None = None
    best_energy_delta_hi: float | None = None
    bytes_sensitivity: dict[str, float] = field(default_factory=dict)
    heldout: dict[str, Any] = field(default_factory=dict)
    memory_warning: str | None = None

    @property
    def device(self) -> str:
        """The device's catalog name."""
        return self.spec.name

    def to_json(self, output: str | Path | None = None,
                csv: str | Path | None = None) -> dict[str, Any]:
        """The ``characterize --json`` object (keys in ``joulebound characterize --help``)."""
        char = self.char
        it_t = char.time_s.sum(axis=0)
        it_e = char.energy_j.sum(axis=0)
        return {
            "device": self.device, "trace": self.name, "n_kernels": char.n_kernels,
            "n_configs": char.n_configs, "provenance": char.provenance(),
            "measured_cells": int(char.sensor_measured.sum()),
            "params_calibration": char.meta.get("params_calibration"),
            "power_limit_w": char.meta.get("power_limit_w"),
            "capped_cells_fraction": char.meta.get("capped_cells_fraction"),
            "iteration": {c.label: {"time_s": float(it_t[j]), "energy_j": float(it_e[j]),
                                    "avg_power_w": float(it_e[j] / it_t[j])}
                          for j, c in enumerate(char.configs)},
            "untested_mem_mhz_excluded": char.meta.get("untested_mem_mhz_excluded", []),
            "best_energy_config": char.configs[self.best].label,
            "best_energy_delta": self.best_energy_delta,
            "best_energy_delta_lo": self.best_energy_delta_lo,
            "best_energy_delta_hi": self.best_energy_delta_hi,
            "bytes_sensitivity": self.bytes_sensitivity or None,
            "model_heldout_error": self.heldout or None, "memory_warning": self.memory_warning,
            "output": str(output) if output else None,
            "csv": str(csv) if csv else None}


def characterize_target(target: str | Path | None, device: str, *,
                        measured: str | Path | None = None, allow_untested: bool = False,
                        batch: int | None = None, seq: int | None = None) -> CharacterizeResult:
    """Characterize ``target`` (a preset or trace file) on ``device`` — or a measured table
    (``measured``, a CSV of kernel, core, mem, time, energy, repeats) alone or fitted into the
    trace's modeled cells — and summarise the whole iteration (what ``joulebound
    characterize`` does). ``batch`` / ``seq`` override a preset's."""
    import numpy as np

    from joulebound.gpumodel import characterize, resolve_device
    from joulebound.gpumodel.measured import characterize_with_measurements, from_measured
    from joulebound.workload import load_trace
    from joulebound.workload.memory import trace_memory_warning

    spec = resolve_device(device)
    if target is None and measured is None:
        raise InputError("give a TRACE (preset or file) or --measured TABLE.csv")
    tr = None
    mem_warning = None
    if target is not None:
        tr = load_trace(target, batch=batch, seq=seq)
        mem_warning = trace_memory_warning(tr, spec) if spec is not None else None
        if measured is not None:
            char = characterize_with_measurements(tr, spec, measured)
        else:
            char = characterize(tr, spec, allow_untested=allow_untested)
        name = tr.name
    else:
        char = from_measured(measured, spec)
        name = str(measured)
    it_e = char.energy_j.sum(axis=0)
    best = int(np.argmin(it_e))
    auto = char.auto_index
    res = CharacterizeResult(char, tr, spec, name, best,
                             float(it_e[best] / it_e[auto] - 1) if auto is not None else None,
                             memory_warning=mem_warning)
    if tr is not None and measured is None and auto is not None:
        (res.best_energy_delta_lo, res.best_energy_delta_hi, res.bytes_sensitivity,
         res.heldout) = _best_pair_uncertainty(tr, spec, char, best)
    return res


def _best_pair_uncertainty(tr: Any, spec: Any, char: Any, best: int
                           ) -> tuple[float | None, float | None, dict[str, float], dict]:
    """The least-energy config's saving over parameter draws (5-95 %) and with DRAM bytes x0.5
    and x2; the parameters' held-out error."""
    import numpy as np

    from joulebound.gpumodel import characterize, params_for, trace_work
    from joulebound.planning.uncertainty import QUANTILES, draw_characterizations

    prm = params_for(spec)
    cfgs = [char.configs[char.auto_index], char.configs[best]]

    def delta(c: Any) -> float:
        e = c.energy_j.sum(axis=0)
        return float(e[1] / e[0] - 1)

    lo = hi = None
    chars = draw_characterizations(tr, spec, prm, cfgs)
    if chars:
        d = np.array([delta(c) for c in chars])
        lo, hi = float(np.quantile(d, QUANTILES[0])), float(np.quantile(d, QUANTILES[1]))
    sens = {}
    for k in (0.5, 1, 2):
        w = trace_work(tr, spec, prm)
        w.tm_max = w.tm_max * k
        sens[f"{k:g}"] = delta(characterize(tr, spec, configs=cfgs, include_auto=False,
                                            params=prm, work=w))
    return lo, hi, sens, prm.heldout
