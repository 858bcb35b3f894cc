"""``joulebound demo`` (interim): the GPT-3-XL trace summary on the RTX 3080 Ti.

This interim demo shows the two foundation pieces — the analytic kernel trace and the device
catalog — until the planner's demo replaces this module.
"""

from __future__ import annotations

from typing import Annotated

import typer

HELP = """Interim demo: the kernel trace of one GPT-3-XL training iteration (analytic, modeled
FLOPs and bytes) and the RTX 3080 Ti catalog entry (published datasheet values and real
nvidia-smi clock tables), with each kernel category placed on the device's roofline.
--json prints {"device": <DeviceSpec fields>, "trace": <joulebound trace --json document>}."""


def demo_command(
    model: Annotated[str, typer.Option(help="Model preset.")] = "gpt3-xl",
    device: Annotated[str, typer.Option(help="Device catalog name.")] = "rtx3080ti",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    from rich.table import Table

    from ..devices.catalog import get_device
    from ..workload.analytic import build_trace
    from ..workload.roofline import summarize
    from ._common import console, print_json
    from .trace import render_summary, si, summary_json

    dev = get_device(device)
    tr = build_trace(model)
    summary = summarize(tr, dev)
    if as_json:
        print_json({"device": dev.to_json(), "trace": summary_json(summary, tr)})
        return

    t = Table(title=f"Device: {dev.product_name} ({dev.name}, {dev.architecture})",
              title_justify="left")
    t.add_column("field")
    t.add_column("value", justify="right")
    t.add_column("src", justify="right")
    notes: dict[str, int] = {}

    def ref(key: str) -> str:
        text = dev.sources.get(key)
        if not text:
            return "-"
        return f"[{notes.setdefault(text, len(notes) + 1)}]"

    core = dev.core_clocks_mhz()
    rows = [
        ("memory clocks (MHz)", ", ".join(map(str, dev.mem_clocks_mhz)), "supported_clocks"),
        ("core clocks at top memory clock (MHz)",
         f"{len(core)} from {min(core)} to {max(core)}", "supported_clocks"),
        ("default / max core clock (MHz)", f"{dev.default_core_mhz} / {dev.max_core_mhz}",
         "max_core_mhz"),
        ("peak bf16 tensor (FLOP/s)", si(dev.peak("bf16")), "peak_flops"),
        ("peak fp32 (FLOP/s)", si(dev.peak("fp32")), "peak_flops"),
        ("DRAM bandwidth (B/s)", si(dev.mem_bandwidth_bps), "mem_bandwidth_bps"),
        ("ridge point bf16 (FLOP/B)", f"{dev.ridge_point:.0f}", "peak_flops"),
        ("power limit default (min-max) W",
         f"{dev.power_limit_default_w:.0f} ({dev.power_limit_min_w:.0f}-"
         f"{dev.power_limit_max_w:.0f})", "power_limit_default_w"),
        ("idle power (W)", f"{dev.idle_power_w:.0f}", "idle_power_w"),
        ("clock-switch latency", "-" if dev.switch_latency_s is None
         else f"{dev.switch_latency_s * 1e3:g} ms", "switch_latency_s"),
    ]
    for field, value, key in rows:
        t.add_row(field, value, ref(key))
    console.print(t)
    for text, n in notes.items():
        console.print(f"[{n}] {text}", style="dim", highlight=False, markup=False)
    render_summary(summary, tr, dev)
    console.print("Next: `joulebound trace PRESET --device NAME` for other models and GPUs, "
                  "`joulebound devices` for the catalog.", style="dim")


def register(app: typer.Typer) -> None:
    app.command("demo", help=HELP, short_help="Interim demo: GPT-3-XL kernel trace on the RTX "
                "3080 Ti roofline, with the device's catalog entry.")(demo_command)
