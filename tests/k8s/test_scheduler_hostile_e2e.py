"""A tenant holding only the built-in `edit` role against gpugov's scheduler (issue 18).

Real kube-apiserver and kwok nodes; the scheduler runs as its chart ServiceAccount with
exactly the chart's RBAC; no webhook and no admission policy are registered, so what is
shown is the scheduler's own refusal to trust what a tenant can write. Every hostile write
is made with the tenant's real ServiceAccount token; the admin only sets the stage (nodes,
Queues, Tenants) and, where the issue says so, plays a mistaken or compromised admin.
"""

from __future__ import annotations

import asyncio
import json

from gpugov.k8s.annotations import decode_allocation
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import (
    QUEUES,
    TIMEOUT,
    bound,
    by_name,
    condition,
    create_all,
    env,
    gpu_pod,
    pods,
    wait_until,
)
from gpugov.k8s.scheduler.kube import MERGE, Kube

PODS = "/api/v1/namespaces/{ns}/pods"


async def _start(e, cluster) -> None:
    """The scheduler under its chart ServiceAccount (not the admin)."""
    e.start_scheduler(kubeconfig=await cluster.component_kubeconfig("scheduler"))


async def _tenant(cluster, ns: str) -> Kube:
    return await Kube.from_kubeconfig(await cluster.tenant_kubeconfig(ns))


async def _annotate(kube: Kube, ns: str, name: str, ann: dict[str, str]) -> None:
    status, doc = await kube.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}",
                                     {"metadata": {"annotations": ann}}, content_type=MERGE)
    assert status == 200, f"PATCH {ns}/{name}: HTTP {status}: {doc}"


async def _conditions(kube: Kube, ns: str, want: set[str]) -> dict[str, str]:
    async def check():
        got = {p["metadata"]["name"]: condition(p)[1] for p in await pods(kube, ns)
               if condition(p)}
        return got if want <= set(got) else None

    return await wait_until(check, TIMEOUT, f"PodScheduled=False on {sorted(want)} in {ns}")


async def _settled(e, names_: set[str], placed: int) -> dict[str, dict]:
    """Wait until `placed` of `names_` are bound and the others have a condition."""
    async def check():
        items = by_name(await e.list())
        on = {n for n in names_ if n in items and items[n]["spec"].get("nodeName")}
        told = {n for n in names_ - on if n in items and condition(items[n])}
        return items if len(on) >= placed and on | told == names_ else None

    return await wait_until(check, TIMEOUT, f"{placed} of {sorted(names_)} bound, the rest "
                                            "told why not")


async def _usage(kube: Kube, queue: str) -> dict:
    _, doc = await kube.request("GET", f"{QUEUES}/{queue}")
    return (doc.get("status") or {})


def test_annotations_a_tenant_writes_decide_nothing(k8s_control_plane) -> None:
    """(a) a PATCHed gpugov.io/queue, (b) a PATCHed trust tier and request, (c) forged
    request/queue on a pod without GPUs: the pod is charged to its own Tenant's queue, keeps
    its tier, and books nothing on the victim's queue."""
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await e.add_nodes(1, 4)
            qa = await e.queue("qa", limit={"gpu": 1})
            qb = await e.queue("qb", limit={"gpu": 2})
            ns_b = await k8s_control_plane.unique_namespace("victim")
            await e.tenant("a", {"namespaces": [e.ns], "queue": qa, "trust": "untrusted"})
            await e.tenant("b", {"namespaces": [ns_b], "queue": qb, "trust": "trusted"})
            await _start(e, k8s_control_plane)
            tenant = await _tenant(k8s_control_plane, e.ns)
            try:
                await create_all(tenant, PODS, [e.pod("a0", None)])
                await e.wait_bound(1)
                await create_all(tenant, PODS, [
                    e.pod("a1", None),  # over qa's limit of 1
                    e.pod("soft", None, limits={names.GPU_RESOURCE: "1",
                                                "nvidia.com/gpumem": "10240"}),
                    # (c) no GPU at all, but a forged request for 2 GPUs on the victim's queue
                    e.pod("cpu-only", None, limits={"cpu": "1"}, annotations={
                        names.ANN_REQUEST: json.dumps({"v": 1, "count": 2}),
                        names.ANN_QUEUE: qb, names.ANN_TENANT: f"{e.uid}-b"})])
                msgs = await _conditions(e.kube, e.ns, {"a1", "soft"})
                assert msgs["a1"].startswith("gpugov: over-quota") and qa in msgs["a1"]
                assert "isolation" in msgs["soft"]  # an untrusted soft slice: refused
                # (a) and (b): the tenant rewrites what the webhook would have written
                await _annotate(tenant, e.ns, "a1", {names.ANN_QUEUE: qb,
                                                     names.ANN_TENANT: f"{e.uid}-b"})
                await _annotate(tenant, e.ns, "soft", {
                    names.ANN_TRUST: "trusted", names.ANN_QUEUE: qb,
                    names.ANN_REQUEST: json.dumps({"v": 1, "count": 1, "milli": 125,
                                                   "memoryMiB": 10000})})
                # the victim's own pods bind after the PATCHes (so cycles ran since): its
                # queue has room for exactly them
                await e.pods([e.pod(f"b{i}", None, namespace=ns_b) for i in range(2)])
                await e.wait_bound(2, ns_b)
                items = by_name(await e.list())
                assert not items["a1"]["spec"].get("nodeName")
                assert not items["soft"]["spec"].get("nodeName")
                assert items["cpu-only"]["spec"].get("nodeName")  # it is scheduled ...
                rec = decode_allocation(
                    items["cpu-only"]["metadata"]["annotations"][names.ANN_ALLOCATION])
                assert rec.devices == ()  # ... and holds no GPU
                a0 = decode_allocation(items["a0"]["metadata"]["annotations"][
                    names.ANN_ALLOCATION])
                assert str(a0.isolation) == "hard"  # the untrusted tenant's pod, sealed
                b_devices = {decode_allocation(p["metadata"]["annotations"][
                    names.ANN_ALLOCATION]).devices[0].index
                    for p in bound(await pods(e.kube, ns_b))}
                assert a0.devices[0].index not in b_devices

                async def charged():
                    sa, sb = await _usage(e.kube, qa), await _usage(e.kube, qb)
                    return (sa, sb) if sb.get("admitted") == 2 and \
                        (sb.get("usage") or {}).get("gpu") == 2 and \
                        (sa.get("usage") or {}).get("gpu") == 1 else None

                await wait_until(charged, TIMEOUT, "qa charged 1 GPU, qb 2 (its own pods)")
                after = await _conditions(e.kube, e.ns, {"a1", "soft"})
                assert qa in after["a1"] and qb not in after["a1"]
                assert "isolation" in after["soft"]
            finally:
                await tenant.close()

    asyncio.run(main())


def test_one_poisoned_pod_never_stops_the_others(k8s_control_plane) -> None:
    """(d) `nvidia.com/gpu: 1e400` and `cpu: 9e18` (in range for the apiserver, absurd for any
    node), created by the tenant: each gets a condition; the normal pods bind."""
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await e.add_nodes(1, 4)
            await e.queue("q")
            await _start(e, k8s_control_plane)
            tenant = await _tenant(k8s_control_plane, e.ns)
            try:
                huge = e.pod("huge", None, limits={names.GPU_RESOURCE: "1e400"})
                cpu = e.pod("cpu", None)
                cpu["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "9e18"}
                await create_all(tenant, PODS, [huge, cpu])
                await create_all(tenant, PODS, [e.pod(f"ok{i}", None) for i in range(3)])
                await e.wait_bound(3)
                msgs = await _conditions(e.kube, e.ns, {"huge", "cpu"})
                assert "gpugov: invalid-request" in msgs["huge"]
                assert "gpugov: invalid-request" in msgs["cpu"] and "CPU cores" in msgs["cpu"]
                status, events = await e.kube.request(
                    "GET", f"/api/v1/namespaces/{e.ns}/events",
                    query=[("fieldSelector", "reason=FailedScheduling")])
                assert status == 200
                assert {ev["involvedObject"]["name"] for ev in events["items"]} >= {"huge", "cpu"}
                assert sorted(p["metadata"]["name"] for p in bound(await e.list())) == [
                    "ok0", "ok1", "ok2"]
            finally:
                await tenant.close()

    asyncio.run(main())


def test_a_queue_parent_cycle_leaves_the_other_queues_scheduling(k8s_control_plane) -> None:
    """(e) two Queues naming each other as parent: only they are left out."""
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await e.add_nodes(1, 2)
            await e.queue("q")
            await e.queue("x", parent=f"{e.uid}-y")
            await e.queue("y", parent=f"{e.uid}-x")
            ns_x = await k8s_control_plane.unique_namespace("cyc")
            await e.tenant("x", {"namespaces": [ns_x], "queue": f"{e.uid}-x"})
            await _start(e, k8s_control_plane)
            await e.pods([e.pod(f"p{i}", None) for i in range(2)]
                         + [e.pod("stuck", None, namespace=ns_x)])
            await e.wait_bound(2)
            msgs = await _conditions(e.kube, ns_x, {"stuck"})
            assert "gpugov: no-queue" in msgs["stuck"] and "cycle" in msgs["stuck"]

    asyncio.run(main())


def test_an_edited_allocation_record_never_gives_a_device_twice(k8s_control_plane) -> None:
    """(f) an admin edits a bound pod's record to name another bound pod's device; a Queue
    edit rebuilds the state; no new pod gets a device two pods claim, and the edited pod's
    devices stay held (the node is never filled beyond its GPUs)."""
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            (node,) = await e.add_nodes(1, 4)
            await e.queue("q")
            first_sched = e.start_scheduler(
                "-a", kubeconfig=await k8s_control_plane.component_kubeconfig("scheduler"))
            await e.pods([e.pod("first", None)])
            await e.wait_bound(1)
            await e.pods([e.pod("second", None)])
            items = by_name(await e.wait_bound(2))

            def record(p: dict):
                return decode_allocation(p["metadata"]["annotations"][names.ANN_ALLOCATION])

            taken = record(items["first"]).devices[0].index
            forged = json.loads(items["second"]["metadata"]["annotations"][names.ANN_ALLOCATION])
            forged["devices"][0]["index"] = taken
            await _annotate(e.kube, e.ns, "second", {names.ANN_ALLOCATION: json.dumps(forged)})
            e.kill(first_sched)  # a restart (or failover) rebuilds the state from the API
            await _start(e, k8s_control_plane)
            await e.pods([e.pod(f"new{i}", None) for i in range(3)])
            await e.wait_bound(4)
            items = await _settled(e, {"new0", "new1", "new2"}, 2)
            new = [items[n] for n in ("new0", "new1", "new2") if items[n]["spec"].get("nodeName")]
            assert len(new) == 2, "the node was filled beyond its 4 GPUs"
            got = [record(p).devices[0].index for p in new]
            assert taken not in got and len(set(got)) == 2
            assert all(p["spec"]["nodeName"] == node for p in new)

    asyncio.run(main())


def test_a_gpu_pod_bound_by_another_path_is_counted(k8s_control_plane) -> None:
    """(g) the tenant creates a GPU pod with spec.nodeName preset on a gpugov node: gpugov
    does not fill that node beyond its capacity."""
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            (node,) = await e.add_nodes(1, 4)
            await e.queue("q")
            await _start(e, k8s_control_plane)
            tenant = await _tenant(k8s_control_plane, e.ns)
            try:
                preset = gpu_pod("preset", e.ns, "default-scheduler",
                                 limits={names.GPU_RESOURCE: "2"})
                preset["spec"]["nodeName"] = node
                await create_all(tenant, PODS, [preset])
                await e.wait_bound(1)
                await create_all(tenant, PODS, [e.pod(f"p{i}", None) for i in range(4)])
                await e.wait_bound(3)
                items = list((await _settled(e, {f"p{i}" for i in range(4)}, 2)).values())
                ours = [p for p in bound(items) if p["metadata"]["name"] != "preset"]
                assert len(ours) == 2, "gpugov filled the node beyond its 4 GPUs"
                await tenant.request("DELETE", f"/api/v1/namespaces/{e.ns}/pods/preset",
                                     {"gracePeriodSeconds": 0})
                await e.wait_bound(4)  # its GPUs are free again once it is gone
            finally:
                await tenant.close()

    asyncio.run(main())
