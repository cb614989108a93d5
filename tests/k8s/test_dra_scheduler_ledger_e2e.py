"""One ledger on the real apiserver: a DRA pod's claim, allocated by kube-scheduler from
gpugov's slices and admitted by the governor, fills its queue; gpugov's scheduler (the chart's
identity and RBAC) counts it, holds a device-plugin pod of that queue over-quota naming the
queue, and binds it once the DRA pod and its claim are gone."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from gpugov.k8s.dra.governor import Governor
from gpugov.k8s.dra.publisher import SlicePublisher, probe_features
from gpugov.k8s.scheduler.apply import Applier
from gpugov.k8s.scheduler.kube import Kube
from gpugov.k8s.scheduler.runner import Runner
from gpugov.k8s.scheduler.state import SchedulerState

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

SCHED = "gpugov-dra-ledger"
SELECT = {"gpugov-dra-ledger": "1"}
NS = "dl-a"
G = "/apis/gpugov.io/v1alpha1"


def test_a_device_plugin_pod_waits_while_a_dra_claim_fills_its_queue(dra_plane) -> None:
    from gpugov.k8s.devcluster.dev import install_crds
    from gpugov.k8s.devcluster.rbac import apply_component_rbac

    async def main() -> None:
        await install_crds(dra_plane.kubeconfig)
        kube = await Kube.from_kubeconfig(dra_plane.kubeconfig)
        ident = await Kube.from_kubeconfig(await apply_component_rbac(
            dra_plane.kubeconfig, "scheduler", "gpugov-system",
            dra_plane.workdir / "scheduler.kubeconfig"))
        stop = asyncio.Event()
        state = SchedulerState(scheduler_name=SCHED, node_selector=SELECT)
        runner = Runner(ident, state, Applier(ident, state), period=0.5)
        tasks = []
        try:
            features = await probe_features(ident, governed=True)
            tasks = [asyncio.create_task(SlicePublisher(ident, features).run(stop)),
                     asyncio.create_task(Governor(ident, interval=0.3).run(stop)),
                     asyncio.create_task(runner.run(stop))]
            dra = kwok_node("dl-dra", inventory(gpu(0, model="LEDGER-GPU"),
                                                gpu(1, model="LEDGER-GPU")))
            dra["metadata"]["labels"].update(SELECT)
            plain = kwok_node("dl-plain", inventory(gpu(0), gpu(1)))
            plain["metadata"]["labels"] = {"type": "kwok", **SELECT}
            plain["status"]["allocatable"]["nvidia.com/gpu"] = "2"
            plain["status"]["capacity"]["nvidia.com/gpu"] = "2"
            for n in (dra, plain):
                await post(kube, "/api/v1/nodes", n)
            await post(kube, "/api/v1/namespaces", {"metadata": {"name": NS}})
            await post(kube, f"{G}/queues", {
                "apiVersion": "gpugov.io/v1alpha1", "kind": "Queue",
                "metadata": {"name": "dlq"},
                "spec": {"quota": {"gpu": 2}, "limit": {"gpu": 2}}})
            await post(kube, f"{G}/tenants", {
                "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": "dlt"}, "spec": {"queue": "dlq", "namespaces": [NS]}})

            async def pod(name: str) -> dict:
                code, p = await kube.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}")
                return p if code == 200 else {}

            async def node_of(name: str) -> str:
                return ((await pod(name)).get("spec") or {}).get("nodeName") or ""

            async def queue_status() -> dict:
                _, q = await kube.request("GET", f"{G}/queues/dlq")
                return q.get("status") or {}

            # a DRA pod holds both LEDGER-GPUs through one claim (kube-scheduler allocates,
            # the governor admits: 0 + 2 <= 2)
            model = 'device.attributes["gpu.gpugov.io"].model == "LEDGER-GPU"'
            await post(kube, f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims",
                       claim("two", NS, [request("g", "gpu.gpugov.io", count=2,
                                                 selector=model)]))
            await post(kube, f"/api/v1/namespaces/{NS}/pods",
                       claim_pod("dra", NS, {"gpu": "two"}))
            assert await wait_for(lambda: node_of("dra"), "DRA pod bound") == "dl-dra"

            async def counted() -> dict:
                s = await queue_status()
                return s if (s.get("draUsage") or {}).get("gpu") == 2 else {}

            status = await wait_for(counted, "the claim in dlq's status")
            assert status["usage"]["gpu"] == 2 and status["usage"]["gpumem"] == 160, status
            # a device-plugin pod of the same queue: held over-quota, naming the queue
            await post(kube, f"/api/v1/namespaces/{NS}/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dp", "namespace": NS},
                "spec": {"schedulerName": SCHED, "tolerations": [{"operator": "Exists"}],
                        "containers": [{
                    "name": "main", "image": "fake",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})

            async def held() -> str:
                for c in ((await pod("dp")).get("status") or {}).get("conditions") or []:
                    if c.get("type") == "PodScheduled" and c.get("status") == "False":
                        return c.get("message", "")
                return ""

            said = await wait_for(held, "dp held")
            assert said.startswith("gpugov: over-quota") and "queue dlq" in said, said
            await asyncio.sleep(2)  # a few cycles: still held
            assert await node_of("dp") == ""
            # the DRA pod and its claim leave: the queue's room is free, dp binds
            for path in (f"/api/v1/namespaces/{NS}/pods/dra",
                         f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/two"):
                code, doc = await kube.request("DELETE", path, {"gracePeriodSeconds": 0})
                assert code in (200, 202), (path, code, doc)
            assert await wait_for(lambda: node_of("dp"), "dp bound after the claim left",
                                  timeout=120) == "dl-plain"

            async def released() -> dict:
                s = await queue_status()
                return s if (s.get("draUsage") or {}).get("gpu") == 0 else {}

            status = await wait_for(released, "the claim released in dlq's status")
            assert status["usage"]["gpu"] == 1, status
            assert not state.errors.get("claim"), state.errors
        finally:
            await stop_all(stop, tasks, kube, ident)

    asyncio.run(main())
