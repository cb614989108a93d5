"""gpugov's webhook behind the real kube-apiserver, for pods with several GPU containers: what a
kubectl user sees. A pod whose containers (init containers included) ask one shape is admitted
with one request for what they hold at once; different shapes, or two time-slice replicas
running together, are refused at creation with the containers named and what to write."""

from __future__ import annotations

import asyncio
import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s import annotations as ann
from gpugov.k8s.devcluster.dev import (
    apply_webhook_configurations,
    create_defaults,
    gpugov_argv,
    install_crds,
)
from gpugov.k8s.devcluster.plane import probe
from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.webhook import registration

SCOPE = {"gpugov-multi-container-webhook": "true"}
CONFIG = "gpugov-multi-container"
PROC = "gpugov-multi-container-webhook"


@pytest.fixture(scope="module")
def hooked(k8s_control_plane):
    cluster = k8s_control_plane
    plane = cluster.plane
    asyncio.run(install_crds(cluster.kubeconfig))
    asyncio.run(create_defaults(cluster.kubeconfig))
    cert, key = plane.pki_dir / "mc-webhook.crt", plane.pki_dir / "mc-webhook.key"
    plane.ca.serving("gpugov-webhook").write(cert, key)
    port = free_port()
    plane.start_process(PROC, gpugov_argv(
        "webhook", "--cert", str(cert), "--key", str(key), "--listen", f"127.0.0.1:{port}",
        "--kubeconfig", str(cluster.kubeconfig), "--client-ca", str(plane.webhook_client_ca)),
        ready=lambda: probe(f"https://127.0.0.1:{port}/healthz", plane.ssl_context()) == b"ok",
        timeout=60)
    objs = registration.configurations(plane.ca.pair.cert, url=f"https://127.0.0.1:{port}")
    for o in objs:
        o["metadata"]["name"] = CONFIG
        for hook in o["webhooks"]:
            if "namespaceSelector" in hook:
                hook["namespaceSelector"]["matchLabels"] = dict(SCOPE)
    objs = [o for o in objs if any("namespaceSelector" in h for h in o["webhooks"])]
    for o in objs:  # pods only: the Tenant/Queue hooks stay the other modules'
        o["webhooks"] = [h for h in o["webhooks"] if "namespaceSelector" in h]
    asyncio.run(apply_webhook_configurations(cluster.kubeconfig, objs))
    yield cluster
    plane.procs.stop(PROC)

    async def unregister() -> None:
        async with cluster.api() as api:
            reg = client.AdmissionregistrationV1Api(api)
            for o in objs:
                if o["kind"] == "MutatingWebhookConfiguration":
                    await reg.delete_mutating_webhook_configuration(CONFIG)
                else:
                    await reg.delete_validating_webhook_configuration(CONFIG)
    asyncio.run(unregister())


def _pod(name: str, apps: dict[str, dict], inits: dict[str, dict] | None = None) -> dict:
    spec: dict = {"containers": [{"name": n, "image": "busybox", "resources": {"limits": lim}}
                                 for n, lim in apps.items()]}
    if inits:
        spec["initContainers"] = [{"name": n, "image": "busybox",
                                   "resources": {"limits": lim}} for n, lim in inits.items()]
    return {"metadata": {"name": name}, "spec": spec}


async def _create(cluster, body: dict):
    """Create (retrying while the apiserver does not call the webhook yet) in a fresh
    namespace the webhook sees: the pod, or the refusal's message."""
    ns = await cluster.unique_namespace("mc", SCOPE)
    async with cluster.api() as api:
        core = client.CoreV1Api(api)
        for _ in range(300):
            try:
                pod = await core.create_namespaced_pod(ns, body)
            except ApiException as exc:
                return json.loads(exc.body)["message"]
            if ann.REQUEST in (pod.metadata.annotations or {}):
                return pod
            await core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
            await asyncio.sleep(0.1)  # the configuration is not served yet
    raise AssertionError("the webhook never answered")


def test_one_shape_is_admitted_as_one_request_for_what_runs_at_once(hooked) -> None:
    soft = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "30"}
    pod = asyncio.run(_create(hooked, _pod("ok", {"a": soft, "b": soft}, {"warm": soft})))
    assert not isinstance(pod, str), pod
    req = ann.decode_request(pod.metadata.annotations[ann.REQUEST])
    assert (req.count, req.mode.value, req.memory_mib, req.milli) == (2, "soft", 20000, 300)
    assert pod.spec.scheduler_name == ann.SCHEDULER_NAME


def test_different_shapes_are_refused_at_creation_naming_the_containers(hooked) -> None:
    msg = asyncio.run(_create(hooked, _pod("mixed", {
        "a": {"nvidia.com/gpu": "1"},
        "b": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240"}})))
    assert isinstance(msg, str), msg
    assert "gpugov: container 'a', container 'b': ask for different GPU shapes (1 whole GPU " \
           "vs 1 soft slice (10240 MiB))" in msg, msg
    assert "instead, give every GPU container of the pod the same per-device ask" in msg


def test_two_time_slice_replicas_running_together_are_refused(hooked) -> None:
    rep = {"nvidia.com/gpu.shared": "1"}
    msg = asyncio.run(_create(hooked, _pod("replicas", {"a": rep, "b": rep})))
    assert isinstance(msg, str), msg
    assert "container 'a', container 'b': each ask for 1 time-slice replica while running " \
           "together" in msg, msg
    # an init container before the one that asks it reuses it: admitted
    pod = asyncio.run(_create(hooked, _pod("init-rep", {"a": rep}, {"i": rep})))
    assert not isinstance(pod, str), pod
    assert ann.decode_request(pod.metadata.annotations[ann.REQUEST]).count == 1
