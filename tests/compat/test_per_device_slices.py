"""Per-device semantics resolved by the one filter: a HAMi memory percentage is a share of
the card the pod lands on (never of the fleet's largest card), and `nvidia.com/gpu: N` with a
slice is N soft slices on N distinct devices of one node."""

from __future__ import annotations

import numpy as np
import pytest

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.request import PodRequest
from gpugov.model.resource_spellings import translate
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import get_policy

A40 = "A100-SXM4-40GB"
H80 = "H100-SXM5-80GB"


def placer(nodes: list[NodeSpec], policy: str) -> Placer:
    state = ClusterState(nodes)
    typical = TypicalPods.from_requests([PodRequest("p", 1000, 1, 1, 500)])
    ctx = PolicyContext(FragmentationModel(typical, state), np.random.default_rng(0))
    return Placer(state, get_policy(policy)(ctx))


def pod(limits: dict, name: str = "p") -> PodRequest:
    req = translate(limits)
    assert req is not None
    return req.to_pod_request(name, 1000, 1024, modes=True)


@pytest.mark.parametrize("policy", ["gpugov", "best-fit", "fgd"])
def test_percentage_is_a_share_of_the_card_it_lands_on(policy: str) -> None:
    # a 40 GB card alone: 40 % is 16 GiB of it (not 32 GiB, 40 % of the fleet's 80 GB card)
    p = placer([NodeSpec("small", 64_000, 262_144, 1, A40), NodeSpec("big", 64_000, 262_144,
                                                                      1, H80)], policy)
    req = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 40,
               "nvidia.com/gpucores": 30})
    charged = {}
    for n, card in ((0, 40 * 1024), (1, 80 * 1024)):
        charged[n] = p.state.charge(req, n, 0)[1]
        assert charged[n] == -(-card * 40 // 100)
    # a 60 % pod fits on the 40 GB card (60 % of 40 GB), never refused for the 80 GB figure
    only_small = placer([NodeSpec("small", 64_000, 262_144, 1, A40)], policy)
    d = only_small.place(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 60,
                              "nvidia.com/gpucores": 10}))
    assert d.allocation is not None and d.allocation.memory_mib == 24576
    # and a second 60 % pod does not fit next to it (memory), a 40 % one does
    assert only_small.place(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 60,
                                 "nvidia.com/gpucores": 10}, "b")).allocation is None
    assert only_small.place(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 40,
                                 "nvidia.com/gpucores": 10}, "c")).allocation is not None


@pytest.mark.parametrize("policy", ["gpugov", "best-fit", "fgd", "random"])
def test_n_gpus_with_a_slice_takes_n_distinct_devices_each_with_the_slice(policy: str) -> None:
    p = placer([NodeSpec("n", 64_000, 262_144, 4, A40)], policy)
    req = pod({"nvidia.com/gpu": 2, "nvidia.com/gpumem-percentage": 50,
               "nvidia.com/gpucores": 30})
    assert (req.gpu_count, req.gpu_milli) == (2, 300)
    allocs = []
    for i in range(4):  # 4 pods x 2 slices of 50 % memory on 4 cards: exactly fills memory
        d = p.place(PodRequest(**{**{f: getattr(req, f) for f in (
            "cpu_milli", "memory_mib", "gpu_count", "gpu_milli", "models", "mode",
            "gpu_memory_percent")}, "name": f"p{i}"}))
        assert d.allocation is not None, i
        assert len(set(d.allocation.devices)) == 2
        assert d.allocation.milli == 300 and d.allocation.memory_mib == 20480
        allocs.append(d.allocation)
    assert (p.state.gpu_mem_free == 0).all()
    assert (p.state.gpu_free == 400).all()
    assert p.place(PodRequest("more", 1000, 1024, 2, 300, mode=req.mode,
                              gpu_memory_percent=50.0)).allocation is None
    p.state.release(req, allocs[0])
    assert p.place(PodRequest("again", 1000, 1024, 2, 300, mode=req.mode,
                              gpu_memory_percent=50.0)).allocation is not None


def test_n_slices_never_two_on_one_device() -> None:
    p = placer([NodeSpec("n", 64_000, 262_144, 1, A40)], "gpugov")
    req = pod({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 10})
    assert p.place(req).allocation is None
    assert p.state.failure_reason(req) == "gpu"


def test_memory_only_percentage_is_charged_its_share_as_compute() -> None:
    req = translate({"nvidia.com/gpumem-percentage": 25})
    assert req is not None and req.milli is None
    assert req.to_pod_request("p", modes=True).gpu_milli == 250
