"""API objects (plain JSON dicts) -> the engine's inputs. Pure: no I/O.

Nodes become `NodeSpec`s (GPU count from `nvidia.com/gpu` allocatable, model from the GFD
product label or the node agent's inventory); pods become `PodInfo` (one `GpuRequest`, its
queue, trust tier, priority class, PodGroup and any recorded allocation); Queues, Tenants and
PriorityClasses become one validated `ControlConfig`. Bad objects never raise out of here:
they come back with an `error` that names the object, the field and the value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from gpugov.control.config import (
    RESOURCES,
    ConfigError,
    ControlConfig,
    PriorityClassConfig,
    QueueConfig,
    parse_config,
    parse_duration,
)
from gpugov.k8s.annotations import Allocation as AllocationRecord
from gpugov.k8s.annotations import AnnotationError, decode_allocation, decode_request
from gpugov.k8s.resources import RequestError, model_from_product_label, translate
from gpugov.k8s.scheduler import names
from gpugov.model.catalog import CATALOG
from gpugov.model.cluster import NodeSpec
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import TrustTier

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(
    r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
#: the model a GPU node gets when neither the product label nor the inventory names one.
UNKNOWN_MODEL = "unknown-gpu"


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "16Gi", "2", 3) as a Decimal; ValueError if not one."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return Decimal(str(value))
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 16Gi, 2)")
    try:
        return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2) or ""])
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None


def _milli(value: Any) -> int:
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def _mib(value: Any) -> int:
    return int((parse_quantity(value) / 2**20).to_integral_value(rounding="ROUND_CEILING"))


def parse_time(stamp: str | None) -> float:
    """RFC3339 `2026-11-30T21:00:00Z` -> epoch seconds (0.0 when absent or unreadable)."""
    if not stamp:
        return 0.0
    try:
        return datetime.fromisoformat(stamp[:19]).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


# -- nodes ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node as placement needs it, plus what the allocation record names."""

    spec: NodeSpec
    card_memory_mib: int
    uuids: tuple[str, ...]
    schedulable: bool
    error: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    #: device indexes no new pod may get: unhealthy in the agent's inventory, or listed in
    #: its `gpugov.io/unschedulable-gpus` while it re-partitions MIG (docs/contracts.md)
    blocked: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    def signature(self) -> tuple:
        """What, when it changes, changes placement (heartbeats do not)."""
        return (self.spec, self.card_memory_mib, self.uuids, self.schedulable, self.blocked)


def node_info(obj: dict[str, Any]) -> NodeInfo:
    meta, status = _meta(obj), obj.get("status") or {}
    name = meta.get("name", "")
    labels = meta.get("labels") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    error = ""
    try:
        cpu = _milli(alloc.get("cpu", 0))
        mem = _mib(alloc.get("memory", 0))
        gpus = int(parse_quantity(alloc.get(names.GPU_RESOURCE, 0)))
    except ValueError as e:
        cpu = mem = gpus = 0
        error = f"node {name}: status.allocatable: {e}"
    model, card, uuids = _node_model(meta, labels, gpus)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    schedulable = ready and not (obj.get("spec") or {}).get("unschedulable", False)
    spec = NodeSpec(name, max(cpu, 0), max(mem, 0), max(gpus, 0), model if gpus > 0 else "",
                    gpu_memory_mib=card if gpus > 0 else None)
    blocked, problem = _blocked_devices(meta, max(gpus, 0))
    if problem:
        error = f"{error}; {problem}" if error else problem
    return NodeInfo(spec, card, uuids, schedulable, error, tuple(sorted(labels.items())),
                    blocked)


def _blocked_devices(meta: dict[str, Any], gpus: int) -> tuple[tuple[int, ...], str]:
    """Devices gpugov must not place on, and a problem text when an annotation is unreadable.

    Unreadable = fail safe: every device of the node is blocked (placing on a GPU the agent
    is re-partitioning, or that raised an XID, costs a pod; waiting costs nothing)."""
    import json

    ann = meta.get("annotations") or {}
    name = meta.get("name", "")
    blocked: set[int] = set()
    text = ann.get(names.ANN_UNSCHEDULABLE_GPUS)
    if text:
        try:
            blocked |= {int(x) for x in str(text).split(",") if x.strip()}
        except ValueError:
            return tuple(range(gpus)), (
                f"node {name}: annotation {names.ANN_UNSCHEDULABLE_GPUS}={text!r} is not a "
                "comma-separated list of GPU indexes; no GPU of the node is used")
    inv_text = ann.get(names.ANN_INVENTORY)
    if inv_text:
        try:
            for d in json.loads(inv_text).get("devices") or []:
                if d.get("healthy", True) is False:
                    blocked.add(int(d["index"]))
        except (ValueError, AttributeError, TypeError, KeyError):
            return tuple(range(gpus)), (
                f"node {name}: annotation {names.ANN_INVENTORY} is unreadable; no GPU of the "
                "node is used")
    return tuple(sorted(i for i in blocked if 0 <= i < gpus)), ""


def _node_model(meta: dict[str, Any], labels: dict[str, str],
                gpus: int) -> tuple[str, int, tuple[str, ...]]:
    """GPU model, card memory (MiB) and device UUIDs from the inventory or the GFD labels.

    The card memory is the node's own figure when it publishes one (the inventory's
    `memoryMiB`, what NVML reported; else GFD's `nvidia.com/gpu.memory`), else the catalog's
    for the model, else 0 (no memory slice is placed on a card nobody vouches for)."""
    import json

    model, uuids, inv_card = "", (), 0
    inv_text = (meta.get("annotations") or {}).get(names.ANN_INVENTORY)
    if inv_text:
        try:
            inv = json.loads(inv_text)
            devs = sorted(inv.get("devices") or [], key=lambda d: d.get("index", 0))
            if devs:
                model = str(devs[0].get("model") or "")
                uuids = tuple(str(d.get("uuid", "")) for d in devs)
                inv_card = int(devs[0].get("memoryMiB") or 0)
        except (ValueError, AttributeError, TypeError):
            pass
    product = labels.get(names.PRODUCT_LABEL, "")
    if not model and product:
        model = model_from_product_label(product)[0] or product
    model = model or UNKNOWN_MODEL
    card = CATALOG[model].memory_mib if model in CATALOG and CATALOG[model].memory_mib else 0
    with contextlib.suppress(ValueError):
        card = int(labels.get(names.GPU_MEMORY_LABEL, "")) or card
    if inv_card > 0:
        card = inv_card
    return model, max(card, 0), uuids


# -- pods ----------------------------------------------------------------------------------

@dataclass(slots=True)
class PodInfo:
    """One pod as the scheduler sees it. `error` set = the pod cannot be scheduled as is."""

    key: str
    namespace: str
    name: str
    uid: str
    created: float
    node: str
    scheduler: str
    done: bool  # Succeeded/Failed or being deleted: holds nothing new
    terminating: bool
    request: GpuRequest | None
    cpu_milli: int
    memory_mib: int
    queue: str | None
    trust: TrustTier
    priority_class: str
    priority: int
    group: str | None
    allocation: AllocationRecord | None
    error: str = ""
    conditions: dict[str, tuple[str, str]] = field(default_factory=dict)
    queue_annotated: bool = False  # the webhook named the queue (else: from the Tenants)
    trust_annotated: bool = False
    source: tuple = ()  # (annotations, containers, group) it was translated from
    node_selector: tuple[tuple[str, str], ...] = ()  # beyond the GPU product (-> models)
    node_affinity: bool = False  # a required node affinity (not evaluated yet)
    allocation_text: str | None = None

    def resolve(self, tenants: dict[str, tuple[str, TrustTier]]) -> None:
        """Queue and trust from the Tenants, where the webhook did not write them."""
        tenant = tenants.get(self.namespace) or tenants.get(CATCH_ALL)
        if not self.queue_annotated:
            self.queue = tenant[0] if tenant else None
        if not self.trust_annotated:
            self.trust = tenant[1] if tenant else TrustTier.INTERNAL


def _container_request(pod: dict[str, Any], ann: dict[str, str]) -> GpuRequest | None:
    spec = pod.get("spec") or {}
    found: list[GpuRequest] = []
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        limits = dict(res.get("requests") or {})
        limits.update(res.get("limits") or {})
        req = translate(limits, ann, spec.get("nodeSelector"))
        if req is not None:
            found.append(req)
    if len(found) > 1:
        raise RequestError("spec.containers", f"{len(found)} containers ask for GPUs",
                           "put the GPU request in one container (several GPU containers per "
                           "pod are planned)")
    if not found and any(k in ann for k in ("gpu-fraction", "gpu-memory")):
        return translate({}, ann, spec.get("nodeSelector"))
    return found[0] if found else None


def _cpu_mem(pod: dict[str, Any]) -> tuple[int, int]:
    cpu = mem = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        req = (c.get("resources") or {}).get("requests") or {}
        cpu += _milli(req.get("cpu", 0))
        mem += _mib(req.get("memory", 0))
    return cpu, mem


def pod_info(obj: dict[str, Any], tenants: dict[str, tuple[str, TrustTier]],
             old: PodInfo | None = None) -> PodInfo:
    """Translate a pod; `tenants` maps namespace -> (queue, trust) for pods the webhook did
    not annotate. With `old` (the same pod seen before, same annotations and containers) the
    request translation is reused: a pod is seen several times (created, bound, running)."""
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    ann_all = meta.get("annotations") or {}
    if old is not None and old.uid == meta.get("uid", "") and \
            old.source == (_stable(ann_all), spec.get("containers"),
                           (meta.get("labels") or {}).get(names.PODGROUP_LABEL)):
        text = ann_all.get(names.ANN_ALLOCATION)
        if text != old.allocation_text:
            old.allocation_text = text
            try:
                old.allocation = decode_allocation(text) if text is not None else None
            except AnnotationError as e:
                old.allocation = None
                old.error = str(e)
        phase = status.get("phase", "")
        old.node = spec.get("nodeName") or ""
        old.done = phase in ("Succeeded", "Failed")
        old.terminating = bool(meta.get("deletionTimestamp"))
        old.conditions = {c.get("type", ""): (c.get("status", ""), c.get("message", ""))
                          for c in status.get("conditions") or []}
        return old
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    ann = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    errors: list[str] = []
    request = None
    cpu = mem = 0
    try:
        if names.ANN_REQUEST in ann:
            request = decode_request(ann[names.ANN_REQUEST])
        else:
            request = _container_request(obj, {k: v for k, v in ann.items()
                                               if not k.startswith("gpugov.io/")
                                               or k in ("gpugov.io/model", "gpugov.io/isolation",
                                                        "gpugov.io/topology")})
        cpu, mem = _cpu_mem(obj)
    except (AnnotationError, RequestError, ValueError) as e:
        errors.append(str(e))
    allocation = None
    if names.ANN_ALLOCATION in ann:
        try:
            allocation = decode_allocation(ann[names.ANN_ALLOCATION])
        except AnnotationError as e:
            errors.append(str(e))
    queue = ann.get(names.ANN_QUEUE) or None
    trust_text = ann.get(names.ANN_TRUST)
    tenant = tenants.get(ns) or tenants.get(CATCH_ALL)
    if queue is None and tenant is not None:
        queue = tenant[0]
    trust = tenant[1] if tenant is not None else TrustTier.INTERNAL
    if trust_text:
        try:
            trust = TrustTier(trust_text)
        except ValueError:
            errors.append(f"{names.ANN_TRUST}: {trust_text!r} is not a trust tier; allowed: "
                          f"{', '.join(t.value for t in TrustTier)}")
    conditions = {c.get("type", ""): (c.get("status", ""), c.get("message", ""))
                  for c in status.get("conditions") or []}
    phase = status.get("phase", "")
    terminating = bool(meta.get("deletionTimestamp"))
    selector = dict(spec.get("nodeSelector") or {})
    product = selector.pop(names.PRODUCT_LABEL, None)
    if product is not None:
        model, profile = model_from_product_label(product)
        if profile is not None:
            pass  # MIG single strategy: `translate` already restricted the models
        elif model is not None and request is not None and \
                (not request.models or model in request.models):
            request = dataclasses.replace(request, models=(model,))  # placed by GPU model
        else:
            selector[names.PRODUCT_LABEL] = product  # checked like any other label
    affinity = bool(((spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution"))
    return PodInfo(
        key=f"{ns}/{name}", namespace=ns, name=name, uid=meta.get("uid", ""),
        created=parse_time(meta.get("creationTimestamp")), node=spec.get("nodeName") or "",
        scheduler=spec.get("schedulerName") or "default-scheduler",
        done=phase in ("Succeeded", "Failed"), terminating=terminating,
        request=request, cpu_milli=cpu, memory_mib=mem, queue=queue, trust=trust,
        priority_class=spec.get("priorityClassName") or "", priority=int(spec.get("priority") or 0),
        group=labels.get(names.PODGROUP_LABEL) or None, allocation=allocation,
        error="; ".join(errors), conditions=conditions,
        queue_annotated=names.ANN_QUEUE in ann, trust_annotated=bool(trust_text),
        source=(_stable(ann), spec.get("containers"), labels.get(names.PODGROUP_LABEL)),
        allocation_text=ann.get(names.ANN_ALLOCATION),
        node_selector=tuple(sorted(selector.items())), node_affinity=affinity)


_RECORDS = (names.ANN_ALLOCATION, "gpugov.io/allocated")


def _stable(ann: dict[str, str]) -> dict[str, str]:
    """The annotations a pod's request depends on (not the records written after binding)."""
    if not any(k in ann for k in _RECORDS):
        return ann
    return {k: v for k, v in ann.items() if k not in _RECORDS}


# -- Queues, Tenants, PriorityClasses -> ControlConfig ---------------------------------------

_QUEUE_FIELDS = ("parent", "quota", "limit", "borrowingLimit", "lendingLimit", "weight",
                 "priority")
_AMOUNTS = ("quota", "limit", "borrowingLimit", "lendingLimit")


def _amounts(where: str, value: Any) -> dict[str, float]:
    """A Queue's resource amounts: numbers in config units (GPUs, cores, GiB) or quantities."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {value!r} is not a mapping of resource -> amount")
    out: dict[str, float] = {}
    for r, v in value.items():
        if r not in RESOURCES:
            raise ValueError(f"{where}.{r}: unknown resource; allowed: {', '.join(RESOURCES)}")
        if r == "memory" and isinstance(v, str) and not re.fullmatch(r"[0-9.]+", v):
            out[r] = float(parse_quantity(v) / 2**30)
        else:
            try:
                out[r] = float(parse_quantity(v))
            except ValueError as e:
                raise ValueError(f"{where}.{r}: {e}") from None
    return out


def queue_config(obj: dict[str, Any]) -> QueueConfig:
    """One Queue object as the config's `QueueConfig`; ValueError names the field."""
    name = _meta(obj).get("name", "")
    spec = obj.get("spec") or {}
    data: dict[str, Any] = {"name": name}
    for k, v in spec.items():
        if k not in _QUEUE_FIELDS:
            continue  # fields of later versions are ignored; the CRD schema validates
        data[k] = _amounts(f"Queue {name}: spec.{k}", v) if k in _AMOUNTS else v
    try:
        return QueueConfig.model_validate(data)
    except ValueError as e:
        raise ValueError(f"Queue {name}: {e}") from None


def tenant_map(tenants: list[dict[str, Any]]) -> dict[str, tuple[str, TrustTier]]:
    """namespace -> (leaf queue, trust tier) from Tenants that list namespaces; a Tenant with
    an empty namespaceSelector (`{}`) is the catch-all, under the key `CATCH_ALL`. Selectors
    with labels are resolved by the webhook (which writes the pod's queue annotation)."""
    out: dict[str, tuple[str, TrustTier]] = {}
    for t in sorted(tenants, key=lambda o: _meta(o).get("name", "")):
        spec = t.get("spec") or {}
        queue = spec.get("queue")
        try:
            trust = TrustTier(spec.get("trust") or spec.get("trustTier") or "internal")
        except ValueError:
            continue
        if not queue:
            continue
        for ns in spec.get("namespaces") or []:
            out.setdefault(str(ns), (str(queue), trust))
        sel = spec.get("namespaceSelector")
        if isinstance(sel, dict) and not sel.get("matchLabels") \
                and not sel.get("matchExpressions"):
            out.setdefault(CATCH_ALL, (str(queue), trust))
    return out


#: `tenant_map` key of the catch-all Tenant (a namespace can never be called this).
CATCH_ALL = "*"


def priority_classes(objs: list[dict[str, Any]], policies: list[dict[str, Any]] | None = None
                     ) -> tuple[list[PriorityClassConfig], list[str]]:
    """Kubernetes PriorityClasses (the value) with gpugov's PriorityPolicy of the same name
    (`preemptible`, `minRuntime`), plus problems found."""
    ext = {_meta(p).get("name", ""): p.get("spec") or {} for p in policies or []}
    out, problems = [], []
    for o in objs:
        name = _meta(o).get("name", "")
        spec = ext.get(name, {})
        try:
            pre = spec.get("preemptible", True)
            if not isinstance(pre, bool):
                raise ValueError(f"PriorityPolicy {name}: spec.preemptible {pre!r}; "
                                 "allowed: true, false")
            out.append(PriorityClassConfig(
                name=name, value=int(o.get("value", 0)), preemptible=pre,
                minRuntime=parse_duration(spec.get("minRuntime", 0))))
        except ValueError as e:
            problems.append(f"PriorityClass {name}: {e}")
    if not any(c.name == DEFAULT_CLASS for c in out):
        out.append(PriorityClassConfig(name=DEFAULT_CLASS, value=0))
    return out, problems


#: the class of pods that name none (Kubernetes gives them priority 0).
DEFAULT_CLASS = "gpugov-default"


@dataclass
class ConfigBuild:
    config: ControlConfig | None
    problems: list[str]
    excluded: dict[str, str]  # queue -> why it is not in the config


def build_config(queues: list[dict[str, Any]], pcs: list[dict[str, Any]],
                 policies: list[dict[str, Any]] | None = None) -> ConfigBuild:
    """One ControlConfig from the Queue and PriorityClass objects.

    A bad Queue (and every queue below it) is left out with the reason, so one broken
    object never stops the others from scheduling; if the tree as a whole is still invalid
    (e.g. children's quotas above a parent's) the config is None and `problems` says why.
    """
    problems: list[str] = []
    excluded: dict[str, str] = {}
    parsed: dict[str, QueueConfig] = {}
    for o in sorted(queues, key=lambda q: _meta(q).get("name", "")):
        name = _meta(o).get("name", "")
        try:
            parsed[name] = queue_config(o)
        except ValueError as e:
            excluded[name] = str(e)
            problems.append(str(e))
    changed = True
    while changed:
        changed = False
        for name, q in list(parsed.items()):
            if q.parent is not None and q.parent not in parsed:
                why = "is invalid" if q.parent in excluded else "does not exist"
                excluded[name] = f"Queue {name}: parent {q.parent!r} {why}"
                problems.append(excluded[name])
                del parsed[name]
                changed = True
    classes, pc_problems = priority_classes(pcs, policies)
    problems += pc_problems
    if not parsed:
        return ConfigBuild(None, problems + ["no valid Queue objects"], excluded)
    data = {"queues": [q.model_dump(by_alias=True, exclude_none=True) for q in parsed.values()],
            "priorityClasses": [c.model_dump(by_alias=True) for c in classes]}
    try:
        return ConfigBuild(parse_config(data, "Queues"), problems, excluded)
    except ConfigError as e:
        return ConfigBuild(None, problems + e.problems, excluded)
