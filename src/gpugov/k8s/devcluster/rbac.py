"""Run a component under the RBAC the Helm chart ships, with a real ServiceAccount token.

The rules (one block per component: ClusterRole rules and namespace Role rules) ship inside
the package, gpugov/k8s/data/rbac.yaml, so `gpugov dev up` finds them from any install; the
chart's deploy/helm/gpugov/files/rbac.yaml is the same file (tests/k8s/test_rbac.py fails when
they differ; `python -m gpugov.k8s.devcluster.rbac --sync` copies the chart's over the
package's). `apply_component_rbac` creates the same ServiceAccount, (Cluster)Roles and
bindings the chart renders (names `gpugov-<component>`) and returns a kubeconfig holding a
TokenRequest token for that ServiceAccount, so tests exercise exactly what a deployed
component may do. `node_token_kubeconfig` gives the node ServiceAccount a token bound to one
Node, as the node agent's pod has (see `gpugov.k8s.node_policy`).
"""

from __future__ import annotations

import base64
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s.devcluster.client import api_client

COMPONENTS = ("scheduler", "webhook", "node", "reconciler", "tenants")


class RulesError(Exception):
    """The RBAC rules cannot be loaded: components must not run (never as the admin)."""


def rules_file() -> Path:
    """The packaged rules, gpugov/k8s/data/rbac.yaml (package data, from any install)."""
    return Path(str(resources.files("gpugov.k8s").joinpath("data").joinpath("rbac.yaml")))


def chart_rules_file() -> Path:
    """deploy/helm/gpugov/files/rbac.yaml of a source checkout (the chart's copy)."""
    return Path(__file__).resolve().parents[4] / "deploy" / "helm" / "gpugov" / "files" / \
        "rbac.yaml"


def load_rules(path: Path | None = None) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every component's rules; RulesError (naming the file and the problem) when the file
    is missing, unreadable, or lacks a component's `clusterRules` list."""
    path = path or rules_file()
    try:
        rules = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise RulesError(f"cannot load gpugov's RBAC rules from {path}: {e}") from None
    if not isinstance(rules, dict):
        raise RulesError(f"{path}: expected a mapping of component -> rules")
    for component in COMPONENTS:
        block = rules.get(component)
        if not isinstance(block, dict) or not isinstance(block.get("clusterRules"), list):
            raise RulesError(f"{path}: component {component!r} has no clusterRules list")
        if not isinstance(block.get("namespaceRules") or [], list):
            raise RulesError(f"{path}: component {component!r}: namespaceRules is not a list")
    return rules


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
                            token_seconds: int,
                            bound_to: dict[str, str] | None = None) -> Path:
    """A kubeconfig holding a TokenRequest token of ServiceAccount `namespace/name`
    (`bound_to`: the token's boundObjectRef, e.g. a Node)."""
    spec: dict[str, Any] = {"expirationSeconds": token_seconds}
    if bound_to is not None:
        spec["boundObjectRef"] = bound_to
    token = (await client.CoreV1Api(api).create_namespaced_service_account_token(
        name, namespace, {"spec": spec})).status.token
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
        await _until_allowed(api, f"system:serviceaccount:{namespace}:{name}", namespace)
        return await _token_kubeconfig(api, name, namespace, out, token_seconds)


async def _until_allowed(api: client.ApiClient, user: str, namespace: str,
                         timeout: float = 30.0) -> None:
    """Wait until the apiserver's authorizer (an informer cache, which can lag a fresh
    RoleBinding on a loaded machine) lets `user` create pods in `namespace`."""
    import asyncio
    import time

    authz = client.AuthorizationV1Api(api)
    review = {"spec": {"user": user, "groups": ["system:serviceaccounts",
                                                f"system:serviceaccounts:{namespace}",
                                                "system:authenticated"],
                       "resourceAttributes": {"namespace": namespace, "verb": "create",
                                              "resource": "pods"}}}
    deadline = time.monotonic() + timeout
    while True:
        answer = await authz.create_subject_access_review(review)
        if answer.status.allowed or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.1)


async def node_token_kubeconfig(kubeconfig: Path, node: str, namespace: str, out: Path,
                                token_seconds: int = 3600, release: str = "gpugov") -> Path:
    """The node ServiceAccount (`apply_component_rbac`) with a TokenRequest token bound to
    Node `node`: the apiserver adds `authentication.kubernetes.io/node-name` to its user
    info, as it does for the node agent pod's projected token."""
    await apply_component_rbac(kubeconfig, "node", namespace, out.with_suffix(".unbound"),
                               token_seconds, release)
    async with api_client(kubeconfig) as api:
        uid = (await client.CoreV1Api(api).read_node(node)).metadata.uid
        return await _token_kubeconfig(api, f"{release}-node", namespace, out, token_seconds,
                                       {"kind": "Node", "apiVersion": "v1", "name": node,
                                        "uid": uid})


def sync_rules() -> bool:
    """Copy the chart's rules over the packaged ones (a source checkout); True if changed."""
    src, dst = chart_rules_file(), rules_file()
    text = src.read_bytes()
    if dst.is_file() and dst.read_bytes() == text:
        return False
    dst.write_bytes(text)
    return True


if __name__ == "__main__":  # python -m gpugov.k8s.devcluster.rbac --sync
    if sys.argv[1:] != ["--sync"]:
        sys.exit("usage: python -m gpugov.k8s.devcluster.rbac --sync")
    print(f"{rules_file()}: {'updated' if sync_rules() else 'already the chart copy'}")
