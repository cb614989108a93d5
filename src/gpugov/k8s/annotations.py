"""Names and JSON codecs of what gpugov's processes write on pods and nodes.

The webhook, scheduler, device plugin, node agent and reconciler meet only through these
annotations and labels (docs/contracts.md). Both sides import them from here so a rename cannot
split them. Every JSON value carries `"v"`; a reader refuses a version it does not know with
`AnnotationError` (never guesses), and writers only add fields within a version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpugov.model.catalog import CATALOG
from gpugov.model.devices import DeviceMode
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import IsolationLevel, TrustTier

PREFIX = "gpugov.io/"
#: pod annotations
REQUEST = "gpugov.io/request"
QUEUE = "gpugov.io/queue"
TENANT = "gpugov.io/tenant"
TRUST_TIER = "gpugov.io/trust-tier"
ALLOCATION = "gpugov.io/allocation"
ALLOCATED = "gpugov.io/allocated"
#: node annotation
INVENTORY = "gpugov.io/inventory"
#: node annotation the agent writes while it re-lays out MIG: "0,3" = GPU indexes gpugov skips
UNSCHEDULABLE_GPUS = "gpugov.io/unschedulable-gpus"
#: node annotation: JSON outcome of the agent's last MIG apply
MIG_CONFIG_STATE = "gpugov.io/mig-config-state"
#: node annotation the scheduler writes: the MIG instances it wants created on demand
MIG_REQUESTS = "gpugov.io/mig-requests"
#: node annotation the agent writes: what became of each of those requests
MIG_REQUESTS_STATE = "gpugov.io/mig-requests-state"
#: the schedulerName the webhook sets on GPU pods
SCHEDULER_NAME = "gpugov"
#: pod label the webhook sets on GPU pods (lets tools select them cheaply)
MANAGED_LABEL = "gpugov.io/managed"
#: namespace/pod label that opts an object out of the webhook
IGNORE_LABEL = "gpugov.io/ignore"

#: GPU feature discovery labels (NVIDIA's names, so existing nodeSelectors keep working)
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_FAMILY = "nvidia.com/gpu.family"
GFD_MIG_STRATEGY = "nvidia.com/mig.strategy"
GFD_PRESENT = "nvidia.com/gpu.present"

VERSION = 1
#: the allocation record's newest version: v2 adds several MIG instances per pod (an index
#: may repeat) and replicas of time-sliced MIG instances (`mig.replicas`); a record that needs
#: neither is still written as v1, and every reader reads both
ALLOCATION_VERSION = 2
TOPOLOGIES = ("none", "preferred", "required")
#: the most replicas a time-sliced MIG instance may have (a bound on tenant-visible input)
MAX_MIG_REPLICAS = 64


class AnnotationError(ValueError):
    """An annotation that cannot be read: names the annotation, the problem and what is allowed."""

    def __init__(self, annotation: str, problem: str) -> None:
        self.annotation, self.problem = annotation, problem
        super().__init__(f"{annotation}: {problem}")


def _load(annotation: str, text: str | bytes | None,
          versions: tuple[int, ...] = (VERSION,)) -> dict[str, Any]:
    if text is None:
        raise AnnotationError(annotation, "missing")
    try:
        data = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise AnnotationError(annotation, f"not JSON ({exc})") from None
    except RecursionError:  # nested thousands deep: json's recursion, not a value error
        raise AnnotationError(annotation, "not JSON (nested too deep)") from None
    if not isinstance(data, dict):
        raise AnnotationError(annotation, f"expected a JSON object, got {type(data).__name__}")
    v = data.get("v")
    if v not in versions or isinstance(v, bool):
        raise AnnotationError(annotation, f"schema version {v!r} is not known; this gpugov "
                              f"reads v={' or v='.join(map(str, versions))}")
    return data


def _get(annotation: str, data: Mapping[str, Any], key: str, kind: type | tuple[type, ...],
         default: Any = ..., where: str = "") -> Any:
    if key not in data or data[key] is None:
        if default is ...:
            raise AnnotationError(annotation, f"{where}{key}: missing")
        return default
    value = data[key]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise AnnotationError(annotation, f"{where}{key}: {value!r} is not a "
                              f"{getattr(kind, '__name__', kind)}")
    if not isinstance(value, kind):
        raise AnnotationError(annotation, f"{where}{key}: {value!r} has the wrong type")
    return value


def _nonneg(annotation: str, value: int, where: str) -> int:
    if value < 0:
        raise AnnotationError(annotation, f"{where}: {value} is negative; allowed: >= 0")
    return value


# ---------------------------------------------------------------- gpugov.io/request

def encode_request(req: GpuRequest) -> str:
    """The canonical request annotation (absent keys = not stated)."""
    out: dict[str, Any] = {"v": VERSION, "count": req.count, "mode": str(req.mode)}
    if req.milli is not None:
        out["milli"] = req.milli
    if req.memory_mib is not None:
        out["memoryMiB"] = req.memory_mib
    if req.memory_percent is not None:
        out["memoryPercent"] = req.memory_percent
    if req.mig_profile:
        out["migProfile"] = req.mig_profile
    if req.models:
        out["models"] = list(req.models)
    if req.isolation is not None:
        out["isolation"] = str(req.isolation)
    out["topology"] = req.topology
    return json.dumps(out, separators=(",", ":"))


def decode_request(text: str | bytes | None) -> GpuRequest:
    """GpuRequest from the annotation; AnnotationError on anything malformed."""
    a = REQUEST
    d = _load(a, text)
    count = _nonneg(a, _get(a, d, "count", int), "count")
    if count < 1:
        raise AnnotationError(a, f"count: {count}; allowed: >= 1")
    try:
        mode = DeviceMode(_get(a, d, "mode", str))
    except ValueError:
        raise AnnotationError(a, f"mode: {d['mode']!r}; allowed: "
                              f"{', '.join(m.value for m in DeviceMode)}") from None
    milli = _get(a, d, "milli", int, None)
    if milli is not None and not 0 < milli <= 1000:
        raise AnnotationError(a, f"milli: {milli}; allowed: 1..1000")
    mem = _get(a, d, "memoryMiB", int, None)
    if mem is not None:
        _nonneg(a, mem, "memoryMiB")
    pct = _get(a, d, "memoryPercent", (int, float), None)
    if pct is not None and not 0 < pct <= 100:
        raise AnnotationError(a, f"memoryPercent: {pct}; allowed: (0, 100]")
    models = tuple(_get(a, d, "models", list, []))
    unknown = [m for m in models if m not in CATALOG]
    if unknown:
        raise AnnotationError(a, f"models: unknown {unknown}; allowed: {', '.join(CATALOG)}")
    iso_text = _get(a, d, "isolation", str, None)
    try:
        isolation = IsolationLevel.parse(iso_text) if iso_text is not None else None
    except ValueError as exc:
        raise AnnotationError(a, f"isolation: {exc}") from None
    topology = _get(a, d, "topology", str, "preferred")
    if topology not in TOPOLOGIES:
        raise AnnotationError(a, f"topology: {topology!r}; allowed: {', '.join(TOPOLOGIES)}")
    return GpuRequest(count, mode, milli=milli, memory_mib=mem,
                      memory_percent=None if pct is None else float(pct),
                      mig_profile=_get(a, d, "migProfile", str, None), models=models,
                      isolation=isolation, topology=topology)


def parse_trust_tier(text: str | None) -> TrustTier:
    """Trust tier from the pod annotation; absent means the default tier (internal)."""
    if text is None:
        return TrustTier.INTERNAL
    try:
        return TrustTier(text)
    except ValueError:
        raise AnnotationError(TRUST_TIER, f"{text!r}; allowed: "
                              f"{', '.join(t.value for t in TrustTier)}") from None


# ---------------------------------------------------------------- gpugov.io/inventory

@dataclass(frozen=True, slots=True)
class MigInstance:
    profile: str
    start: int
    uuid: str = ""
    #: > 1: the instance is time-sliced into that many replicas (`nvidia.com/mig-<p>.shared`;
    #: written only then, absent = 1, within v1)
    replicas: int = 1


@dataclass(frozen=True, slots=True)
class InventoryDevice:
    """One physical GPU as the node agent reports it."""

    index: int
    uuid: str
    model: str
    memory_mib: int
    mode: DeviceMode = DeviceMode.EXCLUSIVE
    replicas: int = 1
    numa: int = 0
    nvlink_domain: int | None = None
    pcie_switch: int | None = None
    healthy: bool = True
    mig: tuple[MigInstance, ...] = ()
    #: the agent creates MIG instances on this GPU when the scheduler asks (free slices only;
    #: `migOnDemand`, written only when true, within v1)
    mig_on_demand: bool = False


@dataclass(frozen=True, slots=True)
class Inventory:
    devices: tuple[InventoryDevice, ...]
    power_budget_w: float | None = None


def encode_inventory(inv: Inventory) -> str:
    devs = []
    for d in inv.devices:
        item: dict[str, Any] = {
            "index": d.index, "uuid": d.uuid, "model": d.model, "memoryMiB": d.memory_mib,
            "mode": str(d.mode), "replicas": d.replicas, "numa": d.numa,
            "nvlinkDomain": d.nvlink_domain, "pcieSwitch": d.pcie_switch,
            "healthy": d.healthy,
            "mig": [{"profile": m.profile, "start": m.start, "uuid": m.uuid}
                    | ({"replicas": m.replicas} if m.replicas > 1 else {}) for m in d.mig],
        }
        if d.mig_on_demand:
            item["migOnDemand"] = True
        devs.append(item)
    out: dict[str, Any] = {"v": VERSION, "devices": devs}
    if inv.power_budget_w is not None:
        out["powerBudgetW"] = inv.power_budget_w
    return json.dumps(out, separators=(",", ":"))


def decode_inventory(text: str | bytes | None) -> Inventory:
    """Inventory from the node annotation; AnnotationError names the bad device and field."""
    a = INVENTORY
    d = _load(a, text)
    raw = _get(a, d, "devices", list)
    devices: list[InventoryDevice] = []
    seen: set[int] = set()
    for i, item in enumerate(raw):
        w = f"devices[{i}]."
        if not isinstance(item, dict):
            raise AnnotationError(a, f"devices[{i}]: expected an object")
        index = _nonneg(a, _get(a, item, "index", int, where=w), w + "index")
        if index in seen:
            raise AnnotationError(a, f"{w}index: duplicate device index {index}")
        seen.add(index)
        try:
            mode = DeviceMode(_get(a, item, "mode", str, "exclusive", where=w))
        except ValueError:
            raise AnnotationError(a, f"{w}mode: {item['mode']!r}; allowed: "
                                  f"{', '.join(m.value for m in DeviceMode)}") from None
        mig = []
        for j, m in enumerate(_get(a, item, "mig", list, [], where=w)):
            if not isinstance(m, dict):
                raise AnnotationError(a, f"{w}mig[{j}]: expected an object")
            mw = f"{w}mig[{j}]."
            reps = _get(a, m, "replicas", int, 1, where=mw)
            if not 1 <= reps <= MAX_MIG_REPLICAS:
                raise AnnotationError(a, f"{mw}replicas: {reps}; allowed: 1..{MAX_MIG_REPLICAS}")
            mig.append(MigInstance(_get(a, m, "profile", str, where=mw),
                                   _nonneg(a, _get(a, m, "start", int, where=mw), mw + "start"),
                                   _get(a, m, "uuid", str, "", where=mw), reps))
        replicas = _get(a, item, "replicas", int, 1, where=w)
        if replicas < 1:
            raise AnnotationError(a, f"{w}replicas: {replicas}; allowed: >= 1")
        devices.append(InventoryDevice(
            index=index, uuid=_get(a, item, "uuid", str, "", where=w),
            model=_get(a, item, "model", str, where=w),
            memory_mib=_nonneg(a, _get(a, item, "memoryMiB", int, where=w), w + "memoryMiB"),
            mode=mode, replicas=replicas, numa=_get(a, item, "numa", int, 0, where=w),
            nvlink_domain=_get(a, item, "nvlinkDomain", int, None, where=w),
            pcie_switch=_get(a, item, "pcieSwitch", int, None, where=w),
            healthy=_get(a, item, "healthy", bool, True, where=w), mig=tuple(mig),
            mig_on_demand=_get(a, item, "migOnDemand", bool, False, where=w)))
    power = _get(a, d, "powerBudgetW", (int, float), None)
    return Inventory(tuple(devices), None if power is None else float(power))


# ---------------------------------------------------------------- gpugov.io/allocation

@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    index: int
    mode: DeviceMode
    milli: int
    memory_mib: int
    uuid: str = ""
    mig_profile: str | None = None
    mig_start: int | None = None
    mig_uuid: str = ""  # the MIG instance's UUID from the node's inventory ("" = not known)
    #: > 1: one replica of a time-sliced instance of that many replicas (record v2)
    mig_replicas: int = 1
    #: False: the request stated no compute (a memory-only slice, HAMi's `defaultCores: 0`):
    #: `milli` is what placement charged, not a cap; the library gets no compute limit.
    #: Written as `"computeLimited": false` only; older records read as True.
    compute_limited: bool = True
    #: HAMi's task priority (`nvidia.com/priority`: 0 high, 1 low); None = not stated
    priority: int | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    node: str
    isolation: IsolationLevel
    devices: tuple[AllocatedDevice, ...] = field(default_factory=tuple)


def encode_allocation(alloc: Allocation) -> str:
    """The record as JSON: v1 unless it holds several MIG instances or a time-sliced MIG
    replica (v2), so readers that predate those refuse them instead of misreading them."""
    devs = []
    mig = [d for d in alloc.devices if d.mig_profile is not None]
    version = ALLOCATION_VERSION if len(mig) > 1 or any(d.mig_replicas > 1 for d in mig) \
        else VERSION
    for d in alloc.devices:
        item: dict[str, Any] = {"index": d.index, "uuid": d.uuid, "mode": str(d.mode),
                                "milli": d.milli, "memoryMiB": d.memory_mib}
        if d.mig_profile is not None:
            item["mig"] = {"profile": d.mig_profile, "start": d.mig_start}
            if d.mig_uuid:
                item["mig"]["uuid"] = d.mig_uuid
            if d.mig_replicas > 1:
                item["mig"]["replicas"] = d.mig_replicas
        if not d.compute_limited:
            item["computeLimited"] = False
        if d.priority is not None:
            item["priority"] = d.priority
        devs.append(item)
    return json.dumps({"v": version, "node": alloc.node, "isolation": str(alloc.isolation),
                       "devices": devs}, separators=(",", ":"))


def decode_allocation(text: str | bytes | None) -> Allocation:
    a = ALLOCATION
    d = _load(a, text, (VERSION, ALLOCATION_VERSION))
    node = _get(a, d, "node", str)
    try:
        isolation = IsolationLevel.parse(_get(a, d, "isolation", str))
    except ValueError as exc:
        raise AnnotationError(a, f"isolation: {exc}") from None
    devices = []
    for i, item in enumerate(_get(a, d, "devices", list)):
        w = f"devices[{i}]."
        if not isinstance(item, dict):
            raise AnnotationError(a, f"devices[{i}]: expected an object")
        try:
            mode = DeviceMode(_get(a, item, "mode", str, where=w))
        except ValueError:
            raise AnnotationError(a, f"{w}mode: {item['mode']!r}; allowed: "
                                  f"{', '.join(m.value for m in DeviceMode)}") from None
        milli = _get(a, item, "milli", int, where=w)
        if not 0 <= milli <= 1000:
            raise AnnotationError(a, f"{w}milli: {milli}; allowed: 0..1000")
        mig = _get(a, item, "mig", dict, None, where=w)
        priority = _get(a, item, "priority", int, None, where=w)
        if priority not in (None, 0, 1):
            raise AnnotationError(a, f"{w}priority: {priority}; allowed: 0 (high), 1 (low)")
        reps = 1 if mig is None else _get(a, mig, "replicas", int, 1, where=w + "mig.")
        if not 1 <= reps <= MAX_MIG_REPLICAS:
            raise AnnotationError(a, f"{w}mig.replicas: {reps}; allowed: 1..{MAX_MIG_REPLICAS}")
        if reps > 1 and d["v"] == VERSION:
            raise AnnotationError(a, f"{w}mig.replicas: needs record v={ALLOCATION_VERSION}")
        devices.append(AllocatedDevice(
            index=_nonneg(a, _get(a, item, "index", int, where=w), w + "index"), mode=mode,
            milli=milli,
            memory_mib=_nonneg(a, _get(a, item, "memoryMiB", int, where=w), w + "memoryMiB"),
            uuid=_get(a, item, "uuid", str, "", where=w),
            mig_profile=None if mig is None else _get(a, mig, "profile", str, where=w + "mig."),
            mig_start=None if mig is None else _get(a, mig, "start", int, where=w + "mig."),
            mig_uuid="" if mig is None else _get(a, mig, "uuid", str, "", where=w + "mig."),
            mig_replicas=reps,
            compute_limited=_get(a, item, "computeLimited", bool, True, where=w),
            priority=priority))
    indexes = [x.index for x in devices]
    if len(set(indexes)) != len(indexes):
        if d["v"] == VERSION:
            raise AnnotationError(a, f"devices: an index repeats; needs v={ALLOCATION_VERSION}")
        if any(x.mig_profile is None or x.mig_replicas > 1 for x in devices):
            raise AnnotationError(a, "devices: an index repeats only for several MIG instances")
        starts = [(x.index, x.mig_start) for x in devices]
        if len(set(starts)) != len(starts):
            raise AnnotationError(a, "devices: the same MIG instance is named twice")
    return Allocation(node, isolation, tuple(devices))


# ------------------------------------------- gpugov.io/mig-requests (and -state)

#: the most on-demand MIG instances one node's request annotation may name
MAX_MIG_REQUESTS = 64


@dataclass(frozen=True, slots=True, order=True)
class MigRequest:
    """One MIG instance the scheduler wants the node agent to create (for `pod`)."""

    gpu: int
    profile: str
    start: int
    pod: str = ""  # namespace/name of the pod it is for (for people and Events)

    @property
    def key(self) -> str:
        """`<gpu>/<profile>@<start>`: how the agent's outcome names it."""
        return f"{self.gpu}/{self.profile}@{self.start}"


def encode_mig_requests(reqs: Sequence[MigRequest]) -> str:
    return json.dumps({"v": VERSION, "instances": [
        {"gpu": r.gpu, "profile": r.profile, "start": r.start, "pod": r.pod}
        for r in sorted(reqs)]}, separators=(",", ":"))


def decode_mig_requests(text: str | bytes | None) -> tuple[MigRequest, ...]:
    a = MIG_REQUESTS
    d = _load(a, text)
    raw = _get(a, d, "instances", list)
    if len(raw) > MAX_MIG_REQUESTS:
        raise AnnotationError(a, f"instances: {len(raw)}; allowed: at most {MAX_MIG_REQUESTS}")
    out = []
    for i, item in enumerate(raw):
        w = f"instances[{i}]."
        if not isinstance(item, dict):
            raise AnnotationError(a, f"instances[{i}]: expected an object")
        out.append(MigRequest(_nonneg(a, _get(a, item, "gpu", int, where=w), w + "gpu"),
                              _get(a, item, "profile", str, where=w)[:64],
                              _nonneg(a, _get(a, item, "start", int, where=w), w + "start"),
                              _get(a, item, "pod", str, "", where=w)[:256]))
    return tuple(out)


def encode_mig_requests_state(results: Mapping[str, str], time_rfc3339: str) -> str:
    """The agent's outcome per request key: `created` or `refused: <why>`."""
    return json.dumps({"v": VERSION, "time": time_rfc3339, "results": dict(sorted(
        results.items()))}, separators=(",", ":"))


def decode_mig_requests_state(text: str | bytes | None) -> dict[str, str]:
    a = MIG_REQUESTS_STATE
    d = _load(a, text)
    res = _get(a, d, "results", dict)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in res.items()):
        raise AnnotationError(a, "results: every key and value must be a string")
    return {k[:128]: v[:1024] for k, v in list(res.items())[:MAX_MIG_REQUESTS * 4]}


# ---------------------------------------------------------------- gpugov.io/allocated

def encode_allocated(device_ids: list[str], time_rfc3339: str,
                     containers: list[ContainerClaim] | None = None) -> str:
    """`containers`: a pod with several GPU containers also records which container got which
    IDs, in the order the kubelet allocated them (the device plugin's next container)."""
    data: dict[str, Any] = {"v": VERSION, "deviceIDs": list(device_ids), "time": time_rfc3339}
    if containers:
        data["containers"] = [{"name": c.name, "resource": c.resource,
                               "deviceIDs": list(c.device_ids)} for c in containers]
    return json.dumps(data, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class ContainerClaim:
    """The device IDs of one resource one container of a pod got (`gpugov.io/allocated`)."""

    name: str
    resource: str
    device_ids: tuple[str, ...]


#: most container records one allocated annotation may hold
MAX_CONTAINER_CLAIMS = 256


def decode_allocated_containers(text: str | bytes | None) -> list[ContainerClaim]:
    """The per-container records of `gpugov.io/allocated` ([] when it has none)."""
    a = ALLOCATED
    d = _load(a, text)
    raw = _get(a, d, "containers", list, [])
    if len(raw) > MAX_CONTAINER_CLAIMS:
        raise AnnotationError(a, f"containers: {len(raw)} records, at most "
                              f"{MAX_CONTAINER_CLAIMS}")
    out = []
    for i, c in enumerate(raw):
        where = f"containers[{i}]."
        if not isinstance(c, dict):
            raise AnnotationError(a, f"containers[{i}]: expected an object")
        ids = _get(a, c, "deviceIDs", list, where=where)
        if not all(isinstance(x, str) for x in ids):
            raise AnnotationError(a, f"{where}deviceIDs: every entry must be a string")
        out.append(ContainerClaim(_get(a, c, "name", str, where=where),
                                  _get(a, c, "resource", str, where=where), tuple(ids)))
    return out


def decode_allocated(text: str | bytes | None) -> tuple[list[str], str]:
    a = ALLOCATED
    d = _load(a, text)
    ids = _get(a, d, "deviceIDs", list)
    if not all(isinstance(x, str) for x in ids):
        raise AnnotationError(a, "deviceIDs: every entry must be a string")
    return ids, _get(a, d, "time", str)


# ---------------------------------------------------------------- GFD labels

def gfd_labels(model: str, count: int, mig_strategy: str = "none") -> dict[str, str]:
    """The labels NVIDIA's GPU feature discovery writes for `count` GPUs of a catalog model."""
    spec = CATALOG.get(model)
    product = (spec.nvml_name if spec and spec.nvml_name else model).replace(" ", "-")
    labels = {GFD_PRESENT: "true", GFD_PRODUCT: product, GFD_COUNT: str(count),
              GFD_MIG_STRATEGY: mig_strategy}
    if spec and spec.memory_mib:
        labels[GFD_MEMORY] = str(spec.memory_mib)
    if spec and spec.arch:
        labels[GFD_FAMILY] = spec.arch
    return labels
