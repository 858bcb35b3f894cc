"""Progress for long work, always on stderr (stdout may carry a table or --json).

* :func:`progress_bar` — one bar for counted work (sweeps, calibration): count, elapsed time, ETA
  and a per-item description, the same columns wherever joulebound shows progress;
* :class:`StepProgress` — the current step of a command made of a few long steps (``plan``,
  ``validate``): a spinner on a terminal, a line per step still running after 2 s elsewhere."""

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


class StepProgress:
    """Names the current step of a long command on stderr.

    Call it with each step's message (``progress("kernel plan ...")``). On a terminal it is a live
    spinner line (rich's status) that the next step replaces and that disappears at the end; off
    a terminal (a pipe, a CI log) it writes a line ``label: message (still running after N s)``
    for each step that has run longer than ``after_s`` seconds, so a log never shows a silent
    minute and a quick command stays quiet; ``after_s=0`` writes ``label: message`` as each step
    starts (for commands whose every step is long). ``enabled=False`` makes it a no-op. Use it as
    a context manager."""

    def __init__(self, label: str, *, enabled: bool = True, after_s: float = 2.0,
                 console: Any = None) -> None:
        from rich.console import Console

        self.label, self.enabled, self.after_s = label, enabled, after_s
        self.console = console or Console(stderr=True)
        self._status: Any = None
        self._timer: Any = None
        self._step = 0

    def __enter__(self) -> StepProgress:
        if self.enabled and self.console.is_terminal:
            self._status = self.console.status(f"{self.label} ...", spinner="dots")
            self._status.start()
        return self

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        if self._status is not None:
            self._status.update(f"{self.label}: {message}")
            return
        import threading

        self._cancel()
        self._step += 1
        step = self._step
        if self.after_s <= 0:
            self.console.print(f"{self.label}: {message}", highlight=False, soft_wrap=True)
            return

        def late() -> None:
            if step == self._step:   # still the current step
                self.console.print(f"{self.label}: {message} (still running after "
                                   f"{self.after_s:g} s)", highlight=False, soft_wrap=True)

        self._timer = threading.Timer(self.after_s, late)
        self._timer.daemon = True
        self._timer.start()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __exit__(self, *exc: object) -> None:
        self._step += 1
        self._cancel()
        if self._status is not None:
            self._status.stop()
            self._status = None
