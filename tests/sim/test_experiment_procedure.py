"""The study's experiment procedure: tuning, metrics after every arrival, bucketing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpugov.model.cluster import NodeSpec
from gpugov.model.request import PodRequest
from gpugov.sim.curves import columns, discretise
from gpugov.sim.experiment import run_experiment, tuned_sequence

NODES = [NodeSpec(f"n{i}", 32000, 131072, 4, "T4") for i in range(5)]  # 20 GPUs


def pods(n: int) -> list[PodRequest]:
    out = []
    for i in range(n):
        if i % 5 == 0:
            out.append(PodRequest(f"p{i:03d}", 2000, 1024))
        elif i % 5 in (1, 2):
            out.append(PodRequest(f"p{i:03d}", 2000, 1024, 1, 250 + 100 * (i % 3)))
        else:
            out.append(PodRequest(f"p{i:03d}", 4000, 2048, 1 + (i % 2), 1000))
    return out


def test_top_up_reaches_tune_times_capacity_with_clones_after_the_trace() -> None:
    trace = pods(10)
    seq = tuned_sequence(trace, 20_000, 1.3, np.random.default_rng(1))
    total = sum(p.total_gpu_milli for p in seq)
    assert 26_000 - 1000 < total <= 26_000 + 7000
    assert sorted(p.name for p in seq[:10]) == sorted(p.name for p in trace)
    assert all("-tuned-" in p.name for p in seq[10:])


def test_thinning_removes_pods_until_under_target() -> None:
    trace = pods(100)
    seq = tuned_sequence(trace, 20_000, 0.5, np.random.default_rng(1))
    assert sum(p.total_gpu_milli for p in seq) <= 10_000
    assert {p.name for p in seq} <= {p.name for p in trace}


def test_metrics_after_every_arrival_and_failures_by_reason() -> None:
    r = run_experiment(NODES, pods(30), "bestfit", seed=3)
    assert len(r.arrived_milli) == r.pods
    assert (np.diff(r.arrived_milli) >= 0).all() and (np.diff(r.used_milli) >= 0).all()
    assert r.arrived_milli[-1] >= 26_000 - 1000
    assert r.used_milli[-1] <= 20_000
    assert r.failed == sum(r.failures.values()) > 0  # 130 % cannot all fit
    assert len(r.outcomes) == r.pods and sum(1 for o in r.outcomes if o) == r.failed
    # a failed arrival adds to "arrived" but not to "allocated"
    i = r.outcomes.index(next(o for o in r.outcomes if o))
    assert r.used_milli[i] == (r.used_milli[i - 1] if i else 0)
    assert (r.frag_milli >= 0).all() and (r.frag_milli <= r.idle_milli + 1e-9).all()


def test_discrete_columns_bucket_by_arrived_percent() -> None:
    r = run_experiment(NODES, pods(30), "fgd", seed=3)
    d = discretise(r, 1.3)
    assert len(d["alloc"]) == len(columns(1.3)) == 131
    pct = np.round(r.arrived_milli / 200)
    at = np.flatnonzero(pct == 50)
    if len(at):
        assert d["alloc"][50] == pytest.approx(np.round(np.round(r.used_milli[at] / 200, 2)
                                                        .mean(), 2))
    assert all(a <= k + 1.5 for k, a in enumerate(d["alloc"]) if not math.isnan(a))


def test_same_seed_same_run_and_empty_inputs_work() -> None:
    a = run_experiment(NODES, pods(30), "random", seed=9)
    b = run_experiment(NODES, pods(30), "random", seed=9)
    assert np.array_equal(a.used_milli, b.used_milli)
    empty = run_experiment(NODES, [], "fgd", seed=1)
    assert empty.pods == 0 and math.isnan(discretise(empty, 1.3)["alloc"][0])
    no_gpus = run_experiment([NodeSpec("c", 4000, 4096, 0)], pods(10), "fgd", seed=1)
    assert no_gpus.total_gpus == 0 and no_gpus.placed > 0
    assert np.isnan(discretise(no_gpus, 1.3)["alloc"]).all()
