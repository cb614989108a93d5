"""The fast paths of FGD's measure and score equal the definitions they replace, exactly.

`FragmentationModel.node_frag` is the definition of FGD's fragmentation; `node_parts`,
`frag_from_parts` and `frag_after` compute it from cached per-node parts. `FgdPolicy` scores
milli-only requests from those parts, tries one device per distinct free capacity and keeps
the device it found; `_scores_by_state` (the full recomputation) is the reference.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.request import PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fgd import FgdPolicy
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods

MODELS = ("G2", "T4", "V100M32")
#: free milli values that make ties between devices likely, plus anything
free_st = st.one_of(st.sampled_from([0, 100, 250, 500, 750, 1000]), st.integers(0, 1000))


@st.composite
def pod_st(draw: st.DrawFn, name: str = "p") -> PodRequest:
    kind = draw(st.sampled_from(["cpu", "share", "share", "whole"]))
    cpu = draw(st.sampled_from([0, 1000, 4000, 8000, 32000, 96000]))
    models = tuple(draw(st.lists(st.sampled_from(MODELS), max_size=2, unique=True)))
    if kind == "cpu":
        return PodRequest(name, cpu, 1024)
    if kind == "share":
        milli = draw(st.one_of(st.sampled_from([100, 250, 500, 750]), st.integers(1, 999)))
        return PodRequest(name, cpu, 1024, 1, milli, models)
    return PodRequest(name, cpu, 1024, draw(st.sampled_from([1, 2, 4, 8])), 1000, models)


nodes_st = st.lists(
    st.builds(lambda i, cpu, gpus, model: NodeSpec(f"n{i}", cpu, 10**6, gpus, model),
              st.integers(0, 10**6), st.sampled_from([0, 32000, 64000, 96000, 128000]),
              st.sampled_from([1, 2, 4, 8]), st.sampled_from(MODELS)),
    min_size=1, max_size=6, unique_by=lambda n: n.name,
)


def _model(nodes: list[NodeSpec], typical: list[PodRequest]
           ) -> tuple[ClusterState, FragmentationModel]:
    state = ClusterState(nodes)
    return state, FragmentationModel(TypicalPods.from_requests(typical), state)


@settings(max_examples=80, deadline=None)
@given(nodes_st, st.lists(pod_st(), min_size=1, max_size=25), st.data())
def test_parts_and_frag_after_equal_the_definition(nodes, typical, data) -> None:
    state, model = _model(nodes, typical)
    width = state.gpu_free.shape[1]
    c = data.draw(st.integers(1, 12))
    free = np.array(data.draw(st.lists(st.lists(free_st, min_size=width, max_size=width),
                                       min_size=c, max_size=c)), dtype=np.int64)
    cpu = np.array(data.draw(st.lists(st.integers(0, 128000), min_size=c, max_size=c)),
                   dtype=np.int64)
    models = np.array(data.draw(st.lists(st.integers(-1, len(state.model_names) - 1),
                                         min_size=c, max_size=c)), dtype=np.int64)
    parts = model.node_parts(free)
    assert np.array_equal(model.frag_from_parts(*parts, cpu, models),
                          model.node_frag(free, cpu, models))
    for by_table, by_comparison in zip(model._parts_by_table(free), parts, strict=True):
        assert np.array_equal(by_table, by_comparison)
    # one device of each row loses `milli` (a sharing pod), as FGD's candidates do
    cols = np.array(data.draw(st.lists(st.integers(0, width - 1), min_size=c, max_size=c)))
    milli = data.draw(st.integers(1, 1000))
    rows = np.flatnonzero(free[np.arange(c), cols] >= milli)
    after = free[rows].copy()
    after[np.arange(len(rows)), cols[rows]] -= milli
    got = model.frag_after(parts[0][rows], parts[1][rows], parts[2][rows], 1,
                           free[rows, cols[rows]], milli, cpu[rows], models[rows])
    assert np.array_equal(got, model.node_frag(after, cpu[rows], models[rows]))
    # `taken` fully free devices become empty (a whole-GPU pod); 0 taken = a CPU-only pod
    taken = np.minimum((free == 1000).sum(axis=1), data.draw(st.integers(0, 8)))
    after = free.copy()
    after[(free == 1000) & (np.cumsum(free == 1000, axis=1) <= taken[:, None])] = 0
    got = model.frag_after(*parts, taken, 1000, 1000, cpu, models)
    assert np.array_equal(got, model.node_frag(after, cpu, models))


class _FullRecomputeFgd(FgdPolicy):
    """FGD as it was written first: every candidate state built and measured in full, and
    the device found again when it is chosen."""

    def _scores(self, state, req, nodes):  # type: ignore[no-untyped-def]
        return self._scores_by_state(state, req, nodes)

    def choose_devices(self, state, req, node):  # type: ignore[no-untyped-def]
        if req.is_sharing:
            return (int(self._scores_by_state(state, req, np.array([node]))[1][0]),)
        return super().choose_devices(state, req, node)

    @staticmethod
    def _best_per_node(n, rows, cols, scores):  # type: ignore[no-untyped-def]
        """Sort by node, score (descending), device; keep each node's first."""
        order = np.lexsort((cols, -scores, rows))
        rows_s, scores_s, cols_s = rows[order], scores[order], cols[order]
        first = np.ones(len(rows_s), dtype=bool)
        first[1:] = rows_s[1:] != rows_s[:-1]
        best = np.zeros(n, dtype=np.int64)
        dev = np.full(n, -1, dtype=np.int64)
        best[rows_s[first]] = scores_s[first]
        dev[rows_s[first]] = cols_s[first]
        return best, dev


def _placer(nodes: list[NodeSpec], typical: list[PodRequest], policy: type[FgdPolicy],
            seed: int) -> Placer:
    state = ClusterState(nodes)
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests(typical), state),
                        np.random.default_rng(seed))
    return Placer(state, policy(ctx), np.random.default_rng(seed).permutation(len(state)))


@settings(max_examples=60, deadline=None)
@given(nodes_st, st.lists(pod_st(), min_size=1, max_size=40), st.integers(0, 2**16))
def test_fast_fgd_decides_exactly_as_full_recomputation(nodes, pods, seed) -> None:
    fast = _placer(nodes, pods, FgdPolicy, seed)
    slow = _placer(nodes, pods, _FullRecomputeFgd, seed)
    for i, pod in enumerate(pods):
        feasible = np.flatnonzero(fast.state.feasible(pod))
        # every feasible node's score, not only the winner's; and each node's on its own
        assert np.array_equal(fast.policy.score(fast.state, pod, feasible),
                              slow.policy.score(slow.state, pod, feasible)), i
        for node in feasible[:3]:
            one = np.array([node])
            assert np.array_equal(fast.policy._scores(fast.state, pod, one),
                                  slow.policy._scores(slow.state, pod, one)), (i, node)
        a, b = fast.place(pod), slow.place(pod)
        assert a == b, (i, pod)
        if i % 7 == 3 and a.allocation is not None:  # departures make nodes change back
            fast.state.release(pod, a.allocation)
            slow.state.release(pod, b.allocation)
    assert np.array_equal(fast.state.gpu_free, slow.state.gpu_free)


@settings(max_examples=30, deadline=None)
@given(nodes_st, st.lists(pod_st(), min_size=2, max_size=20), st.integers(0, 2**16))
def test_device_choice_survives_snapshot_and_restore(nodes, pods, seed) -> None:
    """A restored state must not be served a device chosen for the state it replaced."""
    fast = _placer(nodes, pods, FgdPolicy, seed)
    slow = _placer(nodes, pods, _FullRecomputeFgd, seed)
    half = len(pods) // 2
    for pod in pods[:half]:
        assert fast.place(pod) == slow.place(pod)
    snap_fast, snap_slow = fast.state.snapshot(), slow.state.snapshot()
    for pod in pods[half:]:  # tried, then thrown away (simulate-then-commit)
        assert fast.place(pod) == slow.place(pod)
    fast.state.restore(snap_fast)
    slow.state.restore(snap_slow)
    for pod in reversed(pods):
        assert fast.place(pod) == slow.place(pod)


@settings(max_examples=25, deadline=None)
@given(st.lists(pod_st(), min_size=1, max_size=25), st.integers(0, 2**32 - 1),
       st.integers(17, 600), st.integers(1, 1000))
def test_many_candidate_states_equal_the_definition(typical, seed, c, milli) -> None:
    """Many rows at once (a new request shape scores every node) take the per-size loss
    table and, above 256 rows, one einsum: the same integers as the definition."""
    rng = np.random.default_rng(seed)
    nodes = [NodeSpec(f"n{i}", 96000, 10**6, 8, MODELS[i % 3]) for i in range(3)]
    state, model = _model(nodes, typical)
    free = rng.choice([0, 100, 250, 500, 750, 1000, *rng.integers(0, 1001, 4)], size=(c, 8))
    cpu = rng.integers(0, 128001, c)
    models = rng.integers(-1, len(state.model_names), c)
    parts = model.node_parts(free)
    assert np.array_equal(model.frag_from_parts(*parts, cpu, models),
                          model.node_frag(free, cpu, models))
    cols = rng.integers(0, 8, c)
    rows = np.flatnonzero(free[np.arange(c), cols] >= milli)
    after = free[rows].copy()
    after[np.arange(len(rows)), cols[rows]] -= milli
    got = model.frag_after(parts[0][rows], parts[1][rows], parts[2][rows], 1,
                           free[rows, cols[rows]], milli, cpu[rows], models[rows])
    assert np.array_equal(got, model.node_frag(after, cpu[rows], models[rows]))


@settings(max_examples=10, deadline=None)
@given(st.lists(pod_st(), min_size=1, max_size=60), st.integers(0, 2**16))
def test_fast_fgd_on_a_large_cluster_decides_as_full_recomputation(pods, seed) -> None:
    """Hundreds of nodes: a new shape's first score goes through the vectorised pass over
    all of them, later ones one changed node at a time."""
    rng = np.random.default_rng(seed)
    nodes = [NodeSpec(f"n{i}", int(rng.choice([32000, 64000, 96000])), 10**6,
                      int(rng.choice([1, 2, 4, 8])), MODELS[int(rng.integers(3))])
             for i in range(300)]
    fast = _placer(nodes, pods, FgdPolicy, seed)
    slow = _placer(nodes, pods, _FullRecomputeFgd, seed)
    for i, pod in enumerate(pods * 3):
        feasible = np.flatnonzero(fast.state.feasible(pod))
        assert np.array_equal(fast.policy.score(fast.state, pod, feasible),
                              slow.policy.score(slow.state, pod, feasible)), i
        assert fast.place(pod) == slow.place(pod), i


@settings(max_examples=40, deadline=None)
@given(st.lists(pod_st(), min_size=1, max_size=25), st.lists(st.integers(0, 130000),
       min_size=1, max_size=20), st.booleans())
def test_need_rule_is_the_definition_of_fits(typical, cpus, tabled) -> None:
    """`fit count >= _need(model, cpu)` is `frag_from_parts`'s fits (model allowed, CPU
    enough, enough big GPUs), from the table or, for huge typical sets, row by row."""
    import gpugov.placement.fragmentation as fragmentation
    nodes = [NodeSpec(f"n{i}", 96000, 10**6, 8, MODELS[i % 3]) for i in range(3)]
    state, model = _model(nodes, typical)
    old = fragmentation.NEED_TABLE_MAX
    fragmentation.NEED_TABLE_MAX = old if tabled else 0
    try:
        for cpu in cpus:
            for idx in range(-1, len(state.model_names)):
                for count in range(0, 9):
                    fit = np.full(len(model._count), count)
                    want = ((fit >= model._count) & (cpu >= model._cpu) & model._access[idx])
                    assert np.array_equal(fit >= model._need(idx, cpu), want), (cpu, idx)
    finally:
        fragmentation.NEED_TABLE_MAX = old
