"""Apply a mig-parted layout to the GPUs of this node through NVML, idle GPUs only.

`plan_changes` validates the whole config against what each GPU's driver offers (unknown
profile, layout that cannot be placed) before anything is touched; `apply_change` then, for one
GPU: refuses when any process runs on it (NVML per-process list, parent and MIG devices),
switches MIG mode when needed, destroys the old compute and GPU instances and creates the new
ones at placements found by the model's MIG search (`model.mig.find_placement`, largest profile
first), each with its whole-instance compute instance.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from dataclasses import dataclass, field

import pynvml

from gpugov.model.mig import MigGeometry, MigProfile, find_placement, why_not
from gpugov.node.mig_config import MigEntry
from gpugov.node.nvml.discovery import GpuInfo, NodeGpus, mig_profiles
from gpugov.node.nvml.library import Nvml

# whole-instance compute-instance profile index by compute slices (NVML constants)
_CI_INDEX = {1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
             2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
             3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
             4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
             6: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
             7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
             8: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE}


@dataclass(frozen=True, slots=True)
class Change:
    """What one GPU must become."""

    index: int
    uuid: str
    enable: bool
    layout: tuple[str, ...]  # profile names; empty with enable=False


@dataclass(frozen=True, slots=True)
class GpuOutcome:
    index: int
    state: str  # "applied" | "unchanged" | "refused" | "failed"
    message: str = ""


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    unchanged: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # config problems: nothing is applied


def _handle(index: int) -> object:
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def _geometry(model: str, profiles: list) -> MigGeometry:
    slices = max((s + p.memory_slices for p in profiles for s in p.starts), default=0)
    compute = max((p.compute_slices for p in profiles), default=0)
    return MigGeometry(model, slices, compute, tuple(
        MigProfile(p.name, p.profile_id, p.memory_slices, p.compute_slices,
                   p.memory_mib / 1024, p.sms, p.starts, p.max_count,
                   media_extensions="+me" in p.name) for p in profiles if p.starts))


def runtime_geometry(nv: Nvml, gpu: GpuInfo) -> MigGeometry | None:
    """The GPU's MIG geometry as its driver reports it (None: not MIG-capable)."""
    h = _handle(gpu.index)
    if not gpu.mig_capable:
        return None
    if not gpu.mig_enabled:
        # profiles are only listed with MIG on; the catalog's table stands in until then
        from gpugov.model.mig import get_geometry
        try:
            return get_geometry(gpu.model)
        except KeyError:
            return None
    return _geometry(gpu.model, mig_profiles(nv, h, gpu.model))


def plan_changes(nv: Nvml, node: NodeGpus, entries: list[MigEntry]) -> Plan:
    plan = Plan()
    for gpu in node.gpus:
        entry = next((e for e in entries if e.matches(gpu.index, gpu.pci_device_id)), None)
        if entry is None:
            continue
        layout = tuple(entry.layout())
        where = f"GPU {gpu.index} ({gpu.model})"
        if not gpu.mig_capable:
            if entry.enabled:
                plan.errors.append(f"{where} is not MIG-capable; the config enables MIG on it")
            continue
        if entry.enabled:
            geo = runtime_geometry(nv, gpu)
            if geo is None:
                plan.errors.append(f"{where}: no MIG geometry known")
                continue
            known = geo.profile_names()
            bad = sorted(set(layout) - set(known))
            if bad:
                plan.errors.append(f"{where}: unknown MIG profile {', '.join(map(repr, bad))}; "
                                   f"allowed: {', '.join(known)}")
                continue
            if find_placement(geo, layout) is None:
                plan.errors.append(f"{where}: {' + '.join(layout)} does not fit: "
                                   f"{why_not(geo, layout)}")
                continue
        current = Counter(m.profile for m in gpu.mig)
        if gpu.mig_enabled == entry.enabled and current == Counter(layout):
            plan.unchanged.append(gpu.index)
        else:
            plan.changes.append(Change(gpu.index, gpu.uuid, entry.enabled, layout))
    return plan


def busy_pids(nv: Nvml, index: int) -> list[int]:
    """PIDs with work on the GPU or any of its MIG devices (NVML's per-process lists)."""
    h = _handle(index)
    pids: set[int] = set()
    for p in nv.first(("nvmlDeviceGetComputeRunningProcesses_v3", (h,)),
                      (pynvml.nvmlDeviceGetComputeRunningProcesses_v2, (h,))) or ():
        pids.add(int(p.pid))
    mode = nv.query(pynvml.nvmlDeviceGetMigMode, h)
    if mode and mode[0]:
        for i in range(nv.query(pynvml.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
            m = nv.query(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            if m is None:
                continue
            for p in nv.first(("nvmlDeviceGetComputeRunningProcesses_v3", (m,)),
                              (pynvml.nvmlDeviceGetComputeRunningProcesses_v2, (m,))) or ():
                pids.add(int(p.pid))
    return sorted(pids)


def _destroy_all(h: object, profiles: list) -> None:
    for p in profiles:
        arr = (pynvml.c_nvmlGpuInstance_t * max(p.max_count, 1))()
        n = ctypes.c_uint(len(arr))
        pynvml.nvmlDeviceGetGpuInstances(h, p.profile_id, arr, ctypes.byref(n))
        for i in range(n.value):
            gi = arr[i]
            for ci_index in sorted(set(_CI_INDEX.values())):
                cis = (pynvml.c_nvmlComputeInstance_t * 8)()
                cn = ctypes.c_uint(len(cis))
                try:
                    pynvml.nvmlGpuInstanceGetComputeInstances(gi, ci_index, cis, ctypes.byref(cn))
                except pynvml.NVMLError:
                    continue
                for k in range(cn.value):
                    pynvml.nvmlComputeInstanceDestroy(cis[k])
            pynvml.nvmlGpuInstanceDestroy(gi)


def apply_change(nv: Nvml, change: Change, model: str = "") -> GpuOutcome:
    """Make one GPU match `change`; refuses a busy GPU without touching it."""
    i = change.index
    pids = busy_pids(nv, i)
    if pids:
        return GpuOutcome(i, "refused", f"GPU {i} is busy: {len(pids)} process(es) "
                                        f"(PIDs {', '.join(map(str, pids[:5]))})")
    h = _handle(i)
    try:
        mode = pynvml.nvmlDeviceGetMigMode(h)[0]
        if mode:
            _destroy_all(h, mig_profiles(nv, h, model))
        if bool(mode) != change.enable:
            pynvml.nvmlDeviceSetMigMode(h, int(change.enable))
        if not change.enable:
            return GpuOutcome(i, "applied", f"GPU {i}: MIG disabled")
        profiles = mig_profiles(nv, h, model)
        geo = _geometry(model, profiles)
        placed = find_placement(geo, change.layout)
        if placed is None:  # validated before; only a driver that changed its mind gets here
            return GpuOutcome(i, "failed", f"GPU {i}: {why_not(geo, change.layout)}")
        by_name = {p.name: p for p in profiles}
        for inst in placed:
            p = by_name[inst.profile]
            place = pynvml.c_nvmlGpuInstancePlacement_t()
            place.start, place.size = inst.start, p.memory_slices
            gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, p.profile_id,
                                                                 ctypes.byref(place))
            pynvml.nvmlGpuInstanceCreateComputeInstance(gi, _CI_INDEX[p.compute_slices])
    except pynvml.NVMLError as exc:
        if exc.value == pynvml.NVML_ERROR_IN_USE:
            return GpuOutcome(i, "refused", f"GPU {i} is busy: the driver says in use ({exc})")
        return GpuOutcome(i, "failed", f"GPU {i}: NVML refused the change: {exc}")
    layout = " + ".join(f"{m.profile}@{m.start}" for m in placed)
    return GpuOutcome(i, "applied", f"GPU {i}: {layout}")
