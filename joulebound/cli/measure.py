"""``joulebound measure -- CMD ARGS``: run a command and measure its time and energy."""

from __future__ import annotations

from typing import Annotated

import typer

from joulebound.core.provenance import MODELED

HELP = """Run CMD, sample GPU power meanwhile, and print the energy per device and in total,
average and peak power, and the duration. The child's exit code is passed through (127: command
not found, 126: not executable, as in a shell). SIGTERM, SIGHUP, SIGQUIT and SIGINT sent to
joulebound reach every process of the command (its process group: `measure -- bash train.sh`
stops the training too); if it has not ended --kill-after seconds later, its group gets SIGKILL.
The command can read the terminal, and Ctrl-C / Ctrl-Z reach it, as if it ran alone. If
joulebound itself is killed (SIGKILL), the command gets SIGKILL too (Linux) and the next open of
the store marks the run "lost", keeping its samples.

GPU energy comes from the NVML energy counter (or integrated NVML power where a GPU has no
counter), labeled measured, and only from a sensor; --backend simulated gives modeled figures.
CPU package and DRAM energy come from RAPL when readable (measured: the whole package), else
from a model of the command's process tree alone (W per busy thread × its CPU-seconds, 4 W per
thread for a CPU not in joulebound's table as in CodeCarbon 3.x; 0.375 W/GB × its resident
memory; labeled modeled, with an interval; --cpu-tdp W sets the TDP of the visible threads).
Measured and modeled figures are never summed. Without a GPU sensor it says so; the duration is
always recorded (measured).

--carbon-intensity adds gCO2e beside each energy total. It takes gCO2e per kWh (350), a
country (FR, FRA or France; every country), an aggregate (WORLD, EU, EUROPE, ASIA, OECD, ...),
a cloud region (aws:us-east-1, gcp:europe-west4, azure:westeurope: its country's average) —
the latest annual average published by Ember (2022-2024, CC BY 4.0; the year is printed;
`python -m joulebound.energy.carbon --list` lists them) — or live:ZONE, the Electricity Maps
figure of now (your key in $ELECTRICITYMAPS_API_KEY; ZONE e.g. FR, DE, US-CAL-CISO).

The run, its window and its power samples go to a SQLite store (WAL; samples committed every
second), which survives the child or joulebound being killed: --db FILE, by default runs.db in the
current folder ($JOULEBOUND_DB names another), which `joulebound runs` lists; --no-db records
nothing. The summary says where the run went.

Nothing is lost silently: failed sensor reads and samples or windows the store could not take
are counted, shown in the notes and under --json "losses"; with --strict they make the exit code
3 (when the command itself succeeded). A damaged --db file is refused before CMD starts.

--json prints: command, exit_code, signal, duration_s, duration_provenance, energy_j (GPU; null
without a GPU sensor), energy_uncertainty_j, cpu_energy_j, cpu_provenance, cpu_energy_interval_j
([low, high] when modeled), avg_power_w, peak_power_w, provenance (of energy_j; null without a
GPU sensor), flags, carbon_intensity_g_per_kwh, carbon_source, gco2e, cpu_gco2e, devices [{uuid,
index, energy_j, avg_power_w, peak_power_w, source, kind, n_samples, provenance,
uncertainty_j}], notes, losses {read_failures, samples_not_stored, windows_not_stored},
stopped_by, killed, backend, run_id, db. With --json the command's own stdout goes to stderr.

Example: joulebound measure --db runs.db -- python train.py --epochs 1"""


def measure_command(
    cmd: Annotated[list[str], typer.Argument(help="The command to run (after --).",
                                             show_default=False)],
    interval: Annotated[float, typer.Option(help="Power sampling period (s).", min=0.001)] = 0.1,
    db: Annotated[str | None, typer.Option(
        help="SQLite store to record the run in (default: $JOULEBOUND_DB, else runs.db in the "
        "current folder).", show_default=False)] = None,
    no_db: Annotated[bool, typer.Option("--no-db", help="Record the run nowhere.")] = False,
    gpus: Annotated[str, typer.Option(
        help="CUDA-visible GPU indices to meter, e.g. 0,1 (default: all visible).")] = "all",
    backend: Annotated[str, typer.Option(
        help="auto | nvml | rapl | cpu-model | simulated | none.")] = "auto",
    cpu_tdp: Annotated[float | None, typer.Option(
        help="TDP (W) of the visible CPU threads for the modeled CPU energy (default: looked "
        "up, else 4 W per thread).",
        min=0.001)] = None,
    carbon_intensity: Annotated[str | None, typer.Option(
        help="gCO2e per kWh, a country/aggregate code (FR, US, WORLD), a cloud region "
        "(aws:us-east-1), or live:ZONE (Electricity Maps).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    kill_after: Annotated[float, typer.Option(
        help="SIGKILL the command's process group this many s after a stop signal.",
        min=0.1)] = 30.0,
    strict: Annotated[bool, typer.Option(
        help="Exit 3 when any reading or stored sample/window was lost (command succeeded).")
    ] = False,
) -> None:
    from joulebound.cli._common import console, print_json
    from joulebound.energy.carbon import carbon_intensity as parse_ci
    from joulebound.energy.command import CommandNotRunnable, run_command

    ci = parse_ci(carbon_intensity)   # a bad value fails before the command runs
    db = _store_for(db, no_db)
    kwargs = {"cpu_tdp_w": cpu_tdp} if cpu_tdp is not None and backend in ("auto",
                                                                           "cpu-model") else {}
    # with --json the child's stdout goes to stderr, so that stdout is one JSON document
    try:
        from dataclasses import asdict

        res = run_command(cmd, backend=backend, gpus=gpus, interval_s=interval, db=db,
                          child_stdout=2 if as_json else None, kill_after_s=kill_after,
                          meta={"carbon": asdict(ci)} if ci is not None else None, **kwargs)
    except CommandNotRunnable as exc:
        from joulebound.cli import err_console

        err_console.print(f"joulebound measure: {exc}", highlight=False, markup=False)
        raise SystemExit(exc.code) from None
    res.carbon = ci
    if as_json:
        print_json(res.to_json())
    else:
        render(res, console)
    # SystemExit, not typer.Exit: cli.main() returns SystemExit codes (typer.Exit codes are lost
    # under standalone_mode=False)
    if strict and res.exit_code == 0 and res.lost_anything:
        raise SystemExit(3)
    raise SystemExit(res.exit_code)


def _store_for(db: str | None, no_db: bool) -> str | None:
    """The store ``measure`` records into: ``--db``, none with ``--no-db``, else the default
    (:func:`joulebound.energy.store.default_store_path`) where its folder can be written (a note
    says when not)."""
    import os

    from joulebound.core.errors import JouleboundError
    from joulebound.energy.store import default_store_path

    if no_db and db is not None:
        raise JouleboundError("--db FILE and --no-db: give one (--no-db records the run nowhere)")
    if no_db or db is not None:
        return db
    path = default_store_path()
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(path) and not os.access(folder, os.W_OK | os.X_OK):
        from joulebound.cli._common import err_console

        # the default only: a command is not refused because of where it was started
        err_console.print(f"note: the run is not recorded: {folder} cannot be written (the "
                          f"default store is {path}); --db FILE records it elsewhere",
                          highlight=False)
        return None
    return path


def render(res, console) -> None:  # type: ignore[no-untyped-def]
    """Print the summary table of a :class:`~joulebound.energy.command.CommandResult`."""
    from rich.table import Table

    w = res.window
    ended = (f"killed by signal {res.signal}" if res.signal
             else f"exit code {res.exit_code}")
    import shlex

    console.print(f"[bold]{shlex.join(res.command)}[/] — {ended}, duration "
                  f"{w.duration_s:.3f} s (measured)", highlight=False)
    gpus = [d for d in w.devices if d.kind == "gpu"]
    ci = res.carbon
    if not w.devices:
        console.print("[yellow]No energy sensor on this machine[/]: energy was not measured "
                      "(reported as unknown, not 0); only the duration was recorded.")
    elif not gpus:
        console.print("[yellow]No GPU energy sensor on this machine[/]: GPU energy was not "
                      "measured (reported as unknown, not 0).")
    if w.devices:
        t = Table(title=f"Energy (backend {w.backend})", title_justify="left")
        cols = ["device", "energy J", "avg W", "peak W", "provenance", "source"]
        if ci is not None:
            cols.insert(2, "gCO2e")
        for col in cols:
            t.add_column(col, justify="left" if col in ("device", "provenance", "source")
                         else "right", no_wrap=col != "source")

        def f(x: float | None, d: int = 1) -> str:
            return "—" if x is None else f"{x:,.{d}f}"

        def row(*cells: str, energy: float | None = None) -> None:
            cells_ = list(cells)
            if ci is not None:
                cells_.insert(2, f(ci.grams(energy), 3))
            t.add_row(*cells_)

        for d in w.devices:
            row(f"{d.kind} {d.index}", f(d.energy_j), f(d.avg_power_w), f(d.peak_power_w),
                d.provenance or w.provenance, d.source, energy=d.energy_j)
        if gpus:
            row("[bold]GPU total[/]", f(w.energy_j), f(w.avg_power_w), f(w.peak_power_w),
                w.provenance, "", energy=w.energy_j)
        if w.cpu_energy_j is not None:
            row("[bold]CPU+DRAM total[/]", f(w.cpu_energy_j), f(w.cpu_energy_j / w.duration_s)
                if w.duration_s > 0 else "—", "", w.cpu_provenance or "", "",
                energy=w.cpu_energy_j)
        console.print(t)
        if w.energy_j is not None:
            console.print(f"GPU: {w.energy_j / 3.6e6:.6f} kWh ({w.provenance})"
                          + (f", {ci.grams(w.energy_j):.3f} gCO2e" if ci else ""),
                          highlight=False)
        if w.cpu_energy_j is not None:
            iv = res.cpu_energy_interval_j
            span = (f"; interval {iv[0]:,.1f}–{iv[1]:,.1f} J (the process tree alone / "
                    "plus an idle floor of 10 % of the visible CPUs' TDP; no held-out error: no "
                    "RAPL counter to check it against)"
                    if iv else "")
            label = ("[yellow]modeled[/]" if w.cpu_provenance == MODELED
                     else w.cpu_provenance)
            console.print(f"CPU+DRAM: {w.cpu_energy_j:,.1f} J = {w.cpu_energy_j / 3.6e6:.6f} kWh "
                          f"({label}{span})"
                          + (f", {ci.grams(w.cpu_energy_j):.3f} gCO2e" if ci else ""),
                          highlight=False)
        if ci is not None:
            console.print(f"[dim]carbon intensity {ci.describe()}[/]", highlight=False)
        if w.energy_uncertainty_j:
            console.print(f"  uncertainty: ±{w.energy_uncertainty_j:,.1f} J (sensor update "
                          "period and unmeasured gaps)", highlight=False)
    if w.flags:
        console.print(f"flags: {', '.join(w.flags)}")
    if res.lost_anything:
        lo = res.losses
        console.print(f"[yellow]lost[/]: {lo['read_failures']:,} failed sensor read(s), "
                      f"{lo['samples_not_stored']:,} sample(s) and {lo['windows_not_stored']:,} "
                      "window(s) not stored (see the notes)", highlight=False)
    if res.stopped_by:
        console.print(f"stopped by {res.stopped_by}" + (" (then SIGKILL)" if res.killed else ""),
                      highlight=False)
    from rich.markup import escape

    for n in res.notes:
        console.print(f"[dim]note: {escape(n)}[/]", highlight=False)
    if res.db:
        console.print(f"[dim]recorded in {escape(res.db)} (run {res.run_id}; `joulebound runs "
                      f"{escape(res.db)}` lists it; --db FILE records elsewhere, --no-db "
                      "nowhere)[/]", highlight=False)


RUNS_HELP = """List the runs recorded in a measurement store (joulebound measure --db, EnergyMeter(store=),
the Hugging Face callback) with their windows, or export the store's tables.

--export DIR writes runs, windows and samples as CSV (default) or Parquet (--format parquet), or
every window's duration and energy as Prometheus gauges (--format prometheus: DIR/metrics.prom,
for node_exporter's textfile collector): joulebound_window_energy_joules per device,
joulebound_window_energy_total_joules per scope (gpu, cpu_dram), each labeled with its
provenance and its nesting (depth "0": top-level windows; sum one depth only, e.g.
sum by (run, device) (joulebound_window_energy_joules{depth="0"})).
Status: running, finished, failed, killed (a signal; exit_code 128 + N) or lost (its process died
without closing the run: SIGKILL, a crash; found when the store is opened, samples kept).
The table shows each run's longest window: its duration (measured), GPU energy and CPU+DRAM
energy, each with its own label (measured or modeled); GPU energy without a GPU sensor reads
"unknown (no sensor)", never 0. Exit "—": the run was metered inside a Python process
(EnergyMeter, the training callbacks), not a command.
--json prints a list of runs: {run_id, started_at, ended_at, status, command, exit_code, backend,
provenance (of the longest window's GPU energy; null without one), cpu_provenance, rank, host,
carbon (the carbon-intensity setting stored with the run, or null), parent_run (the run of the
`joulebound measure` whose command metered itself into this run, e.g. with the training callbacks;
else null), notes,
windows: [{name, start_s, end_s, duration_s, duration_provenance, energy_j, provenance (of
energy_j; null when energy_j is), cpu_energy_j, cpu_provenance, flags}]}. Energy is null where
no sensor was available."""


def runs_command(
    db: Annotated[str | None, typer.Argument(
        help="The SQLite store (default: $JOULEBOUND_DB, else runs.db in the current folder).",
        show_default=False)] = None,
    export: Annotated[str | None, typer.Option(help="Export the tables to this folder.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="csv | parquet | prometheus")] = "csv",
    last: Annotated[int, typer.Option(help="Show the last N runs.", min=1)] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    check: Annotated[bool, typer.Option(
        "--check", help="First check every page of the file (SQLite quick_check; reads the "
        "whole file: seconds for a GB store; an open checks only the header and schema of a "
        "store over 64 MiB).")] = False,
) -> None:
    from pathlib import Path

    from joulebound.cli._common import err_console
    from joulebound.core import sqlitedb
    from joulebound.core.errors import JouleboundError
    from joulebound.energy.store import Store

    if db is None:
        from joulebound.energy.store import default_store_path

        db = default_store_path()
    if not Path(db).exists():
        raise JouleboundError(f"store {db} does not exist (create one with "
                              f"joulebound measure --db {db} -- CMD)")
    st = Store(db, readonly=True)
    if check:
        st.check_integrity()
        err_console.print(f"store {db}: every page checked (SQLite quick_check): ok",
                          highlight=False)
    with sqlitedb.reading(db):
        _runs(st, db, export, fmt, last, as_json)


def _runs(st, db: str, export: str | None, fmt: str, last: int, as_json: bool) -> None:
    """What ``runs`` prints or exports from the open store ``st``."""
    from pathlib import Path

    from joulebound.cli._common import console, print_json, print_skipped_rows

    if export is not None:
        from joulebound.core.paths import ensure_output_dir

        ensure_output_dir(export, "export folder (--export)")
    if export is not None and fmt == "prometheus":
        from joulebound.energy.export import prometheus_text

        out = Path(export)
        out.mkdir(parents=True, exist_ok=True)
        text = prometheus_text({r["run_id"]: st.windows(r["run_id"]) for r in st.runs()[-last:]})
        (out / "metrics.prom").write_text(text)
        print_skipped_rows(st)
        console.print(f"wrote {out / 'metrics.prom'}")
        return
    if export is not None:
        paths = st.export(export, fmt)
        console.print("wrote " + ", ".join(str(p) for p in paths))
        return
    from joulebound.report.runs import energy_cell, run_doc

    runs = st.runs()[-last:]
    docs = [run_doc(r, st.windows(r["run_id"])) for r in runs]
    print_skipped_rows(st)
    if as_json:
        print_json(docs)
        return
    from rich.table import Table


    t = Table(title=f"Runs in {db} (last {len(docs)}): each run's longest window",
              title_justify="left", box=None, pad_edge=False,
              header_style="bold underline")
    t.add_column("run", no_wrap=True, min_width=8)
    t.add_column("status (exit)", no_wrap=True, min_width=12)
    t.add_column("command", overflow="ellipsis", no_wrap=True, max_width=16, min_width=8)
    t.add_column("duration s\n(measured)", justify="right", no_wrap=True, min_width=10)
    t.add_column("GPU J", justify="right", no_wrap=True, min_width=9)
    t.add_column("CPU+DRAM J", justify="right", no_wrap=True, min_width=12)
    for d in docs:
        ws = d["windows"]
        longest = max(ws, key=lambda w: w["duration_s"], default=None)
        code = d["exit_code"]
        if longest is None:
            dur = gpu = cpu = "—"
        else:
            dur = f"{longest['duration_s']:,.3f}"
            gpu = energy_cell(longest["energy_j"], longest["provenance"])
            cpu = ("—" if longest["cpu_energy_j"] is None else
                   energy_cell(longest["cpu_energy_j"], longest["cpu_provenance"]))
        t.add_row(d["run_id"][:8], f"{d['status']} ({'—' if code is None else code})",
                  _short_command(d["command"] or ""), dur, gpu, cpu)
    console.print(t)


def _short_command(command: str) -> str:
    """``command`` with its program's folder left out (``/usr/bin/python x.py`` → ``python
    x.py``), for a narrow table; ``runs --json`` keeps it whole."""
    import os

    head, _, rest = command.partition(" ")
    return f"{os.path.basename(head) or head} {rest}".strip()


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("measure", help=reflow(HELP), context_settings={"ignore_unknown_options": True})(
        measure_command)
    app.command("runs", help=reflow(RUNS_HELP))(runs_command)
