"""A new user's walk through the README's usage sections, in order, on this CPU-only machine:
measure, runs, report, the Hugging Face callback, predict, plan, run --actuator dry-run. Every
command is one the README shows (the test fails when the README changes it), and every figure
each one prints carries exactly one provenance label (tests/_labels.py says what that means).

A second test walks one run of each kind (no GPU, a fake-NVML GPU, the simulated GPU) through
every output -- measure --json, the Python objects, the store, runs --json, the runs table, the
report's conclusion and HTML -- and checks that each figure has the same one label everywhere.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests._labels import figures, labels, problems

torch = pytest.importorskip("torch")

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
TRAIN = "s = 0\nfor i in range(300000):\n    s += i * i\nprint('done', s > 0)\n"
T = "python -m joulebound.testing.demo_gpt"

#: lines the rule does not hold for yet, each with its owner and why (the test checks they still
#: break it, so a fix makes it fail until the entry is removed)
KNOWN: dict[str, list[tuple[str, str]]] = {}  # step -> [(line prefix, why it still lacks a label)]


@pytest.fixture(autouse=True)
def _wide_consoles(monkeypatch):
    """The CLI's consoles 1000 columns wide, one sentence per line (a console made while another
    test had set COLUMNS keeps that width, so setting COLUMNS here is not enough)."""
    import joulebound.cli as cli
    from joulebound.cli import _common

    monkeypatch.setenv("COLUMNS", "1000")
    for con in {id(c): c for c in (_common.console, _common.err_console,
                                   getattr(cli, "err_console", None)) if c is not None}.values():
        monkeypatch.setattr(con, "_width", 1000)


def _readme_has(cmd: str) -> None:
    """``cmd`` is written in the README as the walkthrough runs it (whitespace aside)."""
    flat = " ".join(README.split())
    assert " ".join(cmd.split()) in flat, f"the README no longer shows: {cmd}"


def _cli(capsys, argv: list[str], code: int = 0) -> str:
    from joulebound.cli import main

    assert main(argv) == code, capsys.readouterr()
    return capsys.readouterr().out


def _check(step: str, out: str) -> list[str]:
    lines = out.splitlines()
    for prefix, why in KNOWN.get(step, []):
        known = [ln for ln in lines if ln.startswith(prefix)]
        assert known and problems("\n".join(known), step), (
            f"{step}: '{prefix}' now carries one label ({why}): remove it from KNOWN")
        lines = [ln for ln in lines if not ln.startswith(prefix)]
    return problems("\n".join(lines), step)


def test_readme_walkthrough_prints_every_figure_with_one_label(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    py = sys.executable
    bad: list[str] = []
    outs: dict[str, str] = {}

    # Measure energy
    _readme_has("joulebound measure --db runs.db -- python train.py")
    outs["measure"] = _cli(capsys, ["measure", "--db", "runs.db", "--", py, "train.py"])
    _readme_has("joulebound measure --carbon-intensity FR -- python train.py")
    outs["measure carbon"] = _cli(capsys, ["measure", "--carbon-intensity", "FR", "--db",
                                           "runs.db", "--", py, "train.py"])
    _readme_has("joulebound runs runs.db --export out/ --format parquet")
    pytest.importorskip("pyarrow")
    outs["runs export"] = _cli(capsys, ["runs", "runs.db", "--export", "out/", "--format",
                                        "parquet"])
    assert (tmp_path / "out" / "windows.parquet").exists()
    outs["runs"] = _cli(capsys, ["runs", "runs.db"])
    _readme_has("joulebound report runs.db [RUN]")
    outs["report"] = _cli(capsys, ["report", "runs.db", "-o", "rep"])

    # Hugging Face callback (README: Trainer(..., callbacks=[EnergyCallback(store="runs.db")]))
    _readme_has('callbacks=[EnergyCallback(store="runs.db")]')
    from transformers import Trainer, TrainingArguments

    from joulebound.energy.integrations import EnergyCallback
    from tests.test_energy_trainers import _tiny_bert, _Tokens

    args = TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=4, logging_steps=2,
                             per_device_train_batch_size=4, report_to=[], use_cpu=True,
                             save_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=_tiny_bert(), args=args, train_dataset=_Tokens(),
                      callbacks=[EnergyCallback(store="runs.db")])
    trainer.train()
    capsys.readouterr()
    for h in trainer.state.log_history:
        for k in h:
            # the label is in the key; energy/interval_s and energy/train_s are durations
            # (always measured, documented in joulebound.energy.interval)
            if k.startswith("energy/") and not re.fullmatch(r"energy/\w+_s", k):
                assert len(labels(k.replace("/", " "))) == 1, k
    summ = trainer.state.energy
    assert summ["duration_provenance"] == "measured" and summ["gpu_provenance"] is None
    outs["runs after HF"] = _cli(capsys, ["runs", "runs.db"])
    outs["report HF"] = _cli(capsys, ["report", "runs.db", "-o", "rep-hf"])

    # Predict a training job
    _readme_has("joulebound predict --preset bert-base --seq 128 --batch 32 --tokens 1e9 "
                "--gpus 4 --strategy fsdp \\ --device a40")
    outs["predict"] = _cli(capsys, ["predict", "--preset", "bert-base", "--seq", "128",
                                    "--batch", "32", "--tokens", "1e9", "--gpus", "4",
                                    "--strategy", "fsdp", "--device", "a40"])

    # Apply a plan while training: record, plan, dry-run
    _readme_has(f'T="{T}"')
    _readme_has("joulebound run --record ops.json -- $T --steps 3")
    outs["run --record"] = _cli(capsys, ["run", "--record", "ops.json", "--", *T.split(),
                                         "--steps", "3"])
    _readme_has("joulebound plan ops.json --device rtx3080ti --slowdown 1% -o ops_plan.json")
    outs["plan"] = _cli(capsys, ["plan", "ops.json", "--device", "rtx3080ti", "--slowdown",
                                 "1%", "-o", "ops_plan.json", "--draws", "4"])
    _readme_has("joulebound run --plan ops_plan.json --actuator dry-run --switch-log "
                "switches.jsonl -- $T --steps 40")
    outs["run dry-run"] = _cli(capsys, ["run", "--plan", "ops_plan.json", "--actuator",
                                        "dry-run", "--switch-log", "switches.jsonl", "--",
                                        *T.split(), "--steps", "40"])

    n_figures = 0
    for step, out in outs.items():
        n_figures += len(figures(out))
        bad += _check(step, out)
    assert n_figures > 60     # the walk printed figures (the check is not vacuous)
    assert not bad, "\n".join(bad)


def test_label_checker_finds_missing_and_doubled_labels():
    """The checker itself can fail: a bare figure, two labels on one line, a table row without
    a label in its title, header or cells."""
    assert problems("GPU: 1.5 J\n", "x")
    assert problems("CPU+DRAM: 12.1 J (modeled, not measured)\n", "x")
    assert not problems("CPU+DRAM: 12.1 J (modeled)\nflags: none\nexit code 0\n", "x")
    table = ("Energy\n┏━━━┳━━━┓\n┃ a ┃ b ┃\n┡━━━╇━━━┩\n│ x │ 1.0 J │\n└───┴───┘\n")
    assert problems(table, "t") and not problems(table.replace("Energy", "Energy (measured)"),
                                                 "t")
    assert not problems("time    2.68 h  (90 % interval 60.7 min – 7.09 h)  [modeled]", "p")
    assert not problems("lasted 0.07 s (measured); CPU+DRAM 3.0 J (modeled).", "p")
    assert problems("lasted 0.07 s (measured), CPU+DRAM 3.0 J (modeled).", "p")


# -- one run of each kind through every output ---------------------------------------------------

def _html_labels(page: str, row: str) -> str:
    """The provenance cell of the summary row named ``row`` in a run report."""
    m = re.search(rf"<tr><td>{re.escape(row)}</td><td[^>]*>[^<]*</td><td[^>]*>([^<]*)</td>", page)
    assert m, row
    return m.group(1)


@pytest.mark.parametrize("kind", ["no GPU", "fake NVML", "simulated"])
def test_one_label_per_figure_in_every_output(kind, tmp_path, capsys, monkeypatch):
    from joulebound.energy.store import Store
    from joulebound.report.run_html import load_run

    monkeypatch.chdir(tmp_path)
    for var in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    backend = {"no GPU": "cpu-model", "fake NVML": "auto", "simulated": "simulated"}[kind]
    if kind == "fake NVML":
        from joulebound.testing.fakenvml import FakeGPU, FakeNvml

        monkeypatch.setitem(sys.modules, "pynvml",
                            FakeNvml(gpus=[FakeGPU("GPU-aaaa", power_mw=120_000)]))
    want_gpu = {"no GPU": None, "fake NVML": "measured", "simulated": "modeled"}[kind]
    cmd = [sys.executable, "-c", "import time; time.sleep(0.3)"]
    doc = json.loads(_cli(capsys, ["measure", "--json", "--backend", backend, "--db", "r.db",
                                   "--interval", "0.05", "--", *cmd]))
    assert doc["provenance"] == want_gpu and (doc["energy_j"] is None) == (want_gpu is None)
    assert doc["duration_provenance"] == "measured"
    want_cpu = doc["cpu_provenance"]
    assert (doc["cpu_energy_j"] is None) == (want_cpu is None)

    # the store and the Python objects read from it
    st = Store("r.db", readonly=True)
    (run,) = st.runs()
    (w,) = st.windows(run["run_id"])
    assert w.provenance == want_gpu and w.gpu_provenance == want_gpu
    assert run["provenance"] == want_gpu
    assert (w.cpu_provenance if w.cpu_energy_j is not None else None) == want_cpu
    # runs --json
    (rdoc,) = json.loads(_cli(capsys, ["runs", "r.db", "--json"]))
    assert rdoc["provenance"] == want_gpu and rdoc["cpu_provenance"] == want_cpu
    (wdoc,) = rdoc["windows"]
    assert (wdoc["provenance"], wdoc["cpu_provenance"], wdoc["duration_provenance"]) == (
        want_gpu, want_cpu, "measured")
    # the runs table: the GPU cell carries the GPU label (or says no sensor), the CPU cell its own
    table = _cli(capsys, ["runs", "r.db"])
    assert not problems(table, "runs")
    row = next(line for line in table.splitlines() if line.startswith(run["run_id"][:8]))
    cells = re.split(r"\s{2,}", row.strip())
    assert cells[-2].endswith(want_gpu) if want_gpu else cells[-2] == "no sensor"
    if want_cpu:
        assert cells[-1].endswith(want_cpu)
    assert "time only" not in table
    # the report: conclusion and HTML
    out = _cli(capsys, ["report", "r.db", "-o", "rep"])
    assert not problems(out, "report")
    page = (tmp_path / "rep" / "index.html").read_text()
    assert _html_labels(page, "GPU energy") == (want_gpu or "")
    if want_cpu:
        assert _html_labels(page, "CPU+DRAM energy") == want_cpu
    data = load_run(st, None)
    assert data.main is not None and data.main.gpu_provenance == want_gpu
    if want_gpu is None:
        assert "GPU (" not in page            # no legend or label names a GPU figure
