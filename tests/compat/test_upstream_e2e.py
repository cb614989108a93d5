"""Live: the projects' own example pods (tests/compat/upstream, unedited) applied to a real
kube-apiserver with gpugov's webhook (the migration values' adoption list) and scheduler
running, on kwok nodes of three card sizes; each pod's allocation record is what its docs
promise (N devices, each with the slice; percentages of the card it landed on; models the
annotations allow), and what gpugov cannot honour is refused with what to write instead."""

from __future__ import annotations

import asyncio
import math

import yaml
from tests.compat.upstream_pods import UPSTREAM, upstream_pods

from gpugov.k8s.annotations import decode_allocation
from gpugov.k8s.devcluster.dev import SYSTEM_NAMESPACE, apply_webhook_configurations
from gpugov.k8s.devcluster.plane import probe
from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.quantity import parse_quantity
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import (
    QUEUES,
    TENANTS,
    bound,
    condition,
    create_all,
    env,
    gpugov_argv,
    invariant_problems,
    pods,
    wait_until,
)
from gpugov.k8s.webhook import registration
from gpugov.k8s.webhook.admission import ORIGINAL_SCHEDULER
from gpugov.model.catalog import CATALOG

#: upstream pods applied live: file#pod -> (devices, per-device milli or None for a whole GPU,
#: memory: ("pct", P) | ("mib", M) | None, models the node must have or None)
LIVE = {
    "hami/examples/nvidia/use_memory_fraction.yaml#gpu-pod": (2, 300, ("pct", 50), None),
    "hami/examples/nvidia/use_sharing_card.yaml#gpu-pod1": (1, 600, ("pct", 40), None),
    "hami/examples/nvidia/use_sharing_card.yaml#gpu-pod2": (1, 400, ("pct", 60), None),
    "hami/examples/nvidia/default_use.yaml#gpu-pod": (1, 300, ("mib", 3000), None),
    "hami/examples/nvidia/vllm_cross_vgpu.yaml#vllm-cross-vgpu": (2, 300, ("pct", 30), None),
    "hami/examples/nvidia/specify_card_type_to_use.yaml#gpu-pod": (
        2, None, None, ("A100-SXM4-40GB", "A100-SXM4-80GB")),
    "kai/docs/gpu-sharing/gpu-sharing.yaml#gpu-sharing": (1, 500, ("pct", 50), None),
    "kai/docs/gpu-sharing/gpu-memory.yaml#gpu-sharing": (1, None, ("mib", 2000), None),
    "kai/docs/gpu-sharing/gpu-sharing-init-container.yaml#gpu-sharing-init-container": (
        1, None, ("pct", 50), None),
    "volcano/docs/user-guide/how_to_use_volcano_vgpu.md#hami-pod": (1, 500, ("mib", 3000),
                                                                     None),
    "device-plugin/README.md#gpu-pod": (1, None, None, None),
    # Kueue's HAMi sample hard-codes namespace kueue-test: the file's own Namespace is created
    "kueue/site/static/examples/serving-workloads/sample-hami.yaml#gpu-burn": (
        2, 300, ("mib", 1024), None),
}
KUEUE = "kueue/site/static/examples/serving-workloads/sample-hami.yaml"
#: the GPU Operator's time-slicing e2e: a Deployment of 5 `nvidia.com/gpu: 1` pods selecting
#: `nvidia.com/gpu.product: Tesla-T4-SHARED`, on a T4 node time-sliced by its
#: plugin-config.yaml (10 replicas, renameByDefault: false)
OPERATOR = "gpu-operator/tests/plugin-test.yaml#nvidia-plugin-test"
OPERATOR_CONFIG = UPSTREAM / "gpu-operator/tests/plugin-config.yaml"
#: refused at admission, with these words in kubectl's message
REFUSED = {
    "hami/examples/nvidia/specify_uuid_to_use.yaml#gpu-pod": ["use-gpuuuid", "instead,"],
    "volcano/docs/user-guide/how_to_use_volcano_vgpu.md#mig-pod": ["vgpu-mode", "instead,"],
}
POOLS = [("big", "A100-SXM4-80GB", 4), ("hopper", "H100-SXM5-80GB", 4),
         ("small", "A100-SXM4-40GB", 4)]


def _pool(name: str, model: str, gpus: int) -> dict:
    return {"name": name, "count": 1, "model": model, "gpus": gpus, "cpuMilli": 64000,
            "memoryMiB": 524288, "devices": [{"index": f"0-{gpus - 1}", "mode": "soft"}]}


def _shared_t4_pool() -> dict:
    """One T4 served as NVIDIA's plugin-config.yaml says (gpugov's agent with that file:
    time-slice × its replicas, product label with GFD's -SHARED)."""
    from gpugov.node.nvidia_config import load

    nv = load(OPERATOR_CONFIG)
    assert nv.serves_gpu_replicas
    return {"name": "t4", "count": 1, "model": "T4", "gpus": 1, "cpuMilli": 16000,
            "memoryMiB": 65536, "labels": {"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
            "devices": [{"index": "0", "mode": "timeslice", "replicas": nv.replicas}]}


def _namespace_of(path: str) -> dict:
    """The Namespace object a kept upstream file itself declares."""
    (ns,) = [d for d in yaml.safe_load_all((UPSTREAM / path).read_text())
             if isinstance(d, dict) and d.get("kind") == "Namespace"]
    return ns


def _start_webhook(cluster, scheduler: str, tag: str) -> str:
    """gpugov's webhook for this test's scheduler, adopting the other projects' schedulers
    as the migration values files do (GPUGOV_ADOPT_SCHEDULERS, what the chart sets)."""
    plane = cluster.plane
    pair = plane.ca.serving("gpugov-webhook")
    cert, key = plane.pki_dir / f"compat-{tag}.crt", plane.pki_dir / f"compat-{tag}.key"
    pair.write(cert, key)
    port = free_port()
    plane.start_process(f"compat-webhook-{tag}", [
        "env", "GPUGOV_ADOPT_SCHEDULERS=kai-scheduler,volcano,hami-scheduler",
        *gpugov_argv("webhook", "--cert", str(cert), "--key", str(key),
                     "--listen", f"127.0.0.1:{port}", "--kubeconfig", str(plane.kubeconfig),
                     "--client-ca", str(plane.webhook_client_ca), "--scheduler-name",
                     scheduler, "--system-namespace", SYSTEM_NAMESPACE)],
        ready=lambda: probe(f"https://127.0.0.1:{port}/healthz", plane.ssl_context()) == b"ok",
        timeout=60)
    return f"https://127.0.0.1:{port}"


def _configs(cluster, url: str, scope: dict[str, str], tag: str) -> list[dict]:
    out = []
    for o in registration.configurations(cluster.plane.ca.pair.cert, url=url):
        o["metadata"]["name"] = f"gpugov-compat-{tag}"
        o["webhooks"] = [h for h in o["webhooks"] if "namespaceSelector" in h]
        for h in o["webhooks"]:
            h["namespaceSelector"] = {"matchLabels": dict(scope)}
        out.append(o)
    return out


def _expect_memory(memory, card: int) -> int:
    if memory is None:
        return card
    kind, value = memory
    return math.ceil(card * value / 100) if kind == "pct" else value


def test_upstream_pods_applied_unedited_get_what_their_docs_promise(k8s_control_plane) -> None:
    cluster = k8s_control_plane
    pods_by_key = {p.key: p for p in upstream_pods()}

    async def main() -> None:
        async with env(cluster) as e:
            scope = {"gpugov-compat": e.uid}
            nodes = await e.add_pools(*[_pool(*p) for p in POOLS])
            card = {n: CATALOG[m].memory_mib for n, (_, m, _) in zip(nodes, POOLS, strict=True)}
            model = {n: m for n, (_, m, _) in zip(nodes, POOLS, strict=True)}
            (t4,) = await e.add_pools(_shared_t4_pool())
            url = _start_webhook(cluster, e.scheduler, e.uid)
            e.procs.append(f"compat-webhook-{e.uid}")
            await apply_webhook_configurations(cluster.kubeconfig,
                                               _configs(cluster, url, scope, e.uid))
            # KAI's pods name queue default-queue: their namespaces' Tenant gives them it
            queue = "default-queue"
            status, _ = await e.kube.request("GET", f"{QUEUES}/{queue}")
            if status == 404:
                await create_all(e.kube, QUEUES, [{
                    "apiVersion": "gpugov.io/v1alpha1", "kind": "Queue",
                    "metadata": {"name": queue}, "spec": {"quota": {"gpu": 64}}}])
            keys = [*LIVE, *REFUSED]
            spaces = {k: await cluster.unique_namespace("compat", scope) for k in keys
                      if not k.startswith(KUEUE)}
            # Kueue's file names its namespace: create it from the file (labelled into this
            # test's webhook scope), and clear a pod an earlier run may have left there
            kns = _namespace_of(KUEUE)
            status, body = await e.kube.request("POST", "/api/v1/namespaces", body=kns)
            assert status in (201, 409), body
            name = kns["metadata"]["name"]
            await e.kube.request("PATCH", f"/api/v1/namespaces/{name}",
                                 body={"metadata": {"labels": scope}},
                                 content_type="application/merge-patch+json")
            await _delete_pods(e.kube, name)
            spaces[f"{KUEUE}#gpu-burn"] = name
            spaces[OPERATOR] = await cluster.unique_namespace("compat", scope)
            await create_all(e.kube, TENANTS, [{
                "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": f"{e.uid}-compat"},
                "spec": {"namespaces": sorted(spaces.values()), "queue": queue}}])
            e.cluster_objs.append(f"{TENANTS}/{e.uid}-compat")
            e.start_scheduler()
            refusals = {}
            for k in keys:  # the file's pod, unedited; the namespace is the request's
                status, body = await e.kube.request(
                    "POST", f"/api/v1/namespaces/{spaces[k]}/pods", body=pods_by_key[k].pod)
                if k in REFUSED:
                    assert status == 422, (k, status, body)
                    refusals[k] = body["message"]
                else:
                    assert status == 201, (k, status, body.get("message"))
            # the Deployment's 5 pods, as its ReplicaSet creates them (generated names)
            tmpl = pods_by_key[OPERATOR].pod
            for _ in range(5):
                meta = {k: v for k, v in tmpl["metadata"].items() if k != "name"}
                status, body = await e.kube.request(
                    "POST", f"/api/v1/namespaces/{spaces[OPERATOR]}/pods",
                    body={**tmpl, "metadata": {**meta, "generateName": "nvidia-plugin-test-"}})
                assert status == 201, (status, body.get("message"))
            for k, words in REFUSED.items():
                for w in words:
                    assert w in refusals[k], (k, refusals[k])

            async def all_bound():
                got = {}
                for k in LIVE:
                    items = bound(await pods(e.kube, spaces[k]))
                    if not items:
                        return None
                    got[k] = items[0]
                return got

            placed = await wait_until(all_bound, 120, "every live upstream pod bound")

            async def operator_bound():
                items = bound(await pods(e.kube, spaces[OPERATOR]))
                return items if len(items) == 5 else None

            replicas = await wait_until(operator_bound, 120, "the GPU Operator's 5 pods bound")
            per_replica = CATALOG["T4"].memory_mib // 10
            for p in replicas:  # one replica each of the T4, capped at card/replicas
                assert p["spec"]["nodeName"] == t4
                rec = decode_allocation(p["metadata"]["annotations"][names.ANN_ALLOCATION])
                (d,) = rec.devices
                assert d.mode.value == "timeslice" and d.memory_mib == per_replica, rec
            everything = [p for k in LIVE for p in await pods(e.kube, spaces[k])]
            assert not invariant_problems(everything, e.nodes)
            for k, p in placed.items():
                count, milli, memory, models = LIVE[k]
                node = p["spec"]["nodeName"]
                rec = decode_allocation(p["metadata"]["annotations"][names.ANN_ALLOCATION])
                assert len({d.index for d in rec.devices}) == count, (k, rec)
                for d in rec.devices:
                    if milli is not None:
                        assert d.milli == milli, (k, d)
                    assert d.memory_mib == _expect_memory(memory, card[node]), (k, node, d)
                if models is not None:
                    assert model[node] in models, (k, node)
                if p["metadata"]["annotations"].get(ORIGINAL_SCHEDULER):
                    assert pods_by_key[k].pod["spec"]["schedulerName"] == \
                        p["metadata"]["annotations"][ORIGINAL_SCHEDULER]
                assert p["spec"]["schedulerName"] == e.scheduler
            # KAI's annotation request is on the container KAI gives it (the kubelet asks the
            # device plugin for that container's devices)
            init = placed["kai/docs/gpu-sharing/gpu-sharing-init-container.yaml"
                          "#gpu-sharing-init-container"]
            assert init["spec"]["initContainers"][0]["resources"]["limits"] == {
                "nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}
            assert "gpu-fraction" not in init["metadata"]["annotations"]
            volcano = placed["volcano/docs/user-guide/how_to_use_volcano_vgpu.md#hami-pod"]
            limits = volcano["spec"]["containers"][0]["resources"]["limits"]
            assert {k: int(parse_quantity(v)) for k, v in limits.items()} == {
                "nvidia.com/gpu": 1, "nvidia.com/gpucores": 50, "nvidia.com/gpumem": 3000}

    try:
        asyncio.run(main())
    finally:
        asyncio.run(_unregister(cluster))


async def _delete_pods(kube, namespace: str) -> None:
    """Delete every pod of `namespace` at once (a fixed namespace is reused across runs)."""
    await kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods",
                       query=[("gracePeriodSeconds", "0")])

    async def gone():
        return not await pods(kube, namespace) or None

    await wait_until(gone, 60, f"old pods of {namespace} gone")


async def _unregister(cluster) -> None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.rest import ApiException

    async with cluster.api() as api:
        reg = client.AdmissionregistrationV1Api(api)
        for cfg in (await reg.list_mutating_webhook_configuration()).items:
            if cfg.metadata.name.startswith("gpugov-compat-"):
                try:
                    await reg.delete_mutating_webhook_configuration(cfg.metadata.name)
                    await reg.delete_validating_webhook_configuration(cfg.metadata.name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise


VOLCANO_CRD = (UPSTREAM / "volcano/installer/helm/chart/volcano/crd/bases/"
               "scheduling.volcano.sh_podgroups.yaml")
VC_PODGROUPS = f"/apis/{names.VOLCANO_PODGROUP_GROUP}/{names.VOLCANO_PODGROUP_VERSION}/" \
               f"{names.PODGROUPS}"


def test_volcano_podgroup_is_a_gang_on_the_real_apiserver(k8s_control_plane) -> None:
    """Volcano's own PodGroup CRD (unedited) installed; a PodGroup with minMember 2 and pods
    naming it (scheduling.k8s.io/group-name): one member waits with the gang's reason, both
    bind together once the second exists."""
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            crd = yaml.safe_load(VOLCANO_CRD.read_text())
            status, doc = await e.kube.request(
                "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            assert status in (201, 409), doc

            async def served() -> bool:
                s, _ = await e.kube.request("GET", VC_PODGROUPS)
                return s == 200

            await wait_until(served, 60, "Volcano's PodGroup CRD served")
            await e.add_pools(_pool("vc", "A100-SXM4-80GB", 4))
            q = await e.queue("q")
            await create_all(e.kube, f"/apis/{names.VOLCANO_PODGROUP_GROUP}/"
                                     f"{names.VOLCANO_PODGROUP_VERSION}/namespaces/{e.ns}/"
                                     f"{names.PODGROUPS}",
                             [{"apiVersion": "scheduling.volcano.sh/v1beta1",
                               "kind": "PodGroup", "metadata": {"name": "vg",
                                                                "namespace": e.ns},
                               "spec": {"minMember": 2}}])
            e.start_scheduler()
            gang = {names.VOLCANO_GROUP_ANNOTATION: "vg"}
            await e.pods([e.pod("v0", q, annotations=gang,
                                limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"})])

            async def waiting():
                got = [condition(p) for p in await e.list() if condition(p)]
                return got or None

            (reason, message), = await wait_until(waiting, 90, "v0 waits for its gang")
            assert "PodGroup" in message and "vg" in message and "minMember 2" in message
            await e.pods([e.pod("v1", q, annotations=gang,
                                limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"})])
            items = await e.wait_bound(2)
            assert sorted(p["metadata"]["name"] for p in bound(items)) == ["v0", "v1"]
            for p in bound(items):
                rec = decode_allocation(p["metadata"]["annotations"][names.ANN_ALLOCATION])
                assert len({d.index for d in rec.devices}) == 2  # 2 soft slices each

    asyncio.run(main())
