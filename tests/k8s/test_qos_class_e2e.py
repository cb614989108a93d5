"""The QoS class on the real apiserver: gpugov's scheduler writes each soft slice's in-GPU
priority into its allocation record from the pod's PriorityClass and gpugov's
PriorityPolicy; a tenant that is not trusted (soft slices go to `internal` tenants:
`untrusted` ones get hard isolation only) has its `nvidia.com/priority: 0` recorded as 1,
with a Warning Event on the pod (docs/scheduler.md, QoS class)."""

from __future__ import annotations

import asyncio

from gpugov.k8s.annotations import decode_allocation
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import TIMEOUT, bound, env, wait_until

PCS = "/apis/scheduling.k8s.io/v1/priorityclasses"
POLICIES = f"/apis/{names.GROUP}/{names.VERSION}/{names.PRIORITY_POLICIES}"
SOFT = {names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"}


def test_records_carry_the_qos_class_of_the_priority_class(k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await e.add_pools({"name": "soft", "count": 1, "model": "H100-SXM5-80GB",
                               "gpus": 4, "cpuMilli": 64000, "memoryMiB": 524288,
                               "devices": [{"index": "0-3", "mode": "soft"}]})
            q = await e.queue("q", quota={"gpu": 4})
            serving, batch = f"{e.uid}-serving", f"{e.uid}-batch"
            for name, value in ((serving, 1000), (batch, 10)):
                status, doc = await e.kube.request("POST", PCS, {
                    "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": name}, "value": value})
                assert status == 201, doc
                e.cluster_objs.append(f"{PCS}/{name}")
            status, doc = await e.kube.request("POST", POLICIES, {
                "apiVersion": f"{names.GROUP}/{names.VERSION}", "kind": "PriorityPolicy",
                "metadata": {"name": serving}, "spec": {"preemptible": False}})
            assert status == 201, doc
            e.cluster_objs.append(f"{POLICIES}/{serving}")
            outside = await k8s_control_plane.unique_namespace("qos-u")
            await e.tenant("u", {"namespaces": [outside], "queue": q, "trust": "internal"})
            e.start_scheduler()
            await e.pods([
                e.pod("infer", None, limits=SOFT, priority_class=serving),
                e.pod("train", None, limits=SOFT, priority_class=batch),
                e.pod("claims", None, namespace=outside,
                      limits={**SOFT, "nvidia.com/priority": "0"})])
            mine = await e.wait_bound(2)
            theirs = await e.wait_bound(1, outside)
            prio = {p["metadata"]["name"]: [
                d.priority for d in decode_allocation(
                    p["metadata"]["annotations"][names.ANN_ALLOCATION]).devices]
                for p in bound(mine) + bound(theirs)}
            assert prio == {"infer": [0], "train": [1], "claims": [1]}

            async def lowered():
                _, doc = await e.kube.request(
                    "GET", f"/api/v1/namespaces/{outside}/events",
                    query=[("fieldSelector", "involvedObject.name=claims")])
                return [ev for ev in doc.get("items") or []
                        if ev.get("reason") == "QoSClassLowered"] or None

            (ev,) = await wait_until(lowered, TIMEOUT, "the QoSClassLowered Event")
            assert ev["type"] == "Warning" and "recorded as 1" in ev["message"]

    asyncio.run(main())
