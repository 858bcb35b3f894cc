"""``joulebound report runs.db [RUN]``: an HTML report of a measured run; ``report A.db B.db`` /
``report runs.db RUN1 RUN2``: a page comparing runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HELP = """Write an HTML report of one measured run from a store (joulebound measure --db,
EnergyMeter(store=), the training callbacks), or a page comparing several runs.

One run: the same conclusion this command prints, a summary (command, status and exit code,
carbon-intensity setting, duration, GPU and CPU+DRAM energy, each labeled measured or modeled),
host vs GPU energy, the power timeline per device (average power between samples, from the
stored energy), the windows drawn as they nest (an epoch inside the training, intervals inside
an epoch: never added up), the windows with their flags, and the sensor notes.

RUN is a run id or a unique prefix of one (`joulebound runs DB` lists them); default: the
newest run. --carbon-intensity G_PER_KWH (or a region code such as FR) adds gCO2e (default: the
setting stored with the run, if any).

Several runs: `report A.db B.db` (the newest run of each), `report runs.db RUN1 RUN2`, or
`report A.db RUN1 B.db:RUN2`: a comparison page (each run's figures with their labels; changes
against the first run only between figures of the same label) in -o (default: compare-report).

Example: joulebound report runs.db 3f2a -o run-report/"""


def report_command(
    db: Annotated[str, typer.Argument(help="The SQLite store.")],
    runs: Annotated[list[str] | None, typer.Argument(
        help="Run ids or prefixes (default: the newest); other stores (B.db, B.db:RUN) to "
             "compare with.", show_default=False)] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Report folder (default: run-report-<id>, or compare-report).")
    ] = None,
    carbon_intensity: Annotated[str | None, typer.Option(
        help="gCO2e per kWh, a country/aggregate code (FR, US, WORLD), a cloud region "
        "(aws:us-east-1), or live:ZONE (Electricity Maps).")] = None,
) -> None:
    from joulebound.cli._common import console
    from joulebound.core.paths import ensure_output_dir
    from joulebound.energy.carbon import carbon_intensity as parse_ci
    from joulebound.report.run_html import conclusion, write_run_report

    ci = parse_ci(carbon_intensity)
    picked = _pick_runs(db, runs or [])
    if len(picked) > 1:
        from joulebound.report.compare_html import compare_conclusion, write_compare_report

        out = ensure_output_dir(output or Path("compare-report"), "report folder (-o)")
        index = write_compare_report(picked, out)
        console.print(compare_conclusion(picked), highlight=False)
        console.print(f"report written to {index}", highlight=False)
        return
    (data, _store), = picked
    out = ensure_output_dir(output or Path(f"run-report-{data.run['run_id'][:8]}"),
                            "report folder (-o)")
    index = write_run_report(data, out, carbon=ci)
    console.print(conclusion(data, ci), highlight=False)
    console.print(f"report written to {index}", highlight=False)


def _open(path: str):  # type: ignore[no-untyped-def]
    from joulebound.core.errors import JouleboundError
    from joulebound.energy.store import Store

    if not Path(path).exists():
        raise JouleboundError(f"store {path} does not exist (create one with "
                              f"joulebound measure --db {path} -- CMD)")
    return Store(path, readonly=True)


def _load(path: str, run: str | None):  # type: ignore[no-untyped-def]
    """One run of the store at ``path`` (the newest for ``None``), skipped rows reported."""
    from joulebound.cli._common import print_skipped_rows
    from joulebound.report.run_html import load_run

    st = _open(path)
    try:
        return load_run(st, run), path
    finally:
        print_skipped_rows(st)       # rows that could not be read: skipped, each named


def _pick_runs(db: str, targets: list[str]) -> list:  # type: ignore[type-arg]
    """The runs a report shows: run ids of ``db`` in ``targets``, then other stores
    (``B.db`` its newest run, ``B.db:RUN`` that run); ``db``'s newest when no run of it is
    named."""
    own = [t for t in targets if not _is_store(t)]
    others = [t for t in targets if _is_store(t)]
    picked = [_load(db, r) for r in own] or [_load(db, None)]
    for t in others:
        path, _, run = t.partition(":") if not Path(t).exists() else (t, "", "")
        picked.append(_load(path, run or None))
    return picked


def _is_store(target: str) -> bool:
    """``target`` names another store (an existing file, or ``FILE:RUN``), not a run id."""
    path = target.partition(":")[0]
    return Path(target).is_file() or (":" in target and Path(path).is_file())


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("report", help=reflow(HELP))(report_command)
