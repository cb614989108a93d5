"""AdmissionReview v1 for pods: translate GPU requests, resolve tenancy, or refuse clearly.

Pure logic (no I/O): `mutate`, `validate` and `review_tenancy` take the AdmissionReview request
and the tenancy inputs and return the AdmissionReview response. The server (`webhook.server`)
reads Tenants and Queues from the API and calls these off its event loop.

Mutation of a pod that asks for a GPU (any spelling `k8s.resources.translate` knows):
`gpugov.io/request` (canonical JSON), `gpugov.io/tenant`, `gpugov.io/queue`,
`gpugov.io/trust-tier`, the label `gpugov.io/managed: "true"`, and `schedulerName` (when unset
or `default-scheduler`). A pod without a GPU keeps nothing gpugov owns: forged owned
annotations and labels are removed. Refusals (HTTP 200, `allowed: false`, code 422 or 403)
carry the message the user sees in kubectl, which says what to write instead.

Ownership (`policy.py` holds the same rules in the apiserver): on UPDATE only gpugov's
identities (`identities.is_gpugov`, from `request.userInfo`) may add, change or remove an
owned key; on CREATE nobody sets the allocation records.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpugov.k8s import annotations as ann
from gpugov.k8s import identities
from gpugov.k8s.pod_containers import MAX_GPU_CONTAINERS, Kind
from gpugov.k8s.pod_containers import containers as pod_containers
from gpugov.k8s.quantity import parse_quantity, plain
from gpugov.k8s.resources import RequestError, translate
from gpugov.k8s.tenants.checks import tenant_problems
from gpugov.k8s.tenants.podchecks import (
    GuardrailError,
    guardrails_of,
    placement_patch,
    refusals,
)
from gpugov.k8s.webhook.multi_container import Ask, combine
from gpugov.k8s.webhook.policy import (
    FORBIDDEN_AT_CREATE,
    OWNED_ANNOTATIONS,
    OWNED_LABELS,
    create_message,
    owner_message,
)
from gpugov.k8s.webhook.tenancy import Resolution, TenancyError
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import MIN_ISOLATION
from gpugov.model.resource_spellings import (
    DEFAULT_NAMES,
    KAI_ANNOTATIONS,
    KAI_CONTAINER,
    KAI_FRACTION,
    KAI_MEMORY,
    ResourceNames,
    annotation_warnings,
    canonical_limits,
)

#: annotations only gpugov's components may write; stripped before translating
OWNED = OWNED_ANNOTATIONS
#: the scheduler kube-scheduler answers to; with `scheduler_name=""` (extender mode) GPU pods
#: keep it
DEFAULT_SCHEDULER = "default-scheduler"
#: longest queue chain walked when looking for a cycle (Queues are few)
MAX_QUEUE_DEPTH = 10_000


#: the annotation recording the schedulerName a pod was written for, when adopted
ORIGINAL_SCHEDULER = "gpugov.io/original-scheduler"
#: the KAI annotations a pod asked with, once the webhook wrote them as container resources
ORIGINAL_REQUEST = "gpugov.io/original-request"
#: DRA mode's record of each container's request and claim (`dra_translate.py`)
DRA_REQUEST = "gpugov.io/dra-request"
#: annotations the webhook itself writes as records: never read as a request
RECORDS = (ORIGINAL_SCHEDULER, ORIGINAL_REQUEST, DRA_REQUEST)
#: queue labels of KAI-Scheduler (and Run:ai before it): they must name the Tenant's queue
QUEUE_LABELS = ("kai.scheduler/queue", "runai/queue")
#: Volcano's pod annotation naming its queue: the same rule
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"


@dataclass(frozen=True, slots=True)
class Options:
    """What the operator configured (chart: webhook.adoptSchedulers, webhook.resourceNames).

    `adopt`: schedulerNames (e.g. kai-scheduler, volcano, hami-scheduler) whose GPU pods the
    webhook hands to gpugov, recording the original in `gpugov.io/original-scheduler`; off
    (empty) by default, so a pod meant for another scheduler is refused with the reason
    rather than taken silently. `names`: HAMi's renamed resources; the webhook rewrites them
    (and Volcano's) to gpugov's names so the device plugin allocates the devices and the
    scheduler reads one spelling."""

    adopt: tuple[str, ...] = ()
    names: ResourceNames = DEFAULT_NAMES

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Options:
        """From GPUGOV_ADOPT_SCHEDULERS (comma list) and GPUGOV_RESOURCE_NAMES (JSON object
        with gpu, gpumem, gpumemPercentage, gpucores, priority), as the chart sets them."""
        env = os.environ if env is None else env
        adopt = tuple(a.strip() for a in env.get("GPUGOV_ADOPT_SCHEDULERS", "").split(",")
                      if a.strip())
        names = DEFAULT_NAMES
        text = env.get("GPUGOV_RESOURCE_NAMES", "").strip()
        if text:
            raw = json.loads(text)
            keys = {"gpu": "gpu", "gpumem": "gpumem", "gpumemPercentage": "gpumem_percentage",
                    "gpucores": "gpucores", "priority": "priority"}
            unknown = sorted(set(raw) - set(keys))
            if unknown:
                raise ValueError(f"GPUGOV_RESOURCE_NAMES: unknown keys {unknown}; allowed: "
                                 f"{', '.join(keys)}")
            names = ResourceNames(**{keys[k]: str(v) for k, v in raw.items() if v})
        return cls(adopt, names)


DEFAULT_OPTIONS = Options()


class ReviewError(ValueError):
    """The body is not an AdmissionReview v1 request (answered with HTTP 400)."""


def parse_review(body: bytes) -> dict[str, Any]:
    """The `request` of an AdmissionReview v1; ReviewError names what is wrong."""
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReviewError(f"body is not JSON: {exc}") from None
    except RecursionError:
        raise ReviewError("body is not JSON gpugov reads: nested too deeply") from None
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
        reason = {422: "Invalid", 403: "Forbidden", 400: "BadRequest"}.get(code, "InternalError")
        resp["status"] = {"code": code, "reason": reason, "message": message}
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


def _limits(where: str, c: Mapping[str, Any], names: ResourceNames = DEFAULT_NAMES
            ) -> dict[str, Any]:
    """requests overlaid by limits; GPU quantities in plain numbers (`20k` -> 20000).
    RequestError for a quantity out of any real range (`1e400`), checked before arithmetic."""
    res = c.get("resources") or {}
    merged = dict(res.get("requests") or {})
    merged.update(res.get("limits") or {})
    for k, v in merged.items():
        try:
            parse_quantity(v)
        except ValueError as exc:
            if "out of range" in str(exc) or "longer than" in str(exc):
                raise RequestError(f"{where}: {k}", str(exc),
                                   f"ask for a real amount, e.g. {k}: 1") from None
    gpu = names.table()
    return {k: plain(v) if k.startswith("nvidia.com/") or k in gpu else v
            for k, v in merged.items()}


def pod_request(pod: Mapping[str, Any], names: ResourceNames = DEFAULT_NAMES
                ) -> GpuRequest | None:
    """The pod's one GPU request (None = no GPU); RequestError when impossible/ambiguous.

    The container with GPU resources (any spelling `names` knows) carries it; with none,
    annotations alone may (KAI's `gpu-fraction`/`gpu-memory`, given to the first container
    or the one `gpu-fraction-container-name` names, init containers included). Limits win
    over requests for the same resource. Several GPU containers (init containers included)
    that ask the same per-device shape are one request for what they hold at once
    (`webhook.multi_container`); different shapes are refused naming the containers.
    """
    meta = pod.get("metadata") or {}
    annots = {k: v for k, v in (meta.get("annotations") or {}).items()
              if k not in OWNED and k not in RECORDS}  # records, never a request
    sel = (pod.get("spec") or {}).get("nodeSelector") or {}
    limits = [(where, _limits(where, c, names)) for where, c in _containers(pod)]
    kinds = [kind for _, kind, _ in pod_containers(pod)]  # aligned with _containers
    gpu = [(w, lim, kind) for (w, lim), kind in zip(limits, kinds, strict=False)
           if canonical_limits(lim, names)[0]]
    if len(gpu) > 1:
        return _several(gpu, annots, sel, names)
    if KAI_CONTAINER in annots:
        wanted = str(annots[KAI_CONTAINER])
        found = [c.get("name") for _, c in _containers(pod)]
        if wanted not in found:
            raise RequestError(KAI_CONTAINER, f"names {wanted[:64]!r}, which is no container "
                               "of the pod", f"name one of {', '.join(map(str, found))}")
        if KAI_FRACTION not in annots and KAI_MEMORY not in annots:
            raise RequestError(KAI_CONTAINER, "gives no size",
                               f"add {KAI_FRACTION} or {KAI_MEMORY}, or drop it")
    return translate(gpu[0][1] if gpu else {}, annots, sel, names)


def _several(gpu: list[tuple[str, dict[str, Any], Kind]], annots: Mapping[str, Any],
             sel: Mapping[str, Any], names: ResourceNames) -> GpuRequest:
    """Several GPU containers: each translated on its own, then combined (or refused)."""
    asks = []
    for where, lim, kind in gpu[:MAX_GPU_CONTAINERS + 1]:
        try:
            req = translate(lim, annots, sel, names)
        except RequestError as exc:
            raise RequestError(f"{where}: {exc.spelling}", exc.problem, exc.instead) from None
        if req is not None:  # `nvidia.com/gpu: 0`: asks for none
            asks.append(Ask(where, kind, req))
    if len(asks) == 1:
        return asks[0].request
    return combine(asks)


def kai_patch(pod: Mapping[str, Any], gpu: GpuRequest) -> list[dict[str, Any]]:
    """JSON patch writing a KAI annotation request (`gpu-fraction`, `gpu-memory`,
    `gpu-fraction-num-devices`) as resources of the container KAI gives it (the one
    `gpu-fraction-container-name` names, init containers included, else the first), so the
    kubelet asks gpugov's device plugin for that container's devices; the annotations move to
    `gpugov.io/original-request` (JSON). The same GpuRequest reads back from the result."""
    annots = _strings(pod.get("metadata") or {}, "annotations")
    kai = {k: str(annots[k]) for k in KAI_ANNOTATIONS if k in annots}
    if not (KAI_FRACTION in kai or KAI_MEMORY in kai):
        return []
    spec = pod.get("spec") or {}
    wanted = kai.get(KAI_CONTAINER)
    where = ("containers", 0)
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            if wanted is not None and isinstance(c, Mapping) and c.get("name") == wanted:
                where = (key, i)
    limits: dict[str, str] = {"nvidia.com/gpu": str(gpu.count)}
    if gpu.memory_mib is not None:
        limits["nvidia.com/gpumem"] = str(gpu.memory_mib)
    elif gpu.memory_percent is not None:
        limits["nvidia.com/gpumem-percentage"] = str(int(gpu.memory_percent))
    container = (spec.get(where[0]) or [{}])[where[1]]
    base = f"/spec/{where[0]}/{where[1]}/resources"
    res = container.get("resources") if isinstance(container, Mapping) else None
    patch: list[dict[str, Any]] = []
    if not isinstance(res, Mapping):
        patch.append({"op": "add", "path": base, "value": {"limits": limits}})
    elif not isinstance(res.get("limits"), Mapping):
        patch.append({"op": "add", "path": base + "/limits", "value": limits})
    else:
        patch += [{"op": "add", "path": f"{base}/limits/{_escape(k)}", "value": v}
                  for k, v in limits.items()]
    patch += [{"op": "remove", "path": f"/metadata/annotations/{_escape(k)}"} for k in kai]
    patch.append({"op": "add", "path": f"/metadata/annotations/{_escape(ORIGINAL_REQUEST)}",
                  "value": json.dumps(kai, sort_keys=True, separators=(",", ":"))})
    return patch


def rename_patch(pod: Mapping[str, Any], names: ResourceNames = DEFAULT_NAMES
                 ) -> list[dict[str, Any]]:
    """JSON patch giving renamed and Volcano resources gpugov's names (`nvidia.com/gpu`...),
    so the kubelet asks gpugov's device plugin for the devices (a name no plugin serves is
    dropped by the kubelet and the container would get no GPU) and every reader sees one
    spelling."""
    table = names.table()
    patch: list[dict[str, Any]] = []
    spec = pod.get("spec") or {}
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            res = c.get("resources") if isinstance(c, Mapping) else None
            if not isinstance(res, Mapping):
                continue
            for part in ("limits", "requests"):
                values = res.get(part)
                if not isinstance(values, Mapping):
                    continue
                for name, value in values.items():
                    canon = table.get(name)
                    if canon is None or canon == name:
                        continue
                    base = f"/spec/{key}/{i}/resources/{part}/"
                    patch.append({"op": "remove", "path": base + _escape(name)})
                    patch.append({"op": "add", "path": base + _escape(canon), "value": value})
    return patch


def _user(req: Mapping[str, Any]) -> tuple[str, list[str]]:
    info = req.get("userInfo")
    if not isinstance(info, Mapping):
        return "", []
    user = info.get("username")
    groups = info.get("groups")
    return (user if isinstance(user, str) else "",
            [g for g in groups if isinstance(g, str)] if isinstance(groups, list) else [])


def is_gpugov_request(req: Mapping[str, Any],
                      system_namespace: str = identities.SYSTEM_NAMESPACE) -> bool:
    """The review's author is one of gpugov's components or a cluster admin."""
    user, groups = _user(req)
    return identities.is_gpugov(user, groups, system_namespace)


def _strings(meta: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = meta.get(key)
    return value if isinstance(value, Mapping) else {}


def owned_changes(req: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, "annotation" | "label") of every owned key an UPDATE adds, changes or removes."""
    new = (req.get("object") or {}).get("metadata") or {}
    old = (req.get("oldObject") or {}).get("metadata") or {}
    out = []
    for field, keys, what in (("annotations", OWNED_ANNOTATIONS, "annotation"),
                              ("labels", OWNED_LABELS, "label")):
        a, b = _strings(new, field), _strings(old, field)
        out += [(k, what) for k in keys if (k in a) != (k in b) or a.get(k) != b.get(k)]
    return out


def _strip_owned(meta: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """JSON patch removing every owned annotation/label a pod carries, and their names."""
    patch, removed = [], []
    for field, keys in (("annotations", OWNED_ANNOTATIONS), ("labels", OWNED_LABELS)):
        present = _strings(meta, field)
        for k in keys:
            if k in present:
                patch.append({"op": "remove", "path": f"/metadata/{field}/{_escape(k)}"})
                removed.append(k)
    return patch, removed


def _placement_refusal(pod: Mapping[str, Any]) -> str:
    """Why gpugov's scheduler could not place this GPU pod's affinity as written ("" = it
    can): pod (anti-)affinity and topology spread are refused here, naming the field, rather
    than admitted and left Pending — never silently ignored. The scheduler's own check."""
    from gpugov.k8s.scheduler.translate import affinity_refusal  # (it imports this module)

    spec = pod.get("spec")
    try:
        return affinity_refusal(spec) if isinstance(spec, dict) else ""
    except (TypeError, ValueError, AttributeError) as exc:  # malformed: the scheduler says so
        return f"spec.affinity: {exc}"


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


def _ignore_warning(meta: Mapping[str, Any]) -> list[str]:
    if ann.IGNORE_LABEL in _strings(meta, "labels"):
        return [f"the pod label {ann.IGNORE_LABEL} has no effect: exemption from gpugov is a "
                f"namespace label an admin sets ({ann.IGNORE_LABEL}=true on the namespace)"]
    return []


def _node_name_refusal(pod: Mapping[str, Any], req: Mapping[str, Any],
                       system_namespace: str) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    if node and not is_gpugov_request(req, system_namespace):
        return (f"gpugov: spec.nodeName is set ({str(node)[:64]!r}) on a pod that asks for a GPU; "
                "a GPU pod is placed by the gpugov scheduler, which accounts it in its queue: "
                "remove spec.nodeName (use a nodeSelector or node affinity to pick nodes) and "
                "let the gpugov scheduler place it")
    return None


def _scheduler_patch(pod: Mapping[str, Any], res: Resolution, scheduler_name: str,
                     adopt: tuple[str, ...] = ()) -> tuple[list[dict[str, Any]], str | None]:
    """The schedulerName patch, or a refusal when the pod names a scheduler its Tenant does
    not allow (another scheduler would escape gpugov's queues and quotas). A scheduler on
    the operator's adoption list (`Options.adopt`) is replaced by gpugov's, the original
    recorded in `gpugov.io/original-scheduler`."""
    current = (pod.get("spec") or {}).get("schedulerName")
    unset = current in (None, "", DEFAULT_SCHEDULER)
    if scheduler_name and unset:
        return [{"op": "add", "path": "/spec/schedulerName", "value": scheduler_name}], None
    if scheduler_name and current in adopt and current not in res.schedulers:
        return [{"op": "add", "path": "/spec/schedulerName", "value": scheduler_name},
                {"op": "add", "path": f"/metadata/annotations/{_escape(ORIGINAL_SCHEDULER)}",
                 "value": str(current)}], None
    ours = scheduler_name or DEFAULT_SCHEDULER
    name = current or DEFAULT_SCHEDULER
    if name == ours or name in res.schedulers:
        return [], None
    allowed = ", ".join([ours, *res.schedulers])
    return [], (f"gpugov: schedulerName {str(name)[:64]!r} is not allowed for GPU pods of Tenant "
                f"{res.tenant!r} (allowed: {allowed}); instead, leave schedulerName unset "
                f"(gpugov places the pod), have an admin list the scheduler in the Tenant's "
                "spec.schedulers, or (migrating from it) add it to the chart's "
                "webhook.adoptSchedulers so gpugov takes such pods over")


def _queue_refusal(pod: Mapping[str, Any], res: Resolution) -> str | None:
    """KAI's queue label must name the queue the pod's Tenant gives it: a tenant never picks
    another tenant's queue by label (docs/migration.md)."""
    meta = pod.get("metadata") or {}
    labels = {**_strings(meta, "labels"), **{k: v for k, v in _strings(meta, "annotations")
                                             .items() if k == VOLCANO_QUEUE}}
    for key in (*QUEUE_LABELS, VOLCANO_QUEUE):
        if key in labels and str(labels[key]) != res.queue:
            return (f"gpugov: {key}={str(labels[key])[:64]!r}: the pods of Tenant "
                    f"{res.tenant!r} run in its queue {res.queue!r}; instead, set {key}: "
                    f"{res.queue} or drop the label (an admin moves a namespace to another "
                    "queue through its Tenant)")
    return None


#: parsed guardrails per Resolution, by identity (the webhook's tenancy memo hands out one
#: Resolution per namespace until its watch copy changes, so a Tenant edit makes a new one):
#: a review does not parse its Tenant's guardrails again. Both are frozen.
_GUARDS: dict[int, tuple[Resolution, Any]] = {}


def _guards(res: Resolution) -> Any:
    hit = _GUARDS.get(id(res))
    if hit is not None and hit[0] is res:
        return hit[1]
    guards = guardrails_of(res.tenant, res.trust, res.guardrails)  # GuardrailError: not kept
    if len(_GUARDS) >= 1024:
        _GUARDS.clear()
    _GUARDS[id(res)] = (res, guards)
    return guards


def mutate(req: Mapping[str, Any], resolve_tenancy, scheduler_name: str = ann.SCHEDULER_NAME,
           system_namespace: str = identities.SYSTEM_NAMESPACE,
           options: Options = DEFAULT_OPTIONS) -> dict[str, Any]:
    """Answer a mutating review. `resolve_tenancy(namespace) -> Resolution` may raise
    TenancyError (the pod is refused with its message)."""
    uid = req["uid"]
    pod = req.get("object")
    if req.get("kind", {}).get("kind") != "Pod" or not isinstance(pod, Mapping):
        return response(uid)  # not ours: never block what we do not understand
    if req.get("operation", "CREATE") != "CREATE":
        return response(uid)  # UPDATEs are checked by `validate` (ownership)
    meta = pod.get("metadata") or {}
    annots = _strings(meta, "annotations")
    spoofed = [k for k in FORBIDDEN_AT_CREATE if k in annots]
    if spoofed:
        return response(uid, False, create_message(spoofed[0]), code=403)
    from gpugov.k8s.webhook import dra_translate  # a DRA-mode Tenant: claims (docs/dra.md)

    dra = dra_translate.mutate(req, pod, resolve_tenancy, scheduler_name, system_namespace,
                               options)
    if dra is not None:
        return dra
    try:
        gpu = pod_request(pod, options.names)
    except RequestError as exc:
        return response(uid, False, f"gpugov: {exc}")
    if gpu is None:
        patch, removed = _strip_owned(meta)
        warnings = ([f"removed {', '.join(removed)}: only gpugov writes them, and only on "
                     "pods that ask for a GPU"] if removed else None)
        return response(uid, patch=patch, warnings=warnings)
    refusal = _node_name_refusal(pod, req, system_namespace)
    if refusal:
        return response(uid, False, refusal, code=403)
    placement = _placement_refusal(pod)
    if placement:
        return response(uid, False, f"gpugov: {placement}")
    try:  # what the device plugin will pass as NVIDIA_DRIVER_CAPABILITIES (its own module)
        from gpugov.k8s.driver_capabilities import CapabilityError, of_pod
        from gpugov.model.resource_spellings import ALIASES

        of_pod(pod, (*options.names.renamed(), *ALIASES))
    except CapabilityError as exc:
        return response(uid, False, f"gpugov: {exc}")
    namespace = req.get("namespace") or meta.get("namespace") or "default"
    try:
        res = resolve_tenancy(namespace)
        _check_tier(gpu, res)
    except (TenancyError, RequestError) as exc:
        return response(uid, False, f"gpugov: {exc}")
    try:
        guards = _guards(res)
    except GuardrailError as exc:
        return response(uid, False, f"gpugov: {exc}")
    found = refusals(pod) if guards.pod_checks else []
    if found:
        return response(uid, False, f"gpugov: GPU pod of Tenant {res.tenant!r} refused: "
                        + "; ".join(found[:5]), code=403)
    place, refusal = placement_patch(pod, guards)
    if refusal:
        return response(uid, False, f"gpugov: {refusal}", code=403)
    sched_patch, refusal = _scheduler_patch(pod, res, scheduler_name, options.adopt)
    refusal = refusal or _queue_refusal(pod, res)
    if refusal:
        return response(uid, False, refusal, code=403)
    patch: list[dict[str, Any]] = rename_patch(pod, options.names) + place
    patch += _add_keys(meta, "annotations", {
        ann.REQUEST: ann.encode_request(gpu), ann.TENANT: res.tenant, ann.QUEUE: res.queue,
        ann.TRUST_TIER: res.trust.value})
    patch += kai_patch(pod, gpu)
    patch += _add_keys(meta, "labels", {ann.MANAGED_LABEL: "true"})
    patch += sched_patch
    warnings = _ignore_warning(meta) + annotation_warnings(annots)
    return response(uid, patch=patch, warnings=warnings or None)


def _add_keys(meta: Mapping[str, Any], field: str, values: dict[str, str]
              ) -> list[dict[str, Any]]:
    """JSON patch setting `values` in metadata.`field`: one operation when the pod has none
    (each operation costs the apiserver a walk of the pod), else one per key."""
    if not _strings(meta, field):
        return [{"op": "add", "path": f"/metadata/{field}", "value": values}]
    return [{"op": "add", "path": f"/metadata/{field}/{_escape(k)}", "value": v}
            for k, v in values.items()]


def validate(req: Mapping[str, Any], scheduler_name: str = ann.SCHEDULER_NAME,
             system_namespace: str = identities.SYSTEM_NAMESPACE) -> dict[str, Any]:
    """Answer a validating review of a pod.

    UPDATE: only gpugov's identities may add, change or remove an owned key. CREATE: after
    every mutating webhook ran, a GPU pod must still carry the request annotation matching its
    resources (another mutator may have changed them), no allocation record and no preset
    node."""
    uid = req["uid"]
    pod = req.get("object")
    if req.get("kind", {}).get("kind") != "Pod" or not isinstance(pod, Mapping):
        return response(uid)
    if req.get("operation") == "UPDATE":
        changes = owned_changes(req)
        if changes and not is_gpugov_request(req, system_namespace):
            return response(uid, False, owner_message(*changes[0]), code=403)
        return response(uid)
    if req.get("operation", "CREATE") != "CREATE":
        return response(uid)
    annots = _strings(pod.get("metadata") or {}, "annotations")
    spoofed = [k for k in FORBIDDEN_AT_CREATE if k in annots]
    if spoofed:
        return response(uid, False, create_message(spoofed[0]), code=403)
    try:
        gpu = pod_request(pod)
    except RequestError as exc:
        return response(uid, False, f"gpugov: {exc}")
    if gpu is None:
        return response(uid)
    refusal = _node_name_refusal(pod, req, system_namespace)
    if refusal:
        return response(uid, False, refusal, code=403)
    if ann.REQUEST not in annots:
        return response(uid, False, "gpugov: the pod asks for a GPU but gpugov's mutating "
                        "webhook did not annotate it")
    try:
        written = ann.decode_request(annots[ann.REQUEST])
    except ann.AnnotationError as exc:
        return response(uid, False, f"gpugov: {exc}")
    if ann.encode_request(written) != ann.encode_request(gpu):
        return response(uid, False, f"gpugov: {ann.REQUEST} no longer matches the pod's GPU "
                        "resources (changed after gpugov's webhook ran); recreate the pod")
    return response(uid)


def queue_cycle(name: str, parent: str | None, queues: Mapping[str, str | None]
                ) -> list[str] | None:
    """The cycle through Queue `name` if its parent is `parent` (the other Queues as in
    `queues`), e.g. ['a', 'b', 'a']; None when the chain ends at a root or a missing queue."""
    chain = [name]
    seen = {name}
    current = parent
    while current is not None and len(chain) <= MAX_QUEUE_DEPTH:
        chain.append(current)
        if current == name:
            return chain
        if current in seen or current not in queues:
            return None  # a cycle above us (not through this queue) or a missing parent
        seen.add(current)
        current = queues[current]
    return None


def review_tenancy(req: Mapping[str, Any], queues: Mapping[str, str | None],
                   tenants: list[Mapping[str, Any]] | None = None,
                   protected: Mapping[str, Mapping[str, str]] | None = None
                   ) -> dict[str, Any]:
    """Answer a review of a Tenant or Queue. A Queue whose parent chain comes back to itself
    is refused (a cycle has no root to share from). A Tenant is refused when it lists a
    namespace another Tenant lists, lists or selects a system namespace (`protected`: name ->
    labels), or its guardrails are malformed or below its trust tier's floor
    (`tenants.checks`). Otherwise allowed, with warnings (kubectl prints them) when it points
    at a queue that does not exist or a Tenant's queue is not a leaf: missing objects are not
    refused, manifests are applied in any order."""
    uid = req["uid"]
    obj = req.get("object")
    kind = req.get("kind", {}).get("kind")
    if not isinstance(obj, Mapping):
        return response(uid)
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name", "?")
    warnings: list[str] = []
    if kind == "Tenant" and req.get("operation") in ("CREATE", "UPDATE", None):
        problems = tenant_problems(obj, list(tenants or []), protected or {})
        if problems:
            return response(uid, False, "gpugov: " + "; ".join(problems[:5]))
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
        if not isinstance(parent, str | None) or not isinstance(name, str):
            return response(uid)  # the CRD schema refuses it
        cycle = queue_cycle(name, parent, queues)
        if cycle:
            return response(uid, False, f"Queue {name}: spec.parent {parent!r} makes a cycle "
                            f"({' -> '.join(cycle[:20])}{' -> …' if len(cycle) > 20 else ''}); "
                            "a queue tree needs a root: point one of them at no parent or at "
                            "another queue")
        if parent is not None and parent not in queues:
            warnings.append(f"Queue {name}: parent {parent!r} does not exist")
    return response(uid, warnings=warnings or None)
