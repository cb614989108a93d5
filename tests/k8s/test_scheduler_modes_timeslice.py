"""Time-slicing on the scheduler: 4 replicas per time-sliced card bind for the default
(internal) Tenant, each charged and capped at an honest memory share in its record; a
trusted Tenant's `spec.timeSlicing.oversubscribe` uncaps its replicas; an internal Tenant
saying so is refused with the field named."""

from __future__ import annotations

from tests.k8s.test_scheduler_modes import SHARED, T0, nodes, pod, pool, state, submit, tenant

from gpugov.k8s.annotations import decode_allocation, encode_allocation
from gpugov.model.devices import DeviceMode

TS4 = [{"index": "0", "mode": "timeslice", "replicas": 4}]


def test_four_replicas_per_card_bind_for_an_internal_tenant_each_capped_at_a_quarter() -> None:
    (obj,) = nodes(pool("h", 1, TS4))
    st = state([obj])  # the catch-all Tenant is internal: floor soft
    card = st.nodes["h-0"].card_memory_mib
    submit(st, *[pod(f"r{i}", limits=SHARED) for i in range(5)])
    plan = st.cycle(T0)
    assert sorted(b.name for b in plan.binds) == ["r0", "r1", "r2", "r3"]
    for b in plan.binds:
        rec = decode_allocation(encode_allocation(b.record))
        (d,) = rec.devices
        assert (d.mode, d.milli, d.memory_mib) == (DeviceMode.TIMESLICE, 250, card // 4)
        assert str(rec.isolation) == "soft"
    (cond,) = plan.conditions  # the card's 4 replicas are taken
    assert cond.name == "r4" and cond.code == "no-node-fits"


def test_a_replica_naming_memory_is_charged_it_and_memory_is_never_overpromised() -> None:
    (obj,) = nodes(pool("h", 1, TS4))
    st = state([obj])
    card = st.nodes["h-0"].card_memory_mib
    big = {**SHARED, "nvidia.com/gpumem": str(card - 10000)}
    small = {**SHARED, "nvidia.com/gpumem": "10000"}
    submit(st, pod("big", limits=big), pod("small", limits=small), pod("third", limits=SHARED))
    plan = st.cycle(T0)
    got = {b.name: b.record.devices[0].memory_mib for b in plan.binds}
    assert got == {"big": card - 10000, "small": 10000}
    (cond,) = plan.conditions
    assert cond.name == "third" and "gpu-memory" in cond.message


def oversubscribing(trust: str) -> dict:
    t = tenant("t", "team-a", trust)
    t["spec"]["timeSlicing"] = {"oversubscribe": True}
    return t


def test_a_trusted_tenant_may_oversubscribe_its_replicas_uncapped() -> None:
    (obj,) = nodes(pool("h", 1, TS4))
    st = state([obj], [oversubscribing("trusted")])
    big = {**SHARED, "nvidia.com/gpumem": "60000"}  # named, but not capped nor charged
    submit(st, *[pod(f"r{i}", limits=big) for i in range(4)])
    plan = st.cycle(T0)
    assert len(plan.binds) == 4
    for b in plan.binds:
        assert b.record.devices[0].memory_mib == 0 and str(b.record.isolation) == "none"


def test_an_internal_tenant_saying_oversubscribe_is_refused_naming_the_field() -> None:
    (obj,) = nodes(pool("h", 1, TS4))
    st = state([obj], [oversubscribing("internal")])
    submit(st, pod("r0", limits=SHARED))
    plan = st.cycle(T0)
    assert not plan.binds
    (cond,) = plan.conditions
    assert "spec.timeSlicing.oversubscribe" in cond.message and "trusted" in cond.message


def nvidia_time_sliced_node(count: int = 2, replicas: int = 4, allocatable: int = 8,
                            strategy: str = "time-slicing") -> dict:
    """A node whose NVIDIA device plugin time-slices without renaming (no gpugov inventory):
    `nvidia.com/gpu` allocatable counts replicas; GFD's labels say how many GPUs there are."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
              "nvidia.com/gpu.count": str(count), "nvidia.com/gpu.replicas": str(replicas),
              "nvidia.com/gpu.sharing-strategy": strategy}
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(allocatable)}
    return {"metadata": {"name": "nv-0", "labels": labels},
            "status": {"allocatable": alloc, "capacity": alloc,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_node_time_sliced_by_the_nvidia_plugin_counts_its_gpus_not_its_replicas() -> None:
    """8 `nvidia.com/gpu` replicas of 2 H100s are 2 time-slice devices: a pod asking for 2
    whole GPUs is not placed on replicas (it would get 2 slices of maybe one card), and no
    gpugov pod is placed there at all (the kubelet would refuse a `gpu.shared` one)."""
    st = state([nvidia_time_sliced_node()])
    spec = st.nodes["nv-0"].spec
    assert spec.gpu_count == 2
    assert {(d.mode, d.replicas) for d in spec.devices} == {(DeviceMode.TIMESLICE, 4)}
    assert "without renaming" in st.nodes["nv-0"].error
    submit(st, pod("two", limits={"nvidia.com/gpu": "2"}),
           pod("replica", limits={"nvidia.com/gpu.shared": "1"}))
    plan = st.cycle(T0)
    assert not plan.binds  # its replicas are not gpugov's device plugin's to hand out
    msgs = {c.name: c.message for c in plan.conditions}
    assert "gpu-mode" in msgs["two"] and "replica" in msgs


def test_gfd_labels_that_disagree_with_allocatable_close_the_node() -> None:
    st = state([nvidia_time_sliced_node(allocatable=7)])
    info = st.nodes["nv-0"]
    assert info.spec.gpu_count == 0 and "disagree" in info.error


def test_an_mps_client_on_a_cluster_without_mps_gpus_is_refused_with_gpu_mode() -> None:
    (obj,) = nodes(pool("h", 1, [{"index": "0", "mode": "exclusive"}]))
    st = state([obj], [tenant("t", "team-a", "trusted")])
    submit(st, pod("c0", limits={"nvidia.com/gpu.mps": "1"}))
    plan = st.cycle(T0)
    (cond,) = plan.conditions
    assert not plan.binds and "gpu-mode" in cond.message
