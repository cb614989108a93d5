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
