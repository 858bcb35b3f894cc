"""Units typed by users: durations need a unit or are seconds (warned when large); --slowdown
takes 5% and refuses a bare 5 (+500 %)."""

from __future__ import annotations

import pytest

from joulebound.cli import main
from joulebound.core.errors import JouleboundError
from joulebound.core.units import duration_warning, parse_duration, parse_fraction, split_duration


@pytest.mark.parametrize("text, seconds, unit", [
    ("6ms", 6e-3, True), ("150 ms", 0.15, True), ("200us", 2e-4, True), ("200µs", 2e-4, True),
    ("1.5s", 1.5, True), ("2min", 120.0, True), ("90m", 5400.0, True), ("1h", 3600.0, True),
    ("12h", 43200.0, True), ("2d", 172800.0, True), ("0.02", 0.02, False), (0.5, 0.5, False),
])
def test_durations(text, seconds, unit):
    assert split_duration(text) == (pytest.approx(seconds), unit)


@pytest.mark.parametrize("bad", ["soon", "-1ms", "nan", "inf s", "5 parsecs"])
def test_bad_durations_are_refused(bad):
    with pytest.raises(JouleboundError):
        parse_duration(bad)


def test_a_bare_switch_latency_above_one_second_is_warned():
    msg = duration_warning("6", "--switch-latency")
    assert msg is not None and "6000 ms" in msg and "6ms" in msg
    assert duration_warning("6ms", "--switch-latency") is None
    assert duration_warning("0.006", "--switch-latency") is None
    assert duration_warning("2s", "--switch-latency") is None   # a unit says it is meant


@pytest.mark.parametrize("text, value", [("5%", 0.05), ("0.5 %", 0.005), ("0.05", 0.05),
                                         ("-0.5", -0.5), ("150%", 1.5), ("0", 0.0)])
def test_fractions(text, value):
    assert parse_fraction(text) == pytest.approx(value)


def test_a_bare_fraction_of_one_or_more_needs_force():
    with pytest.raises(JouleboundError, match=r"5% for 5 percent.*--force"):
        parse_fraction("5")
    with pytest.raises(JouleboundError):
        parse_fraction("1")
    assert parse_fraction("5", force=True) == 5.0


def test_plan_cli_reads_percent_and_refuses_bare_five(capsys):
    assert main(["plan", "gpt2-small", "--device", "rtx3080ti", "--granularity", "iteration",
                 "--slowdown", "5"]) == 2
    assert "+500 %" in capsys.readouterr().err
    assert main(["plan", "gpt2-small", "--device", "rtx3080ti", "--granularity", "iteration",
                 "--slowdown", "5%", "--switch-latency", "0", "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["slowdown"] == pytest.approx(0.05)


def test_plan_warns_about_a_bare_large_switch_latency(capsys):
    assert main(["plan", "gpt2-small", "--device", "rtx3080ti", "--granularity", "iteration",
                 "--switch-latency", "6", "--json"]) == 0
    assert "read as 6 s (6000 ms)" in " ".join(capsys.readouterr().err.split())


def test_one_duration_grammar_for_every_option(capsys):
    """--deadline (advise) and --switch-latency (plan) read the same grammar: before, 90m was
    accepted only by --deadline and 6ms only by --switch-latency (issue 29)."""
    import json

    job = ["--preset", "bert-base", "--seq", "128", "--global-batch", "256", "--tokens", "1e8",
           "--max-gpus", "2", "--device", "a40", "--json"]
    got = set()
    for dl in ("90m", "5400s", "5400000ms", "1.5h"):
        assert main(["advise", *job, "--deadline", dl]) == 0, capsys.readouterr().err
        got.add(capsys.readouterr().out)
    assert len(got) == 1
    assert main(["advise", *job, "--deadline", "soon"]) == 2
    assert "cannot parse duration 'soon'" in capsys.readouterr().err
    for lat in ("6ms", "0.006", "6000us"):
        assert main(["plan", "gpt2-small", "--device", "rtx3080ti", "--granularity", "iteration",
                     "--slowdown", "1%", "--switch-latency", lat, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["switch_latency_s"] == pytest.approx(0.006)
