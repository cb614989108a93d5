"""The control plane and its scheduling cycle.

A cycle: (1) fair shares from usage + pending demand; (2) allocate: leaf queues are served
from a heap keyed by their dominant share relative to fair share (lowest first), one job at
a time, jobs within a queue by priority then submit time; every pending job is considered
once per cycle (not one head per queue), so throughput does not fall with queue depth;
(3) a blocked head within its fair share reserves nodes so backfill cannot starve it;
(4) preemption for jobs still blocked (see preemption.py). Pure: `now` is an input.
The state between cycles (jobs, ledger, reservations) is `bookkeeping.Bookkeeping`.

Reservations are live by construction: they are disjoint, each can hold all of its owner's
pods on its own (a reservation that could not is never made, or is dropped), and a node
reserved for job O is closed only to the jobs *behind* O in the one order every job has
(`Job.order_key`: class value, then submit time, then submission order). So the owner
first in that order is never kept off any node: on an idle cluster it always fits, and a
set of reservations can never block all of its owners (the deadlock of two gangs each
holding part of what the other needs cannot form).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Sequence

import numpy as np

from gpugov.control import reasons
from gpugov.control.bookkeeping import (
    Bookkeeping,
    set_placement_reason,
    set_quota_reason,
)
from gpugov.control.fairshare import EPS
from gpugov.control.gang import pick_reservation, place_job, release_allocations
from gpugov.control.outcome import CycleResult, PreemptionEvent
from gpugov.control.preemption import preempt_for_blocked
from gpugov.control.quota import QuotaVerdict
from gpugov.control.schema import ControlConfig
from gpugov.control.workload import PENDING, Job
from gpugov.model.cluster import ClusterState

__all__ = ["ControlPlane", "CycleResult", "PreemptionEvent", "new_control_plane",
           "set_placement_reason", "set_quota_reason", "submit_all"]


class ControlPlane(Bookkeeping):
    """The control plane: `Bookkeeping` plus the scheduling cycle."""

    def cycle(self, now: float) -> CycleResult:
        """One scheduling cycle at time `now`."""
        result = CycleResult()
        result.fair = self.refresh_fair_share(now)
        if self._same_as_quiet(now):
            result.skipped = True
            self.skipped += 1
            return result
        self.reservations = {k: v for k, v in self.reservations.items()
                             if self.jobs[k].status == PENDING}
        self._res_version += 1
        before = dict(self.reservations)
        alloc = _Allocator(self, now, result)
        alloc.run()
        if self.cfg.preemption.enabled and self.cfg.preemption.max_attempts > 0:
            preempt_for_blocked(self, now, result, alloc.exclusion_for)
        for leaf, jobs in enumerate(self.backlog):
            if any(j.status != PENDING for j in jobs):
                self.backlog[leaf] = [j for j in jobs if j.status == PENDING]
        self._remember_quiet(now, result, before)
        return result

    # -- skipping cycles that cannot decide anything new -------------------------------------
    # A cycle is a deterministic function of: jobs, usage, cluster state, backlog order,
    # reservations, fair shares, and `now` only through two thresholds (a running job
    # passing its minRuntime, a pending job passing headGrace). If the previous cycle started,
    # preempted and reserved nothing, nothing was mutated since, the fair shares are
    # bitwise equal and no threshold was crossed, this cycle would redo exactly the same
    # work with the same outcome (reasons included), so it is skipped. Policies that draw
    # random numbers while deciding are never skipped (the draws would shift).

    def _same_as_quiet(self, now: float) -> bool:
        q = self._quiet
        return (self.fast and q is not None and q[0] == self._mutations and now < q[2]
                and np.array_equal(q[1], self.fair))

    def _remember_quiet(self, now: float, result: CycleResult,
                        before: dict[str, np.ndarray]) -> None:
        self._quiet = None
        if (not self.fast or result.started or result.preempted
                or not self.placer.policy.cacheable or before.keys() != self.reservations.keys()
                or any(not np.array_equal(v, before[k]) for k, v in self.reservations.items())):
            return
        nxt = float("inf")
        for running in self.running:
            for j in running.values():
                t = j.start + j.pclass.min_runtime
                if j.pclass.preemptible and t > now:
                    nxt = min(nxt, t)
        grace = self.cfg.backfill.head_grace
        if grace > 0:
            for jobs in self.backlog:
                for j in jobs:
                    if j.submit + grace > now:
                        nxt = min(nxt, j.submit + grace)
        self._quiet = (self._mutations, self.fair.copy(), nxt)


#: blocked by placement (including by nodes reserved for jobs ahead): may reserve nodes
_RESERVE_REASONS = (reasons.NO_NODE, reasons.GANG, reasons.PRIORITY)


class _Allocator:
    """The allocate action of one cycle (state lives here only for the cycle's duration)."""

    def __init__(self, cp: ControlPlane, now: float, result: CycleResult) -> None:
        self.cp, self.now, self.result = cp, now, result
        # reservation view, rebuilt whenever cp.reservations changes (see _sync)
        self._version = -1
        self.owner_names: list[str] = []
        self.owner_keys: list[tuple] = []
        self.closed: list[np.ndarray] = []  # [k-1]: nodes of the first k owners
        self.fail_cache: dict[tuple, tuple[str, str, str]] = {}  # reason, detail, blocked_by
        self.quota_cache: dict[tuple, QuotaVerdict] = {}
        self.reserved_leaves: set[int] = set()
        self.fast = cp.fast
        # fast path only, all valid until the next start (the ledger and state change then):
        self.quota_ok: set[tuple] = set()  # (leaf, shape, pinned) that passed the quota check
        self.quota_words: dict[tuple, tuple[str, str, str]] = {}  # reason, detail, blocked_by
        self.no_reservation: set[tuple] = set()  # (shape, k) pick_reservation found no nodes for
        # (leaf, shape, pinned, k) placed but refused by the charge of the devices it got: the
        # same placement and ledger give the same refusal until a start or a reservation change
        self.charge_words: dict[tuple, tuple[str, str, str]] = {}

    def _sync(self) -> None:
        cp = self.cp
        if self._version == cp._res_version:
            return
        self._version = cp._res_version
        self.owner_names = cp.reservation_owners()
        self.owner_keys = [cp.jobs[n].order_key for n in self.owner_names]
        mask = np.zeros(len(cp.state), dtype=bool)
        self.closed = []
        for name in self.owner_names:
            mask = mask.copy()
            mask[cp.reservations[name]] = True
            self.closed.append(mask)
        # answers below depend on which nodes are closed to whom
        self.fail_cache.clear()
        self.no_reservation.clear()
        self.charge_words.clear()

    def ahead(self, job: Job) -> int:
        """How many reservation owners are ahead of `job` in job order."""
        self._sync()
        return bisect_left(self.owner_keys, job.order_key)

    def exclusion_for(self, job: Job) -> np.ndarray | None:
        """Nodes closed to `job`: those reserved for owners ahead of it (never its own)."""
        k = self.ahead(job)
        return self.closed[k - 1] if k else None

    def try_place(self, job: Job) -> bool:
        """Quota check, then all-or-nothing placement; sets the job's reason on failure."""
        cp = self.cp
        qkey = (job.leaf, job.shape_key(), job.pinned)
        verdict = self.quota_cache.get(qkey)
        if verdict is None and not (self.fast and qkey in self.quota_ok):
            verdict = cp.ledger.check(job.leaf, job.demand, job.pinned)
            if verdict is None and self.fast:
                self.quota_ok.add(qkey)
        if verdict is not None:
            self.quota_cache[qkey] = verdict
            words = self.quota_words.get(qkey) if self.fast else None
            if words is None:
                set_quota_reason(cp, job, verdict)
                self.quota_words[qkey] = (job.reason, job.detail, job.blocked_by)
            else:
                job.reason, job.detail, job.blocked_by = words
            return False
        k = self.ahead(job)
        key = (job.shape_key(), k)  # placement depends on the shape and the closed nodes
        cached = self.fail_cache.get(key)
        if cached is not None:
            job.reason, job.detail, job.blocked_by = cached
            return False
        ckey = (*qkey, k)
        words = self.charge_words.get(ckey) if self.fast else None
        if words is not None:
            job.reason, job.detail, job.blocked_by = words
            return False
        res = place_job(cp.placer, job, self.closed[k - 1] if k else None)
        if res.allocations is not None:
            charged, verdict = cp.check_charge(job, res.allocations)
            if verdict is not None:  # the card it got costs more than its queue may hold
                release_allocations(cp.state, job.request, res.allocations)
                set_quota_reason(cp, job, verdict)
                if self.fast:
                    self.charge_words[ckey] = (job.reason, job.detail, job.blocked_by)
                return False
            cp._start(job, res.allocations, self.now, charged)
            self.result.started.append(job)
            self.quota_ok.clear()
            self.quota_words.clear()
            self.charge_words.clear()
            self.no_reservation.clear()
            return True
        set_placement_reason(cp, job, res.placed, res.reason, self.owner_names[:k])
        self.fail_cache[key] = (job.reason, job.detail, job.blocked_by)
        return False

    def maybe_reserve(self, job: Job) -> None:
        """Reserve nodes for a blocked job: all or nothing, never nodes of owners ahead.

        Owners behind `job` whose nodes it takes lose their reservation (they reserve again
        when next considered); an owner that can no longer reserve enough nodes loses its
        own. So reservations stay disjoint and each can hold all its owner's pods.
        """
        cp = self.cp
        bf = cp.cfg.backfill
        if (job.reason not in _RESERVE_REASONS or job.leaf in self.reserved_leaves
                or self.now - job.submit < bf.head_grace):
            return
        own = job.name in cp.reservations
        if len(cp.reservations) - own >= bf.max_reservations:
            return
        if cp.ratio(job.leaf) > 1.0 + EPS:
            return  # a queue above its fair share waits; it does not hold nodes back
        k = self.ahead(job)
        rkey = (job.shape_key(), k)  # `taken` is the nodes of the first k owners
        if self.fast and rkey in self.no_reservation:
            nodes = np.zeros(0, dtype=np.int64)
        else:
            taken = self.closed[k - 1] if k else np.zeros(len(cp.state), dtype=bool)
            nodes = pick_reservation(cp.placer, job, taken)
        if len(nodes) == 0:
            self.no_reservation.add(rkey)
            if own:
                cp._drop_reservation(job.name)  # it could not complete: do not block others
            return
        self.reserved_leaves.add(job.leaf)
        if own and np.array_equal(nodes, cp.reservations[job.name]):
            return
        cp.reservations[job.name] = nodes
        mine = np.zeros(len(cp.state), dtype=bool)
        mine[nodes] = True
        for other in self.owner_names[k:]:
            if other != job.name and mine[cp.reservations[other]].any():
                del cp.reservations[other]
        cp._res_version += 1

    def run(self) -> None:
        cp = self.cp
        heap: list[tuple[float, int, str, int]] = []
        cursor: dict[int, int] = {}
        for leaf in np.flatnonzero(cp.tree.is_leaf):
            leaf = int(leaf)
            if cp.pending(leaf):
                cursor[leaf] = 0
                heap.append(self._key(leaf))
        heapq.heapify(heap)
        while heap:
            *_, leaf = heapq.heappop(heap)
            jobs = cp.backlog[leaf]
            i = cursor[leaf]
            if self.fast:
                # A failure changes neither usage nor fair share, so the leaf keeps its key
                # and would be popped again at once: serve it until a start re-keys it.
                while i < len(jobs):
                    job = jobs[i]
                    i += 1
                    self.result.considered += 1
                    if job.status == PENDING:
                        if self.try_place(job):
                            break
                        self.maybe_reserve(job)
                cursor[leaf] = i
                if i < len(jobs):
                    heapq.heappush(heap, self._key(leaf))
                continue
            cursor[leaf] = i + 1
            job = jobs[i]
            self.result.considered += 1
            if job.status == PENDING and not self.try_place(job):
                self.maybe_reserve(job)
            if i + 1 < len(jobs):
                heapq.heappush(heap, self._key(leaf))

    def _key(self, leaf: int) -> tuple[float, int, str, int]:
        cp = self.cp
        return (cp.ratio(leaf), -int(cp.tree.priority[leaf]), cp.tree.names[leaf], leaf)


def submit_all(cp: ControlPlane, jobs: Sequence[Job]) -> None:
    for j in jobs:
        cp.submit(j)


def new_control_plane(cfg: ControlConfig, nodes: Sequence, policy: str = "gpugov", seed: int = 0,
                      workload: Sequence | None = None) -> ControlPlane:
    """Wire state, placement policy and control plane as `run_experiment` does.

    `workload` (pod requests) defines FGD's typical pods; node tie-break order is a
    permutation drawn from `seed`, so runs are deterministic for a fixed seed.
    """
    from gpugov.placement.base import PolicyContext
    from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
    from gpugov.placement.registry import get_policy

    policy_cls = get_policy(policy)
    rng = np.random.default_rng(seed)
    state = ClusterState(nodes)
    typical = TypicalPods.from_requests(list(workload or []))
    ctx = PolicyContext(FragmentationModel(typical, state), rng)
    return ControlPlane(cfg, state, policy_cls(ctx), rng.permutation(len(state)))
