"""The tenancy audit policy on a real kube-apiserver (as `gpugov dev up` runs it): pod
creations and Queue/Tenant changes are recorded with who did them; reads are not."""

from __future__ import annotations

import asyncio
import json

from kubernetes_asyncio import client

from gpugov.k8s import crds
from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.devcluster.dev import install_crds
from gpugov.k8s.devcluster.plane import LocalControlPlane
from gpugov.k8s.devcluster.pytest_plugin import ensure_binaries_or_skip


def test_audit_log_records_gpu_pods_and_tenancy_changes(tmp_path):
    ensure_binaries_or_skip()
    plane = LocalControlPlane(tmp_path / "plane", controller_manager=False, kwok=False,
                              die_with_parent=True, audit=True)
    plane.start()
    try:
        async def act() -> None:
            await install_crds(plane.kubeconfig)
            async with api_client(plane.kubeconfig) as api:
                custom = client.CustomObjectsApi(api)
                await custom.create_cluster_custom_object(
                    crds.GROUP, crds.VERSION, "queues",
                    {"apiVersion": crds.API_VERSION, "kind": "Queue",
                     "metadata": {"name": "audited"}, "spec": {"weight": 1}})
                await custom.create_cluster_custom_object(
                    crds.GROUP, crds.VERSION, "tenants",
                    {"apiVersion": crds.API_VERSION, "kind": "Tenant",
                     "metadata": {"name": "audited"},
                     "spec": {"namespaces": ["default"], "queue": "audited"}})
                await custom.list_cluster_custom_object(crds.GROUP, crds.VERSION, "tenants")
                await client.CoreV1Api(api).create_namespaced_pod("default", {
                    "metadata": {"name": "gpu"}, "spec": {"containers": [{
                        "name": "m", "image": "x",
                        "resources": {"limits": {"nvidia.com/gpu": 1}}}]}})
        asyncio.run(act())
        events = [json.loads(line) for line in
                  (tmp_path / "plane" / "audit.log").read_text().splitlines()]
    finally:
        plane.stop()
    seen = {(e["verb"], e["objectRef"]["resource"], e["objectRef"].get("name", "")):
            e for e in events if "objectRef" in e}
    pod = seen[("create", "pods", "gpu")]
    assert pod["user"]["username"] == "gpugov-admin"
    assert pod["requestObject"]["spec"]["containers"][0]["resources"]["limits"] == \
        {"nvidia.com/gpu": "1"}
    tenant = seen[("create", "tenants", "audited")]
    assert tenant["level"] == "RequestResponse" and tenant["responseObject"]["spec"]["queue"] \
        == "audited"
    assert ("create", "queues", "audited") in seen
    assert not [e for e in events if e["verb"] in ("list", "get", "watch")]
