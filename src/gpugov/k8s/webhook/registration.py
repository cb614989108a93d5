"""The Mutating/ValidatingWebhookConfiguration objects that route pods to the webhook.

CREATE: only pods that ask for a GPU reach gpugov: `matchConditions` (CEL, GA since Kubernetes
1.30) select pods with an `nvidia.com/` resource, a GPU annotation, or anything gpugov owns
(`gpugov.io/` annotations, the `gpugov.io/managed` label: forged ones are removed), and a
namespaceSelector skips kube-system, gpugov's own namespace and namespaces an admin labelled
`gpugov.io/ignore: "true"` (a pod label exempts nothing: tenants write pod labels). So
`failurePolicy: Fail` is safe: a non-GPU pod never waits on gpugov, and a GPU pod is refused
with the reason while gpugov is down instead of slipping past quotas and isolation (with
`Ignore` it would reach a scheduler with untranslated requests and no tenant).

CREATE is one HTTPS call per GPU pod, the mutating one: it refuses everything the old separate
validating CREATE call refused (forged allocation records, a preset spec.nodeName, an
untranslatable request) before writing its patch. What only a check after every mutating
webhook can see — a GPU added, or spec.nodeName set, by another admin-installed mutating
webhook that runs after gpugov's — is refused by the in-apiserver ValidatingAdmissionPolicy
(`policy.py`), which costs no HTTP call. Only a cluster without that policy needs the old
call back (`create_validation=True`; the chart adds it when `admissionPolicy.enabled=false`).
`reinvocationPolicy` stays Never: a reinvocation never reaches a pod gpugov skipped in the
first pass, and DRA mode's answer is not idempotent (docs/threat-model.md).

UPDATE: a second validating entry sees only updates that add, change or remove a key gpugov
owns, made by someone who is not gpugov (`OWNER_CHANGE_CONDITION`), and refuses them; the
in-apiserver ValidatingAdmissionPolicy (`policy.py`) refuses the same even while the webhook
is down. gpugov's own writes never wait on the webhook.
The Helm chart renders the same rules (deploy/helm/gpugov/templates/webhook.yaml).
"""

from __future__ import annotations

import base64
from typing import Any

from gpugov.k8s import annotations as ann
from gpugov.k8s import identities
from gpugov.k8s.webhook.policy import OWNED_ANNOTATIONS, OWNED_LABELS

NAME = "gpugov"
#: a GPU resource name: gpugov's and HAMi's (nvidia.com/), Volcano's vGPU (volcano.sh/vgpu-*);
#: the chart adds HAMi-renamed names (webhook.resourceNames) after the last one
GPU_RESOURCE = "(k.startsWith('nvidia.com/') || k.startsWith('volcano.sh/vgpu'))"
GPU_POD_CONDITION = (
    "["
    "(has(object.spec.initContainers) ? object.spec.initContainers : []), object.spec.containers"
    "].exists(cs, cs.exists(c, has(c.resources) && ("
    "(has(c.resources.limits) && c.resources.limits.exists(k, "
    f"{GPU_RESOURCE})) || "
    "(has(c.resources.requests) && c.resources.requests.exists(k, "
    f"{GPU_RESOURCE}))"
    "))) || (has(object.metadata.annotations) && object.metadata.annotations.exists(k, "
    "k == 'gpu-fraction' || k == 'gpu-memory' || k.startsWith('gpugov.io/'))) || "
    "(has(object.metadata.labels) && object.metadata.labels.exists(k, "
    f"k == '{ann.MANAGED_LABEL}'))"
)


def _changed(field: str, keys: tuple[str, ...]) -> str:
    new, old = f"object.metadata.{field}", f"oldObject.metadata.{field}"
    has_new, has_old = f"has({new})", f"has({old})"
    listed = "[" + ", ".join(f"'{k}'" for k in keys) + "]"
    return (f"{listed}.exists(k, ({has_new} && k in {new}) != ({has_old} && k in {old}) || "
            f"({has_new} && {has_old} && k in {new} && k in {old} && {new}[k] != {old}[k]))")


def owner_change_condition(namespace: str = identities.SYSTEM_NAMESPACE) -> str:
    """CEL: an UPDATE by someone other than gpugov that touches a key gpugov owns."""
    users = "[" + ", ".join(f"'{u}'" for u in identities.component_users(namespace)) + "]"
    return (f"!(request.userInfo.username in {users} || (has(request.userInfo.groups) && "
            f"'{identities.ADMIN_GROUP}' in request.userInfo.groups)) && "
            f"({_changed('annotations', OWNED_ANNOTATIONS)} || "
            f"{_changed('labels', OWNED_LABELS)})")


#: the condition for gpugov's default system namespace (the chart renders its own)
OWNER_CHANGE_CONDITION = owner_change_condition()


def _client(url: str | None, service: dict[str, Any] | None, path: str,
            ca_pem: bytes) -> dict[str, Any]:
    cfg: dict[str, Any] = {"caBundle": base64.b64encode(ca_pem).decode()}
    if url is not None:
        cfg["url"] = url.rstrip("/") + path
    else:
        cfg["service"] = {**(service or {}), "path": path}
    return cfg


def _hook(name: str, client_config: dict[str, Any], skip_namespaces: list[str],
          timeout: int) -> dict[str, Any]:
    return {
        "name": name, "clientConfig": client_config, "admissionReviewVersions": ["v1"],
        "sideEffects": "None", "failurePolicy": "Fail", "matchPolicy": "Equivalent",
        "timeoutSeconds": timeout,
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["pods"], "scope": "Namespaced"}],
        "namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": skip_namespaces},
            {"key": ann.IGNORE_LABEL, "operator": "NotIn", "values": ["true"]}]},
        "matchConditions": [{"name": "asks-for-gpu", "expression": GPU_POD_CONDITION}],
    }


def _owner_hook(client_config: dict[str, Any], skip_namespaces: list[str], timeout: int,
                system_namespace: str) -> dict[str, Any]:
    return {
        "name": "owners.pods.gpugov.io", "clientConfig": client_config,
        "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
        "matchPolicy": "Equivalent", "timeoutSeconds": timeout,
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                   "resources": ["pods"], "scope": "Namespaced"}],
        "namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": skip_namespaces}]},
        "matchConditions": [{"name": "changes-what-gpugov-owns",
                             "expression": owner_change_condition(system_namespace)}],
    }


def configurations(ca_pem: bytes, url: str | None = None,
                   service: dict[str, Any] | None = None,
                   skip_namespaces: tuple[str, ...] = ("kube-system",),
                   timeout: int = 10,
                   system_namespace: str = identities.SYSTEM_NAMESPACE,
                   create_validation: bool = False) -> list[dict[str, Any]]:
    """Both webhook configurations; give `url` (local process) or `service` (in cluster).
    `system_namespace`: where gpugov's component ServiceAccounts live. `create_validation`:
    also validate pod CREATEs by HTTPS, for clusters without `policy.pod_ownership_policies`
    (which hold the same rules in the apiserver)."""
    skip = list(skip_namespaces)
    mutating = _hook("mutate.pods.gpugov.io", _client(url, service, "/mutate", ca_pem), skip,
                     timeout)
    mutating["reinvocationPolicy"] = "Never"
    # DRA mode writes the pod's ResourceClaimTemplates (dra_translate.py), never on dryRun
    mutating["sideEffects"] = "NoneOnDryRun"
    validating = [_hook("validate.pods.gpugov.io", _client(url, service, "/validate", ca_pem),
                        skip, timeout)] if create_validation else []
    owners = _owner_hook(_client(url, service, "/validate", ca_pem), skip, timeout,
                         system_namespace)
    # Tenants and Queues: warnings, and a refused Queue cycle. Ignore when gpugov is down: the
    # scheduler confines a cycle that got in to its subtree, and admins (the only writers)
    # must be able to repair Queues while the webhook is down.
    tenancy = {
        "name": "validate.tenancy.gpugov.io",
        "clientConfig": _client(url, service, "/validate", ca_pem),
        "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent", "timeoutSeconds": timeout,
        "rules": [{"apiGroups": ["gpugov.io"], "apiVersions": ["v1alpha1"],
                   "operations": ["CREATE", "UPDATE"], "resources": ["tenants", "queues"],
                   "scope": "Cluster"}],
    }
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "MutatingWebhookConfiguration", "metadata": {"name": NAME},
         "webhooks": [mutating]},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingWebhookConfiguration", "metadata": {"name": NAME},
         "webhooks": [*validating, owners, tenancy]},
    ]
