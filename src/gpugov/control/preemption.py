"""Two distinct mechanisms for jobs the allocate action left blocked.

Reclaim (across queues, tried first): job J of queue X may evict preemptible work, past its
minRuntime, of another queue Y only if
  (a) X stays within its fair share with J admitted,
  (b) Y is above its fair share,
  (c) Y and its ancestors below the common ancestor keep at least their guaranteed quota
      in every resource the victim frees (in-quota work is never reclaimed), and
  (d) afterwards X's dominant share/fair-share ratio is at most Y's (ordering preserved),
so Y could never reclaim it straight back: no loops.
Preempt (within a queue): J evicts preemptible jobs of its own queue with a strictly lower
priority value, past their minRuntime.
Never a victim: a job started in the same cycle (at the same `now`).
Victims are whole jobs (whole gangs), chosen greedily in a fixed order and then minimised
(Kueue style: walk back and spare any victim J can do without); J must fit afterwards in a
simulation on the live state, otherwise nothing changes. The simulation releases victims'
real allocations (MIG instances, replicas, GPU memory: `ClusterState.release`) and places J
with its real request; quotas are checked with what J's placement would charge and what the
victims hold (`Job.charged`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpugov.control import reasons
from gpugov.control.bookkeeping import Bookkeeping as ControlPlane
from gpugov.control.fairshare import EPS, dominant_ratio
from gpugov.control.gang import (
    place_job,
    pods_per_node,
    release_allocations,
    release_job,
    restore_job,
)
from gpugov.control.outcome import CycleResult, PreemptionEvent
from gpugov.control.workload import PENDING, Job

#: nodes closed to a job by reservations of jobs ahead of it (None: none)
Exclusion = Callable[[Job], "np.ndarray | None"]

PREEMPTABLE_REASONS = (reasons.NO_NODE, reasons.GANG, reasons.FAIR_SHARE, reasons.OVER_QUOTA)


def _past_min_runtime(job: Job, now: float) -> bool:
    """Preemptible, past its class's minRuntime, and not started in this very cycle (a
    start undone at once would only cost the work of both and hide the job's wait)."""
    return (job.pclass.preemptible and job.start < now
            and now - job.start >= job.pclass.min_runtime)


def _useful(cp: ControlPlane, job: Job) -> np.ndarray:
    """Nodes that could host at least one pod of `job` if they were empty."""
    return pods_per_node(cp.state, job.request, free=False) > 0


def _on_useful(victim: Job, useful: np.ndarray) -> bool:
    return any(useful[a.node] for a in victim.allocations)


def preempt_candidates(cp: ControlPlane, job: Job, now: float) -> list[Job]:
    """Same-queue victims: strictly lower priority, preemptible, past minRuntime."""
    useful = _useful(cp, job)
    cands = [v for v in cp.running[job.leaf].values()
             if v.priority < job.priority and _past_min_runtime(v, now) and _on_useful(v, useful)]
    cands.sort(key=lambda v: (v.priority, -v.start, -v.seq))
    return cands


def reclaim_candidates(cp: ControlPlane, job: Job, now: float) -> list[Job]:
    """Other queues' victims, most over-share queue first, then lowest priority, newest."""
    need = (job.demand > 0) & cp.tree.governed
    after = cp.ledger.usage[job.leaf] + job.demand
    if (after[need] > cp.fair[job.leaf][need] + EPS).any():
        return []  # (a) the reclaimer would exceed its own fair share
    useful = _useful(cp, job)
    cands: list[tuple[float, Job]] = []
    for leaf in np.flatnonzero(cp.tree.is_leaf):
        leaf = int(leaf)
        if leaf == job.leaf or not cp.running[leaf]:
            continue
        r = cp.ratio(leaf)
        if r <= 1.0 + EPS:
            continue  # (b)
        cands.extend((r, v) for v in cp.running[leaf].values()
                     if _past_min_runtime(v, now) and _on_useful(v, useful))
    cands.sort(key=lambda rv: (-rv[0], rv[1].priority, -rv[1].start, -rv[1].seq))
    return [v for _, v in cands]


def _reclaim_allowed(cp: ControlPlane, job: Job, victim: Job) -> bool:
    """Rules (c) and (d) given the victims already taken out of the ledger."""
    usage, tree = cp.ledger.usage, cp.tree
    frees = (victim.charged > 0) & tree.governed
    gov = tree.governed
    for a in tree.lca_path(victim.leaf, job.leaf):
        left = usage[a] - victim.charged
        if (left[frees] < tree.quota[a][frees] - EPS).any():
            return False
    mine = dominant_ratio((usage[job.leaf] + job.demand)[gov], cp.fair[job.leaf][gov])
    theirs = dominant_ratio((usage[victim.leaf] - victim.charged)[gov],
                            cp.fair[victim.leaf][gov])
    return mine <= theirs + EPS


def _fits(cp: ControlPlane, job: Job, exclude: np.ndarray | None) -> bool:
    """Would `job` pass its quota and be placed now (and its placement's charge pass too)?"""
    if cp.ledger.check(job.leaf, job.demand, job.pinned) is not None:
        return False
    res = place_job(cp.placer, job, exclude, commit=False)
    if res.allocations is None:
        return False
    return cp.check_charge(job, res.allocations)[1] is None


def _take(cp: ControlPlane, v: Job) -> None:
    release_job(cp.state, v)
    cp.ledger.remove(v.leaf, v.charged, v.pinned)


def _give_back(cp: ControlPlane, v: Job) -> None:
    restore_job(cp.state, v)
    cp.ledger.add(v.leaf, v.charged, v.pinned)


def find_victims(cp: ControlPlane, job: Job, cands: list[Job], reclaim: bool,
                 exclude: np.ndarray | None) -> list[Job] | None:
    """A minimal victim set after which `job` fits, or None. The state is left unchanged.

    The greedy pass takes victims in policy order (lowest priority, newest first). Small
    victims taken first (fractions, MPS clients) can free no whole device yet push their
    queue down to its quota or fair share, so a victim that alone would do is refused by
    rules (c)/(d) and reclaim gave up. When that pass fails, a second one tries the same
    candidates biggest first (most of what `job` needs freed), policy order breaking ties.
    """
    cands = cands[: cp.cfg.preemption.max_victim_candidates]
    found = _greedy_victims(cp, job, cands, reclaim, exclude)
    if found is None:
        need = (job.demand > 0) & cp.tree.governed
        if need.any():
            order = {id(v): i for i, v in enumerate(cands)}
            biggest = sorted(cands, key=lambda v: (-float(v.charged[need].sum()), order[id(v)]))
            if biggest != cands:
                found = _greedy_victims(cp, job, biggest, reclaim, exclude)
    return found


def _greedy_victims(cp: ControlPlane, job: Job, cands: list[Job], reclaim: bool,
                    exclude: np.ndarray | None) -> list[Job] | None:
    """Take candidates in order until `job` fits, then spare any it can do without."""
    victims: list[Job] = []
    found = False
    for v in cands:
        if reclaim and not _reclaim_allowed(cp, job, v):
            continue
        _take(cp, v)
        victims.append(v)
        if _fits(cp, job, exclude):
            found = True
            break
    if not found:
        for v in reversed(victims):
            _give_back(cp, v)
        return None
    for v in reversed(victims[:-1]):  # the last one was needed by construction
        _give_back(cp, v)
        if _fits(cp, job, exclude):
            victims.remove(v)
        else:
            _take(cp, v)
    for v in reversed(victims):
        _give_back(cp, v)
    return victims


def try_preempt(cp: ControlPlane, job: Job, now: float, result: CycleResult,
                exclude: np.ndarray | None) -> bool:
    """Reclaim first, then same-queue priority preemption; commit only if `job` fits."""
    attempts = []
    if job.reason != reasons.OVER_QUOTA:
        attempts.append(("reclaim", reclaim_candidates(cp, job, now)))
    attempts.append(("preempt", preempt_candidates(cp, job, now)))
    for kind, cands in attempts:
        if not cands:
            continue
        victims = find_victims(cp, job, cands, kind == "reclaim", exclude)
        if not victims:
            continue
        for v in victims:
            _take(cp, v)
        res = place_job(cp.placer, job, exclude)
        charged, verdict = (None, None) if res.allocations is None else \
            cp.check_charge(job, res.allocations)
        if res.allocations is None or verdict is not None:  # not with deterministic policies
            if res.allocations is not None:
                release_allocations(cp.state, job.request, res.allocations)
            for v in reversed(victims):
                _give_back(cp, v)
            continue
        for v in victims:
            cp.evict(v, released=True)
            result.preempted.append(PreemptionEvent(
                v.name, cp.tree.names[v.leaf], job.name, cp.tree.names[job.leaf], kind))
        cp._start(job, res.allocations, now, charged)
        result.started.append(job)
        return True
    return False


def preempt_for_blocked(cp: ControlPlane, now: float, result: CycleResult,
                        exclusion_for: Exclusion) -> None:
    """Queues in fairness order; per queue its blocked jobs in order until one fails."""
    budget = cp.cfg.preemption.max_attempts
    leaves = [int(q) for q in np.flatnonzero(cp.tree.is_leaf) if cp.backlog[int(q)]]
    leaves.sort(key=lambda q: (cp.ratio(q), -int(cp.tree.priority[q]), cp.tree.names[q]))
    for leaf in leaves:
        for job in list(cp.backlog[leaf]):
            if budget <= 0:
                return
            if job.status != PENDING or job.reason not in PREEMPTABLE_REASONS:
                continue
            budget -= 1
            if not try_preempt(cp, job, now, result, exclusion_for(job)):
                break
