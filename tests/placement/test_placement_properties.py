"""Invariants of the decision engine over random clusters and workloads (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.request import PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import POLICIES, get_policy

MODELS = ("G2", "T4", "V100M32")

nodes_st = st.lists(
    st.builds(
        lambda i, cpu, mem, gpus, model: NodeSpec(f"n{i}", cpu * 1000, mem * 1024, gpus,
                                                  model if gpus else ""),
        st.integers(0, 10**6), st.integers(0, 64), st.integers(0, 256),
        st.sampled_from([0, 1, 2, 4, 8]), st.sampled_from(MODELS),
    ),
    min_size=0, max_size=8, unique_by=lambda n: n.name,
)


@st.composite
def pod_st(draw: st.DrawFn) -> PodRequest:
    kind = draw(st.sampled_from(["cpu", "share", "whole"]))
    cpu, mem = draw(st.integers(0, 24)) * 1000, draw(st.integers(0, 64)) * 1024
    models = tuple(draw(st.lists(st.sampled_from(MODELS), max_size=2, unique=True)))
    if kind == "cpu":
        return PodRequest("p", cpu, mem)
    if kind == "share":
        return PodRequest("p", cpu, mem, 1, draw(st.integers(1, 999)), models)
    return PodRequest("p", cpu, mem, draw(st.sampled_from([1, 2, 4, 8])), 1000, models)


def run(nodes: list[NodeSpec], pods: list[PodRequest], policy: str, seed: int):
    state = ClusterState(nodes)
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests(pods), state),
                        np.random.default_rng(seed))
    placer = Placer(state, get_policy(policy)(ctx), np.random.default_rng(seed).permutation(
        len(state)))
    return state, placer


@settings(max_examples=60, deadline=None)
@given(nodes_st, st.lists(pod_st(), max_size=40), st.sampled_from(list(POLICIES)),
       st.integers(0, 2**16))
def test_no_overcommit_exact_accounting_and_atomic_failures(nodes, pods, policy, seed) -> None:
    state, placer = run(nodes, pods, policy, seed)
    placed_milli = 0
    for pod in pods:
        before = state.snapshot()
        d = placer.place(pod)
        if d.allocation is None:
            after = state.snapshot()
            assert all(np.array_equal(before[k], after[k]) for k in before), "partial placement"
            assert d.reason in {"gpu-model", "gpu", "cpu", "memory"}
            continue
        a = d.allocation
        assert len(set(a.devices)) == len(a.devices) == pod.gpu_count
        assert all(dev < state.gpu_count[a.node] for dev in a.devices)
        if pod.models and pod.is_gpu:
            assert state.nodes[a.node].model in pod.models
        placed_milli += pod.total_gpu_milli
        assert (state.gpu_free >= 0).all() and (state.gpu_free <= 1000).all()
        assert (state.cpu_free >= 0).all() and (state.mem_free >= 0).all()
        assert state.used_gpu_milli == placed_milli


@settings(max_examples=40, deadline=None)
@given(nodes_st, st.lists(pod_st(), max_size=30), st.sampled_from(list(POLICIES)),
       st.integers(0, 2**16))
def test_cached_scores_equal_fresh_scores_and_stay_in_0_100(nodes, pods, policy, seed) -> None:
    state, placer = run(nodes, pods, policy, seed)
    for pod in pods:
        feasible = np.flatnonzero(state.feasible(pod))
        if len(feasible) and placer.policy.cacheable:
            cached = placer.scores(pod, feasible)
            fresh = placer.policy.score(state, pod, feasible)
            assert cached.tolist() == fresh.tolist()
            assert ((fresh >= 0) & (fresh <= 100)).all()
        placer.place(pod)


@settings(max_examples=25, deadline=None)
@given(nodes_st, st.lists(pod_st(), max_size=30), st.sampled_from(list(POLICIES)),
       st.integers(0, 2**16))
def test_decisions_are_deterministic_for_a_seed(nodes, pods, policy, seed) -> None:
    outcomes = []
    for _ in range(2):
        _, placer = run(nodes, pods, policy, seed)
        outcomes.append([placer.place(p) for p in pods])
    assert outcomes[0] == outcomes[1]
