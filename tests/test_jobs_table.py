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


def _table(path, n: int, bad_rows=()) -> None:
    lines = ["name,layers,hidden,heads,seq,batch,gpus,strategy,device"]
    for i in range(1, n + 1):
        heads = 7 if i in bad_rows else 12          # 768 / 7: refused with its reason
        lines.append(f"j{i},{2 + i % 3},768,{heads},128,4,1,single,a100-sxm4-80gb")
    path.write_text("\n".join(lines) + "\n")


def test_predict_jobs_is_predicted_in_chunks_in_order_with_the_same_output(tmp_path, capsys,
                                                                            monkeypatch):
    """100,000 rows held at once took 1.0 GB (3.1 GB with --json) (issue 30 item 14): rows
    are now read, predicted and written a chunk at a time. The output is that of one pass."""
    import json

    from joulebound.jobs import mechanistic
    from joulebound.jobs import predict as jp

    src = tmp_path / "jobs.csv"
    _table(src, 7, bad_rows=(5,))
    whole = tmp_path / "whole.csv"
    assert main(["predict", "--jobs", str(src), "-o", str(whole), "--json"]) == 1
    whole_json = json.loads(capsys.readouterr().out)

    sizes: list[int] = []
    real = mechanistic.predict_many
    built = []

    def spy(jobs, prm=None):
        sizes.append(len(jobs))
        assert len(built) <= sum(sizes)       # rows are read as they are predicted
        return real(jobs, prm)

    from joulebound.jobs import job as jobmod

    orig = jobmod.job_from_options

    def counting(**kw):
        built.append(kw.get("name"))
        return orig(**kw)

    monkeypatch.setattr(jobmod, "job_from_options", counting)
    monkeypatch.setattr(mechanistic, "predict_many", spy)
    monkeypatch.setattr(jp, "CHUNK_ROWS", 3)
    out = tmp_path / "chunked.csv"
    assert main(["predict", "--jobs", str(src), "-o", str(out), "--json"]) == 1
    captured = capsys.readouterr()
    assert sizes == [3, 3, 1]
    assert len(built) == 7
    assert json.loads(captured.out) == whole_json
    assert [r["row"] for r in whole_json] == list(range(1, 8)) and "error" in whole_json[4]
    assert out.read_text() == whole.read_text()
    assert "row(s) 5;" in captured.err                  # the refused row is named
    assert not (tmp_path / "chunked.csv.part").exists()
