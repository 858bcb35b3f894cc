"""Next-kernel predictor: steady state, perturbations, fallbacks, labels."""

from __future__ import annotations

import numpy as np
import pytest

from joulebound.runtime.nextop import UNKNOWN, KeyInterner, NextKernelPredictor, accuracy
from joulebound.testing.streams import DEFAULT_PERTURBATION, Perturbation, perturbed_stream


def analytic_keys(preset: str, **kw) -> list[int]:
    from joulebound.workload.analytic import build_trace

    trace = build_trace(preset, **kw)
    interner = KeyInterner()
    return [interner.intern(k.signature) for k in trace]


@pytest.mark.parametrize("preset", ["gpt2-small", "bert-base", "gpt3-xl"])
def test_steady_state_analytic_traces_at_least_99_9_percent(preset):
    one = analytic_keys(preset)
    stream = one * 12
    acc = accuracy(stream, skip=2 * len(one))
    assert acc >= 0.999
    pred = NextKernelPredictor()
    pred.observe_many(stream)
    assert pred.period == len(one)            # the pointer trails by exactly one iteration


def test_perturbed_stream_at_least_95_percent():
    one = analytic_keys("gpt2-small")
    keys, owner = perturbed_stream(one, 60, DEFAULT_PERTURBATION, seed=3)
    assert (owner == -1).sum() > 0             # eval steps really are in there
    assert len(set(keys.tolist())) > len(set(one))
    assert accuracy(keys) >= 0.95


def test_perturbation_generator_is_documented_and_deterministic():
    one = list(range(50))
    a = perturbed_stream(one, 20, Perturbation(insert_rate=0.05), seed=1)[0]
    b = perturbed_stream(one, 20, Perturbation(insert_rate=0.05), seed=1)[0]
    assert np.array_equal(a, b) and len(a) > 20 * 50
    # last batch of each epoch: a different, but repeating, key set
    k, own = perturbed_stream(one, 6, Perturbation(epoch_len=3))
    last = k[own == 2]
    assert set(last.tolist()).isdisjoint(one) and np.array_equal(last, k[own == 5])
    # evaluation step: forward prefix, on other keys, with dropout ops removed
    k, own = perturbed_stream(one, 3, Perturbation(eval_every=2, eval_fraction=0.4,
                                                   eval_drop_every=5))
    ev = k[own == -1]
    assert len(ev) == 20 - 4 and set(ev.tolist()).isdisjoint(one)


def test_gradient_accumulation_period_is_the_optimizer_step():
    fwd_bwd = list(range(0, 40))
    opt = list(range(100, 110))
    step = fwd_bwd * 4 + opt                    # 4 micro-batches, then the optimizer
    pred = NextKernelPredictor()
    acc = accuracy(step * 10, skip=2 * len(step), predictor=pred)
    assert acc >= 0.999
    assert pred.period == len(step)


def test_evaluation_step_and_last_batch_recover():
    one = analytic_keys("gpt2-small")
    spec = Perturbation(eval_every=5, epoch_len=8)
    keys, owner = perturbed_stream(one, 40, spec)
    pred = NextKernelPredictor()
    hits = np.array([pred.observe(int(k)) for k in keys])
    # training iterations that follow a clean one are predicted (almost) perfectly
    for it in (6, 11, 12, 17):
        sel = owner == it
        assert hits[sel].mean() >= 0.97
    assert hits.mean() >= 0.95


def test_markov_fallback_and_unknown():
    pred = NextKernelPredictor()
    assert pred.prediction.source == "none" and pred.prediction.key == UNKNOWN
    for k in (1, 2, 1, 2, 1):
        pred.observe(k)
    # order-1 context 1 -> 2 seen twice; an order-3 suffix match exists too
    assert pred.prediction.key == 2
    pred2 = NextKernelPredictor(resync_orders=(8,))
    for k in (5, 6, 7, 5):
        pred2.observe(k)
    assert pred2.prediction.source == "markov" and pred2.prediction.key == 6
    assert 0 < pred2.prediction.confidence <= 1


def test_prime_labels_and_predict_ahead():
    tmpl = [10, 11, 12, 13, 11, 14]
    pred = NextKernelPredictor(warm=4)
    pred.prime(tmpl)
    assert pred.prediction.key == 10 and pred.prediction.label == 0
    assert pred.prediction.confidence == 0
    for _ in range(3):
        for k in tmpl:
            pred.observe(k)
    assert pred.prediction.label == 0 and pred.confidence == 1.0
    keys, labels, conf = pred.predict_ahead(8)
    assert keys == tmpl + tmpl[:2] and labels == [0, 1, 2, 3, 4, 5, 0, 1] and conf == 1.0
    pred.observe(99)                            # unknown op: label -1, lock lost
    assert pred.last_label == UNKNOWN


def test_single_stray_op_costs_at_most_two_misses():
    one = list(range(200))
    stream = one * 5
    stream.insert(3 * 200 + 50, 999)
    pred = NextKernelPredictor()
    pred.observe_many(stream[:2 * 200])
    pred.reset_stats()
    pred.observe_many(stream[2 * 200:])
    assert pred.stats.observed - pred.stats.correct <= 3   # the stray + one next iteration


def test_compaction_keeps_predicting():
    one = list(range(300))
    pred = NextKernelPredictor(max_history=1000)
    acc = accuracy(one * 20, skip=600, predictor=pred)
    assert len(pred) <= 1000 and acc >= 0.99


def test_order_k_markov_uses_longer_context():
    # after (.., 2, 3) the next key depends on the key before 2: only order 3 can tell
    stream = [1, 2, 3, 9, 4, 2, 3, 8] * 30
    accs = {}
    for k in (1, 3):
        pred = NextKernelPredictor(resync_orders=(500,), markov_order=k)   # no period lock
        accs[k] = accuracy(stream, skip=80, predictor=pred)
        assert pred.stats.by_source["markov"][0] == len(stream) - 80
    assert accs[3] == 1.0 and accs[1] <= 0.9    # order 1 misses one of the two forks


def test_real_cpu_training_loop_with_gradient_accumulation():
    torch = pytest.importorskip("torch")
    from torch.nn import functional as F

    from joulebound.runtime.hooks import OpStream
    from joulebound.testing.demo_gpt import TinyGPTConfig, build

    cfg = TinyGPTConfig(layers=2, hidden=32, seq=16, batch=2)
    model, opt = build(cfg)
    starts = []
    with OpStream(record=True) as ops:
        for _ in range(10):
            starts.append(len(ops.keys))
            for _ in range(2):                        # two micro-batches per optimizer step
                idx = torch.randint(cfg.vocab, (cfg.batch, cfg.seq + 1))
                logits = model(idx[:, :-1])
                F.cross_entropy(logits.reshape(-1, cfg.vocab), idx[:, 1:].reshape(-1)).backward()
            opt.step()
            opt.zero_grad()
    pred = NextKernelPredictor()
    assert accuracy(ops.keys, skip=starts[3], predictor=pred) >= 0.999
    assert pred.period == starts[-1] - starts[-2]   # the period is the optimizer step
