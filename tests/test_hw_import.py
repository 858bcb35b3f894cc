"""Importing GPUs (TOML and nvidia-smi XML), round trips, and bad-input messages."""

from __future__ import annotations

import tomllib

import pytest

from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.hw import catalog
from joulebound.hw.catalog import (
    builtin_dir,
    get_device,
    import_device,
    list_devices,
    load_entry,
    register_device,
    spec_from_dict,
    spec_to_toml,
    unregister_device,
)
from joulebound.hw.nvsmi import parse_nvsmi, parse_nvsmi_text


@pytest.fixture(autouse=True)
def user_home(tmp_path, monkeypatch):
    """Every test gets an empty user catalog."""
    monkeypatch.setenv("JOULEBOUND_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "devices"


def _entry(name: str = "rtx3080ti") -> dict:
    return tomllib.loads((builtin_dir() / f"{name}.toml").read_text())


def _write(tmp_path, doc_text: str, name: str = "gpu.toml"):
    p = tmp_path / name
    p.write_text(doc_text)
    return p


# -- round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["rtx3080ti", "a100-sxm4-80gb", "rtx2080ti", "b200"])
def test_toml_writer_round_trips(name):
    spec = get_device(name)
    for ranges in (False, None):
        back, aliases = spec_from_dict(tomllib.loads(spec_to_toml(spec, ["x"], ranges=ranges)), "t")
        assert back == spec and aliases == ["x"]


def test_import_toml_round_trip(tmp_path, user_home):
    spec = get_device("rtx3080ti")
    spec.name = "my-3080ti"
    path = _write(tmp_path, spec_to_toml(spec, ["mine"]))
    stored, out = import_device(path)
    assert out == user_home / "my-3080ti.toml"
    assert stored == spec
    assert get_device("MINE") == spec  # alias from the file, case-insensitive
    assert "my-3080ti" in {d.name for d in list_devices()}
    # --name renames
    stored2, _ = import_device(path, name="Other-GPU")
    assert stored2.name == "other-gpu" and get_device("other-gpu").supported_clocks == \
        spec.supported_clocks


def test_import_xml_round_trip(shared_data, user_home):
    xml = shared_data / "nvidia_smi" / "dual_2080-v13.xml"
    spec, out = import_device(xml, like="rtx2080ti", gpu_index=1)
    g = parse_nvsmi(xml)[1]
    assert spec.name == "rtx-2080" and out.exists()
    assert spec.supported_clocks == {m: sorted(c, reverse=True) for m, c in
                                     g.supported_clocks.items()}
    assert len(spec.core_clocks_mhz(7000)) == 121
    assert (spec.power_limit_default_w, spec.power_limit_min_w, spec.power_limit_max_w) == (
        215.0, 105.0, 240.0)
    assert spec.product_name == "NVIDIA GeForce RTX 2080" and spec.architecture == "Turing"
    assert not spec.tables_constructed
    assert "dual_2080-v13.xml" in spec.sources["supported_clocks"]
    assert "rtx2080ti" in spec.sources["peak_flops"]
    # found again by name and by product name after the import; reload from disk equals
    assert get_device("rtx-2080") == spec
    assert get_device("NVIDIA GeForce RTX 2080") == spec
    assert load_entry(out)[0] == spec


def test_import_xml_matches_builtin_by_product(shared_data):
    spec, _ = import_device(shared_data / "nvidia_smi" / "a10g.xml", name="a10g-mine")
    base = get_device("a10g")
    assert spec.peak_flops == base.peak_flops and spec.supported_clocks == base.supported_clocks


def test_builtin_real_tables_equal_xml_to_spec(shared_data):
    """The XML->spec path and the package data agree on every real-table field."""
    for file, name in [("a100-sxm4-v12.xml", "a100-sxm4-80gb"), ("tesla-t4.xml", "t4")]:
        g = parse_nvsmi(shared_data / "nvidia_smi" / file)[0]
        spec = g.to_spec(name, base=get_device(name))
        d = get_device(name)
        for field in ("supported_clocks", "max_core_mhz", "max_mem_mhz", "default_core_mhz",
                      "default_mem_mhz", "power_limit_default_w", "power_limit_min_w",
                      "power_limit_max_w", "memory_bytes", "product_name", "architecture"):
            assert getattr(spec, field) == getattr(d, field), (name, field)


def test_register_device():
    spec = get_device("a40")
    spec.name = "a40-lowclock"
    spec.supported_clocks = {7251: [900, 915]}
    spec.max_core_mhz = 915
    spec.default_core_mhz = 900
    register_device(spec, aliases=["lowa40"])
    try:
        assert get_device("lowa40").core_clocks_mhz() == [915, 900]
    finally:
        unregister_device("a40-lowclock")
    with pytest.raises(JouleboundError):
        get_device("lowa40")


def test_register_rejects_inconsistent_spec():
    spec = get_device("a40")
    spec.max_core_mhz = 2000  # not the top of the table
    with pytest.raises(SchemaError, match="max_core_mhz"):
        register_device(spec)


# -- bad input --------------------------------------------------------------------------------

def _bad(tmp_path, mutate, field: str, words: str):
    doc = _entry()
    mutate(doc)
    text = spec_to_toml_dict(doc)
    p = _write(tmp_path, text)
    with pytest.raises(SchemaError) as e:
        load_entry(p)
    msg = str(e.value)
    assert str(p) in msg and f"field '{field}'" in msg and words in msg, msg


def spec_to_toml_dict(doc: dict) -> str:
    """Tiny TOML writer for test documents (uses the catalog's value writer)."""
    lines, tables = [], []
    for k, v in doc.items():
        (tables if isinstance(v, dict) and k != "x" else lines).append((k, v))
    out = [f"{k} = {catalog._toml_value(v)}" for k, v in lines]
    for k, v in tables:
        out.append(f"[{k}]")
        out += [f"{catalog._key(kk)} = {catalog._toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(out) + "\n"


def test_bad_missing_field(tmp_path):
    _bad(tmp_path, lambda d: d.pop("mem_bandwidth_bps"), "mem_bandwidth_bps", "missing")


def test_bad_type(tmp_path):
    _bad(tmp_path, lambda d: d.update(idle_power_w="lots"), "idle_power_w", "expected")


def test_bad_table_key(tmp_path):
    def m(d):
        d["clock_ranges"]["fast"] = {"min": 210, "max": 300, "step": 15}
    _bad(tmp_path, m, "clock_ranges.fast", "memory clocks in MHz")


def test_bad_range(tmp_path):
    def m(d):
        d["clock_ranges"]["9501"] = {"min": 210, "max": 2101, "step": 15}
    _bad(tmp_path, m, "clock_ranges.9501", "not a multiple")


def test_bad_max_mem(tmp_path):
    _bad(tmp_path, lambda d: d.update(max_mem_mhz=1234), "max_mem_mhz", "not a memory clock")


def test_bad_power_order(tmp_path):
    _bad(tmp_path, lambda d: d.update(power_limit_min_w=400.0), "power_limit_default_w",
         "power_limit_min_w <= default <= max")


def test_bad_dtype(tmp_path):
    _bad(tmp_path, lambda d: d["peak_flops"].update(fp64=1e13), "peak_flops.fp64", "unknown dtype")


def test_bad_both_tables(tmp_path):
    _bad(tmp_path, lambda d: d.update(supported_clocks={"9501": [2100]}), "supported_clocks",
         "exactly one")


def test_bad_toml_syntax(tmp_path):
    p = _write(tmp_path, 'name = "x"\nmax_core_mhz = = 3\n')
    with pytest.raises(SchemaError) as e:
        load_entry(p)
    assert str(p) in str(e.value) and "not valid TOML" in str(e.value) and "line 2" in str(e.value)


def test_bad_xml_not_well_formed(tmp_path):
    p = _write(tmp_path, "<nvidia_smi_log><gpu>", "bad.xml")
    with pytest.raises(JouleboundError) as e:
        import_device(p, like="a40")
    assert str(p) in str(e.value) and "not well-formed XML" in str(e.value)


def test_bad_xml_wrong_root(tmp_path):
    with pytest.raises(SchemaError, match="root element must be <nvidia_smi_log>"):
        parse_nvsmi_text("<html/>", "page.xml")


def _gpu_xml(body: str) -> str:
    return f"<nvidia_smi_log><driver_version>1</driver_version><gpu id='0'>{body}</gpu>" \
           "</nvidia_smi_log>"


def test_bad_xml_missing_table(tmp_path):
    with pytest.raises(SchemaError) as e:
        parse_nvsmi_text(_gpu_xml("<product_name>X</product_name>"), "x.xml")
    assert "x.xml" in str(e.value) and "gpu[0]/supported_clocks" in str(e.value)


def test_bad_xml_clock_value():
    body = ("<product_name>X</product_name><supported_clocks><supported_mem_clock>"
            "<value>1593 MHz</value><supported_graphics_clock>fast</supported_graphics_clock>"
            "</supported_mem_clock></supported_clocks>")
    with pytest.raises(SchemaError) as e:
        parse_nvsmi_text(_gpu_xml(body), "x.xml")
    msg = str(e.value)
    assert "supported_mem_clock[0]/supported_graphics_clock[0]" in msg and "'fast'" in msg


def test_xml_minimal_parses_na_fields():
    body = ("<product_name>Mystery GPU</product_name><supported_clocks><supported_mem_clock>"
            "<value>5000 MHz</value><supported_graphics_clock>1500 MHz</supported_graphics_clock>"
            "<supported_graphics_clock>1485 MHz</supported_graphics_clock></supported_mem_clock>"
            "</supported_clocks><max_clocks><graphics_clock>N/A</graphics_clock></max_clocks>")
    g = parse_nvsmi_text(_gpu_xml(body), "m.xml")[0]
    assert g.max_core_mhz == 1500 and g.max_mem_mhz == 5000 and g.power_limit_default_w is None
    assert g.notes  # says the table's top was used
    with pytest.raises(JouleboundError, match="--like NAME"):
        g.to_spec("mystery")
    spec = g.to_spec("mystery", base=get_device("a40"))
    assert spec.power_limit_default_w == 300.0 and "catalog entry 'a40'" in \
        spec.sources["power_limit_default_w"]


def test_import_xml_without_match_needs_like(shared_data):
    with pytest.raises(JouleboundError, match="--like NAME"):
        import_device(shared_data / "nvidia_smi" / "dual_2080-v13.xml")


def test_import_xml_gpu_out_of_range(shared_data):
    with pytest.raises(JouleboundError, match="has 2 GPU"):
        import_device(shared_data / "nvidia_smi" / "dual_a5000-v13.xml", gpu_index=5)


def test_import_refuses_builtin_name_and_duplicates(shared_data, tmp_path):
    xml = shared_data / "nvidia_smi" / "a100-sxm4-v12.xml"
    with pytest.raises(JouleboundError, match="is a built-in GPU"):
        import_device(xml)
    import_device(xml, name="lab-a100")
    with pytest.raises(JouleboundError, match="--force"):
        import_device(xml, name="lab-a100")
    import_device(xml, name="lab-a100", overwrite=True)


def test_missing_file(tmp_path):
    with pytest.raises(JouleboundError, match="file not found"):
        import_device(tmp_path / "nope.toml")


def test_broken_user_file_is_skipped_not_fatal(user_home):
    user_home.mkdir(parents=True)
    (user_home / "broken.toml").write_text("name = 3\n")
    assert get_device("a40").name == "a40"
    with pytest.raises(JouleboundError, match="broken.toml"):
        get_device("broken")


def test_xml_without_product_name_needs_name(tmp_path):
    body = ("<supported_clocks><supported_mem_clock><value>5000 MHz</value>"
            "<supported_graphics_clock>1500 MHz</supported_graphics_clock>"
            "</supported_mem_clock></supported_clocks>")
    p = _write(tmp_path, _gpu_xml(body), "clocks.xml")
    with pytest.raises(JouleboundError, match="no product name; pass --name"):
        import_device(p, like="a40")
    spec, _ = import_device(p, name="clocks-only", like="a40")
    assert spec.core_clocks_mhz() == [1500] and spec.power_limit_max_w == 300.0


def test_bad_infinite_peak_names_the_file(tmp_path):
    _bad(tmp_path, lambda d: d["peak_flops"].update(fp32=float("inf")), "peak_flops.fp32",
         "finite number")


# -- the cached catalog -------------------------------------------------------------------------

def _count_builds(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = catalog._build_catalog

    def counting(files):
        calls.append(len(files))
        return real(files)

    monkeypatch.setattr(catalog, "_build_catalog", counting)
    catalog.clear_cache()
    return calls


def test_catalog_is_built_once_and_sees_an_import(tmp_path, monkeypatch):
    calls = _count_builds(monkeypatch)
    for _ in range(3):
        get_device("a100")
    assert len(calls) == 1  # cached: lookups do not reparse the catalog
    with pytest.raises(JouleboundError, match="unknown GPU"):
        get_device("cached-3080ti")
    spec = get_device("rtx3080ti")
    spec.name = "cached-3080ti"
    import_device(_write(tmp_path, spec_to_toml(spec, ["cachedalias"])))
    assert get_device("cached-3080ti") == spec  # the import invalidated the cache
    assert get_device("CachedAlias").name == "cached-3080ti"
    assert len(calls) == 2


def test_catalog_cache_follows_user_files_and_home(tmp_path, monkeypatch, user_home):
    calls = _count_builds(monkeypatch)
    spec = get_device("a40")
    spec.name = "home-a-gpu"
    user_home.mkdir(parents=True)
    entry = user_home / "home-a-gpu.toml"
    entry.write_text(spec_to_toml(spec))  # written by hand, not through import_device
    assert get_device("home-a-gpu").name == "home-a-gpu"
    # another $JOULEBOUND_HOME: its (empty) catalog, not the cached one
    monkeypatch.setenv("JOULEBOUND_HOME", str(tmp_path / "other"))
    with pytest.raises(JouleboundError, match="unknown GPU"):
        get_device("home-a-gpu")
    monkeypatch.setenv("JOULEBOUND_HOME", str(tmp_path / "home"))
    assert get_device("home-a-gpu").idle_power_w == spec.idle_power_w
    # an edited file is reread (size and mtime change) ...
    spec.idle_power_w = 12.5
    entry.write_text(spec_to_toml(spec, ["edited"]))
    assert get_device("edited").idle_power_w == 12.5
    # ... and a removed one (`joulebound devices remove`) disappears
    entry.unlink()
    with pytest.raises(JouleboundError, match="unknown GPU"):
        get_device("home-a-gpu")
    assert calls == [0, 1, 0, 1, 1, 0]  # one rebuild per change, none for repeated lookups


def test_cached_catalog_hands_out_copies():
    a = get_device("a100")
    a.supported_clocks.clear()
    a.peak_flops["fp32"] = 1.0
    list_devices()[0].sources.clear()
    b = get_device("a100")
    assert b.supported_clocks and b.peak_flops["fp32"] > 1.0
    assert list_devices()[0].sources
