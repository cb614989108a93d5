"""The scheduler against what a tenant can write (issue 18), on plain API objects.

Nothing a tenant writes is an input to a decision: a pod's request comes from its spec, its
queue and trust tier from the Tenants; one poisoned pod never stops a cycle; a queue tree
with a cycle or an over-committed subtree loses only that part; a device a live pod may be
on is never given to another (conflicting or missing allocation records). Plus a fuzz of
pod objects through translation and a cycle.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.state import INVALID, NO_QUEUE, SchedulerState
from gpugov.k8s.scheduler.translate import (
    MAX_CPU_MILLI,
    MAX_POD_GPUS,
    build_config,
    engine_request,
    pod_info,
)
from gpugov.model.isolation import IsolationLevel

T0 = 1_800_000_000.0


def node(name: str, gpus: int = 4) -> dict:
    return {"metadata": {"name": name, "labels": {names.PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi",
                                       names.GPU_RESOURCE: str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, ns: str = "team-a", limits: dict | None = None, ann: dict | None = None,
        requests: dict | None = None, created: int = 0, scheduler: str = names.SCHEDULER_NAME,
        node_name: str = "") -> dict:
    spec: dict = {"schedulerName": scheduler, "containers": [{"name": "c", "resources": {
        "limits": {names.GPU_RESOURCE: "1"} if limits is None else limits,
        "requests": requests or {}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}",
                         "annotations": dict(ann or {}), "labels": {},
                         "creationTimestamp": f"2027-01-15T08:{created // 60:02d}:"
                                              f"{created % 60:02d}Z"},
            "spec": spec, "status": {"phase": "Pending"}}


def queue(name: str, parent: str | None = None, **spec) -> dict:
    return {"metadata": {"name": name}, "spec": {**spec, **({"parent": parent} if parent
                                                           else {})}}


def tenant(name: str, queue_name: str, namespaces: list[str] | None = None,
           trust: str = "internal", selector: dict | None = None) -> dict:
    spec: dict = {"queue": queue_name, "trust": trust}
    if selector is not None:
        spec["namespaceSelector"] = selector
    else:
        spec["namespaces"] = namespaces or []
    return {"metadata": {"name": name}, "spec": spec}


def make(nodes: int = 1, gpus: int = 4, queues: list[dict] | None = None,
         tenants: list[dict] | None = None) -> SchedulerState:
    st_ = SchedulerState()
    for i in range(nodes):
        st_.set_node(node(f"n{i}", gpus))
    for q in queues if queues is not None else [queue("qa"), queue("qb")]:
        st_.set_object("queue", q)
    for t in tenants if tenants is not None else [tenant("a", "qa", ["team-a"]),
                                                 tenant("b", "qb", ["team-b"])]:
        st_.set_object("tenant", t)
    return st_


def bind(st_: SchedulerState, plan, objs: dict[str, dict]) -> None:
    """What the apiserver does with the plan's Bindings."""
    from gpugov.k8s.annotations import encode_allocation

    for b in plan.binds:
        st_.bind_result(b, True)
        obj = objs[b.name]
        obj["metadata"]["annotations"][names.ANN_ALLOCATION] = encode_allocation(b.record)
        obj["spec"]["nodeName"] = b.node
        st_.set_pod(obj)


def submit(st_: SchedulerState, *objs: dict) -> dict[str, dict]:
    for o in objs:
        st_.set_pod(o)
    return {o["metadata"]["name"]: o for o in objs}


# -- item 1/2: request, queue and tier from the spec and the Tenants ----------------------

def test_a_patched_queue_annotation_charges_nothing_to_the_other_queue() -> None:
    st_ = make(queues=[queue("qa", limit={"gpu": 1}), queue("qb")])
    objs = submit(st_, pod("mine"), pod("sneaky", ann={names.ANN_QUEUE: "qb",
                                                       names.ANN_TENANT: "b"}, created=1))
    plan = st_.cycle(T0)
    assert [b.name for b in plan.binds] == ["mine"]
    (cond,) = plan.conditions
    assert cond.name == "sneaky" and cond.message.startswith("gpugov: over-quota")
    assert "qa" in cond.message
    bind(st_, plan, objs)
    # a PATCH after creation changes nothing either
    objs["sneaky"]["metadata"]["annotations"][names.ANN_QUEUE] = "qb"
    st_.set_pod(objs["sneaky"])
    plan = st_.cycle(T0 + 1)
    assert not plan.binds
    assert st_.cycle(T0 + 2).queue_status.get("qb", {"admitted": 0})["admitted"] == 0


def test_a_forged_trust_tier_or_request_does_not_unseal_an_untrusted_tenant() -> None:
    st_ = make(nodes=1, gpus=2, tenants=[tenant("x", "qa", ["ext"], trust="untrusted"),
                                         tenant("b", "qb", ["team-b"], trust="trusted")])
    forged = {names.ANN_TRUST: "trusted", names.ANN_REQUEST: json.dumps(
        {"v": 1, "count": 1, "mode": "timeslice"})}
    submit(st_, pod("soft", "ext", {names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "10000"},
                    forged),
           pod("whole", "ext", ann=forged, created=1))
    plan = st_.cycle(T0)
    by = {b.name: b for b in plan.binds}
    # the untrusted tenant's soft slice is refused (not hard isolation), whatever it claims
    assert "isolation" in {c.name: c.message for c in plan.conditions}["soft"]
    assert by["whole"].record.isolation is IsolationLevel.HARD
    assert st_.pods["ext/whole"].trust.value == "untrusted"


def test_a_pod_without_gpus_but_forged_annotations_books_nothing() -> None:
    st_ = make(queues=[queue("qa"), queue("qb", limit={"gpu": 1})])
    forged = {names.ANN_REQUEST: json.dumps({"v": 1, "count": 4}), names.ANN_QUEUE: "qb"}
    objs = submit(st_, pod("cpu-only", limits={}, requests={"cpu": "1"}, ann=forged))
    plan = st_.cycle(T0)
    (b,) = plan.binds
    assert b.record.devices == ()
    assert plan.queue_status["qa"]["usage"]["gpu"] == 0
    assert plan.queue_status["qb"]["usage"]["gpu"] == 0
    bind(st_, plan, objs)
    # the victim's own pod still gets its GPU
    submit(st_, pod("victim", "team-b"))
    assert [b.name for b in st_.cycle(T0 + 1).binds] == ["victim"]


def test_namespace_labels_choose_the_tenant_and_a_relabel_recharges_pending_pods() -> None:
    st_ = make(queues=[queue("qx", limit={"gpu": 0}), queue("qy")],
               tenants=[tenant("x", "qx", selector={"matchLabels": {"team": "x"}}),
                        tenant("y", "qy", selector={"matchLabels": {"team": "y"}})])
    st_.set_object("namespace", {"metadata": {"name": "ns1", "labels": {"team": "x"}}})
    submit(st_, pod("p", "ns1"), pod("early", "unseen"))
    plan = st_.cycle(T0)
    msgs = {c.name: c.message for c in plan.conditions}
    assert not plan.binds and "qx" in msgs["p"]
    assert "has not been seen yet" in msgs["early"]  # no guess from missing labels
    st_.set_object("namespace", {"metadata": {"name": "ns1", "labels": {"team": "y"}}})
    assert [b.name for b in st_.cycle(T0 + 1).binds] == ["p"]
    assert st_.pods["ns1/p"].queue == "qy"


def test_a_tenant_change_recharges_pending_pods() -> None:
    st_ = make(queues=[queue("qa", limit={"gpu": 0}), queue("qb")])
    submit(st_, pod("p"))
    assert not st_.cycle(T0).binds
    st_.set_object("tenant", tenant("a", "qb", ["team-a"]))
    assert [b.name for b in st_.cycle(T0 + 1).binds] == ["p"]


# -- item 4: one poisoned pod never stops the cycle -----------------------------------------

POISON = {
    "gpu-1e400": ({names.GPU_RESOURCE: "1e400"}, {}),
    "cpu-1e400": (None, {"cpu": "1e400"}),
    "mem-1e400": (None, {"memory": "1e400"}),
    "cpu-9e18": (None, {"cpu": "9e18"}),
    "mem-9e18": (None, {"memory": "9e18"}),
    "gpu-9e18": ({names.GPU_RESOURCE: "9e18"}, {}),
    "gpu-many": ({names.GPU_RESOURCE: str(MAX_POD_GPUS + 1)}, {}),
    "gpumem-9e18": ({names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "9e18"}, {}),
    "long": ({names.GPU_RESOURCE: "1" * 80}, {}),
}


def test_poisoned_pods_get_a_condition_and_every_other_pod_binds_in_the_same_cycle() -> None:
    st_ = make(nodes=2, gpus=4)
    submit(st_, *[pod(n, limits=lim, requests=req, created=i)
                  for i, (n, (lim, req)) in enumerate(POISON.items())],
           *[pod(f"good{i}", created=30 + i) for i in range(3)])
    plan = st_.cycle(T0)
    assert sorted(b.name for b in plan.binds) == ["good0", "good1", "good2"]
    msgs = {c.name: (c.code, c.message) for c in plan.conditions}
    assert set(msgs) == set(POISON)
    assert all(code == INVALID for code, _ in msgs.values())
    assert "out of range" in msgs["gpu-1e400"][1] and "out of range" in msgs["cpu-1e400"][1]
    assert "CPU cores" in msgs["cpu-9e18"][1] and "MiB of memory" in msgs["mem-9e18"][1]
    assert "out of range" in msgs["gpu-9e18"][1]
    assert f"no node has more than {MAX_POD_GPUS}" in msgs["gpu-many"][1]
    assert st_.errors["pod"] == len(POISON)


def test_an_exception_in_one_pods_decision_is_confined_to_that_pod(monkeypatch) -> None:
    st_ = make(nodes=1, gpus=4)
    submit(st_, pod("bomb"), pod("ok", created=1))
    real = SchedulerState.pod_request

    def boom(self, info):
        if info.name == "bomb":
            raise RuntimeError("kaboom")
        return real(self, info)

    monkeypatch.setattr(SchedulerState, "pod_request", boom)
    plan = st_.cycle(T0)
    assert [b.name for b in plan.binds] == ["ok"]
    (cond,) = plan.conditions
    assert cond.name == "bomb" and "RuntimeError: kaboom" in cond.message
    assert st_.errors["pod"] == 1
    assert not st_.cycle(T0 + 1).conditions  # written once, not retried every cycle


def test_a_record_that_cannot_be_written_poisons_only_its_pod(monkeypatch) -> None:
    st_ = make(nodes=1, gpus=4)
    submit(st_, pod("a"), pod("b", created=1))
    real = SchedulerState.allocation_record

    def flaky(self, info, alloc):
        if info.name == "a":
            raise OverflowError("Python int too large to convert to C long")
        return real(self, info, alloc)

    monkeypatch.setattr(SchedulerState, "allocation_record", flaky)
    plan = st_.cycle(T0)
    assert [b.name for b in plan.binds] == ["b"]
    assert [c.name for c in plan.conditions] == ["a"]


def test_a_control_cycle_that_raises_finds_the_pod_and_goes_on(monkeypatch) -> None:
    from gpugov.model.cluster import ClusterState

    st_ = make(nodes=1, gpus=4)
    submit(st_, pod("bomb"), pod("ok", created=1))
    real = ClusterState.feasible

    def feasible(self, req, *a, **kw):
        if req.name == "team-a/bomb":
            raise OverflowError("one pod's numbers")
        return real(self, req, *a, **kw)

    monkeypatch.setattr(ClusterState, "feasible", feasible)
    plan = st_.cycle(T0)  # the engine raised inside the cycle: the culprit is found
    assert [c.name for c in plan.conditions] == ["bomb"] and st_.errors["cycle"] == 1
    assert [b.name for b in st_.cycle(T0 + 1).binds] == ["ok"]


# -- item 9: queue tree errors stay in their subtree ----------------------------------------

def test_parent_cycles_leave_out_exactly_the_cycle_and_what_hangs_below_it() -> None:
    qs = [queue("a", parent="b"), queue("b", parent="a"), queue("self", parent="self"),
          queue("x", parent="z"), queue("y", parent="x"), queue("z", parent="y"),
          queue("under-a", parent="a"), queue("root"), queue("leaf", parent="root"),
          queue("lone")]
    build = build_config(qs, [])
    assert build.config is not None
    assert sorted(q.name for q in build.config.queues) == ["leaf", "lone", "root"]
    assert set(build.excluded) == {"a", "b", "self", "x", "y", "z", "under-a"}
    assert "cycle (a -> b -> a)" in build.excluded["a"]
    assert "cycle (self -> self)" in build.excluded["self"]
    assert "x -> z -> y -> x" in build.excluded["x"]
    assert "parent 'a' is invalid" in build.excluded["under-a"]

    st_ = make(queues=qs, tenants=[tenant("l", "leaf", ["team-l"]),
                                   tenant("c", "under-a", ["team-c"])])
    submit(st_, pod("fine", "team-l"), pod("stuck", "team-c"))
    plan = st_.cycle(T0)
    assert [b.name for b in plan.binds] == ["fine"]
    ((name, code, msg),) = [(c.name, c.code, c.message) for c in plan.conditions]
    assert name == "stuck" and code == NO_QUEUE and "parent 'a' is invalid" in msg


def test_an_overcommitted_subtree_is_left_out_and_its_siblings_keep_scheduling() -> None:
    qs = [queue("org", quota={"gpu": 4}), queue("t1", parent="org", quota={"gpu": 3}),
          queue("t2", parent="org", quota={"gpu": 3}), queue("other", quota={"gpu": 1})]
    build = build_config(qs, [])
    assert build.config is not None
    assert sorted(q.name for q in build.config.queues) == ["org", "other", "t1"]
    assert "t2" in build.excluded and "left out" in build.excluded["t2"]


# -- allocation records: the binding wins, never a device twice -----------------------------

REC = ('{"v":1,"node":"n0","isolation":"hard","devices":[{"index":%d,"mode":"exclusive",'
       '"milli":1000,"memoryMiB":81920}]}')


def test_an_edited_record_never_gives_a_device_to_a_second_pod() -> None:
    st_ = make(nodes=1, gpus=4)
    first = pod("first", node_name="n0", ann={names.ANN_ALLOCATION: REC % 0})
    second = pod("second", node_name="n0", ann={names.ANN_ALLOCATION: REC % 1}, created=1)
    submit(st_, first, second)
    st_.cycle(T0)
    # the later pod's record is edited to name the earlier pod's device; a rebuild follows
    second["metadata"]["annotations"][names.ANN_ALLOCATION] = REC % 0
    st_.set_pod(second)
    st_.set_object("queue", queue("qa", weight=2))  # any Queue edit rebuilds
    objs = submit(st_, *[pod(f"new{i}", created=10 + i) for i in range(3)])
    plan = st_.cycle(T0 + 1)
    got = sorted(b.record.devices[0].index for b in plan.binds)
    assert 0 not in got and len(got) == 2  # `second` still holds one device, `first` its own
    assert "conflicts" in st_.held["team-a/second"]
    bind(st_, plan, objs)
    # the earlier pod editing its record cannot take the later one's device either
    fresh = make(nodes=1, gpus=2)
    a = pod("a", node_name="n0", ann={names.ANN_ALLOCATION: REC % 1})  # edited from 0
    b = pod("b", node_name="n0", ann={names.ANN_ALLOCATION: REC % 1}, created=1)
    submit(fresh, a, b, pod("c", created=2))
    assert not fresh.cycle(T0).binds  # a keeps 1 (earliest), b holds 0: nothing is free


def test_a_gpu_pod_bound_by_another_path_is_counted_on_its_node() -> None:
    st_ = make(nodes=1, gpus=4)
    foreign = pod("foreign", limits={names.GPU_RESOURCE: "2"}, scheduler="default-scheduler",
                  node_name="n0")
    preset = pod("preset", node_name="n0", created=1)  # gpugov's name, nodeName at creation
    objs = submit(st_, foreign, preset, *[pod(f"p{i}", created=10 + i) for i in range(3)])
    plan = st_.cycle(T0)
    assert len(plan.binds) == 1  # 4 GPUs: 2 + 1 held for pods gpugov did not place
    assert "without gpugov's allocation record" in st_.held["team-a/foreign"]
    bind(st_, plan, objs)
    st_.delete_pod("team-a/foreign")
    assert len(st_.cycle(T0 + 1).binds) == 2
    # a pod without GPUs bound elsewhere holds nothing
    cpu = pod("cpu", limits={}, scheduler="default-scheduler", node_name="n0")
    st_.set_pod(cpu)
    assert "team-a/cpu" not in st_.pods


def test_a_preset_node_pod_counts_against_its_tenants_queue() -> None:
    st_ = make(nodes=1, gpus=4, queues=[queue("qa", limit={"gpu": 2}), queue("qb")])
    preset = pod("preset", limits={names.GPU_RESOURCE: "2"}, node_name="n0")
    submit(st_, preset, pod("more", created=1), pod("theirs", "team-b", created=2))
    plan = st_.cycle(T0)
    # 2 GPUs are free on the node, but team-a's queue is full with what it placed itself
    assert [b.name for b in plan.binds] == ["theirs"]
    assert {c.name: c.message for c in plan.conditions}["more"].startswith(
        "gpugov: over-quota")
    assert "charged to queue qa" in st_.held["team-a/preset"]
    assert plan.queue_status["qa"]["usage"]["gpu"] == 2


def test_a_record_naming_another_node_is_not_adopted() -> None:
    st_ = make(nodes=2, gpus=1)
    moved = pod("moved", node_name="n0", ann={
        names.ANN_ALLOCATION: (REC % 0).replace('"n0"', '"n1"')})
    submit(st_, moved, pod("p0", created=1), pod("p1", created=2))
    plan = st_.cycle(T0)
    # moved is bound to n0 (the binding wins): n0 is held, n1 takes one new pod
    assert [(b.name, b.node) for b in plan.binds] == [("p0", "n1")]
    assert "names node n1, it is bound to n0" in st_.held["team-a/moved"]


# -- fuzz: pod objects a tenant could write ---------------------------------------------

_QUANTITIES = st.one_of(
    st.sampled_from(["1", "2", "0", "-1", "0.5", "500m", "1Gi", "16Gi", "1e400", "9e18",
                     "1e8000000", "2e3", "1k", "20k", "abc", "", " 1 ", "1e-400", "NaN",
                     "Infinity", "9" * 70]),
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True),
    st.none(), st.booleans(), st.lists(st.integers(), max_size=2))
_RESOURCES = st.sampled_from([
    names.GPU_RESOURCE, "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-3g.40gb", "nvidia.com/gpux", "cpu", "memory", "ephemeral-storage"])
_ANN_KEYS = st.sampled_from([
    names.ANN_REQUEST, names.ANN_QUEUE, names.ANN_TENANT, names.ANN_TRUST, names.ANN_ALLOCATION,
    "gpugov.io/model", "gpugov.io/isolation", "gpugov.io/topology", "gpugov.io/other",
    "gpu-fraction", "gpu-memory", "gpu-fraction-num-devices", "x"])
_ANN_VALUES = st.one_of(
    st.sampled_from(['{"v":1,"count":4}', '{"v":9}', "{not json", "qa", "qf", "trusted",
                     "untrusted", "hard", "none", "A100-SXM4-80GB", "0.5", "1e400", "required",
                     REC % 0, REC % 7, "2"]),
    st.text(max_size=20))
_ANY = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.none(), max_size=2))


def _maybe_garbage(strategy):
    return st.one_of(strategy, _ANY)


_RESOURCE_MAP = _maybe_garbage(st.dictionaries(_RESOURCES, _QUANTITIES, max_size=4))
_CONTAINER = _maybe_garbage(st.fixed_dictionaries(
    {"name": st.just("c")},
    optional={"resources": _maybe_garbage(st.fixed_dictionaries(
        {}, optional={"limits": _RESOURCE_MAP, "requests": _RESOURCE_MAP}))}))
_TOLERATION = _maybe_garbage(st.fixed_dictionaries({}, optional={
    "key": st.text(max_size=10), "operator": st.sampled_from(["Exists", "Equal", "Bogus"]),
    "value": st.text(max_size=5), "effect": st.sampled_from(["NoSchedule", "", "Weird"]),
    "tolerationSeconds": _ANY}))
_EXPR = _maybe_garbage(st.fixed_dictionaries({}, optional={
    "key": st.text(max_size=5), "operator": st.sampled_from(["In", "NotIn", "Exists"]),
    "values": _maybe_garbage(st.lists(st.text(max_size=5), max_size=3))}))
_AFFINITY = _maybe_garbage(st.fixed_dictionaries({}, optional={"nodeAffinity": _maybe_garbage(
    st.fixed_dictionaries({}, optional={
        "requiredDuringSchedulingIgnoredDuringExecution": _maybe_garbage(
            st.fixed_dictionaries({}, optional={"nodeSelectorTerms": _maybe_garbage(
                st.lists(_maybe_garbage(st.fixed_dictionaries({}, optional={
                    "matchExpressions": _maybe_garbage(st.lists(_EXPR, max_size=3)),
                    "matchFields": _ANY})), max_size=2))}))}))}))


@st.composite
def hostile_pods(draw, i: int) -> dict:
    spec: dict = {"schedulerName": draw(st.sampled_from([names.SCHEDULER_NAME] * 3
                                                        + ["default-scheduler", "other"])),
                  "containers": draw(_maybe_garbage(st.lists(_CONTAINER, max_size=3)))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(_maybe_garbage(st.lists(_CONTAINER, max_size=2)))
    if draw(st.booleans()):
        spec["tolerations"] = draw(_maybe_garbage(st.lists(_TOLERATION, max_size=3)))
    if draw(st.booleans()):
        spec["affinity"] = draw(_AFFINITY)
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(_maybe_garbage(st.dictionaries(
            st.sampled_from([names.PRODUCT_LABEL, "zone", "x"]),
            st.sampled_from(["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
                             "a", ""]), max_size=2)))
    if draw(st.booleans()):
        spec["priority"] = draw(_maybe_garbage(st.integers(-(2**40), 2**40)))
    if draw(st.integers(0, 9)) == 0:
        spec["nodeName"] = "n0"  # bound by another path: gpugov holds what it may use
    return {"metadata": {"name": f"f{i}", "namespace": "fuzz", "uid": f"uid-f{i}",
                         "annotations": draw(_maybe_garbage(
                             st.dictionaries(_ANN_KEYS, _ANN_VALUES, max_size=4))),
                         "labels": draw(_maybe_garbage(st.dictionaries(
                             st.sampled_from([names.PODGROUP_LABEL, "app"]),
                             st.text(max_size=5), max_size=2))),
                         "creationTimestamp": draw(st.sampled_from(
                             ["2027-01-15T08:00:00Z", "garbage", None]))},
            "spec": spec, "status": {"phase": "Pending"}}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzzed_pods_never_raise_and_never_stop_the_good_ones(data) -> None:
    fuzz = [data.draw(hostile_pods(i)) for i in range(data.draw(st.integers(1, 6)))]
    # two nodes; the fuzzed pods have a small queue of their own and may hold n0 at most
    st_ = make(nodes=2, gpus=8, queues=[
        queue("qa", quota={"gpu": 4}),
        queue("qf", limit={"gpu": 4, "cpu": 8, "memory": 16})],
        tenants=[tenant("a", "qa", ["team-a"]), tenant("f", "qf", ["fuzz"])])
    for obj in fuzz:
        t = time.perf_counter()
        info = pod_info(obj, st_.tenants)  # never raises
        assert time.perf_counter() - t < 5.0, "translation hangs"  # a hang detector only
        if not info.error:
            try:
                req = engine_request(info, 81920)
            except ValueError:
                pass
            else:
                assert 0 <= req.cpu_milli <= MAX_CPU_MILLI and req.gpu_count <= MAX_POD_GPUS
        st_.set_pod(obj)
    good = [pod(f"good{i}", created=0) for i in range(2)]
    submit(st_, *good)
    plan = st_.cycle(T0)  # never raises
    bound = {b.name for b in plan.binds}
    assert {"good0", "good1"} <= bound
    assert st_.errors["cycle"] == 0
    conditioned = {c.name for c in plan.conditions}
    for obj in fuzz:
        info = st_.pods.get(f"fuzz/{obj['metadata']['name']}")
        if info is None or info.node or info.scheduler != names.SCHEDULER_NAME:
            continue
        # every pending pod of ours is either bound or told why not
        assert info.key.split("/")[1] in bound | conditioned, info
        if info.error:
            assert info.name in conditioned and info.name not in bound


@pytest.mark.parametrize("value", ["1e400", "1e8000000", "9" * 10_000])
def test_translation_of_a_huge_quantity_answers_at_once(value: str) -> None:
    t = time.perf_counter()
    info = pod_info(pod("p", limits={names.GPU_RESOURCE: value}), None)
    assert info.error and time.perf_counter() - t < 5.0  # a hang detector only


@settings(max_examples=80, deadline=None)
@given(parents=st.lists(st.one_of(st.none(), st.integers(0, 7), st.just(99)), min_size=1,
                        max_size=8))
def test_any_parent_graph_keeps_exactly_the_sound_queues(parents) -> None:
    """Random parent links (cycles, self-parents, missing parents): `build_config` never
    raises and keeps exactly the queues whose parent chain reaches a root."""
    qs = [queue(f"q{i}", parent=None if p is None else f"q{p}") for i, p in enumerate(parents)]

    def sound(i: int) -> bool:
        seen = set()
        while parents[i] is not None:
            if i in seen or parents[i] >= len(parents):
                return False
            seen.add(i)
            i = parents[i]
        return True

    build = build_config(qs, [])
    kept = {q.name for q in build.config.queues} if build.config is not None else set()
    assert kept == {f"q{i}" for i in range(len(parents)) if sound(i)}
    assert set(build.excluded) == {f"q{i}" for i in range(len(parents))} - kept


def test_a_node_reporting_absurd_numbers_is_read_within_bounds() -> None:
    from gpugov.k8s.scheduler.translate import MAX_NODE_AMOUNT, node_info

    big = node("big")
    big["metadata"]["labels"][names.GPU_MEMORY_LABEL] = str(10**30)
    big["status"]["allocatable"].update(cpu="9e18", memory="9e18")
    info = node_info(big)
    assert info.spec.cpu_milli == info.spec.memory_mib == MAX_NODE_AMOUNT
    assert info.card_memory_mib == 0  # no card has that much: no memory slice lands there
    many = node("many")
    many["status"]["allocatable"][names.GPU_RESOURCE] = "9e18"
    assert node_info(many).spec.gpu_count == 0 and "at most 256" in node_info(many).error
    st_ = make(nodes=0)
    st_.set_node(big)
    st_.set_node(many)
    submit(st_, pod("p", requests={"cpu": "1000"}))
    assert [b.node for b in st_.cycle(T0).binds] == ["big"]
