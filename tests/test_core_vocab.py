"""One vocabulary (core.vocab): the lists of allowed granularities, objectives, strategies,
dtypes and provenance labels that modules check against are the vocabulary's words (issue 29:
they were strings repeated in several modules)."""

from __future__ import annotations

import json

from joulebound.core import provenance, vocab
from joulebound.core.vocab import Dtype, Granularity, Objective, Provenance, Strategy


def test_members_are_their_words():
    assert Granularity.KERNEL == "kernel" and f"{Strategy.FSDP}" == "fsdp"
    assert json.dumps({"objective": Objective.EDP}) == '{"objective": "edp"}'
    assert Dtype("bf16") is Dtype.BF16 and Provenance("measured") is Provenance.MEASURED


def test_every_module_list_is_the_vocabulary():
    from joulebound.hw import spec
    from joulebound.jobs import job, strategy
    from joulebound.planning import workflow
    from joulebound.planning.solve import objectives, problem
    from joulebound.workload import grid, trace

    assert workflow.GRANULARITIES == problem.GRANULARITIES == vocab.PLAN_GRANULARITIES
    assert set(vocab.PLAN_GRANULARITIES) | {"phase"} == {g.value for g in Granularity}
    assert workflow.OBJECTIVES == vocab.PLAN_OBJECTIVES
    assert objectives.OBJECTIVES == tuple(o.value for o in Objective)
    assert strategy.STRATEGIES == tuple(s.value for s in Strategy)
    assert set(grid.STRATEGIES) < set(strategy.STRATEGIES)
    assert spec.DTYPES == trace.DTYPES == tuple(d.value for d in Dtype)
    assert set(job.DTYPES) <= set(spec.DTYPES) and set(grid.DTYPES) <= set(job.DTYPES)
    assert provenance.ALL == tuple(p.value for p in Provenance)
    assert all(type(x) is str for x in (*provenance.ALL, *strategy.STRATEGIES, *job.DTYPES))
