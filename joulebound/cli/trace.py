"""``joulebound trace``: build or import a kernel trace and print its roofline summary."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from joulebound.cli._common import reflow
from joulebound.core.provenance import MEASURED, MODELED

if TYPE_CHECKING:
    from joulebound.hw.spec import DeviceSpec
    from joulebound.workload.roofline import KernelRow, RooflineSummary
    from joulebound.workload.trace import Trace

HELP = """Summarize the kernels of one training iteration: kernels per phase and category, FLOPs,
DRAM bytes, arithmetic intensity, and (with --device) whether each category is compute- or
memory-bound at the device's roofline ridge point.

PRESET|FILE is a model preset (gpt3-xl, gpt2-small/medium/large/xl, bert-base/large/huge,
llama2-7b/13b/70b, llama3-8b/70b, mistral-7b, qwen2-0.5b/7b, tinyllama-1.1b), a Hugging Face
config.json (llama, mistral, qwen2, gpt2, bert; or the model folder holding it), a trace file
written by `joulebound trace -o`, or a torch.profiler export_chrome_trace JSON. --lora-rank R
(with --lora-targets, default q,v) models LoRA / PEFT fine-tuning of a preset or config: frozen
base weights (no weight-gradient GEMMs, no optimizer state), adapter GEMMs and their gradients.

FLOPs and bytes of presets are modeled (closed-form formulas per kernel); roofline times are
modeled lower bounds; durations of imported traces are measured.

--json prints one object with keys: trace, source, kernels, flops, bytes, intensity, meta
(the model config or import details), device (null without --device), peak_flops
(dtype -> FLOP/s), bandwidth_bps, roofline_time_s, measured_time_s, provenance
({"flops_bytes": "modeled" (presets: closed-form formulas; imports: formulas on the recorded
shapes), "roofline_time_s": "modeled",
"measured_time_s": "measured"}), phases (list of {phase, kernels, flops, bytes, by_category,
roofline_time_s, measured_time_s}) and categories (list of {category, kernels, flops, bytes,
intensity, dtype, ridge, bound, compute_bound_kernels, roofline_time_s, measured_time_s}); with
--top N also top_kernels (list of {name, category, count, flops, bytes, intensity, bound,
roofline_time_s, measured_time_s}). Units: FLOP, bytes, FLOP/byte, s.

Examples: `joulebound trace gpt3-xl --device rtx3080ti`;
`joulebound trace llama3-8b --lora-rank 16 --lora-targets all --device h100-sxm`;
`joulebound trace ./Qwen2-7B/config.json --seq 2048`;
`joulebound trace bert-huge --batch 4 --seq 256 --json`;
`joulebound trace step.json --device h100-sxm` (a torch.profiler export).
"""


def si(x: float | None, unit: str = "", digits: int = 3) -> str:
    """``1.23 T`` style number with SI prefix (``-`` for None)."""
    if x is None:
        return "-"
    ax = abs(x)
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if ax >= scale:
            return f"{x / scale:.{digits}g} {prefix}{unit}"
    return f"{x:.{digits}g} {unit}".rstrip()


def fmt_time(t: float | None) -> str:
    """``1.23ms`` style duration (``-`` for None)."""
    if t is None:
        return "-"
    if t >= 1:
        return f"{t:.3g}s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g}ms"
    return f"{t * 1e6:.3g}µs"


def render_summary(summary: RooflineSummary, trace: Trace, device: DeviceSpec | None) -> None:
    """Print the phase and category tables of ``summary`` with rich."""
    from rich import box
    from rich.table import Table

    from joulebound.cli._common import console

    def table(title: str) -> Table:
        return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                     collapse_padding=True, padding=(0, 1))

    meta = trace.meta
    src = summary.source or "file"
    if src == "analytic":
        modern = "".join(f", {k}={meta[k]}" for k in ("kv_heads", "mlp", "norm", "bias")
                         if k in meta) + (", rope" if meta.get("rope") else "") + \
            (", untied head" if meta.get("tied") is False else "")
        lora = (f"; LoRA r={meta['lora_rank']} on {','.join(meta.get('lora_targets') or ())}: "
                f"{si(meta.get('trainable_params'))} trainable" if meta.get("lora_rank") else "")
        head = (f"[bold]{trace.name}[/] — analytic trace ({meta.get('arch')}, L={meta.get('layers')}, "
                f"d={meta.get('hidden')}, heads={meta.get('heads')}, ff={meta.get('ff')}, "
                f"S={meta.get('seq')}, B={meta.get('batch')}, {meta.get('dtype')}"
                f"{', recompute' if meta.get('recompute') else ''}{modern}); "
                f"{si(meta.get('params'))} params{lora}, {meta.get('tokens')} tokens/iteration")
    else:
        head = f"[bold]{trace.name}[/] — imported trace (source: {src})"
    console.print(head, highlight=False)
    label = MODELED if src == "analytic" else "modeled from recorded shapes"
    console.print(f"{summary.kernels} kernels, {si(summary.flops, 'FLOP')} ({label}), "
                  f"{si(summary.bytes, 'B')} DRAM traffic, intensity "
                  f"{summary.intensity or float('nan'):.1f} FLOP/B", highlight=False)

    has_meas = summary.measured_time_s is not None
    t = table("Per phase")
    for col in ("phase", "kernels", "FLOP", "bytes", "FLOP/B"):
        t.add_column(col, justify="left" if col == "phase" else "right")
    if device:
        t.add_column("roofline time\n(modeled)", justify="right")
    if has_meas:
        t.add_column("kernel time\n(measured)", justify="right")
    for p in summary.phases:
        row = [p.phase, str(p.kernels), si(p.flops), si(p.bytes),
               f"{p.flops / p.bytes:.1f}" if p.bytes else "-"]
        if device:
            row.append(fmt_time(p.roofline_time_s))
        if has_meas:
            row.append(fmt_time(p.measured_time_s))
        t.add_row(*row)
    console.print(t)

    phases = [p.phase for p in summary.phases]
    short = {"forward": "f", "backward": "b", "optimizer": "o", "other": "x"}
    t = table("Per category" + (f" on {device.name}" if device else ""))
    cols = ["category", "kernels\n" + "/".join(short.get(p, p) for p in phases), "FLOP",
            "bytes", "FLOP/B"]
    if device:
        cols += ["bound", "roofline\nmodeled"]
    if has_meas:
        cols.append("time\nmeasured")
    for col in cols:
        t.add_column(col, justify="left" if col in ("category", "bound") else "right",
                     no_wrap=col in ("category", "bound"))
    for c in summary.categories:
        counts = "/".join(str(p.by_category.get(c.category, 0)) for p in summary.phases)
        row = [c.category, counts, si(c.flops), si(c.bytes),
               f"{c.intensity:.1f}" if c.intensity is not None else "-"]
        if device:
            style = "red" if c.bound == "memory" else "green" if c.bound == "compute" else ""
            row += [f"[{style}]{c.bound}[/]" if style else c.bound,
                    fmt_time(c.roofline_time_s) if c.bound != "unknown" else "-"]
        if has_meas:
            row.append(fmt_time(c.measured_time_s))
        t.add_row(*row)
    console.print(t)
    if device:
        ridges = sorted({(c.dtype, c.ridge) for c in summary.categories if c.ridge})
        console.print(
            f"{device.product_name}: {si(device.peak('bf16'), 'FLOP/s')} bf16 tensor, "
            f"{si(device.peak('fp32'), 'FLOP/s')} fp32, {si(device.mem_bandwidth_bps, 'B/s')} "
            "DRAM at top clocks (published, device catalog); ridge point "
            + ", ".join(f"{d} {r:.0f} FLOP/B" for d, r in ridges)
            + f". Roofline time {fmt_time(summary.roofline_time_s)} in total (modeled lower "
            "bound: no launch overhead, no clock drop under the power limit).",
            highlight=False)
    else:
        console.print("Add --device NAME (e.g. rtx3080ti, a100-sxm4-80gb) for compute/memory "
                      "bounds at the roofline ridge point.", style="dim")


def short_name(name: str) -> str:
    """A kernel name without ``void``, namespaces, template and call arguments."""
    n = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    for stop in ("<", "("):
        if stop in n:
            n = n[:n.index(stop)]
    return n.rsplit("::", 1)[-1] or name


def render_top(rows: list[KernelRow], device: DeviceSpec | None) -> None:
    """Print the top-kernels table."""
    from rich import box
    from rich.table import Table

    from joulebound.cli._common import console

    t = Table(title=f"Top {len(rows)} kernels", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False, collapse_padding=True, padding=(0, 1))
    meas = any(r.measured_time_s is not None for r in rows)
    cols = ["kernel", "category", "calls", "FLOP"]
    cols += ["bound", "roofline\nmodeled"] if device else []
    cols += ["time\nmeasured"] if meas else []
    for c in cols:
        t.add_column(c, justify="left" if c in ("kernel", "category", "bound") else "right",
                     overflow="ellipsis", no_wrap=True, max_width=22 if c == "kernel" else None,
                     min_width=None if c == "kernel" else
                     {"category": 9, "calls": 5, "FLOP": 6, "bound": 7}.get(c, 8))
    for r in rows:
        row = [short_name(r.name), r.category, str(r.count), si(r.flops)]
        if device:
            row += [r.bound, fmt_time(r.roofline_time_s) if r.bound != "unknown" else "-"]
        if meas:
            row.append(fmt_time(r.measured_time_s))
        t.add_row(*row)
    console.print(t)


def summary_json(summary: RooflineSummary, trace: Trace) -> dict[str, Any]:
    """The --json document (keys listed in the command's help)."""
    doc = summary.to_json()
    doc["meta"] = trace.meta
    doc["provenance"] = {
        "flops_bytes": MODELED,  # formulas (on recorded shapes for imports)
        "roofline_time_s": MODELED,
        "measured_time_s": MEASURED,
    }
    return doc


def trace_command(
    spec: Annotated[str, typer.Argument(help="Model preset, Hugging Face config.json, trace file "
                                             "or Kineto JSON.", metavar="PRESET|FILE")],
    batch: Annotated[int | None, typer.Option(help="Micro-batch size (presets only).")] = None,
    seq: Annotated[int | None, typer.Option(help="Sequence length (presets only).")] = None,
    device: Annotated[str | None, typer.Option(
        help="Device catalog name for roofline bounds (see `joulebound devices`).")] = None,
    dtype: Annotated[str | None, typer.Option(
        help="Training dtype for presets: bf16, fp16, tf32, fp32.")] = None,
    layers: Annotated[int | None, typer.Option(help="Presets: number of layers L.")] = None,
    hidden: Annotated[int | None, typer.Option(
        help="Presets: model width d (ff follows as 4d unless --ff).")] = None,
    heads: Annotated[int | None, typer.Option(help="Presets: attention heads (divide d).")] = None,
    ff: Annotated[int | None, typer.Option(help="Presets: MLP inner width.")] = None,
    vocab: Annotated[int | None, typer.Option(help="Presets: vocabulary size.")] = None,
    recompute: Annotated[bool, typer.Option(
        help="Presets: full activation recompute (forward again in backward).")] = False,
    lora_rank: Annotated[int | None, typer.Option(
        "--lora-rank", help="Presets: LoRA / PEFT fine-tuning with adapters of this rank (frozen "
        "base: no weight gradients, optimizer over the adapters only).")] = None,
    lora_targets: Annotated[str | None, typer.Option(
        "--lora-targets", help="Presets: the adapted linears, comma-separated among q,k,v,o,gate,"
        "up,down (or attn, all) [default q,v].")] = None,
    iterations: Annotated[int, typer.Option(
        help="Presets: concatenate this many iterations (large planning problems).")] = 1,
    top: Annotated[int, typer.Option(
        help="Also list the N kernel names taking the most time (measured, else roofline, "
             "else FLOPs).")] = 0,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the trace as JSON (.json or .json.gz).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    from dataclasses import asdict

    from joulebound.cli._common import console, print_json
    from joulebound.core.errors import JouleboundError
    from joulebound.workload import load_trace, model_config
    from joulebound.workload.analytic import PRESETS, build_trace
    from joulebound.workload.roofline import summarize, top_kernels

    model = model_config(spec)  # a preset or a Hugging Face config.json
    shape = {"layers": layers, "hidden": hidden, "heads": heads, "ff": ff, "vocab": vocab,
             "dtype": dtype, "lora_rank": lora_rank, "lora_targets": lora_targets}
    if model is None and (any(v is not None for v in shape.values()) or recompute
                          or iterations != 1):
        raise JouleboundError(
            "--layers/--hidden/--heads/--ff/--vocab/--dtype/--recompute/--iterations/--lora-rank/"
            "--lora-targets apply only to model presets and Hugging Face config.json files "
            f"({', '.join(PRESETS)}), not to the trace file {spec!r}")
    if lora_targets is not None and not lora_rank:
        raise JouleboundError("--lora-targets needs --lora-rank R (R >= 1: LoRA fine-tuning)")
    if model is not None:
        tr = build_trace(model, batch=batch, seq=seq, recompute=recompute or None,
                         iterations=iterations, **shape)
    else:
        tr = load_trace(spec, batch=batch, seq=seq)
    dev = None
    if device is not None:
        from joulebound.hw.catalog import get_device

        dev = get_device(device)
    from joulebound.cli._common import warn_memory

    mem_warning = warn_memory(tr, dev)
    summary = summarize(tr, dev)
    if top < 0:
        raise JouleboundError(f"--top must be >= 0, got {top}")
    tops = top_kernels(tr, dev, top) if top else []
    if output is not None:
        if output.is_dir():
            raise JouleboundError(f"-o {output} is a folder; pass a file name such as "
                                  f"{output / (tr.name + '.json')}")
        tr.save(output)  # write errors become JouleboundError in jsonio.write_json
    if as_json:
        doc = summary_json(summary, tr)
        doc["memory_warning"] = mem_warning
        if top:
            doc["top_kernels"] = [asdict(r) for r in tops]
        print_json(doc)
        return
    render_summary(summary, tr, dev)
    if tops:
        render_top(tops, dev)
    if output is not None:
        console.print(f"trace written to {output}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("trace", help=reflow(HELP), short_help="Kernel trace of one training iteration (preset or "
                "profiler file): FLOPs, bytes, intensity, compute/memory bound per category."
                )(trace_command)
