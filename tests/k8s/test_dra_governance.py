"""Governance of DRA claims. gpugov's scheduler holds a claim pod until its claims exist, and
refuses one asking for GPUs on both paths naming the fields. Claims kube-scheduler allocates
from gpugov's devices are charged to their Tenant's queue by the governor (binding
conditions): within the limits they bind, over them they are held with the queue and the
numbers, without a queue they get no device."""

from __future__ import annotations

import asyncio
import sys
from fractions import Fraction
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.k8s.dra.governor import Governor
from gpugov.k8s.dra.ledger import Charge, Ledger, QueueNode
from gpugov.k8s.dra.publisher import SlicePublisher, probe_features
from gpugov.k8s.dra.slices import SLICE_CLASS
from gpugov.k8s.scheduler.kube import Kube
from gpugov.k8s.scheduler.state import INVALID
from gpugov.model.devices import DeviceMode

sys.path.insert(0, str(Path(__file__).parent))
from dra_support import (  # noqa: E402
    claim,
    claim_pod,
    gpu,
    inventory,
    kwok_node,
    post,
    request,
    stop_all,
    wait_for,
)
from test_scheduler_state import T0, make, pod  # noqa: E402


def _with_claims(p: dict, gpus: bool = False) -> dict:
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    if not gpus:
        p["spec"]["containers"][0]["resources"]["limits"] = {}
    return p


def test_a_claim_pod_sent_to_gpugovs_scheduler_is_held_with_the_reason() -> None:
    st = make()
    st.set_pod(_with_claims(pod("dra", gpus=None)))
    st.set_pod(_with_claims(pod("both"), gpus=True))  # extended resources and a claim
    st.set_pod(pod("plain"))
    plan = st.cycle(T0)
    assert [b.name for b in plan.binds] == ["plain"]
    msgs = {c.name: (c.code, c.message) for c in plan.conditions}
    # gpugov's scheduler allocates claims itself now (tests/k8s/test_dra_alloc*.py): a claim
    # pod waits for its template's claim; GPUs asked on both paths are refused by field
    code, msg = msgs["dra"]
    assert code == "claims-pending" and "ResourceClaimTemplate one-gpu" in msg
    code, msg = msgs["both"]
    assert code == INVALID
    assert "nvidia.com/ resources and spec.resourceClaims" in msg


# ---------------------------------------------------------------- kube-scheduler, governed


def test_the_ledger_caps_every_queue_on_the_path_counting_the_schedulers_usage() -> None:
    led = Ledger({"root": QueueNode("root", None, {"gpu": 3}, {"gpu": 1.5}),
                  "a": QueueNode("a", "root", {"gpumem": 100}),
                  "b": QueueNode("b", "root", None)})
    assert led.admit("c1", "a", Charge(1, 80)) == ""
    assert "queue a: gpumem 80 in use + 40 for this claim is over its limit 100" in \
        led.admit("c2", "a", Charge(1, 40))
    assert led.admit("c3", "b", Charge(Fraction(1, 2), 10)) == ""
    # root: 1.5 from gpugov's scheduler + 1 + 0.5 admitted = 3: nothing more fits anywhere
    assert "queue root: gpu 3 in use" in led.admit("c4", "b", Charge(Fraction(1, 10), 1))
    assert led.admit("c1", "a", Charge(1, 80)) == ""  # already admitted: idempotent
    assert "does not exist" in led.admit("c5", "nope", Charge())


def test_kube_scheduler_binds_a_claim_only_when_gpugov_admits_it_to_its_queue(
        dra_plane) -> None:
    """Devices published with gpugov's binding conditions: kube-scheduler allocates, then
    waits for the governor. Within the queue's limit the pod binds; over it the claim is
    refused with the queue and numbers (the pod's FailedScheduling event says so) and the pod
    stays pending; a namespace with no Tenant gets no gpugov device; when the first pod
    leaves, the held one is admitted and binds."""
    from gpugov.k8s.devcluster.dev import install_crds

    async def main() -> None:
        from gpugov.k8s.devcluster.rbac import apply_component_rbac

        await install_crds(dra_plane.kubeconfig)
        kube = await Kube.from_kubeconfig(dra_plane.kubeconfig)
        # publisher and governor run as gpugov's scheduler identity, with the chart's RBAC
        ident = await Kube.from_kubeconfig(await apply_component_rbac(
            dra_plane.kubeconfig, "scheduler", "gpugov-system",
            dra_plane.workdir / "scheduler.kubeconfig"))
        stop = asyncio.Event()
        tasks = []
        try:
            features = await probe_features(ident, governed=True)
            pub = SlicePublisher(ident, features)
            gov = Governor(ident, interval=0.3)
            tasks = [asyncio.create_task(pub.run(stop)), asyncio.create_task(gov.run(stop))]
            await post(kube, "/api/v1/nodes", kwok_node("gov-n1", inventory(
                gpu(0), gpu(1), gpu(2, DeviceMode.SOFT), gpu(3))))
            for ns in ("gov-a", "gov-stray"):
                await post(kube, "/api/v1/namespaces", {"metadata": {"name": ns}})
            g = "/apis/gpugov.io/v1alpha1"
            await post(kube, f"{g}/queues", {"apiVersion": "gpugov.io/v1alpha1",
                                             "kind": "Queue", "metadata": {"name": "qa"},
                                             "spec": {"quota": {"gpu": 1},
                                                      "limit": {"gpu": 1.5}}})
            await post(kube, f"{g}/tenants", {
                "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": "ta"}, "spec": {"queue": "qa", "namespaces": ["gov-a"]}})

            async def make(ns: str, name: str, req: dict) -> None:
                await post(kube, f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
                           claim(name, ns, [req]))
                await post(kube, f"/api/v1/namespaces/{ns}/pods",
                           claim_pod(name, ns, {"gpu": name}))

            async def node_of(ns: str, name: str) -> str:
                _, p = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
                return p["spec"].get("nodeName") or ""

            async def events(ns: str, name: str) -> str:
                _, doc = await kube.request("GET", f"/api/v1/namespaces/{ns}/events")
                return " | ".join(e.get("message", "") for e in doc["items"]
                                  if e["involvedObject"]["name"] == name)

            def on(index: int) -> str:  # each claim its own GPU: no race between them
                return f'device.attributes["gpu.gpugov.io"].index == {index}'

            await make("gov-a", "first", request("g", "gpu.gpugov.io", selector=on(0)))
            assert await wait_for(lambda: node_of("gov-a", "first"), "first bound") == "gov-n1"
            # a second whole GPU would take qa to 2 > 1.5: held, with the reason
            await make("gov-a", "second", request("g", "gpu.gpugov.io", selector=on(1)))
            said = await wait_for(lambda: _has(events("gov-a", "second"), "over its limit"),
                                  "second refused")
            assert "queue qa: gpu 1 in use + 1 for this claim is over its limit 1.5" in said
            assert await node_of("gov-a", "second") == ""
            # a 40 % slice fits under the limit (1 + 0.4 <= 1.5): admitted and bound
            await make("gov-a", "slice", request("s", SLICE_CLASS, capacity={
                "memory": "8Gi", "compute": "40"}))
            assert await wait_for(lambda: node_of("gov-a", "slice"), "slice bound") == "gov-n1"
            # an untrusted tenant gets no slice of a shared GPU (soft < its hard floor)
            await post(kube, "/api/v1/namespaces", {"metadata": {"name": "gov-u"}})
            await post(kube, f"{g}/tenants", {
                "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": "tu"},
                "spec": {"queue": "qa", "namespaces": ["gov-u"], "trust": "untrusted"}})
            await make("gov-u", "uslice", request("s", SLICE_CLASS, capacity={
                "memory": "4Gi", "compute": "10"}))
            said = await wait_for(lambda: _has(events("gov-u", "uslice"), "isolation"),
                                  "untrusted slice refused")
            assert "Tenant is untrusted: its claims need hard isolation and device " \
                "gov-n1/gpu-2 gives soft" in said
            # the tenant cannot admit its own claim: `edit` does not reach claim status
            from gpugov.k8s.devcluster.rbac import tenant_edit_kubeconfig

            tenant = await Kube.from_kubeconfig(await tenant_edit_kubeconfig(
                dra_plane.kubeconfig, "gov-a", "tenant", dra_plane.workdir / "tenant-kc"))
            try:
                _, held = await kube.request(
                    "GET", "/apis/resource.k8s.io/v1/namespaces/gov-a/resourceclaims/second")
                held.setdefault("status", {})["devices"] = [{
                    "driver": "gpu.gpugov.io", "pool": "gov-n1", "device": "gpu-1",
                    "conditions": [{"type": "gpugov.io/admitted", "status": "True",
                                    "reason": "Forged", "message": "x",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
                status, doc = await tenant.request(
                    "PUT", "/apis/resource.k8s.io/v1/namespaces/gov-a/resourceclaims/second/"
                           "status", held)
                assert status == 403, (status, doc)
            finally:
                await tenant.close()
            await make("gov-stray", "stray", request("g", "gpu.gpugov.io", selector=on(3)))
            said = await wait_for(lambda: _has(events("gov-stray", "stray"), "no queue"),
                                  "stray refused")
            assert "namespace gov-stray is charged to no queue" in said
            assert not pub.problems and not gov.errors
            # the first pod leaves: its claim is released and the held one gets its GPU
            await kube.request("DELETE", "/api/v1/namespaces/gov-a/pods/first",
                               {"gracePeriodSeconds": 0})
            assert await wait_for(lambda: node_of("gov-a", "second"), "second bound after "
                                  "first left", timeout=120) == "gov-n1"
        finally:
            await stop_all(stop, tasks, kube, ident)

    asyncio.run(main())


async def _has(coro, text: str) -> str:  # noqa: ANN001
    got = await coro
    return got if text in got else ""


def test_gpugovs_scheduler_places_no_extended_resource_pod_on_a_dra_node() -> None:
    """A node labelled gpugov.io/dra=true is served by DRA claims: gpugov's scheduler never
    puts a device-plugin pod on its GPUs (no GPU is offered on both paths)."""
    from test_scheduler_state import node

    st = make(nodes=0)
    dra = node("dra-only", 8)
    dra["metadata"]["labels"]["gpugov.io/dra"] = "true"
    st.set_node(dra)
    st.set_pod(pod("p"))
    plan = st.cycle(T0)
    assert not plan.binds
    st.set_node(node("plain", 8))
    assert [b.node for b in st.cycle(T0 + 5).binds] == ["plain"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]),
                          st.integers(0, 100), st.integers(0, 200)), max_size=40),
       st.floats(0.5, 4), st.integers(10, 300))
def test_no_sequence_of_claims_takes_any_queue_over_its_limit(claims, cap, mem_cap) -> None:
    """Whatever claims arrive, in whatever order: every queue on every path stays within
    its limit, counting the scheduler's own usage, and each refusal names a queue."""
    led = Ledger({"root": QueueNode("root", None, {"gpu": cap}, {"gpu": 0.25}),
                  "a": QueueNode("a", "root", {"gpumem": mem_cap}),
                  "b": QueueNode("b", "root", {"gpu": cap / 2}),
                  "c": QueueNode("c", "b", None)})
    for i, (leaf, pct, gib) in enumerate(claims):
        why = led.admit(f"u{i}", leaf, Charge(Fraction(pct, 100), Fraction(gib)))
        assert why == "" or why.startswith("queue ")
    for q in led.queues.values():
        used = led.used(q.name)
        for r in ("gpu", "gpumem"):
            limit = (q.limit or {}).get(r)
            assert limit is None or used.get(r) <= Fraction(str(limit))


def test_a_mig_claim_charges_its_profile_where_the_queue_counts_it() -> None:
    from gpugov.k8s.annotations import MigInstance
    from gpugov.k8s.dra.ledger import claim_charge, device_index
    from gpugov.k8s.dra.slices import Features, node_slices

    inv = inventory(gpu(0, DeviceMode.MIG, mig=(MigInstance("3g.40gb", 0, "MIG-x"),
                                                 MigInstance("3g.40gb", 4, "MIG-y"))))
    devices = device_index(node_slices("n", inv, Features(), 1))

    def mig_claim(start: int) -> dict:
        return {"status": {"allocation": {"devices": {"results": [{
            "request": "g", "driver": "gpu.gpugov.io", "pool": "n",
            "device": f"gpu-0-mig-3g-40gb-{start}"}]}}}}

    charge = claim_charge(mig_claim(0), devices)
    assert charge.get("mig-3g.40gb") == 1 and charge.gpu == Fraction(42, 100)
    led = Ledger({"q": QueueNode("q", None, {"mig-3g.40gb": 1})})
    assert led.admit("a", "q", charge) == ""
    assert "queue q: mig-3g.40gb 1 in use + 1 for this claim is over its limit 1" in \
        led.admit("b", "q", claim_charge(mig_claim(4), devices))


def test_a_gang_of_claim_pods_binds_all_or_nothing(dra_plane) -> None:
    """kube-scheduler binds each pod alone; with gpugov's binding conditions a PodGroup's
    claims wait until minMember of its pods are allocated, then bind together — and a gang
    its queue cannot hold whole is refused whole (no member binds)."""
    from gpugov.k8s.devcluster.dev import install_crds, install_podgroup_crd

    async def main() -> None:
        await install_crds(dra_plane.kubeconfig)
        await install_podgroup_crd(dra_plane.kubeconfig)
        kube = await Kube.from_kubeconfig(dra_plane.kubeconfig)
        stop = asyncio.Event()
        tasks = []
        try:
            features = await probe_features(kube, governed=True)
            tasks = [asyncio.create_task(SlicePublisher(kube, features).run(stop)),
                     asyncio.create_task(Governor(kube, interval=0.3).run(stop))]
            await post(kube, "/api/v1/nodes", kwok_node("gang-n1", inventory(
                *[gpu(i) for i in range(6)])))
            ns = "gang-a"
            await post(kube, "/api/v1/namespaces", {"metadata": {"name": ns}})
            g = "/apis/gpugov.io/v1alpha1"
            await post(kube, f"{g}/queues", {"apiVersion": "gpugov.io/v1alpha1",
                                             "kind": "Queue", "metadata": {"name": "qg"},
                                             "spec": {"quota": {"gpu": 4},
                                                      "limit": {"gpu": 4}}})
            await post(kube, f"{g}/tenants", {
                "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": "tg"}, "spec": {"queue": "qg", "namespaces": [ns]}})
            pg = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/gang-a/podgroups"
            for name, size in (("three", 3), ("two", 2)):
                await post(kube, pg, {"apiVersion": "scheduling.x-k8s.io/v1alpha1",
                                      "kind": "PodGroup", "metadata": {"name": name},
                                      "spec": {"minMember": size}})

            async def member(group: str, i: int) -> str:
                name = f"{group}-{i}"
                await post(kube, f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
                           claim(name, ns, [request("g", "gpu.gpugov.io")]))
                pod = claim_pod(name, ns, {"gpu": name})
                pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group}
                await post(kube, f"/api/v1/namespaces/{ns}/pods", pod)
                return name

            async def bound(name: str) -> str:
                _, p = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
                return p["spec"].get("nodeName") or ""

            first = [await member("three", i) for i in range(2)]
            await asyncio.sleep(4)  # 2 of 3 allocated: held, not bound
            assert [await bound(n) for n in first] == ["", ""]
            last = await member("three", 2)
            for n in [*first, last]:  # (on any DRA node of the module's cluster)
                assert await wait_for(lambda n=n: bound(n), f"{n} bound")
            # qg holds 3 of its 4 GPUs: a gang of 2 cannot fit whole, so no member binds
            two = [await member("two", i) for i in range(2)]

            async def refused() -> str:
                _, doc = await kube.request("GET", f"/api/v1/namespaces/{ns}/events")
                msgs = [e.get("message", "") for e in doc["items"]
                        if e["involvedObject"]["name"] in two]
                return next((m for m in msgs if "is refused as a whole" in m), "")

            said = await wait_for(refused, "gang two refused")
            assert "gang gang-a/two (2 pods) is refused as a whole: queue qg: gpu 4 in use" \
                in said, said
            assert [await bound(n) for n in two] == ["", ""]
        finally:
            await stop_all(stop, tasks, kube)

    asyncio.run(main())


def test_a_dra_pod_is_preempted_for_a_higher_priority_pod_of_a_queue_under_its_guarantee(
        dra_plane) -> None:
    """kube-scheduler does not preempt for devices; the governor does: a low-priority DRA
    pod of a queue over its guarantee holds the only GPU of its kind; a high-priority DRA pod
    of a queue under its guarantee waits for it; the governor evicts the first (with an
    Event saying why), and the second gets the GPU."""
    from gpugov.k8s.devcluster.dev import install_crds

    async def main() -> None:
        await install_crds(dra_plane.kubeconfig)
        kube = await Kube.from_kubeconfig(dra_plane.kubeconfig)
        stop = asyncio.Event()
        tasks = []
        gov = Governor(kube, interval=0.3)
        try:
            features = await probe_features(kube, governed=True)
            tasks = [asyncio.create_task(SlicePublisher(kube, features).run(stop)),
                     asyncio.create_task(gov.run(stop))]
            await post(kube, "/api/v1/nodes", kwok_node("rc-n1", inventory(
                gpu(0, model="RECLAIM-GPU"))))
            g = "/apis/gpugov.io/v1alpha1"
            for q, quota in (("rc-low", 0), ("rc-high", 1)):
                await post(kube, "/api/v1/namespaces", {"metadata": {"name": q}})
                await post(kube, f"{g}/queues", {
                    "apiVersion": "gpugov.io/v1alpha1", "kind": "Queue",
                    "metadata": {"name": q}, "spec": {"quota": {"gpu": quota}}})
                await post(kube, f"{g}/tenants", {
                    "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                    "metadata": {"name": q}, "spec": {"queue": q, "namespaces": [q]}})
            for name, value in (("rc-lo", 0), ("rc-hi", 1000)):
                await post(kube, "/apis/scheduling.k8s.io/v1/priorityclasses", {
                    "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": name}, "value": value})
            pick = 'device.attributes["gpu.gpugov.io"].model == "RECLAIM-GPU"'

            async def make(ns: str, pclass: str) -> None:
                await post(kube, f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
                           claim("c", ns, [request("g", "gpu.gpugov.io", selector=pick)]))
                pod = claim_pod("p", ns, {"gpu": "c"})
                pod["spec"]["priorityClassName"] = pclass
                await post(kube, f"/api/v1/namespaces/{ns}/pods", pod)

            async def bound(ns: str) -> str:
                code, p = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/p")
                return p["spec"].get("nodeName") or "" if code == 200 else "gone"

            await make("rc-low", "rc-lo")
            assert await wait_for(lambda: bound("rc-low"), "low bound") == "rc-n1"
            await make("rc-high", "rc-hi")
            assert await wait_for(lambda: bound("rc-high"), "high bound after reclaim",
                                  timeout=120) == "rc-n1"
            assert gov.evicted == ["rc-low/p"]
            _, doc = await kube.request("GET", "/api/v1/namespaces/rc-low/events")
            said = [e["message"] for e in doc["items"] if e.get("reason") == "Preempted"]
            assert said and "preempted by gpugov for rc-high/p (priority 1000, queue rc-high " \
                "under its guarantee): this pod's queue rc-low is over its guarantee" in said[0]
        finally:
            await stop_all(stop, tasks, kube)

    asyncio.run(main())


def test_reclaim_takes_the_lowest_priority_newest_pod_of_a_queue_over_its_guarantee() -> None:
    from gpugov.k8s.dra.reclaim import Holder, Waiter, claim_demand, victims

    led = Ledger({"hi": QueueNode("hi", None, None, {"gpu": 0}, {"gpu": 2}),
                  "lo": QueueNode("lo", None, None, {"gpu": 3}, {"gpu": 1}),
                  "ok": QueueNode("ok", None, None, {"gpu": 1}, {"gpu": 1})})
    holders = [Holder("lo", "old", "u1", "lo", 0, "2026-01-01T00:00:00Z"),
               Holder("lo", "new", "u2", "lo", 0, "2026-01-02T00:00:00Z"),
               Holder("lo", "vip", "u3", "lo", 500, "2026-01-03T00:00:00Z"),
               Holder("ok", "fair", "u4", "ok", 0, "2026-01-04T00:00:00Z")]
    one = Charge(Fraction(1))
    got = victims([Waiter("hi", "a", "hi", 100, one), Waiter("hi", "b", "hi", 200, one)],
                  holders, led)
    assert [(w.name, h.name) for w, h in got] == [("b", "new"), ("a", "old")]
    # a waiter whose queue would go past its guarantee takes nothing
    assert victims([Waiter("hi", "big", "hi", 900, Charge(Fraction(3)))], holders, led) == []
    classes = {"gpu.gpugov.io", "gpu-slice.gpugov.io"}
    spec = {"spec": {"devices": {"requests": [
        {"name": "a", "exactly": {"deviceClassName": "gpu.gpugov.io", "count": 2}},
        {"name": "b", "exactly": {"deviceClassName": "gpu-slice.gpugov.io",
                                  "capacity": {"requests": {"compute": "30"}}}},
        {"name": "c", "exactly": {"deviceClassName": "other.example.com"}}]}}}
    assert claim_demand(spec, classes).gpu == Fraction(23, 10)
    bad = {"spec": {"devices": {"requests": [{"name": "a", "exactly": {
        "deviceClassName": "gpu.gpugov.io", "count": 10**9}}]}}}
    assert claim_demand(bad, classes) is None
