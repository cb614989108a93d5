"""Time-slice replicas are charged an honest memory share, which the enforcement library caps
them at: card/replicas by default, what they name otherwise; an oversubscribing replica is
charged nothing and delivers no isolation, so it never shares a device with replicas that
need soft isolation."""

from __future__ import annotations

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.model.request import Allocation, PodRequest

H100 = "H100-SXM5-80GB"


def state(replicas: int = 4, gpus: int = 1) -> ClusterState:
    cfg = DeviceConfig(DeviceMode.TIMESLICE, replicas=replicas)
    return ClusterState([NodeSpec("n", 64000, 262144, gpus, H100, devices=(cfg,) * gpus)])


def replica(name: str, mib: int = 0, floor: IsolationLevel = IsolationLevel.SOFT,
            oversubscribe: bool = False, tenant: str = "t") -> PodRequest:
    return PodRequest(name, 0, 0, 1, 1, gpu_memory_mib=mib, mode=DeviceMode.TIMESLICE,
                      min_isolation=floor, oversubscribe=oversubscribe, tenant=tenant)


def place(s: ClusterState, req: PodRequest) -> Allocation:
    assert s.feasible(req).tolist() == [True], s.failure_reason(req)
    milli, mem = s.charge(req, 0, 0)
    alloc = Allocation(0, (0,), milli, mem)
    s.allocate(req, alloc)
    return alloc


def test_four_replicas_that_name_no_memory_each_take_a_quarter_of_the_card() -> None:
    s = state()
    card = int(s.gpu_mem_cap[0, 0])
    allocs = [place(s, replica(f"r{i}")) for i in range(4)]
    assert {(a.milli, a.memory_mib) for a in allocs} == {(250, card // 4)}
    assert s.failure_reason(replica("r4")) == "replicas"


def test_replicas_naming_memory_are_charged_it_and_the_card_is_never_overpromised() -> None:
    s = state()
    card = int(s.gpu_mem_cap[0, 0])
    place(s, replica("big", card - 10000))
    assert place(s, replica("small", 10000)).memory_mib == 10000
    assert s.failure_reason(replica("more", 1)) == "gpu-memory"


def test_a_capped_replica_meets_an_internal_tenants_soft_floor() -> None:
    assert DeviceMode.TIMESLICE.isolation is IsolationLevel.SOFT
    place(state(), replica("internal", floor=IsolationLevel.SOFT))


def test_an_oversubscribing_replica_is_charged_no_memory_but_never_joins_a_soft_one() -> None:
    s = state()
    place(s, replica("capped", floor=IsolationLevel.SOFT, tenant="a"))
    over = replica("over", floor=IsolationLevel.NONE, oversubscribe=True, tenant="b")
    assert s.failure_reason(over) == "isolation"
    s2 = state()
    assert place(s2, over).memory_mib == 0
    assert s2.failure_reason(replica("soft", floor=IsolationLevel.SOFT)) == "isolation"
    # a replica that needs nothing may join the uncapped one
    place(s2, replica("none", floor=IsolationLevel.NONE))


def test_release_reopens_the_device_to_soft_replicas() -> None:
    s = state()
    over = replica("over", floor=IsolationLevel.NONE, oversubscribe=True)
    alloc = place(s, over)
    s.release(over, alloc)
    place(s, replica("soft"))
