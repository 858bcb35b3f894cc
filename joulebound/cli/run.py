"""``joulebound run --plan plan.json --actuator dry-run -- python train.py``: apply a clock plan."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from joulebound.core.provenance import MEASURED, MODELED

HELP = """Run a PyTorch training script with a clock plan applied while it trains.

The script runs in-process (runpy) inside a TorchDispatchMode that shows every op (forward,
backward, optimizer) to the controller before it runs. The controller predicts where in the
planned iteration the stream is, issues each clock switch one switch latency early, falls back to
the safe (default) clocks on unknown ops or low confidence, and returns to the plan afterwards.

Actuators: dry-run (log only), simulated (modeled time/energy from --characterization; labeled
modeled), nvml (needs root/CAP_SYS_ADMIN; never on a shared/lent GPU), helper (asks
`joulebound clock-helper` over --socket). --gpu is the GPU as CUDA numbers it (an index into
CUDA_VISIBLE_DEVICES when set) or a UUID; one owner per GPU: a second run on the same GPU is
refused. Clocks are reset to the defaults on exit, on errors and on SIGINT/SIGTERM/SIGHUP/SIGQUIT
(the summary is still printed; exit code 128 + signal); after a hard kill (SIGKILL) use
`joulebound reset-clocks`.

The plan's kernel names must be op keys: record them first with
`joulebound run --record ops.json -- python train.py` (one kernel per op of one iteration), make a
plan over that trace, then run with --plan.

--json (the script's own stdout then goes to stderr) keys: command, exit_code, actuator, duration_s (measured), ops, planned_ops, safe_ops,
switches_requested (switches the controller asked for: the switch log's lines), switches_realized
(switches the actuator made: each reached NVML or the helper and succeeded), switches_skipped
(another client held the GPU or the helper was away), switches_not_made (the rest: already at that
pair, replaced while deferred by the helper's rate limit, or after a stop signal); requested =
realized + skipped + not made; switches and skipped_switches are older names of
switches_requested and switches_skipped. Further keys: switch_log, predictor_accuracy, period_ops, modeled_time_s, modeled_energy_j,
modeled_iteration_energy_j, unknown_ops, baseline_time_s, baseline_energy_j (the same ops at
the default clocks), modeled_energy_delta, modeled_time_delta (simulated only; modeled),
plan_summary {baseline_time_s, baseline_energy_j, time_s, energy_j, energy_delta, time_delta,
switches, phases, switch_latency_s, granularity, provenance} (the plan file's figures per
iteration), recorded_trace, recorded_ops, recorded_steps, notes, stopped_by (signal name or
null), verify (with --verify, below), duration_provenance, modeled_provenance.

Recording needs at least 3 optimizer steps. With --actuator nvml/helper a plan whose phases are
shorter than the switch latency (--switch-latency, else the GPU's catalog latency) is refused
unless --force, and every clock pair the plan commands is checked against the live GPU's clock
table before the script starts: unsupported pairs are named and the plan refused, or mapped to the
nearest supported pair with --snap (a note lists them). Through the helper, a GPU another client
holds is not an error: training goes on without changing clocks (switches_skipped in --json and a
note say how many switches were skipped); nor is a helper that restarts or stops: training goes on
at the default clocks, the helper is tried again with backoff (0.5 s doubling to 30 s) and the plan
applies again once it is back (a note says how often the connection was lost).
Switch log (JSON lines): t_s, op, label (plan position, -1 unknown), config, reason
(plan | unknown-op | low-confidence | unexpected-future | hold | close), key.

--verify (with --plan, on a GPU you own: --actuator nvml or helper) measures the saving: the run
alternates blocks of optimizer steps at the default clocks (auto) and under the plan, in ABBA order
after one discarded warm-up block per arm, meters each block with the GPU's energy counter (NVML),
and prints the MEASURED change of energy and time per step with its 90 % confidence interval beside
the plan's MODELED one. Block length: each metered block spans >= 100 energy-counter updates
(--verify-block-steps to set it); blocks are added until the energy interval is within +-1 pp
(checked after every ABBA group, from 4 pairs on) or --verify-max-blocks; the rest of the run is
under the plan. Give the script enough steps (the warm-up alone takes 2 blocks; an error says how
many when it had too few). --actuator dry-run --verify is an A/A check (no clock changes): its
interval is the noise floor. --json adds verify {measured {energy_delta_pct, energy_ci90_pct,
time_delta_pct, time_ci90_pct, pairs, blocks, steps_per_block, target_reached, method, windows,
...}, modeled {energy_delta_pct, time_delta_pct}}.

Example: joulebound run --plan plan.json --actuator dry-run --switch-log sw.jsonl -- python train.py"""


def run_command(
    cmd: Annotated[list[str], typer.Argument(help="python SCRIPT ARGS (after --).",
                                             show_default=False)],
    plan: Annotated[str | None, typer.Option(help="Plan JSON (kernel names = op keys).")] = None,
    actuator: Annotated[str, typer.Option(
        help="dry-run | simulated | nvml | helper.")] = "dry-run",
    switch_log: Annotated[str | None, typer.Option(help="Write the switch log here (JSONL).")] = None,
    characterization: Annotated[str | None, typer.Option(
        help="Characterization .npz of the plan's kernels (simulated actuator, latency).")] = None,
    switch_latency: Annotated[str | None, typer.Option(
        help="Clock-switch latency with a unit, e.g. 20ms (a bare number is seconds; default: "
        "the plan's).")] = None,
    min_confidence: Annotated[float, typer.Option(
        help="Predictor confidence needed to follow the plan.", min=0.0, max=1.0)] = 0.75,
    socket: Annotated[str | None, typer.Option(help="Clock helper socket (--actuator helper).")] = None,
    gpu: Annotated[str, typer.Option(
        help="GPU to control: CUDA-visible index (through CUDA_VISIBLE_DEVICES) or UUID.")] = "0",
    record: Annotated[str | None, typer.Option(
        help="Record one iteration's op keys as a trace JSON instead of applying a plan.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Apply a plan with phases shorter than the GPU's switch latency "
        "(nvml/helper actuators).")] = False,
    snap: Annotated[bool, typer.Option(
        "--snap", help="Map clock pairs the GPU does not support to the nearest supported pair "
        "(with a note) instead of refusing the plan (nvml/helper actuators).")] = False,
    verify: Annotated[bool, typer.Option(
        "--verify", help="Measure the plan's saving: alternate blocks of steps at auto and under "
        "the plan (ABBA), meter each, print the measured saving with its 90 % interval beside "
        "the modeled one (needs --plan and a readable GPU energy counter).")] = False,
    verify_block_steps: Annotated[int | None, typer.Option(
        help="--verify: metered optimizer steps per block (default: enough for 100 "
        "energy-counter updates).", show_default=False)] = None,
    verify_max_blocks: Annotated[int, typer.Option(
        help="--verify: most blocks (2 warm-up included) before the alternation stops even if "
        "the +-1 pp target is not reached.")] = 40,
) -> None:
    from joulebound.cli._common import console, fmt_pct, print_json
    from joulebound.core.errors import JouleboundError, did_you_mean
    from joulebound.gpumodel.characterization import Characterization
    from joulebound.planning.plan import Plan
    from joulebound.runtime.session import ACTUATORS, run

    if actuator not in ACTUATORS:
        raise JouleboundError(f"unknown --actuator {actuator!r}.{did_you_mean(actuator, ACTUATORS)}")
    from joulebound.core.units import duration_warning, parse_duration

    lat = None
    if switch_latency is not None:
        lat = parse_duration(switch_latency)
        warn = duration_warning(switch_latency, "--switch-latency")
        if warn:
            from joulebound.cli._common import err_console

            err_console.print(f"[yellow]warning:[/] {warn}", highlight=False)
    if verify:
        from joulebound.measure.verify import check_options

        if plan is None:
            raise JouleboundError("--verify compares the plan against the default clocks: give "
                                  "--plan PLAN.json (record and plan first, see --help)")
        if record is not None:
            raise JouleboundError("--verify and --record cannot be combined: record first, "
                                  "plan, then run --plan PLAN.json --verify")
        check_options(block_steps=verify_block_steps, max_blocks=verify_max_blocks)
    elif verify_block_steps is not None or verify_max_blocks != 40:
        raise JouleboundError("--verify-block-steps / --verify-max-blocks only apply with "
                              "--verify")
    p = Plan.load(plan) if plan else None
    char = Characterization.load(characterization) if characterization else None
    kw = dict(char=char, switch_log=switch_log, switch_latency_s=lat,
              min_confidence=min_confidence, socket_path=socket,
              gpu=int(gpu) if gpu.strip().isdigit() else gpu.strip(), record_path=record,
              quiet_stdout=as_json, force=force, snap=snap)
    if verify:
        from joulebound.measure.verify import run_verified

        res = run_verified(cmd, p, actuator, block_steps=verify_block_steps,
                           max_blocks=verify_max_blocks, **kw)
    else:
        res = run(cmd, p, actuator, **kw)
    if as_json:
        print_json(res.to_json())
    else:
        from rich.table import Table

        t = Table(title=f"joulebound run ({res.actuator})", title_justify="left")
        t.add_column("quantity")
        t.add_column("value", justify="right")
        t.add_column("provenance")
        t.add_row("exit code", str(res.exit_code) + (f" (stopped by {res.stopped_by})"
                                                     if res.stopped_by else ""), "")
        t.add_row("duration", f"{res.duration_s:.3f} s", MEASURED)
        t.add_row("ops seen", f"{res.ops:,}", "")
        if res.recorded_trace:
            if res.recorded_steps:
                t.add_row("optimizer steps seen", f"{res.recorded_steps:,}", "")
            t.add_row("iteration length", f"{res.recorded_ops} ops", "")
            t.add_row("trace written", res.recorded_trace, "")
        else:
            t.add_row("ops under the plan", f"{res.planned_ops:,}", "")
            t.add_row("ops at the safe clocks", f"{res.safe_ops:,}", "")
            _switch_rows(t, res)
        if res.predictor_accuracy is not None:
            # hits / predictions over this run's op stream: observed, so measured
            t.add_row("next-op prediction accuracy", f"{res.predictor_accuracy * 100:.2f} %",
                      MEASURED)
        ps = res.plan_summary
        if ps is not None:
            t.add_row("plan: energy per iteration",
                      f"{ps['energy_j']:.4f} J vs {ps['baseline_energy_j']:.4f} J", MODELED)
            t.add_row("plan: energy / time change", f"{fmt_pct(ps['energy_delta'])} / "
                      f"{fmt_pct(ps['time_delta'])}", MODELED)
            t.add_row("plan: switches per iteration",
                      f"{ps['switches']} (planned for L = {ps['switch_latency_s'] * 1e3:g} ms)", "")
        if res.modeled_energy_j is not None:
            t.add_row("GPU time (plan's kernels)", f"{res.modeled_time_s:.6f} s", MODELED)
            t.add_row("GPU energy (plan's kernels)", f"{res.modeled_energy_j:.4f} J", MODELED)
            if res.baseline_energy_j is not None:
                t.add_row("same ops at default clocks", f"{res.baseline_energy_j:.4f} J, "
                          f"{res.baseline_time_s:.6f} s", MODELED)
            if res.modeled_energy_delta is not None:
                t.add_row("this run: energy / time change", f"{fmt_pct(res.modeled_energy_delta)}"
                          f" / {fmt_pct(res.modeled_time_delta)}", MODELED)
            if res.modeled_iteration_energy_j is not None:
                t.add_row("energy per iteration (median)",
                          f"{res.modeled_iteration_energy_j:.4f} J", MODELED)
        if res.switch_log:
            t.add_row("switch log", res.switch_log, "")
        if res.verify is not None:
            _verify_rows(t, res.verify)
        console.print(t)
        if res.verify is not None:
            console.print(_verify_sentence(res.verify), highlight=False)
        if res.modeled_energy_delta is not None:
            saved = -res.modeled_energy_delta
            console.print(f"Modeled saving on this run: {fmt_pct(saved, signed=False)} of the GPU "
                          f"energy of the ops under the plan ({res.modeled_energy_j:.4f} J instead "
                          f"of {res.baseline_energy_j:.4f} J at the default clocks), time "
                          f"{fmt_pct(res.modeled_time_delta)} (modeled, simulated actuator).",
                          highlight=False)
        elif ps is not None and actuator == "dry-run":
            console.print(f"The plan predicts {fmt_pct(ps['energy_delta'])} energy and "
                          f"{fmt_pct(ps['time_delta'])} time per iteration against the default "
                          "clocks (modeled); the dry-run changed no clock. --actuator simulated "
                          "charges this run's ops.", highlight=False)
        for n in res.notes:
            console.print(f"note: {n}", highlight=False)
    raise SystemExit(res.exit_code)


def _switch_rows(t: Any, res: Any) -> None:
    """The switch counts of the run table, as ``--json`` has them (requested = made + skipped +
    not made)."""
    where = {"nvml": "reached the GPU", "helper": "reached the GPU",
             "simulated": "simulated, no GPU", "dry-run": "logged only, no GPU"}
    t.add_row("clock switches requested (by the controller)", f"{res.switches_requested:,}", "")
    t.add_row(f"clock switches made ({where.get(res.actuator, res.actuator)})",
              f"{res.switches_realized:,}", "")
    if res.switches_skipped:
        t.add_row("clock switches skipped (GPU busy or helper unreachable; see notes)",
                  f"{res.switches_skipped:,}", "")
    if res.switches_not_made:
        t.add_row("clock switches not made (already at that pair, replaced while deferred, or "
                  "after the stop)", f"{res.switches_not_made:,}", "")


def _ci(lo_hi: list[float]) -> str:
    return f"[{lo_hi[0]:+.2f}, {lo_hi[1]:+.2f}] %"


def _verify_rows(t: Any, v: dict[str, Any]) -> None:
    """The measured A/B rows of the run table (the plan's modeled rows are already in it)."""
    m = v["measured"]
    prov = m["provenance"]
    t.add_row("verify: energy per step change", f"{m['energy_delta_pct']:+.2f} % "
              f"{_ci(m['energy_ci90_pct'])} (90 % CI)", prov)
    t.add_row("verify: time per step change", f"{m['time_delta_pct']:+.2f} % "
              f"{_ci(m['time_ci90_pct'])} (90 % CI)", prov)
    t.add_row("verify: ops held at auto (auto blocks)", f"{m['held_ops']:,}", "")
    t.add_row("verify: pairs x steps per block", f"{m['pairs']} x {m['steps_per_block']} "
              f"({m['blocks']} blocks, ABBA; target +-{m['target_half_width_pp']:g} pp "
              f"{'reached' if m['target_reached'] else 'NOT reached'})", "")


def _verify_sentence(v: dict[str, Any]) -> str:
    """One sentence: the measured saving with its interval beside the modeled one."""
    m, mod = v["measured"], v["modeled"]
    lo, hi = m["energy_ci90_pct"]
    src = ("on this GPU (its energy counter)" if m["provenance"] == MEASURED
           else f"({m['provenance']})")
    s = (f"Measured {src}: energy per step {m['energy_delta_pct']:+.2f} % "
         f"(90 % CI {lo:+.2f} to {hi:+.2f} %), time per step {m['time_delta_pct']:+.2f} % "
         f"({m['time_ci90_pct'][0]:+.2f} to {m['time_ci90_pct'][1]:+.2f} %) under the plan vs "
         f"the default clocks, from {m['pairs']} pairs of {m['steps_per_block']}-step blocks.")
    if mod is not None and mod["energy_delta_pct"] is not None:
        s += (f" Modeled (the plan's prediction): {mod['energy_delta_pct']:+.2f} % energy, "
              f"{mod['time_delta_pct']:+.2f} % time.")
    return s


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("run", help=reflow(HELP), context_settings={"ignore_unknown_options": True})(run_command)
