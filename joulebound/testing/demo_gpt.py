"""A small GPT-style model and training loop (CPU-sized) used to exercise the runtime.

Real PyTorch: token + position embeddings, pre-LayerNorm blocks with causal multi-head attention
(``scaled_dot_product_attention``) and a GELU MLP, tied LM head, cross-entropy loss, AdamW. The
tests, the benchmark and ``docs/runtime.md``'s example run it under the controller; it is also a
runnable script::

    python -m joulebound.testing.demo_gpt --steps 20 --eval-every 10
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TinyGPTConfig:
    """Model/batch sizes (tokens, features)."""

    vocab: int = 256
    seq: int = 32
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    batch: int = 4
    dropout: float = 0.1


def build(cfg: TinyGPTConfig, seed: int = 0) -> tuple[Any, Any]:
    """``(model, optimizer)`` on CPU."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    torch.manual_seed(seed)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(cfg.hidden)
            self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
            self.proj = nn.Linear(cfg.hidden, cfg.hidden)
            self.ln2 = nn.LayerNorm(cfg.hidden)
            self.fc = nn.Linear(cfg.hidden, 4 * cfg.hidden)
            self.out = nn.Linear(4 * cfg.hidden, cfg.hidden)
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            h = cfg.heads

            def heads(t: torch.Tensor) -> torch.Tensor:
                return t.view(b, s, h, d // h).transpose(1, 2)

            a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
            x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, s, d)))
            return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
            self.pos = nn.Embedding(cfg.seq, cfg.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.ln = nn.LayerNorm(cfg.hidden)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(idx.shape[1])
            x = self.tok(idx) + self.pos(pos)
            for blk in self.blocks:
                x = blk(x)
            return self.ln(x) @ self.tok.weight.t()

    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt


def make_step(cfg: TinyGPTConfig, seed: int = 0) -> tuple[Callable[..., float],
                                                           Callable[..., float]]:
    """``(train_step(batch=None), eval_step(batch=None))`` closures over a fresh model.

    ``batch`` overrides the batch size (a short last batch); each call draws random tokens."""
    import torch
    from torch.nn import functional as F

    model, opt = build(cfg, seed)
    gen = torch.Generator().manual_seed(seed)

    def data(batch: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        b = batch or cfg.batch
        idx = torch.randint(cfg.vocab, (b, cfg.seq + 1), generator=gen)
        return idx[:, :-1], idx[:, 1:]

    def train_step(batch: int | None = None) -> float:
        model.train()
        x, y = data(batch)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach())

    def eval_step(batch: int | None = None) -> float:
        model.eval()
        with torch.no_grad():
            x, y = data(batch)
            logits = model(x)
            return float(F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1)))

    return train_step, eval_step


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    args = ap.parse_args(argv)
    cfg = TinyGPTConfig(layers=args.layers, hidden=args.hidden, batch=args.batch, seq=args.seq)
    train_step, eval_step = make_step(cfg)
    for i in range(args.steps):
        loss = train_step()
        if args.eval_every and (i + 1) % args.eval_every == 0:
            print(f"step {i + 1}: train loss {loss:.3f}, eval loss {eval_step():.3f}", flush=True)
    print(f"done: {args.steps} steps, final train loss {loss:.3f}", flush=True)


if __name__ == "__main__":
    main()
