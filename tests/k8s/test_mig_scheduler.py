"""Several MIG instances per pod and time-sliced MIG on the scheduler (no cluster): nodes as
`gpugov dev up` makes them, pods translated from their spec, records written, re-adopted after
a restart, and matched by the device plugin's handshake."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_scheduler_modes import T0, bind, nodes, pod, pool, state, submit  # noqa: E402

from gpugov.k8s.annotations import (  # noqa: E402
    INVENTORY,
    AnnotationError,
    decode_allocation,
    decode_inventory,
    encode_inventory,
)
from gpugov.k8s.annotations import MigInstance as InvMig  # noqa: E402
from gpugov.k8s.scheduler import names  # noqa: E402
from gpugov.k8s.scheduler.harness import invariant_problems as double_bookings  # noqa: E402
from gpugov.node.deviceplugin.handshake import candidates, matching  # noqa: E402
from gpugov.node.deviceplugin.resources import plugin_devices  # noqa: E402

TWO = {"nvidia.com/mig-1g.10gb": "2"}
REPLICA = {"nvidia.com/mig-1g.10gb.shared": "1"}


def time_sliced(obj: dict, profile: str, replicas: int) -> dict:
    """The node's inventory with every `profile` instance time-sliced into `replicas`, as the
    agent publishes it under NVIDIA's time-slicing config for `nvidia.com/mig-<profile>`."""
    ann = obj["metadata"]["annotations"]
    inv = decode_inventory(ann[INVENTORY])
    devs = []
    for d in inv.devices:
        mig = tuple(type(m)(m.profile, m.start, m.uuid, replicas if m.profile == profile else 1)
                    for m in d.mig)
        devs.append(type(d)(**{**{f: getattr(d, f) for f in d.__slots__}, "mig": mig}))
    ann[INVENTORY] = encode_inventory(type(inv)(tuple(devs), inv.power_budget_w))
    return obj


def test_a_pod_asking_two_instances_gets_two_and_a_v2_record_the_plugin_matches() -> None:
    (obj,) = nodes(pool("h", 1, [{"index": "0", "mode": "mig", "layout": ["1g.10gb"] * 7}]))
    st = state([obj])
    objs = submit(st, pod("two", limits=TWO), pod("five", limits={"nvidia.com/mig-1g.10gb": "5"}),
                  pod("one", limits={"nvidia.com/mig-1g.10gb": "1"}))
    plan = st.cycle(T0)
    bound = bind(st, plan, objs)
    assert sorted(bound) == ["five", "two"]  # seven instances: 2 + 5, the third waits
    text = bound["two"]["metadata"]["annotations"][names.ANN_ALLOCATION]
    assert json.loads(text)["v"] == 2
    rec = decode_allocation(text)
    assert [d.mig_profile for d in rec.devices] == ["1g.10gb"] * 2
    assert len({(d.index, d.mig_start) for d in rec.devices}) == 2
    assert all(d.mig_uuid for d in rec.devices)
    assert not double_bookings(list(bound.values()), {"h-0": 1})
    (cond,) = plan.conditions
    assert cond.name == "one"  # the cluster's GPUs are all held
    # the device plugin matches the kubelet's two instance IDs to this pod
    inv = decode_inventory(obj["metadata"]["annotations"][INVENTORY])
    devs = plugin_devices(inv)["nvidia.com/mig-1g.10gb"]
    ids = {d.mig_uuid: d for d in devs}
    cands, rejected = candidates(list(bound.values()), "h-0", "nvidia.com/mig-1g.10gb", inv,
                                 {d.id for d in devs})
    assert not rejected
    want = [ids[d.mig_uuid] for d in rec.devices]
    assert [c.name for c in matching(cands, want)] == ["two"]


def test_several_instances_are_readopted_on_their_instances_after_a_restart() -> None:
    (obj,) = nodes(pool("h", 2, [{"index": "0", "mode": "mig", "layout": ["1g.10gb"] * 7},
                                 {"index": "1", "mode": "mig", "layout": ["1g.10gb"] * 7}]))
    st = state([obj])
    objs = submit(st, *[pod(f"p{i}", limits={"nvidia.com/mig-1g.10gb": "3"}) for i in range(4)])
    bound = bind(st, st.cycle(T0), objs)
    assert len(bound) == 4  # 12 of 14 instances
    fresh = state([obj])
    later = submit(fresh, *bound.values(), pod("last", limits=TWO),
                   pod("more", limits={"nvidia.com/mig-1g.10gb": "1"}))
    plan = fresh.cycle(T0 + 1)
    assert [b.name for b in plan.binds] == ["last"] and fresh.errors["allocation"] == 0
    done = {**bound, **bind(fresh, plan, later)}
    assert not double_bookings(list(done.values()), {"h-0": 2})


def test_time_sliced_mig_instances_serve_replicas_capped_at_their_share() -> None:
    """1g.10gb time-sliced ×4: four replicas bind, each capped at instance ÷ 4 (or what it
    names), a fifth waits with `replicas`; the record is v2 and names the instance; a whole
    1g.10gb pod finds no instance to take whole."""
    (obj,) = nodes(pool("h", 1, [{"index": "0", "mode": "mig",
                                  "layout": ["3g.40gb", "2g.20gb", "1g.10gb"]}]))
    time_sliced(obj, "1g.10gb", 4)
    st = state([obj])
    objs = submit(st, *[pod(f"r{i}", limits=REPLICA) for i in range(3)],
                  pod("named", limits={**REPLICA, "nvidia.com/gpumem": "2000"}),
                  pod("r9", limits=REPLICA), pod("whole", limits={"nvidia.com/mig-1g.10gb": "1"}))
    plan = st.cycle(T0)
    bound = bind(st, plan, objs)
    assert sorted(bound) == ["named", "r0", "r1", "r2"]
    for name, mem in (("r0", 9984 // 4), ("named", 2000)):
        text = bound[name]["metadata"]["annotations"][names.ANN_ALLOCATION]
        assert json.loads(text)["v"] == 2
        rec = decode_allocation(text)
        (d,) = rec.devices
        assert (d.mig_profile, d.mig_replicas, d.memory_mib, str(rec.isolation)) == (
            "1g.10gb", 4, mem, "soft")
    reasons = {c.name: c.message for c in plan.conditions}
    assert "replicas" in reasons["r9"] and "mig-slice" in reasons["whole"]
    assert not double_bookings(list(bound.values()), {"h-0": 1})
    # the plugin advertises the replicas under .shared and matches a replica to its pod
    inv = decode_inventory(obj["metadata"]["annotations"][INVENTORY])
    res = plugin_devices(inv)
    assert len(res["nvidia.com/mig-1g.10gb.shared"]) == 4
    assert "nvidia.com/mig-1g.10gb" not in res
    shared = res["nvidia.com/mig-1g.10gb.shared"]
    cands, rejected = candidates([bound["named"]], "h-0", "nvidia.com/mig-1g.10gb.shared", inv,
                                 {d.id for d in shared})
    assert not rejected and [c.name for c in matching(cands, shared[:1])] == ["named"]
    # re-adopted after a restart: the instance still has no replica free
    fresh = state([obj])
    submit(fresh, *bound.values(), pod("late", limits=REPLICA))
    plan = fresh.cycle(T0 + 1)
    assert not plan.binds and "replicas" in plan.conditions[0].message


def test_old_records_still_read_and_a_v1_record_cannot_name_a_replica() -> None:
    v1 = ('{"v":1,"node":"n","isolation":"hard","devices":[{"index":0,"uuid":"GPU-a",'
          '"mode":"mig","milli":142,"memoryMiB":9984,"mig":{"profile":"1g.10gb","start":6}}]}')
    rec = decode_allocation(v1)
    assert rec.devices[0].mig_start == 6 and rec.devices[0].mig_replicas == 1
    bad = v1.replace('"start":6}', '"start":6,"replicas":4}')
    try:
        decode_allocation(bad)
    except AnnotationError as e:
        assert "mig.replicas" in str(e) and "v=2" in str(e)
    else:
        raise AssertionError("a v1 record naming a replica was read")
    twice = v1.replace('"v":1', '"v":2').replace(']}', ',' + v1[v1.index('{"index"'):-2] + ']}')
    try:
        decode_allocation(twice)
    except AnnotationError as e:
        assert "named twice" in str(e)
    else:
        raise AssertionError("the same instance twice was read")
    for v in ("3", "true"):
        try:
            decode_allocation(v1.replace('"v":1', f'"v":{v}'))
        except AnnotationError as e:
            assert "v=1 or v=2" in str(e)
        else:
            raise AssertionError(v)


def _agent_answers(obj: dict, created: dict[tuple[int, str, int], str],
                   results: dict[str, str]) -> dict:
    """What the node agent publishes after answering: the new instances in its inventory and
    the outcome of each request."""
    from gpugov.k8s.annotations import MIG_REQUESTS_STATE, encode_mig_requests_state
    ann = obj["metadata"]["annotations"]
    inv = decode_inventory(ann[INVENTORY])
    devs = []
    for d in inv.devices:
        extra = tuple(InvMig(p, s, u) for (g, p, s), u in created.items() if g == d.index)
        devs.append(type(d)(**{**{f: getattr(d, f) for f in d.__slots__},
                               "mig": d.mig + extra}))
    ann[INVENTORY] = encode_inventory(type(inv)(tuple(devs), inv.power_budget_w))
    ann[MIG_REQUESTS_STATE] = encode_mig_requests_state(results, "2027-01-15T08:00:00Z")
    return obj


def _on_demand_node(layout: list[str]) -> dict:
    """Two H100s in MIG mode with `layout` each (empty: no instance yet), on demand."""
    (obj,) = nodes(pool("h", 2, [{"index": "0-1", "mode": "mig",
                                  "layout": layout or ["1g.10gb"]}]))
    ann = obj["metadata"]["annotations"]
    inv = decode_inventory(ann[INVENTORY])
    devs = tuple(type(d)(**{**{f: getattr(d, f) for f in d.__slots__}, "mig_on_demand": True,
                            "mig": d.mig if layout else ()}) for d in inv.devices)
    ann[INVENTORY] = encode_inventory(type(inv)(devs, inv.power_budget_w))
    return obj


def test_a_mig_pod_no_instance_fits_asks_the_agent_and_binds_once_it_is_created() -> None:
    from gpugov.k8s.annotations import MIG_REQUESTS, decode_mig_requests
    obj = _on_demand_node(["3g.40gb"])  # GPU 0 and 1: 3g.40gb@0 (whole), the rest free
    st = state([obj])
    objs = submit(st, pod("a", limits={"nvidia.com/mig-1g.10gb": "2"}))
    plan = st.cycle(T0)
    assert not plan.binds
    (cond,) = plan.conditions
    assert cond.code == "mig-creating" and "1g.10gb@" in cond.message
    want = decode_mig_requests(plan.node_annotations["h-0"][MIG_REQUESTS])
    assert len(want) == 2 and {r.gpu for r in want} == {want[0].gpu}
    assert all(r.profile == "1g.10gb" and r.start >= 4 for r in want)  # beside 3g.40gb@0
    assert all(r.pod == "team-a/a" for r in want)
    obj["metadata"]["annotations"][MIG_REQUESTS] = plan.node_annotations["h-0"][MIG_REQUESTS]
    st.set_node(obj)
    assert not st.cycle(T0 + 1).node_annotations  # asked once, not every cycle
    _agent_answers(obj, {(r.gpu, r.profile, r.start): f"MIG-new-{r.start}" for r in want},
                   {r.key: "created" for r in want})
    st.set_node(obj)
    plan = st.cycle(T0 + 2)
    (b,) = plan.binds
    assert sorted((d.index, d.mig_start, d.mig_uuid) for d in b.record.devices) == sorted(
        (r.gpu, r.start, f"MIG-new-{r.start}") for r in want)
    bound = bind(st, plan, objs)
    assert plan.node_annotations["h-0"][MIG_REQUESTS] is None  # nothing is asked any more
    assert not double_bookings(list(bound.values()), {"h-0": 2})


def test_a_refused_creation_is_the_pods_reason_and_is_not_asked_again() -> None:
    from gpugov.k8s.annotations import MIG_REQUESTS, decode_mig_requests
    obj = _on_demand_node(["4g.40gb"])
    st = state([obj])
    submit(st, pod("big", limits={"nvidia.com/mig-3g.40gb": "1"}))
    plan = st.cycle(T0)
    (r,) = decode_mig_requests(plan.node_annotations["h-0"][MIG_REQUESTS])
    assert (r.profile, r.start) == ("3g.40gb", 4)
    obj["metadata"]["annotations"][MIG_REQUESTS] = plan.node_annotations["h-0"][MIG_REQUESTS]
    _agent_answers(obj, {}, {r.key: "refused: GPU 0: the driver refused 3g.40gb@4: "
                                    "Insufficient Resources"})
    st.set_node(obj)
    plan = st.cycle(T0 + 1)
    (cond,) = plan.conditions  # the other GPU is asked instead, and the pod says why
    assert cond.code == "mig-creating" and "Insufficient Resources" in cond.message
    (again,) = decode_mig_requests(plan.node_annotations["h-0"][MIG_REQUESTS])
    assert again.gpu != r.gpu
    obj["metadata"]["annotations"][MIG_REQUESTS] = plan.node_annotations["h-0"][MIG_REQUESTS]
    _agent_answers(obj, {}, {again.key: "refused: GPU 1: profile 3g.40gb is not available"})
    st.set_node(obj)
    plan = st.cycle(T0 + 2)
    (cond,) = plan.conditions  # no spot left: the refusal is its reason
    assert cond.code == "mig-refused" and "not available" in cond.message
    assert plan.node_annotations["h-0"][MIG_REQUESTS] is None  # neither is asked again
    del obj["metadata"]["annotations"][MIG_REQUESTS]
    st.set_node(obj)
    assert not st.cycle(T0 + 3).node_annotations


def test_a_sealed_tenant_never_gets_an_instance_made_beside_another_tenant() -> None:
    from gpugov.k8s.annotations import MIG_REQUESTS, decode_mig_requests
    obj = _on_demand_node([])
    st = state([obj], [{"metadata": {"name": "u"}, "spec": {"namespaces": ["ext"],
                                                             "queue": "qa", "trust": "untrusted"}}])
    objs = submit(st, pod("mine", limits={"nvidia.com/mig-1g.10gb": "1"}))
    plan = st.cycle(T0)
    (r,) = decode_mig_requests(plan.node_annotations["h-0"][MIG_REQUESTS])
    obj["metadata"]["annotations"][MIG_REQUESTS] = plan.node_annotations["h-0"][MIG_REQUESTS]
    _agent_answers(obj, {(r.gpu, r.profile, r.start): "MIG-x"}, {r.key: "created"})
    st.set_node(obj)
    bind(st, st.cycle(T0 + 1), objs)
    submit(st, pod("theirs", "ext", limits={"nvidia.com/mig-1g.10gb": "1"}))
    plan = st.cycle(T0 + 2)
    (w,) = decode_mig_requests(plan.node_annotations["h-0"][MIG_REQUESTS])
    assert w.gpu != r.gpu  # the untrusted pod's instance goes on the GPU nobody uses


def test_a_single_strategy_pod_lands_only_where_the_product_label_matches() -> None:
    """`nvidia.com/gpu: 1` with nodeSelector `nvidia.com/gpu.product: …-MIG-1g.10gb` (MIG
    single strategy) is a 1g.10gb instance, and the selector is a node constraint: never on
    a node whose product label differs (the kubelet would reject it)."""
    (obj,) = nodes(pool("h", 1, [{"index": "0", "mode": "mig", "layout": ["1g.10gb"] * 7}]))
    st = state([obj])
    sel = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}
    objs = submit(st, pod("s", limits={"nvidia.com/gpu": "1"}, nodeSelector=sel))
    plan = st.cycle(T0)
    assert not plan.binds and "node-selector" in plan.conditions[0].message
    obj["metadata"]["labels"]["nvidia.com/gpu.product"] = sel["nvidia.com/gpu.product"]
    st.set_node(obj)
    (b,) = st.cycle(T0 + 1).binds
    (d,) = b.record.devices
    assert (b.node, d.mig_profile) == ("h-0", "1g.10gb") and d.mig_uuid
    assert objs


def test_hostile_mig_annotations_are_refused_naming_the_field() -> None:
    """The on-demand and time-sliced MIG fields are bounded and named when wrong."""
    from gpugov.k8s.annotations import (
        decode_mig_requests,
        decode_mig_requests_state,
    )
    bad = {
        '{"v":1,"instances":[' + ",".join(['{"gpu":0,"profile":"1g.10gb","start":0}'] * 65)
        + "]}": "at most 64",
        '{"v":1,"instances":[{"gpu":-1,"profile":"1g.10gb","start":0}]}': "gpu",
        '{"v":1,"instances":[{"gpu":0,"profile":"1g.10gb","start":"x"}]}': "start",
        '{"v":1,"instances":[7]}': "instances[0]",
        '{"v":2,"instances":[]}': "v=1",
    }
    for text, field in bad.items():
        try:
            decode_mig_requests(text)
        except AnnotationError as e:
            assert field in str(e), (field, str(e))
        else:
            raise AssertionError(text[:60])
    try:
        decode_mig_requests_state('{"v":1,"time":"t","results":{"0/1g.10gb@0":7}}')
    except AnnotationError as e:
        assert "results" in str(e)
    else:
        raise AssertionError("a non-string result was read")
    (obj,) = nodes(pool("h", 1, [{"index": "0", "mode": "mig", "layout": ["1g.10gb"]}]))
    inv = json.loads(obj["metadata"]["annotations"][INVENTORY])
    inv["devices"][0]["mig"][0]["replicas"] = 10**9
    try:
        decode_inventory(json.dumps(inv))
    except AnnotationError as e:
        assert "mig[0].replicas" in str(e) and "1..64" in str(e)
    else:
        raise AssertionError("a billion replicas were read")
