"""What GPUs a node has, read from NVML: models, memory, MIG layout, topology, NUMA, power.

`discover()` returns plain frozen values (`NodeGpus`); the agent turns them into GFD labels
and the `gpugov.io/inventory` annotation, the device plugin reads them through
`NvmlDeviceSource`. Values a driver cannot give are left at their defaults (None / empty).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path

import pynvml

from gpugov.model.catalog import CATALOG
from gpugov.model.mig import get_geometry
from gpugov.node.nvml.library import MEMORY_V2, GpuLost, Nvml

TOPOLOGY_PCIE_SWITCH = pynvml.NVML_TOPOLOGY_MULTIPLE  # at or below: behind one PCIe switch
NVLINK_MAX_LINKS = 18
# NVML profile index constants, in the order mig-parted enumerates them
PROFILE_INDEXES = range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)
SYSFS_PCI = Path("/sys/bus/pci/devices")


@dataclass(frozen=True, slots=True)
class MigProfileInfo:
    """One GPU-instance profile as the driver reports it (runtime geometry)."""

    name: str  # "1g.10gb"
    profile_id: int
    memory_slices: int
    compute_slices: int
    memory_mib: int
    sms: int
    max_count: int
    starts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One existing GPU instance (with its compute instance, if created)."""

    profile: str
    profile_id: int
    gi_id: int
    start: int
    size: int
    uuid: str = ""  # "MIG-..." once a compute instance exists
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU."""

    index: int
    uuid: str
    name: str  # NVML name, e.g. "NVIDIA A100-SXM4-80GB"
    model: str  # catalog name when known, else the NVML name
    memory_mib: int
    pci_device_id: str = ""  # "0x20B210DE", mig-parted's device-filter spelling
    bus_id: str = ""
    numa: int | None = None
    compute_capability: tuple[int, int] | None = None
    power_limit_w: float | None = None
    mig_capable: bool = False
    mig_enabled: bool = False
    mig: tuple[MigDevice, ...] = ()
    nvlinks: int = 0
    nvlink_domain: int | None = None
    pcie_switch: int | None = None


@dataclass(frozen=True, slots=True)
class NodeGpus:
    gpus: tuple[GpuInfo, ...]
    driver_version: str = ""
    cuda_version: tuple[int, int] | None = None
    missing: tuple[str, ...] = field(default=())  # functions the driver lacked or refused

    def by_index(self, index: int) -> GpuInfo:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(f"no GPU with index {index}")


def catalog_model(nvml_name: str, pci_device_id: str = "") -> str:
    """The catalog's model name for an NVML device name, else for its PCI device id (the
    spelling mig-parted's device filters use: board names vary between drivers and OEMs),
    else the NVML name."""
    for name, spec in CATALOG.items():
        if spec.nvml_name and spec.nvml_name == nvml_name:
            return name
    for name, spec in CATALOG.items():
        if pci_device_id and spec.pci_device_id == pci_device_id.upper().replace("0X", "0x"):
            return name
    return nvml_name


def _numa_from_sysfs(bus_id: str) -> int | None:
    """CPU NUMA node of a PCIe GPU (what the NVIDIA plugin reads); None when unknown."""
    if not bus_id:
        return None
    path = SYSFS_PCI / bus_id.lower()[-12:] / "numa_node"
    for candidate in (SYSFS_PCI / bus_id.lower() / "numa_node", path):
        try:
            value = int(candidate.read_text().strip())
        except (OSError, ValueError):
            continue
        return value if value >= 0 else None
    return None


def _numa(nv: Nvml, h: object, bus_id: str) -> int | None:
    node = nv.query("nvmlDeviceGetNumaNodeId", h)  # Grace C2C: the GPU is a NUMA node
    if node is not None and node >= 0:
        return int(node)
    node = _numa_from_sysfs(bus_id)
    if node is not None:
        return node
    mask = nv.query("nvmlDeviceGetMemoryAffinity", h, 1, 0)  # NVML_AFFINITY_SCOPE_NODE
    if mask:
        bits = int(mask[0])
        if bits:
            return (bits & -bits).bit_length() - 1
    return None


def _nvlinks(nv: Nvml, h: object) -> int:
    active = 0
    for link in range(NVLINK_MAX_LINKS):
        try:
            state = pynvml.nvmlDeviceGetNvLinkState(h, link)
        except pynvml.NVMLError:
            break  # NOT_SUPPORTED (no NVLink) or INVALID_ARGUMENT (past the last link)
        active += state == pynvml.NVML_FEATURE_ENABLED
    return active


def _fallback_name(model: str, profile_id: int, compute: int, mib: int) -> str:
    """A name for a profile an older driver reports without one (v1 struct): the catalog's
    name for this model and profile ID, else `<compute>g.<GiB>gb`."""
    try:
        for p in get_geometry(model).profiles:
            if p.profile_id == profile_id:
                return p.name
    except KeyError:
        pass
    return f"{compute}g.{round(mib / 1024)}gb"


def mig_profiles(nv: Nvml, h: object, model: str = "") -> list[MigProfileInfo]:
    """Profiles the driver offers on a MIG-enabled GPU (empty when MIG is off/unsupported)."""
    out: list[MigProfileInfo] = []
    for index in PROFILE_INDEXES:
        info = nv.first((pynvml.nvmlDeviceGetGpuInstanceProfileInfo, (h, index, 2)),
                        (pynvml.nvmlDeviceGetGpuInstanceProfileInfo, (h, index, 1)))
        if info is None:
            continue
        name = getattr(info, "name", b"")
        name = name.decode() if isinstance(name, bytes) else str(name)
        name = name.removeprefix("MIG ").strip() or _fallback_name(
            model, int(info.id), int(info.sliceCount), int(info.memorySizeMB))
        starts = possible_starts(nv, h, info.id)
        size = _placement_size(nv, h, info.id)
        out.append(MigProfileInfo(name, int(info.id), size, int(info.sliceCount),
                                  int(info.memorySizeMB), int(info.multiprocessorCount),
                                  int(info.instanceCount), starts))
    return out


def _placements(nv: Nvml, h: object, profile_id: int) -> list[tuple[int, int]]:
    arr = (pynvml.c_nvmlGpuInstancePlacement_t * 8)()
    count = ctypes.c_uint(len(arr))
    if nv.query(pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, h, profile_id, arr,
                ctypes.byref(count)) is None:
        return []
    return [(arr[i].start, arr[i].size) for i in range(count.value)]


def possible_starts(nv: Nvml, h: object, profile_id: int) -> tuple[int, ...]:
    return tuple(sorted(s for s, _ in _placements(nv, h, profile_id)))


def _placement_size(nv: Nvml, h: object, profile_id: int) -> int:
    p = _placements(nv, h, profile_id)
    return p[0][1] if p else 0


def gpu_instances(nv: Nvml, h: object, profiles: list[MigProfileInfo]) -> list[MigDevice]:
    """Existing GPU instances and the UUIDs of their MIG devices."""
    uuids: dict[int, tuple[str, int]] = {}
    count = nv.query(pynvml.nvmlDeviceGetMaxMigDeviceCount, h) or 0
    for i in range(count):
        m = nv.query(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
        if m is None:
            continue
        gi = nv.query(pynvml.nvmlDeviceGetGpuInstanceId, m)
        uuid = nv.query(pynvml.nvmlDeviceGetUUID, m) or ""
        mem = nv.query(pynvml.nvmlDeviceGetMemoryInfo, m)
        if gi is not None:
            uuids[int(gi)] = (uuid, int(mem.total >> 20) if mem else 0)
    out: list[MigDevice] = []
    for p in profiles:
        arr = (pynvml.c_nvmlGpuInstance_t * max(p.max_count, 1))()
        n = ctypes.c_uint(len(arr))
        if nv.query(pynvml.nvmlDeviceGetGpuInstances, h, p.profile_id, arr,
                    ctypes.byref(n)) is None:
            continue
        for i in range(n.value):
            info = nv.query(pynvml.nvmlGpuInstanceGetInfo, arr[i])
            if info is None:
                continue
            uuid, mib = uuids.get(int(info.id), ("", p.memory_mib))
            out.append(MigDevice(p.name, p.profile_id, int(info.id), int(info.placement.start),
                                 int(info.placement.size), uuid, mib or p.memory_mib))
    return sorted(out, key=lambda d: d.start)


def _components(n: int, linked: dict[tuple[int, int], bool]) -> list[int]:
    """Connected-component id (smallest member index) per device."""
    comp = list(range(n))

    def find(i: int) -> int:
        while comp[i] != i:
            comp[i] = comp[comp[i]]
            i = comp[i]
        return i

    for (a, b), yes in linked.items():
        if yes:
            ra, rb = find(a), find(b)
            comp[max(ra, rb)] = min(ra, rb)
    return [find(i) for i in range(n)]


def discover(nv: Nvml) -> NodeGpus:
    """Read every GPU of the node. Lost GPUs are left out (the health watcher reports them)."""
    count = nv.query(pynvml.nvmlDeviceGetCount) or 0
    driver = nv.query(pynvml.nvmlSystemGetDriverVersion) or ""
    cuda = nv.first(("nvmlSystemGetCudaDriverVersion_v2", ()),
                    (pynvml.nvmlSystemGetCudaDriverVersion, ()))
    handles: list[tuple[int, object]] = []
    gpus: list[GpuInfo] = []
    for i in range(count):
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append(_one(nv, i, h))
            handles.append((i, h))
        except (GpuLost, pynvml.NVMLError_GpuIsLost):
            nv.errors["gpu_is_lost"] += 1
    # topology: PCIe switch groups and NVLink domains (the PCIe ancestor does not show NVLink)
    idx = {g.index: k for k, g in enumerate(gpus)}
    pcie: dict[tuple[int, int], bool] = {}
    nvl: dict[tuple[int, int], bool] = {}
    for a, (ia, ha) in enumerate(handles):
        for ib, hb in handles[a + 1:]:
            level = nv.query(pynvml.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
            if level is not None:
                pcie[idx[ia], idx[ib]] = level <= TOPOLOGY_PCIE_SWITCH
            if gpus[idx[ia]].nvlinks and gpus[idx[ib]].nvlinks:
                st = nv.query(pynvml.nvmlDeviceGetP2PStatus, ha, hb,
                              pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
                nvl[idx[ia], idx[ib]] = st == pynvml.NVML_P2P_STATUS_OK
    if pcie:
        comps = _components(len(gpus), pcie)
        gpus = [_replace(g, pcie_switch=comps[k]) for k, g in enumerate(gpus)]
    comps = _components(len(gpus), nvl)
    gpus = [_replace(g, nvlink_domain=comps[k]) if g.nvlinks else g for k, g in enumerate(gpus)]
    cuda_t = (cuda // 1000, cuda % 1000 // 10) if cuda else None
    return NodeGpus(tuple(gpus), driver, cuda_t, tuple(sorted(nv.missing)))


def _replace(g: GpuInfo, **kw: object) -> GpuInfo:
    from dataclasses import replace
    return replace(g, **kw)  # type: ignore[arg-type]


def _one(nv: Nvml, index: int, h: object) -> GpuInfo:
    name = nv.query(pynvml.nvmlDeviceGetName, h) or "unknown"
    uuid = nv.query(pynvml.nvmlDeviceGetUUID, h) or ""
    mem = nv.first((pynvml.nvmlDeviceGetMemoryInfo, (h, MEMORY_V2)),
                   (pynvml.nvmlDeviceGetMemoryInfo, (h,)))
    pci = nv.query(pynvml.nvmlDeviceGetPciInfo, h)
    bus = ""
    pci_id = ""
    if pci is not None:
        bus = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
        pci_id = f"0x{pci.pciDeviceId:08X}"
    cc = nv.query(pynvml.nvmlDeviceGetCudaComputeCapability, h)
    limit = nv.first((pynvml.nvmlDeviceGetEnforcedPowerLimit, (h,)),
                     (pynvml.nvmlDeviceGetPowerManagementLimit, (h,)))
    mode = nv.query(pynvml.nvmlDeviceGetMigMode, h)
    mig_enabled = bool(mode and mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE)
    mig: tuple[MigDevice, ...] = ()
    if mig_enabled:
        mig = tuple(gpu_instances(nv, h, mig_profiles(nv, h, catalog_model(name, pci_id))))
    return GpuInfo(
        index=index, uuid=uuid, name=name, model=catalog_model(name, pci_id),
        memory_mib=int(mem.total >> 20) if mem else 0, pci_device_id=pci_id, bus_id=bus,
        numa=_numa(nv, h, bus), compute_capability=tuple(cc) if cc else None,  # type: ignore
        power_limit_w=limit / 1000 if limit else None, mig_capable=mode is not None,
        mig_enabled=mig_enabled, mig=mig, nvlinks=_nvlinks(nv, h))
