"""Run a Python training script under the controller (``joulebound run``).

Mechanism: **in-process**. The script (``python train.py ARGS`` or ``python -m pkg.mod ARGS``)
runs in the ``joulebound`` process itself through :mod:`runpy`, with ``sys.argv`` set as Python
would set it and the script's folder first on ``sys.path``, inside an
:class:`~joulebound.runtime.hooks.OpStream` dispatch mode. The mode is thread-local and the
autograd engine carries it into its backward threads, so every op of the training loop —
forward, backward and optimizer — passes the controller before it runs. ``SystemExit`` from the
script ends the run normally (its code becomes the exit code); any exception still resets the
clocks (the actuator is closed in ``finally``) before it propagates.

Recording mode (``record_path``) writes a :class:`~joulebound.workload.trace.Trace` with one
kernel per op of the last complete iteration the predictor locked onto; a plan made over that
trace drives the controller in later runs.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from joulebound.core.clocks import AUTO
from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MEASURED, MODELED
from joulebound.planning.plan import Plan
from joulebound.runtime.guard import SignalExit, stop_signals_raise
from joulebound.runtime.nextop import KeyInterner, NextKernelPredictor

ACTUATORS = ("dry-run", "simulated", "nvml", "helper")

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What ``joulebound run`` reports (``--json`` keys)."""

    command: list[str]
    exit_code: int
    actuator: str
    duration_s: float
    ops: int = 0
    planned_ops: int = 0
    safe_ops: int = 0
    #: switches the controller asked for (one line each in the switch log)
    switches_requested: int = 0
    #: switches the actuator made: each reached NVML / the clock helper and succeeded
    switches_realized: int = 0
    #: switches not made because another client held the GPU or the clock helper was away
    switches_skipped: int = 0
    #: the rest of the requested ones: the actuator was already at that pair, a deferred switch
    #: (helper rate limit) was replaced by a newer one, or it came after the actuator was closed
    #: (a stop signal); requested = realized + skipped + not made
    switches_not_made: int = 0
    switch_log: str | None = None
    predictor_accuracy: float | None = None
    period_ops: int | None = None
    modeled_time_s: float | None = None
    modeled_energy_j: float | None = None
    modeled_iteration_energy_j: float | None = None
    unknown_ops: int | None = None
    recorded_trace: str | None = None
    recorded_ops: int | None = None
    recorded_steps: int | None = None
    baseline_time_s: float | None = None
    baseline_energy_j: float | None = None
    modeled_energy_delta: float | None = None
    modeled_time_delta: float | None = None
    plan_summary: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: the signal that stopped the script (INT, TERM, HUP, QUIT), if any
    stopped_by: str | None = None
    #: ``run --verify``: the measured A/B saving and the modeled one
    #: (:func:`joulebound.measure.verify.run_verified`); ``None`` otherwise
    verify: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        # older names, kept for scripts that read them: ``switches`` was always the requested
        # count (not the switches made), ``skipped_switches`` the skipped one
        d["switches"] = self.switches_requested
        d["skipped_switches"] = self.switches_skipped
        d["duration_provenance"] = MEASURED
        d["modeled_provenance"] = MODELED if self.modeled_energy_j is not None else None
        return d


#: optimizer steps a recording needs: the first step differs (optimizer state is created), and
#: the steady iteration must be seen twice after it to be told from a repeating layer
MIN_RECORD_STEPS = 3
#: actuators that change a real GPU's clocks (plans are checked against the switch latency)
REAL_ACTUATORS = ("nvml", "helper")


def plan_summary(plan: Plan) -> dict[str, Any]:
    """The plan file's own modeled figures per iteration: baseline (auto) and plan time and
    energy, their change, switches, phases, the latency it was planned for."""
    return {"baseline_time_s": plan.baseline_time_s, "baseline_energy_j": plan.baseline_energy_j,
            "time_s": plan.predicted_time_s, "energy_j": plan.predicted_energy_j,
            "energy_delta": plan.energy_delta, "time_delta": plan.time_delta,
            "switches": plan.n_switches, "phases": len(plan.phases()),
            "switch_latency_s": plan.switch_latency_s, "granularity": plan.granularity,
            "provenance": plan.provenance}


def check_phase_lengths(plan: Plan, kernel_time_s: np.ndarray, latency_s: float,
                        what: str) -> None:
    """Refuse a plan with a phase shorter than the clock-switch latency (it cannot land).

    Only plans that switch are checked (one phase never switches). Every phase counts, the
    first too: from the second iteration on, it follows a switch back from the last one."""
    phases = plan.phases()
    if len(phases) < 2 or latency_s <= 0:
        return
    dur = np.array([float(kernel_time_s[p.start:p.stop].sum()) for p in phases])
    short = int(np.count_nonzero(dur < latency_s))
    if short:
        raise JouleboundError(
            f"the plan has {short} of {len(phases)} phases shorter than the {what} "
            f"(shortest {dur.min() * 1e3:.3g} ms, modeled): its clock switches cannot take effect "
            "in time on this GPU. Make a switch-aware plan (`joulebound plan TRACE -d DEVICE`, "
            "which plans for the device's latency by default, or --switch-latency L), or pass "
            "--force to apply it anyway")


def split_command(cmd: Sequence[str]) -> tuple[str, str, list[str]]:
    """``("path"|"module", target, argv)`` for ``python script.py ...`` / ``python -m mod ...``.

    Accepts the command with or without the leading ``python``."""
    cmd = list(cmd)
    if not cmd:
        raise JouleboundError("no command given: use `joulebound run --plan P -- python train.py`")
    if Path(cmd[0]).name.startswith("python") or cmd[0] == sys.executable:
        cmd = cmd[1:]
    if not cmd:
        raise JouleboundError("`python` needs a script or -m MODULE")
    if cmd[0] == "-m":
        if len(cmd) < 2:
            raise JouleboundError("`python -m` needs a module name")
        return "module", cmd[1], [cmd[1], *cmd[2:]]
    if cmd[0].startswith("-"):
        raise JouleboundError(f"unsupported python option {cmd[0]!r}: joulebound run executes "
                              "`python SCRIPT ARGS` or `python -m MODULE ARGS` in-process")
    if not cmd[0].endswith(".py") and not Path(cmd[0]).is_file():
        raise JouleboundError(f"{cmd[0]!r} is not a Python script; joulebound run executes "
                              "Python training scripts in-process (`-- python train.py ...`). "
                              "For other launchers, use the Controller API in the script.")
    if not Path(cmd[0]).is_file():
        raise JouleboundError(f"{cmd[0]}: file not found")
    return "path", cmd[0], cmd


def _run_target(kind: str, target: str, argv: list[str], quiet_stdout: bool = False) -> int:
    """Run the script; with ``quiet_stdout`` its stdout goes to stderr (keeps --json clean)."""
    if quiet_stdout:
        import contextlib

        with contextlib.redirect_stdout(sys.stderr):
            return _run_target(kind, target, argv)
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    if kind == "path":
        sys.path.insert(0, str(Path(target).resolve().parent))
    else:
        sys.path.insert(0, os.getcwd())
    try:
        if kind == "path":
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SignalExit:
        raise
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
    return 0


@contextmanager
def _optimizer_steps(callback: Any) -> Iterator[None]:
    """Call ``callback()`` after every ``torch.optim`` optimizer step inside the block."""
    import torch.optim.optimizer as topt

    handle = topt.register_optimizer_step_post_hook(lambda *_a, **_k: callback())
    try:
        yield
    finally:
        handle.remove()


def make_actuator(name: str, *, char: Any = None, switch_latency_s: float = 0.0,
                  socket_path: str | None = None, gpu: int | str = 0) -> Any:
    """The actuator ``name``; ``gpu`` is a CUDA-visible index (through ``CUDA_VISIBLE_DEVICES``)
    or a UUID, resolved to one physical GPU (:func:`joulebound.hw.gpu.resolve`)."""
    from joulebound.runtime.actuators import DryRunActuator, NvmlActuator, SimulatedActuator

    if name == "dry-run":
        return DryRunActuator()
    if name == "simulated":
        if char is None:
            raise JouleboundError("--actuator simulated needs a characterization of the plan's "
                                  "kernels (--characterization CHAR.npz)")
        return SimulatedActuator(char, switch_latency_s=switch_latency_s)
    if name == "nvml":
        return NvmlActuator(gpu=gpu, owner="joulebound run")
    if name == "helper":
        from joulebound.runtime.helper import HelperActuator

        if not socket_path:
            raise JouleboundError("--actuator helper needs --socket PATH (the clock helper's)")
        # a GPU another client holds: train on without changing clocks (skipped switches)
        return HelperActuator(socket_path, gpu=gpu, skip_when_busy=True)
    from joulebound.core.errors import did_you_mean

    raise JouleboundError(f"unknown actuator {name!r}.{did_you_mean(name, ACTUATORS)}")


def plan_kernel_times(plan: Plan, char: Any) -> np.ndarray:
    """Modeled time of each plan kernel at its planned config (s), from ``char``.

    Raises :class:`JouleboundError` when ``char`` is not over the plan's kernels or lacks a
    config the plan uses (:func:`~joulebound.planning.simulate.plan_columns`)."""
    from joulebound.planning.simulate import plan_columns

    return char.time_s[np.arange(len(plan.choice)), plan_columns(char, plan)]


def model_characterization(plan: Plan) -> Any:
    """Characterize the plan's op kernels (shapes -> FLOPs/bytes) with the device model."""
    from joulebound.gpumodel import characterize
    from joulebound.runtime.controller import trace_from_ops

    configs = list(dict.fromkeys([*plan.configs, AUTO]))
    try:
        return characterize(trace_from_ops(plan.kernel_names), plan.device, configs=configs)
    except JouleboundError as exc:
        raise JouleboundError(f"cannot model the plan's kernels on {plan.device!r} ({exc}); "
                              "pass --characterization CHAR.npz") from exc


def check_plan_keys(plan: Plan) -> None:
    """Refuse a plan whose kernel names are not dispatched-op keys (it could never match)."""
    names = plan.kernel_names
    keyish = sum(1 for n in names if "[" in n and n.endswith(("]", *_DTYPE_SUFFIXES)))
    if names and keyish < 0.5 * len(names):
        raise JouleboundError(
            f"the plan's kernel names ({names[0]!r}, ...) are not op keys such as "
            "'aten.mm.default[8x64,64x192]float32', so the runtime could never match them "
            "against the running program. Record the program's op stream with "
            "`joulebound run --record ops.json -- python train.py`, plan over ops.json "
            "(`joulebound plan ops.json -d DEVICE -o plan.json`), then run with that plan.")


_DTYPE_SUFFIXES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool", "-",
                   "float8_e4m3fn", "float8_e5m2", "int8", "uint8", "complex64")


def check_plan_clocks(plan: Plan, supported: dict[int, list[int]], gpu: str,
                      snap: bool = False) -> tuple[Plan, str | None]:
    """Check every clock pair the plan commands against the live GPU's table (``supported``:
    memory MHz -> core MHz, :func:`~joulebound.core.clocks.is_supported`), before the first step.

    Returns the plan (with ``snap``: a copy whose unsupported pairs are mapped to the nearest
    supported ones, :func:`~joulebound.core.clocks.nearest_supported`; the kernels keep their
    positions) and a note saying what was mapped (``None`` when nothing was).

    Raises:
        UnsupportedGPU: pairs the GPU does not support (all named), without ``snap``; with it,
            pairs that cannot be mapped (0 MHz or less).
    """
    from dataclasses import replace

    from joulebound.core.clocks import is_supported, nearest_supported
    from joulebound.core.errors import UnsupportedGPU

    used = [plan.configs[int(i)] for i in np.unique(plan.choice)]
    bad = list(dict.fromkeys(c for c in used if not is_supported(c, supported)))
    if not bad:
        return plan, None
    mems = sorted(supported, reverse=True)
    table = "; ".join(f"memory {m} MHz: core {min(supported[m])}-{max(supported[m])} MHz "
                      f"({len(supported[m])} clocks)" for m in mems)
    names = ", ".join(c.label for c in bad)
    if not snap:
        raise UnsupportedGPU(
            f"the plan commands {len(bad)} clock pair(s) (core/memory MHz) that {gpu} does not "
            f"support: {names}. Its table: {table}. Nothing was changed and the script was not "
            "started. Make the plan for this GPU (`joulebound plan TRACE -d DEVICE`), or pass "
            "--snap to map each pair to the nearest supported one")
    mapping = {c: nearest_supported(c, supported) for c in bad}
    lost = [c.label for c, m in mapping.items() if m is None]
    if lost:
        raise UnsupportedGPU(f"the plan commands clock pair(s) {', '.join(lost)} that are not "
                             f"clocks (0 MHz or less) and cannot be mapped onto {gpu}'s table "
                             "even with --snap; fix the plan file")
    configs = [mapping.get(c) or c for c in plan.configs]
    note = (f"--snap: {len(bad)} clock pair(s) of the plan that {gpu} does not support were "
            "mapped to the nearest supported pair: "
            + ", ".join(f"{c.label} -> {m.label}" for c, m in mapping.items() if m is not None)
            + "; the plan's modeled figures are for the unmapped pairs")
    return replace(plan, configs=configs), note


def build_controller(plan: Plan | str | Path, actuator: str = "dry-run", *, char: Any = None,
                     switch_log: str | None = None, switch_latency_s: float | None = None,
                     min_confidence: float = 0.75, socket_path: str | None = None,
                     gpu: int | str = 0, notes: list[str] | None = None,
                     force: bool = False, snap: bool = False) -> Any:
    """A :class:`Controller` set up as ``joulebound run`` sets it up (actuator, kernel times,
    CUDA-event alignment for real actuators when CUDA is available).

    With a real actuator (``nvml``, ``helper``) a plan whose phases are shorter than the switch
    latency (``switch_latency_s``, else the device's catalog latency) is refused unless
    ``force``, and the plan's clock pairs are checked against the live GPU's table before
    anything runs (:func:`check_plan_clocks`; ``snap`` maps unsupported ones)."""
    from joulebound.gpumodel.characterization import Characterization
    from joulebound.runtime.controller import Controller

    notes = notes if notes is not None else []
    if not isinstance(plan, Plan):
        plan = Plan.load(plan)
    check_plan_keys(plan)
    if isinstance(char, str | Path):
        char = Characterization.load(char)
    lat = plan.switch_latency_s if switch_latency_s is None else float(switch_latency_s)
    check_lat, what = _device_latency(plan, switch_latency_s) if actuator in REAL_ACTUATORS \
        else (0.0, "")
    if char is None and (actuator == "simulated" or lat > 0 or check_lat > 0):
        char = model_characterization(plan)
        notes.append(f"kernel times/energy modeled by joulebound's device model for "
                     f"{plan.device} from the op shapes (no --characterization given)")
    ktime = plan_kernel_times(plan, char) if char is not None else None
    if check_lat > 0 and ktime is not None:
        if force:
            try:
                check_phase_lengths(plan, ktime, check_lat, what)
            except JouleboundError:
                notes.append(f"--force: applying a plan with phases shorter than the {what}")
        else:
            check_phase_lengths(plan, ktime, check_lat, what)
    act = make_actuator(actuator, char=char, switch_latency_s=lat, socket_path=socket_path,
                        gpu=gpu)
    try:
        table = act.supported_clocks()
        if table:
            plan, note = check_plan_clocks(plan, table, act.describe_gpu(), snap)
            if note:
                notes.append(note)
        elif actuator in REAL_ACTUATORS:
            notes.append(f"the clock table of {act.describe_gpu()} could not be read: the plan's "
                         "clock pairs were not checked before the run")
    except BaseException:
        act.close()
        raise
    aligner = None
    if actuator != "simulated":
        import torch

        if torch.cuda.is_available():
            # the CPU runs ahead of the GPU: switch when the device reaches the op
            from joulebound.runtime.hooks import EventAligner

            aligner = EventAligner(act.set_clocks)
            notes.append("switches aligned with device progress (CUDA events)")
    return Controller(plan, act, kernel_time_s=ktime, switch_latency_s=lat,
                      min_confidence=min_confidence, log=switch_log, aligner=aligner)


def _device_latency(plan: Plan, given_s: float | None) -> tuple[float, str]:
    """The latency a real actuator's plan is checked against (s) and how to name it."""
    if given_s is not None:
        return float(given_s), f"switch latency {float(given_s) * 1e3:g} ms (--switch-latency)"
    from joulebound.hw.latency import device_switch_latency

    try:
        dl = device_switch_latency(plan.device)
    except JouleboundError:
        dl = None
    if dl is None:
        return plan.switch_latency_s, (f"switch latency {plan.switch_latency_s * 1e3:g} ms the "
                                       "plan was made for")
    return dl.seconds, f"{plan.device} clock-switch latency {dl.describe()}"


@contextmanager
def controlled(plan: Plan | str | Path, actuator: str = "dry-run", **kwargs: Any
               ) -> Iterator[Any]:
    """Apply ``plan`` to the ops run inside the ``with`` block; yields the :class:`Controller`.

    For use inside a training script, e.g. one controller per ``torchrun`` rank::

        from joulebound.runtime import controlled
        rank = int(os.environ.get("LOCAL_RANK", 0))
        with controlled("plan.json", "helper", socket_path="/run/joulebound/clocks.sock",
                        gpu=rank, switch_log=f"switches.{rank}.jsonl") as ctl:
            train()
        print(ctl.stats)

    Keyword arguments are those of :func:`build_controller`. Clocks are reset on the way out,
    also on exceptions."""
    ctl = build_controller(plan, actuator, **kwargs)
    try:
        with ctl.hook():
            yield ctl
    finally:
        ctl.close()


def run(cmd: Sequence[str], plan: Plan | None, actuator: str = "dry-run", *,
        char: Any = None, switch_log: str | None = None, switch_latency_s: float | None = None,
        min_confidence: float = 0.75, socket_path: str | None = None, gpu: int | str = 0,
        record_path: str | None = None, quiet_stdout: bool = False,
        force: bool = False, snap: bool = False, observer: Any = None) -> RunResult:
    """Run ``cmd`` (a Python script) under the controller; see the module docstring.

    ``observer`` (optional) follows the run step by step: ``observer.start(controller)`` before
    the script, ``observer.step(controller)`` after every ``torch.optim`` optimizer step and
    ``observer.finish(controller)`` after the script, before the clocks are reset (``run
    --verify``'s block schedule, :class:`joulebound.measure.verify.ABVerifier`).

    SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the script (unless inherited as ignored): the clocks
    are restored at once by the guard's restorer thread, the switch log is closed and the result
    says ``stopped_by``, with exit code ``128 + signal``."""
    with stop_signals_raise():
        return _run(cmd, plan, actuator, char=char, switch_log=switch_log,
                    switch_latency_s=switch_latency_s, min_confidence=min_confidence,
                    socket_path=socket_path, gpu=gpu, record_path=record_path,
                    quiet_stdout=quiet_stdout, force=force, snap=snap, observer=observer)


def _run_stoppable(res: RunResult, kind: str, target: str, argv: list[str],
                   quiet_stdout: bool) -> None:
    """Run the script; a stop signal ends it with ``128 + signal`` and ``res.stopped_by``."""
    import signal as _signal

    from joulebound.runtime.guard import guard

    try:
        res.exit_code = _run_target(kind, target, argv, quiet_stdout)
    except KeyboardInterrupt:
        res.exit_code, res.stopped_by = 128 + _signal.SIGINT, "SIGINT"
    except SignalExit as exc:
        res.exit_code, res.stopped_by = exc.code, _signal.Signals(exc.signum).name  # type: ignore[assignment]
    finally:
        guard().hold()   # winding up: a further signal restores clocks, a second one ends it


def _run(cmd: Sequence[str], plan: Plan | None, actuator: str, *, char: Any,
         switch_log: str | None, switch_latency_s: float | None, min_confidence: float,
         socket_path: str | None, gpu: int | str, record_path: str | None,
         quiet_stdout: bool, force: bool = False, snap: bool = False,
         observer: Any = None) -> RunResult:
    kind, target, argv = split_command(cmd)
    res = RunResult(command=list(cmd), exit_code=0, actuator=actuator, duration_s=0.0,
                    switch_log=switch_log)
    t0 = time.monotonic()
    if plan is None:
        if record_path is None:
            raise JouleboundError("give --plan PLAN.json (or --record TRACE.json to record one)")
        return _record(res, cmd, kind, target, argv, record_path, quiet_stdout, t0)

    ctl = build_controller(plan, actuator, char=char, switch_log=switch_log,
                           switch_latency_s=switch_latency_s, min_confidence=min_confidence,
                           socket_path=socket_path, gpu=gpu, notes=res.notes, force=force,
                           snap=snap)
    res.plan_summary = plan_summary(plan)
    act = ctl.actuator
    try:
        if observer is None:
            with ctl.hook():
                _run_stoppable(res, kind, target, argv, quiet_stdout)
        else:
            try:
                observer.start(ctl)
                with _optimizer_steps(lambda: observer.step(ctl)), ctl.hook():
                    _run_stoppable(res, kind, target, argv, quiet_stdout)
            finally:
                observer.finish(ctl)
    finally:
        ctl.close()
    res.duration_s = time.monotonic() - t0
    for n in getattr(act, "notes", []):
        if n not in res.notes:
            res.notes.append(n)
    if res.stopped_by:
        res.notes.append(f"stopped by {res.stopped_by} after {ctl.stats.ops:,} ops; the clocks "
                         "were restored to the defaults")
    st = ctl.stats
    res.ops, res.planned_ops, res.safe_ops = st.ops, st.planned_ops, st.safe_ops
    count_switches(res, st.switches, act)
    res.predictor_accuracy = ctl.predictor.stats.accuracy if st.ops else None
    res.period_ops = ctl.predictor.period
    if actuator == "simulated":
        _add_modeled_totals(res, act.totals)
    if act.current != AUTO:   # pragma: no cover - close() always resets
        res.notes.append("warning: clocks were not back at the default")
    return res


def count_switches(res: RunResult, requested: int, act: Any) -> None:
    """Fill ``res``'s switch counts: ``requested`` by the controller, realized and skipped as
    ``act`` counted them, the rest not made (the three add up to ``requested``)."""
    realized, skipped = int(getattr(act, "realized", 0)), int(getattr(act, "skipped", 0))
    res.switches_requested, res.switches_realized = int(requested), realized
    res.switches_skipped = skipped
    res.switches_not_made = int(requested) - realized - skipped
    if res.switches_not_made < 0:   # pragma: no cover - each request is counted at most once
        log.warning("switch counts disagree: %d requested, %d made, %d skipped", requested,
                    realized, skipped)
        res.switches_not_made = 0


def _add_modeled_totals(res: RunResult, tot: Any) -> None:
    """The simulated actuator's modeled time and energy (and the baseline's) into ``res``."""
    res.modeled_time_s, res.modeled_energy_j = tot.time_s, tot.energy_j
    res.baseline_time_s, res.baseline_energy_j = tot.baseline_time_s, tot.baseline_energy_j
    if tot.baseline_energy_j > 0 and tot.baseline_time_s > 0:
        res.modeled_energy_delta = tot.energy_j / tot.baseline_energy_j - 1.0
        res.modeled_time_delta = tot.time_s / tot.baseline_time_s - 1.0
    res.unknown_ops = tot.unknown_ops
    if len(tot.per_iteration) >= 2:
        res.modeled_iteration_energy_j = float(np.median([e for _, e in
                                                          tot.per_iteration[1:]]))
    res.notes.append("modeled figures cover the ops that match the plan; "
                     f"{tot.unknown_ops} other ops have no modeled cost")


def _record(res: RunResult, cmd: Sequence[str], kind: str, target: str, argv: list[str],
            record_path: str, quiet_stdout: bool, t0: float) -> RunResult:
    """Run the script with no plan, find its repeating iteration in the op stream and save it
    as a trace at ``record_path``.

    Raises:
        JouleboundError: too few optimizer steps, no repeating iteration, or one that is not
            a training step.
    """
    from joulebound.runtime.controller import trace_from_ops
    from joulebound.runtime.hooks import OpStream

    interner = KeyInterner()
    pred = NextKernelPredictor()
    keys: list[int] = []
    locked_end = [0, 0]   # (history length, period) at the last fully confident op

    def on_op(k: int) -> None:
        pred.observe(k)
        keys.append(k)
        if pred.confidence >= 1.0 and pred.period:
            locked_end[0], locked_end[1] = len(keys), pred.period

    step_marks: list[int] = []   # ops seen when each optimizer step returned
    with _optimizer_steps(lambda: step_marks.append(len(keys))), \
            OpStream(on_op=on_op, interner=interner, capture_args=True) as stream:
        _run_stoppable(res, kind, target, argv, quiet_stdout)
    res.duration_s = time.monotonic() - t0
    res.actuator = "none (recording)"
    end, period = locked_end
    res.ops = len(keys)
    res.recorded_steps = len(step_marks)
    res.predictor_accuracy = pred.stats.accuracy if keys else None
    if res.stopped_by and (not period or end < period):
        res.notes.append(f"stopped by {res.stopped_by} before a repeating iteration was "
                         "found: no trace written")
        return res
    _check_recorded_iteration(step_marks, end, period)
    if not step_marks:
        res.notes.append("no torch.optim optimizer step was seen: the recorded iteration is "
                         "the repeating op pattern found, not checked against steps")
    names = [str(interner.key(k)) for k in keys[end - period:end]]
    specs = {str(interner.key(k)): v for k, v in stream.arg_specs.items()}
    trace = trace_from_ops(names, name=Path(target).stem, arg_specs=specs)
    trace.meta.update({"command": list(cmd), "period_ops": period})
    trace.save(record_path)
    res.recorded_trace, res.recorded_ops, res.period_ops = str(record_path), period, period
    res.notes.append("the recorded iteration starts at an arbitrary op of the cycle; the "
                     "controller re-synchronises within a few ops")
    return res


def _check_recorded_iteration(step_marks: list[int], end: int, period: int) -> None:
    """Refuse a recording whose repeating op pattern (``period`` ops, last fully locked at op
    ``end``) is missing or is not one training step (``step_marks``: ops seen at each step)."""
    if step_marks and len(step_marks) < MIN_RECORD_STEPS:
        raise JouleboundError(
            f"the script made {len(step_marks)} optimizer step(s); recording needs at least "
            f"{MIN_RECORD_STEPS} (the first step differs, and the iteration must repeat to be "
            f"found): run it for {MIN_RECORD_STEPS} or more training steps while recording")
    if not period or end < period:
        raise JouleboundError("no repeating iteration was found in the op stream: run more "
                              f"training steps (at least {MIN_RECORD_STEPS}) while recording")
    if len(step_marks) >= 2:
        steps = np.diff(step_marks)
        whole = {int(steps[-k:].sum()) for k in range(1, min(len(steps), 4) + 1)}
        if period not in whole:
            raise JouleboundError(
                f"the repeating op pattern found ({period} ops) is not one training step "
                f"({int(steps[-1])} ops between the last two optimizer steps): the steps "
                "differ from each other (evaluation, changing shapes?). Record a run whose "
                "steps are alike, e.g. without evaluation")
