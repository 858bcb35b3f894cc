"""The training workload of a sweep: a Hugging Face model built from a config, random tokens, AdamW.

- ``bert``: ``transformers.BertForSequenceClassification`` (2 labels) from a ``BertConfig`` —
  BERT fine-tuning as in the paper. ``gpt`` (stored as ``gpt2``): ``transformers.GPT2LMHeadModel`` from a
  ``GPT2Config`` (causal LM loss). Weights are randomly initialised from the config's seed; nothing
  is downloaded from the Hugging Face hub.
- Data: **random token ids** (uniform over the vocabulary, seeded), not text. Energy and time do not
  depend on token *content*, but they do depend on padding, so each sequence holds between
  ``ceil(min_fill × seq)`` and ``seq`` real tokens followed by padding (attention mask 0); the
  sweep records real and padded token counts.
- Optimizer: ``torch.optim.AdamW``; ``bf16`` runs under ``torch.autocast`` with fp32 master weights.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from joulebound.workload.grid import SweepConfig

DATA_NOTE = "random token ids (uniform over vocab, seeded); real vs padded tokens recorded"


def model_classes(arch: str) -> tuple[type, type]:
    """``(config class, model class)`` of ``arch`` from transformers (importing them costs a few
    CPU seconds the first time: the sweep worker does it once per rank before its first
    configuration)."""
    if arch == "bert":
        from transformers import BertConfig, BertForSequenceClassification

        return BertConfig, BertForSequenceClassification
    if arch in ("gpt", "gpt2"):
        from transformers import GPT2Config, GPT2LMHeadModel

        return GPT2Config, GPT2LMHeadModel
    raise ValueError(f"unknown arch {arch!r}")


def build_model(cfg: SweepConfig) -> nn.Module:
    """The randomly initialised model of ``cfg`` (same weights for the same seed, on CPU)."""
    config_cls, model_cls = model_classes(cfg.arch)
    torch.manual_seed(cfg.seed)
    if cfg.arch == "bert":
        hf = config_cls(vocab_size=cfg.vocab, hidden_size=cfg.hidden, num_hidden_layers=cfg.layers,
                        num_attention_heads=cfg.heads, intermediate_size=cfg.ff,
                        max_position_embeddings=cfg.seq, hidden_dropout_prob=cfg.dropout,
                        attention_probs_dropout_prob=cfg.dropout, num_labels=2)
        return model_cls(hf)
    hf = config_cls(vocab_size=cfg.vocab, n_embd=cfg.hidden, n_layer=cfg.layers,
                    n_head=cfg.heads, n_inner=cfg.ff, n_positions=cfg.seq,
                    resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout)
    return model_cls(hf)


def make_dataset(cfg: SweepConfig, n_steps: int) -> torch.utils.data.TensorDataset:
    """``n_steps × batch`` random sequences: (input_ids, attention_mask, labels), seeded.

    Sequence ``i`` has ``L_i ~ U{ceil(min_fill·seq), …, seq}`` real tokens, then padding (id 0,
    mask 0). Labels: a class in {0, 1} for BERT; the input ids with padding set to -100 for GPT-2.
    """
    n = n_steps * cfg.global_batch
    g = torch.Generator().manual_seed(cfg.seed + 1)
    ids = torch.randint(1, cfg.vocab, (n, cfg.seq), generator=g)
    lo = max(1, math.ceil(cfg.min_fill * cfg.seq))
    lengths = torch.randint(lo, cfg.seq + 1, (n,), generator=g)
    mask = (torch.arange(cfg.seq)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    if cfg.arch == "bert":
        labels = torch.randint(0, 2, (n,), generator=g)
    else:
        labels = ids.masked_fill(mask == 0, -100)
    return torch.utils.data.TensorDataset(ids, mask, labels)


def token_counts(batch: tuple[torch.Tensor, ...]) -> tuple[int, int]:
    """(real tokens, token positions incl. padding) of one batch."""
    mask = batch[1]
    return int(mask.sum()), int(mask.numel())


def autocast_context(cfg: SweepConfig, device: torch.device) -> Any:
    """``torch.autocast`` for bf16, a no-op context for fp32."""
    import contextlib

    if cfg.dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def make_optimizer(model: nn.Module, cfg: SweepConfig) -> torch.optim.Optimizer:
    """AdamW over all parameters (works on DTensor / FSDP2-sharded parameters)."""
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, batch: tuple[torch.Tensor, ...],
               cfg: SweepConfig, device: torch.device) -> torch.Tensor:
    """One optimizer step on ``batch``; returns the (detached) loss without a host sync."""
    ids, mask, labels = (t.to(device, non_blocking=True) for t in batch)
    with autocast_context(cfg, device):
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return out.loss.detach().float()
