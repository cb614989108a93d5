"""gpugov's scheduler allocating DRA claims itself, on the real apiserver (docs/dra.md, path 1).

A v1.34 control plane with the DRA gates (kube-controller-manager turns templates into
claims), kwok nodes labelled `gpugov.io/dra=true` whose slices gpugov publishes, and gpugov's
scheduler under the chart's scheduler identity: it translates each pod's claims into its one
request, places it with its Tenant's queue, writes the claims' allocation and reservation,
binds, and releases the claims when the pod goes. Quota, reclaim and gangs are the
scheduler's own machinery; bad claims are refused on the pod with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gpugov.k8s.dra.publisher import SlicePublisher, probe_features
from gpugov.k8s.dra.slices import SLICE_CLASS
from gpugov.k8s.scheduler.apply import Applier
from gpugov.k8s.scheduler.kube import Kube
from gpugov.k8s.scheduler.runner import Runner
from gpugov.k8s.scheduler.state import SchedulerState
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
    wait_for,
)

G = "/apis/gpugov.io/v1alpha1"
R = "/apis/resource.k8s.io/v1"


class Env:
    """One test's namespace, queues, nodes and a gpugov scheduler that sees only its nodes."""

    def __init__(self, kube: Kube, tag: str) -> None:
        self.kube, self.tag = kube, tag
        self.select = {f"gpugov-dra-alloc-{tag}": "1"}
        self.state = SchedulerState(scheduler_name=f"gpugov-{tag}", node_selector=self.select)
        self.queues: list[str] = []  # deleted after the test (Queues are cluster-wide)

    async def node(self, name: str, *devices: Any) -> None:
        n = kwok_node(name, inventory(*devices))
        n["metadata"]["labels"].update(self.select)
        await post(self.kube, "/api/v1/nodes", n)

    async def tenant(self, ns: str, queue: str, **spec: Any) -> None:
        await post(self.kube, "/api/v1/namespaces", {"metadata": {"name": ns}})
        await post(self.kube, f"{G}/queues", {"apiVersion": "gpugov.io/v1alpha1",
                                               "kind": "Queue", "metadata": {"name": queue},
                                               "spec": spec})
        self.queues.append(queue)
        await post(self.kube, f"{G}/tenants", {
            "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": queue}, "spec": {"queue": queue, "namespaces": [ns]}})

    async def template(self, ns: str, name: str, requests: list[dict]) -> None:
        await post(self.kube, f"{R}/namespaces/{ns}/resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": requests}}}})

    async def pod(self, ns: str, name: str, claims: dict[str, str], template: bool = True,
                  labels: dict[str, str] | None = None, **spec: Any) -> None:
        p = claim_pod(name, ns, claims, scheduler=f"gpugov-{self.tag}", template=template)
        p["metadata"]["labels"] = labels or {}
        p["spec"].update(spec)
        await post(self.kube, f"/api/v1/namespaces/{ns}/pods", p)

    async def get(self, path: str) -> dict:
        code, doc = await self.kube.request("GET", path)
        return doc if code == 200 else {}

    async def node_of(self, ns: str, name: str) -> str:
        return ((await self.get(f"/api/v1/namespaces/{ns}/pods/{name}")).get("spec")
                or {}).get("nodeName") or ""

    async def bound(self, ns: str, name: str, timeout: float = 60) -> str:
        """The pod's node once bound (AssertionError with its PodScheduled reason)."""
        try:
            return await wait_for(lambda: self.node_of(ns, name), f"{ns}/{name} bound",
                                  timeout=timeout)
        except AssertionError as e:
            raise AssertionError(f"{e}; reason: {await self.reason(ns, name)!r}") from None

    async def reason(self, ns: str, name: str) -> str:
        p = await self.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                return c.get("message", "")
        return ""

    async def claim_of(self, ns: str, pod: str, pod_claim: str = "gpu") -> dict:
        p = await self.get(f"/api/v1/namespaces/{ns}/pods/{pod}")
        for s in (p.get("status") or {}).get("resourceClaimStatuses") or []:
            if s.get("name") == pod_claim and s.get("resourceClaimName"):
                return await self.get(f"{R}/namespaces/{ns}/resourceclaims/"
                                      f"{s['resourceClaimName']}")
        return {}


@contextlib.asynccontextmanager
async def running(plane: Any, tag: str) -> AsyncIterator[Env]:
    """gpugov's scheduler (the chart's identity) and the slice publisher, for one test."""
    from gpugov.k8s.devcluster.dev import install_crds, install_podgroup_crd
    from gpugov.k8s.devcluster.rbac import apply_component_rbac

    await install_crds(plane.kubeconfig)
    await install_podgroup_crd(plane.kubeconfig)
    kube = await Kube.from_kubeconfig(plane.kubeconfig)
    ident = await Kube.from_kubeconfig(await apply_component_rbac(
        plane.kubeconfig, "scheduler", "gpugov-system", plane.workdir / f"sched-{tag}.kc"))
    env = Env(kube, tag)
    stop = asyncio.Event()
    runner = Runner(ident, env.state, Applier(ident, env.state), period=0.5)
    features = await probe_features(ident)
    assert features.consumable_capacity
    tasks = [asyncio.create_task(SlicePublisher(ident, features).run(stop)),
             asyncio.create_task(runner.run(stop))]
    try:
        yield env
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for q in env.queues:  # other tests' schedulers would count their guarantees
            await kube.request("DELETE", f"{G}/queues/{q}")
        await kube.close()
        await ident.close()


def test_a_template_slice_claim_is_allocated_bound_charged_and_released(dra_plane) -> None:
    """A pod with a 20 GiB / 30 % slice template: gpugov writes the claim's allocation
    (consumedCapacity, shareID, nodeSelector) and reservation, binds the pod, charges its
    queue; when the pod goes, the claim is released and the queue's usage drops."""
    ns = "da-slice"

    async def main() -> None:
        async with running(dra_plane, "slice") as e:
            await e.node("da-slice-n", gpu(0, DeviceMode.SOFT), gpu(1, DeviceMode.SOFT))
            await e.tenant(ns, "da-slice-q", quota={"gpu": 1})
            await e.template(ns, "slice", [request(
                "gpu", SLICE_CLASS, capacity={"memory": "20Gi", "compute": "30"},
                selector='device.attributes["gpu.gpugov.io"].model == "A100-SXM4-80GB"')])
            await e.pod(ns, "p", {"gpu": "slice"})
            assert await e.bound(ns, "p") == "da-slice-n"
            c = await e.claim_of(ns, "p")
            (res,) = c["status"]["allocation"]["devices"]["results"]
            assert res["driver"] == "gpu.gpugov.io" and res["pool"] == "da-slice-n"
            assert res["device"] in ("gpu-0", "gpu-1") and res["request"] == "gpu"
            assert res["consumedCapacity"] == {"memory": "20Gi", "compute": "30"}
            assert len(res["shareID"]) == 36
            sel = c["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
            assert sel["matchFields"][0]["values"] == ["da-slice-n"]
            pod = await e.get(f"/api/v1/namespaces/{ns}/pods/p")
            assert c["status"]["reservedFor"] == [{"resource": "pods", "name": "p",
                                                   "uid": pod["metadata"]["uid"]}]
            assert "resource.kubernetes.io/delete-protection" in c["metadata"]["finalizers"]

            async def usage(gpus: float) -> dict:
                s = (await e.get(f"{G}/queues/da-slice-q")).get("status") or {}
                return s if (s.get("usage") or {}).get("gpu") == gpus else {}

            s = await wait_for(lambda: usage(0.3), "the slice charged to its queue")
            assert s["usage"]["gpumem"] == 20 and s["draUsage"]["gpu"] == 0, s
            # the pod goes: its claim is released (then deleted with the pod) and uncharged
            await e.kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/p",
                                 {"gracePeriodSeconds": 0})

            async def released() -> bool:
                got = await e.get(f"{R}/namespaces/{ns}/resourceclaims/"
                                  f"{c['metadata']['name']}")
                return not got or not (got.get("status") or {}).get("allocation")

            await wait_for(released, "the claim released")
            await wait_for(lambda: usage(0.0), "the queue uncharged")
            assert not e.state.errors.get("cycle"), e.state.errors

    asyncio.run(main())


def test_a_queue_under_its_guarantee_reclaims_a_dra_pods_gpu(dra_plane) -> None:
    """Two DRA pods of qlow (guarantee 1 GPU) hold both GPUs; a DRA pod of qhigh (guarantee
    1) evicts one of them (gpugov's reclaim, a Preempted Event) and gets its GPU."""
    low, high = "da-low", "da-high"

    async def main() -> None:
        async with running(dra_plane, "reclaim") as e:
            await e.node("da-rc-n", gpu(0), gpu(1))
            await e.tenant(low, "da-qlow", quota={"gpu": 1})
            await e.tenant(high, "da-qhigh", quota={"gpu": 1})
            for ns in (low, high):
                await e.template(ns, "whole", [request("gpu", "gpu.gpugov.io")])
            for i in range(2):
                await e.pod(low, f"l{i}", {"gpu": "whole"})
            for i in range(2):
                assert await e.bound(low, f"l{i}")
            await e.pod(high, "h", {"gpu": "whole"})
            assert await e.bound(high, "h", timeout=120) == "da-rc-n"
            left = [i for i in range(2) if await e.node_of(low, f"l{i}")]
            assert len(left) == 1, left
            events = (await e.get(f"/api/v1/namespaces/{low}/events")).get("items") or []
            assert any(ev.get("reason") == "Preempted" and f"{high}/h" in ev.get("message", "")
                       for ev in events)
            c = await e.claim_of(high, "h")
            (res,) = c["status"]["allocation"]["devices"]["results"]
            mine = await e.claim_of(low, f"l{left[0]}")
            (other,) = mine["status"]["allocation"]["devices"]["results"]
            assert res["device"] != other["device"]  # never one GPU in two claims

    asyncio.run(main())


def test_a_gang_of_claim_pods_binds_all_or_nothing(dra_plane) -> None:
    """A PodGroup of 3 one-GPU claim pods on a 2-GPU node binds none; a gang of 2 binds
    both."""
    ns = "da-gang"

    async def main() -> None:
        async with running(dra_plane, "gang") as e:
            await e.node("da-gang-n", gpu(0), gpu(1))
            await e.tenant(ns, "da-gang-q")
            await e.template(ns, "whole", [request("gpu", "gpu.gpugov.io")])
            pg = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
            for name, n in (("big", 3), ("small", 2)):
                await post(e.kube, pg, {"apiVersion": "scheduling.x-k8s.io/v1alpha1",
                                        "kind": "PodGroup", "metadata": {"name": name},
                                        "spec": {"minMember": n}})
            for i in range(3):
                await e.pod(ns, f"b{i}", {"gpu": "whole"},
                            labels={"scheduling.x-k8s.io/pod-group": "big"})
            await wait_for(lambda: e.reason(ns, "b0"), "the big gang held")
            await asyncio.sleep(2)
            assert [await e.node_of(ns, f"b{i}") for i in range(3)] == ["", "", ""]
            for i in range(3):
                c = await e.claim_of(ns, f"b{i}")
                assert not (c.get("status") or {}).get("allocation"), c
                await e.kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/b{i}",
                                     {"gracePeriodSeconds": 0})
            for i in range(2):
                await e.pod(ns, f"s{i}", {"gpu": "whole"},
                            labels={"scheduling.x-k8s.io/pod-group": "small"})
            for i in range(2):
                assert await e.bound(ns, f"s{i}", timeout=120) == "da-gang-n"

    asyncio.run(main())


def test_bad_claims_get_a_clear_reason_on_the_pod(dra_plane) -> None:
    """An unknown DeviceClass, a capacity above any device, a selector no device matches, and
    a selector that fails on a device: each pod stays pending with the reason, the others
    unaffected."""
    ns = "da-bad"

    async def main() -> None:
        async with running(dra_plane, "bad") as e:
            await e.node("da-bad-n", gpu(0, DeviceMode.SOFT))
            await e.tenant(ns, "da-bad-q")
            cases = {
                "nocls": ([request("gpu", "nvidia-gpu.example.com")],
                          "DeviceClass 'nvidia-gpu.example.com' does not exist"),
                "huge": ([request("gpu", SLICE_CLASS, capacity={"memory": "200Gi"})],
                         "the largest device of its class has 81920 MiB"),
                "nomatch": ([request("gpu", "gpu.gpugov.io",
                                     selector='device.attributes["gpu.gpugov.io"].model'
                                              ' == "B200"')],
                            "its selectors match none of the 1 devices"),
                # the apiserver compiles selectors at create; this one fails on a device
                "fails": ([request("gpu", "gpu.gpugov.io",
                                   selector='device.attributes["gpu.gpugov.io"].nosuch == 1')],
                          "failed on device 'gpu-0'"),
            }
            for name, (reqs, _) in cases.items():
                await post(e.kube, f"{R}/namespaces/{ns}/resourceclaims", claim(name, ns, reqs))
                await e.pod(ns, name, {"gpu": name}, template=False)
            await e.template(ns, "ok", [request("gpu", "gpu.gpugov.io")])
            await e.pod(ns, "ok", {"gpu": "ok"})
            assert await e.bound(ns, "ok") == "da-bad-n"
            for name, (_, text) in cases.items():
                said = await wait_for(lambda name=name: e.reason(ns, name), f"{name} held")
                assert said.startswith("gpugov: invalid-request") and text in said, said
                assert await e.node_of(ns, name) == ""
            assert not e.state.errors.get("cycle"), e.state.errors

    asyncio.run(main())


def test_gpugov_and_kube_scheduler_never_allocate_one_gpu_twice(dra_plane) -> None:
    """kube-scheduler allocates one of a node's two GPUs to its pod's claim; gpugov then gives
    its pod the other one, a gpugov pod asking for two waits, and a second kube-scheduler pod
    finds no GPU left."""
    ns = "da-mix"

    async def main() -> None:
        async with running(dra_plane, "mix") as e:
            await e.node("da-mix-n", gpu(0), gpu(1))
            await e.tenant(ns, "da-mix-q")
            await e.template(ns, "whole", [request("gpu", "gpu.gpugov.io")])
            await e.template(ns, "two", [request("gpu", "gpu.gpugov.io", count=2)])
            pin = {"nodeSelector": dict(e.select)}  # kube-scheduler: this node only
            kp = claim_pod("ks", ns, {"gpu": "whole"}, template=True)
            kp["spec"].update(pin)
            await post(e.kube, f"/api/v1/namespaces/{ns}/pods", kp)
            assert await e.bound(ns, "ks") == "da-mix-n"
            await e.pod(ns, "g1", {"gpu": "whole"})
            assert await e.bound(ns, "g1") == "da-mix-n"
            await e.pod(ns, "g2", {"gpu": "two"})
            devices = [(await e.claim_of(ns, p))["status"]["allocation"]["devices"]["results"]
                       [0]["device"] for p in ("ks", "g1")]
            assert sorted(devices) == ["gpu-0", "gpu-1"], devices
            assert "gpugov:" in await wait_for(lambda: e.reason(ns, "g2"), "g2 held")
            kp2 = claim_pod("ks2", ns, {"gpu": "whole"}, template=True)
            kp2["spec"].update(pin)
            await post(e.kube, f"/api/v1/namespaces/{ns}/pods", kp2)
            await asyncio.sleep(3)
            assert await e.node_of(ns, "ks2") == "" and await e.node_of(ns, "g2") == ""

    asyncio.run(main())
