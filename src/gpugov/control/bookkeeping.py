"""What the control plane knows between cycles: jobs, queues' backlogs, the quota ledger,
running work, reservations and fair shares, and the lifecycle of a job (submit, start, finish,
evict). The cycle (`cycle.py`) and preemption (`preemption.py`) both work on it; it imports
neither, so the control modules form no import circle.

What a queue is charged: a job's `demand` while it waits (a lower bound, from its request:
`resources.demand_estimate`) and, once placed, what its allocations took (`charged`,
`resources.charge_of`: a whole GPU charges its card's memory). Because the card is known only
after placement, admission checks the quota twice: with the demand before placing, and with
the charge after deciding and before committing (`check_charge`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpugov.control import reasons
from gpugov.control.fairshare import dominant_ratio, fair_shares
from gpugov.control.gang import empty_cluster_fit, release_job
from gpugov.control.history import UsageHistory
from gpugov.control.quota import Ledger, QuotaVerdict
from gpugov.control.resources import (
    CPU,
    GPU,
    GPUMEM,
    MEMORY,
    MIG_PREFIX,
    charge_of,
    demand_estimate,
)
from gpugov.control.schema import ControlConfig
from gpugov.control.tree import QueueTree, build_tree
from gpugov.control.workload import FINISHED, PENDING, REJECTED, RUNNING, Job
from gpugov.model.cluster import ClusterState
from gpugov.model.devices import DeviceMode
from gpugov.model.mig import MIG_GEOMETRIES
from gpugov.model.request import Allocation
from gpugov.placement.base import Policy
from gpugov.placement.engine import Placer


class Bookkeeping:
    """Queues, quotas and running work over one cluster state and one placer (everything
    of the control plane but its cycle, which `cycle.ControlPlane` adds)."""

    def __init__(self, cfg: ControlConfig, state: ClusterState, policy: Policy,
                 priority: np.ndarray | None = None) -> None:
        self.cfg = cfg
        self.tree: QueueTree = build_tree(cfg)
        self.state = state
        self.placer = Placer(state, policy, priority)
        #: GPU model -> the smallest card of that model in the cluster (MiB)
        self.card_mib: dict[str, int] = {}
        for spec in state.nodes:
            if spec.gpu_count and spec.model:
                mib = spec.device_memory_mib
                self.card_mib[spec.model] = min(self.card_mib.get(spec.model, mib), mib)
        self.capacity = capacity = cluster_capacity(self.tree, state)
        #: the governed columns a placement can charge more of than the demand said
        self._recheck = self.tree.governed.copy()
        self._recheck[[CPU, MEMORY]] = False  # host resources are charged as asked
        #: fair shares are divided for governed resources and always for gpu, cpu, memory
        #: (reported as before); an ungoverned gpumem or MIG column has none (0)
        self._fair_columns = np.flatnonzero(self.tree.governed | (np.arange(len(
            self.tree.resources)) <= MEMORY))
        self.ledger = Ledger(self.tree, capacity)
        self._empty_ledger = Ledger(self.tree, capacity)  # admission on an idle cluster
        self.jobs: dict[str, Job] = {}
        self.backlog: list[list[Job]] = [[] for _ in self.tree.names]
        self.pending_demand = np.zeros_like(self.ledger.usage)
        self.running: list[dict[str, Job]] = [{} for _ in self.tree.names]
        self.reservations: dict[str, np.ndarray] = {}  # owner job -> node indexes
        self._res_version = 0  # bumped on every change of `reservations`
        self.history = UsageHistory(cfg.fair_share.history_window, cfg.fair_share.half_life)
        self.fair = np.zeros_like(self.ledger.usage)
        self._seq = 0
        self._dirty = [False] * len(self.tree)
        # Speed switch (decisions are identical either way; tests compare both): caches
        # inside a cycle and skipping cycles that provably decide nothing new.
        self.fast = True
        self.skipped = 0  # cycles skipped by the fast path
        self._mutations = 0  # bumped by every change of jobs, usage or backlog
        self._quiet: tuple[int, np.ndarray, float] | None = None

    # -- lifecycle of jobs -----------------------------------------------------------------
    def submit(self, job: Job) -> Job:
        """Queue a job, or reject it now if it could never run (reason says why)."""
        if job.name in self.jobs:
            raise ValueError(f"duplicate job name {job.name!r}")
        if not self.tree.is_leaf[job.leaf]:
            raise ValueError(f"job {job.name}: queue {self.tree.names[job.leaf]} is not a leaf")
        job.seq = self._seq
        self._seq += 1
        self.jobs[job.name] = job
        job.demand = job.charged = demand_estimate(self.tree.resources, job.request, job.pods,
                                                   self.card_mib)
        why = self._never_fits(job)
        if why:
            job.status, job.reason, job.detail = REJECTED, reasons.REJECTED, why
            return job
        job.status, job.reason, job.detail = PENDING, reasons.NOT_TRIED, ""
        job.blocked_by = ""
        self._enqueue(job)
        return job

    def _never_fits(self, job: Job) -> str:
        """Why `job` could never run here, or "" (sets `job.blocked_by` to the dimension).

        Two tests: all its pods fit the empty cluster (exact for whole GPUs and soft slices;
        first fit for other modes, `gang.fits_empty_cluster`), and the quota ledger admits it
        when nothing runs at all (so idle reserves of other queues that no usage can ever
        free are counted, not only the job's own caps).
        """
        req = job.request
        fit, why = empty_cluster_fit(self.state, job)
        if why:
            job.blocked_by = why
            if fit:
                return (f"the cluster could hold only {fit} of its {job.pods} pods at once "
                        f"even when empty ({why}: {reasons.node_words(why, req)})")
            return (f"no node of this cluster could hold its pod even when empty ({why}: "
                    f"{reasons.node_words(why, req)})")
        v = self._empty_ledger.check(job.leaf, job.demand, job.pinned)
        if v is not None:
            job.blocked_by = v.resource
            return (f"its queues could not admit it even with nothing running: {v.describe()}"
                    f"{reasons.quota_advice(v.resource, v.kind)}")
        return ""

    def _enqueue(self, job: Job) -> None:
        self._mutations += 1
        self.backlog[job.leaf].append(job)
        self._dirty[job.leaf] = True
        self.pending_demand[job.leaf] += job.demand

    def check_charge(self, job: Job, allocations: Sequence[Allocation]
                     ) -> tuple[np.ndarray, QuotaVerdict | None]:
        """What `allocations` would charge `job`'s queues, and the quota rule that charge
        breaks (None = admissible). The charge differs from the job's demand only in GPU
        compute and GPU memory (the device decides them; `resources.charge_of`), and only
        there can it exceed what passed before placement, so only then is it checked again."""
        milli = mem = 0
        for a in allocations:
            k = len(a.devices)
            milli += a.milli * k
            mem += a.memory_mib * k
        d = job.demand
        if milli == d[GPU] and mem == d[GPUMEM]:
            return d, None
        charged = d.copy()
        charged[GPU], charged[GPUMEM] = milli, mem
        more = (self._recheck[GPU] and milli > d[GPU] + 1e-9) or \
            (self._recheck[GPUMEM] and mem > d[GPUMEM] + 1e-9)
        return charged, self.ledger.check(job.leaf, charged, job.pinned) if more else None

    def _start(self, job: Job, allocations: list, now: float,
               charged: np.ndarray | None = None) -> None:
        """Account a start; `charged` (what `check_charge` returned) or it is computed."""
        self._mutations += 1
        job.status, job.start, job.allocations = RUNNING, now, allocations
        job.attempt += 1
        job.reason = job.detail = job.blocked_by = ""
        if charged is None:
            charged = charge_of(self.tree.resources, job.request, allocations)
        job.charged = charged
        self.ledger.add(job.leaf, job.charged, job.pinned)
        self.pending_demand[job.leaf] -= job.demand
        self.running[job.leaf][job.name] = job
        self._drop_reservation(job.name)

    def _drop_reservation(self, name: str) -> None:
        if self.reservations.pop(name, None) is not None:
            self._res_version += 1

    def finish(self, job: Job) -> None:
        """The job left (completed or deleted): give its resources back."""
        self._mutations += 1
        if job.status == RUNNING:
            release_job(self.state, job)
            self.ledger.remove(job.leaf, job.charged, job.pinned)
            del self.running[job.leaf][job.name]
        elif job.status == PENDING:
            self.backlog[job.leaf].remove(job)
            self.pending_demand[job.leaf] -= job.demand
            self._drop_reservation(job.name)
        job.status, job.allocations = FINISHED, []

    def evict(self, job: Job, released: bool = False) -> None:
        """Preempted: resources back, job back in its queue at its original position."""
        self._mutations += 1
        if not released:
            release_job(self.state, job)
            self.ledger.remove(job.leaf, job.charged, job.pinned)
        del self.running[job.leaf][job.name]
        job.status, job.allocations = PENDING, []
        job.preemptions += 1
        job.reason, job.detail = reasons.NOT_TRIED, ""
        if any(j is job for j in self.backlog[job.leaf]):
            # started earlier in this same cycle: still listed (the list is pruned at the
            # end of the cycle), so it must not be queued twice
            self._mutations += 1
            self.pending_demand[job.leaf] += job.demand
            self._dirty[job.leaf] = True
            return
        self._enqueue(job)

    # -- views -----------------------------------------------------------------------------
    def demand(self) -> np.ndarray:
        """Subtree demand [Q, R]: usage plus pending requests."""
        pend = np.zeros_like(self.pending_demand)
        for leaf in np.flatnonzero(self.tree.is_leaf):
            if self.pending_demand[leaf].any():
                pend[self.tree.paths[leaf]] += self.pending_demand[leaf]
        return self.ledger.usage + pend

    def pending(self, leaf: int) -> list[Job]:
        """Pending jobs of a leaf queue in their order (priority, then submit time)."""
        if self._dirty[leaf]:
            self.backlog[leaf].sort(key=lambda j: j.order_key)
            self._dirty[leaf] = False
        return self.backlog[leaf]

    def ratio(self, leaf: int) -> float:
        gov = self.tree.governed
        return dominant_ratio(self.ledger.usage[leaf][gov], self.fair[leaf][gov])

    def reservation_owners(self) -> list[str]:
        """Owners of reservations in job order (the first one is closed out of nothing)."""
        return sorted(self.reservations, key=lambda n: self.jobs[n].order_key)

    # -- the cycle -------------------------------------------------------------------------
    def refresh_fair_share(self, now: float) -> np.ndarray:
        """Fair shares from the current demand; drivers also call it between cycles (after a
        departure with nothing pending) so reported fair shares never go stale."""
        if self.history.enabled:
            self.history.observe(now, self.ledger.usage)
        hist = self.history.value(now) if self.history.enabled else None
        self.fair = fair_shares(self.tree, self.demand(), self.capacity, hist,
                                self.cfg.fair_share.k, self._fair_columns)
        return self.fair


def set_quota_reason(cp: Bookkeeping, job: Job, verdict: QuotaVerdict) -> None:
    """Reason and detail for a quota verdict; `job.blocked_by` is the resource it compared."""
    res = cp.tree.resources
    c = max(res.column(verdict.resource), 0)
    job.blocked_by = verdict.resource
    advice = reasons.quota_advice(verdict.resource, verdict.kind)
    if verdict.kind == "capacity" and not _others_hold(cp, job.leaf, c):
        job.reason = reasons.NO_NODE
        job.detail = f"the cluster is full: {verdict.describe()}{advice}"
    elif verdict.kind == "capacity":
        job.reason = reasons.FAIR_SHARE
        u = res.describe(verdict.resource, cp.ledger.usage[job.leaf, c])
        f = res.describe(verdict.resource, cp.fair[job.leaf, c])
        job.detail = (f"{verdict.describe()}; queue {cp.tree.names[job.leaf]} uses "
                      f"{u} with fair share {f}{advice}")
    else:
        job.reason, job.detail = reasons.OVER_QUOTA, verdict.describe() + advice


def _others_hold(cp: Bookkeeping, leaf: int, c: int = 0) -> bool:
    """Do queues outside `leaf`'s top-level queue hold any of column `c` (GPU: 0)?"""
    top = cp.tree.paths[leaf][-1]
    return bool(cp.ledger.top_held[c] - cp.ledger.held[top, c] > 1e-6)


def set_placement_reason(cp: Bookkeeping, job: Job, placed: int, engine_reason: str,
                         ahead: Sequence[str] = ()) -> None:
    """`ahead`: owners (in job order) of the reservations closed to `job`."""
    job.blocked_by = engine_reason if engine_reason != "reserved" else ""
    if engine_reason == "reserved":
        job.reason, job.detail = reasons.PRIORITY, reasons.NODE_WORDS["reserved"]
        if ahead:
            more = f" and {len(ahead) - 3} more" if len(ahead) > 3 else ""
            job.detail += f" ({', '.join(ahead[:3])}{more})"
    elif placed > 0:
        job.reason = reasons.GANG
        job.detail = (f"only {placed} of its {job.pods} pods fit at once "
                      f"({engine_reason}: {reasons.node_words(engine_reason, job.request)})")
    else:
        job.reason = reasons.NO_NODE
        job.detail = f"{engine_reason}: {reasons.node_words(engine_reason, job.request)}"


def cluster_capacity(tree: QueueTree, state: ClusterState) -> np.ndarray:
    """What the cluster holds of each column of `tree`: GPU milli, CPU milli, memory MiB, GPU
    memory MiB, and per MIG profile the instances its MIG devices can hold (a fixed layout:
    the instances of that profile in it; a dynamic device: the most of that profile at once)."""
    cap = np.zeros(len(tree.resources), dtype=np.float64)
    cap[:GPUMEM + 1] = (state.gpu_cap.sum(), state.cpu_cap.sum(), state.mem_cap.sum(),
                        state.gpu_mem_cap.sum())
    migs = [(c, r[len(MIG_PREFIX):]) for c, r in enumerate(tree.resources.names)
            if r.startswith(MIG_PREFIX)]
    if not migs:
        return cap
    for spec in state.nodes:
        geometry = MIG_GEOMETRIES.get(spec.model)
        if geometry is None:
            continue
        for k in range(spec.gpu_count):
            d = spec.device_config(k)
            if d.mode is not DeviceMode.MIG:
                continue
            for c, profile in migs:
                if d.mig_layout is not None:
                    cap[c] += sum(1 for i in d.mig_layout if i.profile == profile)
                elif profile in geometry.profile_names():
                    cap[c] += geometry.profile(profile).max_count
    return cap
