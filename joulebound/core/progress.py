"""One progress bar for long work (sweeps, calibration): rich, on stderr, with count, elapsed time,
ETA and a per-item description — the same columns wherever joulebound shows progress."""

from __future__ import annotations

from typing import Any


def progress_bar(label: str, *, enabled: bool = True, transient: bool = False) -> Any:
    """A ``rich.progress.Progress`` titled ``label`` writing to stderr (not started; use it as a
    context manager or call ``start()``); ``enabled=False`` makes it a no-op."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn(f"[bold]{label}[/]"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    TextColumn("{task.description}"), console=Console(stderr=True),
                    disable=not enabled, transient=transient)
