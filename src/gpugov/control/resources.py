"""The resources queues govern, their YAML units, and what one pod charges in each.

Named resources (`RESOURCES`) are always in a queue's vectors: `gpu` (GPUs, fractions allowed),
`cpu` (cores), `memory` (host GiB) and `gpumem` (GPU memory, GiB). MIG profiles are counted
resources named `mig-<profile>` (`mig-1g.10gb: 4`); a queue tree has one column for each profile
its config mentions (`ResourceSet`). Internally amounts are milli GPUs, milli cores, MiB, MiB
and instances (`SCALE` converts YAML units to them).

What a pod charges (`charge_of`) comes from what placement gave it, so a whole GPU charges the
card it got (`Allocation.memory_mib`, which `ClusterState.charge` sets); before placement a job's
demand is a lower bound (`demand_estimate`): the named GPU memory, or the smallest card (or MIG
profile) of an allowed model in the cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from gpugov.model.devices import DeviceMode
from gpugov.model.mig import MIG_GEOMETRIES
from gpugov.model.request import Allocation, PodRequest

#: resources every queue vector has, in order.
RESOURCES: tuple[str, ...] = ("gpu", "cpu", "memory", "gpumem")
#: YAML unit -> internal unit (GPUs -> milli, cores -> milli, GiB -> MiB, GiB -> MiB).
SCALE: tuple[float, ...] = (1000.0, 1000.0, 1024.0, 1024.0)
UNITS: dict[str, str] = {"gpu": "GPUs", "cpu": "cores", "memory": "GiB",
                         "gpumem": "GiB of GPU memory"}
GPU, CPU, MEMORY, GPUMEM = range(4)
MIG_PREFIX = "mig-"
_MIG_NAME = re.compile(r"^mig-(\d+g\.\d+gb(\+me)?)$")


@cache
def mig_profiles() -> tuple[str, ...]:
    """Every MIG profile name of the catalog's MIG-capable models, sorted."""
    return tuple(sorted({p for g in MIG_GEOMETRIES.values() for p in g.profile_names()}))


def allowed_text() -> str:
    return f"{', '.join(RESOURCES)}, or mig-<profile> (e.g. mig-1g.10gb)"


def resource_problem(name: str) -> str:
    """Why `name` is not a resource a queue can govern ("" when it is)."""
    if name in RESOURCES:
        return ""
    m = _MIG_NAME.match(str(name))
    if m is None:
        return f"unknown resource {name!r}; allowed: {allowed_text()}"
    if m.group(1) not in mig_profiles():
        return (f"unknown MIG profile {m.group(1)!r} in {name!r}; allowed profiles: "
                f"{', '.join(mig_profiles())}")
    return ""


def unit(name: str) -> str:
    return UNITS.get(name, "instances")


def scale(name: str) -> float:
    return SCALE[RESOURCES.index(name)] if name in RESOURCES else 1.0


@dataclass(frozen=True)
class ResourceSet:
    """The columns of one queue tree's vectors: `RESOURCES` then the MIG profiles named."""

    names: tuple[str, ...]

    @classmethod
    def of(cls, mentioned: Iterable[str]) -> ResourceSet:
        migs = sorted({r for r in mentioned if r.startswith(MIG_PREFIX)})
        return cls(RESOURCES + tuple(migs))

    @property
    def scale(self) -> np.ndarray:
        return np.array([scale(r) for r in self.names], dtype=np.float64)

    def __len__(self) -> int:
        return len(self.names)

    def column(self, name: str) -> int:
        """The column of `name`, or -1 when this tree does not count it."""
        try:
            return self.names.index(name)
        except ValueError:
            return -1

    def amounts(self, vec: Sequence[float]) -> dict[str, float]:
        """Internal units -> the config's (GPUs, cores, GiB, GiB, instances), rounded."""
        return {r: round(float(vec[i]) / scale(r), 3) for i, r in enumerate(self.names)}

    def describe(self, name: str, amount: float) -> str:
        """`amount` (internal units) of `name` in words: "2.5 GPUs", "40 GiB of GPU memory"."""
        return f"{amount / scale(name):g} {unit(name)}" + (
            f" of {name}" if name.startswith(MIG_PREFIX) else "")

    def vector(self, req: PodRequest, pods: int, milli: float, gpumem: float) -> np.ndarray:
        """A job's vector: `pods` pods each taking `milli` GPU milli and `gpumem` MiB of GPU
        memory in total over its devices, plus its instances of its MIG profile per pod (a
        time-sliced instance's replica counts as one)."""
        out = np.zeros(len(self.names), dtype=np.float64)
        out[GPU], out[CPU], out[MEMORY], out[GPUMEM] = milli, req.cpu_milli, req.memory_mib, gpumem
        if req.mig_profile:
            c = self.column(MIG_PREFIX + req.mig_profile)
            if c >= 0:
                out[c] = float(req.gpu_count) if req.mode is DeviceMode.MIG else 1.0
        return out * pods


def charge_of(res: ResourceSet, req: PodRequest, allocations: Sequence[Allocation]) -> np.ndarray:
    """What a running job holds: per pod the milli and GPU memory of each device its
    allocation took (a whole GPU: the card's memory), host CPU and memory, one MIG instance."""
    if not allocations:
        return res.vector(req, 0, 0.0, 0.0)
    milli = sum(a.milli * len(a.devices) for a in allocations)
    mem = sum(a.memory_mib * len(a.devices) for a in allocations)
    out = res.vector(req, len(allocations), 0.0, 0.0)
    out[GPU], out[GPUMEM] = milli, mem
    return out


def demand_estimate(res: ResourceSet, req: PodRequest, pods: int,
                    card_mib: dict[str, int]) -> np.ndarray:
    """A job's demand before placement: a lower bound of what it will be charged.

    `card_mib`: GPU model -> card memory of the models in the cluster. GPU memory is what the
    request names, except where the device decides: a whole GPU takes its card (at least the
    smallest allowed card), a MIG instance its profile's memory (the smallest among allowed
    models); a time-slice replica that names none is charged card/replicas of the device it
    lands on, unknown before placement, so its lower bound is what it names (0).
    """
    mode = req.slice_mode if req.gpu_count else None
    per_dev = float(req.gpu_memory_mib)
    models = [m for m in card_mib if not req.models or m in req.models]
    if mode is DeviceMode.EXCLUSIVE:
        cards = [card_mib[m] for m in models if card_mib[m] >= req.gpu_memory_mib]
        per_dev = float(min(cards)) if cards else per_dev
    elif mode is DeviceMode.MIG:
        mems = [MIG_GEOMETRIES[m].profile(req.mig_profile).memory_mib for m in models
                if m in MIG_GEOMETRIES and req.mig_profile in MIG_GEOMETRIES[m].profile_names()]
        per_dev = float(min(mems)) if mems else per_dev
    return res.vector(req, pods, float(req.total_gpu_milli), per_dev * req.gpu_count)
