"""The jobs table of ``predict --jobs`` / ``advise --jobs``: bad files give one clear line
(issue 30 item 13) and big tables are predicted in bounded chunks (issue 30 item 14)."""

from __future__ import annotations

import csv

import pytest

from joulebound.cli import main
from joulebound.core.errors import JouleboundError
from joulebound.jobs import jobtable


def test_a_cell_over_the_csv_field_limit_names_row_and_column(tmp_path, capsys):
    """A cell over csv's 128 KiB field limit raised ``_csv.Error`` with a traceback."""
    f = tmp_path / "jobs.csv"
    big = "x" * (csv.field_size_limit() + 10)
    f.write_text(f"name,layers\nok,12\n{big},12\n")
    with pytest.raises(JouleboundError, match=r"row 2, column 'name'.*longer than"):
        jobtable.read_jobs(f, {})
    assert main(["predict", "--jobs", str(f)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "row 2" in err and "'name'" in err
    assert len(err) < 600          # the cell itself is not echoed
