"""The admission webhook behind the real kube-apiserver: what a kubectl user sees."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s import annotations as ann
from gpugov.k8s import crds
from gpugov.k8s.devcluster.dev import (
    apply_webhook_configurations,
    create_defaults,
    install_crds,
    start_webhook,
)
from gpugov.k8s.webhook import registration

SCOPE = {"gpugov-webhook-e2e": "true"}  # only namespaces with this label reach the webhook
BROKEN_TENANTS: list[str] = ["warn-me"]  # deleted when the module ends


def _configs(cluster, url: str) -> list[dict]:
    objs = registration.configurations(cluster.plane.ca.pair.cert, url=url)
    for o in objs:  # keep other test modules' pods away from this webhook
        for hook in o["webhooks"]:
            if "namespaceSelector" in hook:  # pods only; Tenants/Queues are cluster-scoped
                hook["namespaceSelector"]["matchLabels"] = dict(SCOPE)
    return objs


@pytest.fixture(scope="module")
def hooked(k8s_control_plane):
    cluster = k8s_control_plane
    asyncio.run(install_crds(cluster.kubeconfig))
    asyncio.run(create_defaults(cluster.kubeconfig))
    url = start_webhook(cluster.plane)
    asyncio.run(apply_webhook_configurations(cluster.kubeconfig, _configs(cluster, url)))
    cluster.webhook_url = url
    yield cluster
    cluster.plane.procs.stop("gpugov-webhook")

    async def unregister() -> None:
        async with cluster.api() as api:
            reg = client.AdmissionregistrationV1Api(api)
            await reg.delete_mutating_webhook_configuration(registration.NAME)
            await reg.delete_validating_webhook_configuration(registration.NAME)
            # the cluster is shared: drop the Tenants these tests made point at missing queues
            custom = client.CustomObjectsApi(api)
            for name in BROKEN_TENANTS:
                try:
                    await custom.delete_cluster_custom_object(crds.GROUP, crds.VERSION,
                                                              "tenants", name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
    asyncio.run(unregister())


def _pod(name: str, limits: dict | None = None, annotations: dict | None = None) -> dict:
    c: dict = {"name": "main", "image": "busybox"}
    if limits:
        c["resources"] = {"limits": limits}
    return {"metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"containers": [c]}}


async def _create(cluster, ns: str, body: dict):
    async with cluster.api() as api:
        try:
            return await client.CoreV1Api(api).create_namespaced_pod(ns, body)
        except ApiException as exc:
            return json.loads(exc.body)


def test_hami_pod_is_translated_and_routed_to_gpugov(hooked):
    async def run():
        ns = await hooked.unique_namespace("wh", SCOPE)
        return await _create(hooked, ns, _pod("hami", {"nvidia.com/gpu": "1",
                                                       "nvidia.com/gpumem": "20000",
                                                       "nvidia.com/gpucores": "30"}))
    pod = asyncio.run(run())
    assert not isinstance(pod, dict), pod["message"]
    assert pod.spec.scheduler_name == ann.SCHEDULER_NAME
    annots = pod.metadata.annotations
    req = ann.decode_request(annots[ann.REQUEST])
    assert (req.count, req.mode.value, req.memory_mib, req.milli) == (1, "soft", 20000, 300)
    assert annots[ann.QUEUE] == "default" and annots[ann.TENANT] == "default"
    assert annots[ann.TRUST_TIER] == "internal"
    assert pod.metadata.labels[ann.MANAGED_LABEL] == "true"


def test_named_tenant_wins_over_the_catch_all(hooked):
    async def run():
        ns = await hooked.unique_namespace("wh", SCOPE)
        async with hooked.api() as api:
            custom = client.CustomObjectsApi(api)
            await custom.create_cluster_custom_object(crds.GROUP, crds.VERSION, "queues", {
                "apiVersion": crds.API_VERSION, "kind": "Queue",
                "metadata": {"name": f"q-{ns}"}, "spec": {"quota": {"gpu": 4}}})
            await custom.create_cluster_custom_object(crds.GROUP, crds.VERSION, "tenants", {
                "apiVersion": crds.API_VERSION, "kind": "Tenant", "metadata": {"name": ns},
                "spec": {"namespaces": [ns], "queue": f"q-{ns}", "trust": "untrusted"}})
        ok = await _create(hooked, ns, _pod("mig", {"nvidia.com/mig-1g.10gb": "1"}))
        refused = await _create(hooked, ns, _pod("ts", {"nvidia.com/gpu.shared": "1"}))
        return ns, ok, refused
    ns, ok, refused = asyncio.run(run())
    assert ok.metadata.annotations[ann.QUEUE] == f"q-{ns}"
    assert ok.metadata.annotations[ann.TRUST_TIER] == "untrusted"
    assert refused["code"] == 422
    assert refused["message"] == (
        'admission webhook "mutate.pods.gpugov.io" denied the request: gpugov: '
        f"nvidia.com/gpu.shared: Tenant '{ns}' is untrusted: its pods need hard isolation, but "
        "this request delivers only soft; instead, ask for a MIG profile "
        "(nvidia.com/mig-<profile>) or whole GPUs (nvidia.com/gpu)")


def test_contradictory_request_is_refused_with_what_to_write(hooked):
    async def run():
        ns = await hooked.unique_namespace("wh", SCOPE)
        return await _create(hooked, ns, _pod("bad", {"nvidia.com/gpumem": "20000",
                                                      "nvidia.com/gpumem-percentage": "50"}))
    out = asyncio.run(run())
    assert out["code"] == 422
    assert out["message"] == (
        'admission webhook "mutate.pods.gpugov.io" denied the request: gpugov: '
        "nvidia.com/gpumem-percentage: contradicts nvidia.com/gpumem (two memory sizes); "
        "instead, keep only nvidia.com/gpumem (MiB) or only nvidia.com/gpumem-percentage (%)")


def test_tenant_pointing_at_a_missing_queue_refuses_with_the_fix(hooked):
    async def run():
        ns = await hooked.unique_namespace("wh", SCOPE)
        async with hooked.api() as api:
            await client.CustomObjectsApi(api).create_cluster_custom_object(
                crds.GROUP, crds.VERSION, "tenants", {
                    "apiVersion": crds.API_VERSION, "kind": "Tenant", "metadata": {"name": ns},
                    "spec": {"namespaces": [ns], "queue": "no-such-queue"}})
        BROKEN_TENANTS.append(ns)
        return ns, await _create(hooked, ns, _pod("p", {"nvidia.com/gpu": "1"}))
    ns, out = asyncio.run(run())
    assert (f"Tenant '{ns}' sends namespace '{ns}' to queue 'no-such-queue', which does not "
            "exist; create Queue 'no-such-queue' or fix the Tenant") in out["message"]


def test_non_gpu_pods_pass_while_the_webhook_is_down_and_gpu_pods_are_refused(hooked):
    hooked.plane.procs.stop("gpugov-webhook")
    try:
        async def run():
            ns = await hooked.unique_namespace("wh", SCOPE)
            plain = await _create(hooked, ns, _pod("plain", {"cpu": "100m"}))
            gpu = await _create(hooked, ns, _pod("gpu", {"nvidia.com/gpu": "1"}))
            return plain, gpu
        plain, gpu = asyncio.run(run())
    finally:
        url = start_webhook(hooked.plane)
        asyncio.run(apply_webhook_configurations(hooked.kubeconfig, _configs(hooked, url)))
        hooked.webhook_url = url
    assert plain.metadata.annotations is None or ann.REQUEST not in plain.metadata.annotations
    assert plain.spec.scheduler_name == "default-scheduler"
    assert gpu["code"] == 500 and "failed calling webhook" in gpu["message"]


def _post(url: str, body: bytes, ctx: ssl.SSLContext) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_garbage_body_gets_400_and_the_webhook_keeps_serving(hooked):
    ctx = hooked.plane.ssl_context()
    status, body = _post(hooked.webhook_url + "/mutate", b"\xff\xfe not json", ctx)
    assert status == 400 and b"body is not JSON" in body
    status, body = _post(hooked.webhook_url + "/validate", b'{"kind": "Pod"}', ctx)
    assert status == 400 and b"expected apiVersion admission.k8s.io/v1" in body
    malformed = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                            "request": {"uid": "x1", "kind": {"kind": "Pod"}, "namespace": "n",
                                        "operation": "CREATE",
                                        "object": {"spec": {"containers": [
                                            {"resources": "lots"}, 7]}}}}).encode()
    status, body = _post(hooked.webhook_url + "/mutate", malformed, ctx)
    answer = json.loads(body)["response"]
    assert status == 200 and answer["uid"] == "x1" and answer["allowed"] is False
    assert answer["status"]["message"].startswith("gpugov webhook error:")
    with urllib.request.urlopen(hooked.webhook_url + "/metrics", context=ctx) as resp:
        metrics = resp.read().decode()
    assert 'gpugov_webhook_bad_requests_total{reason="not_admission_review"} 2.0' in metrics
    assert 'gpugov_webhook_errors_total{webhook="mutate"} 1.0' in metrics

    async def run():
        ns = await hooked.unique_namespace("wh", SCOPE)
        return await _create(hooked, ns, _pod("after", {"nvidia.com/gpu": "2"}))
    assert ann.decode_request(asyncio.run(run()).metadata.annotations[ann.REQUEST]).count == 2


def test_tenant_naming_a_missing_queue_is_created_with_a_warning_kubectl_prints(hooked):
    kubectl = hooked.bin_dir / "kubectl"
    manifest = (f"apiVersion: {crds.API_VERSION}\nkind: Tenant\nmetadata: {{name: warn-me}}\n"
                "spec: {namespaces: [warn-ns], queue: ghost}\n")
    out = subprocess.run([str(kubectl), f"--kubeconfig={hooked.kubeconfig}", "apply", "-f", "-"],
                         input=manifest, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "tenant.gpugov.io/warn-me created" in out.stdout
    assert ("Warning: Tenant warn-me: queue 'ghost' does not exist; GPU pods of its namespaces "
            "are refused until Queue 'ghost' is created") in out.stderr
