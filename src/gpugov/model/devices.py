"""Devices of a node: how each GPU is cut (its mode), what is used on it, and where it sits.

A node can mix modes across its GPUs. States are frozen values; placement functions return new
states, so a decision can be tried and thrown away without copies or undo logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpugov.model.catalog import MILLI_PER_GPU, get_model
from gpugov.model.isolation import IsolationLevel
from gpugov.model.mig import MigInstance, get_geometry, layout_errors


class DeviceMode(StrEnum):
    EXCLUSIVE = "exclusive"  # one pod owns the whole device
    MIG = "mig"  # a concrete layout of GPU instances at positions
    SOFT = "soft"  # memory MiB + compute milli, enforced in software
    TIMESLICE = "timeslice"  # N replicas; memory NOT isolated (tracked as risk)
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
    DeviceMode.TIMESLICE: IsolationLevel.NONE,
}


@dataclass(frozen=True, slots=True)
class ExclusiveState:
    owner: str | None = None  # pod name, None = free


@dataclass(frozen=True, slots=True)
class MigState:
    """A MIG layout: instances at positions; `owners[i]` is the pod on `instances[i]` or None."""

    model: str
    instances: tuple[MigInstance, ...] = ()
    owners: tuple[str | None, ...] = ()

    def __post_init__(self) -> None:
        if len(self.owners) != len(self.instances):
            object.__setattr__(self, "owners", (None,) * len(self.instances))
        errors = layout_errors(get_geometry(self.model), self.instances)
        if errors:
            raise ValueError(f"invalid MIG layout on {self.model}: {'; '.join(errors)}")

    @property
    def idle(self) -> bool:
        """No instance in use: only then may the GPU be re-laid out."""
        return all(o is None for o in self.owners)

    def idle_compute_slices(self) -> int:
        """Compute slices not serving a pod: unused instances plus slices in no instance."""
        g = get_geometry(self.model)
        used = sum(g.profile(i.profile).compute_slices
                   for i, o in zip(self.instances, self.owners, strict=True) if o is not None)
        return g.compute_slices - used


@dataclass(frozen=True, slots=True)
class SoftState:
    """Soft slices: capacity is card memory × oversubscription and 1000 compute milli."""

    memory_mib: int
    oversubscription: float = 1.0  # >1 means memory is promised beyond the card (risky)
    used_memory_mib: int = 0
    used_milli: int = 0
    pods: tuple[str, ...] = ()

    @property
    def memory_capacity_mib(self) -> int:
        return int(self.memory_mib * self.oversubscription)

    @property
    def free_memory_mib(self) -> int:
        return self.memory_capacity_mib - self.used_memory_mib

    @property
    def free_milli(self) -> int:
        return MILLI_PER_GPU - self.used_milli


@dataclass(frozen=True, slots=True)
class TimesliceState:
    """Time-slice replicas are a counter; the memory pods may touch is tracked, not enforced."""

    memory_mib: int
    replicas: int
    used: int = 0
    touched_memory_mib: int = 0  # sum of the memory co-located pods may touch
    pods: tuple[str, ...] = ()

    @property
    def memory_risk(self) -> float:
        """Overcommit ratio: > 1.0 means the pods together may touch more than the card has."""
        return self.touched_memory_mib / self.memory_mib if self.memory_mib else 0.0


@dataclass(frozen=True, slots=True)
class MpsState:
    """MPS clients: the NVIDIA plugin caps each at memory/clients and 100/clients % of SMs
    (`set_default_device_pinned_mem_limit`, `set_default_active_thread_percentage`)."""

    memory_mib: int
    clients: int
    used: int = 0
    pods: tuple[str, ...] = ()

    @property
    def client_memory_mib(self) -> int:
        return self.memory_mib // self.clients

    @property
    def client_milli(self) -> int:
        return MILLI_PER_GPU // self.clients


DeviceState = ExclusiveState | MigState | SoftState | TimesliceState | MpsState

_STATE_MODE = {
    ExclusiveState: DeviceMode.EXCLUSIVE, MigState: DeviceMode.MIG, SoftState: DeviceMode.SOFT,
    TimesliceState: DeviceMode.TIMESLICE, MpsState: DeviceMode.MPS,
}


def mode_of(state: DeviceState) -> DeviceMode:
    return _STATE_MODE[type(state)]


@dataclass(frozen=True, slots=True)
class DeviceTopology:
    """Where one GPU sits: its NVLink/NVSwitch domain, PCIe switch and CPU NUMA node.

    `None` = not known / not connected (e.g. a PCIe card without NVLink). Equal ids = same
    domain. Discovered by the node agent (NVML P2P/NVLink status, PCI sysfs numa_node).
    """

    nvlink_domain: int | None = None
    pcie_switch: int | None = None
    numa_node: int | None = None


@dataclass(frozen=True, slots=True)
class Device:
    """One physical GPU on a node."""

    index: int
    model: str
    state: DeviceState = field(default_factory=ExclusiveState)
    topology: DeviceTopology = field(default_factory=DeviceTopology)
    uuid: str = ""
    healthy: bool = True

    @property
    def mode(self) -> DeviceMode:
        return mode_of(self.state)

    @property
    def memory_mib(self) -> int:
        return get_model(self.model).memory_mib or 0


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
