"""Sweep grids: the configurations a sweep runs, from a preset, a TOML file or CLI options.

A :class:`Grid` holds lists of values for the shape dimensions (layers, hidden size, heads, ff,
sequence length, batch, dtype, architecture) and scalar run settings (steps, warm-up steps,
vocabulary, dropout, padding fill, seed, learning rate). :meth:`Grid.expand` crosses the shapes
with the requested strategies and GPU counts into :class:`SweepConfig` objects and validates every
one of them *before anything runs*: a bad grid raises one :class:`~joulebound.core.errors.JouleboundError`
that lists every problem (which shape, which field, how to fix it).

Conventions:

- ``batch`` (a grid key, and a key of saved configurations) is the **global** batch of one
  optimizer step (sequences): the model's ``global_batch``. ``single`` and ``tp`` feed
  the whole batch to every rank; ``ddp`` and ``fsdp`` split it across ranks (``batch / world_size``
  sequences per rank). So every strategy does the same work per step as the 1-GPU run of the same
  shape, and the work-normalized speedup is the ratio of throughputs.
- ``single`` always runs on one rank (world size 1); the multi-rank strategies run at every GPU
  count of ``gpus`` that is at least 2.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from joulebound.core.errors import JouleboundError, SchemaError, did_you_mean
from joulebound.core.vocab import SWEEP_DTYPES, SWEEP_STRATEGIES
from joulebound.workload.config import TrainingConfig, canonical_arch

STRATEGIES: tuple[str, ...] = SWEEP_STRATEGIES
#: architectures a sweep runs, in their one spelling (``gpt2`` is read as ``gpt``)
ARCHS: tuple[str, ...] = ("bert", "gpt")
DTYPES: tuple[str, ...] = SWEEP_DTYPES
#: strategies that split the global batch across ranks (each rank sees different data)
DATA_PARALLEL: frozenset[str] = frozenset({"ddp", "fsdp"})
#: the architecture's spelling in config ids, saved plans and sweep stores (unchanged, so old
#: stores resume and their ids stay stable)
STORED_ARCH: dict[str, str] = {"gpt": "gpt2", "bert": "bert"}
#: the keys of a saved configuration (:meth:`SweepConfig.to_dict`), in their stored order
DICT_KEYS: tuple[str, ...] = ("arch", "layers", "hidden", "heads", "ff", "seq", "batch", "dtype",
                              "steps", "warmup", "strategy", "world_size", "vocab", "dropout",
                              "min_fill", "seed", "lr")
_UNSET: Any = object()


@dataclass(frozen=True, init=False)
class SweepConfig:
    """One configuration of a sweep: a :class:`~joulebound.workload.config.TrainingConfig`
    (:attr:`model`), the strategy and world size it runs on, and the run settings.

    The model's ``global_batch`` is the batch of one optimizer step (sequences), its
    ``micro_batch`` what one rank runs per step (``global_batch / world_size`` for ``ddp`` and
    ``fsdp``, all of it for ``single`` and ``tp``), ``grad_accum`` 1. The architectures are
    ``"bert"`` (``BertForSequenceClassification``) and ``"gpt"`` (``GPT2LMHeadModel``).

    Built from the former flat keywords (``SweepConfig(arch="gpt2", layers=2, hidden=64,
    heads=2, ff=256, seq=32, batch=8, strategy="ddp", world_size=2)``: ``batch`` is the global
    batch; ``dtype`` defaults to fp32, ``vocab`` to 30522) or from ``model=`` and the run
    fields.

    Attributes:
        model: the training configuration (shape, batches, dtype).
        strategy: ``"single"``, ``"ddp"``, ``"fsdp"`` or ``"tp"``.
        world_size: ranks (GPUs, or CPU processes) the configuration runs on.
        steps: measured optimizer steps.
        warmup: warm-up steps run before the measured window (excluded from time and energy).
        dropout: hidden and attention dropout probability.
        min_fill: each sequence holds between ``ceil(min_fill * seq)`` and ``seq`` real tokens,
            the rest is padding (1.0 = no padding).
        seed: seed of model init and data.
        lr: AdamW learning rate.
    """

    model: TrainingConfig
    strategy: str = "single"
    world_size: int = 1
    steps: int = 10
    warmup: int = 2
    dropout: float = 0.1
    min_fill: float = 1.0
    seed: int = 0
    lr: float = 5e-5

    def __init__(self, arch: Any = _UNSET, layers: Any = _UNSET, hidden: Any = _UNSET,
                 heads: Any = _UNSET, ff: Any = _UNSET, seq: Any = _UNSET, batch: Any = _UNSET,
                 dtype: Any = _UNSET, steps: int = 10, warmup: int = 2, strategy: str = "single",
                 world_size: int = 1, vocab: Any = _UNSET, dropout: float = 0.1,
                 min_fill: float = 1.0, seed: int = 0, lr: float = 5e-5, *,
                 model: TrainingConfig | None = None) -> None:
        given = {k: v for k, v in dict(arch=arch, layers=layers, hidden=hidden, heads=heads,
                                       ff=ff, seq=seq, global_batch=batch, dtype=dtype,
                                       vocab=vocab).items() if v is not _UNSET}
        if model is None:
            missing = [k for k in ("arch", "layers", "hidden", "heads", "ff", "seq", "global_batch")
                       if k not in given]
            if missing:
                raise TypeError(f"SweepConfig() missing the field(s) "
                                f"{', '.join('batch' if m == 'global_batch' else m for m in missing)}")
            given.setdefault("vocab", 30522)
            model = TrainingConfig(**given)
        elif given:
            model = replace(model, **given)
        gb = model.global_batch
        split = strategy in DATA_PARALLEL and isinstance(gb, int) and world_size
        model = replace(model, micro_batch=gb // world_size if split else gb, grad_accum=1)
        put = object.__setattr__
        put(self, "model", model)
        for k, v in dict(strategy=strategy, world_size=world_size, steps=steps, warmup=warmup,
                         dropout=dropout, min_fill=min_fill, seed=seed, lr=lr).items():
            put(self, k, v)

    # the model's fields, read through
    arch = property(lambda self: self.model.arch)
    layers = property(lambda self: self.model.layers)
    hidden = property(lambda self: self.model.hidden)
    heads = property(lambda self: self.model.heads)
    ff = property(lambda self: self.model.ff)
    seq = property(lambda self: self.model.seq)
    vocab = property(lambda self: self.model.vocab)
    dtype = property(lambda self: self.model.dtype)
    global_batch = property(lambda self: self.model.global_batch,
                            doc="Sequences per optimizer step over all ranks.")
    micro_batch = property(lambda self: self.model.micro_batch,
                           doc="Sequences each rank processes per step.")

    @property
    def stored_arch(self) -> str:
        """The architecture as config ids and stores spell it (:data:`STORED_ARCH`)."""
        return STORED_ARCH.get(self.arch, self.arch)

    @property
    def config_id(self) -> str:
        """Stable, readable id: the shape, strategy and world size, plus a hash of the rest."""
        rest = {k: getattr(self, k) for k in _HASHED}
        digest = hashlib.sha1(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:8]
        return (f"{self.stored_arch}-L{self.layers}-d{self.hidden}-h{self.heads}-ff{self.ff}"
                f"-S{self.seq}-B{self.global_batch}-{self.dtype}-{self.strategy}"
                f"-w{self.world_size}-{digest}")

    @property
    def baseline(self) -> SweepConfig:
        """The 1-GPU (``single``) run of the same shape: the reference of the speedup."""
        return replace(self, strategy="single", world_size=1)

    @property
    def splits_data(self) -> bool:
        """True when ranks see different data (DDP/FSDP split the global batch)."""
        return self.strategy in DATA_PARALLEL

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready) in the saved format (:data:`DICT_KEYS`: ``batch`` is the
        global batch, ``arch`` as :attr:`stored_arch`)."""
        d = {k: getattr(self, k) for k in DICT_KEYS if k not in ("arch", "batch")}
        d.update(arch=self.stored_arch, batch=self.global_batch)
        return {k: d[k] for k in DICT_KEYS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SweepConfig:
        """Inverse of :meth:`to_dict` (unknown keys are an error; ``global_batch`` is read as
        ``batch``)."""
        d = dict(d)
        if "global_batch" in d and "batch" not in d:
            d["batch"] = d.pop("global_batch")
        bad = [k for k in d if k not in DICT_KEYS]
        if bad:
            raise JouleboundError(f"unknown configuration field(s) {bad}.{did_you_mean(bad[0], sorted(DICT_KEYS))}")
        return cls(**d)


_HASHED = ("steps", "warmup", "vocab", "dropout", "min_fill", "seed", "lr")
#: problems a grid's error lists (a mistyped grid has one per shape and strategy: 540,000
#: made a 92 MB message); the rest are counted
MAX_PROBLEMS_SHOWN = 10
_LIST_KEYS = ("arch", "layers", "hidden", "heads", "ff", "seq", "batch", "dtype")
_SCALAR_KEYS = ("head_dim", "ff_mult", "steps", "warmup", "vocab", "dropout", "min_fill", "seed",
                "lr", "name")


@dataclass
class Grid:
    """Value lists for each dimension of a sweep; :meth:`expand` makes the configurations.

    ``heads`` may be empty, then ``heads = hidden // head_dim`` (the paper's h = d/64);
    ``ff`` may be empty, then ``ff = ff_mult * hidden`` (the paper's ff = 4d).
    """

    name: str = "custom"
    arch: list[str] = field(default_factory=lambda: ["bert"])
    layers: list[int] = field(default_factory=lambda: [2])
    hidden: list[int] = field(default_factory=lambda: [64])
    heads: list[int] = field(default_factory=list)
    ff: list[int] = field(default_factory=list)
    seq: list[int] = field(default_factory=lambda: [64])
    batch: list[int] = field(default_factory=lambda: [16])
    dtype: list[str] = field(default_factory=lambda: ["fp32"])
    head_dim: int = 64
    ff_mult: int = 4
    steps: int = 10
    warmup: int = 2
    vocab: int = 30522
    dropout: float = 0.1
    min_fill: float = 1.0
    seed: int = 0
    lr: float = 5e-5

    def shapes(self) -> list[dict[str, Any]]:
        """Every shape (dict of the per-configuration fields except strategy/world size)."""
        out = []
        for arch, L, d, S, B, dt in itertools.product(self.arch, self.layers, self.hidden,
                                                     self.seq, self.batch, self.dtype):
            # a head_dim below 1 is reported by _check_scalars with the grid's other problems
            auto_h = max(1, d // self.head_dim) if self.head_dim >= 1 else 1
            for h in (self.heads or [auto_h]):
                for ff in (self.ff or [self.ff_mult * d]):
                    out.append(dict(arch=arch, layers=L, hidden=d, heads=h, ff=ff, seq=S, batch=B,
                                    dtype=dt, steps=self.steps, warmup=self.warmup,
                                    vocab=self.vocab, dropout=self.dropout,
                                    min_fill=self.min_fill, seed=self.seed, lr=self.lr))
        return out

    def expand(self, strategies: list[str] | tuple[str, ...] = STRATEGIES,
               gpus: list[int] | tuple[int, ...] = (1, 2),
               skip_invalid: bool = False) -> list[SweepConfig]:
        """All configurations (shapes × strategies × world sizes), validated.

        Args:
            strategies: any of ``single``, ``ddp``, ``fsdp``, ``tp``.
            gpus: world sizes; ``single`` runs at 1, the others at every size >= 2.
            skip_invalid: drop (shape, strategy, world size) combinations that cannot run — e.g.
                tensor parallelism over more ranks than heads — instead of failing; they are
                listed by :meth:`plan`. Errors in a shape itself or in the options still raise.

        Raises:
            JouleboundError: listing every problem (heads not dividing hidden, a strategy that needs
                more ranks than ``gpus`` gives, a batch that does not split, ...), before anything
                runs.
        """
        configs, skipped = self.plan(strategies, gpus, skip_invalid=skip_invalid)
        return configs

    def plan(self, strategies: list[str] | tuple[str, ...] = STRATEGIES,
             gpus: list[int] | tuple[int, ...] = (1, 2),
             skip_invalid: bool = False) -> tuple[list[SweepConfig], list[str]]:
        """Like :meth:`expand`, also returning the reasons of skipped combinations."""
        problems: list[str] = []
        skipped: list[str] = []
        strategies = list(dict.fromkeys(strategies))
        for s in strategies:
            if s not in STRATEGIES:
                problems.append(f"unknown strategy {s!r}.{did_you_mean(s, STRATEGIES)}")
        gpus = sorted(set(gpus))
        if not gpus or any(int(n) < 1 for n in gpus):
            problems.append(f"--gpus must be positive integers, got {gpus}")
        multi = [n for n in gpus if n >= 2]
        for s in strategies:
            if s in STRATEGIES and s != "single" and not multi:
                problems.append(f"strategy {s!r} needs at least 2 ranks, but --gpus {','.join(map(str, gpus))} "
                                f"gives none; add a GPU count >= 2 (e.g. --gpus 1,2) or drop {s!r}")
        problems += self._check_scalars()
        configs: list[SweepConfig] = []
        for shape in self.shapes():
            tag = (f"shape {shape['arch']} L={shape['layers']} d={shape['hidden']} "
                   f"h={shape['heads']} ff={shape['ff']} S={shape['seq']} B={shape['batch']}")
            shape_problems = _check_shape(shape, tag)
            problems += shape_problems
            if shape_problems:
                continue
            for s in strategies:
                if s not in STRATEGIES:
                    continue
                for n in ([1] if s == "single" else multi):
                    cfg = SweepConfig(**shape, strategy=s, world_size=n)
                    p = _check_parallel(cfg, tag)
                    if p and skip_invalid:
                        skipped += p
                    elif p:
                        problems += p
                    else:
                        configs.append(cfg)
        if problems:
            uniq = list(dict.fromkeys(problems))
            hint = ("\n(use --skip-invalid to drop impossible strategy/rank combinations instead)"
                    if any("ranks" in u for u in uniq) else "")
            shown = uniq[:MAX_PROBLEMS_SHOWN]
            more = (f"\n  ... and {len(uniq) - len(shown):,} more problem(s) not listed: most "
                    "repeat one of those above for other shapes; fix these and run again"
                    if len(uniq) > len(shown) else "")
            raise JouleboundError(f"grid {self.name!r} is invalid ({len(uniq):,} problem(s)); nothing was run:\n  - "
                                  + "\n  - ".join(shown) + more + hint)
        if not configs:
            raise JouleboundError(f"grid {self.name!r} has no configurations to run"
                                  + (f" ({len(skipped)} combination(s) skipped as impossible)" if skipped else ""))
        return configs, skipped

    def _check_scalars(self) -> list[str]:
        p = []
        if self.steps < 1:
            p.append(f"steps must be >= 1, got {self.steps}")
        if self.warmup < 0:
            p.append(f"warmup must be >= 0, got {self.warmup}")
        if not 0.0 < self.min_fill <= 1.0:
            p.append(f"min_fill must be in (0, 1], got {self.min_fill}")
        if not 0.0 <= self.dropout < 1.0:
            p.append(f"dropout must be in [0, 1), got {self.dropout}")
        if self.vocab < 2:
            p.append(f"vocab must be >= 2, got {self.vocab}")
        if self.lr <= 0:
            p.append(f"lr must be > 0, got {self.lr}")
        if self.head_dim < 1 or self.ff_mult < 1:
            p.append("head_dim and ff_mult must be >= 1")
        for key in _LIST_KEYS:
            vals = getattr(self, key)
            if key in ("heads", "ff") and not vals:
                continue
            if not vals:
                p.append(f"{key} must list at least one value")
        return p

    def with_overrides(self, **overrides: Any) -> Grid:
        """A copy with the given fields replaced (``None`` values are ignored)."""
        kept = {k: v for k, v in overrides.items() if v is not None}
        return replace(self, **kept)


def _check_shape(shape: dict[str, Any], tag: str) -> list[str]:
    p = []
    if canonical_arch(shape["arch"]) not in ARCHS:
        p.append(f"{tag}: unknown arch {shape['arch']!r}.{did_you_mean(shape['arch'], ARCHS)}")
    if shape["dtype"] not in DTYPES:
        hint = " (fp16 needs a loss scaler that is not wired for sharded strategies; use bf16)" \
            if shape["dtype"] == "fp16" else ""
        p.append(f"{tag}: unknown dtype {shape['dtype']!r}{hint}.{did_you_mean(shape['dtype'], DTYPES)}")
    for k in ("layers", "hidden", "heads", "ff", "seq", "batch"):
        if int(shape[k]) < 1:
            p.append(f"{tag}: {k} must be >= 1, got {shape[k]}")
    if not p and shape["hidden"] % shape["heads"]:
        p.append(f"{tag}: heads ({shape['heads']}) do not divide hidden ({shape['hidden']}); "
                 "pick heads so that hidden % heads == 0 (e.g. head_dim = 64 → heads = hidden / 64)")
    return p


def _check_parallel(cfg: SweepConfig, tag: str) -> list[str]:
    n = cfg.world_size
    p = []
    if cfg.splits_data and cfg.global_batch % n:
        p.append(f"{tag}: strategy {cfg.strategy!r} splits the global batch across {n} ranks, "
                 f"but batch {cfg.global_batch} is not divisible by {n}; use a batch that is a multiple of {n}")
    if cfg.strategy == "tp":
        if cfg.arch != "bert":
            p.append(f"{tag}: strategy 'tp' is implemented for arch 'bert' only (GPT-2 fuses Q/K/V in "
                     "one Conv1D that column-wise sharding would split wrongly); use ddp/fsdp for gpt2")
        if cfg.heads % n:
            p.append(f"{tag}: tensor parallelism divides the {cfg.heads} attention heads across {n} "
                     f"ranks, which needs heads % {n} == 0; use more heads or fewer ranks")
        if cfg.ff % n:
            p.append(f"{tag}: tensor parallelism splits ff ({cfg.ff}) across {n} ranks; "
                     f"needs ff % {n} == 0")
    return p


# ---------------------------------------------------------------------------------------------
# presets and files

def preset(name: str) -> Grid:
    """A named grid: ``tiny`` (seconds on a CPU, for CI) or ``paper`` (the paper's BERT ranges).

    ``paper`` follows Zoubeirou a Mayaki (arXiv 2606.23546): BERT fine-tuning with L 2–24,
    d 64–1024, h = d/64, ff = 4d, S 64–128, B 16–32 (a GPU-cluster sweep; hours).
    """
    if name == "tiny":
        return Grid(name="tiny", arch=["bert"], layers=[1, 2], hidden=[64], heads=[2], seq=[32],
                    batch=[4], dtype=["fp32"], steps=3, warmup=1, vocab=1000, dropout=0.0,
                    ff_mult=4)
    if name == "paper":
        return Grid(name="paper", arch=["bert"], layers=[2, 4, 8, 12, 16, 24],
                    hidden=[64, 128, 256, 512, 768, 1024], head_dim=64, ff_mult=4,
                    seq=[64, 128], batch=[16, 32], dtype=["fp32"], steps=20, warmup=3)
    raise JouleboundError(f"unknown grid preset {name!r}.{did_you_mean(name, PRESETS)} "
                          "Or pass a TOML file path (see docs/sweep.md).")


PRESETS: tuple[str, ...] = ("tiny", "paper")


def load_grid(path: str | Path) -> Grid:
    """Read a grid from a TOML file (keys: the :class:`Grid` fields; lists or single values).

    Raises:
        SchemaError: naming the file and the field for an unknown key or a wrong type.
    """
    path = Path(path)
    if not path.exists():
        raise JouleboundError(f"grid file {path} does not exist (or use a preset: {', '.join(PRESETS)})")
    if not path.is_file():
        raise JouleboundError(f"grid file {path} is not a file; pass a TOML grid file or a preset "
                              f"({', '.join(PRESETS)})")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SchemaError(path, "<toml>", f"not valid TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(path, "<toml>", f"cannot be read: {exc}") from None
    data = data.get("grid", data)
    known = set(_LIST_KEYS) | set(_SCALAR_KEYS)
    kwargs: dict[str, Any] = {"name": path.stem}
    for key, value in data.items():
        if key not in known:
            raise SchemaError(path, key, f"unknown key.{did_you_mean(key, sorted(known))}")
        if key in _LIST_KEYS:
            vals = value if isinstance(value, list) else [value]
            want = str if key in ("arch", "dtype") else int
            for v in vals:
                if not isinstance(v, want) or isinstance(v, bool):
                    raise SchemaError(path, key, f"expected {want.__name__} values, got {v!r}")
            kwargs[key] = vals
        else:
            want_t: type | tuple[type, ...] = {"name": str, "dropout": (int, float),
                                               "min_fill": (int, float), "lr": (int, float)}.get(key, int)
            if not isinstance(value, want_t) or isinstance(value, bool):
                raise SchemaError(path, key, f"expected a single {want_t} value, got {value!r}")
            kwargs[key] = value
    return Grid(**kwargs)


def resolve_grid(spec: str) -> Grid:
    """A preset name or a TOML file path."""
    if spec in PRESETS:
        return preset(spec)
    if spec.endswith(".toml") or Path(spec).exists():
        return load_grid(spec)
    return preset(spec)  # raises with the choices


def parse_int_list(text: str | None, what: str) -> list[int] | None:
    """``"1,2,4"`` → ``[1, 2, 4]`` (``None`` passes through); names ``what`` on error."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise JouleboundError(f"{what}: expected comma-separated integers, got {text!r}") from None


def parse_str_list(text: str | None) -> list[str] | None:
    """``"a,b"`` → ``["a", "b"]`` (``None`` passes through)."""
    if text is None:
        return None
    return [x.strip() for x in text.split(",") if x.strip()]
