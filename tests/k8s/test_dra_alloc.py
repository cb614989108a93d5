"""gpugov's scheduler allocating DRA claims, in the pure state (docs/dra.md, path 1): the
claims' translation, CEL selectors as Kubernetes evaluates them, what a pod with several
claims is charged, and — a hypothesis property — that no device is ever allocated twice,
whatever claims arrive and whatever kube-scheduler allocated before."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.k8s.annotations import encode_allocation
from gpugov.k8s.dra.allocate import ClaimProblem, release_patch, translate
from gpugov.k8s.dra.allocate_cel import MAX_EXPRESSION, SelectorError, matches
from gpugov.k8s.dra.slices import SLICE_CLASS, Features, device_classes, node_slices
from gpugov.k8s.quantity import parse_quantity
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.state import SchedulerState
from gpugov.model.devices import DeviceMode

sys.path.insert(0, str(Path(__file__).parent))
from dra_support import claim, gpu, inventory, kwok_node, request  # noqa: E402
from test_scheduler_state import T0, make, pod  # noqa: E402

F = Features(consumable_capacity=True)
DOMAIN = "gpu.gpugov.io"


def dra_state(*nodes: tuple[str, Any]) -> SchedulerState:
    s = make(nodes=0)
    for name, inv in nodes:
        n = kwok_node(name, inv)
        n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        s.set_node(n)
        for sl in node_slices(name, inv, F, 1):
            s.set_object("resourceslice", sl)
    for c in device_classes(F):
        s.set_object("deviceclass", c)
    return s


def claim_pod(s: SchedulerState, name: str, reqs: list[dict] | None,
              containers: list[dict] | None = None, claims: dict[str, list] | None = None
              ) -> None:
    """A pod of gpugov's scheduler whose container uses claim `c-<name>` (or `claims`)."""
    claims = claims if claims is not None else {f"c-{name}": reqs or []}
    for cname, r in claims.items():
        c = claim(cname, "team-a", r)
        c["metadata"]["uid"] = f"uid-{cname}"
        s.set_object("resourceclaim", c)
    p = pod(name, gpus=None)
    p["spec"]["resourceClaims"] = [{"name": k, "resourceClaimName": k} for k in claims]
    p["spec"]["containers"] = containers or [
        {"name": "main", "resources": {"claims": [{"name": k} for k in claims]}}]
    s.set_pod(p)


def bind(s: SchedulerState, plan: Any) -> None:
    """What the API does with a plan: claims allocated and reserved, pods bound."""
    for b in plan.binds:
        s.bind_result(b, True)
        for key, uid, alloc in b.claims:
            c = dict(s.dra.claims[key])
            c["metadata"] = {**c["metadata"], "uid": uid}
            c["status"] = {"allocation": alloc,
                           "reservedFor": [{"resource": "pods", "name": b.name, "uid": b.uid}]}
            s.set_object("resourceclaim", c)
        p = pod(b.name, gpus=None)
        p["metadata"]["uid"] = b.uid
        p["metadata"]["annotations"][names.ANN_ALLOCATION] = encode_allocation(b.record)
        info = s.dra.pods[b.key]
        p["spec"].update(info["spec"])
        p["spec"]["nodeName"] = b.node
        s.set_pod(p)


def reasons(plan: Any) -> dict[str, str]:
    return {c.name: c.message for c in plan.conditions}


def test_whole_gpu_claims_bind_and_charge_like_nvidia_gpu_pods() -> None:
    s = dra_state(("d0", inventory(gpu(0), gpu(1))))
    claim_pod(s, "two", [request("g", "gpu.gpugov.io", count=2)])
    plan = s.cycle(T0)
    (b,) = plan.binds
    ((key, uid, alloc),) = b.claims
    assert key == "team-a/c-two" and uid == "uid-c-two"
    assert sorted(r["device"] for r in alloc["devices"]["results"]) == ["gpu-0", "gpu-1"]
    assert all("shareID" not in r for r in alloc["devices"]["results"])  # not shared
    assert plan.queue_status["qa"]["usage"]["gpu"] == 2
    assert plan.queue_status["qa"]["draUsage"]["gpu"] == 0  # its pod's, not a foreign claim


def test_a_device_plugin_pod_tolerating_everything_stays_off_dra_gpus() -> None:
    s = dra_state(("d0", inventory(gpu(0))))
    p = pod("dp")
    p["spec"]["tolerations"] = [{"operator": "Exists"},
                                {"key": "internal.gpugov.io/dra", "operator": "Exists"}]
    s.set_pod(p)
    plan = s.cycle(T0)
    assert not plan.binds and "taint" in reasons(plan)["dp"]


def test_kube_schedulers_allocations_are_held_and_gpugov_takes_the_other_gpu() -> None:
    s = dra_state(("d0", inventory(gpu(0), gpu(1))))
    foreign = claim("ks", "team-b", [request("g", "gpu.gpugov.io")])
    foreign["status"] = {"allocation": {"devices": {"results": [
        {"request": "g", "driver": DOMAIN, "pool": "d0", "device": "gpu-1"}]}}}
    s.set_object("resourceclaim", foreign)
    claim_pod(s, "a", [request("g", "gpu.gpugov.io")])
    claim_pod(s, "b", [request("g", "gpu.gpugov.io")])
    plan = s.cycle(T0)
    (b,) = plan.binds
    assert b.claims[0][2]["devices"]["results"][0]["device"] == "gpu-0"
    # kube-scheduler's claim is charged to team-b's queue (qb), as before
    assert plan.queue_status["qb"]["draUsage"]["gpu"] == 1


def test_init_containers_are_charged_the_largest_and_app_containers_the_sum() -> None:
    s = dra_state(("d0", inventory(*(gpu(i) for i in range(4)))))
    one = [request("g", "gpu.gpugov.io")]
    three = [request("g", "gpu.gpugov.io", count=3)]
    containers = [{"name": "a", "resources": {"claims": [{"name": "app1"}]}},
                  {"name": "b", "resources": {"claims": [{"name": "app2"}]}}]
    init = [{"name": "i", "resources": {"claims": [{"name": "init"}]}}]
    claim_pod(s, "p", None, containers=containers,
              claims={"app1": one, "app2": one, "init": three})
    s.pods["team-a/p"]  # noqa: B018 - translated on the cycle
    s.dra.pods["team-a/p"]["spec"]["initContainers"] = init
    plan = s.cycle(T0)
    (b,) = plan.binds
    assert len(b.record.devices) == 3  # max(1 + 1, 3), not 5
    got = {k: [r["device"] for r in a["devices"]["results"]] for k, _, a in b.claims}
    assert len(set(got["team-a/app1"]) | set(got["team-a/app2"])) == 2  # apart
    assert set(got["team-a/app1"]) | set(got["team-a/app2"]) <= set(got["team-a/init"])


@pytest.mark.parametrize(("reqs", "text"), [
    ([request("g", "other.example.com")], "DeviceClass 'other.example.com' does not exist"),
    ([request("g", SLICE_CLASS, capacity={"memory": "100Gi"})], "has 81920 MiB"),
    ([request("g", "gpu.gpugov.io", selector="device.attributes[")], "does not compile"),
    ([request("g", "gpu.gpugov.io", selector="x" * (MAX_EXPRESSION + 1))], "longer than"),
    ([request("g", "gpu.gpugov.io", selector='device.attributes["x"].y == 1')],
     "failed on device"),
    ([request("g", "gpu.gpugov.io", selector="1")], "not a bool"),
    ([request("g", "gpu.gpugov.io", count=9)], "no node has 9 devices"),
    ([{"name": "g", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.gpugov.io"}]}],
     "firstAvailable"),
    ([{"name": "g", "exactly": {"deviceClassName": "gpu.gpugov.io",
                                "allocationMode": "All"}}], "allocationMode"),
    ([request("g", "gpu.gpugov.io", capacity={"memory": "1Gi"})], "capacity"),
])
def test_a_bad_claim_is_refused_on_its_pod_naming_the_problem(reqs, text) -> None:
    s = dra_state(("d0", inventory(gpu(0, DeviceMode.SOFT))))
    claim_pod(s, "bad", reqs)
    claim_pod(s, "ok", [request("g", "gpu.gpugov.io")])
    plan = s.cycle(T0)
    assert [b.name for b in plan.binds] == ["ok"]
    assert text in reasons(plan)["bad"], reasons(plan)["bad"]
    assert reasons(plan)["bad"].startswith("gpugov: invalid-request")


def test_another_drivers_class_is_refused_naming_it() -> None:
    s = dra_state(("d0", inventory(gpu(0))))
    s.set_object("deviceclass", {"metadata": {"name": "gpu.nvidia.com"}, "spec": {}})
    claim_pod(s, "nv", [request("g", "gpu.nvidia.com")])
    why = reasons(s.cycle(T0))["nv"]
    assert "DeviceClass 'gpu.nvidia.com' is not one of gpugov's" in why
    assert "leave schedulerName unset" in why


def test_a_pod_waits_for_its_template_claim_then_binds() -> None:
    s = dra_state(("d0", inventory(gpu(0))))
    p = pod("t", gpus=None)
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    s.set_pod(p)
    plan = s.cycle(T0)
    assert not plan.binds
    assert plan.conditions[0].code == "claims-pending"
    assert "ResourceClaimTemplate one" in plan.conditions[0].message
    c = claim("t-gpu-x", "team-a", [request("gpu", "gpu.gpugov.io")])
    s.set_object("resourceclaim", c)
    p["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "t-gpu-x"}]}
    s.set_pod(p)
    (b,) = s.cycle(T0 + 1).binds
    assert b.claims[0][0] == "team-a/t-gpu-x"


def test_a_pod_leaving_releases_the_claims_gpugov_allocated() -> None:
    s = dra_state(("d0", inventory(gpu(0))))
    claim_pod(s, "p", [request("g", "gpu.gpugov.io")])
    plan = s.cycle(T0)
    bind(s, plan)
    s.delete_pod("team-a/p")
    assert s.dra.releases == [("team-a/c-p", plan.binds[0].uid)]
    patch = release_patch(s.dra.claims["team-a/c-p"], plan.binds[0].uid)
    assert patch == {"reservedFor": None, "allocation": None}


def test_cel_reads_attributes_capacity_and_quantities_as_kubernetes_does() -> None:
    (dev,) = node_slices("n", inventory(gpu(0, DeviceMode.SOFT, model="H100-SXM5-80GB")),
                         F, 1)[0]["spec"]["devices"]
    yes = ['device.driver == "gpu.gpugov.io"',
           'device.attributes["gpu.gpugov.io"].model.startsWith("H100")',
           'device.capacity["gpu.gpugov.io"].memory.compareTo(quantity("80Gi")) == 0',
           'device.capacity["gpu.gpugov.io"].memory.isGreaterThan(quantity("40Gi"))',
           '"nvlinkDomain" in device.attributes["gpu.gpugov.io"]',
           'device.attributes["gpu.gpugov.io"].index == 0']
    for e in yes:
        assert matches(e, DOMAIN, dev), e
    assert not matches('device.attributes["gpu.gpugov.io"].model == "B200"', DOMAIN, dev)
    with pytest.raises(SelectorError, match="failed on device"):
        matches('device.attributes["gpu.gpugov.io"].nope', DOMAIN, dev)


@settings(max_examples=15, deadline=None)
@given(st.text(max_size=200))
def test_any_selector_text_is_a_match_or_a_selector_error(text) -> None:
    (dev,) = node_slices("n", inventory(gpu(0)), F, 1)[0]["spec"]["devices"]
    try:
        assert isinstance(matches(text, DOMAIN, dev), bool)
    except SelectorError as e:
        assert len(str(e)) < 600  # a reason for the pod, never a dump of the activation


def test_translate_names_what_it_waits_for() -> None:
    p = {"metadata": {"namespace": "ns", "uid": "u"},
         "spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "gone"}]}}
    with pytest.raises(ClaimProblem, match="ResourceClaim ns/gone does not exist yet"):
        translate(p, {}, {}, {})


# -- the property: nothing double-allocated --------------------------------------------------

SHAPES = st.one_of(
    st.tuples(st.just("gpu"), st.integers(1, 2), st.just(0), st.just(0)),
    st.tuples(st.just("slice"), st.just(1), st.integers(1, 80), st.integers(1, 100)),
)


def _consumed(results: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        out.setdefault((r["pool"], r["device"]), []).append(r)
    return out


@settings(max_examples=25, deadline=None)
@given(st.lists(SHAPES, min_size=1, max_size=10),
       st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(1, 26)),
                max_size=3))
def test_no_device_is_ever_allocated_twice(shapes, foreign) -> None:
    """Whatever claims arrive (whole GPUs, slices) and whatever kube-scheduler allocated
    before (whole GPUs on exclusive devices, slices on shared ones): every exclusive device is
    in at most one claim, and a shared device's allocations stay within its capacity."""
    s = dra_state(("e0", inventory(gpu(0), gpu(1))),
                  ("s0", inventory(gpu(0, DeviceMode.SOFT), gpu(1, DeviceMode.SOFT))))
    for k, (soft, dev, gib) in enumerate(foreign):
        r = {"request": "g", "driver": DOMAIN, "pool": "s0" if soft else "e0",
             "device": f"gpu-{dev}"}
        if soft:
            r.update(shareID=f"00000000-0000-0000-0000-00000000000{k}",
                     consumedCapacity={"memory": f"{gib}Gi", "compute": "10"})
        if any(f[:2] == (soft, dev) for f in foreign[:k]) and not soft:
            continue
        c = claim(f"ks{k}", "team-b", [request("g", "gpu.gpugov.io")])
        c["status"] = {"allocation": {"devices": {"results": [r]}}}
        s.set_object("resourceclaim", c)
    for i, (kind, count, gib, pct) in enumerate(shapes):
        cls = SLICE_CLASS if kind == "slice" else "gpu.gpugov.io"
        cap = {"memory": f"{gib}Gi", "compute": str(pct)} if kind == "slice" else None
        claim_pod(s, f"p{i}", [request("g", cls, count=count, capacity=cap)])
        bind(s, s.cycle(T0 + i))
    bind(s, s.cycle(T0 + 100))
    results = [r for c in s.dra.claims.values()
               for r in (((c.get("status") or {}).get("allocation") or {}).get("devices")
                         or {}).get("results") or []]
    for (pool, device), rs in _consumed(results).items():
        if pool == "e0":
            assert len(rs) == 1, (pool, device, rs)
            continue
        assert all("consumedCapacity" in r and "shareID" in r for r in rs), rs
        mem = sum(Fraction(parse_quantity(r["consumedCapacity"]["memory"])) for r in rs)
        cpu = sum(Fraction(parse_quantity(r["consumedCapacity"]["compute"])) for r in rs)
        assert mem <= 80 * 2**30 and cpu <= 100, (device, rs)
        assert len({r["shareID"] for r in rs}) == len(rs)


def test_a_pod_recreated_under_the_same_name_keeps_its_claims() -> None:
    s = dra_state(("d0", inventory(gpu(0))))
    claim_pod(s, "p", [request("g", "gpu.gpugov.io")])
    s.cycle(T0)
    p = pod("p", gpus=None)
    p["metadata"]["uid"] = "new-uid"
    p["spec"]["resourceClaims"] = [{"name": "c-p", "resourceClaimName": "c-p"}]
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "c-p"}]}
    s.set_pod(p)
    (b,) = s.cycle(T0 + 1).binds
    assert b.uid == "new-uid" and b.claims[0][0] == "team-a/c-p"
