"""What the API says is held, put into the engine's state, and what a decision writes back.

Shared by the scheduler and the extender, so both read and write the one record the same way:
- `recorded_allocation`: the engine's `Allocation` for a bound pod's `gpugov.io/allocation`
  (a MIG pod re-occupies the instance its record names, not a new one);
- `close_nodes`: nodes that take no new pod (not Ready, cordoned, an unreadable taint) and
  devices that take none (unhealthy, being re-partitioned), whatever the device's mode;
- `allocation_record`: the record of a decision (docs/contracts.md), describing exactly what
  the state charged: the MIG instance with its UUID, the replica, the memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpugov.k8s.annotations import AllocatedDevice
from gpugov.k8s.annotations import Allocation as AllocationRecord
from gpugov.k8s.scheduler.translate import NodeInfo
from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import MODE_CODE, ClusterState
from gpugov.model.constraints import Toleration
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.model.mig_table import mig_table
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.engine import allocation_for

#: name of the placeholders that hold a blocked device's free capacity in the state
BLOCKED_DEVICE = "(blocked device)"

_CODE_MODE = {code: mode for mode, code in MODE_CODE.items()}
#: placeholders hold devices of tainted nodes too (gpugov's own DRA taint is named by key)
_ANY_TAINT = (Toleration(operator="Exists"), Toleration("internal.gpugov.io/dra", "Exists"))


def device_mode(state: ClusterState, node: int, device: int) -> DeviceMode:
    return _CODE_MODE[int(state.dev_mode[node, device])]


def recorded_allocation(state: ClusterState, req: PodRequest, node: int,
                        record: AllocationRecord) -> Allocation:
    """The engine's allocation for a recorded one: the record's devices, the charge of
    `req` there (`placement.engine.allocation_for`) and, for a MIG pod, the recorded
    instances' starts (one entry per instance; a time-sliced instance's replica: that
    instance). ValueError when the record cannot be the request's (e.g. another MIG profile
    than the pod asks for, or another number of instances)."""
    devices = tuple(d.index for d in record.devices)
    if not req.mig_profile or not devices:
        return allocation_for(state, req, node, devices)
    for d in record.devices:
        if d.mig_profile != req.mig_profile or d.mig_start is None:
            raise ValueError(f"{req.name}: the record names MIG instance {d.mig_profile}@"
                             f"{d.mig_start}, the pod asks for {req.mig_profile}")
        if (d.mig_replicas > 1) != req.mig_shared:
            raise ValueError(f"{req.name}: the record names a "
                             f"{'replica of ' if d.mig_replicas > 1 else ''}MIG instance "
                             f"{d.mig_profile}@{d.mig_start}, the pod asks for "
                             f"{'a replica' if req.mig_shared else 'an instance'}")
    if len(devices) != req.gpu_count:
        raise ValueError(f"{req.name}: the record names {len(devices)} MIG instances, the pod "
                         f"asks for {req.gpu_count}")
    starts = tuple(int(d.mig_start or 0) for d in record.devices)
    milli, memory = state.charge(req, node, devices[0], starts[0])
    return Allocation(node, devices, milli, memory, mig_starts=starts)


def close_nodes(state: ClusterState, infos: Sequence[NodeInfo]) -> list[str]:
    """Keep new pods off unschedulable nodes and blocked devices; the pods already there keep
    their place. Returns problems (a blocked device the state would not hold)."""
    problems = []
    for i, n in enumerate(infos):
        if not n.schedulable:
            state.cpu_free[i] = -1  # no new pod fits; pods already there keep their place
            state.version[i] += 1
        for d in n.blocked:
            try:
                _hold(state, i, d)
            except ValueError as e:
                problems.append(f"node {n.name}: device {d} is blocked but its free room "
                                f"could not be held ({e}); it may take new pods")
    return problems


def hold_unknown(state: ClusterState, i: int, named: Sequence[int],
                 count: int | None) -> tuple[int, ...]:
    """Hold, on node `i`, what a bound pod whose devices gpugov does not know may be using;
    returns the devices held.

    Every device its record names (what is left of them: it may be on them), then untouched
    devices until `count` untouched ones are held for it (it may be on others: a record can
    be edited, and a pod bound without one got devices gpugov never chose); when the node
    has too few untouched devices, or `count` is None (its request cannot be read), what
    is left of every device of the node. Conservative on purpose: waiting costs a pending
    pod time, a device given twice costs two pods their isolation."""
    n = int(state.gpu_count[i])
    mine = [d for d in dict.fromkeys(named) if 0 <= d < n]
    held: list[int] = []
    got = 0
    for d in mine:
        got += int(state.dev_pods[i, d] == 0)
        _hold(state, i, d)
        held.append(d)
    want = n if count is None else max(int(count), 0)
    for d in range(n):
        if got >= want:
            break
        if d not in held and state.dev_pods[i, d] == 0:
            _hold(state, i, d)
            held.append(d)
            got += 1
    if got < want:
        for d in range(n):
            if d not in held:
                _hold(state, i, d)
                held.append(d)
    return tuple(sorted(held))


def _hold(state: ClusterState, i: int, d: int) -> None:
    """Take what is left of device `d` of node `i` with placeholders, by its mode."""
    mode = device_mode(state, i, d)
    left = int(state.gpu_free[i, d])
    if mode is DeviceMode.MIG:
        model = state.nodes[i].model
        table = mig_table(model)
        if state.mig_fixed[i, d]:
            free = int(state.mig_layout_free[i, d])
            spots = [table.placements[k] for k in range(len(table.placements)) if free >> k & 1]
        else:  # dynamic: the whole device's instance, or whatever still fits, largest first
            spots = sorted(table.placements, key=lambda p: -p.compute_slices)
        for pl in spots:
            req = PodRequest(BLOCKED_DEVICE, 0, 0, 1, table.milli(pl.profile), (model,),
                             mode=DeviceMode.MIG, mig_profile=pl.profile,
                             tolerations=_ANY_TAINT)
            if state.device_fits(req, i)[d]:
                milli, mem = state.charge(req, i, d)
                state.allocate(req, Allocation(i, (d,), milli, mem, pl.start))
        for (n, dev, k), entry in list(state.mig_shared.items()):  # time-sliced instances
            if (n, dev) != (i, d):
                continue
            pl = table.placements[k]
            for _ in range(entry[1]):  # every free replica, uncapped (or what memory is left)
                req = PodRequest(BLOCKED_DEVICE, 0, 0, 1, 1, (model,), mode=DeviceMode.TIMESLICE,
                                 mig_profile=pl.profile, tolerations=_ANY_TAINT,
                                 oversubscribe=not entry[4],
                                 gpu_memory_mib=0 if not entry[4] else max(
                                     entry[2] // max(entry[1], 1), 1))
                if entry[4] and entry[2] < req.gpu_memory_mib:
                    break
                milli, mem = state.charge(req, i, d, pl.start)
                state.allocate(req, Allocation(i, (d,), milli, mem, pl.start))
        return
    if mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
        reps = int(state.rep_cap[i, d])
        for _ in range(int(state.rep_free[i, d])):
            req = PodRequest(BLOCKED_DEVICE, 0, 0, 1, MILLI_PER_GPU // reps, mode=mode,
                             oversubscribe=True, tolerations=_ANY_TAINT)
            if not state.device_fits(req, i)[d]:
                # an uncapped placeholder may not join replicas that need soft isolation:
                # hold the replica with what memory is left (none left: nothing can join)
                left_mem = int(state.gpu_mem_free[i, d]) // max(int(state.rep_free[i, d]), 1)
                if left_mem < 1:
                    return
                req = dataclasses.replace(req, oversubscribe=False, gpu_memory_mib=left_mem)
            milli, mem = state.charge(req, i, d)
            state.allocate(req, Allocation(i, (d,), milli, mem))
        return
    if left >= MILLI_PER_GPU:  # a free soft or exclusive device: held whole
        req = PodRequest(BLOCKED_DEVICE, 0, 0, 1, MILLI_PER_GPU, tolerations=_ANY_TAINT)
        state.allocate(req, allocation_for(state, req, i, (d,)))
    elif left > 0 and mode is DeviceMode.SOFT:
        mem = int(state.gpu_mem_free[i, d])
        req = PodRequest(BLOCKED_DEVICE, 0, 0, 1, left, gpu_memory_mib=mem,
                         tolerations=_ANY_TAINT)
        state.allocate(req, Allocation(i, (d,), left, mem))


def allocation_record(node: NodeInfo, state: ClusterState | None, node_index: int,
                      req: PodRequest, own_milli: int, alloc: Allocation,
                      request_mode: DeviceMode, *, compute_stated: bool = True,
                      priority: int | None = None) -> AllocationRecord:
    """The durable record for a placement (docs/contracts.md, `gpugov.io/allocation`).

    Per device: `mode` is the device's mode on a node with an inventory (what the device
    plugin serves it as: a whole GPU on a soft device is `soft` with 1000 milli), else the
    request's; a MIG instance carries its profile, start and UUID; `milli` and `memoryMiB`
    are what the state charged — a whole device's card memory, a MIG profile's share and
    memory, a time-slice or MPS replica's share and memory (0 MiB for an oversubscribing
    time-slice replica: the device plugin caps it at nothing) — except that a soft slice keeps
    the pod's own compute share (`own_milli`: an untrusted tenant's slice holds a device of
    its own but is limited to what it asked for) and, when it named no memory, the
    compute share's part of the card.

    `compute_stated` False (the GpuRequest's `milli` is None: a memory-only slice) marks a
    soft slice's entry `compute_limited=False`: its `milli` is what placement and quotas
    charged, and the device plugin passes no compute cap. `priority` (HAMi's task priority)
    goes on every entry for the device plugin to pass on.
    """
    if not alloc.devices:
        return AllocationRecord(node.name, IsolationLevel.NONE, ())
    card = node.card_memory_mib
    inventory = bool(node.spec.devices)
    slice_mode = req.slice_mode
    devices = []
    for d in alloc.devices:
        mode = device_mode(state, node_index, d) if inventory and state is not None \
            else (DeviceMode.EXCLUSIVE if slice_mode is DeviceMode.EXCLUSIVE else request_mode)
        uuid = node.uuids[d] if d < len(node.uuids) else ""
        if slice_mode is DeviceMode.MIG or req.mig_shared:
            continue
        if slice_mode is DeviceMode.TIMESLICE:  # 0 MiB: oversubscribing, not capped
            share, mem = alloc.milli, alloc.memory_mib
        elif slice_mode is DeviceMode.MPS:
            share, mem = alloc.milli, alloc.memory_mib or card
        elif slice_mode is DeviceMode.EXCLUSIVE and own_milli >= MILLI_PER_GPU:
            share, mem = MILLI_PER_GPU, card
        else:  # a soft slice (an untrusted one holds its device whole, limited to its ask)
            share = own_milli
            mem = alloc.memory_mib if alloc.memory_mib and alloc.milli < MILLI_PER_GPU \
                else req.gpu_memory_mib or card * share // MILLI_PER_GPU
        limited = compute_stated or share >= MILLI_PER_GPU
        devices.append(AllocatedDevice(d, mode, share, int(mem), uuid,
                                       compute_limited=limited, priority=priority))
    for d, start in alloc.instances:  # MIG instances, or the time-sliced instance of a replica
        uuid = node.uuids[d] if d < len(node.uuids) else ""
        reps = 1
        if req.mig_shared and state is not None:
            k = mig_table(node.spec.model).number(req.mig_profile, start)
            reps = state.mig_shared[(node_index, d, k)][0]
        devices.append(AllocatedDevice(
            d, DeviceMode.MIG, alloc.milli, alloc.memory_mib, uuid, req.mig_profile, start,
            node.mig_uuids.get((d, req.mig_profile, start), ""), mig_replicas=reps,
            priority=priority))
    if slice_mode in (DeviceMode.EXCLUSIVE, DeviceMode.MIG):
        isolation = IsolationLevel.HARD
    elif slice_mode is DeviceMode.TIMESLICE and req.oversubscribe:
        isolation = IsolationLevel.NONE
    else:
        isolation = slice_mode.isolation
    return AllocationRecord(node.name, isolation, tuple(devices))
