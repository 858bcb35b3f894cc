"""The optimized stack in the job description and its memory: distributed optimizer (ZeRO-1),
sequence parallelism, selective / full recompute, FlashAttention, FP8 (Korthikanti et al. 2022,
hand computations), and ``--tp/--pp`` without a ``--strategy``."""

from __future__ import annotations

import pytest

from joulebound.cli import main
from joulebound.core.errors import JouleboundError
from joulebound.jobs.job import Job, memory, resolve

GIB = 2**30
# GPT-3 175B (Brown et al. 2020): 96 layers, d 12288, 96 heads, S 2048, GPT-2 vocabulary
GPT3 = dict(arch="gpt", layers=96, hidden=12288, heads=96, seq=2048, vocab=50257, dtype="bf16")


def test_tp_and_pp_without_a_strategy_are_data_parallel_across_the_groups():
    """Before, --tp/--pp on several GPUs needed a dummy --strategy ddp (strategy 'single'
    refused them)."""
    r = resolve(Job(**GPT3, batch=1, gpus=512, tp=4, pp=8, global_batch=1536))
    assert (r.dp, r.tp, r.pp, r.label()) == (16, 4, 8, "dp16·tp4·pp8") and not r.sharded
    assert resolve(Job(**GPT3, batch=1, gpus=8, tp=8)).label() == "tp8"
    assert resolve(Job(**GPT3, batch=1, gpus=8, pp=8)).label() == "pp8"
    with pytest.raises(JouleboundError, match="multiple of tp·pp"):
        resolve(Job(**GPT3, batch=1, gpus=12, tp=8))


def test_cli_predict_takes_tp_and_pp_alone(capsys):
    assert main(["predict", "--model", "gpt", "--layers", "8", "--hidden", "1024", "--heads", "16",
                 "--seq", "512", "--batch", "2", "--gpus", "16", "--tp", "2", "--pp", "2",
                 "--device", "a100-sxm4-80gb", "--json"]) == 0, capsys.readouterr().err
    import json

    assert json.loads(capsys.readouterr().out)["strategy"] == "dp4·tp2·pp2"
