"""Device catalog: built-in entries, lookup, sources, and the real nvidia-smi tables."""

from __future__ import annotations

import pytest

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError
from joulebound.hw.catalog import SOURCED_FIELDS, builtin_dir, get_device, list_devices, load_entry
from joulebound.hw.nvsmi import parse_nvsmi
from joulebound.hw.spec import DeviceSpec

REQUIRED = ["rtx3080ti", "rtx3080", "rtx3090", "rtx2080ti", "a40", "a100-pcie-80gb",
            "a100-sxm4-80gb", "v100-sxm2", "h100-sxm", "h200-sxm", "b200", "t4", "a10g",
            "rtxa5000", "v100-pcie", "rtx6000", "p100-pcie",
            # issue 28 item 12: datasheet-cited entries
            "a100-pcie-40gb", "a100-sxm4-40gb", "h100-pcie", "l4", "l40s", "rtx4090"]

#: built-in entry -> (XML file, gpu index) whose clock table it must equal
REAL = {
    "a100-sxm4-80gb": ("a100-sxm4-v12.xml", 0),
    "rtx3080": ("rtx-3080-v12.xml", 0),
    "rtx3090": ("rtx-3090-v12.xml", 0),
    "t4": ("tesla-t4.xml", 0),
    "a10g": ("a10g.xml", 0),
    "rtxa5000": ("dual_a5000-v13.xml", 0),
}


def test_catalog_has_required_gpus():
    names = {d.name for d in list_devices()}
    assert set(REQUIRED) <= names
    assert len(names) >= 9


@pytest.mark.parametrize("name", REQUIRED)
def test_entry_is_consistent_and_sourced(name):
    d = get_device(name)
    assert isinstance(d, DeviceSpec)
    assert d.max_mem_mhz in d.supported_clocks
    assert d.max_core_mhz == max(max(v) for v in d.supported_clocks.values())
    assert d.default_core_mhz <= d.max_core_mhz
    assert d.power_limit_min_w <= d.power_limit_default_w <= d.power_limit_max_w
    assert 0 < d.idle_power_w < d.power_limit_min_w + 100
    assert d.mem_bandwidth_bps > 1e11
    assert d.peak("fp32") > 1e12 and d.peak("bf16") >= d.peak("fp32")
    for field in SOURCED_FIELDS:
        assert d.sources.get(field), f"{name}: no source for {field}"
    if d.tables_constructed:
        assert "CONSTRUCTED" in d.sources["supported_clocks"]
    # every pair is supported and listed once
    pairs = d.clock_pairs()
    assert len(pairs) == len(set(pairs)) == sum(len(v) for v in d.supported_clocks.values())
    assert all(d.supports(p) for p in pairs[:5])


def test_constructed_vs_real_flags():
    assert get_device("rtx3080ti").tables_constructed
    for name in REAL:
        assert not get_device(name).tables_constructed


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_tables_equal_parsed_xml(shared_data, name):
    file, idx = REAL[name]
    g = parse_nvsmi(shared_data / "nvidia_smi" / file)[idx]
    d = get_device(name)
    assert d.supported_clocks == {m: sorted(c, reverse=True) for m, c in g.supported_clocks.items()}
    assert d.max_core_mhz == g.max_core_mhz and d.max_mem_mhz == g.max_mem_mhz
    assert (d.power_limit_default_w, d.power_limit_min_w, d.power_limit_max_w) == (
        g.power_limit_default_w, g.power_limit_min_w, g.power_limit_max_w)
    assert d.product_name == g.product_name and d.architecture == g.architecture
    assert file in d.sources["supported_clocks"]


def test_a100_sxm4_table(shared_data):
    g = parse_nvsmi(shared_data / "nvidia_smi" / "a100-sxm4-v12.xml")[0]
    assert list(g.supported_clocks) == [1593]
    clocks = g.supported_clocks[1593]
    assert len(clocks) == 81 and min(clocks) == 210 and max(clocks) == 1410
    d = get_device("a100-sxm4-80gb")
    assert d.core_clocks_mhz(1593) == list(range(1410, 209, -15))
    assert d.default_core_mhz == 1275  # default application clock in the XML


@pytest.mark.parametrize("alias,name", [
    ("3080ti", "rtx3080ti"), ("RTX 3080 Ti", "rtx3080ti"), ("a100", "a100-sxm4-80gb"),
    ("A100-SXM4-80GB", "a100-sxm4-80gb"), ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("a100_pcie_80gb", "a100-pcie-80gb"), ("h200", "h200-sxm"), ("A40", "a40"),
    ("Tesla T4", "t4"), ("NVIDIA GeForce RTX 3090", "rtx3090"), ("v100", "v100-sxm2"),
])
def test_aliases_and_product_names(alias, name):
    assert get_device(alias).name == name


def test_unknown_name_lists_choices():
    with pytest.raises(JouleboundError) as e:
        get_device("a1000")
    msg = str(e.value)
    assert "unknown GPU 'a1000'" in msg and "Did you mean" in msg and "rtx3080ti" in msg


def test_get_device_returns_copy():
    d = get_device("a40")
    d.supported_clocks.clear()
    assert get_device("a40").supported_clocks


def test_geforce_peaks_scale_to_max_clock():
    d = get_device("rtx3080")
    # 59.5 TFLOP/s (FP32 accumulate) at the 1710 MHz rated boost -> at the 2100 MHz table top
    assert d.boost_core_mhz == 1710
    assert d.peak("bf16") == pytest.approx(59.5e12 * 2100 / 1710, rel=1e-3)
    assert d.peak("bf16") == pytest.approx(2 * d.peak("fp32"), rel=0.01)


def test_builtin_files_load():
    files = sorted(builtin_dir().glob("*.toml"))
    assert len(files) >= 14
    for f in files:
        spec, _ = load_entry(f)
        assert f.stem == spec.name


def test_clock_pairs_a40():
    d = get_device("a40")
    pairs = d.clock_pairs(include_auto=True)
    assert pairs[0] == ClockConfig()
    assert pairs[1] == ClockConfig(1740, 7251)
    assert len(pairs) == 1 + 103


def test_constructed_tables_follow_their_stated_construction(shared_data):
    """The 3080 Ti / 2080 Ti tables are the RTX 3080 / RTX 2080 tables, as their sources say."""
    r3080 = parse_nvsmi(shared_data / "nvidia_smi" / "rtx-3080-v12.xml")[0].supported_clocks
    r2080 = parse_nvsmi(shared_data / "nvidia_smi" / "dual_2080-v13.xml")[0].supported_clocks
    assert get_device("rtx3080ti").supported_clocks == {m: sorted(c, reverse=True)
                                                        for m, c in r3080.items()}
    assert get_device("rtx2080ti").supported_clocks == {m: sorted(c, reverse=True)
                                                        for m, c in r2080.items()}
    assert "rtx-3080-v12.xml" in get_device("rtx3080ti").sources["supported_clocks"]


@pytest.mark.parametrize("name", REQUIRED)
def test_tables_use_15_mhz_steps(name):
    d = get_device(name)
    for cores in d.supported_clocks.values():
        assert all(a - b == 15 for a, b in zip(cores, cores[1:], strict=False))


def test_every_builtin_names_a_known_sourced_interconnect():
    from joulebound.hw.links import LINKS

    for spec in list_devices():
        if not spec.sources.get("interconnect"):
            continue  # user entries may leave it out
        assert spec.interconnect in LINKS and LINKS[spec.interconnect].scope == "intra", spec.name
    assert get_device("a100-sxm4-80gb").interconnect == "nvlink3"
    assert get_device("a40").interconnect == "pcie4"
    assert not __import__("joulebound.hw.links", fromlist=["LINKS"]).LINKS[
        get_device("rtx3090").interconnect].p2p  # GeForce: no PCIe peer-to-peer


def test_interconnect_field_is_validated_and_round_trips(tmp_path):
    import tomllib

    from joulebound.core.errors import SchemaError
    from joulebound.hw.catalog import spec_from_dict, spec_to_toml

    spec = get_device("a40")
    doc = tomllib.loads(spec_to_toml(spec))
    assert doc["interconnect"] == "pcie4"
    assert spec_from_dict(doc, "x.toml")[0].interconnect == "pcie4"
    doc["interconnect"] = "PCIe Gen5"
    assert spec_from_dict(doc, "x.toml")[0].interconnect == "pcie5"
    for bad, needle in (("pcie9", "unknown interconnect 'pcie9'"), ("ib-hdr", "cannot be used between the GPUs")):
        doc["interconnect"] = bad
        with pytest.raises(SchemaError, match="interconnect") as e:
            spec_from_dict(doc, "x.toml")
        assert needle in str(e.value)


#: issue 28 item 12: datasheet figures of the new entries (W, GB/s, dense fp32 TFLOP/s, GiB)
DATASHEET = {"a100-pcie-40gb": (250, 1555, 19.5, 40), "a100-sxm4-40gb": (400, 1555, 19.5, 40),
             "h100-pcie": (350, 2000, 51.0, 80), "l4": (72, 300, 30.3, 24),
             "l40s": (350, 864, 91.6, 48), "rtx4090": (450, 1008, 82.6, 24)}


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_new_entries_carry_their_datasheet_figures(name):
    tdp, gbs, fp32, gib = DATASHEET[name]
    d = get_device(name)
    assert d.power_limit_default_w == d.power_limit_max_w == tdp
    assert d.mem_bandwidth_bps == pytest.approx(gbs * 1e9)
    assert d.peak("fp32") == pytest.approx(fp32 * 1e12)
    assert d.memory_bytes == gib * 2 ** 30
    # the top clock is the one the datasheet's FP32 rate is at: SMs x FP32 lanes per SM (GA100
    # 64, Hopper and Ada 128) x 2 x clock
    lanes = 64 if d.architecture == "Ampere" else 128
    assert d.sm_count * lanes * 2 * d.max_core_mhz * 1e6 == pytest.approx(d.peak("fp32"),
                                                                          rel=0.01)
    # a value no source gives is marked (estimate / unknown), never bare
    for field in ("idle_power_w", "power_limit_min_w", "default_core_mhz"):
        src = d.sources[field].lower()
        assert "estimate" in src or "energaizer" in src or "specifications" in src, (field, src)


def test_a100_40gb_pcie_idle_power_is_energaizers_reading(shared_data):
    import json

    idle = json.loads((shared_data / "energaizer_device" / "yz8" / "idle_power.json").read_text())
    assert get_device("a100-pcie-40gb").idle_power_w == idle["1410"]


def test_a100_sxm4_80gb_power_limit_says_what_500_w_is():
    """500 W is that HGX board's configured limit; the datasheet TDP (400 W) is named beside it
    and carried by the 40GB SXM entry; the 80GB figure is unchanged (the model is fitted on it)."""
    d = get_device("a100-sxm4-80gb")
    assert d.power_limit_default_w == 500.0 and "400 W" in d.sources["power_limit_default_w"]
    assert get_device("a100-sxm4-40gb").power_limit_default_w == 400.0
