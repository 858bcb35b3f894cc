"""Output folders the user names (report -o, runs --export): a file in the way or an unwritable
place is a one-line error with exit code 2 and nothing overwritten (issue 28, item 6: both were
raw tracebacks)."""

from __future__ import annotations

import sys

import pytest

from joulebound.cli import main
from joulebound.core.errors import JouleboundError
from joulebound.core.paths import ensure_output_dir
from joulebound.energy.command import run_command


@pytest.fixture(scope="module")
def good_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("store") / "good.db"
    run_command([sys.executable, "-c", "pass"], backend="simulated", db=db, interval_s=0.02)
    return db


@pytest.mark.parametrize("args", [
    ["report", "{db}", "-o", "{file}"],
    ["report", "{db}", "-o", "{file}/sub"],
    ["runs", "{db}", "--export", "{file}"],
    ["runs", "{db}", "--export", "{file}", "--format", "prometheus"],
    ["runs", "{db}", "--export", "/proc/joulebound-not-here"],
])
def test_a_bad_output_folder_is_a_one_line_error(args, good_db, tmp_path, capsys):
    blocker = tmp_path / "EXISTING"
    blocker.write_text("keep me\n")
    argv = [a.format(db=good_db, file=blocker) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "nothing was written" in err, err
    assert blocker.read_text() == "keep me\n"


def test_a_good_output_folder_is_made_with_its_parents(good_db, tmp_path):
    out = tmp_path / "a" / "b"
    assert main(["report", str(good_db), "-o", str(out)]) == 0
    assert (out / "index.html").is_file()
    assert main(["runs", str(good_db), "--export", str(tmp_path / "x" / "y")]) == 0
    assert (tmp_path / "x" / "y" / "windows.csv").is_file()


def test_ensure_output_dir_refuses_a_file_and_keeps_it(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(JouleboundError, match="is a file"):
        ensure_output_dir(f / "deeper" / "still")
    assert f.read_text() == "x"
    assert ensure_output_dir(tmp_path / "new" / "dir").is_dir()
