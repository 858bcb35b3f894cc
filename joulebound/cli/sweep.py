"""``joulebound sweep``: run real training sweeps (BERT/GPT-2 × strategy × GPU count) into SQLite;
``joulebound sweep status``: what a store holds."""

from __future__ import annotations

from typing import Annotated, Any

import typer

RUN_HELP = """Run a training sweep: Hugging Face BERT (or GPT-2) built from a config (random init, random token ids), AdamW, over a grid of shapes x strategies (single, ddp, fsdp = FSDP2 fully_shard, tp = Megatron-style DTensor tensor parallelism) x GPU counts; multi-rank configurations run through torchrun (NCCL on GPUs, gloo on CPU). Warm-up steps are excluded; the measured steps are timed (measured) and metered with the EnergyMeter (measured energy when a GPU sensor exists, else NULL). Every finished configuration is committed to the SQLite store at once; re-running skips what is done, so a killed sweep resumes without losing or doubling rows.

--grid: tiny (seconds on a CPU), paper (L 2-24, d 64-1024, h = d/64, ff = 4d, S 64-128, B 16-32: a GPU-cluster sweep), or a TOML file (see docs/sweep.md). Shape options (--layers, --hidden, ...) override the grid. --gpus lists world sizes: single runs on 1 rank, ddp/fsdp/tp at every count >= 2. --batch is the global batch (ddp/fsdp split it across ranks).

--json prints {"sweep", "db", "planned", "skipped", "ran", "ok", "failed", "launches", "wall_s", "skipped_invalid", "results"}; skipped_invalid lists the combinations dropped by --skip-invalid; results is a list of sweep_results rows with keys config_id, sweep, arch, layers, hidden, heads, ff, seq, batch, dtype, strategy, world_size, steps, status, error, time_s, energy_j, energy_provenance, tokens, padded_tokens, throughput_tok_s, speedup, peak_mem_bytes, created_at. time_s, throughput and speedup are measured (speedup = throughput / throughput of the single run of the same shape); energy_j is measured (NVML) or modeled (simulated backend) as energy_provenance says, null without a sensor. --dry-run prints the plan only (with --json: {"sweep", "planned", "skipped_invalid", "launches": [{"world_size", "configs": [config_id, ...]}]}).

Subcommand: joulebound sweep status --db runs.db."""

STATUS_HELP = """What a sweep store holds: per sweep the planned, finished (ok), failed and pending configurations, and rows per strategy@world_size.

--json prints {"db", "sweeps"}; sweeps is a list of {"sweep", "planned", "ok", "failed", "pending", "by_strategy"}, by_strategy maps "strategy@world" to {"ok", "failed"} counts."""


def _table_rows(rows: list[dict[str, Any]], width: int = 80) -> Any:
    """The results table; below 120 columns the token counts (in --json and the store) are left
    out so that the config id keeps room."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    wide = width >= 120
    t = Table(title="sweep results (time, throughput, speedup, memory: measured; energy: see "
              "provenance; — = no sensor)", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False, show_edge=False, collapse_padding=True)
    t.add_column("config", overflow="fold")
    # one energy provenance for every row -> in the header, so the cells stay narrow
    provs = {r["energy_provenance"] for r in rows
             if r["status"] == "ok" and r["energy_j"] is not None}
    one_prov = provs.pop() if len(provs) == 1 else None
    cols = ["status", "time s", "tokens\nreal/pad", "tok/s", "speedup",
            f"energy J\n{one_prov}" if one_prov else "energy J", "peak\nMiB"]
    for col in cols if wide else [c for c in cols if not c.startswith("tokens")]:
        # numbers never wrap, so on a 100-column terminal the config id keeps its room
        t.add_column(col, justify="left" if col == "status" else "right",
                     no_wrap=col != "status")
    for r in rows:
        if r["status"] != "ok":
            err = (r["error"] or "").splitlines()[0][:70]
            t.add_row(r["config_id"], f"[red]failed[/]: {escape(err)}")
            continue
        energy = ("—" if r["energy_j"] is None else f"{r['energy_j']:.1f}"
                  + ("" if one_prov else f" {r['energy_provenance']}"))
        cells = [r["config_id"], "ok", f"{r['time_s']:.3f}", f"{r['tokens']}/{r['padded_tokens']}",
                 f"{r['throughput_tok_s']:.0f}",
                 "—" if r["speedup"] is None else f"{r['speedup']:.2f}×", energy,
                 f"{r['peak_mem_bytes'] / 2**20:.0f}"]
        t.add_row(*(cells if wide else cells[:3] + cells[4:]))
    return t


def sweep_command(
    ctx: typer.Context,
    grid: Annotated[str, typer.Option(help="Preset (tiny, paper) or TOML grid file.")] = "tiny",
    strategies: Annotated[str, typer.Option(help="Comma list of single, ddp, fsdp, tp.")] =
        "single,ddp,fsdp,tp",
    gpus: Annotated[str, typer.Option(help="Comma list of world sizes (GPUs, or CPU ranks).")] = "1,2",
    db: Annotated[str, typer.Option(help="SQLite store (created if missing).")] = "runs.db",
    name: Annotated[str | None, typer.Option(help="Sweep name (default: the grid's name).")] = None,
    arch: Annotated[str | None, typer.Option(help="Override: bert,gpt (gpt2 accepted).")] = None,
    layers: Annotated[str | None, typer.Option(help="Override: layers, e.g. 2,4.")] = None,
    hidden: Annotated[str | None, typer.Option(help="Override: hidden sizes.")] = None,
    heads: Annotated[str | None, typer.Option(help="Override: heads (default hidden/head-dim).")] = None,
    head_dim: Annotated[int | None, typer.Option(help="heads = hidden / head-dim when --heads unset.")] = None,
    ff_mult: Annotated[int | None, typer.Option(help="ff = ff-mult × hidden.")] = None,
    seq: Annotated[str | None, typer.Option(help="Override: sequence lengths.")] = None,
    batch: Annotated[str | None, typer.Option(help="Override: global batch sizes.")] = None,
    dtype: Annotated[str | None, typer.Option(help="Override: fp32,bf16.")] = None,
    steps: Annotated[int | None, typer.Option(help="Measured steps per configuration.")] = None,
    warmup: Annotated[int | None, typer.Option(help="Warm-up steps (excluded).")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    energy: Annotated[str, typer.Option(help="EnergyMeter backend: auto, nvml, none, simulated.")] = "auto",
    retry_failed: Annotated[bool, typer.Option(help="Re-run configurations recorded as failed.")] = False,
    pack: Annotated[bool, typer.Option(help="Run single configs inside the smallest multi-rank launch.")] = True,
    torchrun_args: Annotated[str | None, typer.Option(
        help="Rendezvous options replacing --standalone, e.g. '--nnodes 2 --rdzv-endpoint h:29400'.")] = None,
    timeout_s: Annotated[float, typer.Option(help="Collective timeout inside a launch (s).")] = 600.0,
    skip_invalid: Annotated[bool, typer.Option(
        help="Drop impossible strategy/rank combinations (e.g. tp over more ranks than heads) "
             "instead of failing; they are listed.")] = False,
    dry_run: Annotated[bool, typer.Option(help="Print the plan, run nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (keys above).")] = False,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    import shlex

    from joulebound.cli._common import console, print_json
    from joulebound.core.errors import JouleboundError
    from joulebound.jobs.runstore import SweepStore
    from joulebound.measure.sweep.runner import check_energy_backend, plan_launches, run_sweep
    from joulebound.workload.grid import (
        MAX_PROBLEMS_SHOWN,
        parse_int_list,
        parse_str_list,
        resolve_grid,
    )

    if device not in ("auto", "cpu", "cuda"):
        raise JouleboundError(f"--device must be auto, cpu or cuda, got {device!r}")
    check_energy_backend(energy)
    g = resolve_grid(grid).with_overrides(
        arch=parse_str_list(arch), layers=parse_int_list(layers, "--layers"),
        hidden=parse_int_list(hidden, "--hidden"), heads=parse_int_list(heads, "--heads"),
        head_dim=head_dim, ff_mult=ff_mult, seq=parse_int_list(seq, "--seq"),
        batch=parse_int_list(batch, "--batch"), dtype=parse_str_list(dtype), steps=steps,
        warmup=warmup)
    if head_dim is not None and heads is None:
        g.heads = []
    configs, skipped = g.plan(parse_str_list(strategies) or [], parse_int_list(gpus, "--gpus") or [],
                              skip_invalid=skip_invalid)
    sweep = name or g.name
    if skipped and not as_json:
        console.print(f"[yellow]skipped {len(skipped)} impossible combination(s)[/]:")
        for why in skipped[:MAX_PROBLEMS_SHOWN]:
            console.print(f"  - {why}", highlight=False)
        if len(skipped) > MAX_PROBLEMS_SHOWN:
            console.print(f"  ... and {len(skipped) - MAX_PROBLEMS_SHOWN:,} more (--json lists "
                          "them all)", highlight=False)
    if dry_run:
        launches = plan_launches(configs)
        if as_json:
            print_json({"sweep": sweep, "planned": len(configs), "skipped_invalid": skipped,
                        "launches": [{"world_size": w, "configs": [c.config_id for c in cs]}
                                     for w, cs in launches]})
        else:
            for w, cs in launches:
                console.print(f"[bold]launch at {w} rank(s)[/]: {len(cs)} configuration(s)")
                for c in cs:
                    console.print(f"  {c.config_id}")
        return
    summary = run_sweep(configs, db, sweep, retry_failed=retry_failed, device=device,
                        energy=energy, pack=pack,
                        torchrun_args=shlex.split(torchrun_args) if torchrun_args else None,
                        timeout_s=timeout_s, progress=not as_json)
    ids = {c.config_id for c in configs}
    rows = [r for r in SweepStore(db).rows(sweep) if r["config_id"] in ids]
    if as_json:
        for r in rows:
            r.pop("env_json", None)
        print_json(dict(summary, skipped_invalid=skipped, results=rows))
        return
    console.print(_table_rows(rows, console.width))
    console.print(f"sweep [bold]{sweep}[/] in {db}: {summary['ran']} ran ({summary['ok']} ok, "
                  f"{summary['failed']} failed), {summary['skipped']} already done; "
                  f"{summary['launches']} launch(es), {summary['wall_s']:.1f} s wall")


def status_command(
    db: Annotated[str, typer.Option(help="SQLite store.")] = "runs.db",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (keys above).")] = False,
) -> None:
    from rich.table import Table

    from joulebound.cli._common import console, print_json
    from joulebound.jobs.runstore import SweepStore

    st = SweepStore(db, create=False).status()
    if as_json:
        print_json({"db": db, "sweeps": st})
        return
    t = Table(title=f"sweeps in {db}", title_justify="left")
    for c in ("sweep", "planned", "ok", "failed", "pending", "strategy@world: ok/failed"):
        t.add_column(c)
    for s in st:
        by = ", ".join(f"{k}: {v['ok']}/{v['failed']}" for k, v in sorted(s["by_strategy"].items()))
        t.add_row(s["sweep"], str(s["planned"]), str(s["ok"]), str(s["failed"]), str(s["pending"]), by)
    console.print(t)


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help=RUN_HELP, invoke_without_command=True, no_args_is_help=False)
    sub.callback(invoke_without_command=True, help=RUN_HELP)(sweep_command)
    sub.command("status", help=STATUS_HELP)(status_command)
    app.add_typer(sub, name="sweep")
