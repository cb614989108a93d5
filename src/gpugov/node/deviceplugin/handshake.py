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

A pod with several containers asking for the resource (init containers included) gets one
Allocate per container, in the kubelet's admission order (`k8s.pod_containers`): the next
container's Allocate takes devices of the pod's record that no container running beside it
holds (`next_step`, `held_keys`), an init container's devices are handed on by the kubelet, and
`gpugov.io/allocated` records which container got which IDs (docs/device-plugin.md).

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
    ContainerClaim,
    Inventory,
    InventoryDevice,
    decode_allocated,
    decode_allocated_containers,
    decode_allocation,
)
from gpugov.k8s.driver_capabilities import DEFAULT as DEFAULT_CAPABILITIES
from gpugov.k8s.driver_capabilities import CapabilityError
from gpugov.k8s.driver_capabilities import of_containers as container_capabilities
from gpugov.k8s.driver_capabilities import of_pod as capabilities_of
from gpugov.k8s.pod_containers import Step, effective, resource_steps
from gpugov.model.devices import DeviceMode
from gpugov.node.deviceplugin.pods import Pod
from gpugov.node.deviceplugin.resources import (
    GPU,
    MPS,
    REPLICA_SEP,
    SHARED,
    PluginDevice,
    mig_resource,
)
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
    #: NVIDIA_DRIVER_CAPABILITIES its GPU containers ask for together (k8s.driver_capabilities)
    driver_capabilities: str = DEFAULT_CAPABILITIES
    #: each GPU container's own value, (name, value), for a pod with several
    container_capabilities: tuple[tuple[str, str], ...] = ()
    #: its containers that ask for this resource, in admission order (several: one Allocate each)
    steps: tuple[Step, ...] = ()
    #: which of those containers got which IDs so far (this resource), in order
    claims: tuple[ContainerClaim, ...] = ()
    #: every container record of its gpugov.io/allocated (all resources), rewritten on a claim
    all_claims: tuple[ContainerClaim, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def multi(self) -> bool:
        """Several of its containers ask for this resource: one Allocate per container."""
        return len(self.steps) > 1

    @property
    def partial(self) -> bool:
        """Some but not all of its containers got their devices (the kubelet admits it now)."""
        return self.multi and 0 < len(self.claims) < len(self.steps)


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
            own = tuple(sorted(container_capabilities(pod).items()))
        except CapabilityError as exc:
            rejected.append(Rejected(ref, str(exc)))
            continue
        allocated: tuple[str, ...] = ()
        records: tuple[ContainerClaim, ...] = ()
        if ALLOCATED in ann:
            try:
                allocated = tuple(decode_allocated(ann[ALLOCATED])[0])
                records = tuple(decode_allocated_containers(ann[ALLOCATED]))
            except AnnotationError as exc:
                rejected.append(Rejected(ref, str(exc)))
                continue
        steps = tuple(resource_steps(pod, resource))
        need = effective((s.kind, s.size) for s in steps)
        if len(steps) > 1 and need > len(slices):
            rejected.append(Rejected(ref, f"{ALLOCATION}: {len(slices)} {resource} devices for "
                                          f"containers that hold {need} at once"))
            continue
        slices.sort(key=lambda s: s[0])
        found.append(Candidate(
            namespace=md.get("namespace", ""), name=md.get("name", ""), uid=md.get("uid", ""),
            resource_version=md.get("resourceVersion", ""), order=_order(pod),
            wanted=tuple(k for k, _ in slices), slices=tuple(slices),
            claimed_ids=tuple(sorted(i for i in allocated if i in resource_ids)),
            allocated_ids=allocated, trust_tier=ann.get("gpugov.io/trust-tier"),
            driver_capabilities=caps, container_capabilities=own,
            steps=steps if len(steps) > 1 else (),
            claims=tuple(r for r in records if r.resource == resource), all_claims=records))
    found.sort(key=lambda c: c.order)
    return found, rejected


def key_of(device_id: str) -> str:
    """The device (GPU or MIG UUID) a kubelet ID stands for."""
    return device_id.split(REPLICA_SEP, 1)[0]


def next_step(c: Candidate) -> Step | None:
    """The container of a several-container pod whose Allocate comes next (None: all done)."""
    return c.steps[len(c.claims)] if c.multi and len(c.claims) < len(c.steps) else None


def held_keys(c: Candidate) -> set[str]:
    """Devices of the pod that containers running beside the next one hold: the app
    containers' and sidecars' claimed so far (a regular init container's are handed on)."""
    out: set[str] = set()
    for step, claim in zip(c.steps, c.claims, strict=False):
        if step.holds:
            out.update(key_of(i) for i in claim.device_ids)
    return out


def fits_next(c: Candidate, request: Sequence[PluginDevice]) -> bool:
    """The kubelet's devices can be the next container's: its size, distinct devices of the
    pod's record, none held by a container running beside it."""
    step = next_step(c)
    keys = [d.key for d in request]
    return (step is not None and len(request) == step.size and len(set(keys)) == len(keys)
            and set(keys) <= set(c.wanted) and not set(keys) & held_keys(c))


def repeated(c: Candidate, request: Sequence[PluginDevice]) -> ContainerClaim | None:
    """The container claim of a several-container pod these exact IDs repeat (a retry)."""
    ids = tuple(sorted(d.id for d in request))
    return next((cl for cl in c.claims if tuple(sorted(cl.device_ids)) == ids), None)


def matching(cands: Sequence[Candidate], request: Sequence[PluginDevice]) -> list[Candidate]:
    """Candidates this Allocate can be for: the next container of a pod the kubelet is
    admitting (some of its containers got devices) first, then a re-Allocate of the same IDs,
    then pods whose devices equal the kubelet's (or whose first container they fit), in admit
    order."""
    ids = tuple(sorted(d.id for d in request))
    keys = tuple(sorted(d.key for d in request))
    admitting = [c for c in cands if c.partial and fits_next(c, request)]
    again = [c for c in cands if (c.claimed_ids == ids and not c.multi)
             or (c.multi and repeated(c, request) is not None)]
    fresh = [c for c in cands if not c.claimed_ids and not c.claims
             and (fits_next(c, request) if c.multi else c.wanted == keys)]
    out: list[Candidate] = []
    for c in admitting + again + fresh:
        if c not in out:
            out.append(c)
    return out


def preferred_ids(cands: Sequence[Candidate], available: Sequence[PluginDevice],
                  must_include: Sequence[str], size: int) -> list[str]:
    """GetPreferredAllocation: steer the kubelet to the next waiting pod's devices."""
    must = set(must_include)
    for c in sorted(cands, key=lambda c: not c.partial):  # the pod being admitted first
        if c.multi:
            chosen = _next_ids(c, available, must_include, size)
            if chosen:
                return chosen
            continue
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


def _next_ids(c: Candidate, available: Sequence[PluginDevice], must_include: Sequence[str],
              size: int) -> list[str]:
    """The next container's IDs: `must_include` (devices the kubelet hands on from an init
    container) plus the lowest free replica of devices of the pod's record no container
    beside it holds; [] when the next container is not of this size or they do not fit."""
    step = next_step(c)
    if step is None or step.size != size:
        return []
    free = set(c.wanted) - held_keys(c)
    must_keys = [key_of(i) for i in must_include]
    if not set(must_keys) <= free or len(set(must_keys)) != len(must_keys):
        return []
    chosen, used = list(must_include), set(must_keys)
    for d in sorted(available, key=lambda d: (d.index, d.mig_start or 0, _replica(d.id))):
        if len(chosen) == size:
            break
        if d.healthy and d.key in free and d.key not in used and d.id not in chosen:
            chosen.append(d.id)
            used.add(d.key)
    return chosen if len(chosen) == size else []


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
