"""Which pod a kubelet Allocate is for: the handshake between scheduler, kubelet and plugin.

The kubelet's Allocate names device IDs, never the pod. The scheduler wrote the pod's slice in
`gpugov.io/allocation` before binding. This module matches the two, with no lock (see
docs/device-plugin.md for why it is safe):

1. `candidates`: pods bound to this node whose allocation (for this node) maps to this resource
   and that have not claimed devices of this resource yet (`gpugov.io/allocated`), in the order
   the kubelet admits pods (scheduled time, then creation time, then name).
2. `preferred_ids` (GetPreferredAllocation): the IDs of the first candidate of the asked size
   whose devices are all available, so the kubelet picks the devices the scheduler chose; the
   topology engine decides when no candidate fits.
3. `matching` (Allocate): candidates whose devices are exactly the kubelet's; the caller claims
   the first with a resourceVersion-conditional PATCH and moves to the next on a conflict.

Pure functions over pod dicts and the plugin's device list; no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpugov.k8s.annotations import (
    ALLOCATED,
    ALLOCATION,
    AllocatedDevice,
    AnnotationError,
    Inventory,
    InventoryDevice,
    decode_allocated,
    decode_allocation,
)
from gpugov.k8s.driver_capabilities import DEFAULT as DEFAULT_CAPABILITIES
from gpugov.k8s.driver_capabilities import CapabilityError
from gpugov.k8s.driver_capabilities import of_pod as capabilities_of
from gpugov.model.devices import DeviceMode
from gpugov.node.deviceplugin.pods import Pod
from gpugov.node.deviceplugin.resources import GPU, MPS, SHARED, PluginDevice, mig_resource
from gpugov.placement.topology import preferred_allocation

_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pod that waits for devices of one resource."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    order: tuple[str, int, str, str, str]
    wanted: tuple[str, ...]  # sorted device keys (GPU UUIDs or MIG UUIDs), one per kubelet ID
    slices: tuple[tuple[str, AllocatedDevice], ...]  # (key, the scheduler's slice), by key
    claimed_ids: tuple[str, ...]  # IDs of this resource it already claimed (kubelet re-Allocate)
    allocated_ids: tuple[str, ...]  # every ID in its gpugov.io/allocated (all resources)
    trust_tier: str | None
    #: NVIDIA_DRIVER_CAPABILITIES its GPU container asks for (k8s.driver_capabilities)
    driver_capabilities: str = DEFAULT_CAPABILITIES

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Rejected:
    """A pod on the node that cannot be matched, and why (shown in Allocate errors, logged)."""

    pod: str
    reason: str


def _slice_key(node: str, inv: Mapping[int, InventoryDevice],
               by_uuid: Mapping[str, InventoryDevice], d: AllocatedDevice,
               i: int, asks: frozenset[str] = frozenset()) -> tuple[str, str]:
    """(resource, key) of one allocated device; ValueError names what does not fit.
    `asks`: the resources the pod's containers name; a replica of a pod that asks
    `nvidia.com/gpu` and not the replica's own name is NVIDIA's unrenamed spelling
    (`renameByDefault: false`), served under `nvidia.com/gpu`."""
    dev = by_uuid.get(d.uuid) if d.uuid else inv.get(d.index)
    where = f"devices[{i}]"
    if dev is None:
        raise ValueError(f"{where}: GPU {d.uuid or d.index} is not on node {node}")
    if d.uuid and dev.index != d.index:
        raise ValueError(f"{where}: uuid {d.uuid} is GPU index {dev.index} on {node}, "
                         f"the allocation says index {d.index}")
    if d.mode == DeviceMode.MIG:
        shared = d.mig_replicas > 1  # one replica of a time-sliced instance
        for m in dev.mig:
            if m.profile == d.mig_profile and m.start == d.mig_start and m.uuid and \
                    (m.replicas > 1) == shared:
                res = mig_resource(m.profile, shared)
                # MIG single strategy: the pod asks nvidia.com/gpu for its instance
                return (GPU if res not in asks and GPU in asks else res), m.uuid
        raise ValueError(f"{where}: no {'time-sliced ' if shared else ''}MIG instance "
                         f"{d.mig_profile} at start {d.mig_start} on GPU {dev.index} of {node}")
    want = {DeviceMode.EXCLUSIVE: GPU, DeviceMode.SOFT: GPU, DeviceMode.TIMESLICE: SHARED,
            DeviceMode.MPS: MPS}[d.mode]
    if want != GPU and want not in asks and GPU in asks:
        want = GPU
    if dev.mode != d.mode:
        raise ValueError(f"{where}: GPU {dev.index} is in {dev.mode} mode on {node}, "
                         f"the allocation says {d.mode}")
    return want, dev.uuid


def _asks(pod: Pod) -> frozenset[str]:
    """The extended resources the pod's containers (init containers too) ask for."""
    spec = pod.get("spec") or {}
    out: set[str] = set()
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            res = (c or {}).get("resources") or {}
            for part in ("limits", "requests"):
                out.update(str(k) for k in (res.get(part) or {}))
    return frozenset(out)


def _order(pod: Pod) -> tuple[str, int, str, str, str]:
    """The order the kubelet sees pods arrive in: bound first, arrives first.

    The kubelet admits pods one at a time in the order its watch delivers them, i.e. the order
    of the writes that bound them. PodScheduled's time (1 s resolution) orders across seconds;
    within one, the pod's resourceVersion does: an unclaimed pod's last write is normally its
    bind (nothing else writes a pod between bind and admission). Then creation time, name.
    """
    md = pod.get("metadata", {})
    scheduled = ""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            scheduled = c.get("lastTransitionTime") or ""
    rv = str(md.get("resourceVersion") or "")
    return (scheduled, int(rv) if rv.isdigit() else 0, md.get("creationTimestamp") or "",
            md.get("namespace", ""), md.get("name", ""))


def candidates(pods: Iterable[Pod], node: str, resource: str, inventory: Inventory,
               resource_ids: set[str]) -> tuple[list[Candidate], list[Rejected]]:
    """Pods of `node` that wait for (or already hold) devices of `resource`, in admit order."""
    by_index = {d.index: d for d in inventory.devices}
    by_uuid = {d.uuid: d for d in inventory.devices if d.uuid}
    found: list[Candidate] = []
    rejected: list[Rejected] = []
    for pod in pods:
        md = pod.get("metadata") or {}
        ref = f"{md.get('namespace', '')}/{md.get('name', '')}"
        ann = md.get("annotations") or {}
        if ALLOCATION not in ann or md.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in _TERMINAL:
            continue
        try:
            alloc = decode_allocation(ann[ALLOCATION])
        except AnnotationError as exc:
            rejected.append(Rejected(ref, str(exc)))
            continue
        if alloc.node != node:
            rejected.append(Rejected(ref, f"{ALLOCATION}: node is {alloc.node!r} but the pod is "
                                          f"bound to {node!r}"))
            continue
        slices: list[tuple[str, AllocatedDevice]] = []
        asks = _asks(pod)
        try:
            for i, d in enumerate(alloc.devices):
                res, key = _slice_key(node, by_index, by_uuid, d, i, asks)
                if res == resource:
                    slices.append((key, d))
        except ValueError as exc:
            rejected.append(Rejected(ref, f"{ALLOCATION}: {exc}"))
            continue
        if not slices:
            continue
        try:
            caps = capabilities_of(pod)
        except CapabilityError as exc:
            rejected.append(Rejected(ref, str(exc)))
            continue
        allocated: tuple[str, ...] = ()
        if ALLOCATED in ann:
            try:
                allocated = tuple(decode_allocated(ann[ALLOCATED])[0])
            except AnnotationError as exc:
                rejected.append(Rejected(ref, str(exc)))
                continue
        slices.sort(key=lambda s: s[0])
        found.append(Candidate(
            namespace=md.get("namespace", ""), name=md.get("name", ""), uid=md.get("uid", ""),
            resource_version=md.get("resourceVersion", ""), order=_order(pod),
            wanted=tuple(k for k, _ in slices), slices=tuple(slices),
            claimed_ids=tuple(sorted(i for i in allocated if i in resource_ids)),
            allocated_ids=allocated, trust_tier=ann.get("gpugov.io/trust-tier"),
            driver_capabilities=caps))
    found.sort(key=lambda c: c.order)
    return found, rejected


def matching(cands: Sequence[Candidate], request: Sequence[PluginDevice]) -> list[Candidate]:
    """Candidates this Allocate can be for: a re-Allocate of the same IDs first, then pods
    whose devices equal the kubelet's, in admit order."""
    ids = tuple(sorted(d.id for d in request))
    keys = tuple(sorted(d.key for d in request))
    again = [c for c in cands if c.claimed_ids == ids]
    fresh = [c for c in cands if not c.claimed_ids and c.wanted == keys]
    return again + fresh


def preferred_ids(cands: Sequence[Candidate], available: Sequence[PluginDevice],
                  must_include: Sequence[str], size: int) -> list[str]:
    """GetPreferredAllocation: steer the kubelet to the next waiting pod's devices."""
    must = set(must_include)
    for c in cands:
        if c.claimed_ids or len(c.wanted) != size:
            continue
        need = Counter(c.wanted)
        chosen: list[str] = []
        # must_include first, then the lowest free replica of each wanted device
        for d in sorted(available, key=lambda d: (d.id not in must, _replica(d.id))):
            if need[d.key] > 0 and d.healthy:
                need[d.key] -= 1
                chosen.append(d.id)
        if not +need and must <= set(chosen):
            return chosen
    return _by_topology(available, must_include, size)


def _replica(device_id: str) -> int:
    _, _, n = device_id.partition("::")
    return int(n) if n.isdigit() else 0


def _by_topology(available: Sequence[PluginDevice], must_include: Sequence[str],
                 size: int) -> list[str]:
    """No pod waits for this shape: the best-connected set (NVLink, then PCIe, then NUMA)."""
    by_key: dict[str, list[PluginDevice]] = {}
    for d in sorted(available, key=lambda d: (d.index, _replica(d.id))):
        by_key.setdefault(d.key, []).append(d)
    must_keys = [d.key for d in available if d.id in set(must_include)]
    if len(by_key) >= size and len(set(must_keys)) == len(must_keys):
        topo = {k: devs[0].topology for k, devs in by_key.items()}
        keys = preferred_allocation(topo, list(by_key), must_keys, size)
        if len(keys) == size:
            picked = {d.key: d.id for d in available if d.id in set(must_include)}
            return [picked.get(k) or by_key[k][0].id for k in keys]
    return list(must_include)
