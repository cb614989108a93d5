"""The three views of GPU use and their join — pure functions, no I/O, no clock.

*Declared* is what a pod asked for (`gpugov.io/request`, else its `nvidia.com/gpu` limit) and
what its queue is guaranteed; *allocated* is the scheduler's decision (`gpugov.io/allocation`);
*used* is what the exporter measured. The reconciler feeds Kubernetes objects (as the API's
JSON) and Prometheus samples in and exports the result; `top`, `rightsize` and the tests call
the same functions, so there is one definition of "idle" and "used".
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MIB = 1024 * 1024
ANN_REQUEST = "gpugov.io/request"
ANN_ALLOCATION = "gpugov.io/allocation"
ANN_QUEUE = "gpugov.io/queue"
ANN_TENANT = "gpugov.io/tenant"
ANN_INVENTORY = "gpugov.io/inventory"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
RESOURCE_GPU = "nvidia.com/gpu"
UNKNOWN = "unknown"  # label value for a pod without queue/tenant annotations
SCHEMA_VERSIONS = (1,)
#: a device counts as used by a pod when the pod's busy fraction (device time / wall time)
#: reaches this share of what it holds there: 5 % of a whole GPU, 0.5 % of a 0.1 slice
#: (an absolute 5 % called a 0.1-GPU client using 60 % of its share idle)
DEFAULT_IDLE_THRESHOLD = 0.05


@dataclass(frozen=True)
class Amount:
    """GPU count, memory and compute (1.0 = one whole GPU) of one view of one pod.

    None = not known (a request that states no memory; a device nobody measured)."""

    gpus: float | None
    memory_bytes: float | None
    compute: float | None


@dataclass(frozen=True)
class AllocatedDevice:
    uuid: str
    index: int
    mode: str
    milli: int
    memory_mib: int | None


@dataclass(frozen=True)
class PodRecord:
    """What the cluster says about one GPU pod."""

    namespace: str
    name: str
    phase: str
    node: str | None
    tenant: str
    queue: str
    declared: Amount | None
    devices: tuple[AllocatedDevice, ...]
    problems: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def pending(self) -> bool:
        return self.phase == "Pending" and not self.node

    @property
    def running(self) -> bool:
        return self.phase in ("Running", "Pending") and bool(self.node)

    @property
    def allocated(self) -> Amount | None:
        if not self.devices:
            return None
        mem = [d.memory_mib for d in self.devices]
        return Amount(float(len(self.devices)),
                      None if None in mem else float(sum(m or 0 for m in mem)) * MIB,
                      sum(d.milli for d in self.devices) / 1000.0)


@dataclass(frozen=True)
class DeviceUse:
    """Measured use of one device by one pod (from the exporter, via Prometheus)."""

    namespace: str
    pod: str
    uuid: str
    memory_bytes: float | None
    busy: float | None  # device time per second of wall time (0..1); None: not measured


@dataclass(frozen=True)
class NodeRecord:
    name: str
    gpus: int  # devices the node offers (inventory, else allocatable nvidia.com/gpu)
    card_memory_mib: dict[str, int]  # device UUID -> memory (from the inventory)
    default_card_mib: int | None  # nvidia.com/gpu.memory label
    uuid_by_index: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PodRow:
    namespace: str
    pod: str
    tenant: str
    queue: str
    node: str | None
    declared: Amount | None
    allocated: Amount | None
    used: Amount | None  # None: no measurement (node without the agent, pod not running)
    idle_compute: float  # allocated compute on devices below the idle threshold

    def efficiency(self, resource: str) -> float | None:
        if self.used is None or self.allocated is None:
            return None
        if resource == "compute":
            if self.used.compute is None or not self.allocated.compute:
                return None
            return self.used.compute / self.allocated.compute
        if not self.allocated.memory_bytes or self.used.memory_bytes is None:
            return None
        return self.used.memory_bytes / self.allocated.memory_bytes


@dataclass(frozen=True)
class QueueRow:
    queue: str
    quota_gpus: float | None
    fair_share_gpus: float | None
    usage_gpus: float
    pending_pods: int


@dataclass(frozen=True)
class DeviceRow:
    """What was allocated on one device (every device some running pod holds)."""

    node: str
    uuid: str
    index: int
    mode: str
    compute: float  # Σ allocated compute (1.0 = the whole device)
    memory_bytes: float  # Σ allocated memory limits
    pods: int
    overcommit: float | None  # time-slice/MPS: Σ memory limits / card memory; else None


@dataclass
class Reconciliation:
    pods: list[PodRow] = field(default_factory=list)
    queues: list[QueueRow] = field(default_factory=list)
    devices: list[DeviceRow] = field(default_factory=list)
    nodes_without_agent: list[str] = field(default_factory=list)
    #: (reason, message) pairs: input the reconciler could not use, one per object
    problems: list[tuple[str, str]] = field(default_factory=list)


# --- reading Kubernetes objects ---------------------------------------------------------

def _versioned(raw: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} is not JSON ({e.msg} at char {e.pos})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(data).__name__}")
    if data.get("v") not in SCHEMA_VERSIONS:
        raise ValueError(f"{what} has schema version v={data.get('v')!r}; this reconciler "
                         f"reads v in {list(SCHEMA_VERSIONS)}")
    return data


def _num(data: Mapping[str, Any], key: str, what: str, default: float | None) -> float | None:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{what}: field {key!r} = {value!r}; allowed: a number >= 0")
    return float(value)


def parse_request(raw: str) -> Amount:
    """Declared amount from the canonical request JSON (`GpuRequest` of the contract)."""
    data = _versioned(raw, ANN_REQUEST)
    count = _num(data, "count", ANN_REQUEST, 1) or 0.0
    milli = _num(data, "milli", ANN_REQUEST, 1000)
    mem = _num(data, "memoryMiB", ANN_REQUEST, None)
    return Amount(count, None if mem is None else count * mem * MIB,
                  count * (1000 if milli is None else milli) / 1000.0)


def parse_allocation(raw: str) -> tuple[str | None, tuple[AllocatedDevice, ...]]:
    """Node and devices from the allocation JSON (`gpugov.io/allocation`)."""
    data = _versioned(raw, ANN_ALLOCATION)
    devices = data.get("devices")
    if not isinstance(devices, list) or not devices:
        raise ValueError(f"{ANN_ALLOCATION}: 'devices' must be a non-empty list")
    out = []
    for i, d in enumerate(devices):
        what = f"{ANN_ALLOCATION} devices[{i}]"
        if not isinstance(d, dict) or not isinstance(d.get("uuid"), str):
            raise ValueError(f"{what} needs a string 'uuid'")
        mem = _num(d, "memoryMiB", what, None)
        out.append(AllocatedDevice(d["uuid"], int(_num(d, "index", what, 0) or 0),
                                   str(d.get("mode", "exclusive")),
                                   int(_num(d, "milli", what, 1000) or 0),
                                   None if mem is None else int(mem)))
    node = data.get("node")
    return (node if isinstance(node, str) else None), tuple(out)


def _gpu_limit(pod: Mapping[str, Any]) -> int:
    total = 0
    for c in pod.get("spec", {}).get("containers", []) or []:
        limits = (c.get("resources") or {}).get("limits") or {}
        with contextlib.suppress(ValueError):
            total += int(str(limits.get(RESOURCE_GPU, 0)))
    return total


def pod_record(pod: Mapping[str, Any], owner: tuple[str, str] | None = None
               ) -> PodRecord | None:
    """One pod's declared and allocated views; None for pods that involve no GPU at all and
    for finished pods (Succeeded, Failed: they hold nothing and ask for nothing any more).

    `owner` is the (tenant, queue) the pod's namespace belongs to by the Tenant objects: when
    given it is what the pod is charged to, whatever its annotations say (they are gpugov's
    explanations; a pod in a namespace exempt from the webhook could carry anything), and a
    disagreement is said in `problems`. Without it (no Tenant can be read) the webhook's
    annotations are used. Never raises on a malformed pod: what cannot be read is left out
    and said in `problems`.
    """
    meta = pod.get("metadata", {}) or {}
    ann = meta.get("annotations") or {}
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    phase = str((pod.get("status") or {}).get("phase", "Unknown"))
    if phase in ("Succeeded", "Failed"):
        return None
    node = (pod.get("spec") or {}).get("nodeName") or None
    problems: list[str] = []
    declared: Amount | None = None
    devices: tuple[AllocatedDevice, ...] = ()
    limit = _gpu_limit(pod)
    if ANN_REQUEST in ann:
        try:
            declared = parse_request(ann[ANN_REQUEST])
        except ValueError as e:
            problems.append(f"pod {ns}/{name}: {e}; declared view left out")
    elif limit:
        declared = Amount(float(limit), None, float(limit))
        problems.append(f"pod {ns}/{name} has no {ANN_REQUEST} annotation (not admitted by "
                        f"the gpugov webhook); declared view taken from its {RESOURCE_GPU} "
                        "limit")
    if ANN_ALLOCATION in ann:
        try:
            alloc_node, devices = parse_allocation(ann[ANN_ALLOCATION])
            node = node or alloc_node
        except ValueError as e:
            problems.append(f"pod {ns}/{name}: {e}; allocated view left out")
    if declared is None and not devices and not limit and ANN_REQUEST not in ann:
        return None
    tenant, queue = str(ann.get(ANN_TENANT) or UNKNOWN), str(ann.get(ANN_QUEUE) or UNKNOWN)
    if owner is not None:
        if ANN_QUEUE in ann and (tenant, queue) != owner:
            problems.append(f"pod {ns}/{name}: its annotations name tenant {tenant!r}, queue "
                            f"{queue!r}, but namespace {ns} belongs to Tenant {owner[0]!r}, "
                            f"queue {owner[1]!r}; charged to the Tenant's")
        tenant, queue = owner
    return PodRecord(ns, name, phase, node, tenant, queue, declared, devices, tuple(problems))


def node_record(node: Mapping[str, Any]) -> tuple[NodeRecord, list[str]]:
    """Devices and card sizes of a node, from its inventory annotation or labels."""
    meta = node.get("metadata", {}) or {}
    name = str(meta.get("name", ""))
    ann, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    problems: list[str] = []
    cards: dict[str, int] = {}
    uuids: dict[int, str] = {}
    gpus = 0
    if ANN_INVENTORY in ann:
        try:
            inv = _versioned(ann[ANN_INVENTORY], f"node {name} {ANN_INVENTORY}")
            for d in inv.get("devices") or []:
                gpus += 1
                if isinstance(d, dict) and isinstance(d.get("uuid"), str):
                    cards[d["uuid"]] = int(d.get("memoryMiB") or 0)
                    uuids[int(d.get("index", gpus - 1))] = d["uuid"]
        except (ValueError, TypeError) as e:
            problems.append(f"node {name}: {e}")
    if not gpus:
        alloc = (node.get("status") or {}).get("allocatable") or {}
        try:
            gpus = int(str(alloc.get(RESOURCE_GPU, 0)))
        except ValueError:
            problems.append(f"node {name}: allocatable {RESOURCE_GPU}="
                            f"{alloc.get(RESOURCE_GPU)!r} is not an integer")
    default = labels.get(LABEL_GPU_MEMORY)
    return NodeRecord(name, gpus, cards,
                      int(default) if default and str(default).isdigit() else None,
                      uuids), problems


# --- the join -----------------------------------------------------------------------------

def used_amount(pod: PodRecord, uses: Iterable[DeviceUse], idle_threshold: float,
                devices: Mapping[str, tuple[float | None, float | None]] | None = None,
                holders: Mapping[str, int] | None = None) -> tuple[Amount, float]:
    """Used amount and idle allocated compute of one pod.

    Per device, the pod's own measurement (the enforcement library's region; DCGM fields the
    exporter labelled with the pod) comes first; a device with no per-pod numbers takes the
    device's own (busy, memory) from `devices` when this pod is its only holder
    (`holders`); otherwise it is unknown — never counted as idle.
    """
    by_uuid: dict[str, list[DeviceUse]] = defaultdict(list)
    for u in uses:
        by_uuid[u.uuid].append(u)
    busy_devices, idle = 0, 0.0
    compute: float | None = 0.0
    memory: float | None = 0.0
    for d in pod.devices:
        mine = by_uuid.get(d.uuid, [])
        busy_parts = [u.busy for u in mine]
        mem_parts = [u.memory_bytes for u in mine]
        whole = (devices or {}).get(d.uuid)
        sole = (holders or {}).get(d.uuid, 1) == 1
        if whole is not None and sole:
            if not busy_parts or None in busy_parts:
                busy_parts = [whole[0]]
            if not mem_parts or None in mem_parts:
                mem_parts = [whole[1]]
        busy = None if not busy_parts or None in busy_parts else sum(busy_parts)
        mem = None if not mem_parts or None in mem_parts else sum(mem_parts)
        memory = None if memory is None or mem is None else memory + mem
        if busy is None:
            compute = None
            continue
        compute = None if compute is None else compute + busy
        if busy >= idle_threshold * min(1.0, d.milli / 1000.0):
            busy_devices += 1
        else:
            idle += d.milli / 1000.0
    return Amount(float(busy_devices) if compute is not None else None, memory, compute), idle


def _queue_rows(pods: list[PodRecord], tree: Any | None, capacity_gpus: float
                ) -> list[QueueRow]:
    usage: dict[str, float] = defaultdict(float)
    pending: dict[str, int] = defaultdict(int)
    pending_demand: dict[str, float] = defaultdict(float)
    for p in pods:
        if p.pending:
            pending[p.queue] += 1
            pending_demand[p.queue] += (p.declared.compute or 0.0) if p.declared else 0.0
        elif p.running and p.allocated:
            usage[p.queue] += p.allocated.compute or 0.0
    if tree is None:
        names = sorted(set(usage) | set(pending))
        return [QueueRow(q, None, None, usage[q], pending[q]) for q in names]
    from gpugov.control.fairshare import fair_shares  # control/ is below this room

    n = len(tree.names)
    use_v, pend_v, demand = np.zeros(n), np.zeros(n), np.zeros((n, len(tree.quota[0])))
    for q, leaf in enumerate(tree.names):
        for path_q in tree.paths[q] if tree.is_leaf[q] else ():
            use_v[path_q] += usage.get(leaf, 0.0)
            pend_v[path_q] += pending.get(leaf, 0)
            demand[path_q, 0] += (usage.get(leaf, 0.0) + pending_demand.get(leaf, 0.0)) * 1000
    cap = np.zeros(len(tree.quota[0]))
    cap[0] = capacity_gpus * 1000
    fair = fair_shares(tree, demand, cap)
    rows = [QueueRow(name, float(tree.quota[q, 0]) / 1000, float(fair[q, 0]) / 1000,
                     float(use_v[q]), int(pend_v[q])) for q, name in enumerate(tree.names)]
    known = set(tree.names)
    rows += [QueueRow(q, None, None, usage[q], pending[q])
             for q in sorted((set(usage) | set(pending)) - known)]
    return rows


def _device_rows(pods: list[PodRecord], nodes: Mapping[str, NodeRecord],
                 problems: list[tuple[str, str]]) -> list[DeviceRow]:
    held: dict[tuple[str, str], list[AllocatedDevice]] = defaultdict(list)
    for p in pods:
        if p.running and p.node:
            for d in p.devices:
                held[(p.node, d.uuid)].append(d)
    rows = []
    for (node_name, uuid), devs in sorted(held.items()):
        mode = devs[0].mode if len({d.mode for d in devs}) == 1 else "mixed"
        over = None
        if mode in ("timeslice", "mps"):
            node = nodes.get(node_name)
            card = (node.card_memory_mib.get(uuid) or node.default_card_mib) if node else None
            if card:
                over = sum(d.memory_mib or 0 for d in devs) / card
            else:
                problems.append(("card-memory-unknown",
                                 f"device {uuid} on node {node_name}: card memory unknown (no "
                                 f"{ANN_INVENTORY} entry, no {LABEL_GPU_MEMORY} label); "
                                 "overcommit not computed"))
        rows.append(DeviceRow(node_name, uuid, devs[0].index, mode,
                              sum(d.milli for d in devs) / 1000.0,
                              float(sum(d.memory_mib or 0 for d in devs)) * MIB, len(devs), over))
    return rows


def _with_uuids(pod: PodRecord, node: NodeRecord | None) -> PodRecord:
    """Fill device UUIDs the allocation left empty from the node's inventory (by index)."""
    if node is None or all(d.uuid for d in pod.devices):
        return pod
    devices = tuple(d if d.uuid else AllocatedDevice(node.uuid_by_index.get(d.index, ""),
                                                     d.index, d.mode, d.milli, d.memory_mib)
                    for d in pod.devices)
    return PodRecord(pod.namespace, pod.name, pod.phase, pod.node, pod.tenant, pod.queue,
                     pod.declared, devices, pod.problems)


def reconcile(pods: Iterable[PodRecord], nodes: Iterable[NodeRecord],
              uses: Iterable[DeviceUse], nodes_with_agent: set[str], tree: Any | None = None,
              idle_threshold: float = DEFAULT_IDLE_THRESHOLD,
              devices: Mapping[str, tuple[float | None, float | None]] | None = None
              ) -> Reconciliation:
    """Join the three views per pod, queue and device.

    `nodes_with_agent` are nodes whose exporter Prometheus has series for; pods on other nodes
    get no used view (unknown is not zero) and the node is listed in `nodes_without_agent`.
    `tree` is the control plane's queue tree (`control.tree.QueueTree`) for quota and fair
    share; without it queues come from pod annotations only. `devices` maps a device UUID to
    its own measured (busy fraction, memory bytes), used for a pod that holds the device alone
    and has no per-pod numbers.
    """
    pods, node_map = list(pods), {n.name: n for n in nodes}
    out = Reconciliation()
    by_pod: dict[tuple[str, str], list[DeviceUse]] = defaultdict(list)
    for u in uses:
        by_pod[(u.namespace, u.pod)].append(u)
    missing: set[str] = set()
    pods = [_with_uuids(p, node_map.get(p.node or "")) for p in pods]
    holders: dict[str, int] = defaultdict(int)
    for p in pods:
        if p.running:
            for d in p.devices:
                holders[d.uuid] += 1
    for p in pods:
        out.problems += [("pod-annotation", m) for m in p.problems]
        used, idle = None, 0.0
        if p.running and p.devices:
            if p.node in nodes_with_agent:
                used, idle = used_amount(p, by_pod.get(p.key, ()), idle_threshold, devices,
                                         holders)
            elif p.node:
                missing.add(p.node)
        out.pods.append(PodRow(p.namespace, p.name, p.tenant, p.queue, p.node, p.declared,
                               p.allocated if p.running else None, used, idle))
    for node in sorted(missing):
        out.problems.append(("node-without-agent",
                             f"node {node} runs GPU pods but no gpugov exporter reports for "
                             "it; their used view is unknown (is the node agent running?)"))
    out.nodes_without_agent = sorted(missing)
    capacity = float(sum(n.gpus for n in node_map.values()))
    out.queues = _queue_rows(pods, tree, capacity)
    out.devices = _device_rows(pods, node_map, out.problems)
    return out

