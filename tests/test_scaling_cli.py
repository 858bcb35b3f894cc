"""``joulebound predict`` / ``advise`` from built-in defaults; frontier checks."""

from __future__ import annotations

import json

import pytest

from joulebound.cli import main
from joulebound.scaling import frontier
from joulebound.scaling.defaults import load_default, predict_job

BERT = ["--model", "bert", "--layers", "12", "--hidden", "768", "--heads", "12", "--seq", "128",
        "--batch", "32"]


def test_predict_json_from_builtin_defaults(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("JOULEBOUND_DATA", str(tmp_path / "absent"))  # no data folder needed
    assert main(["predict", *BERT, "--tokens", "1e8", "--gpus", "4", "--strategy", "fsdp",
                 "--device", "rtx2080ti", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["provenance"] == "modeled"
    assert out["energy_lo_j"] < out["energy_j"] < out["energy_hi_j"]
    assert out["steps"] == pytest.approx(1e8 / (32 * 128))
    assert 0 < out["eta_par"] < 1 and 0 < out["eta_hw"] < 1


def test_predict_scales_with_tokens_and_devices():
    cfg = dict(model="bert", layers=12, hidden=768, heads=12, seq=128, batch=32, device="rtx2080ti")
    a = predict_job(1e8, **cfg)
    b = predict_job(2e8, **cfg)
    assert b.energy_j == pytest.approx(2 * a.energy_j)
    big = predict_job(1e8, **{**cfg, "layers": 24, "hidden": 1024, "heads": 16})
    assert big.energy_j > 2 * a.energy_j
    assert predict_job(1e8, **{**cfg, "device": "a100"}).time_s < a.time_s


def test_predict_bad_input_exit_2(capsys):
    assert main(["predict", *BERT, "--tokens", "1e8", "--gpus", "4", "--strategy", "fsd"]) == 2
    assert "fsdp" in capsys.readouterr().err
    assert main(["predict", *BERT, "--tokens", "1e8", "--gpus", "0", "--strategy", "ddp"]) == 2
    assert ">= 1" in capsys.readouterr().err
    assert main(["predict", *BERT, "--tokens", "1e8", "--device", "rtx9090"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU 'rtx9090'" in err and "rtx3090" in err


@pytest.mark.parametrize("args, needles", [
    (["--heads", "7"], ["--heads 7 does not divide --hidden 768", "12"]),
    (["--model", "llama"], ["unknown --model 'llama'", "bert, gpt, t5"]),
    (["--ff", "0"], ["--ff must be >= 1"]),
    (["--vocab", "0"], ["--vocab must be >= 1"]),
    (["--dtype", "int8"], ["dtype 'int8'", "fp32, fp16"]),
])
def test_predict_and_advise_refuse_impossible_shapes(capsys, args, needles):
    base = ["--layers", "12", "--hidden", "768", "--heads", "12", "--seq", "128", "--batch", "32",
            "--tokens", "1e8"]
    for cmd in (["predict"], ["advise", "--deadline", "2h"]):
        assert main([*cmd, *base, *args]) == 2
        err = capsys.readouterr().err
        for n in needles:
            assert n in err, (cmd, err)


def test_fit_needs_two_folds(capsys, tmp_path):
    assert main(["fit", "--data", str(tmp_path), "--folds", "1"]) == 2
    assert "--folds must be >= 2" in capsys.readouterr().err


def test_advise_meets_deadline_with_least_energy(capsys):
    assert main(["advise", *BERT, "--tokens", "1e8", "--deadline", "2h", "--max-gpus", "8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    best = out["best"]
    assert best["meets_deadline"] and best["time_s"] <= 7200
    ok = [c for c in out["candidates"] if c["meets_deadline"]]
    assert best["energy_j"] == min(c["energy_j"] for c in ok)
    assert any(not c["meets_deadline"] for c in out["candidates"])  # 1 GPU is too slow


def test_default_has_provenance_and_heldout_error():
    law, rec = load_default()
    prov = rec["provenance"]
    assert "mayaki_ecai2025" in prov["data"]
    assert prov["heldout"]["r2_log"] >= 0.95
    assert rec["q90_log"] > 0


def test_frontier_checks_within_an_order_of_magnitude():
    for r in frontier.check_all():
        assert r["published"]["provenance"] == "published"
        assert 0.1 < r["physics_ratio"] < 10, r
        assert 0.5 < r["flops_ratio"] < 2.5, r


def test_advise_never_picks_a_candidate_whose_states_do_not_fit(capsys):
    # GPT-3 XL shape (1.3 B params, 21 GB of states) on 11 GB RTX 2080 Ti cards
    gpt = ["--model", "gpt", "--layers", "24", "--hidden", "2048", "--heads", "16", "--seq", "1024",
           "--batch", "512", "--device", "rtx2080ti"]
    assert main(["advise", *gpt, "--tokens", "1e9", "--deadline", "30d", "--max-gpus", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["fits_memory"] and out["best"]["strategy"] in ("fsdp", "tp")
    ddp = [c for c in out["candidates"] if c["strategy"] in ("ddp", "single")]
    assert ddp and not any(c["fits_memory"] for c in ddp)
    assert main(["advise", *gpt, "--tokens", "1e9", "--deadline", "30d", "--max-gpus", "1"]) == 2
    assert "do not fit" in capsys.readouterr().err


def test_help_paragraphs_are_reflowed_and_document_json_keys():
    import typer

    from joulebound.cli import app

    cmds = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for name, keys in (("fit", ("cv_r2_log", "published", "saved")),
                       ("predict", ("energy_lo_j", "eta_par", "provenance")),
                       ("advise", ("meets_deadline", "candidates", "fits_memory"))):
        text = cmds[name].help
        assert all("\n" not in p for p in text.split("\n\n")), name
        assert "--json" in text and all(k in text for k in keys), name
    for p in cmds["advise"].params:  # every advise option explains itself
        assert p.name == "help" or getattr(p, "help", None), p.name


def test_predict_text_labels_every_figure(capsys):
    assert main(["predict", *BERT, "--tokens", "1e8"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("energy", "time", "η̂"))]
    assert len(lines) == 3 and all("[modeled]" in ln for ln in lines), lines


def test_folders_for_coefficients_and_save_are_user_errors(capsys, tmp_path):
    assert main(["predict", *BERT, "--tokens", "1e8", "--coefficients", str(tmp_path)]) == 2
    assert "is not a file" in capsys.readouterr().err
    assert main(["fit", "--data", str(tmp_path), "--save", str(tmp_path)]) == 2
    assert "--save" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cmd, needle", [
    (["predict", "--tokens", "nan"], "--tokens must be a finite number > 0"),
    (["predict", "--tokens", "inf"], "--tokens must be a finite number > 0"),
    (["advise", "--tokens", "1e8", "--deadline", "nan"], "--deadline must be > 0"),
    (["advise", "--tokens", "1e8", "--deadline", "1h", "--strategies", "single"], "always included"),
    (["advise", "--tokens", "1e8", "--deadline", "1h", "--strategies", ","], "got none"),
])
def test_non_numbers_and_empty_choices_are_refused(capsys, cmd, needle):
    assert main([cmd[0], *BERT, *cmd[1:]]) == 2
    assert needle in capsys.readouterr().err
