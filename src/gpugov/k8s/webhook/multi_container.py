"""A pod whose several containers ask for GPUs, as the pod's one request.

gpugov places a pod as one request: `count` devices of one per-device shape (mode, compute,
memory, MIG profile), in the one state. Several GPU containers fit that honestly when they
ask the same shape: the pod asks `count` = what its containers can hold at once
(`k8s.pod_containers.effective`: the app containers and sidecars together, each init container
before them), and the device plugin gives each container its own devices out of the pod's
(disjoint among containers running together; an init container reuses theirs). Containers that
ask different shapes are refused, naming them and what to write: one state cannot charge a
pod two shapes. A time-slice replica or an MPS client is one per pod (the state places one), so
two containers running together may not each ask one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpugov.k8s.pod_containers import MAX_GPU_CONTAINERS, Kind, effective
from gpugov.k8s.resources import RequestError
from gpugov.model.devices import DeviceMode
from gpugov.model.gpu_request import GpuRequest

_REPLICAS = (DeviceMode.TIMESLICE, DeviceMode.MPS)


@dataclass(frozen=True, slots=True)
class Ask:
    """One container's own request."""

    where: str  # e.g. "container 'train'", as messages name it
    kind: Kind
    request: GpuRequest


def shape(req: GpuRequest) -> GpuRequest:
    """The per-device part of a request: everything but how many devices, and its spelling."""
    return replace(req, count=1, spellings=())


def describe(req: GpuRequest) -> str:
    """A container's ask in a few words, for refusals."""
    n = req.count
    if req.mode is DeviceMode.MIG:
        return f"{n} MIG {req.mig_profile} instance{'s' * (n > 1)}"
    if req.mode is DeviceMode.EXCLUSIVE:
        return f"{n} whole GPU{'s' * (n > 1)}"
    parts = []
    if req.memory_mib is not None:
        parts.append(f"{req.memory_mib} MiB")
    elif req.memory_percent is not None:
        parts.append(f"{req.memory_percent:g} % of memory")
    if req.milli is not None and req.mode in (DeviceMode.SOFT, DeviceMode.MPS):
        parts.append(f"{req.milli / 10:g} % compute")
    if req.priority is not None:
        parts.append(f"priority {req.priority}")
    what = {DeviceMode.SOFT: "soft slice", DeviceMode.TIMESLICE: "time-slice replica",
            DeviceMode.MPS: "MPS client"}.get(req.mode, str(req.mode))
    return f"{n} {what}{'s' * (n > 1)}" + (f" ({', '.join(parts)})" if parts else "")


def combine(asks: list[Ask]) -> GpuRequest:
    """The pod's one request for its GPU containers `asks` (admission order); RequestError
    when they cannot be one request."""
    names = ", ".join(a.where for a in asks)
    if len(asks) > MAX_GPU_CONTAINERS:
        raise RequestError(names[:200], f"{len(asks)} containers ask for GPUs",
                           f"list at most {MAX_GPU_CONTAINERS} GPU containers in one pod")
    first = asks[0]
    for other in asks[1:]:
        if shape(other.request) != shape(first.request):
            raise RequestError(
                f"{first.where}, {other.where}",
                f"ask for different GPU shapes ({describe(first.request)} vs "
                f"{describe(other.request)}); gpugov places a pod's devices as one shape",
                "give every GPU container of the pod the same per-device ask (same resource "
                "names and sizes; the device counts may differ), or put the differently "
                "sized work in its own pod")
    count = effective((a.kind, a.request.count) for a in asks)
    if first.request.mode in _REPLICAS and count > 1:
        together = [a.where for a in asks if a.kind != "init"] or [a.where for a in asks]
        what = describe(replace(first.request, count=1))
        raise RequestError(
            ", ".join(together), f"each ask for {what} while running together; gpugov gives "
            "a pod one time-slice replica or MPS client",
            "ask for it in one container (an init container before it may ask the same and "
            "reuses it), or give each container a soft slice (nvidia.com/gpu: 1 with "
            "nvidia.com/gpumem / nvidia.com/gpucores)")
    spellings: list[str] = []
    for a in asks:
        spellings += [s for s in a.request.spellings if s not in spellings]
    return replace(first.request, count=count, spellings=tuple(spellings))
