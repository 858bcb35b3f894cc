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


def warn_memory(trace: Any, spec: Any) -> str | None:
    """Print (stderr) and return a warning when an analytic trace's training step needs more
    memory than the device has (:func:`joulebound.workload.memory.trace_memory_warning`)."""
    from ..workload.memory import trace_memory_warning

    text = trace_memory_warning(trace, spec) if spec is not None else None
    if text:
        err_console.print(f"[yellow]warning[/]: {text}", highlight=False)
    return text


def reflow(text: str) -> str:
    """Join the lines of each paragraph of a ``--help`` text so the terminal, not the source,
    decides line breaks (paragraphs are separated by blank lines)."""
    return "\n\n".join(" ".join(par.split()) for par in text.strip().split("\n\n"))
