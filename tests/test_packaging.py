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


def test_validate_outside_a_checkout_says_where_the_research_checks_are(tmp_path):
    """The research package (validation checks) is not in the wheel: a package copy without
    research/ beside it and a working folder without one gives the clear error, not an
    ImportError; in the checkout the same call finds research/."""
    import shutil
    from pathlib import Path

    pkg = Path(joulebound.__file__).resolve().parent
    site = tmp_path / "site"
    shutil.copytree(pkg, site / "joulebound", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("from joulebound.cli.validate import load_research\n"
            "from joulebound.core.errors import JouleboundError\n"
            "try:\n    load_research()\nexcept JouleboundError as e:\n    print('ERR', e)\n"
            "else:\n    print('FOUND')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("ERR") and "source repository" in out.stdout, out
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                         env={**env, "PYTHONPATH": str(pkg.parent)},
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "FOUND", out
