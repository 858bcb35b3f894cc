"""Read ``nvidia-smi -q -x`` output (XML, driver schemas v11, v12 and v13).

What is taken from each ``<gpu>`` element:

* ``product_name``, ``product_architecture``;
* the supported-clock table (``<supported_clocks>``: memory clock -> graphics clocks, MHz);
* ``<max_clocks>`` (graphics and memory, MHz);
* ``<default_applications_clocks>`` where the driver reports them (datacenter boards;
  GeForce boards print ``N/A``);
* the board power limits (W): ``<power_readings>`` (schema v11) or ``<gpu_power_readings>``
  (v12/v13); the default / min / max limits and the instantaneous draw with the P-state;
* the framebuffer size (``<fb_memory_usage><total>``, MiB).

:func:`parse_nvsmi` returns one :class:`NvsmiGpu` per board; :meth:`NvsmiGpu.to_spec` turns it
into a :class:`~joulebound.hw.spec.DeviceSpec` (peak rates and bandwidth are not in the XML:
they come from ``base``, a catalog entry, when given). Errors name the file and the XML element.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.hw.spec import DeviceSpec

_NUM = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


@dataclass
class NvsmiGpu:
    """The fields joulebound uses from one ``<gpu>`` element of ``nvidia-smi -q -x``.

    Units: clocks in MHz, power in W, memory in bytes. ``None`` where the driver prints ``N/A``
    (or the element is absent).
    """

    source: str
    index: int
    pci_id: str
    product_name: str
    architecture: str
    driver_version: str
    supported_clocks: dict[int, list[int]]
    max_core_mhz: int
    max_mem_mhz: int
    default_app_core_mhz: int | None
    default_app_mem_mhz: int | None
    power_limit_default_w: float | None
    power_limit_min_w: float | None
    power_limit_max_w: float | None
    power_draw_w: float | None
    pstate: str | None
    memory_bytes: float | None
    notes: list[str] = field(default_factory=list)

    def to_spec(self, name: str, base: DeviceSpec | None = None,
                source_label: str | None = None) -> DeviceSpec:
        """A :class:`DeviceSpec` from this board's table.

        Clocks and power limits come from the XML (source: ``source_label`` or the file name).
        Peak rates, bandwidth, SM count, idle power, switch latency and sensor period are not in
        ``nvidia-smi`` output: they are copied from ``base`` (sources say so) when given; without
        ``base`` a :class:`JouleboundError` explains how to supply them.
        """
        src = source_label or f"nvidia-smi -q -x ({Path(self.source).name}, gpu {self.index})"
        if base is None:
            raise JouleboundError(
                f"{self.source}: nvidia-smi output has clock tables and power limits but no peak "
                f"FLOP/s or memory bandwidth for {self.product_name!r}. Pass --like NAME to take "
                "them from a catalog entry of the same chip (see `joulebound devices`), or import "
                "a TOML file that sets peak_flops and mem_bandwidth_bps (see docs/devices.md)."
            )
        sources: dict[str, str] = {}
        for key in ("supported_clocks", "max_core_mhz", "max_mem_mhz", "product_name",
                    "architecture"):
            sources[key] = f"{src}"
        default_core = self.default_app_core_mhz
        default_mem = self.default_app_mem_mhz
        if default_core is None:
            default_core = base.default_core_mhz if base.default_core_mhz <= self.max_core_mhz \
                else self.max_core_mhz
            sources["default_core_mhz"] = (f"{src} reports no default application clock; taken from "
                                           f"catalog entry {base.name!r}")
        else:
            sources["default_core_mhz"] = f"{src} <default_applications_clocks>"
        if default_mem is None:
            default_mem = self.max_mem_mhz
            sources["default_mem_mhz"] = f"{src} reports no default application clock; top memory clock"
        else:
            sources["default_mem_mhz"] = f"{src} <default_applications_clocks>"

        def limit(v: float | None, fallback: float, key: str) -> float:
            if v is None:
                sources[key] = f"not in {src}; from catalog entry {base.name!r}"
                return fallback
            sources[key] = f"{src} power readings"
            return v

        pl_def = limit(self.power_limit_default_w, base.power_limit_default_w, "power_limit_default_w")
        pl_min = limit(self.power_limit_min_w, base.power_limit_min_w, "power_limit_min_w")
        pl_max = limit(self.power_limit_max_w, base.power_limit_max_w, "power_limit_max_w")
        mem_bytes = self.memory_bytes if self.memory_bytes is not None else base.memory_bytes
        sources["memory_bytes"] = (f"{src} fb_memory_usage total" if self.memory_bytes is not None
                                   else base.sources.get("memory_bytes", f"catalog {base.name!r}"))
        # Peak rates scale with the top core clock when the table's top differs from the base's.
        ratio = self.max_core_mhz / base.max_core_mhz
        peaks = {k: v * ratio for k, v in base.peak_flops.items()}
        note = "" if ratio == 1 else f", scaled by max clock {self.max_core_mhz}/{base.max_core_mhz}"
        sources["peak_flops"] = f"catalog entry {base.name!r}{note}: {base.sources.get('peak_flops', '')}"
        sources["mem_bandwidth_bps"] = (f"catalog entry {base.name!r}: "
                                        f"{base.sources.get('mem_bandwidth_bps', '')}")
        for key in ("idle_power_w", "sm_count", "switch_latency_s", "sensor_period_s"):
            sources[key] = f"catalog entry {base.name!r}: {base.sources.get(key, '')}"
        return DeviceSpec(
            name=name,
            product_name=self.product_name,
            architecture=self.architecture,
            supported_clocks={m: sorted(c, reverse=True) for m, c in self.supported_clocks.items()},
            default_core_mhz=int(default_core),
            max_core_mhz=self.max_core_mhz,
            default_mem_mhz=int(default_mem),
            max_mem_mhz=self.max_mem_mhz,
            peak_flops=peaks,
            mem_bandwidth_bps=base.mem_bandwidth_bps,
            power_limit_default_w=pl_def,
            power_limit_min_w=pl_min,
            power_limit_max_w=pl_max,
            idle_power_w=base.idle_power_w,
            memory_bytes=float(mem_bytes),
            sm_count=base.sm_count,
            switch_latency_s=base.switch_latency_s,
            sensor_period_s=base.sensor_period_s,
            vf_curve=None,
            tables_constructed=False,
            sources=sources,
        )


def _value(text: str | None, unit: str, path: str, where: str) -> float | None:
    """Parse ``'1410 MHz'`` / ``'500.00 W'``; ``None`` for N/A-like text."""
    if text is None:
        return None
    t = text.strip()
    if not t or t.upper() in ("N/A", "[N/A]", "UNKNOWN ERROR", "[UNKNOWN ERROR]", "NOT SUPPORTED",
                              "[NOT SUPPORTED]") or "deprecated" in t.lower():
        return None
    m = _NUM.match(t)
    if not m or (m.group(2) and m.group(2).lower() != unit.lower()):
        raise SchemaError(path, where, f"expected a number in {unit}, got {text!r}")
    return float(m.group(1))


def _text(gpu: ET.Element, tag: str) -> str | None:
    el = gpu.find(tag)
    return None if el is None or el.text is None else el.text.strip()


def _supported_clocks(gpu: ET.Element, where: str, path: str) -> dict[int, list[int]]:
    """``<supported_clocks>``: memory MHz -> core MHz (descending); N/A entries dropped."""
    table: dict[int, list[int]] = {}
    sc = gpu.find("supported_clocks")
    if sc is None:
        raise SchemaError(path, f"{where}/supported_clocks",
                          "missing (run `nvidia-smi -q -x` without -d, or with -d SUPPORTED_CLOCKS)")
    for j, mem_el in enumerate(sc.findall("supported_mem_clock")):
        mem = _value(_text(mem_el, "value"), "MHz", path, f"{where}/supported_clocks/"
                     f"supported_mem_clock[{j}]/value")
        if mem is None:
            raise SchemaError(path, f"{where}/supported_clocks/supported_mem_clock[{j}]/value",
                              "missing or N/A")
        cores = []
        for k, g in enumerate(mem_el.findall("supported_graphics_clock")):
            v = _value(g.text, "MHz", path, f"{where}/supported_clocks/supported_mem_clock[{j}]/"
                       f"supported_graphics_clock[{k}]")
            if v is not None:
                cores.append(int(v))
        if cores:
            table.setdefault(int(mem), [])
            table[int(mem)] = sorted(set(table[int(mem)]) | set(cores), reverse=True)
    if not table:
        raise SchemaError(path, f"{where}/supported_clocks",
                          "no supported clocks listed (the driver printed N/A: the board does not "
                          "support application clocks)")
    return table


def _clock(gpu: ET.Element, section: str, tag: str, where: str, path: str) -> int | None:
    v = _value(_text(gpu, f"{section}/{tag}"), "MHz", path, f"{where}/{section}/{tag}")
    return None if v is None else int(v)


def _max_clocks(gpu: ET.Element, table: dict[int, list[int]], where: str, path: str,
                notes: list[str]) -> tuple[int, int]:
    """``(max core, max memory)`` MHz; the table's top where the driver says N/A (noted)."""
    max_core = _clock(gpu, "max_clocks", "graphics_clock", where, path)
    max_mem = _clock(gpu, "max_clocks", "mem_clock", where, path)
    top_mem = max(table)
    if max_mem is None:
        max_mem = top_mem
        notes.append("max_clocks/mem_clock N/A: top of the supported table used")
    if max_core is None:
        max_core = max(max(v) for v in table.values())
        notes.append("max_clocks/graphics_clock N/A: top of the supported table used")
    if max_mem not in table:
        notes.append(f"max memory clock {max_mem} MHz is not in the supported table; "
                     f"using the table's top {top_mem} MHz")
        max_mem = top_mem
    return max_core, max_mem


def _watts(pw: ET.Element | None, tag: str, where: str, path: str) -> float | None:
    if pw is None:
        return None
    return _value(_text(pw, tag), "W", path, f"{where}/{pw.tag}/{tag}")


def _gpu(gpu: ET.Element, index: int, path: str) -> NvsmiGpu:
    where = f"gpu[{index}]"
    notes: list[str] = []
    product = _text(gpu, "product_name")
    if not product:  # e.g. `nvidia-smi -q -x -d SUPPORTED_CLOCKS` output
        product = "unknown"
        notes.append("product_name missing: pass --name and --like when importing")
    arch = _text(gpu, "product_architecture") or "unknown"
    table = _supported_clocks(gpu, where, path)
    max_core, max_mem = _max_clocks(gpu, table, where, path, notes)

    pw = gpu.find("gpu_power_readings")
    if pw is None:
        pw = gpu.find("power_readings")
    draw = _watts(pw, "power_draw", where, path)
    if draw is None:
        draw = _watts(pw, "instant_power_draw", where, path)
    pstate = None if pw is None else _text(pw, "power_state")
    if pstate is not None and not re.fullmatch(r"P\d+", pstate):
        pstate = _text(gpu, "performance_state")
    mem_mib = _value(_text(gpu, "fb_memory_usage/total"), "MiB", path,
                     f"{where}/fb_memory_usage/total")
    return NvsmiGpu(
        source=path,
        index=index,
        pci_id=gpu.get("id", ""),
        product_name=product,
        architecture=arch,
        driver_version="",
        supported_clocks=table,
        max_core_mhz=max_core,
        max_mem_mhz=max_mem,
        default_app_core_mhz=_clock(gpu, "default_applications_clocks", "graphics_clock", where,
                                    path),
        default_app_mem_mhz=_clock(gpu, "default_applications_clocks", "mem_clock", where, path),
        power_limit_default_w=_watts(pw, "default_power_limit", where, path),
        power_limit_min_w=_watts(pw, "min_power_limit", where, path),
        power_limit_max_w=_watts(pw, "max_power_limit", where, path),
        power_draw_w=draw,
        pstate=pstate,
        memory_bytes=None if mem_mib is None else mem_mib * 2**20,
        notes=notes,
    )


def parse_nvsmi_text(text: str, path: str = "<nvidia-smi output>") -> list[NvsmiGpu]:
    """Parse the text of ``nvidia-smi -q -x``; one :class:`NvsmiGpu` per ``<gpu>`` element."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise JouleboundError(f"{path}: not well-formed XML ({exc}). Expected the output of "
                              "`nvidia-smi -q -x`.") from None
    if root.tag != "nvidia_smi_log":
        raise SchemaError(path, root.tag, "root element must be <nvidia_smi_log> (the output of "
                          "`nvidia-smi -q -x`)")
    gpus = root.findall("gpu")
    if not gpus:
        raise SchemaError(path, "nvidia_smi_log/gpu", "no <gpu> element in the file")
    driver = _text(root, "driver_version") or ""
    out = []
    for i, g in enumerate(gpus):
        rec = _gpu(g, i, path)
        rec.driver_version = driver
        out.append(rec)
    return out


def parse_nvsmi(path: str | Path) -> list[NvsmiGpu]:
    """Parse an ``nvidia-smi -q -x`` file; one :class:`NvsmiGpu` per board in it."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise JouleboundError(f"{p}: cannot read ({exc.strerror}).") from None
    return parse_nvsmi_text(text, str(p))
