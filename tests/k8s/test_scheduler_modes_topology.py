"""`gpugov.io/topology: required` is a filter of the one state: the pod's devices all in one
NVLink domain, or it is refused with reason `topology`; `preferred` stays a score."""

from __future__ import annotations

import dataclasses

from tests.k8s.test_scheduler_modes import T0, bind, nodes, pod, pool, state, submit

from gpugov.k8s.annotations import INVENTORY, decode_inventory, encode_inventory

REQUIRED = {"gpugov.io/topology": "required"}
FOUR = {"nvidia.com/gpu": "4"}
TWO = {"nvidia.com/gpu": "2"}


def two_islands(name: str = "hgx") -> dict:
    """An 8-GPU node whose GPUs 0-3 and 4-7 are two NVLink domains (the agent's inventory)."""
    (obj,) = nodes(pool(name, 8, [{"index": "0-7", "mode": "exclusive"}]))
    ann = obj["metadata"]["annotations"]
    inv = decode_inventory(ann[INVENTORY])
    ann[INVENTORY] = encode_inventory(dataclasses.replace(inv, devices=tuple(
        dataclasses.replace(d, nvlink_domain=d.index // 4) for d in inv.devices)))
    return obj


def domains_of(b) -> set[int]:
    return {d.index // 4 for d in b.record.devices}


def test_required_refused_when_free_gpus_span_domains_but_preferred_is_placed() -> None:
    st = state([two_islands()])
    three = {"nvidia.com/gpu": "3"}
    objs = submit(st, pod("a", limits=three), pod("b", limits=three))
    plan = st.cycle(T0)
    bind(st, plan, objs)
    # each takes 3 GPUs of one island: 2 free GPUs, one per island
    free = set(range(8)) - {d.index for b in plan.binds for d in b.record.devices}
    assert len(free) == 2 and {i // 4 for i in free} == {0, 1}
    submit(st, pod("req", limits=TWO, ann=REQUIRED))
    plan = st.cycle(T0 + 1)
    assert not plan.binds
    (cond,) = plan.conditions
    assert cond.name == "req" and "topology" in cond.message
    st.delete_pod(f"{cond.namespace}/req")
    submit(st, pod("pref", limits=TWO, ann={"gpugov.io/topology": "preferred"}))
    plan = st.cycle(T0 + 2)
    (b,) = plan.binds
    assert b.name == "pref" and domains_of(b) == {0, 1}  # a preference, not a rule


def test_required_lands_in_the_free_island() -> None:
    st = state([two_islands()])
    objs = submit(st, pod("one", limits={"nvidia.com/gpu": "1"}))
    plan = st.cycle(T0)
    bind(st, plan, objs)
    submit(st, pod("req", limits=FOUR, ann=REQUIRED))
    (b,) = st.cycle(T0 + 1).binds
    assert len(domains_of(b)) == 1
    assert not {d.index for d in b.record.devices} & {d.index for p in plan.binds
                                                       for d in p.record.devices}


def test_required_on_a_node_without_nvlink_topology_is_refused_with_topology() -> None:
    (obj,) = nodes(pool("pcie", 4, [{"index": "0-3", "mode": "exclusive"}]))
    st = state([obj])
    submit(st, pod("req", limits=TWO, ann=REQUIRED), pod("one", limits={"nvidia.com/gpu": "1"},
                                                        ann=REQUIRED))
    plan = st.cycle(T0)
    assert [b.name for b in plan.binds] == ["one"]  # one GPU is always in one domain
    (cond,) = plan.conditions
    assert cond.name == "req" and "topology" in cond.message
