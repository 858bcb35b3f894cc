"""Helpers shared by CLI commands: JSON output, provenance-labeled tables."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

from ..fmt import fmt_pct  # noqa: F401 - re-exported for CLI modules

console = Console()
err_console = Console(stderr=True)


def print_json(obj: Any) -> None:
    """Print ``obj`` as JSON on stdout (numpy values converted)."""
    from ..jsonio import _default

    json.dump(obj, sys.stdout, indent=1, default=_default)
    sys.stdout.write("\n")


def reflow(text: str) -> str:
    """Join the lines of each paragraph of a ``--help`` text so the terminal, not the source,
    decides line breaks (paragraphs are separated by blank lines)."""
    return "\n\n".join(" ".join(par.split()) for par in text.strip().split("\n\n"))
