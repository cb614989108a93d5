"""A tenant with only the built-in `edit` role, against gpugov's admission on the real apiserver.

The webhook runs as its chart ServiceAccount and requires the apiserver's client certificate;
the ValidatingAdmissionPolicy is applied. Every hostile call uses the tenant's real
ServiceAccount token. Webhooks and the policy are scoped to this module's namespaces (labels)
so other tests' pods are unaffected; cluster-scoped objects are deleted at module end.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s import annotations as ann
from gpugov.k8s import crds
from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.devcluster.dev import (
    apply_webhook_configurations,
    create_defaults,
    gpugov_argv,
    install_crds,
)
from gpugov.k8s.devcluster.plane import probe
from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.webhook import policy, registration

SYSTEM_NS = "gpugov-system"
WH = {"gpugov-hostile-webhook": "true"}     # namespaces the webhooks see
VAP = {"gpugov-hostile-policy": "true"}     # namespaces the ownership policy covers
BOTH = {**WH, **VAP}
CONFIG_NAME = "gpugov-hostile"
POLICY_NAME = "gpugov-hostile-ownership"
PROC = "gpugov-hostile-webhook"
CLUSTER_OBJECTS: list[tuple[str, str]] = []  # (plural, name) deleted at module end


@dataclass
class Env:
    cluster: Any
    webhook_kc: Path
    port: int

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


@dataclass
class Refused:
    status: int
    message: str


def _start_webhook(cluster, kubeconfig: Path, port: int) -> None:
    plane = cluster.plane
    cert, key = plane.pki_dir / "hostile-webhook.crt", plane.pki_dir / "hostile-webhook.key"
    if not cert.exists():
        plane.ca.serving("gpugov-webhook").write(cert, key)
    plane.start_process(PROC, gpugov_argv(
        "webhook", "--cert", str(cert), "--key", str(key), "--listen", f"127.0.0.1:{port}",
        "--kubeconfig", str(kubeconfig), "--client-ca", str(plane.webhook_client_ca),
        "--system-namespace", SYSTEM_NS),
        ready=lambda: probe(f"https://127.0.0.1:{port}/healthz", plane.ssl_context()) == b"ok",
        timeout=60)


def _configs(cluster, url: str) -> list[dict]:
    objs = registration.configurations(cluster.plane.ca.pair.cert, url=url,
                                       system_namespace=SYSTEM_NS)
    for o in objs:
        o["metadata"]["name"] = CONFIG_NAME
        for hook in o["webhooks"]:
            if "namespaceSelector" in hook:  # pods only; Tenants/Queues are cluster-scoped
                hook["namespaceSelector"]["matchLabels"] = dict(WH)
    return objs


def _policies() -> list[dict]:
    return policy.pod_ownership_policies(SYSTEM_NS, {"matchLabels": dict(VAP)}, POLICY_NAME)


def _pod(name: str, limits: dict | None = None, annotations: dict | None = None,
         labels: dict | None = None, **spec: Any) -> dict:
    c: dict = {"name": "main", "image": "busybox"}
    if limits:
        c["resources"] = {"limits": limits}
    return {"metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
            "spec": {"containers": [c], **spec}}


async def _call(kubeconfig: Path, op) -> Any:
    """`op(core)` with the identity of `kubeconfig`; a Refused on an API error."""
    async with api_client(kubeconfig) as api:
        try:
            return await op(client.CoreV1Api(api))
        except ApiException as exc:
            try:
                message = json.loads(exc.body).get("message", "")
            except (TypeError, ValueError):
                message = str(exc.body)
            return Refused(exc.status, message)


async def _wait_enforced(cluster) -> None:
    """Until the apiserver enforces both the webhooks and the policy (informers are async)."""
    probe_ns = await cluster.unique_namespace("hostile-probe", dict(BOTH))
    gpu = _pod("probe", {"nvidia.com/gpu": "1"}, schedulerName="not-gpugov")
    forged = _pod("probe2", {"cpu": "10m"}, {ann.ALLOCATION: "{}"})
    vap_only = await cluster.unique_namespace("hostile-probe", dict(VAP))
    for _ in range(300):
        a = await _call(cluster.kubeconfig, lambda core: core.create_namespaced_pod(
            probe_ns, gpu, dry_run="All"))
        b = await _call(cluster.kubeconfig, lambda core: core.create_namespaced_pod(
            vap_only, forged, dry_run="All"))
        if isinstance(a, Refused) and "is not allowed for GPU pods" in a.message and \
                isinstance(b, Refused) and "ValidatingAdmissionPolicy" in b.message:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"admission not enforced: {a!r} {b!r}")
    async with cluster.api() as api:
        vap = await client.AdmissionregistrationV1Api(api).read_validating_admission_policy(
            POLICY_NAME)
    warnings = (vap.status.type_checking.expression_warnings
                if vap.status and vap.status.type_checking else None)
    assert not warnings, warnings


@pytest.fixture(scope="module")
def env(k8s_control_plane):
    cluster = k8s_control_plane
    asyncio.run(install_crds(cluster.kubeconfig))
    asyncio.run(create_defaults(cluster.kubeconfig))
    kc = asyncio.run(cluster.component_kubeconfig("webhook", SYSTEM_NS))
    port = free_port()
    _start_webhook(cluster, kc, port)
    e = Env(cluster, kc, port)
    asyncio.run(apply_webhook_configurations(cluster.kubeconfig, _configs(cluster, e.url)))
    asyncio.run(policy.apply_policies(cluster.kubeconfig, _policies()))
    asyncio.run(_wait_enforced(cluster))
    yield e
    cluster.plane.procs.stop(PROC)

    async def cleanup() -> None:
        async with cluster.api() as api:
            reg = client.AdmissionregistrationV1Api(api)
            for delete in (reg.delete_mutating_webhook_configuration,
                           reg.delete_validating_webhook_configuration):
                try:
                    await delete(CONFIG_NAME)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            custom = client.CustomObjectsApi(api)
            for plural, name in CLUSTER_OBJECTS:
                try:
                    await custom.delete_cluster_custom_object(crds.GROUP, crds.VERSION,
                                                              plural, name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
        await policy.delete_policies(cluster.kubeconfig, _policies())
    asyncio.run(cleanup())


async def _tenant_ns(env: Env, labels: dict[str, str]) -> tuple[str, Path]:
    ns = await env.cluster.unique_namespace("hostile", dict(labels))
    return ns, await env.cluster.tenant_kubeconfig(ns)


def _owner_refusal(key: str) -> str:
    return (f"{key}: this pod annotation is owned by gpugov; only gpugov's components may add, "
            "change or remove it")


def _patch(ns: str, name: str, annotations: dict[str, str | None]):
    body = {"metadata": {"annotations": annotations}}
    return lambda core: core.patch_namespaced_pod(name, ns, body)


def test_tenant_cannot_repoint_its_pending_pod_even_with_the_webhook_down(env):
    """Issue item 1: queue / trust-tier / request PATCHes on a pending pod are refused by the
    webhook, and by the in-apiserver policy alone while the webhook process is stopped."""
    async def webhook_layer() -> tuple[Any, list[Any], Any]:
        ns, tenant = await _tenant_ns(env, WH)  # the webhook only: its UPDATE check
        pod = await _call(tenant, lambda core: core.create_namespaced_pod(
            ns, _pod("mine", {"nvidia.com/gpu": "1"})))
        outs = [await _call(tenant, _patch(ns, "mine", {k: v})) for k, v in (
            (ann.QUEUE, "someone-elses-queue"), (ann.TRUST_TIER, "trusted"),
            (ann.REQUEST, '{"v":1,"count":1,"mode":"soft","milli":1}'), (ann.QUEUE, None))]
        after = await _call(tenant, lambda core: core.read_namespaced_pod("mine", ns))
        return pod, outs, after

    pod, outs, after = asyncio.run(webhook_layer())
    assert not isinstance(pod, Refused), pod
    assert pod.metadata.annotations[ann.QUEUE] == "default"
    for out, key in zip(outs, (ann.QUEUE, ann.TRUST_TIER, ann.REQUEST, ann.QUEUE), strict=True):
        assert isinstance(out, Refused) and out.status == 403, out
        assert out.message == ('admission webhook "owners.pods.gpugov.io" denied the request: '
                               + _owner_refusal(key))
    assert after.metadata.annotations == pod.metadata.annotations

    async def policy_layer() -> tuple[list[Any], Any]:
        ns, tenant = await _tenant_ns(env, VAP)  # the policy only
        seeded = _pod("mine", {"nvidia.com/gpu": "1"}, {
            ann.QUEUE: "default", ann.TRUST_TIER: "untrusted", ann.TENANT: "default",
            ann.REQUEST: '{"v":1,"count":1,"mode":"exclusive","topology":"preferred"}'},
            schedulerName="gpugov")
        await _call(env.cluster.kubeconfig, lambda core: core.create_namespaced_pod(ns, seeded))
        env.cluster.plane.procs.stop(PROC)
        try:
            outs = [await _call(tenant, _patch(ns, "mine", {k: v})) for k, v in (
                (ann.QUEUE, "someone-elses-queue"), (ann.TRUST_TIER, "trusted"),
                (ann.REQUEST, '{"v":1,"count":1,"mode":"soft","milli":1}'))]
            label = await _call(tenant, lambda core: core.patch_namespaced_pod(
                "mine", ns, {"metadata": {"labels": {ann.MANAGED_LABEL: "true"}}}))
            ok = await _call(tenant, lambda core: core.patch_namespaced_pod(
                "mine", ns, {"metadata": {"labels": {"app": "mine"}}}))
        finally:
            _start_webhook(env.cluster, env.webhook_kc, env.port)
        return [*outs, label], ok

    outs, ok = asyncio.run(policy_layer())
    for out, key in zip(outs, (ann.QUEUE, ann.TRUST_TIER, ann.REQUEST), strict=False):
        assert isinstance(out, Refused) and out.status == 403, out
        assert out.message == (f"pods \"mine\" is forbidden: ValidatingAdmissionPolicy "
                               f"'{POLICY_NAME}' with binding '{POLICY_NAME}' denied request: "
                               + _owner_refusal(key))
    assert isinstance(outs[3], Refused) and "gpugov.io/managed: this pod label is owned by " \
        "gpugov" in outs[3].message
    assert not isinstance(ok, Refused), ok  # changes to the tenant's own keys still pass


def test_tenant_cannot_edit_the_allocation_of_its_bound_pod(env):
    async def run() -> tuple[Any, Any, Any]:
        ns, tenant = await _tenant_ns(env, BOTH)
        await _call(tenant, lambda core: core.create_namespaced_pod(
            ns, _pod("bound", {"nvidia.com/gpu": "1"})))
        record = json.dumps({"v": 1, "node": "hostile-node", "isolation": "hard",
                             "devices": [{"index": 0, "mode": "exclusive", "milli": 1000}]})
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": "bound", "annotations": {ann.ALLOCATION: record}},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "hostile-node"}}
        # the tenant cannot bind its own pod (edit has no pods/binding), only a scheduler can
        self_bound = await _call(tenant, lambda core: core.create_namespaced_pod_binding(
            "bound", ns, binding, _preload_content=False))
        assert getattr(self_bound, "status", None) == 403, self_bound  # raw: not raised
        async with env.cluster.api() as api:  # the admin binds, as gpugov's scheduler would
            await client.CoreV1Api(api).create_namespaced_pod_binding(
                "bound", ns, binding, _preload_content=False)
        forged = record.replace('"index": 0', '"index": 1')
        out = await _call(tenant, _patch(ns, "bound", {ann.ALLOCATION: forged}))
        gone = await _call(tenant, _patch(ns, "bound", {ann.ALLOCATION: None}))
        pod = await _call(tenant, lambda core: core.read_namespaced_pod("bound", ns))
        return out, gone, (pod, record)

    out, gone, (pod, record) = asyncio.run(run())
    assert pod.spec.node_name == "hostile-node"
    assert pod.metadata.annotations[ann.ALLOCATION] == record
    for refusal in (out, gone):
        assert isinstance(refusal, Refused) and refusal.status == 403, refusal
        assert _owner_refusal(ann.ALLOCATION) in refusal.message


def test_forged_annotations_on_a_pod_without_gpu_are_removed(env):
    async def run() -> Any:
        ns, tenant = await _tenant_ns(env, BOTH)
        return await _call(tenant, lambda core: core.create_namespaced_pod(ns, _pod(
            "cpu-only", {"cpu": "10m"},
            {ann.REQUEST: '{"v":1,"count":8,"mode":"exclusive"}', ann.QUEUE: "victim-queue",
             ann.TENANT: "victim", "mine": "kept"}, {ann.MANAGED_LABEL: "true"})))
    pod = asyncio.run(run())
    assert not isinstance(pod, Refused), pod
    assert pod.metadata.annotations == {"mine": "kept"}
    assert ann.MANAGED_LABEL not in (pod.metadata.labels or {})
    assert pod.spec.scheduler_name == "default-scheduler"


def test_pod_label_ignore_exempts_nothing_and_a_preset_node_is_refused(env):
    async def run() -> tuple[Any, Any, Any, Any]:
        ns, tenant = await _tenant_ns(env, BOTH)
        forged = await _call(tenant, lambda core: core.create_namespaced_pod(ns, _pod(
            "sneaky", {"nvidia.com/gpu": "1"}, {ann.ALLOCATION: '{"v":1}'},
            {ann.IGNORE_LABEL: "true"}, nodeName="gpu-node-1")))
        preset = await _call(tenant, lambda core: core.create_namespaced_pod(ns, _pod(
            "preset", {"nvidia.com/gpu": "1"}, nodeName="gpu-node-1")))
        labelled = await _call(tenant, lambda core: core.create_namespaced_pod(ns, _pod(
            "labelled", {"nvidia.com/gpu": "1"}, labels={ann.IGNORE_LABEL: "true"})))
        # exemption is the namespace's label, which the tenant cannot set
        own_ns = await _call(tenant, lambda core: core.patch_namespace(
            ns, {"metadata": {"labels": {ann.IGNORE_LABEL: "true"}}}))
        return forged, preset, labelled, own_ns

    forged, preset, labelled, own_ns = asyncio.run(run())
    assert isinstance(forged, Refused) and forged.status == 403, forged
    assert ("gpugov.io/allocation: only gpugov's scheduler writes it (through the Binding); "
            "remove it from the pod") in forged.message
    assert isinstance(preset, Refused) and preset.status == 403, preset
    assert "spec.nodeName is set ('gpu-node-1') on a pod that asks for a GPU" in preset.message
    assert "let the gpugov scheduler place it" in preset.message
    assert not isinstance(labelled, Refused), labelled
    assert labelled.spec.scheduler_name == "gpugov"
    assert ann.REQUEST in labelled.metadata.annotations
    assert isinstance(own_ns, Refused) and own_ns.status == 403


def test_an_admin_labelled_namespace_is_exempt(env):
    async def run() -> Any:
        ns, tenant = await _tenant_ns(env, {**BOTH, ann.IGNORE_LABEL: "true"})
        return await _call(tenant, lambda core: core.create_namespaced_pod(
            ns, _pod("exempt", {"nvidia.com/gpu": "1"})))
    pod = asyncio.run(run())
    assert not isinstance(pod, Refused), pod
    assert ann.REQUEST not in (pod.metadata.annotations or {})
    assert pod.spec.scheduler_name == "default-scheduler"


def test_other_scheduler_needs_the_tenant_to_list_it(env):
    async def run() -> tuple[Any, Any, str]:
        ns, tenant = await _tenant_ns(env, BOTH)
        body = _pod("elsewhere", {"nvidia.com/gpu": "1"}, schedulerName="volcano")
        refused = await _call(tenant, lambda core: core.create_namespaced_pod(ns, body))
        async with env.cluster.api() as api:
            await client.CustomObjectsApi(api).create_cluster_custom_object(
                crds.GROUP, crds.VERSION, "tenants", {
                    "apiVersion": crds.API_VERSION, "kind": "Tenant", "metadata": {"name": ns},
                    "spec": {"namespaces": [ns], "queue": "default",
                             "schedulers": ["volcano"]}})
        CLUSTER_OBJECTS.append(("tenants", ns))
        for _ in range(50):  # the webhook reads Tenants per pod; the list may lag a moment
            allowed = await _call(tenant, lambda core: core.create_namespaced_pod(ns, body))
            if not isinstance(allowed, Refused):
                break
            await asyncio.sleep(0.1)
        return refused, allowed, ns

    refused, allowed, ns = asyncio.run(run())
    assert isinstance(refused, Refused) and refused.status == 403, refused
    assert ("schedulerName 'volcano' is not allowed for GPU pods of Tenant 'default' (allowed: "
            "gpugov)") in refused.message
    assert not isinstance(allowed, Refused), allowed
    assert allowed.spec.scheduler_name == "volcano"
    assert allowed.metadata.annotations[ann.TENANT] == ns


@pytest.mark.parametrize("quantity", ["1e400", "1e8000000"])
def test_huge_quantities_are_refused_at_once_and_the_next_pod_is_admitted(env, quantity):
    async def run() -> tuple[Any, Any]:
        ns, tenant = await _tenant_ns(env, BOTH)
        huge = await asyncio.wait_for(_call(tenant, lambda core: core.create_namespaced_pod(
            ns, _pod("huge", {"nvidia.com/gpu": quantity}))), 10)  # a hang detector only
        normal = await asyncio.wait_for(_call(tenant, lambda core: core.create_namespaced_pod(
            ns, _pod("normal", {"nvidia.com/gpu": "1"}))), 10)
        return huge, normal

    huge, normal = asyncio.run(run())
    assert isinstance(huge, Refused) and huge.status == 422, huge
    # the apiserver stores its canonical form (`1e400` arrives as `10e399`)
    assert "gpugov: container 'main': nvidia.com/gpu: '" in huge.message
    assert "' is out of range (exponent beyond ±30); instead, ask for a real amount" in \
        huge.message
    assert not isinstance(normal, Refused), normal
    assert ann.decode_request(normal.metadata.annotations[ann.REQUEST]).count == 1


def test_zero_gpus_is_admitted_untouched(env):
    async def run() -> Any:
        ns, tenant = await _tenant_ns(env, BOTH)
        return await _call(tenant, lambda core: core.create_namespaced_pod(
            ns, _pod("zero", {"nvidia.com/gpu": "0"})))
    pod = asyncio.run(run())
    assert not isinstance(pod, Refused), pod
    assert not pod.metadata.annotations
    assert pod.spec.scheduler_name == "default-scheduler"


def test_queue_cycle_is_refused(env):
    async def run() -> tuple[Any, Any]:
        async with env.cluster.api() as api:
            custom = client.CustomObjectsApi(api)

            async def create(name: str, parent: str) -> Any:
                try:
                    return await custom.create_cluster_custom_object(
                        crds.GROUP, crds.VERSION, "queues", {
                            "apiVersion": crds.API_VERSION, "kind": "Queue",
                            "metadata": {"name": name}, "spec": {"parent": parent}})
                except ApiException as exc:
                    return Refused(exc.status, json.loads(exc.body)["message"])
            first = await create("hostile-a", "hostile-b")  # parent missing: a warning only
            CLUSTER_OBJECTS.append(("queues", "hostile-a"))
            second = await create("hostile-b", "hostile-a")
            if not isinstance(second, Refused):
                CLUSTER_OBJECTS.append(("queues", "hostile-b"))
            return first, second

    first, second = asyncio.run(run())
    assert not isinstance(first, Refused), first
    assert isinstance(second, Refused), second
    assert ("Queue hostile-b: spec.parent 'hostile-a' makes a cycle (hostile-b -> hostile-a -> "
            "hostile-b)") in second.message


def _get(url: str, ctx: ssl.SSLContext) -> bytes:
    with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
        return resp.read()


def test_webhook_refuses_callers_without_the_apiservers_client_certificate(env, tmp_path):
    plane = env.cluster.plane
    anonymous = ssl.create_default_context(cafile=str(plane.pki_dir / "ca.crt"))
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        _get(env.url + "/mutate", anonymous)
    from gpugov.k8s.devcluster.pki import CertificateAuthority

    stranger = CertificateAuthority("someone-else").client("mallory")
    stranger.write(tmp_path / "m.crt", tmp_path / "m.key")
    foreign = ssl.create_default_context(cafile=str(plane.pki_dir / "ca.crt"))
    foreign.load_cert_chain(str(tmp_path / "m.crt"), str(tmp_path / "m.key"))
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        _get(env.url + "/mutate", foreign)
    assert _get(env.url + "/healthz", plane.ssl_context()) == b"ok"  # a CA-signed client
