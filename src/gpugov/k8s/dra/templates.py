"""ResourceClaimTemplates the webhook writes for extended-resource pods in DRA mode.

Pure: `shape_of` turns one container's `GpuRequest` (whatever spelling it came in, through the
one translator) into a `Shape` — what a DRA claim can state — and `claim_spec` / `template`
write it as a `resource.k8s.io/v1` claim on gpugov's DeviceClasses (`slices.py`). The name is
a hash of the content (`gpugov-<kind>-<hash>`), so one template serves every container of the
namespace with the same shape, and a template a tenant wrote under that name is recognised as
forged by comparing contents (`differs`). `shape_of_claim` reads a claim back (the round trip
the tests check; `explain`).

Mapping (docs/dra.md, "Translation"):
- whole GPUs -> `gpu.gpugov.io`, `count`; MIG instances -> `mig.gpugov.io` with a CEL selector
  on `migProfile`; a time-slice replica / MPS client -> `timeslice.gpugov.io` /
  `mps.gpugov.io` (an MPS client's `gpumem`/`gpucores` are needs: CEL on the device's capacity);
- a soft slice -> `gpu-slice.gpugov.io` with consumable capacity `memory` (MiB) and `compute`
  (percent). A memory-only slice (no `gpucores`) consumes the compute it is charged on
  gpugov's own path (`GpuRequest.to_pod_request`): DRA capacity has no "unlimited but
  shared". A share of the card (`gpumem-percentage`, KAI's `gpu-fraction`) becomes a
  prioritized list (`firstAvailable`, one subrequest per card memory size, at most 8);
  N slices (`nvidia.com/gpu: N`) are on N distinct GPUs (`distinctAttribute: uuid`);
- allowed models -> a CEL selector; `gpugov.io/topology: required` with several devices ->
  `matchAttribute: nvlinkDomain`; HAMi's task priority -> the driver's opaque `GpuConfig`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from gpugov.k8s.dra.slices import API, CLASSES, DRIVER, SLICE_CLASS
from gpugov.model.catalog import CATALOG
from gpugov.model.devices import DeviceMode
from gpugov.model.gpu_request import GpuRequest

#: the label on every template gpugov writes
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "gpugov"
#: the claim's one device request (the kubelet plugin serves one request per claim)
REQUEST = "gpu"
#: the driver's opaque config (node/dra/prepare.py: CONFIG_API, CONFIG_KIND)
CONFIG_API = "gpu.gpugov.io/v1alpha1"
CONFIG_KIND = "GpuConfig"
#: resource.k8s.io/v1 FirstAvailableDeviceRequestMaxSize
MAX_SUBREQUESTS = 8
KINDS = {"gpu": CLASSES["gpu"], "slice": SLICE_CLASS, "mig": CLASSES["mig"],
         "timeslice": CLASSES["timeslice"], "mps": CLASSES["mps"]}
_ATTR = f'device.attributes["{DRIVER}"]'
_CAP = f'device.capacity["{DRIVER}"]'


class ShapeError(ValueError):
    """A request DRA cannot state as gpugov would serve it; `instead` says what to write."""

    def __init__(self, problem: str, instead: str) -> None:
        self.problem = problem
        self.instead = instead
        super().__init__(f"{problem}; instead, {instead}")


@dataclass(frozen=True, slots=True)
class Shape:
    """What one container's claim asks for, in a claim's own units (per device).

    `compute`: percent a slice consumes, or an MPS client needs; `memory_mib`: MiB a slice
    consumes, or an MPS client needs; `memory_percent`: a slice's share of the card it lands
    on (resolved per card memory size); `models`: allowed models, sorted (empty = any)."""

    kind: str
    count: int = 1
    models: tuple[str, ...] = ()
    compute: int | None = None
    memory_mib: int | None = None
    memory_percent: int | None = None
    mig_profile: str | None = None
    same_nvlink: bool = False
    priority: int | None = None


def _kind(mode: DeviceMode) -> str:
    return {DeviceMode.EXCLUSIVE: "gpu", DeviceMode.SOFT: "slice", DeviceMode.MIG: "mig",
            DeviceMode.TIMESLICE: "timeslice", DeviceMode.MPS: "mps"}[mode]


def shape_of(req: GpuRequest, fleet: tuple[str, ...] = ()) -> Shape:
    """The claim shape of one container's request. `fleet`: the models the Tenant's DRA pods
    run on (`spec.dra.models`), which a share of the card is resolved over when the request
    names no models. ShapeError for what a claim cannot state as gpugov serves it."""
    kind = _kind(req.mode)
    models = tuple(sorted(set(req.models)))
    common = {"count": req.count, "models": models, "priority": req.priority,
              "same_nvlink": req.topology == "required" and req.count > 1}
    if kind == "gpu":
        return Shape("gpu", **common)
    if kind == "mig":
        return Shape("mig", mig_profile=req.mig_profile, **common)
    if kind == "timeslice":
        if req.memory_mib is not None or req.memory_percent is not None:
            raise ShapeError("on the DRA path a time-slice replica has its device's memory "
                             "(card / replicas); a smaller cap cannot be stated in a claim",
                             "drop nvidia.com/gpumem / gpumem-percentage, or ask for a soft "
                             "slice (nvidia.com/gpu: 1 with nvidia.com/gpumem)")
        return Shape("timeslice", **common)
    if kind == "mps":
        cores = None if req.milli is None else math.ceil(req.milli / 10)
        return Shape("mps", compute=cores, memory_mib=req.memory_mib, **common)
    charged = req.to_pod_request("dra").gpu_milli  # the compute gpugov's own path charges
    compute = max(1, min(100, math.ceil(charged / 10)))
    if req.memory_mib is None and req.memory_percent is not None:
        pct = math.ceil(req.memory_percent)
        if not models:
            models = tuple(sorted(set(fleet)))
        sizes = _sizes(models)
        if len(sizes) > MAX_SUBREQUESTS:
            raise ShapeError(
                f"a share of the card ({pct} % of its memory) needs one claim subrequest per "
                f"card memory size, and {'these models' if models else 'the catalog'} have "
                f"{len(sizes)} (a claim takes at most {MAX_SUBREQUESTS})",
                "ask for memory in MiB (nvidia.com/gpumem, gpu-memory), name the models "
                "(gpugov.io/model or nvidia.com/use-gputype), or have an admin list the "
                "fleet's models in the Tenant's spec.dra.models")
        return Shape("slice", compute=compute, memory_percent=pct,
                     **dict(common, models=models))
    return Shape("slice", compute=compute, memory_mib=req.memory_mib, **common)


def _sizes(models: tuple[str, ...]) -> dict[int, tuple[str, ...]]:
    """Card memory (MiB) -> the models of that size, largest first (models with no known
    memory are left out: a share of them cannot be stated)."""
    pool = models or tuple(CATALOG)
    out: dict[int, list[str]] = {}
    for m in sorted(pool):
        mib = CATALOG[m].memory_mib if m in CATALOG else None
        if mib:
            out.setdefault(mib, []).append(m)
    return {k: tuple(out[k]) for k in sorted(out, reverse=True)}


def _models_cel(models: tuple[str, ...]) -> str:
    return f"{_ATTR}.model in [{', '.join(json.dumps(m) for m in models)}]"


def _at_least(name: str, amount: str) -> str:
    return f'{_CAP}.{name}.compareTo(quantity("{amount}")) >= 0'


def _exact(shape: Shape, cls: str) -> dict[str, Any]:
    out: dict[str, Any] = {"deviceClassName": cls, "allocationMode": "ExactCount",
                           "count": shape.count}
    sel = []
    if shape.models and shape.memory_percent is None:
        sel.append(_models_cel(shape.models))
    if shape.kind == "mig":
        sel.append(f"{_ATTR}.migProfile == {json.dumps(shape.mig_profile)}")
    if shape.kind == "mps":
        if shape.memory_mib is not None:
            sel.append(_at_least("memory", f"{shape.memory_mib}Mi"))
        if shape.compute is not None:
            sel.append(_at_least("compute", str(shape.compute)))
    if sel:
        out["selectors"] = [{"cel": {"expression": e}} for e in sel]
    if shape.kind == "slice" and shape.memory_mib is not None:
        out["capacity"] = {"requests": {"memory": f"{shape.memory_mib}Mi",
                                        "compute": str(shape.compute)}}
    return out


def claim_spec(shape: Shape) -> dict[str, Any]:
    """The ResourceClaimSpec of `shape` (every field written out, as the API server keeps
    it, so a stored template compares equal to this)."""
    cls = KINDS[shape.kind]
    request: dict[str, Any] = {"name": REQUEST}
    if shape.kind == "slice" and shape.memory_percent is not None:
        subs = []
        for mib, models in _sizes(shape.models).items():
            sub = _exact(shape, cls)
            sub["name"] = f"m{mib}"
            sub["selectors"] = [{"cel": {"expression": _models_cel(models)}}]
            sub["capacity"] = {"requests": {
                "memory": f"{math.ceil(mib * shape.memory_percent / 100)}Mi",
                "compute": str(shape.compute)}}
            subs.append({"name": sub.pop("name"), **sub})
        request["firstAvailable"] = subs
    else:
        request["exactly"] = _exact(shape, cls)
    devices: dict[str, Any] = {"requests": [request]}
    constraints = []
    if shape.same_nvlink:
        constraints.append({"requests": [REQUEST], "matchAttribute": f"{DRIVER}/nvlinkDomain"})
    if shape.kind == "slice" and shape.count > 1:
        constraints.append({"requests": [REQUEST], "distinctAttribute": f"{DRIVER}/uuid"})
    if constraints:
        devices["constraints"] = constraints
    if shape.priority is not None:
        devices["config"] = [{"requests": [REQUEST], "opaque": {
            "driver": DRIVER, "parameters": {"apiVersion": CONFIG_API, "kind": CONFIG_KIND,
                                             "priority": shape.priority}}}]
    return {"devices": devices}


@functools.lru_cache(maxsize=4096)
def template_name(shape: Shape) -> str:
    """`gpugov-<kind>-<12 hex of the content>`: the same shape, the same name."""
    text = json.dumps(claim_spec(shape), sort_keys=True, separators=(",", ":"))
    return f"gpugov-{shape.kind}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def template(shape: Shape, namespace: str) -> dict[str, Any]:
    """The ResourceClaimTemplate gpugov writes for `shape` in `namespace`."""
    return {"apiVersion": API, "kind": "ResourceClaimTemplate",
            "metadata": {"name": template_name(shape), "namespace": namespace,
                         "labels": {MANAGED_BY: MANAGER}},
            "spec": {"spec": claim_spec(shape)}}


def differs(stored: dict[str, Any], wanted: dict[str, Any]) -> str:
    """Why a stored template is not the one gpugov writes under its name ("" = it is):
    its claim spec or its claim metadata differ, or it lacks gpugov's label."""
    s_spec, w_spec = stored.get("spec") or {}, wanted["spec"]
    if (s_spec.get("spec") or {}) != w_spec["spec"]:
        return "its spec.spec (the claim it makes) is not what gpugov writes for this request"
    if s_spec.get("metadata"):
        return "it sets spec.metadata (labels or annotations on the claims it makes)"
    labels = (stored.get("metadata") or {}).get("labels") or {}
    if labels.get(MANAGED_BY) != MANAGER:
        return f"it lacks the label {MANAGED_BY}={MANAGER}"
    return ""


_MODELS = re.compile(re.escape(_ATTR) + r"\.model in \[(.*)\]")
_MIG = re.compile(re.escape(_ATTR) + r'\.migProfile == (".*")')
_NEED = re.compile(re.escape(_CAP)
                   + r'\.(memory|compute)\.compareTo\(quantity\("(\d+)(Mi)?"\)\) >= 0')


def _read_exact(ex: dict[str, Any], into: dict[str, Any]) -> str:
    """Fill `into` from one ExactDeviceRequest written by `_exact`; returns its class."""
    if ex.get("allocationMode", "ExactCount") != "ExactCount":
        raise ValueError(f"allocationMode {ex.get('allocationMode')!r}")
    into["count"] = int(ex.get("count", 1))
    for s in ex.get("selectors") or []:
        expr = str(((s or {}).get("cel") or {}).get("expression", ""))
        if m := _MODELS.fullmatch(expr):
            into.setdefault("models", set()).update(json.loads(f"[{m.group(1)}]"))
        elif m := _MIG.fullmatch(expr):
            into["mig_profile"] = json.loads(m.group(1))
        elif m := _NEED.fullmatch(expr):
            into["memory_mib" if m.group(1) == "memory" else "compute"] = int(m.group(2))
        else:
            raise ValueError(f"selector {expr[:80]!r} is not one gpugov writes")
    cap = (ex.get("capacity") or {}).get("requests") or {}
    if cap:
        into["compute"] = int(cap["compute"])
        into["memory_mib"] = int(str(cap["memory"]).removesuffix("Mi"))
    return str(ex.get("deviceClassName"))


def shape_of_claim(spec: dict[str, Any]) -> Shape:
    """The Shape a claim spec written by `claim_spec` states; ValueError for a claim gpugov
    did not write."""
    devices = spec.get("devices") or {}
    (request,) = devices.get("requests") or [None]
    got: dict[str, Any] = {}
    if "firstAvailable" in request:
        subs = request["firstAvailable"]
        pcts = set()
        for sub in subs:
            part: dict[str, Any] = {}
            cls = _read_exact(sub, part)
            mib = CATALOG[sorted(part["models"])[0]].memory_mib or 1
            pcts.add(math.floor(part.pop("memory_mib") * 100 / mib))
            got.setdefault("models", set()).update(part.pop("models"))
            got.update(part)
        if len(pcts) != 1:
            raise ValueError(f"subrequests state different shares of the card: {sorted(pcts)}")
        got["memory_percent"] = pcts.pop()
    else:
        cls = _read_exact(request["exactly"], got)
    kind = {v: k for k, v in KINDS.items()}[cls]
    same = any(c.get("matchAttribute") == f"{DRIVER}/nvlinkDomain"
               for c in devices.get("constraints") or [])
    priority = None
    for c in devices.get("config") or []:
        priority = ((c.get("opaque") or {}).get("parameters") or {}).get("priority")
    return Shape(kind, models=tuple(sorted(got.pop("models", ()))), same_nvlink=same,
                 priority=priority, **got)
