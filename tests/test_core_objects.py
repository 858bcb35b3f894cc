"""Core data objects: ClockConfig parsing, Trace / Plan / Characterization files and their errors."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.gpumodel.characterization import Characterization
from joulebound.planning.plan import Plan
from joulebound.workload.trace import Kernel, Trace


# -- ClockConfig ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "core", "mem"), [
    ("auto", None, None), ("", None, None), (" AUTO ", None, None),
    ("1410/1593", 1410, 1593), ("1410", 1410, None), ("auto/810", None, 810),
    ("1410/auto", 1410, None), ("1410MHz/1593mhz", 1410, 1593), ("1410.0/1593", 1410, 1593),
])
def test_clock_parse(text: str, core: int | None, mem: int | None) -> None:
    c = ClockConfig.parse(text)
    assert (c.core_mhz, c.mem_mhz) == (core, mem)
    assert ClockConfig.parse(c.label) == c  # the label parses back
    assert ClockConfig.from_json(c.to_json()) == c


def test_clock_labels() -> None:
    assert ClockConfig().label == "auto" and ClockConfig().is_auto
    assert ClockConfig(1410, 1593).label == "1410/1593"
    assert ClockConfig(None, 810).label == "auto/810" and not ClockConfig(None, 810).is_auto
    assert str(ClockConfig(1410)) == "1410/auto"


@pytest.mark.parametrize(("text", "needle"), [
    ("fast", "cannot parse clock 'fast'"), ("1410/abc", "cannot parse clock"),
    ("0", "must be positive"), ("-5/810", "must be positive"),
])
def test_clock_parse_errors(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ClockConfig.parse(text)


def test_clock_from_json_rejects_other_shapes() -> None:
    with pytest.raises(ValueError, match="expected"):
        ClockConfig.from_json([1, 2, 3])
    assert ClockConfig.from_json("1005/9501") == ClockConfig(1005, 9501)


# -- Trace files ---------------------------------------------------------------------------------
def small_trace() -> Trace:
    return Trace([
        Kernel("qkv_gemm", "gemm", "forward", 0, 1.5e9, 3e6, "bf16"),
        Kernel("softmax", "softmax", "forward", 0, 5e6, 4e6, "fp32", 2.5e-5, {"stream": 7}),
        Kernel("adamw", "optimizer", "optimizer", None, 1e6, 2e7, "fp32"),
    ], name="small", meta={"source": "test", "layers": 1})


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_trace_round_trip(tmp_path, suffix: str) -> None:
    tr = small_trace()
    back = Trace.load(tr.save(tmp_path / f"t{suffix}"))
    assert back == tr
    assert back.kernels[1].duration_s == 2.5e-5 and back.kernels[2].layer is None
    assert np.isnan(back.durations()[0]) and back.durations()[1] == 2.5e-5
    if suffix.endswith(".gz"):
        with gzip.open(tmp_path / f"t{suffix}", "rt") as fh:
            assert json.load(fh)["schema"] == "joulebound.trace"


def write(tmp_path, doc, name="bad.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return str(path)


def mutate(fn) -> dict:
    doc = small_trace().to_json()
    fn(doc)
    return doc


@pytest.mark.parametrize(("doc", "field", "problem"), [
    (mutate(lambda d: d.update(version=99)), "version", "version 99 is not supported"),
    (mutate(lambda d: d.update(version="1")), "version", "not an integer"),
    (mutate(lambda d: d.update(schema="joulebound.plan")), "schema", "is this a joulebound.trace"),
    (mutate(lambda d: d.pop("kernels")), "kernels", "missing"),
    (mutate(lambda d: d.update(kernels={"a": 1})), "kernels", "expected list"),
    (mutate(lambda d: d["kernels"].__setitem__(1, 5)), "kernels[1]", "expected an object"),
    (mutate(lambda d: d["kernels"][0].pop("flops")), "kernels[0].flops", "missing"),
    (mutate(lambda d: d["kernels"][2].update(bytes=-1)), "kernels[2].bytes", "must be >= 0"),
    (mutate(lambda d: d["kernels"][0].update(flops="many")), "kernels[0].flops", "expected float"),
    (mutate(lambda d: d["kernels"][0].update(flops=True)), "kernels[0].flops", "expected a number"),
    (mutate(lambda d: d["kernels"][1].update(category="matmul")), "kernels[1].category",
     "unknown category 'matmul'"),
    (mutate(lambda d: d["kernels"][1].update(phase="fwd")), "kernels[1].phase",
     "unknown phase 'fwd'"),
    (mutate(lambda d: d["kernels"][0].update(layer="0")), "kernels[0].layer", "expected int"),
    ([1, 2], "<root>", "expected a JSON object"),
    ("{not json", "<file>", "not valid JSON (line 1"),
])
def test_malformed_trace_files_name_file_and_field(tmp_path, doc, field: str,
                                                   problem: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(SchemaError) as err:
        Trace.load(path)
    assert err.value.field == field and err.value.path == path
    msg = str(err.value)
    assert msg.startswith(path) and f"'{field}'" in msg and problem in msg


def test_missing_trace_file_is_a_user_error(tmp_path) -> None:
    with pytest.raises(JouleboundError, match="file not found"):
        Trace.load(tmp_path / "nope.json")


def test_trace_views_and_signature_groups() -> None:
    tr = Trace(small_trace().kernels + [Kernel("qkv_gemm", "gemm", "forward", 1, 1.5e9, 3e6,
                                               "bf16")])
    assert tr.total_flops == pytest.approx(1.5e9 * 2 + 5e6 + 1e6)
    groups = tr.signature_groups()
    assert groups[0] == groups[3] and len(set(groups)) == 3  # layer does not split a signature
    assert tr.count_by("phase") == {"forward": 3, "optimizer": 1}
    assert tr.kernels[2].intensity == pytest.approx(0.05)
    assert Kernel("x", "memcpy", "other", None, 0, 0).intensity == math.inf


# -- Plan ----------------------------------------------------------------------------------------
def small_plan() -> Plan:
    configs = [ClockConfig(), ClockConfig(1410, 1593), ClockConfig(1005, 1593)]
    return Plan(device="a100-sxm4-80gb", kernel_names=["a", "b", "c", "d", "e"], configs=configs,
                choice=np.array([1, 1, 2, 2, 0]), objective="waste", slowdown=0.01,
                switch_latency_s=0.006, predicted_time_s=1.01, predicted_energy_j=85.0,
                baseline_time_s=1.0, baseline_energy_j=100.0, meta={"solver": "milp"})


def test_plan_round_trip_and_phases(tmp_path) -> None:
    plan = small_plan()
    back = Plan.load(plan.save(tmp_path / "plan.json"))
    assert back.configs == plan.configs and back.kernel_names == plan.kernel_names
    assert np.array_equal(back.choice, plan.choice) and back.meta == {"solver": "milp"}
    assert back.n_switches == 2
    assert [(p.start, p.stop, p.config.label) for p in back.phases()] == [
        (0, 2, "1410/1593"), (2, 4, "1005/1593"), (4, 5, "auto")]
    assert back.energy_delta == pytest.approx(-0.15) and back.time_delta == pytest.approx(0.01)


def test_plan_nan_totals_survive_a_round_trip(tmp_path) -> None:
    plan = Plan(device="t4", kernel_names=["a"], configs=[ClockConfig()], choice=[0])
    back = Plan.load(plan.save(tmp_path / "p.json"))
    assert math.isnan(back.predicted_energy_j) and back.provenance == "modeled"


@pytest.mark.parametrize(("fn", "field", "problem"), [
    (lambda d: d.update(choice=[0, 1]), "choice", "has 2 entries for 5 kernels"),
    (lambda d: d.update(choice=[0, 1, 2, 3, 0]), "choice", "indices into configs"),
    (lambda d: d.update(configs=["fast"]), "configs", "cannot parse clock"),
    (lambda d: d.update(version=2), "version", "not supported"),
    (lambda d: d.pop("device"), "device", "missing"),
])
def test_malformed_plan_files_name_the_field(tmp_path, fn, field: str, problem: str) -> None:
    doc = json.loads(json.dumps(small_plan().to_json()))
    fn(doc)
    path = write(tmp_path, doc, "plan.json")
    with pytest.raises(SchemaError) as err:
        Plan.load(path)
    assert err.value.field == field and problem in str(err.value) and "plan.json" in str(err.value)


def test_plan_rejects_bad_choice_in_memory() -> None:
    with pytest.raises(ValueError, match="outside configs"):
        Plan(device="x", kernel_names=["a"], configs=[ClockConfig()], choice=[3])


# -- Characterization ----------------------------------------------------------------------------
def small_char() -> Characterization:
    rng = np.random.default_rng(0)
    configs = [ClockConfig(), ClockConfig(1410, 1593), ClockConfig(1005, 1593)]
    t = rng.uniform(1e-4, 1e-3, (4, 3))
    return Characterization(kernel_names=["a", "b", "c", "d"], configs=configs, time_s=t,
                            energy_j=t * 250.0, measured=[[1, 1, 0]] * 4, device="a100-sxm4-80gb",
                            time_spread_s=t * 0.01, meta={"trace": "gpt3-xl"})


def test_characterization_round_trip(tmp_path) -> None:
    ch = small_char()
    back = Characterization.load(ch.save(tmp_path / "char.npz"))
    assert back.kernel_names == ch.kernel_names and back.configs == ch.configs
    assert np.array_equal(back.time_s, ch.time_s) and np.array_equal(back.energy_j, ch.energy_j)
    assert np.array_equal(back.measured, ch.measured) and back.energy_spread_j is None
    assert np.array_equal(back.time_spread_s, ch.time_spread_s)
    assert back.provenance() == "measured+modeled" and back.auto_index == 0
    assert back.config_index(ClockConfig(1005, 1593)) == 2 and back.meta == {"trace": "gpt3-xl"}
    with pytest.raises(KeyError, match="not characterized"):
        back.config_index(ClockConfig(900, 1593))


def test_characterization_bad_files(tmp_path) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(SchemaError, match="junk.npz.*not a joulebound characterization"):
        Characterization.load(junk)
    with pytest.raises(JouleboundError, match="file not found"):
        Characterization.load(tmp_path / "absent.npz")
    with pytest.raises(ValueError, match=r"time_s has shape \(2, 3\)"):
        Characterization(kernel_names=["a"], configs=[ClockConfig()] * 3,
                         time_s=np.zeros((2, 3)), energy_j=np.zeros((1, 3)),
                         measured=np.zeros((1, 3)))


def test_characterization_wrong_version_names_field(tmp_path) -> None:
    ch = small_char()
    path = ch.save(tmp_path / "c.npz")
    z = dict(np.load(path))
    header = json.loads(str(z.pop("header")))
    header["version"] = 7
    np.savez(path, header=np.array(json.dumps(header)), **z)
    with pytest.raises(SchemaError) as err:
        Characterization.load(path)
    assert err.value.field == "version" and "c.npz" in str(err.value)


def test_writing_to_a_folder_is_a_user_error(tmp_path):
    from joulebound.core.errors import JouleboundError
    from joulebound.core.jsonio import write_json

    with pytest.raises(JouleboundError, match="is a folder"):
        write_json(tmp_path, {"a": 1})


def test_error_text_with_brackets_is_printed_verbatim(capsys, tmp_path):
    from joulebound.cli import main

    bad = tmp_path / "t.json"
    bad.write_text('{"schema": "joulebound.trace", "version": 1, "kernels": [{"name": 1}]}')
    assert main(["trace", str(bad)]) == 2
    assert "kernels[0]" in capsys.readouterr().err


def test_runs_on_a_foreign_sqlite_file_does_not_add_tables(capsys, tmp_path):
    import sqlite3

    from joulebound.cli import main

    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE sweep_results (x INTEGER)")
    con.commit()
    con.close()
    assert main(["runs", str(db)]) == 2
    assert "not a joulebound measurement store" in capsys.readouterr().err
    tables = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master")}
    assert tables == {"sweep_results"}
