"""Run a component under the RBAC the Helm chart ships, with a real ServiceAccount token.

The chart's rules live in deploy/helm/gpugov/files/rbac.yaml (one block per component:
ClusterRole rules and namespace Role rules). `apply_component_rbac` creates the same
ServiceAccount, (Cluster)Roles and bindings the chart renders (names `gpugov-<component>`) and
returns a kubeconfig holding a TokenRequest token for that ServiceAccount, so tests exercise
exactly what a deployed component may do.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s.devcluster.client import api_client

COMPONENTS = ("scheduler", "webhook", "node", "reconciler")


def rules_file() -> Path:
    """deploy/helm/gpugov/files/rbac.yaml of the source checkout this package runs from."""
    return Path(__file__).resolve().parents[4] / "deploy" / "helm" / "gpugov" / "files" / \
        "rbac.yaml"


def load_rules(path: Path | None = None) -> dict[str, dict[str, list[dict[str, Any]]]]:
    return yaml.safe_load((path or rules_file()).read_text())


async def _ignore_conflict(coro) -> None:
    try:
        await coro
    except ApiException as exc:
        if exc.status != 409:
            raise


async def apply_component_rbac(kubeconfig: Path, component: str, namespace: str,
                               out: Path, token_seconds: int = 3600,
                               release: str = "gpugov") -> Path:
    """Create the component's ServiceAccount and RBAC; write a token kubeconfig to `out`."""
    if component not in COMPONENTS:
        raise ValueError(f"component {component!r}; allowed: {', '.join(COMPONENTS)}")
    rules = load_rules()[component]
    name = f"{release}-{component}"
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    async with api_client(kubeconfig) as api:
        core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        await _ignore_conflict(core.create_namespace({"metadata": {"name": namespace}}))
        await _ignore_conflict(core.create_namespaced_service_account(
            namespace, {"metadata": {"name": name}}))
        role = {"metadata": {"name": name}, "rules": rules["clusterRules"]}
        try:
            await rbac.create_cluster_role(role)
        except ApiException as exc:
            if exc.status != 409:
                raise
            await rbac.patch_cluster_role(name, {"rules": rules["clusterRules"]})
        try:
            await rbac.create_cluster_role_binding(
                {"metadata": {"name": name}, "subjects": subject, "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise
            # one cluster, several namespaces (tests, dev): the binding gains this subject
            binding = await rbac.read_cluster_role_binding(name)
            subjects = [{"kind": x.kind, "name": x.name, "namespace": x.namespace}
                        for x in binding.subjects or []]
            if subject[0] not in subjects:
                await rbac.patch_cluster_role_binding(name, {"subjects": subjects + subject})
        if rules.get("namespaceRules"):
            await _ignore_conflict(rbac.create_namespaced_role(
                namespace, {"metadata": {"name": name}, "rules": rules["namespaceRules"]}))
            await _ignore_conflict(rbac.create_namespaced_role_binding(
                namespace, {"metadata": {"name": name}, "subjects": subject, "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}}))
        return await _token_kubeconfig(api, name, namespace, out, token_seconds)


async def _token_kubeconfig(api: client.ApiClient, name: str, namespace: str, out: Path,
                            token_seconds: int) -> Path:
    """A kubeconfig holding a TokenRequest token of ServiceAccount `namespace/name`."""
    token = (await client.CoreV1Api(api).create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": token_seconds}})).status.token
    server = api.configuration.host
    ca = base64.b64encode(Path(api.configuration.ssl_ca_cert).read_bytes()).decode()
    out.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "cluster", "cluster": {"server": server,
                                                     "certificate-authority-data": ca}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "cluster", "user": name}}]}))
    out.chmod(0o600)
    return out


async def tenant_edit_kubeconfig(kubeconfig: Path, namespace: str, name: str, out: Path,
                                 token_seconds: int = 3600) -> Path:
    """ServiceAccount `namespace/name` bound to the built-in `edit` ClusterRole in its own
    namespace only; a token kubeconfig for it in `out` (the tenant of the threat model)."""
    async with api_client(kubeconfig) as api:
        core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        await _ignore_conflict(core.create_namespace({"metadata": {"name": namespace}}))
        await _ignore_conflict(core.create_namespaced_service_account(
            namespace, {"metadata": {"name": name}}))
        await _ignore_conflict(rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": f"{name}-edit"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "edit"}}))
        return await _token_kubeconfig(api, name, namespace, out, token_seconds)
