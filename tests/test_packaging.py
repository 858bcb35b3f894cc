"""What a new user meets first: --version, python -m joulebound, the data folder from the env."""

from __future__ import annotations

import json
import subprocess
import sys

import joulebound
from joulebound.cli import main


def test_version_flag(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"joulebound {joulebound.__version__}"


def test_python_dash_m_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "joulebound", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "python -m joulebound" in out.stdout and "measure" in out.stdout


def test_fit_reads_the_data_folder_from_joulebound_data(shared_data, tmp_path, monkeypatch,
                                                       capsys):
    # a data folder of its own holding only the Zeus subset: fit without --data must use it
    (tmp_path / "README.md").write_text("test data folder\n")
    (tmp_path / "zeus_nsdi23").symlink_to(shared_data / "zeus_nsdi23")
    monkeypatch.setenv("JOULEBOUND_DATA", str(tmp_path))
    assert main(["fit", "--laws", "prerun", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["dataset"] for d in doc["datasets"]] == ["zeus_nsdi23"]
