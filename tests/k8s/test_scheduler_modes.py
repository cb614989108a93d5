"""The scheduler on nodes whose devices have modes (no cluster): nodes translated from the node
agent's inventory, MIG instances, time-slice replicas, taints, nodeSelectors, untrusted
tenants, blocked devices, and the restart that re-adopts what the records name."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.k8s.annotations import (
    INVENTORY,
    decode_allocation,
    decode_inventory,
    encode_allocation,
    encode_inventory,
)
from gpugov.k8s.devcluster.cluster_file import node_objects, parse_cluster_yaml
from gpugov.k8s.extender import ExtenderState
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.state import INVALID, SchedulerState
from gpugov.k8s.scheduler.translate import node_info, pod_info
from gpugov.model.constraints import Taint
from gpugov.model.devices import DeviceMode, DeviceTopology
from gpugov.model.mig import MigInstance, get_geometry
from gpugov.node.deviceplugin.handshake import candidates
from gpugov.node.deviceplugin.resources import plugin_devices

T0 = 1_800_000_000.0
MIG_1G = {"nvidia.com/mig-1g.10gb": "1"}
SHARED = {"nvidia.com/gpu.shared": "1"}  # a time-slice replica


def pool(name: str, gpus: int, devices: list | None = None, **extra) -> dict:
    return {"name": name, "count": 1, "model": "H100-SXM5-80GB", "gpus": gpus,
            "cpuMilli": 64000, "memoryMiB": 524288, "devices": devices or [], **extra}


def nodes(*pools: dict) -> list[dict]:
    """Ready node objects as `gpugov dev up` makes them (inventory, GFD labels, resources)."""
    objs = node_objects(parse_cluster_yaml({"nodePools": list(pools)}, "test"))
    for o in objs:
        o["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return objs


def pod(name: str, ns: str = "team-a", limits: dict | None = None, ann: dict | None = None,
        **spec) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}",
                         "annotations": {names.ANN_QUEUE: "qa", **(ann or {})}, "labels": {},
                         "creationTimestamp": "2027-01-15T08:00:00Z"},
            "spec": {"schedulerName": names.SCHEDULER_NAME, **spec,
                     "containers": [{"name": "c", "resources": {
                         "limits": limits or {names.GPU_RESOURCE: "1"}}}]},
            "status": {"phase": "Pending"}}


def state(node_objs: list[dict], tenants: list[dict] = ()) -> SchedulerState:
    """Nodes, queue qa, and a catch-all Tenant (internal) behind the given ones: the pods'
    queue annotation is never read."""
    st = SchedulerState()
    for o in node_objs:
        st.set_node(o)
    st.set_object("queue", {"metadata": {"name": "qa"}, "spec": {}})
    st.set_object("tenant", {"metadata": {"name": "everyone"},
                             "spec": {"queue": "qa", "namespaceSelector": {}}})
    for t in tenants:
        st.set_object("tenant", t)
    return st


def extender(*node_objs: dict) -> ExtenderState:
    """An extender's state fed like `state` (nodes, queue qa, a catch-all Tenant)."""
    ext = ExtenderState()
    for o in node_objs:
        ext.view.set_node(o)
    ext.view.set_object("queue", {"metadata": {"name": "qa"}, "spec": {}})
    ext.view.set_object("tenant", {"metadata": {"name": "everyone"},
                                   "spec": {"queue": "qa", "namespaceSelector": {}}})
    return ext


def tenant(name: str, ns: str, trust: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"namespaces": [ns], "queue": "qa",
                                                 "trust": trust}}


def bind(st: SchedulerState, plan, objs: dict[str, dict]) -> dict[str, dict]:
    """What the API does with the plan's bindings: the pods become bound with their record."""
    out = {}
    for b in plan.binds:
        st.bind_result(b, True)
        obj = copy.deepcopy(objs[b.name])
        obj["metadata"]["annotations"][names.ANN_ALLOCATION] = encode_allocation(b.record)
        obj["spec"]["nodeName"] = b.node
        obj["status"]["phase"] = "Running"
        st.set_pod(obj)
        out[b.name] = obj
    return out


def submit(st: SchedulerState, *objs: dict) -> dict[str, dict]:
    for o in objs:
        st.set_pod(o)
    return {o["metadata"]["name"]: o for o in objs}


def test_inventory_nodes_have_every_device_in_its_mode() -> None:
    (obj,) = nodes(pool("h", 8, [
        {"index": "0-1", "mode": "mig", "layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
        {"index": "2-3", "mode": "soft"}, {"index": "4", "mode": "timeslice", "replicas": 4},
        {"index": "5", "mode": "mps", "replicas": 4}], topology="nvswitch", powerBudgetW=6000,
        labels={"zone": "a"}, taints=[{"key": "dedicated", "value": "infer",
                                       "effect": "NoSchedule"}]))
    # the kubelet's count is not the device count: 10 IDs per soft device (HAMi's split)
    assert obj["status"]["allocatable"][names.GPU_RESOURCE] == "22"
    info = node_info(obj)
    spec = info.spec
    assert not info.error and spec.gpu_count == 8 and spec.model == "H100-SXM5-80GB"
    assert [d.mode for d in spec.devices] == [DeviceMode.MIG] * 2 + [DeviceMode.SOFT] * 2 + [
        DeviceMode.TIMESLICE, DeviceMode.MPS] + [DeviceMode.EXCLUSIVE] * 2
    assert spec.devices[4].replicas == 4 and spec.devices[5].replicas == 4
    assert MigInstance(4, "3g.40gb") in spec.devices[0].mig_layout
    assert len(spec.devices[0].mig_layout) == 4
    assert spec.topology[7] == DeviceTopology(nvlink_domain=0, pcie_switch=None, numa_node=1)
    assert spec.power_budget_w == 6000
    assert ("zone", "a") in spec.labels
    assert spec.taints == (Taint("dedicated", "infer", "NoSchedule"),)
    assert info.mig_uuids[(1, "1g.10gb", 2)] == "MIG-h-0-1-2"


def test_a_node_without_inventory_keeps_soft_devices_from_allocatable() -> None:
    (obj,) = nodes(pool("p", 2))
    del obj["metadata"]["annotations"][INVENTORY]
    obj["status"]["allocatable"][names.GPU_RESOURCE] = "3"
    spec = node_info(obj).spec
    assert spec.gpu_count == 3 and spec.devices == () and spec.model == "H100-SXM5-80GB"


def test_unreadable_inventory_or_layout_blocks_devices_and_is_counted() -> None:
    bad_json, bad_layout = nodes(pool("a", 2), pool("b", 2, [
        {"index": "0-1", "mode": "mig", "layout": ["1g.10gb"]}]))
    bad_json["metadata"]["annotations"][INVENTORY] = "{not json"
    inv = json.loads(bad_layout["metadata"]["annotations"][INVENTORY])
    inv["devices"][0]["mig"].append({"profile": "7g.80gb", "start": 0, "uuid": "MIG-x"})
    bad_layout["metadata"]["annotations"][INVENTORY] = json.dumps(inv)
    a, b = node_info(bad_json), node_info(bad_layout)
    assert a.blocked == (0, 1) and "gpugov.io/inventory" in a.error and "not JSON" in a.error
    assert b.blocked == (0,) and "device 0" in b.error and "MIG layout" in b.error
    st = state([bad_json, bad_layout])
    assert st.errors["node"] == 2
    objs = submit(st, *[pod(f"m{i}", limits=MIG_1G) for i in range(3)])
    plan = st.cycle(T0)
    # only device 1 of node b is usable: its one 1g.10gb instance
    assert [(b.node, b.record.devices[0].index) for b in plan.binds] == [("b-0", 1)]
    bind(st, plan, objs)
    assert not st.cycle(T0 + 1).binds


def test_taints_keep_a_pool_for_pods_that_tolerate_it_and_selectors_hold() -> None:
    plain, infer = nodes(pool("plain", 1, labels={"zone": "a"}),
                         pool("infer", 2, labels={"zone": "b"}, taints=[
                             {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]))
    st = state([plain, infer])
    tol = [{"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}]
    objs = submit(st, pod("plain0"), pod("plain1"), pod("tol0", tolerations=tol),
                  pod("zone-b", nodeSelector={"zone": "b"}),
                  pod("tol-zone-a", tolerations=tol, nodeSelector={"zone": "a"}))
    plan = st.cycle(T0)
    # plain1 fails first (the untainted node is full): tol0, same shape, still binds
    assert {b.name: b.node for b in plan.binds} == {"plain0": "plain-0", "tol0": "infer-0"}
    msgs = {c.name: c.message for c in plan.conditions}
    assert "no-node-fits" in msgs["plain1"]  # it waits for the untainted node
    assert "taint" in msgs["zone-b"]  # its zone is all tainted: never fits
    assert "tol-zone-a" in msgs  # tolerating a taint is no reason to leave its zone
    bind(st, plan, objs)
    more = submit(st, pod("tol1", tolerations=tol, nodeSelector={"zone": "b"}))
    plan = st.cycle(T0 + 1)
    assert {b.name: b.node for b in plan.binds} == {"tol1": "infer-0"}
    bind(st, plan, more)


def test_mig_pods_land_on_free_instances_and_the_record_names_them() -> None:
    (obj,) = nodes(pool("h", 2, [{"index": "0-1", "mode": "mig",
                                  "layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}]))
    st = state([obj])
    objs = submit(st, *[pod(f"m{i}", limits=MIG_1G) for i in range(5)])
    plan = st.cycle(T0)
    assert len(plan.binds) == 4  # two 1g.10gb instances per device
    inv = decode_inventory(obj["metadata"]["annotations"][INVENTORY])
    uuids = {(d.index, m.start): m.uuid for d in inv.devices for m in d.mig}
    profile_mib = get_geometry("H100-SXM5-80GB").profile("1g.10gb").memory_mib
    seen = set()
    for b in plan.binds:
        rec = decode_allocation(encode_allocation(b.record))
        (d,) = rec.devices
        assert str(rec.isolation) == "hard" and d.mode is DeviceMode.MIG
        assert (d.mig_profile, d.milli, d.memory_mib) == ("1g.10gb", 1000 // 7, profile_mib)
        assert d.mig_uuid == uuids[(d.index, d.mig_start)] and d.uuid == f"GPU-h-0-{d.index}"
        seen.add((d.index, d.mig_start))
    assert seen == {(0, 2), (0, 3), (1, 2), (1, 3)}
    (cond,) = plan.conditions
    assert cond.name == "m4" and "mig-slice" in cond.message
    bound = bind(st, plan, objs)
    # the device plugin reads the record as written: each pod maps to its instance's UUID
    pods_on_node = list(bound.values())
    devs = plugin_devices(inv)["nvidia.com/mig-1g.10gb"]
    cands, rejected = candidates(pods_on_node, "h-0", "nvidia.com/mig-1g.10gb", inv,
                                 {d.id for d in devs})
    assert not rejected and len(cands) == 4
    assert {c.wanted for c in cands} == {(u,) for (i, s), u in uuids.items() if s in (2, 3)}


SHARED_20G = {**SHARED, "nvidia.com/gpumem": "20000"}  # a replica capped at 20000 MiB


def test_a_restart_readopts_mig_instances_and_replicas_from_the_records() -> None:
    (obj,) = nodes(pool("h", 2, [{"index": "0", "mode": "mig", "layout": ["1g.10gb"] * 7},
                                 {"index": "1", "mode": "timeslice", "replicas": 2}]))
    trusted = [tenant("t", "team-a", "trusted")]
    st = state([obj], trusted)
    objs = submit(st, *[pod(f"m{i}", limits=MIG_1G) for i in range(3)],
                  *[pod(f"t{i}", limits=SHARED_20G) for i in range(3)])
    plan = st.cycle(T0)
    assert sorted(b.name for b in plan.binds) == ["m0", "m1", "m2", "t0", "t1"]
    for b in plan.binds:
        if b.name.startswith("t"):
            (d,) = b.record.devices
            assert (d.index, d.mode, d.milli, d.memory_mib) == (1, DeviceMode.TIMESLICE, 500,
                                                                20000)
            assert str(b.record.isolation) == "soft"  # capped at its memory
    assert "replicas" in {c.name: c.message for c in plan.conditions}["t2"]
    bound = bind(st, plan, objs)
    starts = {n: decode_allocation(o["metadata"]["annotations"][names.ANN_ALLOCATION])
              .devices[0].mig_start for n, o in bound.items() if n.startswith("m")}

    # a new scheduler sees only the API objects
    fresh = state([obj], trusted)
    later = submit(fresh, *bound.values(), pod("m3", limits=MIG_1G))
    plan = fresh.cycle(T0 + 10)
    (b,) = plan.binds
    assert b.name == "m3" and b.record.devices[0].mig_start not in starts.values()
    assert fresh.errors["allocation"] == 0
    bind(fresh, plan, later)
    # m1 leaves: its instance is free again, the others stay held
    fresh.delete_pod("team-a/m1")
    fill = submit(fresh, *[pod(f"f{i}", limits=MIG_1G) for i in range(4)])
    plan = fresh.cycle(T0 + 11)
    got = sorted(b.record.devices[0].mig_start for b in plan.binds)
    assert len(got) == 4 and starts["m1"] in got  # 7 instances: m0, m2, m3 and these 4
    bind(fresh, plan, fill)
    # the replicas are counted again: t2 still waits until a replica is free
    submit(fresh, objs["t2"])
    plan = fresh.cycle(T0 + 12)
    assert not plan.binds and "replicas" in plan.conditions[0].message
    fresh.delete_pod("team-a/t0")
    assert [b.name for b in fresh.cycle(T0 + 13).binds] == ["t2"]


def test_mps_clients_are_capped_and_counted() -> None:
    (obj,) = nodes(pool("h", 1, [{"index": "0", "mode": "mps", "replicas": 2}]))
    st = state([obj], [tenant("t", "team-a", "trusted")])
    mps = {"nvidia.com/gpu.mps": "1"}
    submit(st, *[pod(f"c{i}", limits=mps) for i in range(3)],
           pod("big", limits={**mps, "nvidia.com/gpucores": "60"}),
           pod("internal", "team-i", limits=mps))
    plan = st.cycle(T0)
    card = node_info(obj).card_memory_mib
    assert sorted(b.name for b in plan.binds) == ["c0", "c1"]
    for b in plan.binds:
        (d,) = b.record.devices
        assert (d.mode, d.milli, d.memory_mib) == (DeviceMode.MPS, 500, card // 2)
    msgs = {c.name: c.message for c in plan.conditions}
    assert "c2" in msgs  # both clients are taken (the card's compute is all held)
    # 600 milli is more than a client's cap of 500: never fits
    assert msgs["big"].startswith("gpugov: rejected") and "(gpu: " in msgs["big"]
    # an internal tenant needs soft isolation: an MPS client delivers none
    assert "isolation" in msgs["internal"]


def test_untrusted_tenants_never_share_a_device() -> None:
    (obj,) = nodes(pool("h", 3, [{"index": "0-1", "mode": "mig", "layout": ["1g.10gb"] * 7},
                                 {"index": "2", "mode": "soft"}]))
    st = state([obj], [tenant("a", "ext-a", "untrusted"), tenant("b", "ext-b", "untrusted"),
                       tenant("c", "team-c", "internal")])
    objs = submit(st, pod("a0", "ext-a", MIG_1G), pod("a1", "ext-a", MIG_1G),
                  pod("b0", "ext-b", MIG_1G), pod("c0", "team-c", MIG_1G),
                  pod("a-soft", "ext-a", {names.GPU_RESOURCE: "1",
                                          "nvidia.com/gpumem": "10000"}))
    plan = st.cycle(T0)
    on: dict[int, set[str]] = {}
    for b in plan.binds:
        on.setdefault(b.record.devices[0].index, set()).add(b.namespace)
    assert all(len(tenants) == 1 for tenants in on.values()), on
    assert {"ext-a", "ext-b"} <= set().union(*on.values())
    msgs = {c.name: c.message for c in plan.conditions}
    assert "tenant-isolation" in msgs["c0"]  # both devices hold an untrusted tenant
    assert "isolation: " in msgs["a-soft"]  # a soft slice is not hard isolation
    bind(st, plan, objs)


def test_blocked_devices_of_every_mode_take_no_new_pods() -> None:
    (obj,) = nodes(pool("h", 3, [{"index": "0", "mode": "mig", "layout": ["1g.10gb"] * 7},
                                 {"index": "1", "mode": "timeslice", "replicas": 4},
                                 {"index": "2", "mode": "soft"}]))
    inv = decode_inventory(obj["metadata"]["annotations"][INVENTORY])
    sick = tuple(d if d.index != 0 else type(d)(**{**{f: getattr(d, f) for f in d.__slots__},
                                                   "healthy": False}) for d in inv.devices)
    obj["metadata"]["annotations"][INVENTORY] = encode_inventory(type(inv)(sick))
    obj["metadata"]["annotations"][names.ANN_UNSCHEDULABLE_GPUS] = "1,2"
    st = state([obj], [tenant("t", "team-a", "trusted")])
    submit(st, pod("mig", limits=MIG_1G), pod("ts", limits=SHARED),
           pod("soft", limits={names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "1000"}),
           pod("whole"))
    plan = st.cycle(T0)
    assert not plan.binds and st.errors["node"] == 0
    assert len(plan.conditions) == 4
    # the agent is done: everything takes pods again
    del obj["metadata"]["annotations"][names.ANN_UNSCHEDULABLE_GPUS]
    obj["metadata"]["annotations"][INVENTORY] = encode_inventory(inv)
    st.set_node(obj)
    assert sorted(b.name for b in st.cycle(T0 + 1).binds) == ["mig", "soft", "ts"]


def test_extender_filter_names_the_constraint_a_node_fails() -> None:
    plain, infer = nodes(pool("plain", 1), pool("infer", 1, taints=[
        {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]))
    ext = extender(plain, infer)
    req, why = ext.request_of(pod("p", limits=MIG_1G))
    assert req is not None and not why
    keep, failed = ext.filter(req, ["plain-0", "infer-0"])
    assert keep == [] and "taint" in failed["infer-0"] and "gpu" in failed["plain-0"]
    req, _ = ext.request_of(pod("w"))
    assert ext.filter(req, ["plain-0", "infer-0"])[0] == ["plain-0"]


def test_extender_binds_a_mig_pod_to_a_free_instance_with_its_uuid() -> None:
    (obj,) = nodes(pool("h", 1, [{"index": "0", "mode": "mig",
                                  "layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}]))
    ext = extender(obj)
    uuids = node_info(obj).mig_uuids
    taken = set()
    for name in ("a", "b"):
        p = pod(name, limits=MIG_1G)
        info = pod_info(p, {})
        req, _ = ext.request_of(p)
        alloc = ext.choose(req, "h-0")
        rec = ext.view.allocation_record_on(info, alloc, "h-0", ext.state)
        (d,) = rec.devices
        assert d.mig_uuid == uuids[(0, "1g.10gb", d.mig_start)] and d.mig_start not in taken
        taken.add(d.mig_start)
        ext.view.inflight[info.key] = rec  # what the extender's bind does
        ext.view.pods[info.key] = info
        ext.view.version += 1
    req, _ = ext.request_of(pod("c", limits=MIG_1G))
    assert ext.choose(req, "h-0") is None  # both 1g.10gb instances are held
    assert "gpu: no device" in ext.filter(req, ["h-0"])[1]["h-0"]


def test_bad_taints_and_tolerations_are_named_and_never_crash() -> None:
    good, bad = nodes(pool("good", 1), pool("bad", 1))
    bad["spec"]["taints"] = [{"key": "x", "effect": "Sometimes"}]
    info = node_info(bad)
    assert not info.schedulable and "spec.taints[0]" in info.error and "Sometimes" in info.error
    st = state([good, bad])
    assert st.errors["node"] == 1
    clash = pod("clash", nodeSelector={"zone": "a"}, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}})
    submit(st, pod("weird", tolerations=[{"key": "x", "operator": "Sometimes"}]), clash,
           pod("ok"))
    plan = st.cycle(T0)
    assert [b.node for b in plan.binds] == ["good-0"]  # never the node with the bad taint
    msgs = {c.name: (c.code, c.message) for c in plan.conditions}
    assert msgs["weird"][0] == INVALID and "spec.tolerations[0]" in msgs["weird"][1] \
        and "'Sometimes'" in msgs["weird"][1]
    # a nodeSelector and a required node affinity no node meets together: reason
    # node-selector, as kube-scheduler reports it
    assert msgs["clash"][0] != INVALID and "node-selector" in msgs["clash"][1]


_KINDS = {
    "whole": ({names.GPU_RESOURCE: "1"}, None),
    "mig1": (MIG_1G, None),
    "mig3": ({"nvidia.com/mig-3g.40gb": "1"}, None),
    "slice": ({names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "20000"}, None),
    "ts": ({"nvidia.com/gpu.shared": "1"}, None),
}


@settings(max_examples=25, deadline=None)
@given(devices=st.lists(st.sampled_from(["mig", "soft", "timeslice", "exclusive"]),
                        min_size=2, max_size=2), tainted=st.booleans(),
       asks=st.lists(st.tuples(st.sampled_from(sorted(_KINDS)),
                               st.sampled_from(["t-ext", "t-int", "t-tr"]), st.booleans()),
                     min_size=1, max_size=14))
def test_decisions_never_overcommit_any_mode(devices, tainted, asks) -> None:
    groups = [{"index": str(k), "mode": m, **({"layout": ["3g.40gb", "2g.20gb", "1g.10gb",
                                                         "1g.10gb"]} if m == "mig" else {}),
               **({"replicas": 3} if m == "timeslice" else {})}
              for k, m in enumerate(devices)]
    taint = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if tainted else []
    objs = nodes(pool("h", 2, groups, taints=taint), pool("free", 1, labels={"zone": "f"}))
    inv = decode_inventory(objs[0]["metadata"]["annotations"][INVENTORY])
    tenants_objs = [tenant("ext", "t-ext", "untrusted"), tenant("int", "t-int", "internal"),
                    tenant("tr", "t-tr", "trusted")]
    sched = state(objs, tenants_objs)
    tol = [{"key": "dedicated", "operator": "Exists"}]
    made = {}
    for i, (kind, ns, tolerates) in enumerate(asks):
        limits, req = _KINDS[kind]
        ann = {names.ANN_REQUEST: json.dumps(req)} if req else {}
        made[f"p{i}"] = pod(f"p{i}", ns, limits, ann, tolerations=tol if tolerates else [])
    submit(sched, *made.values())
    plan = sched.cycle(T0)
    instances, replicas, tenants = set(), {}, {}
    for b in plan.binds:
        _, ns, tolerates = asks[int(b.name[1:])]
        if b.node == "h-0":
            assert tolerates or not tainted, f"{b.name} on a taint it does not tolerate"
        for d in b.record.devices:
            key = (b.node, d.index)
            tenants.setdefault(key, set()).add(ns)
            if d.mode is DeviceMode.MIG:
                dev = inv.devices[d.index]
                assert (d.mig_profile, d.mig_start) in {(m.profile, m.start) for m in dev.mig}
                assert (key, d.mig_start) not in instances
                instances.add((key, d.mig_start))
            if d.mode is DeviceMode.TIMESLICE:
                replicas[key] = replicas.get(key, 0) + 1
                assert replicas[key] <= 3
    for key, held in tenants.items():
        assert "t-ext" not in held or held == {"t-ext"}, f"{key} shared with {held}"
    bound = bind(sched, plan, made)
    fresh = state(objs, tenants_objs)  # a restart counts every record back, no conflict
    submit(fresh, *bound.values())
    assert not fresh.cycle(T0 + 1).binds and fresh.errors["allocation"] == 0


def test_a_toleration_added_to_a_pending_pod_is_seen() -> None:
    (infer,) = nodes(pool("infer", 1, taints=[
        {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]))
    st_ = state([infer])
    objs = submit(st_, pod("late"))
    assert not st_.cycle(T0).binds
    objs["late"]["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    st_.set_pod(objs["late"])
    assert [b.name for b in st_.cycle(T0 + 1).binds] == ["late"]


def test_the_device_plugin_reads_every_record_as_written() -> None:
    (obj,) = nodes(pool("h", 3, [{"index": "0", "mode": "soft"},
                                 {"index": "1", "mode": "timeslice", "replicas": 2}]))
    st_ = state([obj], [tenant("t", "team-a", "trusted")])
    objs = submit(st_, pod("whole", limits={names.GPU_RESOURCE: "2"}), pod("ts", limits=SHARED))
    plan = st_.cycle(T0)
    recs = {b.name: b.record for b in plan.binds}
    # a whole GPU may take the free soft device: its record says soft, 1000 milli
    assert sorted((d.index, d.mode.value, d.milli) for d in recs["whole"].devices) == [
        (0, "soft", 1000), (2, "exclusive", 1000)]
    assert [(d.index, d.mode.value) for d in recs["ts"].devices] == [(1, "timeslice")]
    bound = bind(st_, plan, objs)
    inv = decode_inventory(obj["metadata"]["annotations"][INVENTORY])
    for resource, name, keys in (("nvidia.com/gpu", "whole", ("GPU-h-0-0", "GPU-h-0-2")),
                                 ("nvidia.com/gpu.shared", "ts", ("GPU-h-0-1",))):
        ids = {d.id for d in plugin_devices(inv)[resource]}
        cands, rejected = candidates([bound[name]], "h-0", resource, inv, ids)
        assert not rejected and [c.wanted for c in cands] == [keys]


def test_record_marks_a_memory_only_slice_uncapped_and_carries_hami_priority() -> None:
    """HAMi `gpumem` without `gpucores` states no compute: the record keeps the charged share
    (quotas bound it) but says it is no cap; `nvidia.com/priority` rides along to the node."""
    from gpugov.k8s.scheduler.held import allocation_record
    (obj,) = nodes(pool("h", 2, [{"index": "0-1", "mode": "soft"}]))
    ext = extender(obj)
    got = {}
    for name, limits in (
            ("memonly", {names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "20000",
                         "nvidia.com/priority": "0"}),
            ("capped", {names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "20000",
                        "nvidia.com/gpucores": "30"})):
        p = pod(name, limits=limits)
        info = pod_info(p, {})
        req, why = ext.request_of(p)
        assert req is not None and not why
        alloc = ext.choose(req, "h-0")
        assert info.request is not None
        (got[name],) = allocation_record(
            ext.view.nodes["h-0"], ext.state, alloc.node, req, req.gpu_milli, alloc,
            info.request.mode, compute_stated=info.request.milli is not None,
            priority=info.request.priority).devices
    m, c = got["memonly"], got["capped"]
    assert (m.compute_limited, m.priority, m.memory_mib) == (False, 0, 20000)
    assert m.milli > 0  # still charged for placement and quotas
    assert (c.compute_limited, c.priority, c.milli) == (True, None, 300)


def test_the_schedulers_own_records_mark_memory_only_slices_uncapped_with_their_priority(
        ) -> None:
    """The binding's record (what the device plugin reads) says a HAMi memory-only slice is not
    compute-limited and carries `nvidia.com/priority`; a slice that names cores stays capped."""
    st = state(nodes(pool("soft", 1, [{"index": "0", "mode": "soft"}])))
    st.set_pod(pod("mem", limits={names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "8000",
                                  "nvidia.com/priority": "1"}))
    st.set_pod(pod("cores", limits={names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "8000",
                                    "nvidia.com/gpucores": "30"}))
    binds = {b.name: b.record for b in st.cycle(T0).binds}
    (mem,) = binds["mem"].devices
    (cores,) = binds["cores"].devices
    assert (mem.compute_limited, mem.priority) == (False, 1)
    # no nvidia.com/priority: its priority class (the default, preemptible) makes it
    # best-effort (`translate.qos_priority`)
    assert (cores.compute_limited, cores.priority) == (True, 1)
