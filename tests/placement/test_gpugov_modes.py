"""The `gpugov` policy across device modes: MIG instances where the fewest placements are
lost, time-slice replicas filled before fresh devices, whole GPUs on exclusive devices,
multi-GPU pods inside one NVLink domain, and never a decision the state refuses."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode, DeviceTopology
from gpugov.model.mig import MigInstance
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.mig import placeability, start_loss_table
from gpugov.placement.registry import get_policy
from gpugov.placement.topology import nvlink_set
from gpugov.sim.memory_workload import GIB, mixed_fleet_nodes, mixed_pods

A100 = "A100-SXM4-80GB"
MIG = DeviceConfig(DeviceMode.MIG)
SOFT = DeviceConfig(DeviceMode.SOFT)
EXCL = DeviceConfig(DeviceMode.EXCLUSIVE)
TS = DeviceConfig(DeviceMode.TIMESLICE, replicas=4)


def mig_pod(name: str, profile: str) -> PodRequest:
    milli = {"1g.10gb": 142, "2g.20gb": 285, "3g.40gb": 428, "7g.80gb": 1000}[profile]
    return PodRequest(name, 1000, 1024, 1, milli, mode=DeviceMode.MIG, mig_profile=profile)


def ts_pod(name: str) -> PodRequest:
    return PodRequest(name, 1000, 1024, 1, 250, (), 8 * GIB, mode=DeviceMode.TIMESLICE)


def placer(nodes: list[NodeSpec], policy: str = "gpugov", pods: list[PodRequest] = (),
           priority: list[int] | None = None) -> Placer:
    state = ClusterState(nodes)
    typical = TypicalPods.from_requests(list(pods) or [PodRequest("p", 1000, 1, 1, 500)])
    ctx = PolicyContext(FragmentationModel(typical, state), np.random.default_rng(0))
    order = np.array(priority) if priority is not None else None
    return Placer(state, get_policy(policy)(ctx), order)


def test_mig_instance_goes_where_the_fewest_placements_are_lost() -> None:
    # node 0's device holds a 3g at 0: a 1g there (at start 6) loses less than on node 1's
    # empty device, so gpugov takes node 0 although the tie order prefers node 1
    nodes = [NodeSpec(f"n{i}", 64_000, 262_144, 1, A100, devices=(MIG,)) for i in range(2)]
    p = placer(nodes, priority=[1, 0])
    big = mig_pod("big", "3g.40gb")
    p.state.allocate(big, Allocation(0, (0,), 428, p.state.charge(big, 0, 0)[1], 0))
    decision = p.place(mig_pod("small", "1g.10gb"))
    assert decision.allocation is not None
    assert (decision.allocation.node, decision.allocation.mig_start) == (0, 6)


def test_a_free_fixed_layout_instance_before_cutting_a_dynamic_device() -> None:
    fixed = DeviceConfig(DeviceMode.MIG, mig_layout=(MigInstance(0, "3g.40gb"),
                                                     MigInstance(4, "3g.40gb")))
    nodes = [NodeSpec("dyn", 64_000, 262_144, 1, A100, devices=(MIG,)),
             NodeSpec("fixed", 64_000, 262_144, 1, A100, devices=(fixed,))]
    decision = placer(nodes, priority=[0, 1]).place(mig_pod("p", "3g.40gb"))
    assert decision.allocation is not None and decision.allocation.node == 1


def test_loss_table_start_is_the_start_the_state_picks() -> None:
    state = ClusterState([NodeSpec("n", 64_000, 262_144, 1, A100, devices=(MIG,))])
    rng = np.random.default_rng(4)
    profiles = ["1g.10gb", "2g.20gb", "3g.40gb", "1g.10gb"]
    for i in range(12):
        req = mig_pod(f"p{i}", profiles[int(rng.integers(len(profiles)))])
        occ, compute = int(state.mig_occ[0, 0]), int(state.mig_compute_free[0, 0])
        loss, start = start_loss_table(A100, req.mig_profile)
        if not state.device_fits(req, np.array([0]))[0, 0]:
            assert start[occ, compute] == -1 and np.isinf(loss[occ, compute])
            continue
        assert start[occ, compute] == state.mig_start(req, 0, 0)
        state.allocate(req, Allocation(0, (0,), req.gpu_milli, state.charge(req, 0, 0)[1],
                                       int(start[occ, compute])))


def test_loss_table_agrees_with_the_instance_list_measure() -> None:
    """The bitmask tables and `placement.mig.placeability` over instance lists are two
    implementations of one measure: every reachable state of a few instances agrees."""
    from gpugov.model.mig import get_geometry

    geometry = get_geometry(A100)
    state = ClusterState([NodeSpec("n", 64_000, 262_144, 1, A100, devices=(MIG,))])
    instances: list[MigInstance] = []
    for profile in ["2g.20gb", "1g.10gb", "3g.40gb", "1g.10gb", "1g.10gb"]:
        occ, compute = int(state.mig_occ[0, 0]), int(state.mig_compute_free[0, 0])
        loss, start = start_loss_table(A100, profile)
        if start[occ, compute] < 0:
            continue
        before = placeability(geometry, instances)
        after = placeability(geometry, [*instances, MigInstance(int(start[occ, compute]),
                                                                profile)])
        assert loss[occ, compute] == before - after
        req = mig_pod(f"p{len(instances)}", profile)
        state.allocate(req, Allocation(0, (0,), req.gpu_milli, state.charge(req, 0, 0)[1],
                                       int(start[occ, compute])))
        instances.append(MigInstance(int(start[occ, compute]), profile))
    assert len(instances) >= 3


def test_memory_naming_slice_keeps_memory_and_compute_in_proportion() -> None:
    # two devices where the pod's FGD gain is the same: device 0 has 500 milli and 60 GiB
    # free, device 1 500 milli and 20 GiB; a 250-milli 10 GiB pod leaves device 0 at
    # 250 milli / 50 GiB (shares 0.25 vs 0.62) and device 1 at 250 / 10 GiB (0.25 vs 0.12):
    # device 1 stays in proportion; FGD takes the lowest index
    nodes = [NodeSpec("n", 64_000, 262_144, 2, A100)]
    pods = [PodRequest("t", 1000, 1024, 1, 250, (), 10 * GIB)]
    got = {}
    for policy in ("gpugov", "fgd"):
        p = placer(nodes, policy, pods=pods)
        p.state.allocate(PodRequest("a", 1, 1, 1, 500, (), 20 * GIB),
                         Allocation(0, (0,), 500, 20 * GIB))
        p.state.allocate(PodRequest("b", 1, 1, 1, 500, (), 60 * GIB),
                         Allocation(0, (1,), 500, 60 * GIB))
        got[policy] = p.place(PodRequest("x", 1000, 1024, 1, 250, (), 10 * GIB)).allocation
    assert got["gpugov"] is not None and got["gpugov"].devices == (1,)
    assert got["fgd"] is not None and got["fgd"].devices == (0,)


def test_time_slice_replicas_fill_a_used_device_before_a_fresh_one() -> None:
    nodes = [NodeSpec(f"n{i}", 64_000, 262_144, 2, "L40S", devices=(TS, TS)) for i in range(2)]
    p = placer(nodes, priority=[0, 1])
    first = ts_pod("first")
    p.state.allocate(first, Allocation(1, (1,), 250, 8 * GIB))
    decision = p.place(ts_pod("second"))
    assert decision.allocation is not None
    assert (decision.allocation.node, decision.allocation.devices) == (1, (1,))


def test_whole_gpu_takes_an_exclusive_device_before_a_soft_one() -> None:
    nodes = [NodeSpec("n", 64_000, 262_144, 4, A100, devices=(SOFT, SOFT, EXCL, EXCL))]
    decision = placer(nodes).place(PodRequest("w", 1000, 1024, 1, 1000, mode=DeviceMode.EXCLUSIVE))
    assert decision.allocation is not None and decision.allocation.devices == (2,)


def pairs(n: int) -> tuple[DeviceTopology, ...]:
    return tuple(DeviceTopology(nvlink_domain=k // 2) for k in range(n))


def test_multi_gpu_pod_gets_devices_of_one_nvlink_domain() -> None:
    nodes = [NodeSpec("n", 64_000, 262_144, 8, "H100-PCIE-80GB", topology=pairs(8))]
    for policy in ("gpugov", "fgd"):
        p = placer(nodes, policy)
        for d in (0, 2):  # slices on devices 0 and 2: free whole devices 1, 3, 4..7
            p.state.allocate(PodRequest(f"s{d}", 1000, 1024, 1, 500),
                             Allocation(0, (d,), 500))
        decision = p.place(PodRequest("two", 2000, 2048, 2, 1000))
        assert decision.allocation is not None
        # FGD takes the lowest free devices, across two domains; gpugov a whole domain,
        # the best-fitting one (4, 5), leaving 6 and 7 together
        expected = (4, 5) if policy == "gpugov" else (1, 3)
        assert decision.allocation.devices == expected, policy


def test_multi_gpu_pod_prefers_the_node_with_a_whole_nvlink_domain() -> None:
    nodes = [NodeSpec(f"n{i}", 64_000, 262_144, 4, "H100-PCIE-80GB", topology=pairs(4))
             for i in range(2)]
    p = placer(nodes, priority=[1, 0])
    half = PodRequest("s", 1000, 1024, 1, 500)
    p.state.allocate(half, Allocation(0, (0,), 500))  # node 0: domain 1 (2, 3) whole
    p.state.allocate(half, Allocation(1, (0,), 500))  # node 1: devices 1 and 3 split
    p.state.allocate(half, Allocation(1, (2,), 500))
    decision = p.place(PodRequest("two", 2000, 2048, 2, 1000))
    assert decision.allocation is not None
    assert (decision.allocation.node, decision.allocation.devices) == (0, (2, 3))


def test_nvlink_set_best_fit_and_unknown_domains() -> None:
    domains = [0, 0, 0, 1, 1, -1, -1]
    assert nvlink_set(domains, [0, 1, 2, 3, 4, 5, 6], 2) == (3, 4)  # the tighter domain
    assert nvlink_set(domains, [0, 1, 2, 3, 4], 3) == (0, 1, 2)
    assert nvlink_set(domains, [2, 3, 5, 6], 2) is None  # -1 is not a domain
    assert nvlink_set(domains, [2, 1, 0], 2) == (2, 1)  # the caller's order of preference


def test_power_budget_and_headroom() -> None:
    # a node allowed 1 busy H100 and one without a budget: a second 1-GPU pod goes to the
    # device the budget still allows nowhere else, so it lands on the free node
    nodes = [NodeSpec("budget", 64_000, 262_144, 2, "H100-SXM5-80GB", devices=(EXCL, EXCL),
                      power_budget_w=700.0),
             NodeSpec("free", 64_000, 262_144, 2, "H100-SXM5-80GB", devices=(EXCL, EXCL))]
    p = placer(nodes, priority=[0, 1])
    got = [p.place(PodRequest(f"w{i}", 1000, 1024, 1, 1000)).allocation for i in range(4)]
    assert [a.node if a else None for a in got].count(0) == 1
    assert got[3] is None  # three devices can be powered, four cannot
    assert p.state.failure_reason(PodRequest("x", 1000, 1024, 1, 1000)) == "power"


def test_on_the_mixed_fleet_multi_gpu_pods_keep_nvlink_without_losing_allocation() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from bench_mixed_modes import run
    finally:
        sys.path.pop(0)
    nodes = mixed_fleet_nodes()
    seeds = (42, 43, 44)
    ours = [run(nodes, mixed_pods(seed=s), "gpugov", s) for s in seeds]
    fgd = [run(nodes, mixed_pods(seed=s), "fgd", s) for s in seeds]
    assert np.mean([r["nvlink"] for r in ours]) > np.mean([r["nvlink"] for r in fgd]) + 15
    assert np.mean([r["full"] for r in ours]) > np.mean([r["full"] for r in fgd]) - 1.0


FIXED = DeviceConfig(DeviceMode.MIG, mig_layout=(MigInstance(0, "3g.40gb"),
                                                  MigInstance(4, "2g.20gb"),
                                                  MigInstance(6, "1g.10gb")))
MPS = DeviceConfig(DeviceMode.MPS, replicas=2)
CONFIGS = (SOFT, EXCL, MIG, TS, FIXED, MPS, SOFT, EXCL)


def _fleet(draw_modes: list[int], budgets: list[bool]) -> list[NodeSpec]:
    nodes = []
    for i, (m, b) in enumerate(zip(draw_modes, budgets, strict=True)):
        devices = tuple(CONFIGS[(m >> (3 * k)) & 7] for k in range(4))
        nodes.append(NodeSpec(f"n{i}", 32_000, 131_072, 4, A100, devices=devices,
                              topology=pairs(4), power_budget_w=800.0 if b else None))
    return nodes


pod_kinds = st.sampled_from(["soft", "whole", "two", "mig1", "mig3", "mig2", "ts", "mps",
                             "cpu"])
MAKE = {"soft": lambda i: PodRequest(f"p{i}", 1000, 1024, 1, 300, (), 20 * GIB),
        "whole": lambda i: PodRequest(f"p{i}", 1000, 1024, 1, 1000),
        "two": lambda i: PodRequest(f"p{i}", 1000, 1024, 2, 1000),
        "mig1": lambda i: mig_pod(f"p{i}", "1g.10gb"),
        "mig2": lambda i: mig_pod(f"p{i}", "2g.20gb"),
        "mig3": lambda i: mig_pod(f"p{i}", "3g.40gb"),
        "ts": lambda i: ts_pod(f"p{i}"),
        "mps": lambda i: PodRequest(f"p{i}", 1000, 1024, 1, 400, (), 30 * GIB,
                                    mode=DeviceMode.MPS),
        "cpu": lambda i: PodRequest(f"p{i}", 1000, 1024)}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 4095), min_size=1, max_size=4),
       st.lists(st.booleans(), min_size=4, max_size=4), st.lists(pod_kinds, max_size=40),
       st.integers(0, 3))
def test_gpugov_decisions_are_always_accepted_and_deterministic(modes, budgets, kinds,
                                                                seed) -> None:
    nodes = _fleet(modes, budgets[:len(modes)])
    pods = [MAKE[k](i) for i, k in enumerate(kinds)]
    runs = []
    for _ in range(2):
        p = placer(nodes, pods=pods, priority=list(np.random.default_rng(seed)
                                                   .permutation(len(nodes))))
        s = p.state
        decisions = []
        for pod in pods:
            d = p.decide(pod)
            decisions.append(d)
            if d.allocation is None:
                assert d.reason  # a refusal names a reason the state knows
                continue
            a = d.allocation
            if pod.gpu_count > 1:  # one NVLink domain whenever the node has one that fits
                fits = s.device_fits(pod, np.array([a.node]))[0]
                domains = s.dev_nvlink[a.node][fits]
                if np.bincount(domains[domains >= 0]).max(initial=0) >= pod.gpu_count:
                    assert len(set(s.dev_nvlink[a.node, list(a.devices)].tolist())) == 1
            # allocate() raises on anything the state forbids: overcommit, modes, power, MIG
            s.allocate(pod, a)
        assert (s.gpu_free >= 0).all() and (s.gpu_mem_free >= 0).all()
        assert (s.rep_free >= 0).all() and (s.mig_compute_free >= 0).all()
        runs.append([(d.allocation, d.reason) for d in decisions])
    assert runs[0] == runs[1]


def test_the_control_plane_places_with_gpugov_by_default() -> None:
    """A control plane built without naming a policy is gpugov's: a 2-GPU job gets one
    NVLink pair although the lowest free devices span two, and a MIG pod joins the card that
    is already cut."""
    from gpugov.control.config import parse_config
    from gpugov.control.cycle import new_control_plane
    from gpugov.control.workload import Job

    cfg = parse_config({"queues": [{"name": "q", "quota": {"gpu": 8}}],
                        "priorityClasses": [{"name": "p", "value": 1}]})
    nodes = [NodeSpec("pcie", 64_000, 262_144, 4, "H100-PCIE-80GB", topology=pairs(4)),
             NodeSpec("mig", 64_000, 262_144, 2, A100, devices=(MIG, MIG))]
    cp = new_control_plane(cfg, nodes)
    assert cp.placer.policy.name == "gpugov"
    leaf, trust = cp.tree.resolve("q")
    pclass = cfg.priority_class("p")
    cp.state.allocate(PodRequest("s", 1000, 1024, 1, 500), Allocation(0, (0,), 500))
    big = mig_pod("big", "3g.40gb")
    cp.state.allocate(big, Allocation(1, (1,), 428, cp.state.charge(big, 1, 1)[1], 0))
    two = cp.submit(Job("two", leaf, pclass, 0.0, 1, PodRequest("two", 1000, 1024, 2, 1000),
                        trust))
    small = cp.submit(Job("small", leaf, pclass, 0.0, 1, mig_pod("small", "1g.10gb"), trust))
    cp.cycle(0.0)
    assert two.allocations and two.allocations[0].devices == (2, 3)
    assert small.allocations and small.allocations[0].node == 1
    assert small.allocations[0].devices == (1,) and small.allocations[0].mig_start == 6
