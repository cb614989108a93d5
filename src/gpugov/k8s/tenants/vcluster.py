"""Pods a vCluster syncer created on the host, named back in the tenant's own terms.

A vCluster runs a tenant's control plane inside one host namespace; its syncer copies each
virtual pod to that namespace as `<name>-x-<virtual namespace>-x-<vcluster>` (hashed past 63
characters) and records where it came from (loft-sh/vcluster, pkg/util/translate/types.go and
pkg/controllers/resources/pods/translate/translator.go; the files and commit are kept in
tests/k8s/upstream/vcluster/):

- label `vcluster.loft.sh/managed-by`: the vCluster's name;
- label `vcluster.loft.sh/namespace`: the virtual namespace;
- annotations `vcluster.loft.sh/object-name`, `vcluster.loft.sh/object-namespace` (every
  synced object) and, for pods, `vcluster.loft.sh/name`, `vcluster.loft.sh/namespace`,
  `vcluster.loft.sh/uid`.

gpugov's Tenant names the host namespace (tenancy, queues, quotas and fences are the host's,
as for any namespace); `virtual_pod` recovers the tenant's own namespace and pod name so a
report or an explanation can say `team-a/train-0 (vCluster dev)` rather than the host name.
These labels are written by the syncer inside the tenant's namespace: they name things, they
are never an input to a decision (the Tenant is found from the host namespace).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MANAGED_BY = "vcluster.loft.sh/managed-by"
NAMESPACE_LABEL = "vcluster.loft.sh/namespace"
OBJECT_NAME = "vcluster.loft.sh/object-name"
OBJECT_NAMESPACE = "vcluster.loft.sh/object-namespace"
POD_NAME = "vcluster.loft.sh/name"
POD_NAMESPACE = "vcluster.loft.sh/namespace"
MAX_NAME = 253


@dataclass(frozen=True)
class VirtualPod:
    vcluster: str
    namespace: str
    name: str
    host_namespace: str
    host_name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (vCluster {self.vcluster})"


def safe_concat_name(*parts: str) -> str:
    """vCluster's `SafeConcatName`: joined with '-', hashed past 63 characters."""
    full = "-".join(parts)
    if len(full) > 63:
        digest = hashlib.sha256(full.encode()).hexdigest()[:10]
        return (full[:52] + "-" + digest).replace(".-", "-")
    return full


def host_name(name: str, namespace: str, vcluster: str) -> str:
    """The host pod name the syncer gives virtual pod `namespace/name` (single-namespace
    mode, `SingleNamespaceHostName`)."""
    return safe_concat_name(name, "x", namespace, "x", vcluster)


def _text(value: Any) -> str:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_NAME else ""


def virtual_pod(obj: Mapping[str, Any]) -> VirtualPod | None:
    """The virtual namespace/name of a host pod the syncer created; None for any other pod
    (no `managed-by` label, or no virtual name recorded)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    annots = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    vcluster = _text(labels.get(MANAGED_BY))
    name = _text(annots.get(OBJECT_NAME)) or _text(annots.get(POD_NAME))
    namespace = (_text(annots.get(OBJECT_NAMESPACE)) or _text(annots.get(POD_NAMESPACE))
                 or _text(labels.get(NAMESPACE_LABEL)))
    if not (vcluster and name and namespace):
        return None
    return VirtualPod(vcluster, namespace, name, _text(meta.get("namespace")),
                      _text(meta.get("name")))


def display_name(obj: Mapping[str, Any]) -> str:
    """`ns/name`, or the virtual `ns/name (vCluster v)` for a synced pod."""
    v = virtual_pod(obj)
    if v is not None:
        return str(v)
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
