"""``joulebound fit`` / ``predict`` / ``advise``: the energy scaling model on the command line."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from joulebound.cli._common import console, print_json, reflow
from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MODELED
from joulebound.core.units import parse_duration

FIT_HELP = """Fit an energy law (and speedup laws) to measured data and print the evaluation table.

--data is the shared data folder (all open datasets, one table each), one of its sub-folders
(mayaki_ecai2025, zeus_nsdi23, perseus) or a sweep store runs.db. Laws: roofline, powerlaw,
paper (η = measured MFU), paper-speedup (η = measured S(N)/N; added automatically when every
multi-GPU row has a speedup), paper-no-eta, prerun, device-seconds, config-only, hgb.

Data with runtimes over GPU counts also gets the speedup laws (TP saturating exponential,
FSDP/DDP generalized Amdahl). Data with no energy (no sensor) gets only the speedup laws.

On the shared data folder (or with --cuts, or --law mechanistic) the mechanistic predictor that
predict and advise use is calibrated too and validated on every cut: in-sample,
leave-one-data-set-out, leave-one-GPU-out, large -> small steps, upper -> lower half of step sizes,
single-GPU -> multi-GPU, with MAPE, median predicted/measured, median |error|, shares within ×1.25
and ×2 and 90 % interval coverage; --law NAME is evaluated on the same cuts beside it.

--json keys: datasets[] = {dataset, source, rows, dropped{reason: n}, law, coefficients[] {term,
coef, se, ci95_lo, ci95_hi, p}, cov_type, adj_r2, evaluation[] {law, post_run, n, families,
adj_r2_in_sample, cv_k, cv_r2_log, cv_rmse_log, cv_mape, cv_conformal_coverage,
cv_conformal_median_width_factor, shift_r2_log, shift_rmse_log, shift_mape, shift_n_fit,
shift_n_pred, cv_note / shift_note (why a held-out figure is missing), note (why the law could
not be fitted)}, speedup[] {family, strategy, law, params, stderr, pinned, n_points, rmse,
max_gpus_seen; or note when the fit failed}, notes[]}, published {adj_r2_with_eta,
adj_r2_without_eta, alpha_C, alpha_eta, citation, setting, provenance="published"}, saved (the
--save path or null). Our figures are modeled (errors
against measured energy). mechanistic (null when not run) {params (kappa, launch_s, step_s,
wait_ratio, host, sigma, devices_seen, strategies_seen, tokens_range, provenance {constrains,
rows, kappa_by_dataset_and_gpu, ...}), cuts[] {cut, test, train_rows, time, energy,
energy_codecarbon, energy_own_meter: {n, mape, median_ratio, median_abs_err, within_x1_25,
within_x2, coverage90, median_interval_factor}, datasets, params}, legacy_cuts {law: [{cut, test,
law, train_rows, energy_own_meter}]}, targets, rows, datasets, skipped[] (rows the predictor
cannot model, with the reason); or note}."""

PREDICT_HELP = """Predict the wall time and energy of a training job before running it: time, GPU
energy, host (CPU + DRAM) energy and their total, each modeled with a 90 % interval, and what the
figures cover. No data folder needed (built-in calibration).

The mechanistic predictor (default): the analytic kernel trace of the job's shape at its per-GPU
micro-batch on the GPU model (auto clocks, or --clocks / --power-limit), a calibrated framework
factor and host overheads, communication from message sizes and the interconnect (DDP, FSDP,
Megatron TP, 1F1B pipelines), the power of waiting GPUs, and the host. --batch is per GPU (as
Hugging Face's per_device_train_batch_size); --global-batch is the alternative (sequences per
optimizer step over all GPUs). Impossible or absurd jobs and jobs that do not fit in GPU memory
are refused with the reason (--ignore-memory prices the latter anyway).

The stack: --recompute-mode none | selective | full (--recompute = full), --sequence-parallel
and --distributed-optimizer (Megatron), --flash-attention (default on for 16-bit and fp8 on
Ampere or newer GPUs), --dtype fp8 (H100 / H200 / B200) change the per-GPU memory (Korthikanti et
al. 2022); --tp N / --pp M without --strategy is Megatron's layout (dp = gpus / (tp·pp), data
parallel across the groups).

The model: --preset (GPT-2, BERT, and Llama / Mistral / Qwen2 shapes: grouped-query attention,
SwiGLU, RMSNorm, RoPE, untied head), --hf-config FILE (any Hugging Face config.json of the
llama, mistral, qwen2, gpt2 or bert families), or --layers/--hidden/--heads/--seq. --lora-rank R
(--lora-targets, default q,v) prices LoRA / PEFT fine-tuning: frozen base weights (no
weight-gradient kernels, no gradients or optimizer state), adapter kernels, adapter gradients and
optimizer state only.

--jobs FILE predicts a CSV of jobs, one per row (columns = these options without dashes, e.g.
layers,hidden,heads,seq,batch,gpus,strategy,device,tokens; empty cells take the command-line
values); -o FILE writes the predictions as CSV, --json prints them; a row that cannot be priced
keeps its reason in the "error" column and the others are still predicted, but the command then
exits with status 1 (so a script notices). --law NAME uses a legacy
energy law instead (prerun with its built-in coefficients; the others are fitted on the Mayaki
data at --data).

--json keys: name, strategy, gpus, nodes, device, micro_batch, grad_accum, global_batch,
tokens_per_step, steps, time_s, time_lo_s, time_hi_s, gpu_energy_j, gpu_energy_lo_j,
gpu_energy_hi_j, host_energy_j, host_energy_lo_j, host_energy_hi_j (host power × the time
interval), total_energy_j, total_energy_lo_j, total_energy_hi_j, energy_per_token_j, step {time_s, compute_s, overhead_s, comm_s, bubble_s, gpu_energy_j,
busy_energy_j, wait_energy_j, host_energy_j, comm_energy_j, wait_power_w, comm_detail,
wrapper_s, interconnect}, memory {weights, gradients, optimizer, activations, reserve, device_bytes, total,
fits, assumes (the memory-saving techniques assumed, in words)} (bytes), fits_memory, interval_why[], warnings[], covers,
params {framework, kappa, host_s_per_kernel, step_s, wait_ratio, host_w_per_gpu, host_source,
calibration}, provenance ("modeled"),
predictor. Units: s, J, bytes. With --jobs: a list of these (or {row, error}). With --law the
same keys: the law fills total_energy_j (for prerun also its 90 % interval, time_s and step
{energy_j, time_s, eta_hw, eta_par}); what a law does not predict is null."""


ADVISE_HELP = """Strategy × GPU count that trains the job with the least energy within a deadline
(modeled with the mechanistic predictor).

The training recipe is fixed: the global batch (--global-batch, or --batch on one GPU) and the
total --tokens. One GPU and every strategy of --strategies at 2, 4, … --max-gpus GPUs are priced:
time, GPU + host energy with 90 % intervals, memory per GPU against the device memory. The advice
is the lowest-energy candidate that fits in memory and meets --deadline with the upper bound of
its 90 % time interval ("ok"); when none does, the lowest-energy one whose central time meets it,
marked "may miss"; when none does either, the fastest that fits. --batch with --global-batch caps
the per-GPU micro-batch (gradient accumulation fills the rest). --jobs FILE advises a CSV of jobs
(extra columns deadline, max_gpus, strategies); -o FILE writes one row per job.

Candidates share most of the predictor's error (the framework, the host, the GPU's power model),
so each is compared with the advice by the ratio of their energies: its 90 % interval comes from
correlated draws of the predictor's error terms (a term every candidate shares cancels as far as
their shares of it agree; a candidate's own communication, pipeline bubble and GPU-count terms
do not). "≈" (indistinguishable) marks a candidate whose ratio interval spans 1: the model cannot
tell which of the two costs less.

--layouts searches Megatron 3D layouts instead: tensor parallelism (within a node) × pipeline
stages × data parallelism × micro-batch × recompute (none, selective, full) × sequence
parallelism × distributed optimizer, at 1, 2, 4, then 8, 16, 24, 32, 48, 64, 96, … GPUs up to
--max-gpus (needs --global-batch). Memory is checked first: per GPU count × tp × pp ×
micro-batch the lightest recompute that fits is priced. --top N shows the N cheapest.

--json keys: best {strategy, gpus, feasible, time_s, time_lo_s, time_hi_s, gpu_energy_j,
host_energy_j, energy_j (GPU + host), energy_lo_j, energy_hi_j (90 % interval), micro_batch,
grad_accum, memory_gib, fits_memory, meets_deadline (the 90 % upper time bound meets it),
deadline ("ok", "may miss", "miss"), comm_share, reason, label, energy_ratio, energy_ratio_lo,
energy_ratio_hi (energy over the advice's, 90 % interval of the ratio), indistinguishable, tp, pp,
dp, recompute, sequence_parallel, distributed_optimizer}, candidates[] (same keys, feasible
first, lowest energy first), provenance ("modeled"), predictor; with --layouts also search
{layouts, refused, checked, priced, seconds}. Units: s, J, GiB. --law prerun: the legacy advisor
(keys best/candidates with energy_j, time_s, eta_par, meets_deadline, state_bytes_per_gpu,
fits_memory)."""


def _table_console():
    """The terminal's console, or a 132-column one when output is piped (tables stay unwrapped)."""
    from rich.console import Console

    return console if console.is_terminal else Console(width=max(console.width, 132))


def _add_columns(t: Any, names: tuple[str, ...], cells: list[tuple[str, ...]],
                 text: tuple[str, ...]) -> None:
    """Columns of ``t`` whose figures are never cut: every column but the ``text`` ones is as wide
    as its widest cell or header and never wraps; the ``text`` columns fold onto more lines
    when the table is wider than the console."""
    for i, name in enumerate(names):
        if name in text:
            t.add_column(name, overflow="fold")
        else:
            w = max([len(name)] + [len(r[i]) for r in cells])
            t.add_column(name, no_wrap=True, min_width=w)


def _needed_width(names: tuple[str, ...], cells: list[tuple[str, ...]], text: tuple[str, ...] = (),
                  fold_at: int = 16) -> int:
    """Columns a boxed rich table needs to show every header and cell on one line, the ``text``
    columns folded at ``fold_at`` characters."""
    return sum(min(fold_at if n in text else 10**6, max([len(n)] + [len(r[i]) for r in cells])) + 3
               for i, n in enumerate(names)) + 1


def _print_fit(rec: dict, published: dict) -> None:
    from rich.table import Table

    out = _table_console()

    console.rule(f"[bold]{rec['dataset']}[/] — {rec['rows']} rows ({rec.get('source')})")
    for why, n in rec["dropped"].items():
        if n:
            console.print(f"  dropped {n} rows: {why}")
    for note in rec["notes"]:
        console.print(f"  [yellow]note:[/] {note}")
    if rec.get("coefficients"):
        t = Table(title=f"law '{rec['law']}' coefficients (modeled; 95 % CI, {rec.get('cov_type')} SEs)")
        for c in ("term", "coef", "se", "95 % CI"):
            t.add_column(c)
        for r in rec["coefficients"]:
            ci = "" if r["ci95_lo"] != r["ci95_lo"] else f"[{r['ci95_lo']:.4g}, {r['ci95_hi']:.4g}]"
            t.add_row(str(r["term"]), f"{r['coef']:.4g}", "" if r["se"] != r["se"] else f"{r['se']:.3g}", ci)
        out.print(t)
    if rec.get("evaluation"):
        t = Table(title="evaluation (modeled vs measured energy; grouped K-fold by family)",
                  show_lines=False, pad_edge=False)
        cols = [("law", "law"), ("post", "post_run"), ("adjR²", "adj_r2_in_sample"),
                ("cvR²", "cv_r2_log"), ("cvRMSE", "cv_rmse_log"), ("cvMAPE", "cv_mape"),
                ("cov90", "cv_conformal_coverage"), ("shiftR²", "shift_r2_log"),
                ("shiftMAPE", "shift_mape")]
        for h, _ in cols:
            t.add_column(h, no_wrap=True)
        for r in rec["evaluation"]:
            cells = []
            for _, key in cols:
                v = r.get(key)
                if v is None:
                    cells.append(r.get("note", "")[:40] if key == "post_run" and "note" in r else "–")
                elif isinstance(v, bool):
                    cells.append("yes" if v else "no")
                elif isinstance(v, float):
                    cells.append(f"{v * 100:.1f}%" if "mape" in key or "cover" in key else f"{v:.3f}")
                else:
                    cells.append(str(v))
            t.add_row(*cells)
        out.print(t)
        console.print(f"  published (Zoubeirou a Mayaki, arXiv 2606.23546; 410 BERT configs, 8× RTX 2080 Ti): "
                      f"adj R² {published['adj_r2_with_eta']} with η, {published['adj_r2_without_eta']} "
                      f"without; α_C ≈ {published['alpha_C']}, α_η ≈ {published['alpha_eta']}  \\[published]")
    for s in rec.get("speedup", []):
        if "params" in s:
            ps = ", ".join(f"{k}={v:.4g}" for k, v in s["params"].items())
            console.print(f"  speedup law {s['law']} for {s['family']} / {s['strategy']}: {ps} "
                          f"(RMSE {s['rmse']:.3g}, {s['n_points']} points, pinned {s['pinned'] or '–'}) \\[modeled]")
        else:
            console.print(f"  speedup {s['family']} / {s['strategy']}: {s.get('note')}")


def _print_cuts(mech: dict) -> None:
    from rich.table import Table

    if "note" in mech:
        console.print(f"  [yellow]note:[/] mechanistic predictor: {mech['note']}")
        return
    p = mech["params"]
    console.rule("[bold]mechanistic predictor[/]")
    console.print(f"  calibrated on {mech['rows']} measured steps ({', '.join(mech['datasets'])})",
                  highlight=False)
    for why in mech.get("skipped", []):
        console.print(f"  skipped {why}", highlight=False)
    console.print(f"  κ = {p['kappa']:.3g} (framework factor), τ = {p['launch_s'] * 1e6:.3g} µs (launch "
                  f"floor), t_step = {p['step_s'] * 1e3:.3g} ms, ρ = {p['wait_ratio']:.3g} (waiting power "
                  f"/ idle), host {p['host']['cpu_w'] + p['host']['dram_w']:.3g} W per GPU  \\[modeled]",
                  highlight=False)
    for k, v in p["provenance"].get("constrains", {}).items():
        console.print(f"    {k}: {v}", style="dim", highlight=False)
    t = Table(title="validation cuts (modeled vs measured; fitted on each training side only); "
                    f"targets: median |err| <= {mech['targets']['median_abs_err']:.0%}, within ×2 >= "
                    f"{mech['targets']['within_x2']:.0%}, 90 % interval coverage >= "
                    f"{mech['targets']['coverage90']:.0%}", pad_edge=False)
    from joulebound.jobs.calibrate import meets_targets

    rows = [(c, q, c[q]) for c in mech["cuts"] for q in ("time", "energy") if q in c]
    rows += [(c, q, c[q]) for law, cs in mech.get("legacy_cuts", {}).items() for c in cs
             for q in ("energy_own_meter",) if q in c]
    cells = []
    for c, q, m in rows:
        name = c["cut"] if "law" not in c else f"{c['law']}: {c['cut']}"
        cells.append((name, c["test"], {"time": "time", "energy": "E gpu",
                                        "energy_own_meter": "E meter"}[q], str(m["n"]),
                      f"{m['mape']:.0%}", f"{m['median_ratio']:.2f}", f"{m['median_abs_err']:.0%}",
                      f"{m['within_x1_25']:.0%}", f"{m['within_x2']:.0%}", f"{m['coverage90']:.0%}",
                      f"{m['median_interval_factor']:.2f}", "met" if meets_targets(m) else "missed"))
    names = ("cut", "test", "qty", "n", "MAPE", "ratio", "|err|", "≤×1.25", "≤×2", "cov90", "×/÷",
             "targets")
    out = _table_console()
    legend = None
    if _needed_width(names, cells, ("cut", "test")) > out.width:   # narrow: cuts by number
        from rich import box

        t.box, t.pad_edge, t.collapse_padding = box.SIMPLE_HEAD, False, True
        keys = list(dict.fromkeys((c[0], c[1]) for c in cells))
        legend = "\n".join(f"  #{i + 1} {cut} · {test}" for i, (cut, test) in enumerate(keys))
        cells = [(f"#{keys.index((c[0], c[1])) + 1}", *c[2:]) for c in cells]
        names = ("#", *names[2:])
    _add_columns(t, names, cells, text=("cut", "test"))
    for row in cells:
        t.add_row(*row)
    out.print(t)
    if legend:
        out.print(legend, highlight=False)
    console.print("  ratio = median predicted/measured; |err| = median |error|; E gpu = GPU energy "
                  "against NVML; E meter = a law's energy against each row's own meter; "
                  "docs/scaling.md explains every cut", style="dim")


def fit(
    data: Path = typer.Option(None, "--data", help="shared data folder, a sub-dataset folder, or a "
                              "sweep runs.db (default: $JOULEBOUND_DATA or ../shared/data)"),
    law: str = typer.Option("prerun", "--law", help="energy law to fit and show coefficients for; "
                            "'mechanistic' fits only the mechanistic predictor"),
    laws: str = typer.Option("roofline,powerlaw,paper-no-eta,paper,prerun,device-seconds,config-only,hgb",
                             "--laws", help="comma-separated laws in the evaluation table"),
    folds: int = typer.Option(5, "--folds", help="K of the grouped K-fold"),
    device: str = typer.Option(None, "--device", help="GPU of a sweep store whose rows do not name it"),
    cuts: bool = typer.Option(None, "--cuts/--no-cuts", help="calibrate the mechanistic predictor and "
                              "run the validation cuts (default: on for the shared data folder and "
                              "for --law mechanistic), with --law on the same cuts"),
    save: Path = typer.Option(None, "--save", help="write the fitted pre-run law (or, with --law "
                              "mechanistic, the mechanistic calibration) with its held-out error to "
                              "this JSON file, for predict/advise --coefficients"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output (keys in --help)"),
) -> None:
    from joulebound.jobs.fitting import fit_data

    law_list = tuple(x.strip() for x in laws.split(",") if x.strip())
    with console.status("fitting…") as st:
        res = fit_data(data, law, law_list, folds, device, cuts, save, st.update)
    mech, recs = res["mechanistic"], res["datasets"]
    if as_json:
        print_json(res)
        return
    if mech is not None:
        _print_cuts(mech)
    for r in recs:
        _print_fit(r, res["published"])
    if res.get("saved"):
        if law.strip().lower() == "mechanistic":
            console.print(f"saved the mechanistic calibration to {save} "
                          f"(use predict/advise --coefficients {save})")
        else:  # a pre-run law prices whole jobs: predict needs the job's tokens
            console.print(f"saved the pre-run law to {save} "
                          f"(use predict --coefficients {save} --tokens N, N = the job's training tokens)")


# The job options shared by predict and advise (one definition, one help text).
_PRESET = typer.Option(None, "--preset", help="model preset for the shape and micro-batch: bert-base, "
                       "bert-large, gpt2-small, gpt3-xl, llama2-7b, llama3-8b, mistral-7b, qwen2-7b, "
                       "... (options below override it)")
_HF = typer.Option(None, "--hf-config", help="a Hugging Face config.json (or its model folder) for "
                   "the shape: llama, mistral, qwen2, gpt2, bert (instead of --preset; micro-batch 1 "
                   "unless --batch)")
_LORA = typer.Option(None, "--lora-rank", help="LoRA / PEFT fine-tuning with adapters of rank R: "
                     "frozen base weights (no weight gradients, no optimizer state), adapters trained")
_LORA_T = typer.Option(None, "--lora-targets", help="LoRA's adapted linears, comma-separated among "
                       "q,k,v,o,gate,up,down (or attn, all) [default q,v]")
_MODEL = typer.Option(None, "--model", help="architecture: bert (encoder) | gpt (decoder) [default bert]")
_LAYERS = typer.Option(None, "--layers", help="transformer layers L")
_HIDDEN = typer.Option(None, "--hidden", help="hidden size d")
_HEADS = typer.Option(None, "--heads", help="attention heads (divide --hidden)")
_SEQ = typer.Option(None, "--seq", help="sequence length (tokens per sequence)")
_BATCH = typer.Option(None, "--batch", help="per-GPU micro-batch (sequences one GPU runs per "
                      "forward/backward; Hugging Face's per_device_train_batch_size)")
_GBATCH = typer.Option(None, "--global-batch", help="sequences per optimizer step over all GPUs")
_GACC = typer.Option(None, "--grad-accum", help="micro-batches per optimizer step (pipelines: "
                     "micro-batches in flight)")
_TOKENS = typer.Option(None, "--tokens", help="training tokens in total (e.g. 1e9); default: one step")
_DEVICE = typer.Option("a100-pcie-80gb", "--device", help="GPU (a catalog name or alias: "
                       "`joulebound devices`)")
_DTYPE = typer.Option("bf16", "--dtype", help="fp32 | tf32 | fp16 | bf16 (fp16/bf16: mixed precision) | "
                      "fp8 (FP8 GEMMs over bf16, Transformer Engine; H100/H200/B200 only)")
_FF = typer.Option(None, "--ff", help="feed-forward width (default 4·hidden)")
_VOCAB = typer.Option(None, "--vocab", help="vocabulary size (default by --model)")
_RECOMP = typer.Option(False, "--recompute/--no-recompute", help="full activation recomputation "
                       "(= --recompute-mode full)")
_RECOMP_MODE = typer.Option(None, "--recompute-mode", help="activation recomputation: none | selective "
                            "(Megatron's: the attention core's S² tensors recomputed, Korthikanti et al. "
                            "2022) | full (every layer's forward again); default none")
_DISTOPT = typer.Option(False, "--distributed-optimizer/--no-distributed-optimizer",
                        help="shard the optimizer state and fp32 master weights over the data-parallel "
                        "ranks (Megatron --use-distributed-optimizer, ZeRO-1; with ddp or dp across "
                        "tp/pp groups)")
_SEQPAR = typer.Option(False, "--sequence-parallel/--no-sequence-parallel", help="Megatron sequence "
                       "parallelism: LayerNorm and dropout activations split over the --tp ranks")
_FLASH = typer.Option(None, "--flash-attention/--no-flash-attention", help="fused attention that stores "
                      "no S² scores (FlashAttention, PyTorch SDPA, Transformer Engine); default: on for "
                      "fp16/bf16/fp8 on Ampere or newer GPUs, off otherwise")
_OPTIM = typer.Option("adamw", "--optimizer", help="adamw | sgd")
_FRAMEWORK = typer.Option(None, "--framework", help="what runs the step, which sets the host time per "
                          "kernel and the residual factor κ: hf (Hugging Face Trainer / Accelerate, eager "
                          "PyTorch; DDP, FSDP and tp_plan's DTensor hooks measured; the default), eager "
                          "(a plain PyTorch loop), megatron (Megatron-LM / DeepSpeed / NeMo: fused "
                          "kernels; calibrated on vTrain; the default of advise --layouts), compiled "
                          "(torch.compile / TorchInductor: κ from its published training speedup)")
_CLOCKS = typer.Option(None, "--clocks", help="locked clocks CORE/MEM in MHz (default: the GPU's own "
                       "auto governor)")
_PLIM = typer.Option(None, "--power-limit", help="board power limit (W; default the device's)")
_LINK = typer.Option(None, "--interconnect", help="GPU-to-GPU link inside a node (default the "
                     "catalog's: pcie3/4/5[-nop2p], nvlink1-5, nvlink2/3-bridge)")
_INTER = typer.Option(None, "--inter-node", help="link between nodes: ib-edr/hdr/ndr, eth-10g/25g/"
                      "100g/400g (default ib-hdr)")
_GPN = typer.Option(None, "--gpus-per-node", help="GPUs per node (default 8)")
_NICS = typer.Option(1, "--nics-per-node", help="NICs per node for --inter-node")
_COEFFICIENTS = typer.Option(None, "--coefficients", help="a calibration saved by `joulebound fit "
                             "--save` (mechanistic) or a legacy law file (with --law prerun)")
_LAW = typer.Option(None, "--law", help="use a legacy energy law instead of the mechanistic "
                    "predictor: prerun, powerlaw, roofline, paper-no-eta, config-only, hgb")
_JOBS = typer.Option(None, "--jobs", help="CSV of jobs, one per row (columns: the options above "
                     "without dashes)")
_OUT = typer.Option(None, "-o", "--output", help="write the predictions of --jobs as CSV")
_JSON = typer.Option(False, "--json", help="machine-readable output (keys in --help)")
_DATA = typer.Option(None, "--data", help="data folder for --law other than prerun (default "
                     "../shared/data or $JOULEBOUND_DATA)")


def _opts(preset, model, layers, hidden, heads, seq, batch, global_batch, grad_accum, ff, vocab,
          dtype, recompute, optimizer, device, clocks, power_limit, interconnect, inter_node,
          gpus_per_node, nics_per_node, tokens, hf_config=None, lora_rank=None, lora_targets=None,
          recompute_mode=None, distributed_optimizer=False, sequence_parallel=False,
          flash_attention=None, **kw) -> dict:
    if lora_targets is not None and not lora_rank:
        raise JouleboundError("--lora-targets needs --lora-rank R (R >= 1: LoRA fine-tuning)")
    if recompute_mode is not None:
        from joulebound.jobs.job import recompute_mode as _mode

        mode = _mode(recompute_mode)
        if recompute and mode != "full":
            raise JouleboundError(f"--recompute (full) contradicts --recompute-mode {mode}; give one")
        recompute = mode
    stack = {k: v for k, v in dict(distributed_optimizer=distributed_optimizer or None,
                                   sequence_parallel=sequence_parallel or None,
                                   flash_attention=flash_attention).items() if v is not None}
    model_opts = {k: v for k, v in dict(hf_config=None if hf_config is None else str(hf_config),
                                        lora_rank=lora_rank, lora_targets=lora_targets).items()
                  if v is not None}
    return dict(preset=preset, **model_opts, arch=model, layers=layers, hidden=hidden, heads=heads, seq=seq,
                batch=batch, global_batch=global_batch, grad_accum=grad_accum, ff=ff, vocab=vocab,
                dtype=dtype, recompute=recompute, optimizer=optimizer, device=device, clocks=clocks,
                power_limit_w=power_limit, interconnect=interconnect, inter_node=inter_node,
                gpus_per_node=gpus_per_node, nics_per_node=nics_per_node, tokens=tokens, **stack, **kw)


def _default_shape(o: dict) -> dict:
    """No shape and no preset given: BERT-base, said on stderr."""
    if o.get("preset") is None and o.get("hf_config") is None and \
            all(o.get(k) is None for k in ("layers", "hidden", "heads", "seq")):
        from joulebound.jobs.job import DEFAULT_PRESET

        console.print(f"[dim]no model shape given: the {DEFAULT_PRESET} preset (give --preset or "
                      "--layers/--hidden/--heads/--seq)[/]", highlight=False)
        o = {**o, "preset": DEFAULT_PRESET}
    return o


def _fmt_t(s: float) -> str:
    if not s == s:
        return "–"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    if s < 120:
        return f"{s:.3g} s"
    if s < 7200:
        return f"{s / 60:.3g} min"
    if s < 3 * 86400:
        return f"{s / 3600:.3g} h"
    if s < 3 * 365.25 * 86400:
        return f"{s / 86400:.3g} d"
    return f"{s / (365.25 * 86400):.3g} y"


def _fmt_e(j: float) -> str:
    if not j == j:
        return "–"
    if j < 3.6e3:
        return f"{j:.3g} J"
    if j < 3.6e6:
        return f"{j / 3.6e3:.3g} Wh"
    if j < 3.6e9:
        return f"{j / 3.6e6:.3g} kWh"
    if j < 3.6e12:
        return f"{j / 3.6e9:.3g} MWh"
    return f"{j / 3.6e12:.3g} GWh"


def _print_prediction(p) -> None:
    st = p.step
    what = "the job" if p.steps != 1.0 else "one optimizer step"
    console.print(f"job     {p.name or 'job'}: {p.strategy} on {p.gpus}× {p.device} ({p.nodes} node"
                  f"{'s' if p.nodes > 1 else ''}, {st['interconnect']['intra']}"
                  + (f" + {st['interconnect']['inter']}" if p.nodes > 1 else "") + f"); micro-batch "
                  f"{p.micro_batch}/GPU × {p.grad_accum} = global batch {p.global_batch} "
                  f"({p.tokens_per_step:,.0f} tokens/step); {p.steps:.4g} steps; framework "
                  f"{p.params.get('framework', 'hf')}", highlight=False, soft_wrap=True)
    console.print(f"time    {_fmt_t(p.time_s)}  (90 % interval {_fmt_t(p.time_lo_s)} – "
                  f"{_fmt_t(p.time_hi_s)}) for {what}  \\[modeled]", highlight=False, soft_wrap=True)
    console.print(f"energy  GPU {_fmt_e(p.gpu_energy_j)} ({_fmt_e(p.gpu_energy_lo_j)} – "
                  f"{_fmt_e(p.gpu_energy_hi_j)}) + host {_fmt_e(p.host_energy_j)} ({_fmt_e(p.host_energy_lo_j)} – "
                  f"{_fmt_e(p.host_energy_hi_j)}) = total "
                  f"{_fmt_e(p.total_energy_j)} ({_fmt_e(p.total_energy_lo_j)} – "
                  f"{_fmt_e(p.total_energy_hi_j)})  \\[modeled]", highlight=False, soft_wrap=True)
    console.print(f"step    {_fmt_t(st['time_s'])}: compute {_fmt_t(st['compute_s'])}, host overhead "
                  f"{_fmt_t(st['overhead_s'])}, exposed communication {_fmt_t(st['comm_s'])}, "
                  f"pipeline bubble {_fmt_t(st['bubble_s'])}; waiting GPUs at {st['wait_power_w']:.0f} W; "
                  f"{p.energy_per_token_j * 1e3:.3g} mJ/token  \\[modeled]", highlight=False, soft_wrap=True)
    mem = p.memory
    console.print(f"memory  {mem['total'] / 2**30:.3g} GiB per GPU of {mem['device_bytes'] / 2**30:.0f} GiB "
                  f"(weights {mem['weights'] / 2**30:.3g}, gradients {mem['gradients'] / 2**30:.3g}, "
                  f"optimizer {mem['optimizer'] / 2**30:.3g}, activations {mem['activations'] / 2**30:.3g})"
                  + (f"; with {mem['assumes']}" if mem.get("assumes") else "")
                  + "  \\[modeled]", highlight=False, soft_wrap=True)
    console.print(f"covers  {p.covers}", highlight=False, style="dim", soft_wrap=True)
    if p.interval_why:
        console.print("interval \\[modeled]: " + " · ".join(p.interval_why), highlight=False,
                      style="dim", soft_wrap=True)
    for w in p.warnings:
        console.print(f"[yellow]note:[/] {w}", highlight=False, soft_wrap=True)


def _print_law_prediction(p) -> None:
    """``predict --law NAME``: a law's energy (and time when it predicts one)."""
    lo = "" if p.total_energy_lo_j is None else (f"  (90 % interval {_fmt_e(p.total_energy_lo_j)} – "
                                                 f"{_fmt_e(p.total_energy_hi_j)})")
    console.print(f"energy  {_fmt_e(p.total_energy_j)}{lo}  \\[modeled]  law: {p.predictor}", highlight=False)
    if p.time_s:
        console.print(f"time    {_fmt_t(p.time_s)} over {p.steps:.4g} steps  \\[modeled]",
                      highlight=False)
    console.print(f"covers  {p.covers}", style="dim")
    for w in p.warnings:
        console.print(f"[yellow]note:[/] {w}")


def predict(
    preset: str = _PRESET, hf_config: Path = _HF, model: str = _MODEL, layers: int = _LAYERS, hidden: int = _HIDDEN,
    heads: int = _HEADS, seq: int = _SEQ, batch: int = _BATCH, global_batch: int = _GBATCH,
    grad_accum: int = _GACC, tokens: float = _TOKENS,
    gpus: int = typer.Option(1, "--gpus", help="number of GPUs N = dp·tp·pp"),
    strategy: str = typer.Option("single", "--strategy", help="single | ddp | fsdp | tp | pp (sets the "
                                 "default degrees; --tp/--pp make hybrids)"),
    tp: int = typer.Option(None, "--tp", help="tensor-parallel degree (Megatron)"),
    pp: int = typer.Option(None, "--pp", help="pipeline stages (1F1B)"),
    device: str = _DEVICE, dtype: str = _DTYPE, ff: int = _FF, vocab: int = _VOCAB,
    recompute: bool = _RECOMP, recompute_mode: str = _RECOMP_MODE,
    distributed_optimizer: bool = _DISTOPT, sequence_parallel: bool = _SEQPAR,
    flash_attention: bool = _FLASH, lora_rank: int = _LORA, lora_targets: str = _LORA_T,
    optimizer: str = _OPTIM, framework: str | None = _FRAMEWORK, clocks: str = _CLOCKS,
    power_limit: float = _PLIM, interconnect: str = _LINK, inter_node: str = _INTER,
    gpus_per_node: int = _GPN, nics_per_node: int = _NICS,
    ignore_memory: bool = typer.Option(False, "--ignore-memory", help="price a job that does not fit "
                                       "in GPU memory instead of refusing it"),
    jobs: Path = _JOBS, output: Path = _OUT, law: str = _LAW, coefficients: Path = _COEFFICIENTS,
    data: Path = _DATA, as_json: bool = _JSON,
) -> None:
    from joulebound.jobs import predict as jp
    from joulebound.jobs.job import job_from_options

    o = _opts(preset, model, layers, hidden, heads, seq, batch, global_batch, grad_accum, ff, vocab,
              dtype, recompute, optimizer, device, clocks, power_limit, interconnect, inter_node,
              gpus_per_node, nics_per_node, tokens, hf_config, lora_rank, lora_targets,
              recompute_mode, distributed_optimizer, sequence_parallel, flash_attention,
              framework=framework)
    is_law = jp.law_name(law, coefficients) is not None  # a law file selects prerun
    if jobs is not None:
        if is_law:
            raise JouleboundError("--jobs works with the mechanistic predictor only (drop --law)")
        _predict_table(jobs, {**o, "gpus": gpus, "strategy": strategy, "tp": tp, "pp": pp},
                       coefficients, output, as_json)
        return
    if output is not None and not is_law:
        raise JouleboundError("-o/--output writes the predictions of --jobs; for one job use --json")
    # a law reads the job's shape, GPUs and strategy (its global batch); tp/pp are mechanistic
    degrees = {"gpus": gpus, "strategy": strategy, **({} if is_law else {"tp": tp, "pp": pp})}
    job = job_from_options(**_default_shape({**o, **degrees}))
    p = jp.predict_job(job, law, coefficients, data, allow_oom=ignore_memory)
    if as_json:
        print_json(p.to_json())
    elif is_law:
        _print_law_prediction(p)
    else:
        _print_prediction(p)


def _predict_table(path: Path, defaults: dict, coefficients: Path | None, output: Path | None,
                   as_json: bool) -> None:
    # h20 (issue 30 item 14): streamed, a chunk of rows at a time (jobs.predict.predict_rows),
    # so memory stays bounded for any table (100,000 rows took 1.0 GB, 3.1 GB with --json)
    import time
    from collections.abc import Iterator

    from rich.table import Table

    from joulebound.cli._common import JsonListPrinter
    from joulebound.jobs import jobtable
    from joulebound.jobs.predict import predict_rows

    t0 = time.perf_counter()
    rows = jobtable.iter_jobs(path, {k: v for k, v in defaults.items() if v is not None})
    shown: list[dict] = []   # the first 40, for the terminal table
    refused: list[int] = []
    jp = JsonListPrinter() if as_json else None

    def out_rows() -> Iterator[dict]:
        for i, (_, p) in enumerate(predict_rows(rows, coefficients), start=1):
            if isinstance(p, str):
                r = jobtable.prediction_row(i, None, p)
                refused.append(i)
            else:
                r = jobtable.prediction_row(i, p)
            if jp is not None:
                jp.add({"row": i, "error": p} if isinstance(p, str) else {"row": i, **p.to_json()})
            if len(shown) < 40:
                shown.append(r)
            yield r

    if output is not None:
        n = jobtable.write_csv(output, out_rows())
    else:
        n = sum(1 for _ in out_rows())
    if jp is not None:
        jp.close()
    dt = time.perf_counter() - t0
    n_err = len(refused)
    if as_json:
        _exit_if_refused(refused, n)
        return
    tc = _table_console()
    t = Table(title=f"{n} jobs (modeled; 90 % intervals)", pad_edge=False)
    for c in ("row", "name", "strategy", "GPUs", "time (interval)", "GPU energy (interval)",
              "host", "total", "memory", "note"):
        t.add_column(c, no_wrap=c != "note", overflow="fold")
    for r in shown:
        if r["error"]:
            t.add_row(str(r["row"]), "", "", "", "", "", "", "", "", f"[red]{r['error']}[/]")
            continue
        t.add_row(str(r["row"]), str(r["name"]), str(r["strategy"]), str(r["gpus"]),
                  f"{_fmt_t(r['time_s'])} ({_fmt_t(r['time_lo_s'])}–{_fmt_t(r['time_hi_s'])})",
                  f"{_fmt_e(r['gpu_energy_j'])} ({_fmt_e(r['gpu_energy_lo_j'])}–{_fmt_e(r['gpu_energy_hi_j'])})",
                  _fmt_e(r["host_energy_j"]), _fmt_e(r["total_energy_j"]),
                  f"{r['memory_gib']:.3g} GiB" + ("" if r["fits_memory"] else " (too big)"),
                  (r["warnings"] or "")[:80])
    tc.print(t)
    if n > 40:
        console.print(f"first 40 of {n} rows shown" + ("" if output else "; write all with -o FILE.csv"))
    console.print(f"{n - n_err} predicted, {n_err} refused, in {dt:.2f} s"
                  + (f"; wrote {output}" if output else ""), highlight=False)
    _exit_if_refused(refused, n)


def _exit_if_refused(refused: list[int], n: int) -> None:
    """Exit with status 1 (after every output is written) when some rows were refused, naming
    the first of them."""
    if refused:
        from joulebound.cli._common import err_console

        first = ", ".join(map(str, refused[:10])) + (", ..." if len(refused) > 10 else "")
        err_console.print(f"[yellow]note:[/] {len(refused)} of {n} job(s) refused (row(s) "
                          f"{first}; the reason is in each row's error); exit status 1",
                          highlight=False)
        raise typer.Exit(1)


def advise(
    preset: str = _PRESET, hf_config: Path = _HF, model: str = _MODEL, layers: int = _LAYERS, hidden: int = _HIDDEN,
    heads: int = _HEADS, seq: int = _SEQ, batch: int = _BATCH, global_batch: int = _GBATCH,
    grad_accum: int = _GACC, tokens: float = _TOKENS,
    deadline: str = typer.Option(None, "--deadline", help="wall-time budget: seconds or 90m / 12h / 2d"),
    max_gpus: int = typer.Option(8, "--max-gpus", help="largest GPU count to consider (1, 2, 4, … and this)"),
    strategies: str = typer.Option("ddp,fsdp,tp,pp", "--strategies", help="comma-separated strategies "
                                   "(ddp, fsdp, tp, pp) tried at every GPU count > 1"),
    device: str = _DEVICE, dtype: str = _DTYPE, ff: int = _FF, vocab: int = _VOCAB,
    recompute: bool = _RECOMP, recompute_mode: str = _RECOMP_MODE,
    distributed_optimizer: bool = _DISTOPT, sequence_parallel: bool = _SEQPAR,
    flash_attention: bool = _FLASH, lora_rank: int = _LORA, lora_targets: str = _LORA_T,
    optimizer: str = _OPTIM, framework: str | None = _FRAMEWORK, clocks: str = _CLOCKS,
    power_limit: float = _PLIM, interconnect: str = _LINK, inter_node: str = _INTER,
    gpus_per_node: int = _GPN, nics_per_node: int = _NICS,
    layouts: bool = typer.Option(False, "--layouts", help="search Megatron 3D layouts instead of "
                                 "--strategies: tp × pp × dp × micro-batch × recompute (× sequence "
                                 "parallelism, distributed optimizer) at 1, 2, 4, then 8, 16, 24, 32, "
                                 "48, … GPUs up to --max-gpus; needs --global-batch; "
                                 "--recompute / --recompute-mode search that mode only"),
    top: int = typer.Option(15, "--top", help="--layouts: how many of the cheapest layouts to show"),
    jobs: Path = _JOBS, output: Path = _OUT, law: str = _LAW, coefficients: Path = _COEFFICIENTS,
    as_json: bool = _JSON,
) -> None:
    from joulebound.jobs import advisor
    from joulebound.jobs.job import job_from_options
    from joulebound.jobs.mechanistic import load_params
    from joulebound.jobs.predict import is_law_file

    o = _opts(preset, model, layers, hidden, heads, seq, batch, global_batch, grad_accum, ff, vocab,
              dtype, recompute, optimizer, device, clocks, power_limit, interconnect, inter_node,
              gpus_per_node, nics_per_node, tokens, hf_config, lora_rank, lora_targets,
              recompute_mode, distributed_optimizer, sequence_parallel, flash_attention,
              framework=framework or ("megatron" if layouts else "hf"))
    strat = tuple(s.strip() for s in strategies.split(",") if s.strip())
    if law is None and is_law_file(coefficients):
        law = "prerun"
    if law is not None:
        _legacy_advise(law, o, deadline, max_gpus, strat, coefficients, as_json)
        return
    prm = load_params(coefficients)
    if jobs is not None:
        _advise_table(jobs, o, deadline, max_gpus, strat, prm, output, as_json)
        return
    if deadline is None:
        raise JouleboundError("--deadline is required (seconds or 90m / 12h / 2d)")
    job = job_from_options(**_default_shape(o))
    deadline_s = parse_duration(deadline)
    if layouts:
        if top < 1:
            raise JouleboundError(f"--top must be >= 1 (got {top}): how many layouts to show")
        if job.global_batch is None:
            raise JouleboundError("--layouts needs --global-batch (sequences per optimizer step): "
                                  "each layout splits it over its data-parallel ranks")
        modes = (job.recompute_mode,) if (recompute or recompute_mode) else ("none", "selective", "full")
        best, opts, stats = advisor.search_layouts(job, deadline_s, max_gpus, prm, top=top,
                                                   recompute=modes)
        if as_json:
            print_json(advisor.options_json(best, opts, search=asdict(stats)))
            return
        title = (f"the {len(opts)} cheapest of {stats.layouts:,} layouts on up to {max_gpus} GPUs for "
                 f"{float(job.tokens):.3g} tokens within {_fmt_t(deadline_s)} (modeled, mechanistic; "
                 "90 % intervals)")
        _print_options(best, opts, title, layout=True)
        console.print(f"searched {stats.layouts:,} layouts (GPU count × tp × pp × micro-batch × recompute "
                      f"× sequence parallelism × distributed optimizer), {stats.checked:,} memory "
                      f"estimates, {stats.priced:,} priced, in {stats.seconds:.2f} s", highlight=False,
                      style="dim")
        return
    best, opts = advisor.advise_job(job, deadline_s, max_gpus, strat, prm=prm)
    if as_json:
        print_json(advisor.options_json(best, opts))
        return
    title = (f"strategy × GPU count for {float(job.tokens):.3g} tokens within {_fmt_t(deadline_s)} "
             "(modeled, mechanistic; 90 % intervals)")
    _print_options(best, opts, title)


def _with_interval(fmt, v: float, lo: float, hi: float) -> str:
    """``"2.84 h (52.4 min–9.2 h)"``."""
    return f"{fmt(v)} ({fmt(lo)}–{fmt(hi)})"


def _print_options(best, opts: list, title: str, layout: bool = False) -> None:
    """The advise table: every candidate (or layout) with its time and energy and their 90 %
    intervals, its energy ratio to the advice with that ratio's 90 % interval, and its deadline
    verdict; then the advice, the candidates it cannot be told apart from, and a deadline it
    may miss."""
    from rich.table import Table

    t = Table(title=title, pad_edge=False)
    names = (("layout", "GPUs") if layout else ("strategy", "GPUs", "mb×acc")) + (
        "time (90 %)", "energy, GPU+host (90 %)", "× advice (90 %)", "mem/GPU") + (
        () if layout else ("comm",)) + ("deadline",)
    cells, notes = [], []
    for c in opts:
        mark = "→ " if c is best else ""
        if not c.feasible and c.time_s != c.time_s:
            cells.append((mark + c.strategy, str(c.gpus), *(["–"] * (len(names) - 2))))
            notes.append(f"{c.strategy} × {c.gpus}: infeasible — {c.reason}")
            continue
        ratio = "–" if c.energy_ratio != c.energy_ratio else (
            "advice" if c is best else f"{c.energy_ratio:.2f} ({c.energy_ratio_lo:.2f}–"
                                       f"{c.energy_ratio_hi:.2f})" + (" ≈" if c.indistinguishable else ""))
        row = [mark + c.label, str(c.gpus)] + ([] if layout else [f"{c.micro_batch}×{c.grad_accum}"])
        row += [_with_interval(_fmt_t, c.time_s, c.time_lo_s, c.time_hi_s),
                _with_interval(_fmt_e, c.energy_j, c.energy_lo_j, c.energy_hi_j), ratio,
                f"{c.memory_gib:.3g} GiB" + ("" if c.fits_memory else " (too big)")]
        row += ([] if layout else [f"{c.comm_share:.0%}"]) + [c.deadline]
        cells.append(tuple(row))
    if _needed_width(names, cells, ("layout",)) > _table_console().width:  # intervals below
        two = [i for i, n in enumerate(names) if "(90 %)" in n and "advice" not in n]
        cells = [tuple(x.replace(" (", "\n(", 1) if i in two else x for i, x in enumerate(r))
                 for r in cells]
        for i, name in enumerate(names):
            w = max([len(name)] + [len(line) for r in cells for line in r[i].split("\n")])
            if name == "layout":
                t.add_column(name, overflow="fold")
            else:
                t.add_column(name, no_wrap=True, min_width=w)
    else:
        _add_columns(t, names, cells, text=("layout",))
    for row in cells:
        t.add_row(*row, style="bold green" if row[0].startswith("→ ") else None)
    _table_console().print(t)
    for n in notes:
        console.print(n, highlight=False, style="dim")
    console.print("× advice: energy over the advice's, with the 90 % interval of that ratio (correlated "
                  "draws: the error terms all candidates share cancel, their own do not); ≈ = "
                  "indistinguishable (the interval spans 1). deadline: ok = the 90 % upper time bound "
                  "meets it, may miss = only the central estimate does", style="dim", highlight=False)
    order = {"ok": 0, "may miss": 1, "miss": 2}
    same = [c for c in opts if c.indistinguishable and order[c.deadline] <= order[best.deadline]]
    if best.deadline == "miss":
        console.print("[yellow]no feasible candidate meets the deadline; the fastest that fits is "
                      "marked[/]", highlight=False)
        return
    gpus = f"{best.gpus} GPU{'s' if best.gpus > 1 else ''}"
    console.print(f"advice: {best.label} on {gpus} — {_fmt_e(best.energy_j)}, {_fmt_t(best.time_s)} "
                  f"(upper bound {_fmt_t(best.time_hi_s)})  \\[modeled]", highlight=False)
    if best.deadline == "may miss":
        console.print(f"[yellow]may miss the deadline:[/] its 90 % upper time bound "
                      f"{_fmt_t(best.time_hi_s)} exceeds it and no candidate's upper bound meets it",
                      highlight=False)
    if same:
        names = ", ".join(f"{c.label}" + ("" if layout else f" ×{c.gpus}") for c in same[:6])
        more = f" and {len(same) - 6} more" if len(same) > 6 else ""
        console.print(f"indistinguishable in energy from the advice (the ratio's 90 % interval spans 1) "
                      f"and as likely to meet the deadline: {names}{more}", highlight=False)


def _advise_table(path: Path, o: dict, deadline, max_gpus: int, strat: tuple, prm, output, as_json: bool) -> None:
    from dataclasses import asdict

    from joulebound.jobs import advisor, jobtable

    rows = jobtable.read_jobs(path, {k: v for k, v in o.items() if v is not None}, advise=True)
    out = []
    cols = ("row", "name", "error", "strategy", "gpus", "time_s", "energy_j", "energy_lo_j", "energy_hi_j",
            "gpu_energy_j", "host_energy_j", "time_hi_s", "meets_deadline", "deadline", "memory_gib",
            "provenance")
    for i, (job, extra, err) in enumerate(rows, start=1):
        if job is None:
            out.append({"row": i, "error": err})
            continue
        try:
            dl = extra.get("deadline", deadline)
            if dl is None:
                raise JouleboundError(f"row {i}: no deadline (column 'deadline' or --deadline)")
            mg = int(extra.get("max_gpus", max_gpus))
            st = tuple(s for s in str(extra.get("strategies", ",".join(strat))).replace(";", ",").split(",") if s)
            best, opts = advisor.advise(job, parse_duration(dl), mg, st, prm)
            out.append({"row": i, "name": job.name, "error": "", **{k: v for k, v in asdict(best).items()},
                        "strategy": best.label, "provenance": MODELED,
                        "candidates": [asdict(c) for c in opts]})
        except JouleboundError as exc:
            out.append({"row": i, "name": job.name, "error": str(exc)})
    if output is not None:
        jobtable.write_csv(output, out, cols)
    if as_json:
        print_json(out)
        return
    for r in out:
        if r.get("error"):
            console.print(f"row {r['row']}: [red]{r['error']}[/]", highlight=False)
        else:
            console.print(f"row {r['row']} {r['name']}: {r['strategy']} on {r['gpus']} GPU(s), "
                          f"{_fmt_e(r['energy_j'])}, {_fmt_t(r['time_s'])}, deadline "
                          f"{r['deadline']} (upper bound {_fmt_t(r['time_hi_s'])})  \\[modeled]",
                          highlight=False)


def _legacy_advise(law: str, o: dict, deadline, max_gpus: int, strat: tuple, coefficients, as_json: bool) -> None:
    from rich.table import Table

    from joulebound.jobs import advisor
    from joulebound.jobs.job import job_from_options

    advisor.check_law(law)
    if deadline is None:
        raise JouleboundError("--deadline is required (seconds or 90m / 12h / 2d)")
    job = job_from_options(**_default_shape(o))
    best, cands = advisor.advise_job(job, parse_duration(deadline), max_gpus, strat, law=law,
                                     coefficients=coefficients)
    if as_json:
        print_json(advisor.to_json(best, cands))
        return
    t = Table(title="strategy × GPU count (modeled, legacy pre-run law)")
    for c in ("strategy", "GPUs", "energy kWh (90 % interval)", "time h", "η̂_par", "deadline"):
        t.add_column(c)
    for c in cands:
        t.add_row(("[bold green]→ " if c is best else "") + c.strategy, str(c.gpus),
                  f"{c.energy_j / 3.6e6:.4g} ({c.energy_lo_j / 3.6e6:.3g}–{c.energy_hi_j / 3.6e6:.3g})",
                  f"{c.time_s / 3600:.3g}", f"{c.eta_par:.2f}", "ok" if c.meets_deadline else "miss")
    _table_console().print(t)


def register(app: typer.Typer) -> None:
    app.command("fit", help=reflow(FIT_HELP))(fit)
    app.command("predict", help=reflow(PREDICT_HELP))(predict)
    app.command("advise", help=reflow(ADVISE_HELP))(advise)
