"""Workloads: analytic transformer kernel traces, torch.profiler capture and Kineto import.

:func:`load_trace` is the one entry point the other stages use: it takes a preset name
(``"gpt3-xl"``), a Hugging Face ``config.json`` (an analytic trace of that model), a joulebound
trace file (``trace.json`` written by :meth:`Trace.save`) or a torch.profiler / Kineto
Chrome-trace export and returns a :class:`~joulebound.workload.trace.Trace`.
:func:`model_config` says which model a preset name or ``config.json`` describes.
"""

from __future__ import annotations

from pathlib import Path

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.workload.trace import CATEGORIES, PHASES, Kernel, Trace

__all__ = ["CATEGORIES", "PHASES", "Kernel", "Trace", "load_trace", "model_config"]


#: larger JSON files are not taken for a Hugging Face config.json by :func:`model_config`
_HF_MAX_BYTES = 1 << 20


def model_config(spec: str | Path):
    """The :class:`~joulebound.workload.config.TrainingConfig` that ``spec`` names — a preset
    (case-insensitive) or a Hugging Face ``config.json`` file (or its folder) — or ``None`` when
    it is neither (a trace file, or nothing that exists). A file that is a Hugging Face config
    but cannot be modeled raises :class:`JouleboundError` naming the key."""
    from joulebound.workload.analytic import PRESETS
    from joulebound.workload.config import is_hf_config, load_hf_config

    text = str(spec).strip()
    if text.lower() in PRESETS:
        return PRESETS[text.lower()]
    path = Path(text)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    # a config.json is a few kB; trace exports are not read twice
    if not path.is_file() or path.suffix.lower() != ".json" or path.stat().st_size > _HF_MAX_BYTES:
        return None
    from joulebound.core.jsonio import read_json

    try:
        doc = read_json(path)
    except JouleboundError:
        return None
    return load_hf_config(path) if is_hf_config(doc) else None


def load_trace(spec: str | Path | Trace, batch: int | None = None, seq: int | None = None) -> Trace:
    """Load a trace from a preset name, a joulebound trace file, or a Kineto JSON export.

    Args:
        spec: preset name (see :data:`joulebound.workload.analytic.PRESETS`, case-insensitive),
            a Hugging Face ``config.json`` (llama, mistral, qwen2, gpt2, bert; micro-batch 1
            unless ``batch``), a path to a joulebound trace (``.json`` / ``.json.gz``), a path to a
            torch.profiler ``export_chrome_trace`` file, or a ``Trace`` (returned as is).
        batch: micro-batch size override (presets and Hugging Face configs only).
        seq: sequence length override (presets and Hugging Face configs only).

    Raises:
        JouleboundError: unknown preset and no such file; ``batch``/``seq`` given for a file;
            a malformed file (the message names the file and the field).
    """
    from joulebound.workload.analytic import PRESETS, build_trace

    if isinstance(spec, Trace):
        if batch is not None or seq is not None:
            raise JouleboundError("batch/seq can only be changed for a model preset, not for a "
                                  "trace that is already built")
        return spec
    text = str(spec)
    if text.strip().lower() in PRESETS:
        return build_trace(text.strip().lower(), batch=batch, seq=seq)
    path = Path(text)
    if path.is_dir() and (path / "config.json").is_file():  # a Hugging Face model folder
        path = path / "config.json"
    if not path.exists():
        raise JouleboundError(
            f"{text!r} is neither a model preset nor an existing trace file.{did_you_mean(text, tuple(PRESETS))} "
            "Or pass the path of a trace JSON (joulebound trace -o, or torch.profiler "
            "export_chrome_trace).")
    from joulebound.core.jsonio import read_json
    from joulebound.workload.config import is_hf_config, load_hf_config

    doc = read_json(path)
    if is_hf_config(doc):  # a Hugging Face config.json: its analytic trace
        return build_trace(load_hf_config(path), batch=batch, seq=seq)
    if batch is not None or seq is not None:
        raise JouleboundError(f"{path}: --batch/--seq apply only to model presets and Hugging "
                              "Face config.json files; a trace file already fixes the shapes")
    if isinstance(doc, dict) and doc.get("schema") == "joulebound.trace":
        from joulebound.core.jsonio import check_header
        from joulebound.workload.trace import SCHEMA, VERSION

        return Trace.from_json(check_header(doc, path, SCHEMA, VERSION), path)
    from joulebound.workload.kineto import is_chrome_trace, load_chrome_trace

    if is_chrome_trace(doc):
        return load_chrome_trace(path, doc=doc)
    raise JouleboundError(
        f"{path}: not a joulebound trace (no \"schema\": \"joulebound.trace\") and not a "
        "Chrome/Kineto trace (no \"traceEvents\" list)")
