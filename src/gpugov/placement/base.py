"""The one small interface every placement policy implements, and the shared GPU choices.

A policy scores feasible nodes with integers in 0..100 and picks devices inside the chosen
node. Feasibility, tie-breaking and score caching live in the engine, so a new policy is one
module with a `Policy` subclass plus one line in `registry.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import ClusterState
from gpugov.model.devices import DeviceMode
from gpugov.model.request import PodRequest
from gpugov.placement.fragmentation import FragmentationModel
from gpugov.placement.topology import nvlink_set

#: the study's normalisation constants (largest node CPU and GPU milli it expects).
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8_000


@dataclass
class PolicyContext:
    """What a policy may need beyond the state: the workload model and a random stream."""

    fragmentation: FragmentationModel
    rng: np.random.Generator


class Policy(ABC):
    """Scores nodes for a request and chooses devices inside the chosen node."""

    #: command-line name, e.g. "fgd".
    name: ClassVar[str]
    #: label in the study's artifact files, e.g. "06-FGD".
    label: ClassVar[str]
    #: True when a node's score depends only on that node's state and the request shape,
    #: so the engine may cache it until the node changes.
    cacheable: ClassVar[bool] = True

    def __init__(self, ctx: PolicyContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def score(self, state: ClusterState, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        """Integer scores (int64, 0..100) of feasible `nodes` for `req`; higher is better."""

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Optional pass over all feasible nodes' scores (identity by default)."""
        return scores

    def ranked(self, state: ClusterState, req: PodRequest, mask: np.ndarray, cache: object
               ) -> int | None:
        """The engine's ranked pick (`Placer._ranked`) done by the policy in one compiled
        call — the same node — or None to let the engine do it (the default)."""
        return None

    def choose_devices(self, state: ClusterState, req: PodRequest, node: int) -> tuple[int, ...]:
        """Devices for `req` on `node`: lowest-index free GPUs, best fit for sharing pods."""
        if not req.is_gpu:
            return ()
        if not state.fast_path(req):
            return general_devices(state, req, node)
        if req.is_sharing:
            fits = state.device_fits(req, node) if req.gpu_memory_mib else None
            return (best_fit_device(state.gpu_free[node], req.gpu_milli, fits),)
        return lowest_fitting_devices(state, req, node)


def general_devices(state: ClusterState, req: PodRequest, node: int) -> tuple[int, ...]:
    """Devices for any request mode (the per-device filter decides what fits):
    whole GPUs the lowest-index fitting ones; a soft slice the best fit in compute (N slices:
    the N best-fitting distinct devices); a MIG
    instance the device already most cut up (least free compute slices: whole devices stay
    whole), a time-slice replica the device with the most memory unpromised (least risk), an
    MPS client the most used device (whole devices stay free). Ties: lowest index."""
    fits = state.device_fits(req, node)
    idx = np.flatnonzero(fits)
    if len(idx) < (1 if req.mode is DeviceMode.MIG else req.gpu_count):
        raise ValueError(f"{req.name}: needs {req.gpu_count} fitting devices on "
                         f"{state.names[node]}, found {len(idx)}")
    mode = req.slice_mode
    if mode is DeviceMode.EXCLUSIVE:
        return _one_domain(state, req, node, [int(i) for i in idx])
    if mode is DeviceMode.SOFT:
        if req.gpu_count > 1:  # N slices on N distinct devices: the N best fits
            order = np.lexsort((idx, state.gpu_free[node, idx]))
            return _one_domain(state, req, node, [int(i) for i in idx[order]])
        return (best_fit_device(state.gpu_free[node], req.gpu_milli, fits),)
    if mode is DeviceMode.MIG:
        key = state.mig_compute_free[node, idx]
    elif mode is DeviceMode.TIMESLICE:
        key = -state.gpu_mem_free[node, idx]
    else:
        key = state.rep_free[node, idx]
    return (int(idx[int(np.argmin(key))]),)


def _one_domain(state: ClusterState, req: PodRequest, node: int, ranked: list[int]
                ) -> tuple[int, ...]:
    """The first `gpu_count` of `ranked` fitting devices; with `gpugov.io/topology: required`
    the best-fitting NVLink domain's (the state's filter left only domains that can hold
    them all)."""
    if req.nvlink and req.gpu_count > 1:
        same = nvlink_set(state.dev_nvlink[node], ranked, req.gpu_count)
        if same is None:
            raise ValueError(f"{req.name}: no NVLink domain of {state.names[node]} holds "
                             f"{req.gpu_count} fitting devices")
        return tuple(sorted(same))
    return tuple(sorted(ranked[:req.gpu_count]))


def lowest_fitting_devices(state: ClusterState, req: PodRequest, node: int) -> tuple[int, ...]:
    """The lowest-index fully free devices of `node` for a whole-GPU request (with enough
    memory when the request names it)."""
    if not req.gpu_memory_mib:
        return lowest_free_devices(state.gpu_free[node], req.gpu_count)
    idx = np.flatnonzero(state.device_fits(req, node))[:req.gpu_count]
    if len(idx) < req.gpu_count:
        raise ValueError(f"needs {req.gpu_count} free devices, node has {len(idx)}")
    return tuple(int(i) for i in idx)


def lowest_free_devices(free: np.ndarray, count: int) -> tuple[int, ...]:
    """The `count` lowest-index fully free devices."""
    # a few devices: a Python scan beats numpy's calls here
    idx = [i for i, f in enumerate(free.tolist()) if f == MILLI_PER_GPU][:count]
    if len(idx) < count:
        raise ValueError(f"needs {count} free devices, node has {len(idx)}")
    return tuple(idx)


def best_fit_device(free: np.ndarray, milli: int, fits: np.ndarray | None = None) -> int:
    """The device with the least free milli still >= `milli` (lowest index on ties);
    `fits` narrows the candidates further (e.g. to devices with enough GPU memory)."""
    ok = free >= milli if fits is None else fits
    masked = np.where(ok, free, np.iinfo(np.int64).max)
    i = int(masked.argmin())
    if not ok[i]:
        raise ValueError(f"no device with {milli} milli free")
    return i


def truncate(values: np.ndarray) -> np.ndarray:
    """Float scores to int64 by truncation toward zero, as Go's int64() conversion does."""
    return np.trunc(values).astype(np.int64)
