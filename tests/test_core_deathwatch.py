"""The death watch (``joulebound.core.deathwatch``): acts when its owner vanishes, never after a
clean ``done``, and the owner's forked children do not keep it waiting."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

OWNER = """
import os, sys, time
from pathlib import Path
from joulebound.core import deathwatch
out = Path(sys.argv[1])
def on_death(told):
    out.write_bytes(b"died:" + told)
    return 0
w = deathwatch.start(on_death)
w.tell(b"pid 42")
how = sys.argv[2]
if how == "done":
    w.done()
    out.write_text("clean")
elif how == "fork":
    if os.fork() == 0:          # a worker that outlives its parent for a while
        time.sleep(3)
        os._exit(0)
os._exit(3)
"""


def _owner(tmp_path: Path, how: str) -> Path:
    out = tmp_path / f"{how}.txt"
    r = subprocess.run([sys.executable, "-c", OWNER, str(out), how], timeout=60)
    assert r.returncode == 3
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (out.exists() and out.read_text()):
        time.sleep(0.02)
    time.sleep(0.2)
    return out


def test_the_watcher_acts_when_its_owner_dies_and_gets_what_it_was_told(tmp_path):
    assert _owner(tmp_path, "_exit").read_bytes() == b"died:pid 42"


def test_the_watcher_does_nothing_after_done(tmp_path):
    assert _owner(tmp_path, "done").read_text() == "clean"


def test_a_forked_child_does_not_keep_the_watcher_waiting(tmp_path):
    t0 = time.monotonic()
    out = _owner(tmp_path, "fork")
    assert out.read_bytes() == b"died:pid 42" and time.monotonic() - t0 < 2.5
