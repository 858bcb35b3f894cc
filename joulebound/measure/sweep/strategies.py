"""Parallel training strategies, all through ``torch.distributed`` (no home-made collectives).

- ``single``: the model on one device.
- ``ddp``: ``torch.nn.parallel.DistributedDataParallel``; the global batch is split across ranks.
- ``fsdp``: FSDP2 ``torch.distributed.fsdp.fully_shard`` on every transformer block and the root;
  the global batch is split across ranks.
- ``tp``: Megatron-style tensor parallelism with DTensor
  ``torch.distributed.tensor.parallel.parallelize_module`` in every transformer block: attention
  Q, K, V column-wise (each rank owns ``heads / world`` heads), attention output row-wise, MLP
  intermediate column-wise, MLP output row-wise. Embeddings, LayerNorms, pooler and classifier stay
  replicated. Every rank sees the same (whole) batch.

BERT's self-attention (transformers 5.x) reshapes with ``view(*shape, -1, head_size)`` and
``reshape(*shape, -1)``, so it would already follow the local width; we still set each block's
``num_attention_heads`` and ``all_head_size`` to the per-rank values so nothing downstream reads
the global head count.
"""

from __future__ import annotations

import torch
from torch import nn

from joulebound.workload.grid import SweepConfig


def bert_tp_plan() -> dict[str, object]:
    """The per-block DTensor plan for a ``BertLayer`` (Megatron-style attention + MLP)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {
        "attention.self.query": ColwiseParallel(),
        "attention.self.key": ColwiseParallel(),
        "attention.self.value": ColwiseParallel(),
        "attention.output.dense": RowwiseParallel(),
        "intermediate.dense": ColwiseParallel(),
        "output.dense": RowwiseParallel(),
    }


def _blocks(model: nn.Module) -> list[nn.Module]:
    if hasattr(model, "bert"):
        return list(model.bert.encoder.layer)
    if hasattr(model, "transformer"):
        return list(model.transformer.h)
    raise ValueError(f"do not know the transformer blocks of {type(model).__name__}")


def apply_strategy(model: nn.Module, cfg: SweepConfig, device: torch.device) -> nn.Module:
    """Move ``model`` to ``device`` and wrap/shard it for ``cfg.strategy``.

    Multi-rank strategies need an initialised default process group of ``cfg.world_size`` ranks.
    """
    if cfg.strategy == "single":
        return model.to(device)
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() != cfg.world_size:
        have = dist.get_world_size() if dist.is_initialized() else 1
        raise RuntimeError(f"strategy {cfg.strategy!r} at world size {cfg.world_size} needs a process "
                           f"group of {cfg.world_size} ranks; this process has {have}")
    if cfg.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = model.to(device)
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (cfg.world_size,))
    if cfg.strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        model = model.to(device)
        for block in _blocks(model):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    if cfg.strategy == "tp":
        from torch.distributed.tensor.parallel import parallelize_module

        if not hasattr(model, "bert"):
            raise ValueError("strategy 'tp' is implemented for BERT only")
        model = model.to(device)
        n = cfg.world_size
        for block in _blocks(model):
            parallelize_module(block, mesh, bert_tp_plan())
            attn = block.attention.self
            attn.num_attention_heads = attn.num_attention_heads // n
            attn.all_head_size = attn.all_head_size // n
        return model
    raise ValueError(f"unknown strategy {cfg.strategy!r}")


def batch_indices(cfg: SweepConfig, rank: int, n_samples: int) -> list[int]:
    """Dataset indices this rank reads, in order (``batch`` per step for one rank).

    DDP/FSDP use :class:`torch.utils.data.DistributedSampler` (no shuffle), whose interleaved split
    gives each rank ``batch / world`` sequences of every global batch and different data per rank;
    ``single`` and ``tp`` read every index.
    """
    if not cfg.splits_data:
        return list(range(n_samples))
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n_samples), num_replicas=cfg.world_size, rank=rank,
                                 shuffle=False, drop_last=True)
    return list(iter(sampler))
