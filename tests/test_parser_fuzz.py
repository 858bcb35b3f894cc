"""Every parser named in issue 15 rejects bad input with a message naming the file, the line or
field, and the fix — never a raw traceback — and never lets NaN/inf through (hypothesis fuzz).

Parsers: the Kineto (torch.profiler) importer, ``devices import`` TOML entries, ``characterize
--measured`` CSV tables, ``fit --data`` CSV datasets, and trace JSON files (durations) with
``trace --json``.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from joulebound.core.errors import JouleboundError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**15),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6))
values = st.recursive(scalars, lambda ch: st.lists(ch, max_size=3)
                      | st.dictionaries(st.text(max_size=4), ch, max_size=3), max_leaves=5)


def _finite_json(obj) -> None:
    """The object serialises as strict JSON (no NaN/Infinity)."""
    json.dumps(obj, allow_nan=False, default=str)


# -- Kineto ----------------------------------------------------------------------------------------
KINETO = json.loads((FIXTURES / "kineto_gpu_step.json").read_text())
FIELDS = ("ts", "dur", "args", "name", "cat", "ph", "pid", "tid", "id")
ARG_FIELDS = ("correlation", "External id", "Input Dims", "Input type", "bytes", "stream")


def _check_kineto(doc, path: str) -> None:
    from joulebound.workload.kineto import from_chrome_trace

    try:
        tr = from_chrome_trace(doc, path=path)
    except JouleboundError as exc:
        msg = str(exc)
        assert path in msg, msg
        return
    for k in tr.kernels:
        assert k.duration_s is None or (math.isfinite(k.duration_s) and k.duration_s >= 0)
        assert math.isfinite(k.flops) and math.isfinite(k.bytes)
    _finite_json(tr.to_json())


@FUZZ
@given(st.data())
def test_kineto_import_mutated_fixture_never_tracebacks(data):
    doc = copy.deepcopy(KINETO)
    evs = doc["traceEvents"]
    for _ in range(data.draw(st.integers(1, 4))):
        ev = evs[data.draw(st.integers(0, len(evs) - 1))]
        if data.draw(st.booleans()) and isinstance(ev.get("args"), dict):
            ev["args"][data.draw(st.sampled_from(ARG_FIELDS))] = data.draw(values)
        else:
            ev[data.draw(st.sampled_from(FIELDS))] = data.draw(values)
    _check_kineto(doc, "mutated.json")


event = st.fixed_dictionaries({}, optional={
    "ph": st.sampled_from(["X", "s", "f", "M"]) | values,
    "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "ac2g", "gpu_memcpy"]) | values,
    "name": st.sampled_from(["aten::mm", "ProfilerStep#1", "cudaLaunchKernel", "sm90_gemm",
                             "autograd::engine::evaluate_function: MmBackward0"]) | values,
    "ts": values, "dur": values, "pid": values, "tid": values, "id": values,
    "args": values | st.fixed_dictionaries({}, optional={k: values for k in ARG_FIELDS})})


@FUZZ
@given(st.one_of(st.fixed_dictionaries({"traceEvents": st.lists(event, max_size=10)}),
                 st.lists(event, max_size=10)))
def test_kineto_import_random_events_never_traceback(doc):
    _check_kineto(doc, "random.json")


def test_kineto_nan_duration_is_rejected_naming_the_event(tmp_path):
    from joulebound.workload.kineto import load_chrome_trace

    doc = copy.deepcopy(KINETO)
    k = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    doc["traceEvents"][k]["dur"] = float("nan")
    p = tmp_path / "nan.json"
    p.write_text(json.dumps(doc))            # Python writes the NaN literal
    with pytest.raises(JouleboundError, match=rf"nan.json.*traceEvents\[{k}\]\.dur"):
        load_chrome_trace(p)


# -- trace JSON and trace --json -----------------------------------------------------------------
def _mostly(good, bad=values):
    return st.one_of(good, good, good, bad)


kernel = st.fixed_dictionaries({
    "name": _mostly(st.text(min_size=1, max_size=5)), "category": _mostly(st.just("gemm")),
    "phase": _mostly(st.just("forward")), "flops": _mostly(st.floats(0, 1e12), st.floats()),
    "bytes": _mostly(st.floats(0, 1e12), st.floats())},
    optional={"duration_s": st.floats() | values, "layer": values, "dtype": values,
              "meta": values})
GOOD_KERNEL = {"name": "k", "category": "gemm", "phase": "forward", "flops": 1e9, "bytes": 1e6}


@FUZZ
@example([{**GOOD_KERNEL, "duration_s": float("inf")}])
@example([{**GOOD_KERNEL, "duration_s": float("nan")}])
@example([{**GOOD_KERNEL, "flops": float("inf")}])
@example([GOOD_KERNEL, {**GOOD_KERNEL, "duration_s": 1e-3}])
@given(st.lists(kernel, max_size=4))
def test_trace_files_never_hold_nan_and_trace_json_is_strict_json(tmp_path, capsys, kernels):
    from joulebound.cli import main
    from joulebound.workload.trace import Trace

    p = tmp_path / "t.json"
    p.write_text(json.dumps({"schema": "joulebound.trace", "version": 1, "name": "f",
                             "kernels": kernels}))
    try:
        tr = Trace.load(p)
    except JouleboundError as exc:
        assert "t.json" in str(exc) and "field" in str(exc)
        return
    assert all(k.duration_s is None or math.isfinite(k.duration_s) for k in tr.kernels)
    assert all(math.isfinite(k.flops) and math.isfinite(k.bytes) for k in tr.kernels)
    capsys.readouterr()
    rc = main(["trace", str(p), "--json"])
    out = capsys.readouterr().out
    if rc == 0:
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in trace --json"))


# -- devices import TOML ---------------------------------------------------------------------------
T4 = (Path(__file__).resolve().parent.parent / "joulebound" / "hw" / "data" / "t4.toml"
      ).read_bytes()


@FUZZ
@given(st.data())
def test_devices_import_toml_never_tracebacks(tmp_path, data):
    from joulebound.hw.catalog import load_entry

    raw = bytearray(T4)
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos:pos + data.draw(st.integers(0, 8))] = data.draw(st.binary(max_size=8))
    p = tmp_path / "gpu.toml"
    p.write_bytes(bytes(raw))
    try:
        load_entry(p)
    except JouleboundError as exc:
        assert "gpu.toml" in str(exc)


def test_devices_import_non_utf8_names_the_line(tmp_path, capsys, monkeypatch):
    from joulebound.cli import main

    monkeypatch.setenv("JOULEBOUND_HOME", str(tmp_path / "home"))
    p = tmp_path / "gpu.toml"
    p.write_bytes(T4.replace(b'architecture = "Turing"', b'architecture = "Tur\xffing"'))
    assert main(["devices", "import", str(p)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "gpu.toml" in err and "line 9" in err and "UTF-8" in err


# -- characterize --measured CSV -------------------------------------------------------------------
cell = st.one_of(st.sampled_from(["", "auto", "nan", "NaN", "inf", "-inf", "-1", "0", "1e400",
                                  "1410", "1593", "0.001", "2", "1.5", "gemm", "x\x00y", "\u00e9"]),
                 st.text(max_size=5))


@FUZZ
@given(st.lists(st.lists(cell, min_size=0, max_size=8), min_size=1, max_size=5),
       st.booleans())
def test_characterize_measured_csv_never_tracebacks(tmp_path, rows, latin1):
    from joulebound.gpumodel.measured import read_table

    text = "kernel,core,mem,time,energy,repeats\n" + "\n".join(",".join(r) for r in rows) + "\n"
    p = tmp_path / "m.csv"
    p.write_bytes(text.encode("latin-1", "replace") if latin1 else text.encode())
    try:
        table = read_table(p)
    except JouleboundError as exc:
        assert "m.csv" in str(exc)
        return
    for (_, cfg), (t, e, _, _, n) in table.items():
        assert math.isfinite(t) and t > 0 and math.isfinite(e) and e >= 0 and n >= 1
        assert cfg.core_mhz is None or cfg.core_mhz > 0


def test_characterize_measured_nan_clock_names_the_row(tmp_path):
    from joulebound.gpumodel.measured import read_table

    p = tmp_path / "m.csv"
    p.write_text("kernel,core,mem,time,energy,repeats\ngemm,1410,1593,0.1,1,1\ngemm,nan,1593,0.1,1,1\n")
    with pytest.raises(JouleboundError, match=r"m.csv.*row 2\.core \(line 3\).*MHz"):
        read_table(p)


# -- fit --data CSV ----------------------------------------------------------------------------------
MAYAKI_COLS = ["", "duration", "energy_joules", "params", "seq_length", "batch_size", "num_layers",
               "d_model", "num_attention_heads", "model", "source", "peak"]
GOOD_ROW = ["0", "2.0", "197.0", "1.2e8", "128", "8", "12", "768", "12", "gpt", "a100", "156"]


@FUZZ
@given(st.data())
def test_fit_data_csv_never_tracebacks(tmp_path, data):
    from joulebound.jobs.datasets import load

    rows = [list(GOOD_ROW) for _ in range(3)]
    for _ in range(data.draw(st.integers(1, 3))):
        r = data.draw(st.integers(0, 2))
        if data.draw(st.booleans()):
            rows[r][data.draw(st.integers(0, len(GOOD_ROW) - 1))] = data.draw(cell)
        else:
            rows[r].append(data.draw(cell))          # a misaligned row
    header = list(MAYAKI_COLS)
    if data.draw(st.booleans()):
        header = header[:-1] if data.draw(st.booleans()) else header + ["extra"]
    p = tmp_path / "mine.csv"
    p.write_text(",".join(header) + "\n" + "\n".join(",".join(r) for r in rows) + "\n")
    try:
        df = load(p)
    except JouleboundError as exc:
        assert "mine.csv" in str(exc)
        return
    for c in ("layers", "hidden", "heads", "seq", "batch"):
        assert (df[c] > 0).all()
    assert df[["time_s", "energy_j"]].map(math.isfinite).all().all()


def test_fit_data_blank_cell_names_line_and_column(tmp_path, capsys):
    from joulebound.cli import main

    rows = [list(GOOD_ROW) for _ in range(3)]
    rows[1][MAYAKI_COLS.index("num_layers")] = ""
    p = tmp_path / "mine.csv"
    p.write_text(",".join(MAYAKI_COLS) + "\n" + "\n".join(",".join(r) for r in rows) + "\n")
    assert main(["fit", "--data", str(p)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "mine.csv" in err and "line 3" in err and "num_layers" in err, err
    p.write_text(",".join(MAYAKI_COLS) + "\n" + ",".join(GOOD_ROW + ["9"]) + "\n")
    assert main(["fit", "--data", str(p)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "mine.csv" in err and "line 2" in err and "Traceback" not in err, err
