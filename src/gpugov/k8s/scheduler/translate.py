"""API objects (plain JSON dicts) -> the engine's inputs. Pure: no I/O.

Nodes become `NodeSpec`s: from the node agent's `gpugov.io/inventory` when it has one (every
device with its mode, MIG instances, replicas and topology; the power budget), else every
device soft, counted from `nvidia.com/gpu` allocatable, model from the GFD product label;
labels and taints always. Pods become `PodInfo` (one `GpuRequest`, its queue, trust tier,
priority class, PodGroup, nodeSelector, tolerations and any recorded allocation); Queues,
Tenants and
PriorityClasses become one validated `ControlConfig`. Bad objects never raise out of here:
they come back with an `error` that names the object, the field and the value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
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
from gpugov.k8s.annotations import (
    AnnotationError,
    Inventory,
    decode_allocation,
    decode_inventory,
    decode_request,
)
from gpugov.k8s.quantity import parse_decimal
from gpugov.k8s.resources import RequestError, model_from_product_label, translate
from gpugov.k8s.scheduler import names
from gpugov.model.catalog import CATALOG
from gpugov.model.cluster import NodeSpec
from gpugov.model.constraints import Taint, Toleration
from gpugov.model.devices import DeviceConfig, DeviceMode, DeviceTopology
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import TrustTier, required_isolation
from gpugov.model.mig import MigInstance
from gpugov.model.request import PodRequest

#: the model a GPU node gets when neither the product label nor the inventory names one.
UNKNOWN_MODEL = "unknown-gpu"


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "16Gi", "2", 3) as a Decimal; ValueError if not one or
    out of range (`gpugov.k8s.quantity`: bounded before any arithmetic, so `1e400` is an
    error on its pod, never an overflow in the cycle)."""
    return parse_decimal(value)


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
    #: (device index, MIG profile, start) -> the instance's UUID (the agent's inventory)
    mig_uuids: dict[tuple[int, str, int], str] = field(default_factory=dict)

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
    problems: list[str] = []
    try:
        cpu = _milli(alloc.get("cpu", 0))
        mem = _mib(alloc.get("memory", 0))
        gpus = int(parse_quantity(alloc.get(names.GPU_RESOURCE, 0)))
    except ValueError as e:
        cpu = mem = gpus = 0
        problems.append(f"node {name}: status.allocatable: {e}")
    inv, inv_problem = _inventory(meta)
    if inv_problem:
        problems.append(inv_problem)
    if inv is not None and inv.devices:
        gpus = max(d.index for d in inv.devices) + 1  # the agent's devices, in every mode
    model, card, uuids = _node_model(labels, gpus, inv)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    schedulable = ready and not (obj.get("spec") or {}).get("unschedulable", False)
    taints, taint_problem = _taints(name, obj.get("spec") or {})
    if taint_problem:
        problems.append(taint_problem)
        schedulable = False  # fail safe: a taint gpugov cannot read keeps new pods off
    gpus = max(gpus, 0)
    blocked, problem = _blocked_devices(meta, gpus, inv, inv_problem)
    if problem:
        problems.append(problem)
    spec_kw: dict[str, Any] = {
        "labels": tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        "taints": taints}
    if inv is not None and gpus > 0:
        devices, topology, bad = _device_configs(name, model, gpus, inv)
        if bad:
            problems += [why for _, why in bad]
            blocked = tuple(sorted(set(blocked) | {k for k, _ in bad}))
        spec_kw.update(devices=devices, topology=topology, power_budget_w=inv.power_budget_w)
    base = (name, max(cpu, 0), max(mem, 0), gpus, model if gpus > 0 else "")
    try:
        spec = NodeSpec(*base, gpu_memory_mib=card if gpus > 0 else None, **spec_kw)
    except ValueError as e:  # e.g. a negative power budget: no GPU of the node is used
        problems.append(f"node {name}: {e}; no GPU of the node is used")
        spec = NodeSpec(*base, gpu_memory_mib=card if gpus > 0 else None,
                        labels=spec_kw["labels"], taints=taints)
        blocked = tuple(range(gpus))
    return NodeInfo(spec, card, uuids, schedulable, "; ".join(problems),
                    spec_kw["labels"], blocked, _mig_uuids(inv))


def _inventory(meta: dict[str, Any]) -> tuple[Inventory | None, str]:
    """The node agent's inventory, or (None, problem) when it is unreadable."""
    text = (meta.get("annotations") or {}).get(names.ANN_INVENTORY)
    if not text:
        return None, ""
    try:
        return decode_inventory(text), ""
    except AnnotationError as e:
        return None, (f"node {meta.get('name', '')}: {e}; no GPU of the node is used")


def _taints(name: str, spec: dict[str, Any]) -> tuple[tuple[Taint, ...], str]:
    """spec.taints as the engine's `Taint`s (all effects; the state evaluates the hard ones)."""
    out = []
    for i, t in enumerate(spec.get("taints") or []):
        try:
            out.append(Taint(str(t.get("key") or ""), str(t.get("value") or ""),
                             str(t.get("effect") or "")))
        except (ValueError, AttributeError) as e:
            return (), f"node {name}: spec.taints[{i}]: {e}; the node takes no new pod"
    return tuple(out), ""


def _device_configs(name: str, model: str, gpus: int, inv: Inventory
                    ) -> tuple[tuple[DeviceConfig, ...], tuple[DeviceTopology, ...],
                               list[tuple[int, str]]]:
    """Per device: its mode as the agent set it up, and where it sits.

    Time-slice and MPS devices have the agent's replicas; a MIG device has exactly the
    instances the agent reports with a UUID (a fixed layout: gpugov places pods on them, it
    does not create instances; the device plugin cannot hand out one without a UUID). A
    device the inventory does not list, or whose model, layout or replicas are impossible,
    comes back in the problems `(index, why)` and is kept soft (the caller blocks it)."""
    by_index = {d.index: d for d in inv.devices}
    configs: list[DeviceConfig] = []
    topology: list[DeviceTopology] = []
    bad: list[tuple[int, str]] = []
    for k in range(gpus):
        d = by_index.get(k)
        if d is None:
            bad.append((k, f"node {name}: device {k}: not in the inventory; not used"))
            configs.append(DeviceConfig())
            topology.append(DeviceTopology())
            continue
        topology.append(DeviceTopology(d.nvlink_domain, d.pcie_switch, d.numa))
        try:
            if d.model != model:
                raise ValueError(f"model {d.model!r} differs from device 0's {model!r}")
            if d.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
                cfg = DeviceConfig(d.mode, replicas=d.replicas)
            elif d.mode is DeviceMode.MIG:
                cfg = DeviceConfig(d.mode, mig_layout=tuple(  # no UUID: cannot be handed out
                    MigInstance(m.start, m.profile) for m in d.mig if m.uuid))
                NodeSpec(name, 0, 0, 1, model, devices=(cfg,))  # the layout is valid here
            else:
                cfg = DeviceConfig(d.mode)
        except (ValueError, KeyError) as e:
            bad.append((k, f"node {name}: device {k}: {e}; not used"))
            cfg = DeviceConfig()
        configs.append(cfg)
    return tuple(configs), tuple(topology), bad


def _mig_uuids(inv: Inventory | None) -> dict[tuple[int, str, int], str]:
    """(device index, profile, start) -> the MIG instance's UUID, from the inventory."""
    if inv is None:
        return {}
    return {(d.index, m.profile, m.start): m.uuid for d in inv.devices for m in d.mig}


def _blocked_devices(meta: dict[str, Any], gpus: int, inv: Inventory | None,
                     inv_problem: str) -> tuple[tuple[int, ...], str]:
    """Devices gpugov must not place on, and a problem text when an annotation is unreadable.

    Unreadable = fail safe: every device of the node is blocked (placing on a GPU the agent
    is re-partitioning, or that raised an XID, costs a pod; waiting costs nothing)."""
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
    if inv_problem:
        return tuple(range(gpus)), ""
    if inv is not None:
        blocked |= {d.index for d in inv.devices if not d.healthy}
    return tuple(sorted(i for i in blocked if 0 <= i < gpus)), ""


def _node_model(labels: dict[str, str], gpus: int,
                inv: Inventory | None) -> tuple[str, int, tuple[str, ...]]:
    """GPU model, card memory (MiB) and device UUIDs from the inventory or the GFD labels.

    The card memory is the node's own figure when it publishes one (the inventory's
    `memoryMiB`, what NVML reported; else GFD's `nvidia.com/gpu.memory`), else the catalog's
    for the model, else 0 (no memory slice is placed on a card nobody vouches for)."""
    model, uuids, inv_card = "", (), 0
    if inv is not None and inv.devices:
        devs = sorted(inv.devices, key=lambda d: d.index)
        model = devs[0].model
        by_index = {d.index: d.uuid for d in devs}
        uuids = tuple(by_index.get(k, "") for k in range(max(gpus, 0)))
        inv_card = devs[0].memory_mib
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
    #: (annotations, containers, group, tolerations) it was translated from (tolerations
    #: are the one part of a pod's spec that may grow after creation)
    source: tuple = ()
    node_selector: tuple[tuple[str, str], ...] = ()  # beyond the GPU product (-> models)
    #: a required node affinity gpugov cannot express as a nodeSelector ("" = none)
    node_affinity: str = ""
    allocation_text: str | None = None
    tolerations: tuple[Toleration, ...] = ()

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
                           (meta.get("labels") or {}).get(names.PODGROUP_LABEL),
                           spec.get("tolerations")):
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
    affinity, terms = _required_affinity(spec)
    for k, v in terms:
        if selector.get(k, v) != v:
            affinity = (f"spec.affinity.nodeAffinity asks for {k}={v}, the nodeSelector for "
                        f"{k}={selector[k]}: no node can have both")
        selector[k] = v
    tolerations: tuple[Toleration, ...] = ()
    try:
        tolerations = _tolerations(spec)
    except ValueError as e:
        errors.append(str(e))
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
        source=(_stable(ann), spec.get("containers"), labels.get(names.PODGROUP_LABEL),
                spec.get("tolerations")),
        allocation_text=ann.get(names.ANN_ALLOCATION),
        node_selector=tuple(sorted(selector.items())), node_affinity=affinity,
        tolerations=tolerations)


def _tolerations(spec: dict[str, Any]) -> tuple[Toleration, ...]:
    """spec.tolerations with Kubernetes semantics (`tolerationSeconds` only delays a
    NoExecute eviction: it does not change where a pod may land)."""
    out = []
    for i, t in enumerate(spec.get("tolerations") or []):
        if not isinstance(t, dict):
            raise ValueError(f"spec.tolerations[{i}]: expected an object")
        try:
            out.append(Toleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"),
                                  str(t.get("value") or ""), str(t.get("effect") or "")))
        except ValueError as e:
            raise ValueError(f"spec.tolerations[{i}]: {e}") from None
    return tuple(sorted(set(out), key=lambda t: (t.key, t.operator, t.value, t.effect)))


def _required_affinity(spec: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A required node affinity as nodeSelector terms, or why it cannot be one.

    gpugov evaluates exactly what a nodeSelector can say: one `nodeSelectorTerms` entry whose
    `matchExpressions` are all `In` with a single value. Anything else (several terms, other
    operators, several values, `matchFields`) is refused by the caller, never ignored."""
    req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not req:
        return "", ()
    terms = req.get("nodeSelectorTerms") if isinstance(req, dict) else None
    why = ("spec.affinity.nodeAffinity (required) is evaluated by gpugov's scheduler only as "
           "one nodeSelectorTerm of `In` expressions with one value each (the rest: planned)")
    if not isinstance(terms, list) or len(terms) != 1 or not isinstance(terms[0], dict) \
            or terms[0].get("matchFields"):
        return why, ()
    out = []
    for e in terms[0].get("matchExpressions") or []:
        values = e.get("values") if isinstance(e, dict) else None
        if e.get("operator") != "In" or not isinstance(values, list) or len(values) != 1:
            return why, ()
        out.append((str(e.get("key") or ""), str(values[0])))
    return ("", tuple(out)) if out else (why, ())


def engine_request(info: PodInfo, card_mib: int, tolerations: bool = True) -> PodRequest:
    """The engine's request for a pod: `GpuRequest.to_pod_request` compiled with modes (the
    replay's compile: slice mode, MIG profile, the isolation floor of the request and the
    trust tier, the seal of an untrusted tenant), with the pod's tenant (its namespace),
    nodeSelector and tolerations; whatever that leaves unset is filled here. A time-slice pod,
    and an MPS pod that states no compute, ask for 1 milli: the state charges a replica
    1000/replicas of its device whatever the request says, and the control plane's capacity
    and quota checks before placement take the request's milli as a lower bound (the whole
    card would keep a replica out of a cluster whose replicas are free).

    The mode is kept even where it delivers less than the floor (an untrusted tenant's soft
    slice): placement refuses it with reason `isolation`, as the webhook does, rather than
    widening it. `card_mib` is the card
    a memory-only share is taken of (the largest in the cluster). `tolerations=False` leaves
    them out (right when no node has a taint; it keeps plain pods on the engine's fast path).
    ValueError names what gpugov's scheduler cannot place."""
    req = info.request
    if req is not None and req.mode is DeviceMode.MIG and req.count != 1:
        raise ValueError(f"{req.count} MIG instances in one pod: gpugov's scheduler places one "
                         "instance per pod (several: planned); ask for 1 per pod")
    if req is not None and req.mode is not DeviceMode.MIG and req.mig_profile:
        raise ValueError(f"time-slice replicas of MIG instances ({req.mig_profile}) are not "
                         "placed by gpugov's scheduler yet (planned); ask for "
                         f"nvidia.com/mig-{req.mig_profile} or nvidia.com/gpu.shared")
    tols = info.tolerations if tolerations else ()
    if req is None:
        base = PodRequest(info.key, info.cpu_milli, info.memory_mib)
    else:
        base = req.to_pod_request(info.key, info.cpu_milli, info.memory_mib, card_mib or None,
                                  modes=True, tier=info.trust, tenant=info.namespace,
                                  node_selector=info.node_selector, tolerations=tols)
    fill: dict[str, Any] = {}
    if req is not None and base.mode is None:  # what a compile without modes leaves out
        if req.mode is DeviceMode.MIG:
            fill.update(mode=DeviceMode.MIG, mig_profile=req.mig_profile or "")
        elif req.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
            fill["mode"] = req.mode
    if req is not None and (req.mode is DeviceMode.TIMESLICE
                            or req.mode is DeviceMode.MPS and req.milli is None):
        fill["gpu_milli"] = 1  # the state charges 1000/replicas; this is only a lower bound
    if base.gpu_count:
        floor = required_isolation(req.isolation if req is not None else None, info.trust)
        fill["min_isolation"] = max(floor, base.min_isolation)
        fill["tenant"] = base.tenant or info.namespace
        fill["sealed"] = base.sealed or info.trust is TrustTier.UNTRUSTED
    if info.node_selector and not base.node_selector:
        fill["node_selector"] = info.node_selector
    if tols and not base.tolerations:
        fill["tolerations"] = tols
    return dataclasses.replace(base, **fill) if fill else base


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
        if r in ("memory", "gpumem") and isinstance(v, str) and not re.fullmatch(r"[0-9.]+", v):
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
