"""Training-loop integrations: the plain-loop helper and the Hugging Face TrainerCallback."""

from __future__ import annotations

import pytest

from joulebound.energy.meter import EnergyMeter
from joulebound.energy.simulated import SimulatedBackend
from joulebound.energy.store import Store


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def sim(clock, **kw):
    return EnergyMeter(SimulatedBackend(power=lambda t: 100.0, t0=0.0), gpus="all", interval_s=0,
                       clock=clock, **kw)


def test_metered_windows_wrap_each_loop_body():
    from joulebound.energy.integrations import metered

    clock = Clock()
    m = sim(clock)
    for _ in metered(range(6), m, every=2):
        clock.t += 1.0        # the loop body takes 1 s
    names = [r.name for r in m.results]
    assert names == ["step:0", "step:2", "step:4"]
    assert all(r.energy_j == pytest.approx(100.0) for r in m.results)
    # breaking out of the loop closes the open window
    for i in metered(range(10), m, prefix="b"):
        clock.t += 0.5
        if i == 1:
            break
    assert m.results[-1].name == "b:1" and m.open_windows == []


def test_trainer_callback_through_transformers_callback_handler(tmp_path):
    transformers = pytest.importorskip("transformers")
    from transformers.trainer_callback import CallbackHandler, TrainerControl, TrainerState

    from joulebound.energy.integrations import EnergyCallback

    clock = Clock()
    db = tmp_path / "runs.db"
    m = sim(clock, store=db)
    cb = EnergyCallback(meter=m, per_step=True, every=1, aggregate=True)
    assert isinstance(cb, transformers.TrainerCallback)
    handler = CallbackHandler([cb], None, None, None, None)
    args, state, control = object(), TrainerState(), TrainerControl()
    handler.on_train_begin(args, state, control)
    for _epoch in range(2):
        handler.on_epoch_begin(args, state, control)
        for _ in range(3):
            handler.on_step_begin(args, state, control)
            clock.t += 0.5
            state.global_step += 1
            handler.on_step_end(args, state, control)
        logs: dict = {}
        handler.on_log(args, state, control, logs)
        # the energy over the logging interval (this epoch's 3 steps of 0.5 s at 100 W)
        assert logs["energy/modeled/gpu_j"] == pytest.approx(150.0)
        assert logs["energy/interval_s"] == pytest.approx(1.5)
        assert all(isinstance(v, float) for v in logs.values())
        handler.on_epoch_end(args, state, control)
    handler.on_train_end(args, state, control)
    names = [w.name for w in Store(db).windows(m.run_id)]
    assert names.count("epoch:0") == 1 and names.count("epoch:1") == 1
    assert sum(n.startswith("step:") for n in names) == 6 and names[-1] == "train"
    assert cb.train is not None and cb.train.energy_j == pytest.approx(300.0)
    assert [w.name for w in cb.job_windows][-1] == "train"
