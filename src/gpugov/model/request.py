"""What one pod asks for, reduced to the numbers placement needs."""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from typing import Any

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.constraints import NodeTerm, Toleration
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel


@dataclass(frozen=True, slots=True)
class PodRequest:
    """One pod's request.

    `gpu_milli` is per device (1000 = a whole GPU); a sharing pod has `gpu_count == 1`
    and `0 < gpu_milli < 1000`. `models` empty means any GPU model is acceptable.
    `gpu_memory_mib` is the GPU memory needed on each device (0 = not asked, as in the
    openb traces); a whole-GPU pod holds all of its devices' memory whatever it asks.
    `gpu_memory_percent` (0 = not asked) is a share of the card each device lands on: the
    state resolves it per candidate device (`ClusterState.memory_need`), never of one card.
    A soft slice may take several devices (`gpu_count > 1`, HAMi's `nvidia.com/gpu: N` with
    `gpumem`/`gpucores`): the same slice on each of N distinct devices of one node.

    The remaining fields are the compiled form of a `GpuRequest` plus what the control plane
    knows of the pod's tenant; their defaults are what a trace pod means:
    - `mode`: the kind of slice asked for. None = a whole GPU when `gpu_milli` is 1000, else a
      soft slice (compute milli and GPU memory); `MIG` needs `mig_profile` and takes
      `gpu_count` instances (several may share a device: `gpu_milli` is per instance);
      `TIMESLICE` and `MPS` take one replica of a device in that mode, and `TIMESLICE` with a
      `mig_profile` one replica of a time-sliced MIG instance of that profile.
    - `min_isolation`: the weakest isolation the pod may be given (its request and its
      tenant's trust tier, `model.isolation.required_isolation`).
    - `tenant` and `sealed`: a sealed pod (an untrusted tenant's) never shares a device with
      another tenant's pod, and no other tenant's pod joins a device it holds.
    - `node_selector` / `tolerations`: Kubernetes semantics (`model.constraints`).
    - `oversubscribe`: the tenant accepts time-slice replicas whose memory together exceeds
      the card: the replica is charged and capped at nothing and delivers isolation none
      (without it, a replica is charged and capped at the memory it names, else
      card/replicas, so time-slicing never promises more memory than the card has).
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_milli: int = 0
    models: tuple[str, ...] = ()
    gpu_memory_mib: int = 0
    mode: DeviceMode | None = None
    mig_profile: str = ""
    min_isolation: IsolationLevel = IsolationLevel.NONE
    tenant: str = ""
    sealed: bool = False
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    oversubscribe: bool = False
    gpu_memory_percent: float = 0.0
    #: `gpugov.io/topology: required`: every device of the pod in one NVLink domain (a filter
    #: step of the state, reason `topology`; unknown topology never qualifies)
    nvlink: bool = False
    #: required node affinity (`spec.affinity.nodeAffinity`, terms ORed; reason
    #: `node-selector`, as Kubernetes reports selector and affinity together)
    node_affinity: tuple[NodeTerm, ...] = ()
    #: preferred node affinity, (weight 1..100, term): a score (`ClusterState.preference`)
    preferred: tuple[tuple[int, NodeTerm], ...] = ()
    #: the pod's inter-pod identity and constraints (namespace, labels, pod affinity,
    #: anti-affinity, topology spread; hashable), evaluated by `ClusterState.pod_filter`
    pods: Any = None
    #: `is_plain`, computed once at construction (not an argument; not compared)
    plain: bool = dataclasses.field(init=False, repr=False, compare=False, default=True)

    def __post_init__(self) -> None:
        count, milli = self.gpu_count, self.gpu_milli
        if (self.mode is None and self.cpu_milli >= 0 and self.memory_mib >= 0
                and self.gpu_memory_mib == 0 and self.gpu_memory_percent == 0
                and not self.mig_profile and ((count == 0 and milli == 0)
                                              or (count == 1 and 0 < milli <= MILLI_PER_GPU)
                                              or (count > 1 and milli == MILLI_PER_GPU))):
            # a trace pod's shape (every check below passes): only `plain` to work out, as
            # `_is_plain` does for mode None (~3 µs less per pod on trace loading)
            plain = not (self.node_selector or self.tolerations or self.node_affinity
                         or self.preferred or self.pods is not None
                         or (self.nvlink and count > 1)) and (
                milli >= MILLI_PER_GPU
                or (self.min_isolation <= IsolationLevel.SOFT and not self.sealed))
            object.__setattr__(self, "plain", plain)
            return
        self._check()
        object.__setattr__(self, "plain", self._is_plain())

    def _check(self) -> None:
        """Every rule a request obeys (ValueError naming the field otherwise)."""
        for field in ("cpu_milli", "memory_mib", "gpu_count", "gpu_milli", "gpu_memory_mib"):
            if getattr(self, field) < 0:
                raise ValueError(f"{field} must be >= 0, got {getattr(self, field)}")
        if self.gpu_milli > MILLI_PER_GPU:
            raise ValueError(f"gpu_milli must be <= {MILLI_PER_GPU}, got {self.gpu_milli}")
        if self.gpu_count > 1 and self.gpu_milli != MILLI_PER_GPU and \
                self.mode not in (DeviceMode.SOFT, DeviceMode.MIG):
            raise ValueError(
                f"a {self.gpu_count}-GPU request must ask for whole GPUs (gpu_milli=1000) "
                f"or be a soft slice per device (mode=soft), got gpu_milli={self.gpu_milli}"
            )
        if not 0 <= self.gpu_memory_percent <= 100:
            raise ValueError(f"gpu_memory_percent must be in 0..100, got "
                             f"{self.gpu_memory_percent}")
        if self.gpu_memory_percent and (self.gpu_memory_mib or not self.gpu_count):
            raise ValueError("gpu_memory_percent needs a GPU and excludes gpu_memory_mib")
        if (self.gpu_count == 0) != (self.gpu_milli == 0):
            raise ValueError(
                f"gpu_count={self.gpu_count} and gpu_milli={self.gpu_milli} disagree: "
                "both must be 0 for a CPU-only pod, or both positive"
            )
        if self.gpu_memory_mib and not self.gpu_count:
            raise ValueError(
                f"gpu_memory_mib={self.gpu_memory_mib} needs a GPU: a CPU-only pod asks for "
                "no GPU memory"
            )
        if (self.mode is DeviceMode.MIG and not self.mig_profile) or (
                self.mig_profile and self.mode not in (DeviceMode.MIG, DeviceMode.TIMESLICE)):
            raise ValueError(f"mig_profile={self.mig_profile!r} and mode={self.mode} disagree: a "
                             "MIG request (or a time-sliced MIG replica) names its profile, no "
                             "other request does")
        if self.mode is not None and not self.gpu_count:
            raise ValueError(f"mode={self.mode} needs a GPU")
        if self.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS) and self.gpu_count != 1:
            raise ValueError(f"a {self.mode} request takes one device per pod, got "
                             f"gpu_count={self.gpu_count}")
        if self.mode is DeviceMode.EXCLUSIVE and self.gpu_milli != MILLI_PER_GPU:
            raise ValueError("an exclusive request takes whole GPUs (gpu_milli=1000)")

    def renamed(self, name: str) -> PodRequest:
        """This request under another name (a clone of a trace pod), every other field as
        it is; ~2x quicker than `dataclasses.replace`."""
        if type(self) is not PodRequest:  # a subclass may hold more
            return dataclasses.replace(self, name=name)
        return PodRequest(name, *_ARGS(self))

    @property
    def slice_mode(self) -> DeviceMode:
        """The kind of slice this request takes (`mode`, or whole/soft by its milli)."""
        if self.mode is not None:
            return self.mode
        return DeviceMode.EXCLUSIVE if self.gpu_milli >= MILLI_PER_GPU else DeviceMode.SOFT

    @property
    def is_plain(self) -> bool:
        """True for a request the trace engine's fast path serves: whole GPUs (hard
        isolation, never shared, so a floor or a seal changes nothing), or soft slices with
        no isolation floor above soft and no tenant seal; no node constraints. Computed once
        (`plain`): the engine asks several times per pod."""
        return self.plain

    def _is_plain(self) -> bool:
        if self.mode not in (None, DeviceMode.EXCLUSIVE, DeviceMode.SOFT):
            return False
        if self.node_selector or self.tolerations or self.gpu_memory_percent or \
                self.node_affinity or self.preferred or self.pods is not None:
            return False
        if self.nvlink and self.gpu_count > 1:
            return False  # the per-device filter keeps the devices in one NVLink domain
        if self.gpu_count > 1 and self.gpu_milli < MILLI_PER_GPU:
            return False  # N soft slices: the per-device filter chooses N distinct devices
        return self.slice_mode is DeviceMode.EXCLUSIVE or (
            self.min_isolation <= IsolationLevel.SOFT and not self.sealed)

    @property
    def mig_shared(self) -> bool:
        """True for one replica of a time-sliced MIG instance (`mig-<profile>.shared`)."""
        return self.mode is DeviceMode.TIMESLICE and bool(self.mig_profile)

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def is_sharing(self) -> bool:
        """True for a fractional single-GPU request (shares a device with others)."""
        return self.gpu_count == 1 and self.gpu_milli < MILLI_PER_GPU

    @property
    def is_gpu(self) -> bool:
        return self.gpu_count > 0


#: `PodRequest`'s constructor arguments after its name, read off one (`renamed`)
_ARGS = operator.attrgetter(*(f.name for f in dataclasses.fields(PodRequest)
                              if f.init and f.name != "name"))


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a request landed: a node index and, per device, the milli and GPU memory taken.

    `memory_mib` is what a sharing pod holds on its device; a whole-GPU pod holds all of its
    devices' memory, whatever this field says (the state charges the device's capacity).
    `mig_start` is the memory-slice start of the MIG instance a MIG pod holds (-1 otherwise),
    or of the time-sliced instance whose replica it holds. A pod of several MIG instances
    lists one entry of `devices` per instance (a device repeats when it holds several of
    them) and their starts in `mig_starts`, in the same order; `milli` and `memory_mib` are
    per instance. `mig_start` is then the first of them.
    """

    node: int
    devices: tuple[int, ...]
    milli: int
    memory_mib: int = 0
    mig_start: int = -1
    mig_starts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.mig_starts and self.mig_start >= 0:
            object.__setattr__(self, "mig_starts", (self.mig_start,))
        elif self.mig_starts:
            if len(self.mig_starts) != len(self.devices):
                raise ValueError(f"{len(self.mig_starts)} MIG starts for "
                                 f"{len(self.devices)} instances")
            object.__setattr__(self, "mig_start", self.mig_starts[0])

    @property
    def instances(self) -> tuple[tuple[int, int], ...]:
        """(device, start) of each MIG instance held (empty for other pods)."""
        return tuple(zip(self.devices, self.mig_starts, strict=True)) if self.mig_starts \
            else ()

    @property
    def total_gpu_milli(self) -> int:
        return len(self.devices) * self.milli
