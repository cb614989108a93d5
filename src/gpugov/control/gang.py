"""All-or-nothing placement of a job's pods, and node reservations for blocked heads.

Simulate, then commit: pods are placed one by one on the live state; if any pod does not fit,
the ones already placed are released again, so a gang never holds resources partially.
Reservations keep backfill off the nodes a blocked head is waiting for, so small jobs cannot
starve it; only the owner and jobs ahead of it may place there (see cycle.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpugov.control.workload import Job
from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import ClusterState
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.engine import Placer


@dataclass(frozen=True, slots=True)
class GangResult:
    allocations: list[Allocation] | None
    placed: int  # pods that fitted before the first failure
    reason: str  # engine reason of the failing pod ("gpu", "cpu", "reserved", ...)


def place_job(placer: Placer, job: Job, exclude: np.ndarray | None,
              commit: bool = True) -> GangResult:
    """Place every pod of `job` or none; with commit=False the state is left unchanged."""
    state = placer.state
    done: list[Allocation] = []
    req = job.request
    for i in range(job.pods):
        d = placer.decide(req, exclude)
        if d.allocation is None:
            for a in reversed(done):
                state.release(req, a)
            return GangResult(None, i, d.reason)
        state.allocate(req, d.allocation)
        done.append(d.allocation)
    if not commit:
        for a in reversed(done):
            state.release(req, a)
    return GangResult(done, job.pods, "")


def release_job(state: ClusterState, job: Job) -> None:
    for a in reversed(job.allocations):
        state.release(job.request, a)


def restore_job(state: ClusterState, job: Job) -> None:
    """Re-apply a job's recorded allocations (undo a simulated eviction)."""
    for a in job.allocations:
        state.allocate(job.request, a)


def pods_per_node(state: ClusterState, req: PodRequest, free: bool) -> np.ndarray:
    """How many pods of `req` fit on each node: in its free capacity, or when empty."""
    cpu = state.cpu_free if free else state.cpu_cap
    mem = state.mem_free if free else state.mem_cap
    big = np.iinfo(np.int64).max // 4
    n = np.minimum(cpu // req.cpu_milli if req.cpu_milli else big,
                   mem // req.memory_mib if req.memory_mib else big)
    if req.is_gpu:
        n = np.where(state.model_mask(req.models), n, 0)
        gpu = state.gpu_free if free else state.gpu_cap
        if req.is_sharing:
            n = np.minimum(n, (gpu // req.gpu_milli).sum(axis=1))
        else:
            whole = (gpu == MILLI_PER_GPU).sum(axis=1)
            n = np.minimum(n, whole // req.gpu_count)
    return n


def fits_empty_cluster(state: ClusterState, job: Job) -> bool:
    """Could the job ever run here (all pods at once on an empty cluster)?"""
    return int(pods_per_node(state, job.request, free=False).sum()) >= job.pods


def pick_reservation(placer: Placer, job: Job, taken: np.ndarray) -> np.ndarray:
    """Nodes to hold for `job`: the ones closest to hosting it, until they could host all.

    Nodes are ranked by how many of its pods fit in their free capacity now (then by the
    placer's tie-break order), and taken until their empty capacity covers every pod.
    All or nothing: when the nodes outside `taken` could not hold every pod even empty, the
    answer is no nodes (a partial reservation could never complete, it would only block).
    """
    state = placer.state
    cap = pods_per_node(state, job.request, free=False)
    cap = np.where(taken, 0, cap)
    cand = np.flatnonzero(cap > 0)
    if int(cap[cand].sum()) < job.pods:
        return cand[:0]
    now = pods_per_node(state, job.request, free=True)
    order = cand[np.lexsort((placer.rank[cand], -state.gpu_free_total[cand], -now[cand]))]
    enough = np.searchsorted(np.cumsum(cap[order]), job.pods) + 1
    return order[:enough]
