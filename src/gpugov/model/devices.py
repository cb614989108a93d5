"""Devices of a node: how each GPU is cut (its mode and configuration) and where it sits.

A node can mix modes across its GPUs. What is used on each device lives in the one
`model.cluster.ClusterState`, which holds these configurations per device.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpugov.model.isolation import IsolationLevel
from gpugov.model.mig import MigInstance


class DeviceMode(StrEnum):
    EXCLUSIVE = "exclusive"  # one pod owns the whole device
    MIG = "mig"  # a concrete layout of GPU instances at positions
    SOFT = "soft"  # memory MiB + compute milli, enforced in software
    TIMESLICE = "timeslice"  # N replicas; each capped at its memory by the library (soft)
    MPS = "mps"  # N clients with per-client memory and SM caps

    @property
    def isolation(self) -> IsolationLevel:
        """What the mode actually delivers (see model.isolation)."""
        return _MODE_ISOLATION[self]


_MODE_ISOLATION = {
    DeviceMode.EXCLUSIVE: IsolationLevel.HARD,
    DeviceMode.MIG: IsolationLevel.HARD,
    DeviceMode.SOFT: IsolationLevel.SOFT,
    # MPS caps pinned memory and SM share per client, but clients share one fault domain and
    # one MPS server: an error in one client can take the others down. Counted as none.
    DeviceMode.MPS: IsolationLevel.NONE,
    # A time-slice replica is capped at its memory by the enforcement library (the device
    # plugin passes its limit as for a soft slice): soft memory isolation; compute is shared
    # by the driver's time-slicing. A replica whose tenant opted in to oversubscription is
    # not capped and delivers none (the state keeps it off devices whose replicas need soft).
    DeviceMode.TIMESLICE: IsolationLevel.SOFT,
}


@dataclass(frozen=True, slots=True)
class DeviceTopology:
    """Where one GPU sits: its NVLink/NVSwitch domain, PCIe switch and CPU NUMA node.

    `None` = not known / not connected (e.g. a PCIe card without NVLink). Equal ids = same
    domain. Discovered by the node agent (NVML P2P/NVLink status, PCI sysfs numa_node).
    """

    nvlink_domain: int | None = None
    pcie_switch: int | None = None
    numa_node: int | None = None


def hgx_topology(gpus: int = 8, domains: int = 1, numa_nodes: int = 2,
                 pcie_switches: int = 4) -> tuple[DeviceTopology, ...]:
    """A standard layout: GPUs split evenly (in index order) into NVSwitch domains, NUMA nodes
    and PCIe switches. `domains=1` is an HGX board (one NVSwitch fabric for all 8 GPUs);
    `domains=2` models two 4-GPU NVLink islands, e.g. two bridged groups."""
    def group(i: int, n: int) -> int:
        return i * n // gpus
    return tuple(
        DeviceTopology(nvlink_domain=group(i, domains) if domains else None,
                       pcie_switch=group(i, pcie_switches), numa_node=group(i, numa_nodes))
        for i in range(gpus)
    )


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """How one device of a node is cut, as the cluster state holds it.

    `replicas`: time-slice replicas or MPS clients (1 for other modes). `mig_layout`: the
    instances of a MIG device with a fixed layout (what mig-parted applied); None = dynamic,
    instances are created where a pod needs them, at valid starts.
    """

    mode: DeviceMode = DeviceMode.SOFT
    replicas: int = 1
    mig_layout: tuple[MigInstance, ...] | None = None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS) and self.replicas < 2:
            raise ValueError(f"a {self.mode.value} device needs replicas >= 2")
        if self.mode not in (DeviceMode.TIMESLICE, DeviceMode.MPS) and self.replicas != 1:
            raise ValueError(f"only timeslice and mps devices have replicas ({self.mode.value})")
        if self.mig_layout is not None and self.mode is not DeviceMode.MIG:
            raise ValueError(f"only MIG devices have a layout ({self.mode.value})")
