"""The ``joulebound`` command line.

Each command lives in its own module in this package and exposes ``register(app)``; modules are
discovered automatically, so adding a command never touches this file. Command modules import
heavy dependencies (torch, scipy, matplotlib) inside the command functions so that
``joulebound --help`` stays fast.

User errors (:class:`~joulebound.core.errors.JouleboundError`) are printed without a traceback and exit
with status 2.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import sqlite3
import sys

import typer
from rich.console import Console
from rich.markup import escape

from joulebound.core.errors import JouleboundError

app = typer.Typer(
    name="joulebound",
    help="Predict, measure and cut the energy of transformer training on GPUs.\n\n"
    "Every number printed is labeled measured (a sensor), modeled (joulebound's models) or "
    "published (a paper's figure, cited).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        from joulebound import __version__

        typer.echo(f"joulebound {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Predict, measure and cut the energy of transformer training on GPUs."""


#: ``--help`` panels, in pipeline order; a command not listed goes under "Other".
PANELS: dict[str, tuple[str, ...]] = {
    "Start here": ("demo",),
    "Workloads and GPUs": ("devices", "trace", "profile"),
    "Kernel-level DVFS (predict, plan, check)": ("characterize", "calibrate", "plan", "validate",
                                                 "data"),
    "Apply clocks while training": ("run", "reset-clocks", "clock-helper"),
    "Measure energy": ("measure", "runs", "report", "sweep"),
    "Energy scaling model (before a run)": ("predict", "advise", "fit"),
}


def _first_sentence(text: str) -> str:
    """The first sentence of a help text's first paragraph, on one line (for the command list)."""
    first = " ".join(text.strip().split("\n\n")[0].split())
    depth = 0
    for i, ch in enumerate(first):
        depth += (ch == "(") - (ch == ")")
        if ch == "." and depth == 0 and first[i + 1:i + 2] in (" ", ""):
            return first[: i + 1]
    return first.rstrip(":") + ("." if first and not first.endswith(".") else "")


def _register_all() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)
    panel_of = {name: panel for panel, names in PANELS.items() for name in names}
    order = {name: i for i, name in enumerate(panel_of)}
    for group in (app.registered_commands, app.registered_groups):
        for cmd in group:
            name = cmd.name or (cmd.callback.__name__.replace("_", "-") if cmd.callback else "")
            cmd.rich_help_panel = cmd.rich_help_panel or panel_of.get(name, "Other")
            sub = getattr(cmd, "typer_instance", None)
            target = sub.info if sub is not None and not isinstance(cmd.help, str) else cmd
            text = target.help if isinstance(target.help, str) else None
            text = text or (inspect.getdoc(cmd.callback) if cmd.callback else "") or ""
            if not isinstance(target.short_help, str):
                target.short_help = _first_sentence(text)
        group.sort(key=lambda c: order.get(c.name or "", len(order)))


_register_all()


def _flags_show_no_value() -> None:
    """typer prints a flag's type in ``--help`` (``--version <bool>``, ``--json <bool>``) as if
    it took a true/false value; a flag takes none, so it shows no type (options with a value
    keep theirs: ``<int>``, ``<str>``)."""
    from typer import core

    shown = core.TyperOption.display_type_rich
    if getattr(shown, "_flags_show_no_value", False):
        return

    def display_type_rich(self: core.TyperOption, ctx: typer.Context) -> str | None:
        if self.is_flag and self.metavar is None:
            return None
        return shown(self, ctx)

    display_type_rich._flags_show_no_value = True  # type: ignore[attr-defined]
    core.TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


@functools.lru_cache(maxsize=1)
def _click_command() -> typer.core.TyperGroup:
    """The click command tree of :data:`app`, built once per process: ``app(...)`` rebuilds it
    from every command's signature on each call (~0.1 s of CPU), which a caller running several
    commands in one process (a test suite, a notebook) would pay every time."""
    _flags_show_no_value()
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI; user errors print a message (no traceback) and exit with 2.

    Usage errors (bad option values, missing arguments) are reported by click in its usual form.
    """
    try:
        _click_command()(args=argv, standalone_mode=True)
    except JouleboundError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):
            raise
        # a damaged page of a store met while reading it (a large store is not read page by
        # page when it is opened: joulebound.core.sqlitedb.check_readable)
        err_console.print(f"[bold red]error:[/] an SQLite store is damaged: SQLite met a bad page "
                          f"while reading it ({escape(str(exc))}). `joulebound runs DB --check` "
                          "checks a whole file; try `sqlite3 DB .recover` to salvage its rows",
                          highlight=False, soft_wrap=True)
        return 2
    except SystemExit as exc:
        if exc.code is None:
            return 0
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
