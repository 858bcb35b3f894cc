"""``joulebound devices``: list, show and import GPU catalog entries.

* ``joulebound devices`` (or ``devices list``) — one row per GPU.
* ``joulebound devices NAME`` (or ``devices show NAME``) — every field with its source.
* ``joulebound devices import FILE`` — add a GPU from a TOML entry or ``nvidia-smi -q -x`` output.
* ``joulebound devices remove NAME`` — delete a user entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from joulebound.cli._common import reflow
from joulebound.core.provenance import PUBLISHED

if TYPE_CHECKING:
    from joulebound.hw.spec import DeviceSpec

LIST_HELP = """List every GPU in the catalog (built-in and user entries).

Columns: catalog name, product name, architecture, number of memory clocks, number of core clocks
at the top memory clock, core clock range (MHz), top memory clock (MHz), dense BF16 tensor peak
at the top core clock (TFLOP/s), DRAM bandwidth (GB/s), default power limit (W), published
clock-switch latency, and whether the clock table is a real nvidia-smi table or constructed.
All values are published (datasheets, nvidia-smi tables); values marked * have a source that
is (or includes) an estimate. Run `joulebound devices NAME` for every field with its source.

--json prints a list of objects with keys: name, product_name, architecture, aliases, origin,
n_mem_clocks, n_core_clocks, core_min_mhz, core_max_mhz, max_mem_mhz, bf16_tflops,
mem_bandwidth_gbs, tdp_w, switch_latency_s (null when none is published), tables
("real" | "constructed"), estimates (fields whose source is or includes an estimate),
provenance ("published")."""

SHOW_HELP = """Show one GPU: every field, its value and its source.

NAME is a catalog name, an alias (e.g. 3080ti, a100, h200) or an nvidia-smi product name.
--json prints the DeviceSpec fields (name, product_name, architecture, supported_clocks
{memory MHz: [core MHz, ...]}, default_core_mhz, max_core_mhz, boost_core_mhz, default_mem_mhz,
max_mem_mhz, peak_flops {dtype: FLOP/s}, mem_bandwidth_bps, power_limit_default_w,
power_limit_min_w, power_limit_max_w, idle_power_w, memory_bytes, sm_count, switch_latency_s,
sensor_period_s, vf_curve, tables_constructed, interconnect (GPU-to-GPU link name, see
joulebound.hw.links), sources {field: source}) plus aliases, origin,
ridge_point_flop_per_byte, provenance ("published"; fields whose source says estimate are listed
in estimates)."""

IMPORT_HELP = """Add a GPU to your user catalog ($JOULEBOUND_HOME/devices or
~/.config/joulebound/devices) from FILE: a TOML entry (format: docs/devices.md, or any file in
joulebound/hw/data) or the output of `nvidia-smi -q -x > gpu.xml`.

From nvidia-smi output the clock table, max and default clocks, power limits, memory size,
product name and architecture are read; peak FLOP/s, bandwidth, idle power, switch latency and
sensor period are not in that output and are taken from the catalog entry given by --like (by
default the entry whose product name matches). Afterwards every joulebound command finds the GPU
by its name. --json prints {"name", "path", "device": <DeviceSpec fields>}."""


LIST_HELP, SHOW_HELP, IMPORT_HELP = (reflow(h) for h in (LIST_HELP, SHOW_HELP, IMPORT_HELP))


class _DevicesGroup(TyperGroup):
    """``joulebound devices NAME`` means ``joulebound devices show NAME``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        for i, a in enumerate(args):
            if a.startswith("-"):
                continue
            if a not in self.commands:
                args = [*args[:i], "show", *args[i:]]
            break
        return super().parse_args(ctx, args)


devices_app = typer.Typer(
    cls=_DevicesGroup,
    help="The GPU catalog: clock tables, peak rates, power limits, with sources. "
    "`joulebound devices` lists, `joulebound devices NAME` shows one, "
    "`joulebound devices import FILE` adds one.",
    invoke_without_command=True,
    no_args_is_help=False,
)


def _is_estimate(spec: DeviceSpec, key: str) -> bool:
    return "estimate" in spec.sources.get(key, "").lower()


def _row(spec: DeviceSpec) -> dict[str, Any]:
    from joulebound.hw.catalog import device_aliases, device_origin

    core = spec.core_clocks_mhz()
    bf16 = spec.peak_flops.get("bf16")        # None: no bf16 units (Volta, Turing, Pascal)
    return {
        "name": spec.name,
        "product_name": spec.product_name,
        "architecture": spec.architecture,
        "aliases": device_aliases(spec.name),
        "origin": device_origin(spec.name),
        "n_mem_clocks": len(spec.supported_clocks),
        "n_core_clocks": len(core),
        "core_min_mhz": min(core),
        "core_max_mhz": max(core),
        "max_mem_mhz": spec.max_mem_mhz,
        "bf16_tflops": None if bf16 is None else bf16 / 1e12,
        "mem_bandwidth_gbs": spec.mem_bandwidth_bps / 1e9,
        "tdp_w": spec.power_limit_default_w,
        "switch_latency_s": spec.switch_latency_s,
        "tables": "constructed" if spec.tables_constructed else "real",
        "estimates": sorted(k for k in spec.sources if _is_estimate(spec, k)),
        "provenance": PUBLISHED,
    }


def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (keys in --help).")] = False,
) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from joulebound.cli._common import console, print_json
    from joulebound.hw.catalog import broken_user_entries, list_devices

    specs = list_devices()
    rows = [_row(s) for s in specs]
    if as_json:
        print_json(rows)
        return
    wide = console.width >= 150  # narrow terminals: drop product and architecture columns
    t = Table(title=f"GPU catalog ({len(rows)} entries) — published values; * = estimate",
              title_justify="left", box=box.SIMPLE_HEAD if wide else None, pad_edge=False)
    cols = [("name", "left"), ("product", "left"), ("arch", "left"),
            ("#mem\nclk", "right"), ("#core\nclk", "right"), ("core\nMHz", "right"),
            ("mem\nMHz", "right"), ("bf16\nTFLOP/s", "right"), ("DRAM\nGB/s", "right"),
            ("TDP\nW", "right"), ("switch\nlat", "right"), ("table", "left")]
    if not wide:
        cols[-1] = ("tbl", "left")
    keep = [i for i in range(len(cols)) if wide or i not in (1, 2)]
    for i in keep:
        col, just = cols[i]
        t.add_column(col, justify=just, no_wrap=i in (0, 5))  # type: ignore[arg-type]
    for s, r in zip(specs, rows, strict=True):
        def star(key: str, text: str, _s: DeviceSpec = s) -> str:
            return text + ("*" if _is_estimate(_s, key) else "")

        lat = "-" if r["switch_latency_s"] is None else f"{r['switch_latency_s'] * 1e3:g}ms"
        cells = [
            r["name"], r["product_name"], r["architecture"], str(r["n_mem_clocks"]),
            str(r["n_core_clocks"]), f"{r['core_min_mhz']}-{r['core_max_mhz']}",
            str(r["max_mem_mhz"]),
            star("peak_flops", "–" if r["bf16_tflops"] is None else f"{r['bf16_tflops']:.1f}"),
            star("mem_bandwidth_bps", f"{r['mem_bandwidth_gbs']:.0f}"),
            star("power_limit_default_w", f"{r['tdp_w']:.0f}"), star("switch_latency_s", lat),
            ("constructed" if wide else "constr") if s.tables_constructed else "real",
        ]
        t.add_row(*[cells[i] for i in keep])
    console.print(t)
    for msg in broken_user_entries():
        console.print(f"[yellow]skipped user entry:[/] {escape(msg)}", highlight=False)
    console.print("bf16 = dense tensor-core peak at the top core clock (GeForce: FP32 accumulate); "
                  "– = no bf16 units (bf16 then runs at the fp32 rate). "
                  "`joulebound devices NAME` shows every field with its source; "
                  "`joulebound devices import FILE` adds a GPU.", style="dim")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def show_command(
    name: Annotated[str, typer.Argument(help="Catalog name, alias or nvidia-smi product name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (keys in --help).")] = False,
) -> None:
    from rich.table import Table

    from joulebound.cli._common import console, print_json
    from joulebound.hw.catalog import device_aliases, device_origin, get_device

    spec = get_device(name)
    if as_json:
        doc = spec.to_json()
        doc["aliases"] = device_aliases(spec.name)
        doc["origin"] = device_origin(spec.name)
        doc["ridge_point_flop_per_byte"] = spec.ridge_point
        doc["provenance"] = PUBLISHED
        doc["estimates"] = sorted(k for k in spec.sources if _is_estimate(spec, k))
        doc["model_params"] = model_params_json(spec)
        print_json(doc)
        return
    t = Table(title=f"{spec.product_name} ({spec.name}) — {device_origin(spec.name)}",
              title_justify="left", show_lines=False)
    t.add_column("field")
    t.add_column("value", justify="right")
    t.add_column("source", overflow="fold")
    src = spec.sources
    aliases = device_aliases(spec.name)
    rows: list[tuple[str, str, str]] = [
        ("aliases", ", ".join(aliases) or "-", "catalog"),
        ("architecture", spec.architecture, src.get("architecture", "-")),
    ]
    table_src = src.get("supported_clocks", "-")
    for m in spec.mem_clocks_mhz:
        cores = spec.core_clocks_mhz(m)
        rows.append((f"core clocks @ mem {m} MHz", f"{len(cores)}: {min(cores)}-{max(cores)} MHz",
                     table_src if m == spec.max_mem_mhz else "same"))
    rows += [
        ("tables", "constructed" if spec.tables_constructed else "real nvidia-smi",
         "see the core clocks rows"),
        ("default core clock", f"{spec.default_core_mhz} MHz", src.get("default_core_mhz", "-")),
        ("max core clock", f"{spec.max_core_mhz} MHz", src.get("max_core_mhz", "-")),
        ("rated boost clock", "-" if spec.boost_core_mhz is None else f"{spec.boost_core_mhz} MHz",
         src.get("boost_core_mhz", "-")),
        ("default memory clock", f"{spec.default_mem_mhz} MHz", src.get("default_mem_mhz", "-")),
        ("max memory clock", f"{spec.max_mem_mhz} MHz", src.get("max_mem_mhz", "-")),
    ]
    for dtype, v in spec.peak_flops.items():
        rows.append((f"peak {dtype} (dense, at max clock)", f"{v / 1e12:.1f} TFLOP/s",
                     src.get("peak_flops", "-") if dtype == next(iter(spec.peak_flops)) else "same"))
    rows += [
        ("memory bandwidth", f"{spec.mem_bandwidth_bps / 1e9:.0f} GB/s",
         src.get("mem_bandwidth_bps", "-")),
        ("ridge point (tensor math)", f"{spec.ridge_point:.0f} FLOP/B",
         "peak bf16 (else fp16) / bandwidth"),
        ("memory", f"{spec.memory_bytes / 2**30:.1f} GiB", src.get("memory_bytes", "-")),
        ("memory type", spec.memory_type or "-", src.get("memory_type", "-")),
        ("SMs", _fmt(spec.sm_count or None), src.get("sm_count", "-")),
        ("power limit default", f"{spec.power_limit_default_w:g} W",
         src.get("power_limit_default_w", "-")),
        ("power limit min", f"{spec.power_limit_min_w:g} W", src.get("power_limit_min_w", "-")),
        ("power limit max", f"{spec.power_limit_max_w:g} W", src.get("power_limit_max_w", "-")),
        ("idle power", f"{spec.idle_power_w:.4g} W", src.get("idle_power_w", "-")),
        ("clock-switch latency", "-" if spec.switch_latency_s is None
         else f"{spec.switch_latency_s * 1e3:g} ms", src.get("switch_latency_s", "-")),
        ("power-sensor period", "-" if spec.sensor_period_s is None
         else f"{spec.sensor_period_s * 1e3:g} ms", src.get("sensor_period_s", "-")),
        ("V-f curve", "-" if not spec.vf_curve else f"{len(spec.vf_curve)} points",
         src.get("vf_curve", "-")),
        ("GPU-to-GPU link", spec.interconnect or "- (pcie4 assumed)", src.get("interconnect", "-")),
    ]
    known = {"architecture", "supported_clocks", "default_core_mhz", "max_core_mhz",
             "boost_core_mhz", "default_mem_mhz", "max_mem_mhz", "peak_flops",
             "mem_bandwidth_bps", "memory_bytes", "sm_count", "power_limit_default_w",
             "power_limit_min_w", "power_limit_max_w", "idle_power_w", "switch_latency_s",
             "sensor_period_s", "vf_curve", "product_name", "memory_type", "interconnect"}
    rows += [(k, "", v) for k, v in src.items() if k not in known]
    for field, value, source in rows:
        style = "yellow" if "estimate" in source.lower() else None
        t.add_row(field, value, source, style=style)
    console.print(t)
    console.print("Values are published (datasheets, nvidia-smi tables) unless the source says "
                  "estimate (yellow).", style="dim")
    console.print()
    console.print(model_params_table(spec))


def _param_value(prm, name: str) -> str:
    """A short text of one model parameter's value (see joulebound.gpumodel.params)."""
    v = getattr(prm, name)
    if name == "vf":
        return f"knee {v.knee_mhz:.0f} MHz, floor {v.v_min:.2f}"
    if name == "mem_v":
        return ", ".join(f"{a:.2f}:{b:.2f}" for a, b in v)
    if isinstance(v, dict):
        keys = ("gemm", "attention", "elementwise", "softmax", "norm")
        return ", ".join(f"{k} {v[k]:.2f}" for k in keys if k in v)
    if v is None:
        return "top of table"
    return f"{v:.4g}"


def model_params_json(spec: DeviceSpec) -> dict[str, Any]:
    from joulebound.gpumodel.params import PARAMETERS, params_for

    prm = params_for(spec)
    defaulted = set(prm.defaulted())
    return {"calibration": prm.calibration, "heldout": prm.heldout, "n_draws": len(prm.draws),
            "defaulted": sorted(defaulted),
            "params": {k: {"value": _param_value(prm, k), "unit": PARAMETERS[k],
                           "source": "default" if k in defaulted else next(
                               (v for s, v in prm.sources.items()
                                if k in s.replace(",", " ").split()), "")}
                       for k in PARAMETERS}}


def model_params_table(spec: DeviceSpec):
    """The GPU model's parameters for this device: value, source, and 'default' (yellow) for
    those nobody fitted."""
    from rich.table import Table

    doc = model_params_json(spec)
    h = doc["heldout"] or {}
    err = (f"; held-out {h['time_mape']:.1f} % time / {h['energy_mape']:.1f} % energy "
           f"({h.get('check')})" if h.get("time_mape") is not None else "")
    t = Table(title=f"GPU model parameters ({doc['calibration']}, {doc['n_draws']} bootstrap "
              f"draws{err})", title_justify="left")
    t.add_column("parameter")
    t.add_column("value", justify="right")
    t.add_column("source", overflow="fold")
    for k, d in doc["params"].items():
        t.add_row(k, d["value"], d["source"], style="yellow" if d["source"] == "default" else None)
    t.caption = (f"default (yellow) = not fitted on any data: {', '.join(doc['defaulted'])}"
                 if doc["defaulted"] else "every parameter fitted")
    t.caption_justify = "left"
    return t


def import_command(
    file: Annotated[str, typer.Argument(help="TOML entry or `nvidia-smi -q -x` XML file.")],
    name: Annotated[str | None, typer.Option(help="Catalog name to store it under (default: "
                                             "from the file / product name).")] = None,
    like: Annotated[str | None, typer.Option(help="For XML: catalog entry to take peak rates, "
                                             "bandwidth and idle power from.")] = None,
    gpu: Annotated[int, typer.Option(help="For XML with several GPUs: which one (0-based).")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing user entry.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (keys in --help).")] = False,
) -> None:
    from joulebound.cli._common import console, print_json
    from joulebound.hw.catalog import import_device

    spec, path = import_device(file, name=name, like=like, gpu_index=gpu, overwrite=force)
    if as_json:
        print_json({"name": spec.name, "path": str(path), "device": spec.to_json()})
        return
    core = spec.core_clocks_mhz()
    console.print(f"Imported [bold]{spec.name}[/] ({spec.product_name}): "
                  f"{len(spec.supported_clocks)} memory clocks, {len(core)} core clocks "
                  f"{min(core)}-{max(core)} MHz at {spec.max_mem_mhz} MHz -> {path}")
    console.print(f"Use it with e.g. `joulebound devices {spec.name}` or "
                  f"`joulebound trace gpt3-xl --device {spec.name}`.", style="dim")


def remove_command(
    name: Annotated[str, typer.Argument(help="User catalog entry to delete.")],
) -> None:
    from joulebound.cli._common import console
    from joulebound.core.errors import JouleboundError
    from joulebound.hw.catalog import user_catalog_dir

    path = user_catalog_dir() / f"{name.lower()}.toml"
    if path.resolve().parent != user_catalog_dir().resolve() or not path.exists():
        raise JouleboundError(f"no user entry {name!r} in {user_catalog_dir()} (built-in entries "
                              "cannot be removed).")
    path.unlink()
    console.print(f"Removed {path}")


@devices_app.callback()
def _default(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (see `devices list --help`).")]
    = False,
) -> None:
    if ctx.invoked_subcommand is None:
        list_command(as_json=as_json)


devices_app.command("list", help=LIST_HELP)(list_command)
devices_app.command("show", help=SHOW_HELP)(show_command)
devices_app.command("import", help=IMPORT_HELP)(import_command)
devices_app.command("remove", help="Delete a GPU from your user catalog.")(remove_command)


def register(app: typer.Typer) -> None:
    app.add_typer(devices_app, name="devices")
