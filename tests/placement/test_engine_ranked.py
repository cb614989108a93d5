"""The engine's ranked path (a ranking key cached per node with its score, whole-length masks
instead of gathers) picks exactly the node its general path picks: the same scores, the
same fixed tie-break order, the same reasons when nothing fits, with nodes held back."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.request import PodRequest
from gpugov.placement.base import Policy, PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import get_policy

MODELS = ("G2", "T4")

pod_st = st.builds(
    lambda i, kind, cpu, milli, count, models: (
        PodRequest(f"p{i}", cpu, 1024) if kind == "cpu" else
        PodRequest(f"p{i}", cpu, 1024, 1, milli, models) if kind == "share" else
        PodRequest(f"p{i}", cpu, 1024, count, 1000, models)),
    st.integers(0, 10**6), st.sampled_from(["cpu", "share", "share", "whole"]),
    st.sampled_from([0, 1000, 8000, 32000]), st.sampled_from([100, 250, 500, 999]),
    st.sampled_from([1, 2, 4]), st.sampled_from([(), ("T4",), ("G2",)]))


def _placer(nodes: list[NodeSpec], pods: list[PodRequest], policy: str, seed: int,
            ranked: bool) -> Placer:
    state = ClusterState(nodes)
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests(pods), state),
                        np.random.default_rng(seed))
    placer = Placer(state, get_policy(policy)(ctx),
                    np.random.default_rng(seed).permutation(len(state)))
    placer._plain_rank = placer._plain_rank and ranked
    return placer


@settings(max_examples=40, deadline=None)
@given(st.lists(pod_st, min_size=1, max_size=40), st.integers(1, 30), st.integers(0, 2**16),
       st.sampled_from(["fgd", "dotprod", "gpupacking", "gpuclustering", "gpugov"]))
def test_ranked_path_places_as_the_general_path(pods, n, seed, policy) -> None:
    rng = np.random.default_rng(seed)
    nodes = [NodeSpec(f"n{i}", int(rng.choice([16000, 64000])), 10**6,
                      int(rng.choice([1, 2, 4, 8])), MODELS[i % 2]) for i in range(n)]
    fast = _placer(nodes, pods, policy, seed, ranked=True)
    slow = _placer(nodes, pods, policy, seed, ranked=False)
    assert fast._plain_rank  # these policies rank by their cached score as it is
    for i, pod in enumerate(pods * 2):
        held = rng.random(n) < 0.2 if i % 3 == 0 else None  # nodes reserved for others
        a, b = fast.decide(pod, held), slow.decide(pod, held)
        assert a == b, (i, pod)
        if a.allocation is not None:
            fast.state.allocate(pod, a.allocation)
            slow.state.allocate(pod, b.allocation)
            if i % 5 == 4:  # departures: nodes change back
                fast.state.release(pod, a.allocation)
                slow.state.release(pod, b.allocation)


class _NegativeScores(Policy):
    """A cacheable policy whose scores are below zero (most free CPU is worst)."""

    name = "negative"
    label = "negative"

    def score(self, state: ClusterState, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        return -(state.cpu_free[nodes] // 1000) - 1


@settings(max_examples=30, deadline=None)
@given(st.lists(pod_st, min_size=1, max_size=30), st.integers(2, 20), st.integers(0, 2**16))
def test_ranked_path_never_picks_a_node_outside_the_mask(pods, n, seed) -> None:
    rng = np.random.default_rng(seed)
    nodes = [NodeSpec(f"n{i}", int(rng.choice([16000, 64000])), 10**6, 4, MODELS[i % 2])
             for i in range(n)]
    placers = []
    for ranked in (True, False):
        state = ClusterState(nodes)
        ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests(pods), state),
                            np.random.default_rng(seed))
        placer = Placer(state, _NegativeScores(ctx), rng.permutation(n))
        placer._plain_rank = ranked
        placers.append(placer)
    fast, slow = placers
    slow.rank, slow._tiebreak = fast.rank, fast._tiebreak
    for i, pod in enumerate(pods):
        held = rng.random(n) < 0.5
        a, b = fast.decide(pod, held), slow.decide(pod, held)
        assert a == b, (i, pod)
        if a.allocation is not None:
            assert not held[a.allocation.node]
            fast.state.allocate(pod, a.allocation)
            slow.state.allocate(pod, b.allocation)
