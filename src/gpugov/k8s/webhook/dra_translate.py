"""DRA mode: the webhook turns a pod's GPU resources into ResourceClaims (docs/dra.md).

An admin puts a Tenant in DRA mode (`spec.dra`, cluster-scoped: tenants cannot write it):
its namespaces' GPU pods — any spelling the one translator knows (HAMi, NVIDIA, KAI, Volcano,
gpugov) — are admitted as DRA pods, so nobody rewrites a pod to move to DRA:

- each container's request (init containers too) is translated on its own
  (`container_requests`, through `resource_spellings.translate`); a pod with several GPU
  containers is no longer refused: each GPU container gets its own claim;
- each request becomes a `Shape` (`k8s/dra/templates.py`), written as a ResourceClaimTemplate
  named after its content in the pod's namespace; the pod's `spec.resourceClaims` gets one
  entry per GPU container (`gpu-<container>`) and the container `resources.claims` names it;
  the GPU resources, request annotations (KAI's, HAMi's, gpugov's) and the GPU-product node
  selector leave the pod, recorded in `gpugov.io/dra-request` for `explain`;
- the same refusals as on the device-plugin path (translation, trust tier, guardrails, queue
  labels, spec.nodeName), with the same messages.

`mutate` is pure (the review thread); it returns the answer with the templates it needs under
`TEMPLATES`, and the server's `ensure_templates` creates the missing ones as the webhook's own
identity before answering (never on dryRun), or refuses the pod when a template under
gpugov's name holds something else (a tenant's forgery) or cannot be written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpugov.k8s import annotations as ann
from gpugov.k8s.dra import templates as tpl
from gpugov.k8s.pod_containers import MAX_GPU_CONTAINERS
from gpugov.k8s.quantity import plain
from gpugov.k8s.resources import RequestError, translate
from gpugov.k8s.webhook import admission as adm
from gpugov.k8s.webhook.tenancy import Resolution, TenancyError
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.resource_spellings import (
    ANNOTATION_ALIASES,
    HAMI_ANNOTATIONS,
    KAI_ANNOTATIONS,
    KAI_CONTAINER,
    OUR_ANNOTATIONS,
    PRODUCT_LABEL,
    STRATEGY_LABEL,
    is_zero,
)

log = logging.getLogger("gpugov.webhook.dra")

#: the record of what each container asked for and the claim it got (read by `explain`)
DRA_REQUEST = adm.DRA_REQUEST
#: the answer's key holding the templates the server must ensure (popped before answering)
TEMPLATES = "gpugovDraTemplates"
#: who allocates a DRA-mode Tenant's claims (`spec.dra.allocator`)
ALLOCATORS = ("kube-scheduler", "gpugov")
#: every annotation the translation reads as a request: moved into the record
REQUEST_ANNOTATIONS = (*KAI_ANNOTATIONS, *HAMI_ANNOTATIONS, *OUR_ANNOTATIONS,
                       *ANNOTATION_ALIASES)


@dataclass(frozen=True, slots=True)
class Need:
    """One container's GPU request: `key` initContainers|containers, `index` in that list."""

    key: str
    index: int
    name: str
    request: GpuRequest
    asked: dict[str, Any]


def _where(key: str, c: Mapping[str, Any]) -> str:
    return f"{key[:-1]} {c.get('name', '?')!r}"


def _gpu_keys(c: Mapping[str, Any], table: Mapping[str, str]) -> dict[str, Any]:
    """A container's GPU resources as asked (requests overlaid by limits; whole numbers
    plain, as the API server stores `20000` as `20k`); {} when all are zero."""
    res = c.get("resources")
    out: dict[str, Any] = {}
    for part in ("requests", "limits"):
        values = res.get(part) if isinstance(res, Mapping) else None
        if isinstance(values, Mapping):
            out.update({k: plain(v) for k, v in values.items()  # `20k` -> 20000 (MiB)
                        if str(k).startswith("nvidia.com/") or k in table})
    return out if any(not is_zero(v) for v in out.values()) else {}


def container_requests(pod: Mapping[str, Any], names=adm.DEFAULT_NAMES) -> list[Need]:
    """Each GPU container's own request (init containers first). One GPU container, or a
    request in annotations only (KAI), is translated exactly as `pod_request` does; with
    several, each container's resources are translated alone (annotations apply to each).
    RequestError names the container and the field."""
    spec = pod.get("spec") or {}
    table = names.table()
    found: list[tuple[str, int, Mapping[str, Any], dict[str, Any]]] = []
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            if isinstance(c, Mapping):
                asked = _gpu_keys(c, table)
                if asked:
                    found.append((key, i, c, asked))
    meta = pod.get("metadata") or {}
    annots = {k: v for k, v in adm._strings(meta, "annotations").items()
              if k not in adm.OWNED and k not in adm.RECORDS}
    if len(found) <= 1:
        req = adm.pod_request(pod, names)
        if req is None:
            return []
        if found:
            key, i, c, asked = found[0]
        else:  # KAI annotations: the container they name, else the first
            key, i, c = _kai_target(spec, annots.get(KAI_CONTAINER))
            asked = {}
        asked = {**asked, **{k: annots[k] for k in REQUEST_ANNOTATIONS if k in annots}}
        return [Need(key, i, str(c.get("name", "")), req, asked)]
    if len(found) > MAX_GPU_CONTAINERS:
        raise RequestError(", ".join(_where(k, c) for k, _, c, _ in found[:4]) + ", …",
                           f"{len(found)} containers ask for GPUs",
                           f"list at most {MAX_GPU_CONTAINERS} GPU containers in one pod")
    sel = spec.get("nodeSelector") or {}
    out = []
    for key, i, c, asked in found:
        try:
            lim = adm._limits(_where(key, c), c, names)
            req = translate(lim, annots, sel, names)
        except RequestError as exc:
            raise RequestError(f"{_where(key, c)}: {exc.spelling}", exc.problem,
                               exc.instead) from None
        if req is not None:
            out.append(Need(key, i, str(c.get("name", "")), req, asked))
    return out


def _kai_target(spec: Mapping[str, Any], wanted: Any) -> tuple[str, int, Mapping[str, Any]]:
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            if wanted is not None and isinstance(c, Mapping) and c.get("name") == wanted:
                return key, i, c
    return "containers", 0, (spec.get("containers") or [{}])[0]


def dra_setting(res: Resolution) -> tuple[str, tuple[str, ...]] | None:
    """(allocator, fleet models) of a DRA-mode Tenant; None = the device plugin's path.
    TenancyError names a malformed field (the CRD schema refuses them first)."""
    dra = res.dra
    if dra is None:
        return None
    allocator = dra.get("allocator", "kube-scheduler")
    if allocator not in ALLOCATORS:
        raise TenancyError(f"Tenant {res.tenant!r}: spec.dra.allocator is "
                           f"{str(allocator)[:64]!r}; allowed: {', '.join(ALLOCATORS)}")
    models = dra.get("models") or []
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise TenancyError(f"Tenant {res.tenant!r}: spec.dra.models must be a list of GPU "
                           "model names")
    from gpugov.model.catalog import CATALOG

    unknown = [m for m in models if m not in CATALOG]
    if unknown:
        raise TenancyError(f"Tenant {res.tenant!r}: spec.dra.models names unknown models "
                           f"{unknown[:4]}; known: {', '.join(CATALOG)}")
    return str(allocator), tuple(models)


def _asks(pod: Mapping[str, Any], names) -> bool:
    """Cheap: does any container name a GPU resource, or the pod a KAI size?"""
    spec = pod.get("spec") or {}
    table = names.table()
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            res = c.get("resources") if isinstance(c, Mapping) else None
            for part in ("limits", "requests"):
                values = res.get(part) if isinstance(res, Mapping) else None
                if isinstance(values, Mapping) and any(
                        (str(k).startswith("nvidia.com/") or k in table) and not is_zero(v)
                        for k, v in values.items()):
                    return True
    annots = adm._strings(pod.get("metadata") or {}, "annotations")
    return any(k in annots for k in KAI_ANNOTATIONS)


def mutate(req: Mapping[str, Any], pod: Mapping[str, Any],
           resolve_tenancy: Callable[[str], Resolution], scheduler_name: str,
           system_namespace: str, options: adm.Options) -> dict[str, Any] | None:
    """The answer for a GPU pod of a DRA-mode Tenant; None for every other pod (the
    device-plugin path answers, with today's messages)."""
    if not _asks(pod, options.names):
        return None
    meta = pod.get("metadata") or {}
    namespace = req.get("namespace") or meta.get("namespace") or "default"
    try:
        res = resolve_tenancy(namespace)
    except TenancyError:
        return None  # the device-plugin path refuses with the same reason
    uid = req["uid"]
    try:
        setting = dra_setting(res)
    except TenancyError as exc:  # never fall back to the other path on a malformed setting
        return adm.response(uid, False, f"gpugov: {exc}")
    if setting is None:
        return None
    allocator, fleet = setting
    try:
        needs = container_requests(pod, options.names)
    except RequestError as exc:
        return adm.response(uid, False, f"gpugov: {exc}")
    if not needs:
        return None
    refusal = adm._node_name_refusal(pod, req, system_namespace)
    if refusal:
        return adm.response(uid, False, refusal, code=403)
    try:
        from gpugov.k8s.driver_capabilities import CapabilityError, of_pod
        from gpugov.model.resource_spellings import ALIASES

        of_pod(pod, (*options.names.renamed(), *ALIASES))
    except CapabilityError as exc:
        return adm.response(uid, False, f"gpugov: {exc}")
    shapes = []
    try:
        for need in needs:
            adm._check_tier(need.request, res)
            try:
                shapes.append(tpl.shape_of(need.request, fleet))
            except tpl.ShapeError as exc:
                spelled = ", ".join(need.request.spellings) or "the GPU request"
                raise RequestError(f"{need.key[:-1]} {need.name!r}: {spelled}", exc.problem,
                                   exc.instead) from None
    except RequestError as exc:
        return adm.response(uid, False, f"gpugov: {exc}")
    if allocator == "gpugov":  # gpugov's scheduler places it: its affinity check too
        refusal = _gpugov_refusal(needs, shapes) or adm._placement_refusal(pod)
        if refusal:
            return adm.response(uid, False, f"gpugov: {refusal}")
    try:
        guards = adm.guardrails_of(res.tenant, res.trust, res.guardrails)
    except adm.GuardrailError as exc:
        return adm.response(uid, False, f"gpugov: {exc}")
    found = adm.refusals(pod) if guards.pod_checks else []
    if found:
        return adm.response(uid, False, f"gpugov: GPU pod of Tenant {res.tenant!r} refused: "
                            + "; ".join(found[:5]), code=403)
    place, refusal = adm.placement_patch(pod, guards)
    if refusal:
        return adm.response(uid, False, f"gpugov: {refusal}", code=403)
    sched, refusal = _scheduler_patch(pod, res, allocator, scheduler_name, options.adopt)
    refusal = refusal or adm._queue_refusal(pod, res)
    if refusal:
        return adm.response(uid, False, refusal, code=403)
    try:
        patch, made = claims_patch(pod, needs, shapes)
    except RequestError as exc:
        return adm.response(uid, False, f"gpugov: {exc}")
    patch = place + patch + _records(pod, res, needs, made) + sched
    out = adm.response(uid, patch=patch, warnings=adm.annotation_warnings(
        adm._strings(meta, "annotations")) or None)
    out[TEMPLATES] = [tpl.template(s, namespace) for s in dict.fromkeys(shapes)]
    return out


def _scheduler_patch(pod: Mapping[str, Any], res: Resolution, allocator: str,
                     scheduler_name: str, adopt: tuple[str, ...]
                     ) -> tuple[list[dict[str, Any]], str | None]:
    """kube-scheduler allocates: the pod stays with (or is handed to) `default-scheduler`;
    gpugov's name and the adoption list are taken over, recorded as on the other path.
    gpugov allocates: the device-plugin path's rule."""
    if allocator == "gpugov":
        return adm._scheduler_patch(pod, res, scheduler_name, adopt)
    current = (pod.get("spec") or {}).get("schedulerName")
    if current in (None, "", adm.DEFAULT_SCHEDULER) or current in res.schedulers:
        return [], None
    if current == scheduler_name or current in adopt:
        return [{"op": "add", "path": "/spec/schedulerName", "value": adm.DEFAULT_SCHEDULER},
                {"op": "add", "path": f"/metadata/annotations/"
                 f"{adm._escape(adm.ORIGINAL_SCHEDULER)}", "value": str(current)}], None
    return [], (f"gpugov: schedulerName {str(current)[:64]!r} is not allowed for GPU pods of "
                f"Tenant {res.tenant!r}, whose claims kube-scheduler allocates (spec.dra); "
                "instead, leave schedulerName unset or have an admin list the scheduler in "
                "the Tenant's spec.schedulers")


def _gpugov_refusal(needs: list[Need], shapes: list[tpl.Shape]) -> str:
    """What gpugov's own claim allocation does not take (`k8s/dra/allocate.py` refuses
    `firstAvailable` and `constraints`), said at admission rather than left pending."""
    for need, shape in zip(needs, shapes, strict=True):
        where = f"{need.key[:-1]} {need.name!r}: {', '.join(need.request.spellings)}"
        if shape.memory_percent is not None:
            return (f"{where}: a share of the card is a prioritized list (firstAvailable), "
                    "which gpugov's scheduler does not allocate yet; instead, ask for memory "
                    "in MiB (nvidia.com/gpumem, gpu-memory), or have an admin set the "
                    "Tenant's spec.dra.allocator: kube-scheduler")
        if shape.same_nvlink or (shape.kind == "slice" and shape.count > 1):
            how = "in one NVLink domain" if shape.same_nvlink else "each with a slice"
            return (f"{where}: several devices {how} need claim constraints, which "
                    "gpugov's scheduler does not allocate yet; "
                    "instead, ask for one device per container, or have an admin set the "
                    "Tenant's spec.dra.allocator: kube-scheduler")
    return ""


def claim_name(container: str) -> str:
    """The pod's claim entry for a container: `gpu-<container>`, a DNS label (a hash keeps
    a long name unique within 63 characters)."""
    import hashlib

    name = f"gpu-{container}"
    if len(name) <= 63:
        return name
    return f"{name[:50]}-{hashlib.sha256(container.encode()).hexdigest()[:8]}"


def claims_patch(pod: Mapping[str, Any], needs: list[Need], shapes: list[tpl.Shape]
                 ) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]]]:
    """JSON patch: the GPU resources leave each GPU container, which names its own claim;
    the pod's `spec.resourceClaims` gets one entry per GPU container. Also returns
    container -> (claim entry, template)."""
    spec = pod.get("spec") or {}
    patch: list[dict[str, Any]] = []
    made: dict[str, tuple[str, str]] = {}
    existing = [c.get("name") for c in spec.get("resourceClaims") or [] if isinstance(c, dict)]
    entries = []
    for need, shape in zip(needs, shapes, strict=True):
        c = (spec.get(need.key) or [])[need.index]
        base = f"/spec/{need.key}/{need.index}/resources"
        res = c.get("resources") if isinstance(c, Mapping) else None
        name = claim_name(need.name)
        if name in existing:
            raise RequestError(f"spec.resourceClaims: {name}", "the pod names a claim as "
                               f"gpugov names container {need.name!r}'s claim",
                               "rename the pod's own claim")
        for part in ("limits", "requests"):
            values = res.get(part) if isinstance(res, Mapping) else None
            for k in values if isinstance(values, Mapping) else ():
                if k in need.asked or str(k).startswith("nvidia.com/"):
                    patch.append({"op": "remove", "path": f"{base}/{part}/{adm._escape(k)}"})
        if not isinstance(res, Mapping):
            patch.append({"op": "add", "path": base, "value": {"claims": [{"name": name}]}})
        elif not isinstance(res.get("claims"), list):
            patch.append({"op": "add", "path": f"{base}/claims", "value": [{"name": name}]})
        else:
            patch.append({"op": "add", "path": f"{base}/claims/-", "value": {"name": name}})
        template = tpl.template_name(shape)
        entries.append({"name": name, "resourceClaimTemplateName": template})
        made[need.name] = (name, template)
    if isinstance(spec.get("resourceClaims"), list):
        patch += [{"op": "add", "path": "/spec/resourceClaims/-", "value": e} for e in entries]
    else:
        patch.append({"op": "add", "path": "/spec/resourceClaims", "value": entries})
    sel = spec.get("nodeSelector")
    if isinstance(sel, Mapping) and any(PRODUCT_LABEL in s for n in needs
                                        for s in n.request.spellings):
        patch += [{"op": "remove", "path": f"/spec/nodeSelector/{adm._escape(k)}"}
                  for k in (PRODUCT_LABEL, STRATEGY_LABEL) if k in sel]
    return patch, made


def _records(pod: Mapping[str, Any], res: Resolution, needs: list[Need],
             made: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """The request annotations leave (they are in the claims now); `gpugov.io/dra-request`
    records, per container, what it asked, its request and its claim; the tenancy records
    and the managed label as on the other path."""
    meta = pod.get("metadata") or {}
    annots = adm._strings(meta, "annotations")
    patch: list[dict[str, Any]] = []
    if not annots:
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    patch += [{"op": "remove", "path": f"/metadata/annotations/{adm._escape(k)}"}
              for k in REQUEST_ANNOTATIONS if k in annots]
    patch += [{"op": "remove", "path": f"/metadata/annotations/{adm._escape(k)}"}
              for k in (ann.REQUEST,) if k in annots]
    record = {n.name: {"claim": made[n.name][0], "template": made[n.name][1],
                       "asked": {k: str(v) for k, v in n.asked.items()},
                       "request": json.loads(ann.encode_request(n.request))}
              for n in needs}
    sel = (pod.get("spec") or {}).get("nodeSelector") or {}
    for n in needs:
        if any(PRODUCT_LABEL in s for s in n.request.spellings):
            record[n.name]["asked"].update({k: str(sel[k]) for k in (PRODUCT_LABEL,
                                                                     STRATEGY_LABEL)
                                            if k in sel})
    for key, value in ((DRA_REQUEST, json.dumps(record, sort_keys=True,
                                                separators=(",", ":"))),
                       (ann.TENANT, res.tenant), (ann.QUEUE, res.queue),
                       (ann.TRUST_TIER, res.trust.value)):
        patch.append({"op": "add", "path": f"/metadata/annotations/{adm._escape(key)}",
                      "value": value})
    if not adm._strings(meta, "labels"):
        patch.append({"op": "add", "path": "/metadata/labels", "value": {}})
    patch.append({"op": "add", "path": f"/metadata/labels/{adm._escape(ann.MANAGED_LABEL)}",
                  "value": "true"})
    return patch


def explain_lines(pod: Mapping[str, Any]) -> list[str]:
    """What `gpugov explain` says of a DRA-mode pod: each container's request as it was
    written, and the claim it became (from `gpugov.io/dra-request`, a record; [] if none)."""
    text = adm._strings(pod.get("metadata") or {}, "annotations").get(DRA_REQUEST)
    try:
        record = json.loads(text) if isinstance(text, str) and len(text) < 65536 else None
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return []
    out = ["DRA mode: the webhook turned each GPU container's request into its own claim"]
    for name, r in sorted(record.items())[:64]:
        if isinstance(r, dict):
            asked = ", ".join(f"{k}: {v}" for k, v in sorted((r.get("asked") or {}).items()))
            out.append(f"  container {name!r} asked {asked or '(annotations)'} -> claim "
                       f"{r.get('claim')!r} from ResourceClaimTemplate {r.get('template')!r}")
    return out


# --- the server side: ensure the templates (API writes; never on dryRun) ---

_KUBES: dict[int, Any] = {}
_CLASSES_SEEN: set[str] = set()


def _kube(api: Any) -> Any:
    from gpugov.k8s.scheduler.kube import Kube

    got = _KUBES.get(id(api))
    if got is None or got.api is not api:
        got = _KUBES[id(api)] = Kube(api)
    return got


async def ensure_templates(api: Any, req: Mapping[str, Any], out: Any) -> Any:
    """Create the templates an allowed DRA answer needs (unless the review is a dryRun),
    check the ones that exist hold exactly what gpugov writes, and check their
    DeviceClasses exist. Refuses the pod with the reason otherwise. Pops `TEMPLATES`."""
    if not isinstance(out, dict) or TEMPLATES not in out:
        return out
    wanted = out.pop(TEMPLATES)
    if not out["response"].get("allowed"):
        return out
    uid = out["response"]["uid"]
    if api is None:
        return adm.response(uid, False, "gpugov: the webhook runs without API access and "
                            "cannot write the pod's ResourceClaimTemplates")
    kube = _kube(api)
    dry = bool(req.get("dryRun"))
    try:
        for t in wanted:
            problem = await _ensure(kube, t, dry)
            if problem:
                return adm.response(uid, False, f"gpugov: {problem}", code=403
                                    if "forged" in problem else 422)
    except Exception as exc:  # the API is down or refuses: refuse the pod with it
        log.warning("cannot ensure ResourceClaimTemplates: %r", exc)
        return adm.response(uid, False, f"gpugov: cannot write the pod's "
                            f"ResourceClaimTemplates ({str(exc)[:300]}); retry")
    return out


async def _ensure(kube: Any, t: dict[str, Any], dry: bool) -> str:
    meta = t["metadata"]
    ns, name = meta["namespace"], meta["name"]
    for cls in _classes(t):
        if cls in _CLASSES_SEEN:
            continue
        status, doc = await kube.request("GET", f"/apis/resource.k8s.io/v1/deviceclasses/{cls}")
        if status == 404:
            return (f"DeviceClass {cls} does not exist: gpugov's DRA driver does not serve "
                    f"this request in this cluster ({_why_class(cls)})")
        if status != 200:
            raise RuntimeError(f"GET DeviceClass {cls}: HTTP {status}")
        _CLASSES_SEEN.add(cls)
    path = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates"
    for _ in range(2):
        status, doc = await kube.request("GET", f"{path}/{name}")
        if status == 200:
            why = tpl.differs(doc, t)
            if why:
                return (f"ResourceClaimTemplate {ns}/{name} is not gpugov's (forged): {why}; "
                        "an admin deletes it, and gpugov writes it again at the next pod")
            return ""
        if status != 404:
            raise RuntimeError(f"GET ResourceClaimTemplate {ns}/{name}: HTTP {status}: "
                               f"{str(doc)[:200]}")
        if dry:
            return ""  # a dryRun writes nothing (sideEffects: NoneOnDryRun)
        status, doc = await kube.request("POST", path, t)
        if status in (200, 201):
            return ""
        if status != 409:  # 409: created meanwhile; read it again
            raise RuntimeError(f"create ResourceClaimTemplate {ns}/{name}: HTTP {status}: "
                               f"{str(doc)[:200]}")
    raise RuntimeError(f"ResourceClaimTemplate {ns}/{name} kept changing")


def _classes(t: dict[str, Any]) -> list[str]:
    out = []
    for r in t["spec"]["spec"]["devices"]["requests"]:
        for ex in [r.get("exactly") or {}, *(r.get("firstAvailable") or [])]:
            if ex.get("deviceClassName"):
                out.append(ex["deviceClassName"])
    return sorted(set(out))


def _why_class(cls: str) -> str:
    if cls == tpl.SLICE_CLASS:
        return ("soft slices need the DRAConsumableCapacity feature gate; ask for whole GPUs, "
                "a MIG profile or a time-slice replica, or have an admin enable it and run "
                "`gpugov dra publish`")
    return "an admin runs `gpugov dra publish`, which creates gpugov's DeviceClasses"
