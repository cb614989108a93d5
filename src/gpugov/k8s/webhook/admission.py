"""AdmissionReview v1 for pods: translate GPU requests, resolve tenancy, or refuse clearly.

Pure logic (no I/O): `mutate` and `validate` take the AdmissionReview request and the tenancy
inputs and return the AdmissionReview response. The server (`webhook.server`) reads Tenants and
Queues from the API and calls these.

Mutation of a pod that asks for a GPU (any spelling `k8s.resources.translate` knows):
`gpugov.io/request` (canonical JSON), `gpugov.io/tenant`, `gpugov.io/queue`,
`gpugov.io/trust-tier`, the label `gpugov.io/managed: "true"`, and `schedulerName` (when unset
or `default-scheduler`). Refusals (HTTP 200, `allowed: false`, code 422) carry the message the
user sees in kubectl, which says what to write instead.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from gpugov.k8s import annotations as ann
from gpugov.k8s.quantity import plain
from gpugov.k8s.resources import RequestError, translate
from gpugov.k8s.webhook.tenancy import Resolution, TenancyError
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import MIN_ISOLATION

#: annotations only gpugov's components may write; stripped before translating
OWNED = (ann.REQUEST, ann.QUEUE, ann.TENANT, ann.TRUST_TIER, ann.ALLOCATION, ann.ALLOCATED)
#: annotations a user must never set at create time (they would steer the device plugin)
FORBIDDEN_AT_CREATE = (ann.ALLOCATION, ann.ALLOCATED)


class ReviewError(ValueError):
    """The body is not an AdmissionReview v1 request (answered with HTTP 400)."""


def parse_review(body: bytes) -> dict[str, Any]:
    """The `request` of an AdmissionReview v1; ReviewError names what is wrong."""
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReviewError(f"body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise ReviewError("body is not a JSON object")
    if review.get("apiVersion") != "admission.k8s.io/v1" or review.get("kind") != "AdmissionReview":
        raise ReviewError("expected apiVersion admission.k8s.io/v1, kind AdmissionReview; got "
                          f"{review.get('apiVersion')!r}/{review.get('kind')!r}")
    req = review.get("request")
    if not isinstance(req, dict) or not isinstance(req.get("uid"), str):
        raise ReviewError("request.uid is missing")
    return req


def response(uid: str, allowed: bool = True, message: str = "", patch: list | None = None,
             code: int = 422, warnings: list[str] | None = None) -> dict[str, Any]:
    resp: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        resp["status"] = {"code": code, "reason": "Invalid" if code == 422 else "InternalError",
                          "message": message}
    if patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        resp["warnings"] = warnings
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    spec = pod.get("spec") or {}
    out = []
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, Mapping):
                out.append((f"{key[:-1]} {c.get('name', '?')!r}", c))
    return out


def _limits(c: Mapping[str, Any]) -> dict[str, Any]:
    """requests overlaid by limits; GPU quantities in plain numbers (`20k` -> 20000)."""
    res = c.get("resources") or {}
    merged = dict(res.get("requests") or {})
    merged.update(res.get("limits") or {})
    return {k: plain(v) if k.startswith("nvidia.com/") else v for k, v in merged.items()}


def pod_request(pod: Mapping[str, Any]) -> GpuRequest | None:
    """The pod's one GPU request (None = no GPU); RequestError when impossible/ambiguous.

    The container with `nvidia.com/` resources carries it; with none, annotations alone may
    (KAI's `gpu-fraction`/`gpu-memory`). Limits win over requests for the same resource.
    """
    meta = pod.get("metadata") or {}
    annots = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in OWNED}
    sel = (pod.get("spec") or {}).get("nodeSelector") or {}
    limits = [(where, _limits(c)) for where, c in _containers(pod)]
    gpu = [(w, lim) for w, lim in limits if any(k.startswith("nvidia.com/") for k in lim)]
    if len(gpu) > 1:
        raise RequestError(", ".join(w for w, _ in gpu),
                           "more than one container asks for GPUs",
                           "put the GPU work in one container (gpugov gives one GPU request "
                           "per pod)")
    return translate(gpu[0][1] if gpu else {}, annots, sel)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _check_tier(req: GpuRequest, res: Resolution) -> None:
    floor = MIN_ISOLATION[res.trust]
    if req.delivered_isolation < floor:
        raise RequestError(
            ", ".join(req.spellings) or ann.REQUEST,
            f"Tenant {res.tenant!r} is {res.trust.value}: its pods need {floor} isolation, "
            f"but this request delivers only {req.delivered_isolation}",
            "ask for a MIG profile (nvidia.com/mig-<profile>) or whole GPUs (nvidia.com/gpu)"
            if floor.name == "HARD" else
            "ask for a soft slice (nvidia.com/gpumem / nvidia.com/gpucores with nvidia.com/gpu: 1)"
            ", a MIG profile or whole GPUs")


def mutate(req: Mapping[str, Any], resolve_tenancy, scheduler_name: str = ann.SCHEDULER_NAME
           ) -> dict[str, Any]:
    """Answer a mutating review. `resolve_tenancy(namespace) -> Resolution` may raise
    TenancyError (the pod is refused with its message)."""
    uid = req["uid"]
    pod = req.get("object")
    if req.get("kind", {}).get("kind") != "Pod" or not isinstance(pod, Mapping):
        return response(uid)  # not ours: never block what we do not understand
    meta = pod.get("metadata") or {}
    annots = meta.get("annotations") or {}
    if req.get("operation") == "CREATE":
        spoofed = [k for k in FORBIDDEN_AT_CREATE if k in annots]
        if spoofed:
            return response(uid, False, f"{spoofed[0]}: only gpugov's scheduler writes it; "
                            "remove it from the pod")
    try:
        gpu = pod_request(pod)
    except RequestError as exc:
        return response(uid, False, f"gpugov: {exc}")
    if gpu is None:
        return response(uid)
    namespace = req.get("namespace") or meta.get("namespace") or "default"
    try:
        res = resolve_tenancy(namespace)
        _check_tier(gpu, res)
    except (TenancyError, RequestError) as exc:
        return response(uid, False, f"gpugov: {exc}")
    patch: list[dict[str, Any]] = []
    if not meta.get("annotations"):
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    for key, value in ((ann.REQUEST, ann.encode_request(gpu)), (ann.TENANT, res.tenant),
                       (ann.QUEUE, res.queue), (ann.TRUST_TIER, res.trust.value)):
        patch.append({"op": "add", "path": f"/metadata/annotations/{_escape(key)}",
                      "value": value})
    if not meta.get("labels"):
        patch.append({"op": "add", "path": "/metadata/labels", "value": {}})
    patch.append({"op": "add", "path": f"/metadata/labels/{_escape(ann.MANAGED_LABEL)}",
                  "value": "true"})
    current = (pod.get("spec") or {}).get("schedulerName")
    if scheduler_name and current in (None, "", "default-scheduler"):
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": scheduler_name})
    return response(uid, patch=patch)


def validate(req: Mapping[str, Any], scheduler_name: str = ann.SCHEDULER_NAME) -> dict[str, Any]:
    """Answer a validating review: after every mutating webhook ran, a GPU pod must still carry
    the request annotation matching its resources (another mutator may have changed them)."""
    uid = req["uid"]
    pod = req.get("object")
    if req.get("kind", {}).get("kind") != "Pod" or not isinstance(pod, Mapping):
        return response(uid)
    try:
        gpu = pod_request(pod)
    except RequestError as exc:
        return response(uid, False, f"gpugov: {exc}")
    if gpu is None:
        return response(uid)
    annots = (pod.get("metadata") or {}).get("annotations") or {}
    if ann.REQUEST not in annots:
        return response(uid, False, "gpugov: the pod asks for a GPU but gpugov's mutating "
                        "webhook did not annotate it (is it excluded by a label?)")
    try:
        written = ann.decode_request(annots[ann.REQUEST])
    except ann.AnnotationError as exc:
        return response(uid, False, f"gpugov: {exc}")
    if ann.encode_request(written) != ann.encode_request(gpu):
        return response(uid, False, f"gpugov: {ann.REQUEST} no longer matches the pod's GPU "
                        "resources (changed after gpugov's webhook ran); recreate the pod")
    return response(uid)


def tenancy_warnings(req: Mapping[str, Any], queues: Mapping[str, str | None]) -> dict[str, Any]:
    """Answer a review of a Tenant or Queue: always allowed, with warnings (kubectl prints
    them) when it points at a queue that does not exist or a Tenant's queue is not a leaf.
    Never a refusal: objects are often applied in any order."""
    uid = req["uid"]
    obj = req.get("object")
    kind = req.get("kind", {}).get("kind")
    if not isinstance(obj, Mapping):
        return response(uid)
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name", "?")
    warnings: list[str] = []
    if kind == "Tenant":
        queue = spec.get("queue")
        children = sorted(q for q, parent in queues.items() if parent == queue)
        if queue not in queues:
            warnings.append(f"Tenant {name}: queue {queue!r} does not exist; GPU pods of its "
                            f"namespaces are refused until Queue {queue!r} is created")
        elif children:
            warnings.append(f"Tenant {name}: queue {queue!r} has child queues "
                            f"({', '.join(children)}); only leaf queues take work")
    elif kind == "Queue":
        parent = spec.get("parent")
        if parent is not None and parent not in queues:
            warnings.append(f"Queue {name}: parent {parent!r} does not exist")
    return response(uid, warnings=warnings or None)
