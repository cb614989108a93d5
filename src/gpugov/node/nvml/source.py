"""NVML as the device plugin's `DeviceSource` (gpugov.node.deviceplugin.source): the node's
`Inventory`, rebuilt from discovery and health, with a version that moves on every change."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace

from gpugov.k8s.annotations import Inventory, InventoryDevice, MigInstance
from gpugov.model.devices import DeviceMode
from gpugov.node.nvml.discovery import NodeGpus, discover
from gpugov.node.nvml.health import HealthTracker
from gpugov.node.nvml.library import Nvml

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SharingPolicy:
    """How the node offers its non-MIG GPUs (the agent's --mode/--replicas), and which MIG
    profiles' instances are time-sliced into how many replicas (`mig_replicas`, NVIDIA's
    time-slicing of `nvidia.com/mig-<profile>`: served as `nvidia.com/mig-<profile>.shared`)."""

    mode: DeviceMode = DeviceMode.EXCLUSIVE
    replicas: int = 1
    mig_replicas: tuple[tuple[str, int], ...] = ()
    #: MIG GPUs take new instances in free slices when gpugov's scheduler asks
    #: (`node/mig_on_demand.py`); published as `migOnDemand` in the inventory
    mig_on_demand: bool = False
    #: NVIDIA's MIG strategy for resource names and GFD labels: `mixed` (per profile) or
    #: `single` (every instance as nvidia.com/gpu on a uniform node, `node/mig_strategy.py`)
    mig_strategy: str = "mixed"


def inventory_from(node: NodeGpus, healthy: dict[int, bool] | None = None,
                   sharing: SharingPolicy = SharingPolicy(),
                   draining: frozenset[int] = frozenset()) -> Inventory:
    """The `gpugov.io/inventory` content for discovered GPUs. `draining` GPUs (being
    reconfigured) are reported unhealthy so no scheduler places on them meanwhile."""
    healthy = healthy or {}
    shared = dict(sharing.mig_replicas)
    devices = []
    for g in node.gpus:
        mode = DeviceMode.MIG if g.mig_enabled else sharing.mode
        replicas = sharing.replicas if mode in (DeviceMode.TIMESLICE, DeviceMode.MPS) else 1
        devices.append(InventoryDevice(
            index=g.index, uuid=g.uuid, model=g.model, memory_mib=g.memory_mib, mode=mode,
            replicas=replicas, numa=g.numa if g.numa is not None else 0,
            nvlink_domain=g.nvlink_domain, pcie_switch=g.pcie_switch,
            healthy=healthy.get(g.index, True) and g.index not in draining,
            mig=tuple(MigInstance(m.profile, m.start, m.uuid, shared.get(m.profile, 1))
                      for m in g.mig), mig_on_demand=sharing.mig_on_demand and g.mig_enabled))
    limits = [g.power_limit_w for g in node.gpus if g.power_limit_w is not None]
    power = sum(limits) if limits and len(limits) == len(node.gpus) else None
    return Inventory(tuple(devices), power)


class NvmlDeviceSource:
    """Discovery + health as a DeviceSource; call `refresh()` (or run `watch()`)."""

    def __init__(self, nvml: Nvml, health: HealthTracker | None = None,
                 sharing: SharingPolicy = SharingPolicy()) -> None:
        self.nvml = nvml
        self.health = health or HealthTracker(nvml)
        self.sharing = sharing
        self.draining: frozenset[int] = frozenset()
        self.node = NodeGpus(())
        self._inventory = Inventory(())
        self._version = 0
        self._waiters: list[asyncio.Future[None]] = []
        self.refresh()

    @property
    def version(self) -> int:
        return self._version

    def inventory(self) -> Inventory:
        return self._inventory

    def refresh(self) -> bool:
        """Re-read NVML and health; True (and a new version) when the inventory changed."""
        self.health.poll()
        self.node = discover(self.nvml)
        healthy = {i: d.healthy for i, d in self.health.devices.items()}
        inv = inventory_from(self.node, healthy, self.sharing, self.draining)
        # a GPU that fell off the bus is absent from discovery: keep it, unhealthy
        present = {d.index for d in inv.devices}
        gone = [replace(d, healthy=False) for d in self._inventory.devices
                if d.index not in present]
        if gone:
            inv = Inventory(tuple(sorted((*inv.devices, *gone), key=lambda d: d.index)),
                            inv.power_budget_w)
        if inv == self._inventory and self._version:
            return False
        self._inventory = inv
        self._version += 1
        for w in self._waiters:
            if not w.done():
                w.get_loop().call_soon_threadsafe(w.set_result, None)
        self._waiters.clear()
        return True

    async def wait_change(self, since: int) -> int:
        while self._version <= since:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut
        return self._version

    async def watch(self, interval_s: float = 5.0) -> None:
        """Refresh every `interval_s` until cancelled (NVML calls run in a worker thread)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                await loop.run_in_executor(None, self.refresh)
            except Exception:  # keep watching; the next round may succeed
                log.exception("refreshing the GPU inventory failed")
            await asyncio.sleep(interval_s)
