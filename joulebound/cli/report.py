"""``joulebound report runs.db [RUN]``: an HTML report of a measured run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HELP = """Write an HTML report of one measured run from a store (joulebound measure --db,
EnergyMeter(store=), the training callbacks): the same conclusion this command prints, a summary
(status, duration, GPU and CPU+DRAM energy, each labeled measured or modeled), host vs GPU
energy, the power timeline per device from the stored samples, the energy per window, the
windows with their flags, and the sensor notes.

RUN is a run id or a unique prefix of one (`joulebound runs DB` lists them); default: the
newest run. --carbon-intensity G_PER_KWH (or a region code such as FR) adds gCO2e.

Example: joulebound report runs.db 3f2a -o run-report/"""


def report_command(
    db: Annotated[str, typer.Argument(help="The SQLite store.")],
    run: Annotated[str | None, typer.Argument(help="Run id or prefix (default: newest).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Report folder (default: run-report-<id>).")] = None,
    carbon_intensity: Annotated[str | None, typer.Option(
        help="gCO2e per kWh, a country/aggregate code (FR, US, WORLD), a cloud region "
        "(aws:us-east-1), or live:ZONE (Electricity Maps).")] = None,
) -> None:
    from joulebound.cli._common import console, print_skipped_rows
    from joulebound.core.errors import JouleboundError
    from joulebound.core.paths import ensure_output_dir
    from joulebound.energy.carbon import carbon_intensity as parse_ci
    from joulebound.energy.store import Store
    from joulebound.report.run_html import conclusion, load_run, write_run_report

    if not Path(db).exists():
        raise JouleboundError(f"store {db} does not exist (create one with "
                              f"joulebound measure --db {db} -- CMD)")
    ci = parse_ci(carbon_intensity)
    st = Store(db, readonly=True)
    try:
        data = load_run(st, run)
    finally:
        print_skipped_rows(st)       # rows that could not be read: skipped, each named
    out = ensure_output_dir(output or Path(f"run-report-{data.run['run_id'][:8]}"),
                            "report folder (-o)")
    index = write_run_report(data, out, carbon=ci)
    console.print(conclusion(data, ci), highlight=False)
    console.print(f"report written to {index}", highlight=False)


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("report", help=reflow(HELP))(report_command)
