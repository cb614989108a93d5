"""Building blocks of the device plugin tests: node inventories, scheduled pods, a running
plugin on a short temporary plugin folder (unix socket paths are limited to 107 bytes)."""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from gpugov.k8s.annotations import (
    ALLOCATION,
    AllocatedDevice,
    Allocation,
    Inventory,
    InventoryDevice,
    MigInstance,
    encode_allocation,
)
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.node.deviceplugin import (
    DevicePluginManager,
    DeviceSource,
    MemoryPodSource,
    ResponseConfig,
    StaticDeviceSource,
)

NODE = "gpu-node-1"
H100 = "H100-SXM5-80GB"
_seq = itertools.count()


def uuid(i: int) -> str:
    return f"GPU-{i:08d}-0000-4000-8000-{i:012d}"


def mig_uuid(gpu: int, start: int) -> str:
    return f"MIG-{gpu:08d}-{start:04d}-4000-8000-{gpu * 10 + start:012d}"


def gpu(i: int, mode: DeviceMode = DeviceMode.EXCLUSIVE, replicas: int = 1,
        nvlink: int | None = None, pcie: int | None = None, numa: int = 0,
        mig: Sequence[tuple[str, int]] = ()) -> InventoryDevice:
    return InventoryDevice(index=i, uuid=uuid(i), model=H100, memory_mib=81559, mode=mode,
                           replicas=replicas, numa=numa, nvlink_domain=nvlink, pcie_switch=pcie,
                           mig=tuple(MigInstance(p, s, mig_uuid(i, s)) for p, s in mig))


def mixed_node() -> Inventory:
    """GPUs 0-3 whole (NVSwitch), 4 soft (4 replicas), 5 MIG (3g.40gb@0, 1g.10gb@4 and @5),
    6 time-sliced (2 replicas)."""
    return Inventory((
        *(gpu(i, nvlink=0) for i in range(4)),
        gpu(4, DeviceMode.SOFT, replicas=4, numa=1),
        gpu(5, DeviceMode.MIG, numa=1, mig=[("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5)]),
        gpu(6, DeviceMode.TIMESLICE, replicas=2, numa=1),
    ))


def whole(i: int) -> AllocatedDevice:
    return AllocatedDevice(index=i, mode=DeviceMode.EXCLUSIVE, milli=1000, memory_mib=81559,
                           uuid=uuid(i))


def soft(i: int, milli: int, memory_mib: int) -> AllocatedDevice:
    return AllocatedDevice(index=i, mode=DeviceMode.SOFT, milli=milli, memory_mib=memory_mib,
                           uuid=uuid(i))


def mig(i: int, profile: str, start: int) -> AllocatedDevice:
    return AllocatedDevice(index=i, mode=DeviceMode.MIG, milli=142, memory_mib=9856,
                           uuid=uuid(i), mig_profile=profile, mig_start=start)


def timeslice(i: int, memory_mib: int = 0) -> AllocatedDevice:
    """A time-slice replica capped at `memory_mib` (0: an oversubscribing, uncapped one)."""
    return AllocatedDevice(index=i, mode=DeviceMode.TIMESLICE, milli=500, memory_mib=memory_mib,
                           uuid=uuid(i))


def scheduled_pod(name: str, devices: Sequence[AllocatedDevice], node: str = NODE,
                  allocation_node: str | None = None, annotation: str | None = None,
                  namespace: str = "team-a", **annotations: str) -> dict[str, Any]:
    """A pod as gpugov's scheduler leaves it: allocation annotation written, then bound."""
    isolation = IsolationLevel.SOFT if any(d.mode == DeviceMode.SOFT for d in devices) \
        else IsolationLevel.HARD
    text = annotation if annotation is not None else encode_allocation(
        Allocation(allocation_node or node, isolation, tuple(devices)))
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "creationTimestamp": f"2026-11-30T10:00:{next(_seq) % 60:02d}Z",
                         "annotations": {ALLOCATION: text, **annotations}},
            "spec": {"nodeName": node}, "status": {"phase": "Pending"}}


@contextlib.contextmanager
def short_dir() -> Any:
    d = Path(tempfile.mkdtemp(prefix="ggdp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.asynccontextmanager
async def running_plugin(plugin_dir: Path, state_dir: Path, inventory: Inventory | DeviceSource,
                         pods: MemoryPodSource, node: str = NODE, with_library: bool = True,
                         **cfg_extra: Any) -> AsyncIterator[tuple[DevicePluginManager, Any]]:
    """A started manager on `inventory` (a StaticDeviceSource is made) or on a given source."""
    library = state_dir / "lib" / "libgpugov.so"
    library.parent.mkdir(parents=True, exist_ok=True)
    library.write_bytes(b"\x7fELF stand-in: mounted, never loaded in these tests")
    source = StaticDeviceSource(inventory) if isinstance(inventory, Inventory) else inventory
    cfg = ResponseConfig(state_dir=state_dir, library=library if with_library else None,
                         device_specs=True, **cfg_extra)
    mgr = DevicePluginManager(node, source, pods, plugin_dir, cfg, poll_s=0.05)
    await mgr.start()
    try:
        yield mgr, source
    finally:
        await mgr.stop()
