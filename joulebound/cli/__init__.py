"""The ``joulebound`` command line.

Each command lives in its own module in this package and exposes ``register(app)``; modules are
discovered automatically, so adding a command never touches this file. Command modules import
heavy dependencies (torch, scipy, matplotlib) inside the command functions so that
``joulebound --help`` stays fast.

User errors (:class:`~joulebound.errors.JouleboundError`) are printed without a traceback and exit
with status 2.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import JouleboundError

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


def _register_all() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


_register_all()


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI; user errors print a message (no traceback) and exit with 2.

    Usage errors (bad option values, missing arguments) are reported by click in its usual form.
    """
    try:
        app(args=argv, standalone_mode=True)
    except JouleboundError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
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
