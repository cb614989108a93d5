"""DRA mode end to end, on a real v1.34 API server (DRA alpha gates on) with gpugov's webhook
(as the chart's webhook identity), kube-scheduler, the claim controller (KCM) and kwok nodes:
extended-resource pods of a DRA-mode Tenant become ResourceClaims the webhook's templates
describe, kube-scheduler allocates them from gpugov's slices and the governor admits them to
the Tenant's queue; several GPU containers and a GPU init container each get their own claim
(and the kubelet plugin's limits for it); a tenant can neither switch DRA mode nor plant a
template gpugov would trust; a dryRun writes nothing."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from gpugov.k8s import annotations as ann
from gpugov.k8s.devcluster.dev import apply_webhook_configurations, install_crds, start_webhook
from gpugov.k8s.devcluster.pytest_plugin import DevCluster
from gpugov.k8s.devcluster.rbac import apply_component_rbac
from gpugov.k8s.dra import templates as tpl
from gpugov.k8s.dra.governor import Governor
from gpugov.k8s.dra.publisher import SlicePublisher, probe_features
from gpugov.k8s.scheduler.kube import Kube
from gpugov.k8s.webhook import dra_translate, registration
from gpugov.model.devices import DeviceMode
from gpugov.node.dra.prepare import NodePaths, build

sys.path.insert(0, str(Path(__file__).parent))
from dra_support import gpu, inventory, kwok_node, post, stop_all, wait_for  # noqa: E402

SCOPE = {"gpugov-dra-translate-e2e": "true"}  # only these namespaces reach the webhook
G = "/apis/gpugov.io/v1alpha1"
R = "/apis/resource.k8s.io/v1"
HAMI = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "30"}


@pytest.fixture(scope="module")
def hooked(dra_plane):
    """The plane with gpugov's CRDs and its webhook running as the chart's webhook identity."""
    plane = dra_plane
    asyncio.run(install_crds(plane.kubeconfig))
    ident = asyncio.run(apply_component_rbac(plane.kubeconfig, "webhook", "gpugov-system",
                                             plane.workdir / "webhook.kubeconfig"))
    url = start_webhook(plane, kubeconfig=ident)
    objs = registration.configurations(plane.ca.pair.cert, url=url)
    for o in objs:
        for hook in o["webhooks"]:
            if "namespaceSelector" in hook:
                hook["namespaceSelector"]["matchLabels"] = dict(SCOPE)
    asyncio.run(apply_webhook_configurations(plane.kubeconfig, objs))
    yield DevCluster(plane)


async def _dra_tenant(kube: Kube, cluster: DevCluster, prefix: str, dra: dict | None
                      ) -> str:
    """A namespace in the webhook's scope whose Tenant (own queue) has `spec.dra`."""
    ns = await cluster.unique_namespace(prefix, SCOPE)
    await post(kube, f"{G}/queues", {"apiVersion": "gpugov.io/v1alpha1", "kind": "Queue",
                                     "metadata": {"name": f"q-{ns}"},
                                     "spec": {"quota": {"gpu": 8}, "limit": {"gpu": 8}}})
    spec: dict = {"queue": f"q-{ns}", "namespaces": [ns]}
    if dra is not None:
        spec["dra"] = dra
    await post(kube, f"{G}/tenants", {"apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                                      "metadata": {"name": ns}, "spec": spec})
    return ns


PIN = "gpugov-dra-translate-node"  # each test's pods go to its own node


def _node(name: str, inv) -> dict:
    n = kwok_node(name, inv)
    n["metadata"]["labels"][PIN] = name
    return n


def _pod(name: str, containers: list[dict], init: list[dict] | None = None,
         annotations: dict | None = None, node: str = "") -> dict:
    spec: dict = {"tolerations": [{"operator": "Exists"}], "containers": containers}
    if node:
        spec["nodeSelector"] = {PIN: node}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}}, "spec": spec}


def _c(name: str, limits: dict | None = None) -> dict:
    c: dict = {"name": name, "image": "fake"}
    if limits:
        c["resources"] = {"limits": dict(limits)}
    return c


async def _bound(kube: Kube, ns: str, name: str) -> str:
    _, p = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return p["spec"].get("nodeName") or ""


async def _wait_bound(kube: Kube, ns: str, name: str) -> str:
    """The pod's node once bound; on a timeout the assertion shows the pod's status."""
    try:
        return await wait_for(lambda: _bound(kube, ns, name), f"{name} bound")
    except AssertionError:
        _, p = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        raise AssertionError(f"{ns}/{name} not bound: {p.get('status')}") from None


async def _claims(kube: Kube, ns: str, name: str) -> dict[str, dict]:
    """The pod's claims by its entry name, once the claim controller made them all."""
    async def made() -> dict[str, dict] | None:
        _, p = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        statuses = (p.get("status") or {}).get("resourceClaimStatuses") or []
        if len(statuses) < len(p["spec"].get("resourceClaims") or []):
            return None
        out = {}
        for s in statuses:
            _, c = await kube.request(
                "GET", f"{R}/namespaces/{ns}/resourceclaims/{s['resourceClaimName']}")
            out[s["name"]] = c
        return out
    return await wait_for(made, f"claims of {ns}/{name}")


def _result(claim: dict) -> dict:
    (res,) = claim["status"]["allocation"]["devices"]["results"]
    return res


async def _governed(kube_admin: Kube, plane, stop: asyncio.Event) -> tuple[Kube, list]:
    """Publisher and governor as gpugov's scheduler identity (the chart's RBAC)."""
    ident = await Kube.from_kubeconfig(await apply_component_rbac(
        plane.kubeconfig, "scheduler", "gpugov-system", plane.workdir / "sched.kubeconfig"))
    features = await probe_features(ident, governed=True)
    pub = SlicePublisher(ident, features)
    await pub.ensure_classes()
    gov = Governor(ident, interval=0.3)
    return ident, [asyncio.create_task(pub.run(stop)), asyncio.create_task(gov.run(stop))]


A100 = "A100-SXM4-80GB"


def test_gpugovs_scheduler_binds_translated_pods_when_it_allocates(hooked) -> None:
    """`spec.dra.allocator: gpugov`: the webhook hands the translated pod to gpugov's
    scheduler, which allocates its claims itself (queue, quota) and binds: a HAMi-spelled pod,
    and a pod whose two GPU containers and GPU init container each have their own slice
    claim (of one size: gpugov's scheduler places one slice size per pod)."""
    from gpugov.k8s.devcluster.dev import install_podgroup_crd
    from gpugov.k8s.scheduler.apply import Applier
    from gpugov.k8s.scheduler.runner import Runner
    from gpugov.k8s.scheduler.state import SchedulerState

    plane = hooked.plane
    select = {"gpugov-dra-translate-own": "1"}

    async def main() -> None:
        await install_podgroup_crd(plane.kubeconfig)
        kube = await Kube.from_kubeconfig(plane.kubeconfig)
        ident = await Kube.from_kubeconfig(await apply_component_rbac(
            plane.kubeconfig, "scheduler", "gpugov-system", plane.workdir / "own.kubeconfig"))
        state = SchedulerState(scheduler_name=ann.SCHEDULER_NAME, node_selector=select)
        stop = asyncio.Event()
        features = await probe_features(ident)
        pub = SlicePublisher(ident, features)
        await pub.ensure_classes()
        tasks = [asyncio.create_task(pub.run(stop)), asyncio.create_task(
            Runner(ident, state, Applier(ident, state), period=0.5).run(stop))]
        try:
            node = kwok_node("tr-own", inventory(gpu(0, DeviceMode.SOFT, model=A100),
                                                 gpu(1, DeviceMode.SOFT, model=A100)))
            node["metadata"]["labels"].update(select)
            await post(kube, "/api/v1/nodes", node)
            ns = await _dra_tenant(kube, hooked, "dra-own", {"allocator": "gpugov"})
            pods = f"/api/v1/namespaces/{ns}/pods"
            hami = await post(kube, pods, _pod("hami", [_c("main", HAMI)]))
            assert hami["spec"]["schedulerName"] == ann.SCHEDULER_NAME
            assert await _wait_bound(kube, ns, "hami") == "tr-own"
            c = (await _claims(kube, ns, "hami"))["gpu-main"]
            assert _result(c)["consumedCapacity"] == {"memory": "20000Mi", "compute": "30"}
            assert c["status"]["reservedFor"][0]["name"] == "hami"
            # (gpugov's scheduler places one slice size per pod: one shape, three claims)
            await post(kube, pods, _pod("multi", [_c("train", HAMI), _c("infer", HAMI)],
                                        init=[_c("warm", HAMI)]))
            assert await _wait_bound(kube, ns, "multi") == "tr-own"
            claims = await _claims(kube, ns, "multi")
            got = {k: _result(v)["consumedCapacity"] for k, v in claims.items()}
            assert got == {k: {"memory": "20000Mi", "compute": "30"}
                           for k in ("gpu-warm", "gpu-train", "gpu-infer")}
            assert len({c["metadata"]["uid"] for c in claims.values()}) == 3
        finally:
            await stop_all(stop, tasks, ident, kube)

    asyncio.run(main())


def test_hami_nvidia_and_kai_pods_become_claims_kube_scheduler_binds(hooked) -> None:
    """A HAMi-spelled pod (gpu 1, gpumem 20000, gpucores 30), a KAI gpu-fraction pod and an
    NVIDIA `nvidia.com/gpu: 1` pod of a DRA-mode Tenant: the webhook writes the templates as
    its own identity, the claim controller makes the claims, kube-scheduler allocates them
    from gpugov's slices once the governor admits them to the Tenant's queue, and the pods
    bind. Each claim holds exactly what was asked."""
    plane = hooked.plane

    async def main() -> None:
        kube = await Kube.from_kubeconfig(plane.kubeconfig)
        stop = asyncio.Event()
        ident, tasks = await _governed(kube, plane, stop)
        try:
            await post(kube, "/api/v1/nodes", _node("tr-n1", inventory(
                gpu(0, model=A100), gpu(1, DeviceMode.SOFT, model=A100))))
            ns = await _dra_tenant(kube, hooked, "dra-tr", {"allocator": "kube-scheduler",
                                                             "models": [A100]})
            pods = f"/api/v1/namespaces/{ns}/pods"
            hami = await post(kube, pods, _pod("hami", [_c("main", HAMI)], node="tr-n1"))
            # what the webhook made of it: a claim, no extended resources, the record
            (c,) = hami["spec"]["containers"]
            assert not any(k.startswith("nvidia.com/") for k in c["resources"].get("limits", {}))
            assert c["resources"]["claims"] == [{"name": "gpu-main"}]
            assert hami["spec"]["schedulerName"] == "default-scheduler"
            (entry,) = hami["spec"]["resourceClaims"]
            record = json.loads(hami["metadata"]["annotations"][dra_translate.DRA_REQUEST])
            assert record["main"]["asked"] == HAMI
            assert hami["metadata"]["annotations"][ann.QUEUE] == f"q-{ns}"
            _, t = await kube.request("GET", f"{R}/namespaces/{ns}/resourceclaimtemplates/"
                                      f"{entry['resourceClaimTemplateName']}")
            assert t["metadata"]["labels"][tpl.MANAGED_BY] == "gpugov"
            assert tpl.shape_of_claim(t["spec"]["spec"]) == tpl.Shape(
                "slice", compute=30, memory_mib=20000)
            assert await _wait_bound(kube, ns, "hami") == "tr-n1"
            res = _result((await _claims(kube, ns, "hami"))["gpu-main"])
            assert (res["pool"], res["device"]) == ("tr-n1", "gpu-1")
            assert res["consumedCapacity"] == {"memory": "20000Mi", "compute": "30"}
            # `gpugov explain` shows what the pod asked and the claim it became
            from gpugov.k8s.scheduler.explain import explain_pod

            said = "\n".join(await explain_pod(plane.kubeconfig, ns, "hami"))
            assert "bound to node tr-n1" in said and "-> claim 'gpu-main'" in said, said
            # KAI's gpu-fraction: half of the card it lands on (the Tenant's fleet: A100 80GB)
            await post(kube, pods, _pod("kai", [_c("main")], node="tr-n1",
                                        annotations={"gpu-fraction": "0.5"}))
            assert await _wait_bound(kube, ns, "kai") == "tr-n1"
            res = _result((await _claims(kube, ns, "kai"))["gpu-main"])
            assert res["device"] == "gpu-1"
            assert res["consumedCapacity"] == {"memory": "40Gi", "compute": "50"}
            # NVIDIA's whole GPU: the soft GPU is partly taken, so gpu-0 whole
            await post(kube, pods, _pod("nvidia", [_c("main", {"nvidia.com/gpu": "1"})],
                                        node="tr-n1"))
            assert await _wait_bound(kube, ns, "nvidia") == "tr-n1"
            claims = await _claims(kube, ns, "nvidia")
            assert _result(claims["gpu-main"])["device"] == "gpu-0"
            # the governor admitted each claim to the Tenant's queue (binding condition)
            for name in ("hami", "kai", "nvidia"):
                c = (await _claims(kube, ns, name))["gpu-main"]
                conds = {x["type"]: x["status"] for d in c["status"].get("devices") or []
                         for x in d.get("conditions") or []}
                assert conds.get("gpugov.io/admitted") == "True", (name, c["status"])
        finally:
            await stop_all(stop, tasks, ident, kube)

    asyncio.run(main())


def test_two_gpu_containers_and_a_gpu_init_container_each_get_their_own_claim(
        hooked, tmp_path) -> None:
    """A pod with a GPU init container (a whole GPU) and two GPU containers (a 20000 MiB /
    30 % slice and an 8000 MiB / 10 % slice): three claims, each container names its own,
    kube-scheduler allocates all three, and the kubelet plugin's CDI spec for each gives that
    container its own limits (none for the whole GPU)."""
    plane = hooked.plane

    async def main() -> None:
        kube = await Kube.from_kubeconfig(plane.kubeconfig)
        stop = asyncio.Event()
        ident, tasks = await _governed(kube, plane, stop)
        inv = inventory(gpu(0, model=A100), gpu(1, DeviceMode.SOFT, model=A100))
        try:
            await post(kube, "/api/v1/nodes", _node("tr-n2", inv))
            ns = await _dra_tenant(kube, hooked, "dra-multi", {"allocator": "kube-scheduler"})
            small = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000",
                     "nvidia.com/gpucores": "10"}
            created = await post(kube, f"/api/v1/namespaces/{ns}/pods", _pod(
                "multi", [_c("train", HAMI), _c("infer", small), _c("log")],
                init=[_c("warm", {"nvidia.com/gpu": "1"})], node="tr-n2"))
            spec = created["spec"]
            assert [c["name"] for c in spec["resourceClaims"]] == \
                ["gpu-warm", "gpu-train", "gpu-infer"]
            assert spec["initContainers"][0]["resources"]["claims"] == [{"name": "gpu-warm"}]
            assert [c.get("resources", {}).get("claims") for c in spec["containers"]] == \
                [[{"name": "gpu-train"}], [{"name": "gpu-infer"}], None]
            assert await _wait_bound(kube, ns, "multi") == "tr-n2"
            claims = await _claims(kube, ns, "multi")
            got = {}
            for entry, claim in claims.items():
                res = _result(claim)
                prepared = build(claim, "tr-n2", inv, await probe_features(kube),
                                 NodePaths(tmp_path / "cdi", tmp_path / "state",
                                           tmp_path / "libgpugov.so"))
                env = dict(e.split("=", 1) for d in prepared.spec["devices"]
                           for e in d["containerEdits"].get("env") or [])
                got[entry] = (res["device"], env.get("GPUGOV_MEMORY_LIMIT_0"),
                              env.get("GPUGOV_CORE_LIMIT_0"))
            assert got == {"gpu-warm": ("gpu-0", None, None),
                           "gpu-train": ("gpu-1", "20000Mi", "30"),
                           "gpu-infer": ("gpu-1", "8000Mi", "10")}
        finally:
            await stop_all(stop, tasks, ident, kube)

    asyncio.run(main())


def test_a_tenant_cannot_switch_dra_mode_or_plant_a_template_gpugov_trusts(hooked) -> None:
    """DRA mode is the Tenant's `spec.dra`, which a namespace's `edit` identity cannot
    write; a template under gpugov's name holding another claim is refused by name, and the
    pod with it; a dryRun shows the translated pod and writes no template."""
    plane = hooked.plane

    async def main() -> None:
        kube = await Kube.from_kubeconfig(plane.kubeconfig)
        try:
            ns = await _dra_tenant(kube, hooked, "dra-tenant", None)
            tenant = await Kube.from_kubeconfig(await hooked.tenant_kubeconfig(ns))
            try:
                status, doc = await tenant.request(
                    "PATCH", f"{G}/tenants/{ns}", {"spec": {"dra": {}}},
                    content_type="application/merge-patch+json")
                assert status == 403, (status, doc)
                status, _ = await tenant.request("PATCH", f"/api/v1/namespaces/{ns}",
                                                 {"metadata": {"labels": {"x": "y"}}},
                                                 content_type="application/merge-patch+json")
                assert status == 403
                # not in DRA mode: the device-plugin path, as before
                plain = await post(tenant, f"/api/v1/namespaces/{ns}/pods",
                                   _pod("plain", [_c("main", HAMI)]))
                assert "resourceClaims" not in plain["spec"]
                assert plain["spec"]["containers"][0]["resources"]["limits"][
                    "nvidia.com/gpumem"] == "20k"
                # an admin switches it on
                status, _ = await kube.request(
                    "PATCH", f"{G}/tenants/{ns}", {"spec": {"dra": {}}},
                    content_type="application/merge-patch+json")
                assert status == 200
                shape = tpl.Shape("slice", compute=30, memory_mib=20000)
                forged = tpl.template(shape, ns)
                forged["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"][
                    "requests"]["compute"] = "100"
                status, doc = await tenant.request(
                    "POST", f"{R}/namespaces/{ns}/resourceclaimtemplates", forged)
                assert status == 201, (status, doc)  # `edit` may write templates...

                async def refused() -> dict | None:
                    status, doc = await tenant.request(
                        "POST", f"/api/v1/namespaces/{ns}/pods", _pod("p", [_c("m", HAMI)]))
                    return doc if status == 403 else None
                doc = await wait_for(refused, "the pod refused")  # (the cache sees spec.dra)
                assert f"ResourceClaimTemplate {ns}/{tpl.template_name(shape)} is not " \
                    "gpugov's (forged)" in doc["message"], doc
                # ...and a dryRun of another shape writes nothing
                status, doc = await tenant.request(
                    "POST", f"/api/v1/namespaces/{ns}/pods",
                    _pod("dry", [_c("m", {"nvidia.com/gpu": "1"})]), query=[("dryRun", "All")])
                assert status == 201, doc
                (entry,) = doc["spec"]["resourceClaims"]
                status, _ = await kube.request(
                    "GET", f"{R}/namespaces/{ns}/resourceclaimtemplates/"
                    f"{entry['resourceClaimTemplateName']}")
                assert status == 404
                _, listed = await kube.request(
                    "GET", f"{R}/namespaces/{ns}/resourceclaimtemplates")
                assert [t["metadata"]["name"] for t in listed["items"]] == \
                    [tpl.template_name(shape)]  # only the tenant's own
            finally:
                await tenant.close()
        finally:
            await kube.close()

    asyncio.run(main())
