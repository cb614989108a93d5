"""The Mutating/ValidatingWebhookConfiguration objects that route GPU pods to the webhook.

Only pods that ask for a GPU reach gpugov: `matchConditions` (CEL, GA since Kubernetes 1.30)
select pods with an `nvidia.com/` resource or a GPU annotation, an objectSelector skips pods
labelled `gpugov.io/ignore: "true"`, and a namespaceSelector skips kube-system and gpugov's own
namespace. So `failurePolicy: Fail` is safe: a non-GPU pod never waits on gpugov, and a GPU pod
is refused with the reason while gpugov is down instead of slipping past quotas and isolation
(with `Ignore` it would reach a scheduler with untranslated requests and no tenant).
The Helm chart renders the same rules (deploy/helm/gpugov/templates/webhook.yaml).
"""

from __future__ import annotations

import base64
from typing import Any

from gpugov.k8s import annotations as ann

NAME = "gpugov"
GPU_POD_CONDITION = (
    "["
    "(has(object.spec.initContainers) ? object.spec.initContainers : []), object.spec.containers"
    "].exists(cs, cs.exists(c, has(c.resources) && ("
    "(has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('nvidia.com/'))) || "
    "(has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('nvidia.com/')))"
    "))) || (has(object.metadata.annotations) && object.metadata.annotations.exists(k, "
    "k == 'gpu-fraction' || k == 'gpu-memory' || k.startsWith('gpugov.io/')))"
)


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
             "values": skip_namespaces}]},
        "objectSelector": {"matchExpressions": [
            {"key": ann.IGNORE_LABEL, "operator": "NotIn", "values": ["true"]}]},
        "matchConditions": [{"name": "asks-for-gpu", "expression": GPU_POD_CONDITION}],
    }


def configurations(ca_pem: bytes, url: str | None = None,
                   service: dict[str, Any] | None = None,
                   skip_namespaces: tuple[str, ...] = ("kube-system",),
                   timeout: int = 10) -> list[dict[str, Any]]:
    """Both webhook configurations; give `url` (local process) or `service` (in cluster)."""
    skip = list(skip_namespaces)
    mutating = _hook("mutate.pods.gpugov.io", _client(url, service, "/mutate", ca_pem), skip,
                     timeout)
    mutating["reinvocationPolicy"] = "Never"
    validating = _hook("validate.pods.gpugov.io", _client(url, service, "/validate", ca_pem),
                       skip, timeout)
    # Tenants and Queues: warnings only (never blocks; Ignore when gpugov is down)
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
         "webhooks": [validating, tenancy]},
    ]
