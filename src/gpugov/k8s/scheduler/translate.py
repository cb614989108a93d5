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
from gpugov.k8s.annotations import (
    MIG_REQUESTS,
    MIG_REQUESTS_STATE,
    AnnotationError,
    Inventory,
    MigRequest,
    decode_allocation,
    decode_inventory,
    decode_mig_requests,
    decode_mig_requests_state,
)
from gpugov.k8s.annotations import Allocation as AllocationRecord
from gpugov.k8s.pod_containers import containers, effective
from gpugov.k8s.quantity import parse_decimal
from gpugov.k8s.resources import RequestError, model_from_product_label
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.pod_terms import terms_refusal
from gpugov.k8s.scheduler.tenancy import Tenancy
from gpugov.model.catalog import CATALOG
from gpugov.model.cluster import NodeSpec
from gpugov.model.constraints import NodeRequirement, NodeTerm, Taint, Toleration
from gpugov.model.devices import DeviceConfig, DeviceMode, DeviceTopology
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import IsolationLevel, TrustTier, required_isolation
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
    #: MIG devices whose agent creates instances on demand (`mig_on_demand.py`), the
    #: instances asked of it (`gpugov.io/mig-requests`) and its answers (`…-state`)
    mig_on_demand: tuple[int, ...] = ()
    mig_requests: tuple[MigRequest, ...] = ()
    mig_results: tuple[tuple[str, str], ...] = ()

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
        cpu = min(_milli(alloc.get("cpu", 0)), MAX_NODE_AMOUNT)
        mem = min(_mib(alloc.get("memory", 0)), MAX_NODE_AMOUNT)
        gpus = int(parse_quantity(alloc.get(names.GPU_RESOURCE, 0)))
        if gpus > MAX_NODE_GPUS:
            problems.append(f"node {name}: status.allocatable: {gpus} GPUs is more than any "
                            f"node has (at most {MAX_NODE_GPUS}); no GPU of the node is used")
            gpus = 0
    except ValueError as e:
        cpu = mem = gpus = 0
        problems.append(f"node {name}: status.allocatable: {e}")
    inv, inv_problem = _inventory(meta)
    if inv_problem:
        problems.append(inv_problem)
    if inv is not None and inv.devices:
        gpus = max(d.index for d in inv.devices) + 1  # the agent's devices, in every mode
        if gpus > MAX_NODE_GPUS:
            problems.append(f"node {name}: {names.ANN_INVENTORY}: device index {gpus - 1} is "
                            f"beyond any node's (at most {MAX_NODE_GPUS}); no GPU is used")
            inv, gpus = None, 0
    shared = None
    if inv is None and gpus > 0:
        shared, problem = _gfd_sharing(name, labels, gpus)
        if problem:
            problems.append(problem)
        if shared is not None:
            gpus = shared[0]
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
    if labels.get("gpugov.io/dra") == "true":  # k8s/dra/slices.DRA_LABEL
        # DRA claims take them: only claim pods tolerate this state-only taint, so no GPU is
        # offered on both paths (k8s/scheduler/dra_alloc.py)
        from gpugov.k8s.scheduler.dra_alloc import DRA_TAINT

        taints = (*taints, DRA_TAINT)
    if shared is not None and gpus > 0:
        # the NVIDIA plugin's replicas are `nvidia.com/gpu` IDs gpugov's device plugin does
        # not serve: no gpugov pod (whole, time-slice or MPS) can be admitted on them
        blocked = tuple(range(gpus))
        problems.append(
            f"node {name}: the NVIDIA device plugin shares {names.GPU_RESOURCE} without "
            f"renaming it ({labels.get(GFD_STRATEGY)}, {shared[1].replicas} replicas per GPU): "
            "gpugov counts its GPUs but places no pod on them (serve the node with gpugov's "
            "device plugin, `gpugov node run`)")
    spec_kw: dict[str, Any] = {
        "labels": tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        "taints": taints}
    if shared is not None:
        spec_kw["devices"] = (shared[1],) * gpus
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
                    spec_kw["labels"], blocked, _mig_uuids(inv), *_on_demand(meta, inv))


#: GFD's labels for a shared GPU resource (NVIDIA device plugin's time-slicing or MPS)
GFD_COUNT, GFD_REPLICAS, GFD_STRATEGY = ("nvidia.com/gpu.count", "nvidia.com/gpu.replicas",
                                         "nvidia.com/gpu.sharing-strategy")
_GFD_MODES = {"time-slicing": DeviceMode.TIMESLICE, "mps": DeviceMode.MPS}
MAX_REPLICAS = 1024


def _gfd_sharing(name: str, labels: dict[str, str], allocatable: int
                 ) -> tuple[tuple[int, DeviceConfig] | None, str]:
    """A node without gpugov's inventory whose NVIDIA device plugin shares `nvidia.com/gpu`
    without renaming it (GFD: `gpu.sharing-strategy` time-slicing or mps, `gpu.replicas` > 1):
    its allocatable counts replicas, not GPUs. Returns ((physical GPUs, the devices' mode),
    problem); None when the node does not share. Unreadable labels: no GPU is used."""
    mode = _GFD_MODES.get(str(labels.get(GFD_STRATEGY, "")))
    if mode is None:
        return None, ""
    try:
        replicas = int(str(labels.get(GFD_REPLICAS, "")))
        count = int(str(labels.get(GFD_COUNT, "")))
    except ValueError:
        replicas = count = -1
    if replicas < 2 or replicas > MAX_REPLICAS or not 0 < count <= MAX_NODE_GPUS:
        return (0, DeviceConfig()), (
            f"node {name}: labels {GFD_STRATEGY}={labels.get(GFD_STRATEGY)!r}, "
            f"{GFD_COUNT}={str(labels.get(GFD_COUNT))[:32]!r}, "
            f"{GFD_REPLICAS}={str(labels.get(GFD_REPLICAS))[:32]!r} do not describe "
            f"1..{MAX_NODE_GPUS} GPUs of 2..{MAX_REPLICAS} replicas; no GPU of the node is used")
    if count * replicas != allocatable:
        return (0, DeviceConfig()), (
            f"node {name}: {count} GPUs x {replicas} replicas (GFD labels) disagree with "
            f"{allocatable} {names.GPU_RESOURCE} allocatable; no GPU of the node is used")
    return (count, DeviceConfig(mode, replicas=replicas)), ""


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
                    MigInstance(m.start, m.profile, m.replicas) for m in d.mig if m.uuid))
                NodeSpec(name, 0, 0, 1, model, devices=(cfg,))  # the layout is valid here
            else:
                cfg = DeviceConfig(d.mode)
        except (ValueError, KeyError) as e:
            bad.append((k, f"node {name}: device {k}: {e}; not used"))
            cfg = DeviceConfig()
        configs.append(cfg)
    return tuple(configs), tuple(topology), bad


def _on_demand(meta: dict[str, Any], inv: Inventory | None
               ) -> tuple[tuple[int, ...], tuple[MigRequest, ...], tuple[tuple[str, str], ...]]:
    """On-demand MIG devices, the requests on the node and the agent's answers (unreadable
    annotations: none; the scheduler rewrites its own and the agent its own)."""
    ann = meta.get("annotations") or {}
    devices = tuple(d.index for d in inv.devices if d.mig_on_demand and
                    d.mode is DeviceMode.MIG) if inv is not None else ()
    try:
        reqs = decode_mig_requests(ann[MIG_REQUESTS]) if MIG_REQUESTS in ann else ()
    except AnnotationError:
        reqs = ()
    try:
        results = decode_mig_requests_state(ann[MIG_REQUESTS_STATE]) \
            if MIG_REQUESTS_STATE in ann else {}
    except AnnotationError:
        results = {}
    return devices, reqs, tuple(sorted(results.items()))


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
    if not 0 <= card <= MAX_GPU_MEMORY_MIB:
        card = 0  # no card has that much: nobody vouches for it, no memory slice lands
    return model, card, uuids


# -- pods ----------------------------------------------------------------------------------

#: the most one pod may ask for. More than any node could ever hold is an error on that pod,
#: so no tenant-written number reaches the engine's int64 arithmetic (sums over every pod
#: of a cluster stay far below 2**63).
MAX_POD_GPUS = 256
MAX_GPU_MEMORY_MIB = 2**24  # per device: 16 TiB
MAX_CPU_MILLI = 2**32  # ~4.3 million cores
MAX_MEMORY_MIB = 2**32  # 4 PiB
#: a node reporting more GPUs than this is read as having none (no real node comes close)
MAX_NODE_GPUS = 256
#: node CPU (milli) and memory (MiB) beyond this are read as this much
MAX_NODE_AMOUNT = 2**40


@dataclass(slots=True)
class PodInfo:
    """One pod as the scheduler sees it. `error` set = the pod cannot be scheduled as is.

    Request, CPU and memory come from the pod's spec (its containers' resources and the
    request annotations a user declares: `gpugov.io/model`, `gpugov.io/isolation`,
    `gpugov.io/topology`, KAI's), queue and trust tier from the Tenants (`tenancy.Tenancy`):
    never from the annotations gpugov's webhook writes, which a tenant could PATCH."""

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
    #: why the pod has no queue ("" when it has one): no Tenant, ambiguous, not seen yet
    tenancy_why: str = ""
    tenant: str = ""
    #: the spec names a GPU resource (even one that could not be translated)
    gpu_declared: bool = False
    #: (annotations, containers, group, tolerations) it was translated from (tolerations
    #: are the one part of a pod's spec that may grow after creation)
    source: tuple = ()
    node_selector: tuple[tuple[str, str], ...] = ()  # beyond the GPU product (-> models)
    #: why the pod's affinity cannot be placed as written ("" = it can): a malformed term,
    #: or a field gpugov's scheduler does not evaluate (named)
    node_affinity: str = ""
    #: required node affinity terms (ORed), evaluated by the state
    affinity_terms: tuple[NodeTerm, ...] = ()
    #: preferred node affinity (weight, term): a score
    preferred_terms: tuple[tuple[int, NodeTerm], ...] = ()
    allocation_text: str | None = None
    tolerations: tuple[Toleration, ...] = ()
    #: its Tenant opts time-slice replicas in to memory oversubscription (not capped)
    oversubscribe: bool = False

    def resolve(self, tenancy: Tenancy) -> None:
        """Queue, trust tier and time-slice oversubscription from the Tenants (the pod's
        annotations are never read)."""
        owner = tenancy.of(self.namespace)
        self.queue, self.trust = owner.queue, owner.trust
        self.tenant, self.tenancy_why = owner.tenant, owner.why
        self.oversubscribe = owner.oversubscribe


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def declares_gpu(spec: dict[str, Any]) -> bool:
    """Whether any container names an `nvidia.com/` resource (cheap, before translating)."""
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        for c in items if isinstance(items, list) else ():
            res = _mapping(_mapping(c).get("resources"))
            for part in (res.get("limits"), res.get("requests")):
                if any(str(k).startswith("nvidia.com/") for k in _mapping(part)):
                    return True
    return False


def _cpu_mem(spec: dict[str, Any]) -> tuple[int, int]:
    """CPU and memory the pod holds at once: its app containers (and sidecars) together, each
    init container before them (Kubernetes' rule, `k8s.pod_containers.effective`)."""
    cpu, mem = [], []
    for _, kind, c in containers({"spec": spec}):
        req = _mapping(_mapping(c.get("resources")).get("requests"))
        cpu.append((kind, _milli(req.get("cpu", 0))))
        mem.append((kind, _mib(req.get("memory", 0))))
    return effective(cpu), effective(mem)


def _too_big(request: GpuRequest | None, cpu: int, mem: int) -> str:
    """Why the pod asks for more than any node could hold ("" = it does not)."""
    if cpu > MAX_CPU_MILLI or cpu < 0:
        return (f"asks for {cpu / 1000:g} CPU cores; no node holds more than "
                f"{MAX_CPU_MILLI // 1000}")
    if mem > MAX_MEMORY_MIB or mem < 0:
        return f"asks for {mem} MiB of memory; no node holds more than {MAX_MEMORY_MIB} MiB"
    if request is None:
        return ""
    if not 0 <= request.count <= MAX_POD_GPUS:
        return f"asks for {request.count} GPUs; no node has more than {MAX_POD_GPUS}"
    gmem = request.memory_mib or 0
    if not 0 <= gmem <= MAX_GPU_MEMORY_MIB:
        return (f"asks for {gmem} MiB of GPU memory per device; no GPU has more than "
                f"{MAX_GPU_MEMORY_MIB} MiB")
    if request.milli is not None and not 0 <= request.milli <= 1000 * MAX_POD_GPUS:
        return f"asks for {request.milli} milli of compute per device"
    return ""


def _spec_request(obj: dict[str, Any]) -> GpuRequest | None:
    """The pod's GPU request from its spec, exactly as gpugov's webhook translates it
    (`webhook.admission.pod_request`: container resources, the request annotations a user
    declares; gpugov's own annotations are never read)."""
    from gpugov.k8s.webhook.admission import pod_request

    return pod_request(obj)


def _translated(obj: dict[str, Any], spec: dict[str, Any], ann: dict[str, Any]
                ) -> tuple[GpuRequest | None, int, int, str]:
    """(request, CPU milli, memory MiB, error) from what the webhook's translation reads:
    the containers' names and resources, the request annotations a user declares and the
    nodeSelector. Pods of one template are identical there, so the answer is cached on it
    (translation is most of the cost of a pod event)."""
    def parts(key: str) -> list:
        items = spec.get(key)
        if not isinstance(items, list):
            return [items]
        return [(c.get("name"), c.get("resources")) if isinstance(c, dict) else c
                for c in items]

    key = repr((parts("containers"), parts("initContainers"),
                sorted((str(k), str(v)) for k, v in ann.items() if k not in _OWNED),
                spec.get("nodeSelector")))
    got = _TRANSLATED.get(key)
    if got is not None:
        return got
    try:
        request = _spec_request(obj)
        cpu, mem = _cpu_mem(spec)
        too_big = _too_big(request, cpu, mem)
        got = (None, 0, 0, too_big) if too_big else (request, cpu, mem, "")
    except (AnnotationError, RequestError, ValueError, ArithmeticError) as e:
        got = (None, 0, 0, str(e))
    if len(_TRANSLATED) >= _TRANSLATED_MAX:
        _TRANSLATED.clear()
    _TRANSLATED[key] = got
    return got


#: pod template (`_translated`'s key) -> its translation; bounded, cleared when full
_TRANSLATED: dict[str, tuple[GpuRequest | None, int, int, str]] = {}
_TRANSLATED_MAX = 4096


def _owned_free(ann: dict[str, Any]) -> dict[str, Any]:
    """The annotations a pod's request may depend on: all but gpugov's own outputs."""
    return {k: v for k, v in ann.items() if k not in _OWNED}


#: annotations gpugov's components write (explanations and records); never a request input
_OWNED = (names.ANN_REQUEST, names.ANN_QUEUE, names.ANN_TENANT, names.ANN_TRUST,
          names.ANN_ALLOCATION, "gpugov.io/allocated")


def _source(meta: dict[str, Any], spec: dict[str, Any]) -> tuple:
    return (_owned_free(_mapping(meta.get("annotations"))), spec.get("containers"),
            spec.get("initContainers"),
            _mapping(meta.get("labels")).get(names.PODGROUP_LABEL), spec.get("tolerations"),
            _mapping(meta.get("labels")).get(names.KAI_PRIORITY_LABEL))


def pod_info(obj: dict[str, Any], tenants: Tenancy | Any = None,
             old: PodInfo | None = None) -> PodInfo:
    """Translate a pod; never raises (a pod that cannot be read comes back with `error`).

    `tenants` (a `Tenancy`) gives the queue and trust tier of the pod's namespace. With
    `old` (the same pod seen before, same spec and request annotations) the translation is
    reused: a pod is seen several times (created, bound, running)."""
    tenancy = tenants if isinstance(tenants, Tenancy) else Tenancy()
    try:
        return _pod_info(obj, tenancy, old)
    except Exception as e:  # noqa: BLE001 - one pod's object never escapes as an exception
        return _unreadable(obj, tenancy, f"the pod cannot be read: {type(e).__name__}: {e}")


def _unreadable(obj: Any, tenancy: Tenancy, why: str) -> PodInfo:
    """The little of a pod that identifies it, with `why` as its error."""
    meta = _mapping(_mapping(obj).get("metadata"))
    spec = _mapping(_mapping(obj).get("spec"))
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    node = spec.get("nodeName")
    status = _mapping(_mapping(obj).get("status"))
    info = PodInfo(
        key=f"{ns}/{name}", namespace=ns, name=name, uid=str(meta.get("uid") or ""),
        created=parse_time(meta.get("creationTimestamp")
                           if isinstance(meta.get("creationTimestamp"), str) else None),
        node=node if isinstance(node, str) else "",
        scheduler=str(spec.get("schedulerName") or "default-scheduler"),
        done=status.get("phase") in ("Succeeded", "Failed"),
        terminating=bool(meta.get("deletionTimestamp")), request=None, cpu_milli=0,
        memory_mib=0, queue=None, trust=TrustTier.UNTRUSTED, priority_class="", priority=0,
        group=None, allocation=None, error=why)
    with contextlib.suppress(Exception):
        info.gpu_declared = declares_gpu(spec)
    with contextlib.suppress(Exception):
        info.resolve(tenancy)
    return info


def _pod_info(obj: dict[str, Any], tenancy: Tenancy, old: PodInfo | None) -> PodInfo:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    ann = meta.get("annotations") or {}
    if old is not None and old.uid == meta.get("uid", "") and \
            old.source == _source(meta, spec):
        text = ann.get(names.ANN_ALLOCATION)
        if text != old.allocation_text:
            old.allocation_text = text
            try:
                old.allocation = decode_allocation(text) if text is not None else None
            except AnnotationError:
                old.allocation = None  # unreadable: the binding is what counts (held.py)
        phase = status.get("phase", "")
        old.node = spec.get("nodeName") or ""
        old.done = phase in ("Succeeded", "Failed")
        old.terminating = bool(meta.get("deletionTimestamp"))
        old.conditions = {c.get("type", ""): (c.get("status", ""), c.get("message", ""))
                          for c in status.get("conditions") or []}
        return old
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    labels = meta.get("labels") or {}
    request, cpu, mem, error = _translated(obj, spec, ann)
    errors = [error] if error else []
    if spec.get("resourceClaims"):  # DRA claims: allocated by gpugov (k8s/dra/claims.py)
        from gpugov.k8s.dra.claims import refusal

        if refusal(spec):
            errors.append(refusal(spec))
    allocation = None
    if names.ANN_ALLOCATION in ann:
        # an unreadable record is no error of the pod's request: the binding is what counts
        with contextlib.suppress(AnnotationError):
            allocation = decode_allocation(ann[names.ANN_ALLOCATION])
    conditions = {c.get("type", ""): (c.get("status", ""), c.get("message", ""))
                  for c in status.get("conditions") or []}
    phase = status.get("phase", "")
    terminating = bool(meta.get("deletionTimestamp"))
    selector = dict(spec.get("nodeSelector") or {})
    product = selector.pop(names.PRODUCT_LABEL, None)
    if product is not None:
        model, profile = model_from_product_label(product)
        if profile is not None:
            # MIG single strategy: `translate` restricted the models; the label itself is a
            # node constraint too (GFD writes `-MIG-<profile>` only on a uniform single node,
            # and the kubelet re-checks nodeSelector at admission)
            selector[names.PRODUCT_LABEL] = product
        elif model is not None and request is not None and \
                (not request.models or model in request.models):
            request = dataclasses.replace(request, models=(model,))  # placed by GPU model
        else:
            selector[names.PRODUCT_LABEL] = product  # checked like any other label
    affinity, terms = _node_affinity(spec, meta)
    preferred: tuple[tuple[int, NodeTerm], ...] = ()
    if not affinity:
        affinity, preferred = _preferred_affinity(spec)
    tolerations: tuple[Toleration, ...] = ()
    try:
        tolerations = _tolerations(spec)
    except ValueError as e:
        errors.append(str(e))
    try:
        priority = int(spec.get("priority") or 0)
    except (TypeError, ValueError):
        priority = 0
    priority = max(min(priority, 2**31 - 1), -(2**31))  # Kubernetes' int32
    info = PodInfo(
        key=f"{ns}/{name}", namespace=ns, name=name, uid=meta.get("uid", ""),
        created=parse_time(meta.get("creationTimestamp")), node=spec.get("nodeName") or "",
        scheduler=spec.get("schedulerName") or "default-scheduler",
        done=phase in ("Succeeded", "Failed"), terminating=terminating,
        request=request, cpu_milli=cpu, memory_mib=mem, queue=None, trust=TrustTier.INTERNAL,
        priority_class=(spec.get("priorityClassName")
                        or str(labels.get(names.KAI_PRIORITY_LABEL) or "")),
        priority=priority,
        group=(labels.get(names.PODGROUP_LABEL)
               or _mapping(meta.get("annotations")).get(names.VOLCANO_GROUP_ANNOTATION)
               or None),
        allocation=allocation,
        error="; ".join(errors), conditions=conditions,
        gpu_declared=request is not None or declares_gpu(spec),
        source=_source(meta, spec),
        allocation_text=ann.get(names.ANN_ALLOCATION),
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        node_affinity=affinity, affinity_terms=terms, preferred_terms=preferred,
        tolerations=tolerations)
    info.resolve(tenancy)
    return info


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


#: bounds on a pod's node affinity (tenant input): far beyond any real one
MAX_TERMS, MAX_REQUIREMENTS, MAX_VALUES, MAX_AFFINITY_TEXT = 32, 32, 256, 317
_REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
#: fields gpugov's scheduler does not evaluate: a pod naming one is refused, never placed as if
#: it said nothing (pod affinity, anti-affinity and topology spread are evaluated:
#: `pod_terms.py`, `pod_affinity.py`; a malformed term is refused naming its field)
NOT_EVALUATED: tuple[tuple[str, tuple[str, ...]], ...] = ()


def affinity_refusal(spec: dict[str, Any]) -> str:
    """Why gpugov's scheduler cannot place a pod spec's affinity as written ("" = it can):
    what the scheduler puts on the pod as `invalid-request`, for admission to refuse first."""
    return _node_affinity(spec)[0] or _preferred_affinity(spec)[0]


def _node_affinity(spec: dict[str, Any], meta: dict[str, Any] | None = None
                   ) -> tuple[str, tuple[NodeTerm, ...]]:
    """(why not, required node affinity terms): kube-scheduler's semantics, every operator
    (In, NotIn, Exists, DoesNotExist, Gt, Lt), terms ORed, `matchFields` on metadata.name.
    A malformed term, or a field gpugov does not evaluate (`NOT_EVALUATED`), is a reason
    naming the field, never ignored."""
    for name, path in NOT_EVALUATED:
        got: Any = spec
        for part in path:
            got = got.get(part) if isinstance(got, dict) else None
        if got:
            return (f"{name} is not evaluated by gpugov's scheduler (planned); remove it, "
                    "express it as required node affinity or a nodeSelector"), ()
    why = terms_refusal(spec, meta)  # pod (anti-)affinity and spread; labels bounded
    if why:
        return why, ()
    req = (_mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if req is None:
        return "", ()
    terms = req.get("nodeSelectorTerms") if isinstance(req, dict) else None
    if not isinstance(terms, list) or not terms or len(terms) > MAX_TERMS:
        return (f"{_REQUIRED}.nodeSelectorTerms: expected 1..{MAX_TERMS} terms "
                "(Kubernetes requires at least one)"), ()
    out = []
    for i, t in enumerate(terms):
        where = f"{_REQUIRED}.nodeSelectorTerms[{i}]"
        if not isinstance(t, dict):
            return f"{where}: expected an object", ()
        reqs = []
        for kind, is_field in (("matchExpressions", False), ("matchFields", True)):
            items = t.get(kind) or []
            if not isinstance(items, list) or len(items) > MAX_REQUIREMENTS:
                return f"{where}.{kind}: expected a list of at most {MAX_REQUIREMENTS}", ()
            for j, e in enumerate(items):
                try:
                    reqs.append(_requirement(e, is_field))
                except ValueError as exc:
                    return f"{where}.{kind}[{j}]: {exc}", ()
        out.append(NodeTerm(tuple(reqs)))
    return "", tuple(out)


_PREFERRED = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"


def _preferred_affinity(spec: dict[str, Any]) -> tuple[str, tuple[tuple[int, NodeTerm], ...]]:
    """(why not, preferred node affinity as (weight 1..100, term)): a score, as
    kube-scheduler's NodeAffinity plugin (an empty preference adds nothing)."""
    prefs = (_mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
             .get("preferredDuringSchedulingIgnoredDuringExecution"))
    if prefs is None:
        return "", ()
    if not isinstance(prefs, list) or len(prefs) > MAX_TERMS:
        return f"{_PREFERRED}: expected a list of at most {MAX_TERMS} terms", ()
    out = []
    for i, p in enumerate(prefs):
        where = f"{_PREFERRED}[{i}]"
        weight = p.get("weight") if isinstance(p, dict) else None
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            return f"{where}.weight: {str(weight)[:32]!r}; allowed: an integer 1..100", ()
        pref = p.get("preference")
        if not isinstance(pref, dict):
            return f"{where}.preference: expected an object", ()
        reqs = []
        for kind, is_field in (("matchExpressions", False), ("matchFields", True)):
            items = pref.get(kind) or []
            if not isinstance(items, list) or len(items) > MAX_REQUIREMENTS:
                return f"{where}.preference.{kind}: expected at most {MAX_REQUIREMENTS}", ()
            for j, e in enumerate(items):
                try:
                    reqs.append(_requirement(e, is_field))
                except ValueError as exc:
                    return f"{where}.preference.{kind}[{j}]: {exc}", ()
        out.append((weight, NodeTerm(tuple(reqs))))
    return "", tuple(out)


def _requirement(e: Any, field: bool) -> NodeRequirement:
    if not isinstance(e, dict):
        raise ValueError("expected an object with key, operator and values")
    values = e.get("values") or []
    if not isinstance(values, list) or len(values) > MAX_VALUES:
        raise ValueError(f"values: expected a list of at most {MAX_VALUES} strings")
    texts = [e.get("key"), e.get("operator"), *values]
    if not all(isinstance(x, str) and len(x) <= MAX_AFFINITY_TEXT for x in texts):
        raise ValueError(f"key, operator and values must be strings of at most "
                         f"{MAX_AFFINITY_TEXT} characters")
    return NodeRequirement(e["key"], e["operator"], tuple(values), field)


def engine_request(info: PodInfo, card_mib: int, tolerations: bool = True,
                   pods: Any = None) -> PodRequest:
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
    `pods` (a `pod_terms.PodTerms`) is the pod's inter-pod identity and constraints, for the
    state's pod filter. ValueError names what gpugov's scheduler cannot place."""
    req = info.request
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
            if req.mig_profile:  # a replica of a time-sliced MIG instance
                fill["mig_profile"] = req.mig_profile
    if req is not None and (req.mode is DeviceMode.TIMESLICE
                            or req.mode is DeviceMode.MPS and req.milli is None):
        fill["gpu_milli"] = 1  # the state charges 1000/replicas; this is only a lower bound
    if base.gpu_count:
        floor = required_isolation(req.isolation if req is not None else None, info.trust)
        fill["min_isolation"] = max(floor, base.min_isolation)
        # `gpugov.io/topology: required`: a filter of the state (reason `topology`)
        fill["nvlink"] = req is not None and req.topology == "required"
        # the Tenant's opt-in uncaps its time-slice replicas, unless the pod asks for soft
        fill["oversubscribe"] = (info.oversubscribe and base.slice_mode is DeviceMode.TIMESLICE
                                 and fill["min_isolation"] == IsolationLevel.NONE)
        fill["tenant"] = base.tenant or info.namespace
        fill["sealed"] = base.sealed or info.trust is TrustTier.UNTRUSTED
    if info.node_selector and not base.node_selector:
        fill["node_selector"] = info.node_selector
    if info.affinity_terms:
        fill["node_affinity"] = info.affinity_terms
    if info.preferred_terms:
        fill["preferred"] = info.preferred_terms
    if tols and not base.tolerations:
        fill["tolerations"] = tols
    if pods is not None:
        fill["pods"] = pods
    return dataclasses.replace(base, **fill) if fill else base


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


def qos_priority(explicit: int | None, preemptible: bool | None, trust: TrustTier
                 ) -> tuple[int, str]:
    """The in-GPU QoS class on the record (0 Guaranteed, 1 best-effort) and a warning.

    Without `nvidia.com/priority` it comes from the pod's priority class as the queue config
    knows it: a non-preemptible class is Guaranteed, any other (or none known:
    `preemptible` None) best-effort. An explicit `1` always stands. An explicit `0` is
    honoured only for a non-preemptible class or a trusted tenant: otherwise any tenant
    could make its neighbours yield to it beyond what its queue allows, so it is recorded
    as `1` and the warning says why (docs/scheduler.md, QoS class)."""
    guaranteed = preemptible is False
    if explicit is None:
        return (0 if guaranteed else 1), ""
    if explicit != 0 or guaranteed or trust is TrustTier.TRUSTED:
        return (0 if explicit == 0 else 1), ""
    return 1, ("nvidia.com/priority: 0 recorded as 1 (best-effort): priority 0 needs a "
               "non-preemptible priority class (PriorityPolicy preemptible: false) or a "
               "trusted Tenant")


@dataclass
class ConfigBuild:
    config: ControlConfig | None
    problems: list[str]
    excluded: dict[str, str]  # queue -> why it is not in the config


def build_config(queues: list[dict[str, Any]], pcs: list[dict[str, Any]],
                 policies: list[dict[str, Any]] | None = None) -> ConfigBuild:
    """One ControlConfig from the Queue and PriorityClass objects.

    Damage stays where it is: a bad Queue (and every queue below it) is left out with the
    reason; so are the queues of a parent cycle (`a -> b -> a`, a self-parent) and their
    descendants; and when the tree as a whole is invalid (e.g. children's quotas above a
    parent's) the queues are added top-down and each one that makes it invalid is left out
    with its subtree. Every other queue keeps scheduling; the config is None only when no
    queue is left.
    """
    problems: list[str] = []
    excluded: dict[str, str] = {}
    parsed: dict[str, QueueConfig] = {}
    for o in sorted(queues, key=lambda q: str(_meta(q).get("name", ""))):
        name = str(_meta(o).get("name", ""))
        try:
            parsed[name] = queue_config(o)
        except Exception as e:  # noqa: BLE001 - one Queue never stops the others
            why = str(e) if isinstance(e, ValueError) else f"Queue {name}: {e}"
            excluded[name] = why
            problems.append(why)
    for name, why in _cycles(parsed).items():
        excluded[name] = why
        problems.append(why)
        del parsed[name]
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
    try:
        return ConfigBuild(_config(list(parsed.values()), classes), problems, excluded)
    except ConfigError as e:
        whole = e.problems
    kept, left_out = _valid_subtrees(parsed, classes)
    for name, why in left_out.items():
        excluded[name] = why
        problems.append(why)
    if not kept:
        return ConfigBuild(None, problems + whole, excluded)
    return ConfigBuild(_config(kept, classes), problems, excluded)


def _config(queues: list[QueueConfig], classes: list[PriorityClassConfig]) -> ControlConfig:
    data = {"queues": [q.model_dump(by_alias=True, exclude_none=True) for q in queues],
            "priorityClasses": [c.model_dump(by_alias=True) for c in classes]}
    return parse_config(data, "Queues")


def _cycles(parsed: dict[str, QueueConfig]) -> dict[str, str]:
    """Queues on a parent cycle -> why (their descendants are left out by the caller)."""
    out: dict[str, str] = {}
    state: dict[str, int] = {}  # 1 = on the current walk, 2 = done
    for start in parsed:
        walk: list[str] = []
        name: str | None = start
        while name is not None and name in parsed and state.get(name) is None:
            state[name] = 1
            walk.append(name)
            name = parsed[name].parent
        if name is not None and state.get(name) == 1:  # came back to this walk: a cycle
            ring = walk[walk.index(name):]
            chain = " -> ".join([*ring, name])
            for q in ring:
                out[q] = (f"Queue {q}: its parent chain is a cycle ({chain}); the queues on "
                          "it and below it are left out until a parent is fixed")
        for q in walk:
            state[q] = 2
    return out


def _valid_subtrees(parsed: dict[str, QueueConfig], classes: list[PriorityClassConfig]
                    ) -> tuple[list[QueueConfig], dict[str, str]]:
    """The queues that make a valid tree, added top-down (parents first, then by name);
    each queue whose addition makes the tree invalid is left out with its subtree."""
    depth: dict[str, int] = {}

    def level(n: str) -> int:
        if n not in depth:
            p = parsed[n].parent
            depth[n] = 0 if p is None else level(p) + 1
        return depth[n]

    kept: list[QueueConfig] = []
    names_kept: set[str] = set()
    left_out: dict[str, str] = {}
    for name in sorted(parsed, key=lambda n: (level(n), n)):
        q = parsed[name]
        if q.parent is not None and q.parent not in names_kept:
            left_out[name] = f"Queue {name}: parent {q.parent!r} is invalid"
            continue
        try:
            _config([*kept, q], classes)
        except ConfigError as e:
            left_out[name] = (f"Queue {name}: left out with the queues below it: "
                              + "; ".join(e.problems[:3]))
            continue
        kept.append(q)
        names_kept.add(name)
    return kept, left_out
