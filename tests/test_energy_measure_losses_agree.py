"""``measure``'s lost-sample count and its note say the same figure (issue 30, item 14: the
attack saw 1,590 in ``losses`` and 1,495 in the note). Both read the sampler's one counter
(``Sampler.samples_lost``); the note was taken before the meter's close flushed the last
samples (and counted those the store refused), the count after."""

from __future__ import annotations

import re
import sqlite3
import sys

from joulebound.energy.store import Store


def _refusing_store(monkeypatch) -> None:
    def full(self, run_id, rows):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "add_samples", full)


def test_the_lost_sample_note_and_the_count_agree(tmp_path, monkeypatch):
    from joulebound.energy.command import run_command

    _refusing_store(monkeypatch)
    res = run_command([sys.executable, "-c", "import time; time.sleep(0.4)"],
                      backend="simulated", interval_s=0.01, db=tmp_path / "runs.db")
    lost = res.losses["samples_not_stored"]
    assert lost > 0
    note = [n for n in res.notes if "could not be written to the store" in n]
    assert len(note) == 1, res.notes                    # was: no note (all lost at the close)
    assert int(re.match(r"([\d,]+) power sample", note[0]).group(1).replace(",", "")) == lost


def test_the_cli_prints_one_figure(tmp_path, monkeypatch, capsys):
    from joulebound.cli import main

    _refusing_store(monkeypatch)
    rc = main(["measure", "--backend", "simulated", "--interval", "0.01", "--db",
               str(tmp_path / "runs.db"), "--json", "--", sys.executable, "-c",
               "import time; time.sleep(0.4)"])
    import json

    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    lost = out["losses"]["samples_not_stored"]
    figures = {int(m.replace(",", "")) for n in out["notes"]
               for m in re.findall(r"([\d,]+) power sample", n)}
    assert lost > 0 and figures == {lost}, (lost, out["notes"])
