"""core.progress.StepProgress: off a terminal, a step still running after ``after_s`` is named on
stderr once, a quick step stays quiet; ``after_s=0`` names every step as it starts."""
from __future__ import annotations

import io
import time

from rich.console import Console

from joulebound.core.progress import StepProgress


def _console(buf: io.StringIO) -> Console:
    return Console(file=buf, force_terminal=False, width=200)


def test_only_steps_over_the_threshold_are_named():
    buf = io.StringIO()
    with StepProgress("plan", after_s=0.05, console=_console(buf)) as step:
        step("slow step")
        time.sleep(0.4)
        step("quick step")
    time.sleep(0.1)                       # a cancelled timer must not fire after the end
    out = buf.getvalue()
    assert "plan: slow step (still running after 0.05 s)" in out
    assert "quick step" not in out and out.count("\n") == 1


def test_after_zero_names_every_step_and_disabled_is_silent():
    buf = io.StringIO()
    with StepProgress("validate", after_s=0, console=_console(buf)) as step:
        step("(a) one")
        step("(b) two")
    assert buf.getvalue().splitlines() == ["validate: (a) one", "validate: (b) two"]
    buf = io.StringIO()
    with StepProgress("validate", enabled=False, after_s=0, console=_console(buf)) as step:
        step("(a) one")
    assert buf.getvalue() == ""
