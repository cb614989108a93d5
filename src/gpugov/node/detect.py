"""Bypass, zombie and driver-overhead detection: NVML's per-process memory against the regions.

- accounted: an NVML process that a pod region has registered. The region file is writable by
  the container, so its slots only *name* candidates (container PID and start time); the host
  side decides (`verified_host`): the host process with that PID and start time must be in the
  region's own pod (cgroup) and hold the region file open. The slot's `host_pid` field is
  never read, so a container can neither hide its bypassing processes behind forged slots nor
  take another pod's processes (and their memory) as its own.
- unaccounted (bypass): memory of a live process no region accounts for, on a device where
  accounted processes run (a shared, governed GPU) or inside a pod that has a region. That is a
  process which escaped the library (static CUDA, cleared LD_PRELOAD, raw ioctl).
  Processes of pods without a region on GPUs nobody shares (whole GPUs) are not bypass.
- zombie: memory NVML still reports for a PID that no longer exists, or for a pod that is gone
  (when the caller knows the live pods).
- driver overhead: NVML's bytes minus what the library charged, summed over accounted
  processes of a device (contexts, page tables: what a soft slice costs beyond its limit).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from gpugov.node.nvml.samples import DeviceSample
from gpugov.node.pod_regions import PodRegion
from gpugov.node.procs import ProcTable
from gpugov.node.region import Slot


@dataclass(frozen=True, slots=True)
class ProcessFinding:
    gpu: int
    uuid: str
    pid: int
    bytes: int
    namespace: str = ""
    pod: str = ""


@dataclass
class Findings:
    unaccounted: list[ProcessFinding] = field(default_factory=list)
    zombie: list[ProcessFinding] = field(default_factory=list)
    overhead: dict[int, int] = field(default_factory=dict)  # gpu index -> bytes
    # (region index, ordinal) -> (gpu index, uuid): where each region device really is
    placement: dict[tuple[int, int], tuple[int, str]] = field(default_factory=dict)


def _charged(slot: Slot, ordinals: dict[int, int], gpu: int) -> int:
    """Bytes the library charged `slot` on host GPU `gpu`."""
    if ordinals:
        k = ordinals.get(gpu)
        return slot.used[k] if k is not None and k < len(slot.used) else 0
    return sum(slot.used)


def nvml_pids(samples: Sequence[DeviceSample]) -> set[int]:
    """The PIDs NVML lists on any device: the only ones /proc must be read for."""
    return {p.pid for s in samples for p in s.processes or ()}


def detect(samples: Sequence[DeviceSample], regions: Sequence[PodRegion], procs: ProcTable,
           live_pods: Collection[str] | None = None) -> Findings:
    """Compare NVML's processes with the regions; `live_pods` = UIDs of pods that exist.
    `procs` must cover at least `nvml_pids(samples)`."""
    f = Findings()
    uuid_to_gpu = {s.uuid: s.index for s in samples if s.uuid}
    accounted: dict[int, tuple[int, Slot]] = {}
    for ri, r in enumerate(regions):
        for slot in r.region.slots:
            host = verified_host(procs, r, slot)
            if host:
                accounted[host] = (ri, slot)
        for k, u in enumerate(r.device_uuids):
            if u in uuid_to_gpu:
                f.placement[ri, k] = (uuid_to_gpu[u], u)
    region_uids = {r.uid for r in regions}
    # where each accounted process runs, to map its region's ordinals to host GPUs
    seen_on: dict[int, list[int]] = defaultdict(list)
    for s in samples:
        for p in s.processes or ():
            if p.pid in accounted:
                seen_on[p.pid].append(s.index)
    governed = {g for gpus in seen_on.values() for g in gpus}
    for s in samples:
        if s.processes is None:
            continue
        overhead = 0
        for p in s.processes:
            used = p.used_bytes or 0
            if p.pid in accounted:
                ri, slot = accounted[p.pid]
                explicit = {k: g for (r2, k), (g, _) in f.placement.items() if r2 == ri}
                if explicit:
                    ordinals = {g: k for k, g in explicit.items()}
                else:
                    gpus = sorted(seen_on[p.pid])
                    nonzero = [k for k, b in enumerate(slot.used) if b]
                    ordinals = dict(zip(gpus, nonzero, strict=False)) if len(gpus) > 1 else {}
                    for g, k in ordinals.items():
                        f.placement.setdefault((ri, k), (g, s.uuid if g == s.index else ""))
                    if len(gpus) == 1:
                        for k in nonzero or [0]:
                            f.placement.setdefault((ri, k), (s.index, s.uuid))
                if p.used_bytes is not None:
                    overhead += used - _charged(slot, ordinals, s.index)
                continue
            pod_uid = procs.pod_uid(p.pid)
            owner = next((r for r in regions if r.uid == pod_uid), None)
            finding = ProcessFinding(s.index, s.uuid, p.pid, used,
                                     owner.namespace if owner else "", owner.pod if owner else "")
            if p.pid not in procs.alive or (
                    live_pods is not None and pod_uid is not None and pod_uid not in live_pods):
                f.zombie.append(finding)
            elif s.index in governed or (pod_uid is not None and pod_uid in region_uids):
                f.unaccounted.append(finding)
        if s.index in governed:
            f.overhead[s.index] = overhead
    return f


def verified_host(procs: ProcTable, region: PodRegion, slot: Slot) -> int | None:
    """The host process a slot stands for, checked from the host side, or None.

    Candidates are the host processes with the slot's container PID and start time; one is
    accepted when its cgroup names the region's pod and it holds the region file open (the
    library keeps it open for its liveness lock). A process in no pod (a host process, as in
    tests) has no pod to check and is matched by PID and start time alone."""
    for host in procs.host_pids(slot.pid, slot_start(region, slot)):
        pod = procs.pod_uid(host)
        if pod is None or (pod == region.uid and procs.holds_file(host, region.path)):
            return host
    return None


def slot_start(region: PodRegion, slot: Slot) -> int:
    """The start time the library recorded for a slot (0 when the layout has none)."""
    return (region.start_ticks or {}).get(slot.index, 0)
