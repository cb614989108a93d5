"""The CREATE rules of the ValidatingAdmissionPolicy on the real apiserver, with no webhook.

These rules replaced the validating webhook's separate CREATE call (one HTTPS round trip per
GPU pod): after every mutating webhook ran, a GPU pod must carry gpugov's translation and may
preset spec.nodeName only when gpugov or an admin creates it. Without gpugov's mutating webhook
in the path, a GPU pod is exactly a pod whose GPU came after gpugov's webhook ran. The policy
is bound to this module's namespaces (a label) so other tests' pods are unaffected.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s import annotations as ann
from gpugov.k8s.webhook import policy

SYSTEM_NS = "gpugov-system"
LABEL = {"gpugov-create-policy": "true"}
NAME = "gpugov-create-policy"


def _policies() -> list[dict[str, Any]]:
    return policy.pod_ownership_policies(SYSTEM_NS, {"matchLabels": dict(LABEL)}, NAME)


def _pod(name: str, limits: dict | None = None, annotations: dict | None = None,
         **spec: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": "busybox"}
    if limits:
        c["resources"] = {"limits": limits}
    return {"metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"containers": [c], **spec}}


async def _create(kubeconfig: Path, ns: str, pod: dict[str, Any]) -> tuple[int, str]:
    """(HTTP status, message) of a dry-run create: 201 when admitted."""
    from gpugov.k8s.devcluster.client import api_client

    async with api_client(kubeconfig) as api:
        try:
            await client.CoreV1Api(api).create_namespaced_pod(ns, pod, dry_run="All")
            return 201, ""
        except ApiException as exc:
            try:
                return exc.status, json.loads(exc.body).get("message", "")
            except (TypeError, ValueError):
                return exc.status, str(exc.body)


@pytest.fixture(scope="module")
def cluster(k8s_control_plane):
    c = k8s_control_plane
    asyncio.run(policy.apply_policies(c.kubeconfig, _policies()))

    async def enforced() -> None:
        ns = await c.unique_namespace("create-probe", dict(LABEL))
        for _ in range(300):
            status, _msg = await _create(c.kubeconfig, ns, _pod("p", {"nvidia.com/gpu": "1"}))
            if status != 201:
                break
            await asyncio.sleep(0.1)
        async with c.api() as api:
            vap = await client.AdmissionregistrationV1Api(api).read_validating_admission_policy(
                NAME)
        checked = vap.status.type_checking if vap.status else None
        assert not (checked and checked.expression_warnings), checked.expression_warnings
    asyncio.run(enforced())
    yield c
    asyncio.run(policy.delete_policies(c.kubeconfig, _policies()))


def test_a_gpu_pod_without_gpugovs_translation_is_refused_naming_it(cluster):
    async def run() -> dict[str, tuple[int, str]]:
        ns = await cluster.unique_namespace("create", dict(LABEL))
        tenant = await cluster.tenant_kubeconfig(ns)
        pods = {
            "gpu": _pod("gpu", {"nvidia.com/gpu": "1"}),
            "volcano": _pod("volcano", {"volcano.sh/vgpu-number": "1"}),
            "kai": _pod("kai", annotations={"gpu-fraction": "0.5"}),
            "init": {"metadata": {"name": "init"}, "spec": {
                "initContainers": [{"name": "i", "image": "busybox", "resources": {
                    "limits": {"nvidia.com/gpumem": "1000", "nvidia.com/gpu": "1"}}}],
                "containers": [{"name": "main", "image": "busybox"}]}},
            "zero": _pod("zero", {"nvidia.com/gpu": "0"}),
            "zero-milli": _pod("zero-milli", {"nvidia.com/gpu": "0m"}),
            "cpu": _pod("cpu", {"cpu": "10m"}),
            "translated": _pod("translated", {"nvidia.com/gpu": "1"},
                               {ann.REQUEST: '{"v":1}'}),
        }
        return {k: await _create(tenant, ns, p) for k, p in pods.items()}

    out = asyncio.run(run())
    for refused in ("gpu", "volcano", "kai", "init"):
        status, message = out[refused]
        assert status == 422, (refused, out[refused])
        assert policy.untranslated_message() in message, message
    for admitted in ("zero", "zero-milli", "cpu", "translated"):
        assert out[admitted] == (201, ""), (admitted, out[admitted])


def test_a_preset_node_on_a_gpu_pod_is_refused_unless_an_admin_creates_it(cluster):
    async def run() -> tuple[tuple[int, str], ...]:
        ns = await cluster.unique_namespace("create", dict(LABEL))
        tenant = await cluster.tenant_kubeconfig(ns)
        translated = {ann.REQUEST: '{"v":1}'}
        gpu = _pod("preset", {"nvidia.com/gpu": "1"}, translated, nodeName="gpu-node-1")
        cpu = _pod("cpu", {"cpu": "10m"}, nodeName="gpu-node-1")
        return (await _create(tenant, ns, gpu), await _create(tenant, ns, cpu),
                await _create(cluster.kubeconfig, ns, gpu))

    by_tenant, cpu, by_admin = asyncio.run(run())
    assert by_tenant[0] == 403 and policy.node_name_message() in by_tenant[1], by_tenant
    assert cpu == (201, "") and by_admin == (201, ""), (cpu, by_admin)


def test_namespaces_the_webhook_skips_are_exempt(cluster):
    async def run() -> tuple[tuple[int, str], tuple[int, str]]:
        ignored = await cluster.unique_namespace("create", {**LABEL, ann.IGNORE_LABEL: "true"})
        other = await cluster.unique_namespace("create", {**LABEL, ann.IGNORE_LABEL: "false"})
        gpu = _pod("gpu", {"nvidia.com/gpu": "1"}, nodeName="gpu-node-1")
        return (await _create(cluster.kubeconfig, ignored, gpu),
                await _create(await cluster.tenant_kubeconfig(other), other, gpu))

    ignored, other = asyncio.run(run())
    assert ignored == (201, ""), ignored
    assert other[0] in (403, 422), other
