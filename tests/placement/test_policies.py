"""Placement semantics users rely on, one policy rule per test (FGD study semantics)."""

from __future__ import annotations

import numpy as np
import pytest

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import POLICIES, get_policy


def make(nodes: list[NodeSpec], policy: str, typical: list[PodRequest] | None = None,
         priority: list[int] | None = None, seed: int = 0) -> Placer:
    state = ClusterState(nodes)
    typ = TypicalPods.from_requests(typical or [PodRequest("t", 1000, 1, 1, 500)])
    ctx = PolicyContext(FragmentationModel(typ, state), np.random.default_rng(seed))
    prio = None if priority is None else np.array(priority)
    return Placer(state, get_policy(policy)(ctx), prio)


def node(name: str, gpus: int = 8, cpu: int = 96000, model: str = "G2") -> NodeSpec:
    return NodeSpec(name, cpu, 393216, gpus, model)


@pytest.mark.parametrize("policy", ["dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd"])
def test_ties_go_to_the_fixed_priority_order(policy: str) -> None:
    nodes = [node("a"), node("b"), node("c")]
    for prio, expected in (([0, 1, 2], 0), ([2, 0, 1], 2), ([1, 2, 0], 1)):
        placer = make(nodes, policy, priority=prio)
        assert placer.decide(PodRequest("p", 1000, 1, 1, 1000)).allocation.node == expected


@pytest.mark.parametrize("policy", list(POLICIES))
def test_whole_gpu_pods_take_the_lowest_index_free_devices(policy: str) -> None:
    placer = make([node("a")], policy)
    placer.state.allocate(PodRequest("x", 1, 1, 1, 1000), Allocation(0, (1,), 1000))
    placer.state.allocate(PodRequest("y", 1, 1, 1, 300), Allocation(0, (2,), 300))
    d = placer.place(PodRequest("p", 1000, 1, 3, 1000))
    assert d.allocation.devices == (0, 3, 4)


@pytest.mark.parametrize("policy", ["dotprod", "gpuclustering", "gpupacking", "bestfit"])
def test_sharing_pods_go_to_the_tightest_fitting_device(policy: str) -> None:
    placer = make([node("a", gpus=4)], policy)
    for dev, milli in ((0, 300), (1, 600), (2, 500)):
        placer.state.allocate(PodRequest(f"x{dev}", 1, 1, 1, milli), Allocation(0, (dev,), milli))
    # free: [700, 400, 500, 1000] -> 400 is tightest for 350; 700 for 600; 1000 for 800
    assert placer.decide(PodRequest("p", 1, 1, 1, 350)).allocation.devices == (1,)
    assert placer.decide(PodRequest("p", 1, 1, 1, 600)).allocation.devices == (0,)
    assert placer.decide(PodRequest("p", 1, 1, 1, 800)).allocation.devices == (3,)


def test_fgd_picks_the_device_that_keeps_typical_pods_placeable() -> None:
    typical = [PodRequest("t", 1000, 1, 1, 600)]
    fgd = make([node("a", gpus=2)], "fgd", typical)
    best = make([node("a", gpus=2)], "bestfit", typical)
    for placer in (fgd, best):
        placer.state.allocate(PodRequest("x", 1, 1, 1, 300), Allocation(0, (0,), 300))
    req = PodRequest("p", 1000, 1, 1, 300)
    # free [700, 1000]: best fit takes 700 -> leaves 400, useless for 600-milli pods;
    # FGD takes the free GPU -> [700, 700], both still fit a typical pod.
    assert best.decide(req).allocation.devices == (0,)
    assert fgd.decide(req).allocation.devices == (1,)


def test_fgd_prefers_the_node_where_fragmentation_grows_least() -> None:
    typical = [PodRequest("t", 1000, 1, 1, 500)]
    placer = make([node("a", gpus=1), node("b", gpus=1)], "fgd", typical, priority=[0, 1])
    placer.state.allocate(PodRequest("x", 1, 1, 1, 500), Allocation(1, (0,), 500))
    scores = placer.scores(PodRequest("p", 1000, 1, 1, 500), np.array([0, 1]))
    # node a: 1000 -> 500, still fits -> no fragmentation change -> exactly 50
    # node b: 500 -> 0 -> no change either -> 50; both 50, tie goes to a
    assert scores.tolist() == [50, 50]
    # a 300-milli pod: on a it leaves 700 (still fits 500); on b it leaves 200 that no
    # typical pod can use: fragmentation +200 milli -> int(100 * sigmoid(-0.2)) = 45
    q = PodRequest("q", 1000, 1, 1, 300)
    assert placer.scores(q, np.array([0, 1])).tolist() == [50, int(100 / (1 + np.exp(0.2)))]
    assert placer.decide(q).allocation.node == 0


def test_gpu_packing_prefers_shared_gpus_then_used_nodes_then_small_idle_nodes() -> None:
    placer = make([node("big"), node("small", gpus=2), node("used")], "gpupacking",
                  priority=[0, 1, 2])
    placer.state.allocate(PodRequest("x", 1, 1, 1, 1000), Allocation(2, (0,), 1000))
    share = PodRequest("p", 1000, 1, 1, 200)
    # no shared GPU yet: a free GPU on the used node (49) beats idle nodes (31, 25)
    assert placer.scores(share, np.array([0, 1, 2])).tolist() == [25, 31, 49]
    placer.state.allocate(PodRequest("y", 1, 1, 1, 500), Allocation(2, (1,), 500))
    assert placer.decide(share).allocation.node == 2
    assert placer.decide(share).allocation.devices == (1,)


def test_gpu_clustering_keeps_pod_shapes_together() -> None:
    placer = make([node("a"), node("b"), node("c")], "gpuclustering", priority=[0, 1, 2])
    placer.state.allocate(PodRequest("x", 1, 1, 1, 300), Allocation(1, (0,), 300))
    placer.state.allocate(PodRequest("y", 1, 1, 2, 1000), Allocation(2, (0, 1), 1000))
    assert placer.decide(PodRequest("p", 1000, 1, 1, 200)).allocation.node == 1
    assert placer.decide(PodRequest("q", 1000, 1, 2, 1000)).allocation.node == 2
    # a new shape prefers an empty node (25) over nodes holding only other shapes (0)
    assert placer.decide(PodRequest("r", 1000, 1, 4, 1000)).allocation.node == 0


def test_dot_product_score_formula() -> None:
    placer = make([node("a", cpu=64000)], "dotprod")
    req = PodRequest("p", 32000, 1, 2, 1000)
    d = (32000 * 64000 / 128000**2 + 2000 * 8000 / 8000**2) / 2
    assert placer.scores(req, np.array([0])).tolist() == [int(100 * (1 - d))]


def test_best_fit_prefers_least_leftover_and_normalises_to_0_100() -> None:
    placer = make([node("roomy", cpu=96000), node("tight", cpu=8000, gpus=2)], "bestfit")
    req = PodRequest("p", 4000, 1, 1, 1000)
    assert placer.decide(req).allocation.node == 1
    policy = placer.policy
    assert policy.normalize(np.array([30, 40, 50])).tolist() == [0, 50, 100]
    assert policy.normalize(np.array([7, 7])).tolist() == [0, 0]


def test_cpu_only_pods_touch_no_device_and_model_constraints_hold() -> None:
    placer = make([node("g2"), node("t4", gpus=2, model="T4")], "fgd", priority=[0, 1])
    cpu = placer.place(PodRequest("c", 1000, 1))
    assert cpu.allocation.devices == () and placer.state.used_gpu_milli == 0
    pinned = placer.place(PodRequest("p", 1000, 1, 1, 1000, ("T4",)))
    assert pinned.allocation.node == 1


def test_unknown_policy_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="fgd"):
        get_policy("tetris")
    assert get_policy("06-FGD").name == "fgd"


def test_a_new_policy_needs_only_a_class_and_a_registry_line(monkeypatch) -> None:
    """The engine, experiment procedure and CLI have no per-policy special cases."""
    from gpugov.placement import registry
    from gpugov.placement.base import Policy
    from gpugov.sim.experiment import run_experiment

    class WorstFit(Policy):
        name = "worstfit"
        label = "07-WorstFit"

        def score(self, state, req, nodes):
            return (100 * state.gpu_free_total[nodes] // 8000).astype(np.int64)

    monkeypatch.setitem(registry.POLICIES, WorstFit.name, WorstFit)
    nodes = [node("a", gpus=2), node("b", gpus=8)]
    result = run_experiment(nodes, [PodRequest("p", 1000, 1, 1, 500)], "worstfit", seed=1)
    assert result.label == "07-WorstFit" and result.placed > 0
