"""gpugov's scheduler allocating DRA claims itself (docs/dra.md, "path 1").

A pod of gpugov's scheduler with `spec.resourceClaims` asking for gpugov's DeviceClasses is
translated (`k8s.dra.allocate.translate`) into the one `GpuRequest` and placed in the one
`ClusterState` with its Tenant's queue: quota, fair share, gangs and preemption are the
scheduler's own. DRA nodes (label `gpugov.io/dra=true`) carry an internal taint in the state
that only such pods tolerate, so no device-plugin pod lands on their GPUs; kube-scheduler's
allocations on them are held device by device (`foreign_devices`). At bind, each claim gets its
`status.allocation` and `status.reservedFor` (and kube's delete-protection finalizer, so
kube-controller-manager deallocates it when the pod is gone) before the Binding; when a pod
gpugov allocated for leaves, its reservation and allocation are released.

This module holds what the state needs: the pods' claim references, every ResourceClaim and
DeviceClass as watched, a memo of CEL results, and the API writes.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import Any

from gpugov.k8s.dra.allocate import (  # noqa: F401 - ClaimProblem: the state's
    FINALIZER,
    ClaimProblem,
    Translation,
    allocations,
    release_patch,
    translate,
)
from gpugov.k8s.dra.allocate_cel import SelectorError, matches
from gpugov.k8s.dra.slices import DRA_LABEL, DRIVER
from gpugov.k8s.scheduler.held import _hold as hold_device  # noqa: F401 - the state's
from gpugov.model.constraints import NodeRequirement, NodeTerm, Taint, Toleration
from gpugov.model.request import PodRequest

log = logging.getLogger("gpugov.scheduler")

CLASSES_PATH = "/apis/resource.k8s.io/v1/deviceclasses"
#: the state's taint on DRA nodes (never on the API's Node): only claim pods tolerate it
DRA_TAINT = Taint("internal.gpugov.io/dra", "true", "NoSchedule")
DRA_TOLERATION = Toleration(DRA_TAINT.key, "Equal", "true", "NoSchedule")
_GPU = re.compile(r"gpu-(\d+)(?:-|$)")


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def is_dra_node(labels: Mapping[str, str]) -> bool:
    return labels.get(DRA_LABEL) == "true"


class DraPods:
    """Claims, classes and claim pods as watched; translations cached on their versions."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}  # pod key -> the parts translate reads
        self.claims: dict[str, dict[str, Any]] = {}  # ns/name -> metadata, spec, status
        self.classes: dict[str, dict[str, Any]] = {}
        self.version = 0  # bumped by claim and class changes
        self._cache: dict[str, tuple[Any, Translation | ClaimProblem]] = {}
        self._cel: dict[tuple[str, str, str], bool | SelectorError] = {}
        self._cel_version: Any = None
        #: (pool, device) given by this scheduler and not yet seen in a claim's status
        self.pending: set[tuple[str, str]] = set()
        #: uid -> pod key of pods this scheduler allocated claims for (to release them)
        self.ours: dict[str, str] = {}
        self.releases: list[tuple[str, str]] = []  # (claim key, pod uid) to release
        #: uid -> pod key of pods gpugov allocated for that left, while a claim still names
        #: them (forgotten when no claim does: `forget_left`)
        self.left: dict[str, str] = {}

    # -- watch events -------------------------------------------------------------------------
    def set_pod(self, key: str, obj: Mapping[str, Any]) -> None:
        spec = obj.get("spec") or {}
        if not spec.get("resourceClaims"):
            self.pods.pop(key, None)
            return
        self.pods[key] = {"metadata": obj.get("metadata") or {}, "spec": {
            k: spec.get(k) for k in ("resourceClaims", "containers", "initContainers")},
            "status": {"resourceClaimStatuses":
                       (obj.get("status") or {}).get("resourceClaimStatuses")}}

    def delete_pod(self, key: str, uid: str = "") -> None:
        """A pod left (or finished): release what gpugov allocated for it."""
        slim = self.pods.get(key)
        mine = str(((slim or {}).get("metadata") or {}).get("uid") or "")
        if not uid or uid == mine:  # not a new pod of the same name
            self.pods.pop(key, None)
        uid = uid or mine
        if uid and uid in self.ours and uid not in self.left:
            self.left[uid] = self.ours.pop(uid)
            ns = key.split("/", 1)[0]
            for c in self.claims.values():
                meta = c.get("metadata") or {}
                if meta.get("namespace") == ns and release_patch(c, uid) is not None:
                    self.releases.append((_key(c), uid))

    def set_claim(self, obj: Mapping[str, Any]) -> None:
        slim = {"metadata": obj.get("metadata") or {}, "spec": obj.get("spec") or {},
                "status": obj.get("status") or {}}
        key = _key(obj)
        if self.claims.get(key) != slim:
            self.claims[key] = slim
            self.version += 1
        for r in ((slim["status"].get("allocation") or {}).get("devices") or {}).get(
                "results") or []:
            if isinstance(r, Mapping):
                self.pending.discard((str(r.get("pool")), str(r.get("device"))))

    def forget_left(self) -> None:
        """Forget pods that left once no claim is reserved for them any more."""
        if not self.left:
            return
        named = {r.get("uid") for c in self.claims.values()
                 for r in (c.get("status") or {}).get("reservedFor") or []
                 if isinstance(r, Mapping)}
        self.left = {u: k for u, k in self.left.items() if u in named}

    def delete_claim(self, obj: Mapping[str, Any]) -> None:
        if self.claims.pop(_key(obj), None) is not None:
            self.version += 1

    def set_class(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if self.classes.get(name) != obj:
            self.classes[name] = dict(obj)
            self.version += 1

    def delete_class(self, obj: Mapping[str, Any]) -> None:
        if self.classes.pop(str((obj.get("metadata") or {}).get("name") or ""), None):
            self.version += 1

    # -- translation --------------------------------------------------------------------------
    def translation(self, key: str, nodes: Mapping[str, list[dict[str, Any]]],
                    slices_version: Any) -> Translation | None:
        """The pod's claims as one request; None when it names no claim. ClaimProblem: why
        it cannot be placed (refused, or waiting for its claims)."""
        pod = self.pods.get(key)
        if pod is None:
            return None
        version = (self.version, slices_version, id(pod))
        got = self._cache.get(key)
        if got is None or got[0] != version:
            devices = slices_version[0] if isinstance(slices_version, tuple) else slices_version
            if self._cel_version != devices:  # CEL results hold while the devices do
                self._cel.clear()
                self._cel_version = devices
            try:
                result: Translation | ClaimProblem = translate(pod, self.claims, self.classes,
                                                               nodes, self._match)
            except ClaimProblem as e:
                result = e
            got = (version, result)
            self._cache[key] = got
            if len(self._cache) > 4 * len(self.pods) + 64:
                self._cache = {k: v for k, v in self._cache.items() if k in self.pods}
        if isinstance(got[1], ClaimProblem):
            raise got[1]
        return got[1]

    def _match(self, expr: str, node: str, device: Mapping[str, Any]) -> bool:
        k = (expr, node, str(device.get("name")))
        got = self._cel.get(k)
        if got is None:
            try:
                got = matches(expr, DRIVER, device)
            except SelectorError as e:
                got = e
            if len(self._cel) < 200_000:
                self._cel[k] = got
        if isinstance(got, SelectorError):
            raise got
        return got

    def taken(self) -> set[tuple[str, str]]:
        """(pool, device) of every allocated gpugov claim, and those given but not seen."""
        out = set(self.pending)
        for c in self.claims.values():
            for r in (((c.get("status") or {}).get("allocation") or {}).get("devices")
                      or {}).get("results") or []:
                if isinstance(r, Mapping) and r.get("driver") == DRIVER:
                    out.add((str(r.get("pool")), str(r.get("device"))))
        return out

    def claim_writes(self, tr: Translation, pod_key: str, pod_uid: str, node: str,
                     devices: tuple[int, ...], mig: tuple[tuple[int, int], ...],
                     published: set[str]) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        """(claim key, claim uid, allocation) for each of the pod's claims."""
        taken = self.taken()
        allocs = allocations(tr, node, devices, mig, taken, published)
        for a in allocs.values():
            for r in a["devices"]["results"]:
                self.pending.add((node, r["device"]))
        self.ours[pod_uid] = pod_key
        uids = {p.claim: p.uid for p in tr.parts}
        return tuple((k, uids[k], a) for k, a in sorted(allocs.items()))


def node_devices(devices: Mapping[tuple[str, str], dict[str, Any]]
                 ) -> dict[str, list[dict[str, Any]]]:
    """pool (node) -> its published devices (ClaimBook.devices())."""
    out: dict[str, list[dict[str, Any]]] = {}
    for (pool, _name), d in devices.items():
        out.setdefault(pool, []).append(d)
    return out


def device_index_of(name: str) -> int | None:
    """`gpu-3`, `gpu-3-mig-...`, `gpu-3-ts-0` -> 3."""
    m = _GPU.match(name)
    return int(m.group(1)) if m else None


# -- API writes -----------------------------------------------------------------------------
async def write_claims(kube: Any, namespace: str, pod: str, pod_uid: str,
                       claims: tuple[tuple[str, str, dict[str, Any]], ...],
                       known: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """Allocate and reserve each claim for the pod (finalizer first, as kube-scheduler does);
    "" when all are written, else why not (nothing is bound then). `known`: the claims as
    watched (their resourceVersion makes each write conditional; a stale one fails, 409)."""
    for key, uid, alloc in claims:
        name = key.split("/", 1)[1]
        path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
        doc = (known or {}).get(key)
        if doc is None or not (doc.get("metadata") or {}).get("resourceVersion"):
            status, doc = await kube.request("GET", path)
            if status != 200:
                return f"ResourceClaim {key}: HTTP {status}"
        meta = doc.get("metadata") or {}
        if uid and meta.get("uid") != uid:
            return f"ResourceClaim {key} was replaced"
        if (doc.get("status") or {}).get("allocation"):
            return f"ResourceClaim {key} is allocated already"
        fins = list(meta.get("finalizers") or [])
        rv = meta.get("resourceVersion")
        if FINALIZER not in fins:
            status, doc = await kube.request("PATCH", path, {"metadata": {
                "finalizers": [*fins, FINALIZER], "resourceVersion": rv}},
                content_type="application/merge-patch+json")
            if status != 200:
                return f"ResourceClaim {key}: finalizer: HTTP {status}"
            rv = (doc.get("metadata") or {}).get("resourceVersion")
        body = {"metadata": {"resourceVersion": rv}, "status": {
            "allocation": alloc,
            "reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid}]}}
        status, doc = await kube.request("PATCH", f"{path}/status", body,
                                         content_type="application/merge-patch+json")
        if status != 200:
            return f"ResourceClaim {key}: status: HTTP {status}: {str(doc)[:200]}"
    return ""


async def release_claim(kube: Any, key: str, pod_uid: str) -> int:
    """Drop the pod's reservation; when none is left, the allocation and the finalizer."""
    ns, name = key.split("/", 1)
    path = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}"
    status, doc = await kube.request("GET", path)
    if status != 200:
        return status
    patch = release_patch(doc, pod_uid)
    if patch is not None:
        rv = (doc.get("metadata") or {}).get("resourceVersion")
        status, doc = await kube.request(
            "PATCH", f"{path}/status", {"metadata": {"resourceVersion": rv}, "status": patch},
            content_type="application/merge-patch+json")
        if status != 200:
            return status
    meta = doc.get("metadata") or {}
    fins = list(meta.get("finalizers") or [])
    if FINALIZER in fins and not (doc.get("status") or {}).get("allocation"):
        fins.remove(FINALIZER)
        status, _ = await kube.request("PATCH", path, {"metadata": {
            "finalizers": fins, "resourceVersion": meta.get("resourceVersion")}},
            content_type="application/merge-patch+json")
    return status


def constrain(preq: PodRequest, tr: Translation | None) -> PodRequest:
    """The engine's request with the DRA rules of placement: a claim pod tolerates the DRA
    nodes' internal taint and goes only to nodes whose devices satisfy its claims; no other
    pod may carry that toleration (a tenant writing it is ignored for that key only)."""
    tols = tuple(t for t in preq.tolerations if t.key != DRA_TAINT.key)
    if tr is None:
        return preq if len(tols) == len(preq.tolerations) else \
            dataclasses.replace(preq, tolerations=tols)
    # one term per node (matchFields takes one name), ANDed into each of the pod's terms
    names = [NodeRequirement("metadata.name", "In", (n,), field=True) for n in tr.nodes]
    terms = tuple(NodeTerm((*t.requirements, w)) for t in preq.node_affinity or
                  (NodeTerm(()),) for w in names)
    return dataclasses.replace(preq, tolerations=(*tols, DRA_TOLERATION), node_affinity=terms)


def ours(claim: Mapping[str, Any], pods: Mapping[str, Any], scheduler: str,
         leaving: Mapping[str, str] | None = None) -> bool:
    """A claim gpugov's scheduler allocated: reserved for a live pod of its own (that pod's
    job counts it, so the claim is neither held again nor charged again), or for a pod of its
    own that left and whose release is on its way (`leaving`: uid -> pod; an evicted
    victim's GPU is its preemptor's, not held until the release is seen)."""
    ns = (claim.get("metadata") or {}).get("namespace", "")
    for r in (claim.get("status") or {}).get("reservedFor") or []:
        if not isinstance(r, Mapping):
            continue
        if leaving and r.get("uid") in leaving:
            return True
        info = pods.get(f"{ns}/{r.get('name')}")
        if info is not None and info.scheduler == scheduler and info.uid == r.get("uid"):
            return True
    return False
