"""All-or-nothing placement of a job's pods, and node reservations for blocked heads.

Simulate, then commit: pods are placed one by one on the live state; if any pod does not fit,
the ones already placed are released again, so a gang never holds resources partially.
Reservations keep backfill off the nodes a blocked head is waiting for, so small jobs cannot
starve it; only the owner and jobs ahead of it may place there (see cycle.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import numpy as np

from gpugov.control.workload import Job
from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import ClusterState
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.engine import Placer, allocation_for


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
    release_allocations(state, job.request, job.allocations)


def release_allocations(state: ClusterState, req: PodRequest,
                        allocations: list[Allocation]) -> None:
    for a in reversed(allocations):
        state.release(req, a)


def restore_job(state: ClusterState, job: Job) -> None:
    """Re-apply a job's recorded allocations (undo a simulated eviction)."""
    for a in job.allocations:
        state.allocate(job.request, a)


def pods_per_node(state: ClusterState, req: PodRequest, free: bool) -> np.ndarray:
    """How many pods of `req` fit on each node: in its free capacity, or when empty.

    Exact for the trace engine's requests (whole GPUs and soft slices on soft devices); for
    any other request or cluster a lower bound: one pod per `gpu_count` devices that could
    take it (a MIG device or a replica device may hold more)."""
    if not state.fast_path(req):
        return _general_pods_per_node(state if free else empty_twin(state), req)
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


def _general_pods_per_node(state: ClusterState, req: PodRequest) -> np.ndarray:
    big = np.iinfo(np.int64).max // 4
    n = np.minimum(state.cpu_free // req.cpu_milli if req.cpu_milli else big,
                   state.mem_free // req.memory_mib if req.memory_mib else big)
    ok = state.feasible(req)
    if req.gpu_count:
        devices = state.device_fits(req).sum(axis=1)
        n = np.minimum(n, devices // req.gpu_count)
    return np.where(ok, n, 0)


#: an empty copy of each state (same nodes, nothing allocated), made when first asked for
_EMPTY: WeakKeyDictionary[ClusterState, ClusterState] = WeakKeyDictionary()


def empty_twin(state: ClusterState) -> ClusterState:
    """The same cluster with nothing running (built once per state; callers that change it
    must put it back with snapshot/restore)."""
    twin = _EMPTY.get(state)
    if twin is None:
        twin = _EMPTY[state] = ClusterState(state.nodes)
    return twin


def empty_cluster_fit(state: ClusterState, job: Job) -> tuple[int, str]:
    """(pods of `job` the empty cluster holds at once, up to all; the `REASONS` code of the
    first that does not fit, "" when all do). Whole GPUs and soft slices on soft devices:
    exact (the pods every node holds when empty); other modes: first fit on an empty copy of
    the cluster. Answered from a cache per request shape (`_EmptyFit`): the same answers,
    without an O(nodes) test per submitted job."""
    req = job.request
    fits = _FITS.get(state)
    if fits is None:
        fits = _FITS[state] = {}
    shape = tuple(getattr(req, f) for f in _SHAPE_FIELDS)  # all but the pod's name
    known = fits.get(shape)
    if known is None:
        if len(fits) >= MAX_SHAPES:  # bounded: a flood of distinct shapes starts over
            fits.clear()
        known = fits[shape] = _EmptyFit()
        if state.fast_path(req):  # how many pods the empty nodes hold, all at once
            fit = int(pods_per_node(state, req, free=False).sum())
            known.limit = (fit, empty_twin(state).failure_reason(req) if fit == 0
                           else "gpu" if req.is_gpu else "cpu")
    return known.answer(state, req, job.pods)


#: the PodRequest fields an empty-cluster answer depends on (every compared one but the name)
_SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(PodRequest)
                      if f.compare and f.name != "name")


#: most request shapes whose empty-cluster answer is kept per state
MAX_SHAPES = 4096


class _EmptyFit:
    """What the empty cluster has shown for one request shape: `fit` pods placed by first fit
    without a failure, and once a pod failed, `limit` = (pods placed before it, its reason);
    on the fast path `limit` is set at once from the nodes' capacities. First fit places pods
    in the same order whatever their number, so the answer for n pods is (n, "") up to the
    first failure and `limit` past it."""

    __slots__ = ("fit", "limit")

    def __init__(self) -> None:
        self.fit = 0
        self.limit: tuple[int, str] | None = None

    def answer(self, state: ClusterState, req: PodRequest, pods: int) -> tuple[int, str]:
        if self.limit is not None:
            placed, why = self.limit
            return (pods, "") if pods <= placed else (placed, why)
        if pods <= self.fit:
            return pods, ""
        placed, why = first_fit_empty(state, req, pods)
        if why:
            self.limit = (placed, why)
        else:
            self.fit = pods
        return placed, why


#: per state: request shape -> what the empty cluster has shown for it
_FITS: WeakKeyDictionary[ClusterState, dict[tuple, _EmptyFit]] = WeakKeyDictionary()


def first_fit_empty(state: ClusterState, req: PodRequest, pods: int) -> tuple[int, str]:
    """First fit of `pods` pods of `req` on the empty twin (uncached): (placed, reason of the
    first that did not fit or "")."""
    empty = empty_twin(state)
    snap = empty.snapshot()
    try:
        for placed in range(pods):
            nodes = np.flatnonzero(empty.feasible(req))
            if not len(nodes):
                return placed, empty.failure_reason(req)
            n = int(nodes[0])
            devs = np.flatnonzero(empty.device_fits(req, np.array([n]))[0])[:req.gpu_count]
            empty.allocate(req, allocation_for(empty, req, n, tuple(int(d) for d in devs)))
        return pods, ""
    finally:
        empty.restore(snap)


def fits_empty_cluster(state: ClusterState, job: Job) -> bool:
    """Could the job ever run here (all pods at once on an empty cluster)?"""
    return empty_cluster_fit(state, job)[0] >= job.pods


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
