"""`joulebound trace`: output, --json, -o, --top and error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joulebound.cli import main
from joulebound.workload import load_trace
from joulebound.workload.analytic import build_trace

FIXTURE = Path(__file__).parent / "fixtures" / "kineto_gpu_step.json"


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_trace_preset_prints_phase_and_category_tables(capsys) -> None:
    rc, out, _ = run(capsys, "trace", "gpt3-xl")
    assert rc == 0
    n = len(build_trace("gpt3-xl"))
    assert f"{n} kernels" in out and "modeled" in out
    for word in ("Per phase", "forward", "backward", "optimizer", "Per category", "gemm",
                 "attention", "norm"):
        assert word in out
    assert "--device" in out  # hint when no device is given


def test_trace_with_device_marks_compute_and_memory_bound(capsys) -> None:
    rc, out, _ = run(capsys, "trace", "gpt3-xl", "--device", "rtx3080ti")
    assert rc == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "compute" in rows["gemm"] and "memory" in rows["elementwise"]
    assert "ridge point" in out and "modeled" in out


def test_trace_json_keys_and_values(capsys) -> None:
    rc, out, _ = run(capsys, "trace", "bert-base", "--device", "a100-sxm4-80gb", "--json",
                     "--batch", "4", "--seq", "128")
    assert rc == 0
    doc = json.loads(out)
    for key in ("trace", "source", "kernels", "flops", "bytes", "intensity", "meta", "device",
                "peak_flops", "bandwidth_bps", "roofline_time_s", "provenance", "phases",
                "categories"):
        assert key in doc, key
    assert doc["meta"]["batch"] == 4 and doc["meta"]["seq"] == 128
    assert doc["flops"] == pytest.approx(build_trace("bert-base", batch=4, seq=128).total_flops)
    cats = {c["category"]: c for c in doc["categories"]}
    assert cats["gemm"]["bound"] == "compute" and cats["norm"]["bound"] == "memory"
    assert cats["gemm"]["ridge"] > 50
    assert doc["provenance"]["flops_bytes"] == "modeled"
    assert sum(p["kernels"] for p in doc["phases"]) == doc["kernels"]


def test_trace_output_file_round_trips(capsys, tmp_path) -> None:
    path = tmp_path / "t.json"
    rc, out, _ = run(capsys, "trace", "gpt2-small", "--recompute", "-o", str(path))
    assert rc == 0 and "written" in out
    tr = load_trace(path)
    assert tr.meta["recompute"] is True
    assert tr.total_flops == build_trace("gpt2-small", recompute=True).total_flops
    rc, out, _ = run(capsys, "trace", str(path), "--json")
    assert rc == 0 and json.loads(out)["kernels"] == len(tr)


def test_trace_top_kernels(capsys) -> None:
    rc, out, _ = run(capsys, "trace", str(FIXTURE), "--top", "3")
    assert rc == 0 and "Top 3 kernels" in out
    assert "ncclDevKernel_AllRedu" in out and "multi_tensor_apply" in out  # short names
    rc, out, _ = run(capsys, "trace", "gpt2-small", "--device", "t4", "--top", "2", "--json")
    rows = json.loads(out)["top_kernels"]
    assert len(rows) == 2 and rows[0]["roofline_time_s"] >= rows[1]["roofline_time_s"]


def test_trace_imports_kineto_file_with_measured_times(capsys) -> None:
    rc, out, _ = run(capsys, "trace", str(FIXTURE), "--device", "3080ti")
    assert rc == 0
    assert "imported" in out and "measured" in out and "communication" in out
    text = " ".join(out.split())
    assert "(modeled from recorded shapes)" in text and "(published, device catalog)" in text
    rc, out, _ = run(capsys, "trace", str(FIXTURE), "--json")
    assert rc == 0
    from joulebound.core.provenance import ALL

    assert set(json.loads(out)["provenance"].values()) <= set(ALL)  # only the three labels


@pytest.mark.parametrize(("args", "needles"), [
    (["gpt3-xxl"], ["neither a model preset", "gpt3-xl", "bert-huge"]),
    (["gpt2-small", "--device", "rtx9090"], ["rtx9090", "rtx3080ti", "a100-sxm4-80gb"]),
    (["gpt2-small", "--heads", "7"], ["heads=7 does not divide hidden=768"]),
    (["gpt2-small", "--seq", "0"], ["seq must be a positive integer"]),
    (["gpt2-small", "--batch", "-2"], ["batch must be a positive integer"]),
    (["gpt2-small", "--dtype", "int4"], ["dtype 'int4' is not supported"]),
    ([str(FIXTURE), "--batch", "2"], ["apply only to model presets"]),
    ([str(FIXTURE), "--heads", "2"], ["apply only to model presets"]),
    (["gpt2-small", "--top", "-1"], ["--top must be >= 0"]),
])
def test_trace_errors_explain_the_fix(capsys, args: list[str], needles: list[str]) -> None:
    rc, out, err = run(capsys, "trace", *args)
    assert rc == 2, out
    text = " ".join(err.split())
    for needle in needles:
        assert needle in text, (needle, text)
    assert "Traceback" not in err


def test_malformed_trace_file_names_file_and_field(capsys, tmp_path) -> None:
    bad = tmp_path / "bad.json"
    doc = build_trace("gpt2-small").to_json()
    doc["kernels"][3]["flops"] = "lots"
    bad.write_text(json.dumps(doc))
    rc, _, err = run(capsys, "trace", str(bad))
    text = " ".join(err.split())
    assert rc == 2 and "bad.json" in text and "kernels[3].flops" in text


def test_help_paragraphs_are_reflowed_and_list_json_keys() -> None:
    import typer

    from joulebound.cli import app

    cmd = typer.main.get_command(app).commands["trace"]  # type: ignore[attr-defined]
    paragraphs = cmd.help.split("\n\n")
    assert all("\n" not in p for p in paragraphs)  # the terminal, not the source, wraps lines
    assert any(p.startswith("--json prints one object with keys") and "roofline_time_s" in p
               for p in paragraphs)


def test_output_to_a_folder_or_unwritable_path_is_a_user_error(capsys, tmp_path) -> None:
    rc, _, err = run(capsys, "trace", "gpt2-small", "-o", str(tmp_path))
    assert rc == 2 and "is a folder" in err and "gpt2-small.json" in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, _, err = run(capsys, "trace", "gpt2-small", "-o", str(blocker / "t.json"))
    assert rc == 2 and "cannot write" in err and "t.json" in err
