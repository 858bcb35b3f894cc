"""Sweep workload in one process: HF models from configs, random tokens with padding, data split."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from joulebound.energy.meter import EnergyMeter  # noqa: E402
from joulebound.measure.sweep.strategies import batch_indices  # noqa: E402
from joulebound.measure.sweep.worker import run_config  # noqa: E402
from joulebound.measure.sweep.workload import build_model, make_dataset  # noqa: E402
from joulebound.workload.grid import SweepConfig  # noqa: E402


def _cfg(**kw):
    base = dict(arch="bert", layers=1, hidden=32, heads=2, ff=64, seq=16, batch=4, steps=2, warmup=1,
                vocab=100, dropout=0.0)
    base.update(kw)
    return SweepConfig(**base)


def test_models_are_built_from_config_with_the_seeded_weights():
    c = _cfg()
    m1, m2 = build_model(c), build_model(c)
    assert type(m1).__name__ == "BertForSequenceClassification"
    assert m1.config.num_hidden_layers == 1 and m1.config.hidden_size == 32
    assert m1.config.intermediate_size == 64 and m1.config.num_attention_heads == 2
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters(), strict=True))
    g = build_model(_cfg(arch="gpt2"))
    assert type(g).__name__ == "GPT2LMHeadModel" and g.config.n_inner == 64 and g.config.n_positions == 16


def test_padding_is_counted_real_vs_padded():
    c = _cfg(min_fill=0.5, seq=16, batch=8)
    ds = make_dataset(c, 3)
    ids, mask, labels = ds.tensors
    lengths = mask.sum(1)
    assert ids.shape == (24, 16)
    assert lengths.min() >= math.ceil(0.5 * 16) and lengths.max() <= 16 and lengths.float().std() > 0
    assert (ids[mask == 0] == 0).all() and (ids[mask == 1] > 0).all()
    meter = EnergyMeter("none")
    res = run_config(c, 0, torch.device("cpu"), meter)
    # measured steps only (warm-up excluded): rows warmup*B .. (warmup+steps)*B
    measured = mask[c.warmup * c.global_batch:(c.warmup + c.steps) * c.global_batch]
    assert res["tokens"] == int(measured.sum()) < res["padded_tokens"] == c.steps * c.global_batch * c.seq
    assert len(res["losses"]) == c.steps and all(math.isfinite(x) for x in res["losses"])
    assert res["window"].energy_j is None and res["time_s"] > 0
    assert res["peak_mem_kind"] == "cpu_rss_after_measured_steps" and res["peak_mem_bytes"] > 10**7


def test_gpt2_and_bf16_train_on_cpu():
    meter = EnergyMeter("none")
    r = run_config(_cfg(arch="gpt2", min_fill=0.75), 0, torch.device("cpu"), meter)
    assert all(math.isfinite(x) for x in r["losses"]) and r["tokens"] < r["padded_tokens"]
    r = run_config(_cfg(dtype="bf16"), 0, torch.device("cpu"), meter)
    assert all(math.isfinite(x) for x in r["losses"])
    assert r["losses"][0] == pytest.approx(math.log(2), abs=0.2)  # 2-class CE at random init


def test_data_parallel_split_covers_each_global_batch_once():
    c = _cfg(strategy="fsdp", world_size=2, batch=4, steps=3, warmup=0)
    n = c.global_batch * c.steps
    per = c.micro_batch
    r0, r1 = batch_indices(c, 0, n), batch_indices(c, 1, n)
    assert per == 2 and not set(r0) & set(r1)
    for k in range(c.steps):
        assert sorted(r0[k * per:(k + 1) * per] + r1[k * per:(k + 1) * per]) == list(range(k * 4, k * 4 + 4))
    tp = _cfg(strategy="tp", world_size=2)
    assert batch_indices(tp, 0, 8) == batch_indices(tp, 1, 8) == list(range(8))


def test_gpu_sweep_script_runs_its_code_path_on_cpu(tmp_path):
    """The prepared lent-GPU script, in its CPU dry-run mode (no energy sensor here). Its
    ``main()`` runs in this process, where torch and the BERT classes are loaded already (a child
    interpreter spent ~10 CPU-s importing them again); the ``python -m`` entry point is checked
    with ``--help``, which stops before torch is imported."""
    import csv
    import importlib.util
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = root / "benchmarks" / "gpu_sweep.py"
    source = script.read_text()
    assert "nvmlDeviceSet" not in source and "nvidia-smi" not in source  # read-only on the GPU
    entry = subprocess.run([sys.executable, "-m", "benchmarks.gpu_sweep", "--help"], cwd=root,
                           capture_output=True, text=True, timeout=60)
    assert entry.returncode == 0 and "--window-s" in entry.stdout, entry.stderr[-2000:]
    spec = importlib.util.spec_from_file_location("benchmarks_gpu_sweep", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--out", str(tmp_path), "--device", "cpu", "--energy", "none", "--grid",
                     "tiny", "--idle-s", "0.2", "--window-s", "0.2"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "gpu_sweep.csv")))
    assert len(rows) == 1 and rows[0]["energy_j"] == "" and float(rows[0]["time_s"]) > 0
    assert int(rows[0]["steps"]) >= 5 and rows[0]["energy_flags"] == "no_energy_sensor"
    meta = json.loads((tmp_path / "gpu_sweep_meta.json").read_text())
    assert meta["read_only"] is True and meta["measured"] == 1
    from joulebound.jobs.runstore import load_results

    df = load_results(tmp_path / "gpu_sweep.db")
    assert list(df.status) == ["ok"] and df.steps.iloc[0] == int(rows[0]["steps"])
