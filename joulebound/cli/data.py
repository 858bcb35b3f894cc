"""``joulebound data fetch``: download the measurement data ``validate`` and ``fit --data`` use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

data_app = typer.Typer(help="The third-party measurement data: `joulebound data fetch` downloads "
                       "it from the upstream repositories at the recorded commits, checked "
                       "against the manifest.", no_args_is_help=True)


@data_app.command("fetch")
def fetch_command(
    to: Annotated[Path, typer.Option("--to", help="Folder to fill (created if missing); point "
                                     "--data or JOULEBOUND_DATA at it afterwards. The default "
                                     "./shared/data is found without either.")] = Path(
                                         "shared/data"),
    only: Annotated[str | None, typer.Option(
        help="Comma list of data sets (top-level folders, e.g. perseus,zeus_nsdi23); default "
        "all.")] = None,
    source: Annotated[str, typer.Option(
        "--from", help="Where raw files are read: {URL}/{owner/repo}/{commit}/{path} (a file:// "
        "mirror works the same way).")] = "https://raw.githubusercontent.com",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a summary.")
                       ] = False,
) -> None:
    """Download every openly licensed measurement file at the commit the manifest records,
    check it (SHA-256, or the upstream git blob id for files stored compressed), and write it
    under --to. Files written or derived by the data's maintainers are not upstream files and
    are listed, not fetched. Exits 1 when a file failed its check (nothing is written for it)."""
    from joulebound.cli._common import console, err_console, print_json
    from joulebound.core.datafetch import fetch

    sets = [s.strip() for s in only.split(",") if s.strip()] if only else None
    with console.status("fetching") as status:
        res = fetch(to, base_url=source, only=sets,
                    progress=lambda i, n, p: status.update(f"fetching {i}/{n}: {p}"))
    if as_json:
        print_json({"to": str(to), **res.to_json()})
    else:
        console.print(f"{len(res.fetched)} file(s) fetched, {len(res.kept)} already present and "
                      f"correct, {len(res.failed)} failed, {len(res.not_fetchable)} not upstream "
                      f"files (written or derived by the data's maintainers: "
                      f"{', '.join(res.not_fetchable[:4])}{' ...' if len(res.not_fetchable) > 4 else ''})",
                      highlight=False)
        console.print(f"data folder: {to} (joulebound validate --data {to})", highlight=False)
    for p, why in list(res.failed.items())[:10]:
        err_console.print(f"[red]failed[/]: {p}: {why}", highlight=False)
    if not res.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
