"""Reports of measured runs that do not mislead (issue 28 item 7): windows drawn as they nest,
the power timeline from the energy counter (no 0 W start), the run's metadata (carbon setting,
command, status, exit code) stored and shown, energy per step beside the loss, and a page
comparing runs."""

from __future__ import annotations

import json
import sys

import pytest

from joulebound.cli import main
from joulebound.energy.results import WindowResult
from joulebound.energy.store import Store
from joulebound.report.run_html import RunData, load_run, power_series, window_depths


def _w(name: str, start: float, end: float) -> WindowResult:
    return WindowResult(name=name, start_s=start, end_s=end, duration_s=end - start,
                        energy_j=None, devices=[], provenance=None)


def test_windows_are_drawn_as_they_nest():
    ws = [_w("interval:0", 0.0, 1.0), _w("epoch:0", 0.1, 3.0), _w("step:0", 0.2, 0.5),
          _w("interval:1", 1.0, 2.0), _w("train", 0.0, 3.0)]
    d = dict(zip([w.name for w in ws], window_depths(ws), strict=True))
    assert d["train"] == 0
    # an interval straddling the epoch's start is neither inside nor around it: its own row
    assert d["interval:0"] != d["epoch:0"] and min(d["interval:0"], d["epoch:0"]) == 1
    # every window inside another is drawn below it
    for inner in ws:
        for outer in ws:
            if outer is not inner and outer.start_s <= inner.start_s and \
                    inner.end_s <= outer.end_s and outer.duration_s > inner.duration_s:
                assert d[inner.name] > d[outer.name], (inner.name, outer.name)
    # no two windows that overlap share a row
    for a in ws:
        for b in ws:
            if a is not b and d[a.name] == d[b.name]:
                assert a.end_s <= b.start_s or b.end_s <= a.start_s, (a.name, b.name)


def test_power_timeline_is_the_counter_average_and_does_not_start_at_zero():
    # a model's first read has no utilisation yet (0 W); the counter's average between samples
    # is what the energy figures use
    samples = [(0.000, "c", "cpu", None, 0.0), (0.002, "c", "cpu", 0.0, 0.0),
               (0.100, "c", "cpu", 45.0, 4.5), (0.200, "c", "cpu", 46.0, 9.1),
               (0.300, "c", "cpu", 44.0, 13.5)]
    data = RunData(run={"run_id": "r"}, windows=[], samples=samples)
    ((key, pts),) = power_series(data).items()
    assert key == ("cpu", "c") and min(p for _, p in pts) > 40.0
    assert pts[-1][1] == pytest.approx(44.0)
    # without a counter the sampled power is drawn as read
    data.samples = [(t, u, k, p, None) for t, u, k, p, _ in samples]
    assert [p for _, p in power_series(data)[("cpu", "c")]] == [0.0, 45.0, 46.0, 44.0]


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    """A Hugging Face Trainer run (simulated GPU, 100 W) with the callback's carbon setting."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import Trainer, TrainingArguments

    from joulebound.energy.integrations import EnergyCallback
    from tests.test_energy_trainers import _tiny_bert, _Tokens

    d = tmp_path_factory.mktemp("hf")
    args = TrainingArguments(output_dir=str(d / "out"), max_steps=6, logging_steps=2,
                             per_device_train_batch_size=4, report_to=[], use_cpu=True,
                             save_strategy="no", disable_tqdm=True)
    cb = EnergyCallback(backend="simulated", store=d / "runs.db", carbon_intensity="FR")
    Trainer(model=_tiny_bert(), args=args, train_dataset=_Tokens(), callbacks=[cb]).train()
    return d, cb


def test_callback_run_stores_its_carbon_setting_command_and_training_log(hf_run, capsys):
    d, cb = hf_run
    st = Store(d / "runs.db", readonly=True)
    (run,) = st.runs()
    meta = json.loads(run["meta_json"])
    assert meta["carbon"]["region"] == "FR" and meta["carbon"]["g_per_kwh"] > 0
    # the command is this process's command line, not "transformers.Trainer (pid …)"
    assert run["command"].startswith("python") and "Hugging Face Trainer" in run["command"]
    assert [e["step"] for e in meta["train_log"]] == [2, 4, 6]
    assert main(["runs", str(d / "runs.db"), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["carbon"]["region"] == "FR"

    data = load_run(st, None)
    from joulebound.report.run_html import step_energy

    rows = step_energy(data)
    assert [r["step"] for r in rows] == [2, 4, 6]
    by = {w.name: w for w in data.windows}
    for r, e in zip(rows, meta["train_log"], strict=True):
        # the interval's energy over its 2 steps; the simulated GPU draws 100 W
        assert r["j_per_step"] == pytest.approx(by[e["window"]].energy_j / 2)
        assert r["label"] == "modeled" and r["part"] == "GPU"

    out = d / "rep"
    assert main(["report", str(d / "runs.db"), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "gCO2e" in text        # the stored setting is used without --carbon-intensity
    page = (out / "index.html").read_text()
    assert "Energy per step beside the loss" in page and (out / "loss.png").exists()
    assert "stored with the run" in page and "FR" in page
    assert "no exit code" in page and "finished / None" not in page
    assert "Windows and their nesting" in page and "Energy per window" not in page


def test_report_compares_runs_of_two_stores_and_of_one(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmd = ["--", sys.executable, "-c", "import time; time.sleep(0.2)"]
    for db, backend in (("a.db", "simulated"), ("a.db", "simulated"), ("b.db", "cpu-model")):
        assert main(["measure", "--backend", backend, "--db", db, "--interval", "0.05",
                     *cmd]) == 0
    capsys.readouterr()
    a_runs = [r["run_id"] for r in Store("a.db", readonly=True).runs()]
    # two runs of one store: modeled against modeled is compared, with its label
    assert main(["report", "a.db", a_runs[0][:8], a_runs[1][:8], "-o", "one"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Comparing 2 runs" in out and "GPU energy" in out and "% modeled" in out
    page = (tmp_path / "one" / "index.html").read_text()
    assert "Runs side by side" in page and a_runs[1][:8] in page
    # two stores: the newest run of each; a modeled GPU figure against none is not compared
    assert main(["report", "a.db", "b.db", "-o", "two"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(b.db)" in out and "duration" in out and "% measured" in out
    page = (tmp_path / "two" / "index.html").read_text()
    assert "no such figure" in page and (tmp_path / "two" / "power.png").exists()
    # a single run id still writes the single-run report
    assert main(["report", "a.db", a_runs[0][:8], "-o", "single"]) == 0
    assert "Summary" in (tmp_path / "single" / "index.html").read_text()


def test_a_measured_and_a_modeled_figure_are_never_compared():
    from joulebound.report.compare_html import change

    assert change((10.0, "measured"), (12.0, "modeled")).startswith("not compared")
    assert change((10.0, "measured"), (12.0, "measured")) == "+20.0 % measured"
    assert change((10.0, "modeled"), (None, None)).startswith("–")


def test_an_older_store_labels_no_gpu_figure(tmp_path, capsys):
    """Stores written before the one-label rule said 'modeled' for the (missing) GPU energy of a
    CPU-only run; they are read by the rule: no GPU device, no label."""
    from joulebound.energy.results import DeviceEnergy

    st = Store(tmp_path / "old.db")
    st.begin_run("r1", backend="cpu-model", provenance="modeled", command="python x.py")
    cpu = DeviceEnergy("model:h:cpu", 0, 5.0, 50.0, 50.0, "tdp_model", "cpu", 2, "modeled")
    st.add_window("r1", WindowResult(name="command", start_s=0.0, end_s=0.1, duration_s=0.1,
                                     energy_j=None, devices=[cpu], provenance="modeled",
                                     cpu_energy_j=5.0))
    st.end_run("r1", exit_code=0)
    st.close()
    (w,) = Store(tmp_path / "old.db", readonly=True).windows("r1")
    assert w.provenance is None and w.gpu_provenance is None and w.cpu_provenance == "modeled"
    assert main(["runs", str(tmp_path / "old.db"), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["provenance"] is None and doc["cpu_provenance"] == "modeled"
    assert doc["windows"][0]["provenance"] is None
