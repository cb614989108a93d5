"""Time-based replay: the control plane's cycle driven by a virtual clock.

Jobs arrive at `submit`, run for `duration` once started, then leave; a preempted job goes
back to its queue and, when restarted, runs its full duration again (work is lost, as with
a real eviction). The cycle runs after every batch of simultaneous events, at the optional
`period`, and when a running job's minRuntime expires while work is pending (the moment a
preemption may become allowed). Same inputs and seed, same outputs.

Period ticks stop once no arrival or departure is left: then nothing runs, and on an idle
cluster the cycle starts every job the quotas admit (the reservations are live, see
control/cycle.py), so a job still pending then can never start and waiting longer would
change nothing.

Every pod's devices are recorded per running episode (`ReplayResult.allocations`, written
as allocations.csv): an evicted pod that restarts gets new rows.

Accounting: a job's time between submit and its end is exactly its waits plus its running
episodes (`ReplayResult.episodes`); a job is never evicted in the cycle that started it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpugov.control import reasons
from gpugov.control.config import ControlConfig
from gpugov.control.cycle import ControlPlane, PreemptionEvent, new_control_plane
from gpugov.control.explain import snapshot
from gpugov.control.fairshare import jain
from gpugov.control.workload import PENDING, REJECTED, RUNNING, Job
from gpugov.model.cluster import NodeSpec
from gpugov.model.devices import DeviceMode
from gpugov.placement.registry import get_policy
from gpugov.sim.jobs import JobSpec, to_jobs
from gpugov.sim.numbers import csv_number
from gpugov.sim.replay_power import PowerTrace

FINISH, ARRIVE, TICK = 0, 1, 2
ALLOCATION_COLUMNS = ("job", "pod", "namespace", "node", "device", "mode", "mig_profile",
                      "mig_start", "memory_mib", "milli", "isolation", "start_s", "end_s")


class _Allocations:
    """allocations.csv rows: one per pod per device per running episode."""

    def __init__(self, nodes: Sequence[NodeSpec], specs: Sequence[JobSpec]) -> None:
        self.nodes = nodes
        self.namespace = {s.name: s.namespace or "" for s in specs}
        self.rows: list[list] = []
        self.open: dict[str, list[int]] = {}

    def start(self, job: Job, now: float) -> None:
        """Rows for every device of every pod of `job`, from the allocation the state
        committed: the slice kind, MIG instance, memory and compute charged, and the
        isolation that kind delivers (a whole device is hard)."""
        req = job.request
        mode = req.slice_mode
        profile = req.mig_profile if mode is DeviceMode.MIG else ""
        opened = []
        for k, alloc in enumerate(job.allocations):
            node = self.nodes[alloc.node]
            start = str(alloc.mig_start) if mode is DeviceMode.MIG else ""
            for d in alloc.devices:
                opened.append(len(self.rows))
                self.rows.append([job.name, f"{job.name}-{k}", self.namespace.get(job.name, ""),
                                  node.name, int(d), mode.value, profile, start,
                                  int(alloc.memory_mib), int(alloc.milli), str(mode.isolation),
                                  now, None])
        self.open[job.name] = opened

    def stop(self, name: str, now: float) -> None:
        for i in self.open.pop(name, []):
            self.rows[i][-1] = now


#: the shortest `--period` (seconds): bounds the extra cycles to one per simulated second
MIN_PERIOD = 1.0


@dataclass
class ReplayOptions:
    policy: str = "gpugov"
    seed: int = 0
    period: float = 0.0  # extra cycles every `period` s while work is pending (0 = off)
    until: float | None = None  # stop the clock here (a mid-trace snapshot)
    samples: int = 200  # rows per queue in queues.csv
    fast: bool = True  # the cycle's fast path; False runs the plain one (same decisions)
    progress: bool | None = None  # bar on stderr; None = only when stderr is a terminal

    def problems(self) -> list[str]:
        """Every bad option, as `--name: what is wrong (got value); allowed: ...`."""
        out = []
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            out.append(f"--seed: must be a whole number >= 0 (got {self.seed!r}); "
                       "allowed: 0, 1, 2, ...")
        if not _finite(self.period) or self.period < 0 or 0 < self.period < MIN_PERIOD:
            out.append(f"--period: must be 0 (off) or a finite number of seconds >= "
                       f"{MIN_PERIOD:g} (got {self.period!r}): a cycle more often than once a "
                       "second is no real scheduler's, and would make a long trace run for days")
        try:
            get_policy(self.policy)
        except KeyError as e:  # named here, before any work, like every other option
            out.append(f"--policy: {e.args[0]}")
        if self.until is not None and (not _finite(self.until) or self.until < 0):
            out.append(f"--until: must be a finite time in seconds >= 0 (got {self.until!r})")
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) \
                or self.samples < 1:
            out.append(f"samples: must be a whole number >= 1 (got {self.samples!r})")
        return out

    def check(self) -> None:
        """Raise OptionError naming every bad option."""
        bad = self.problems()
        if bad:
            raise OptionError("; ".join(bad))


class OptionError(ValueError):
    """Replay options out of range (negative seed, non-finite period or until, ...)."""


def _finite(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclass
class ReplayResult:
    cp: ControlPlane
    jobs: list[Job]
    end: float
    waits: dict[str, float]
    starts: dict[str, float]
    ends: dict[str, float]
    times: np.ndarray  # sample times
    usage: np.ndarray  # [T, leaves] GPUs
    fair: np.ndarray  # [T, leaves] GPUs
    pending: np.ndarray  # [T, leaves] jobs
    leaves: list[int]
    preemptions: list[PreemptionEvent] = field(default_factory=list)
    cycles: int = 0
    skipped_cycles: int = 0  # cycles the fast path proved would decide nothing new
    snapshot: dict = field(default_factory=dict)
    #: per job, its running episodes [start, stop] (stop: eviction, end, or the replay's end)
    episodes: dict[str, list[list[float]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # config vs cluster (see cluster_fit)
    #: allocations.csv rows (ALLOCATION_COLUMNS); end_s None while the pod still runs
    allocations: list[list] = field(default_factory=list)
    #: admitted power per domain and the fleet's energy (sim/replay_power.py)
    power: dict = field(default_factory=dict)

    def queue_names(self) -> list[str]:
        return [self.cp.tree.names[q] for q in self.leaves]

    def submitted(self) -> list[Job]:
        """Jobs that arrived by the end (with `--until`, later ones have not)."""
        return [j for j in self.jobs if j.name in self.waits]

    def waits_of(self, leaf: int, started_only: bool = False) -> np.ndarray:
        return np.array([self.waits[j.name] for j in self.jobs
                         if j.leaf == leaf and j.status != REJECTED and j.name in self.waits
                         and (not started_only or j.name in self.starts)])

    def summary(self) -> list[dict]:
        """Per leaf queue: waits, mean usage and fair share, usage/fair share."""
        rows = []
        span = np.diff(self.times, append=self.end)
        for k, leaf in enumerate(self.leaves):
            w = self.waits_of(leaf)
            used = float((self.usage[:, k] * span).sum() / max(span.sum(), 1e-9))
            fair = float((self.fair[:, k] * span).sum() / max(span.sum(), 1e-9))
            jobs = [j for j in self.submitted() if j.leaf == leaf]
            rows.append({
                "queue": self.cp.tree.names[leaf], "jobs": len(jobs),
                "started": sum(j.name in self.starts for j in jobs),
                "rejected": sum(j.status == REJECTED for j in jobs),
                "wait_p50_s": float(np.percentile(w, 50)) if len(w) else 0.0,
                "wait_p95_s": float(np.percentile(w, 95)) if len(w) else 0.0,
                "wait_p99_s": float(np.percentile(w, 99)) if len(w) else 0.0,
                "mean_gpus": used, "mean_fair_gpus": fair,
                # no fair share (no demand): no ratio, `null` in summary.json, never NaN
                "usage_over_fair": used / fair if fair > 0 else None,
                "preempted": sum(e.victim_queue == self.cp.tree.names[leaf]
                                 for e in self.preemptions),
            })
        return rows

    def jain_index(self) -> float:
        """Jain's index over queues of time-averaged usage / time-averaged fair share."""
        x = [r["usage_over_fair"] for r in self.summary() if r["mean_fair_gpus"] > 0]
        return jain(np.array(x))

    def gpu_allocation(self) -> np.ndarray:
        """Allocated GPUs (all queues) at each sample time."""
        return self.usage.sum(axis=1)


def replay(cfg: ControlConfig, nodes: Sequence[NodeSpec], specs: Sequence[JobSpec],
           opts: ReplayOptions | None = None, source: str = "<jobs>",
           config_source: str = "<config>") -> ReplayResult:
    """Run the trace through the control plane and collect per-queue series.

    Raises OptionError (bad options), ConfigError (reserves the cluster cannot honour,
    naming `config_source`) or the loader's errors, all before any work is done.
    """
    opts = opts or ReplayOptions()
    opts.check()
    from gpugov.control.config import ConfigError
    from gpugov.control.tree import build_tree, cluster_fit

    jobs = to_jobs(specs, cfg, build_tree(cfg), source, nodes)  # raises before any work
    cp = new_control_plane(cfg, nodes, opts.policy, opts.seed, [j.request for j in jobs])
    errors, warnings = cluster_fit(cp.tree, cp.capacity)
    if errors:
        raise ConfigError(config_source, errors)
    cp.fast = opts.fast
    power = PowerTrace(cp.state)
    power.record(0.0)
    events: list[tuple[float, int, int, Job | None, int]] = []
    for i, j in enumerate(sorted(jobs, key=lambda j: (j.submit, j.name))):
        events.append((j.submit, ARRIVE, i, j, 0))
    heapq.heapify(events)
    seq = len(events)
    live = len(events)  # arrivals and departures still in `events` (ticks not counted)
    last = max((j.submit + j.duration for j in jobs), default=0.0)
    horizon = opts.until if opts.until is not None else float("inf")
    leaves = [int(q) for q in np.flatnonzero(cp.tree.is_leaf)]
    sample_every = max(last, 1.0) / max(opts.samples, 1) if opts.until is None else max(
        opts.until, 1.0) / max(opts.samples, 1)
    times, usage, fair, pend = [], [], [], []
    waits: dict[str, float] = {}
    pending_since: dict[str, float] = {}
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    episodes: dict[str, list[list[float]]] = {}
    preemptions: list[PreemptionEvent] = []
    next_sample = 0.0
    cycles = 0
    held = _Allocations(nodes, specs)
    min_runtime = any(c.min_runtime > 0 for c in cfg.priority_classes)
    now = 0.0
    tick_at = float("inf")

    def sample_until(t: float) -> None:
        nonlocal next_sample
        while next_sample <= t and next_sample <= horizon:
            times.append(next_sample)
            usage.append(cp.ledger.usage[leaves, 0] / 1000.0)
            fair.append(cp.fair[leaves, 0] / 1000.0)
            pend.append([len(cp.backlog[q]) for q in leaves])
            next_sample += sample_every

    # a bar on a terminal; in a pipe, a plain line now and then once the run is long
    bar = _Progress(len(jobs), min(last, horizon), opts.progress) \
        if opts.progress is not False else None
    while events:
        now = events[0][0]
        if now > horizon:
            break
        if bar is not None:
            bar.update(now, len(ends))
        sample_until(now)
        while events and events[0][0] == now:
            _, kind, _, job, attempt = heapq.heappop(events)
            live -= kind != TICK
            if kind == FINISH and job is not None and job.status == RUNNING \
                    and job.attempt == attempt:
                cp.finish(job)
                held.stop(job.name, now)
                ends[job.name] = now
                episodes[job.name][-1][1] = now
            elif kind == ARRIVE and job is not None:
                cp.submit(job)
                waits[job.name] = 0.0
                if job.status == PENDING:
                    pending_since[job.name] = now
            elif kind == TICK:
                tick_at = float("inf") if tick_at <= now else tick_at
        if not any(cp.backlog):
            cp.refresh_fair_share(now)  # demand fell: keep the reported fair share current
            power.record(now)
            continue
        result = cp.cycle(now)
        cycles += 1
        for v in result.preempted:
            preemptions.append(v)
            held.stop(v.victim, now)
            if v.victim in episodes:
                episodes[v.victim][-1][1] = now
            if cp.jobs[v.victim].status == PENDING:
                pending_since.setdefault(v.victim, now)
        for j in dict.fromkeys(result.started):  # once each, in order
            if j.status != RUNNING:
                continue  # started and evicted again in this cycle: still waiting
            waits[j.name] += now - pending_since.pop(j.name, now)
            starts[j.name] = now
            held.start(j, now)
            episodes.setdefault(j.name, []).append([now, now])
            heapq.heappush(events, (now + j.duration, FINISH, seq, j, j.attempt))
            seq += 1
            live += 1
        power.record(now)
        wake = []
        if opts.period > 0 and any(cp.backlog) and live > 0:
            wake.append(now + opts.period)
        if min_runtime and any(cp.backlog):
            future = [j.start + j.pclass.min_runtime for q in leaves
                      for j in cp.running[q].values()
                      if j.pclass.preemptible and j.start + j.pclass.min_runtime > now]
            if future:
                wake.append(min(future))
        if wake and min(wake) < tick_at:
            tick_at = min(wake)
            heapq.heappush(events, (tick_at, TICK, seq, None, 0))
            seq += 1
    if bar is not None:
        bar.close()
    end = min(horizon, max(now, last)) if opts.until is not None else now
    sample_until(end)
    for name, since in pending_since.items():
        waits[name] += end - since
    for name, eps in episodes.items():
        if cp.jobs[name].status == RUNNING:
            eps[-1][1] = end
    snap = snapshot(cp, end, waits, ends)
    return ReplayResult(
        cp=cp, jobs=jobs, end=end, waits=waits, starts=starts, ends=ends,
        times=np.array(times), usage=np.array(usage).reshape(len(times), len(leaves)),
        fair=np.array(fair).reshape(len(times), len(leaves)),
        pending=np.array(pend).reshape(len(times), len(leaves)), leaves=leaves,
        preemptions=preemptions, cycles=cycles, skipped_cycles=cp.skipped, snapshot=snap,
        episodes=episodes, warnings=warnings, allocations=held.rows,
        power=power.summary(end),
    )


class _Progress:
    """Progress over virtual time (`sim.progress.Ticker`), on stderr."""

    def __init__(self, jobs: int, span: float, tty: bool | None) -> None:
        from gpugov.sim.progress import Ticker

        self.span = max(span, 1.0)
        self.jobs = jobs
        self.ticker = Ticker("replay", self.span, "s of trace time", tty=tty)
        self._last = -1.0

    def update(self, now: float, finished: int) -> None:
        if now - self._last < self.span / 1000:  # at most ~1000 redraw requests
            return
        self._last = now
        self.ticker.update(min(now, self.span), f"{finished}/{self.jobs} jobs done")

    def close(self) -> None:
        self.ticker.close()


def job_rows(res: ReplayResult) -> list[list]:
    """Rows of jobs.csv: name,queue,submit_s,start_s,end_s,wait_s,preemptions,status,reason.

    Only jobs submitted by the end (with `--until`, later arrivals are not listed)."""
    rows = []
    for j in sorted(res.submitted(), key=lambda j: (j.submit, j.seq)):
        status = {RUNNING: "running", PENDING: "pending", REJECTED: "rejected"}.get(
            j.status, "finished")
        start = res.starts.get(j.name)
        end = res.ends.get(j.name) if status == "finished" else None
        reason = ""
        if status in ("pending", "rejected"):
            reason = f"{j.reason}: {j.detail}" if j.detail else j.reason
        rows.append([j.name, res.cp.tree.names[j.leaf], csv_number(j.submit),
                     "" if start is None else csv_number(start),
                     "" if end is None else csv_number(end),
                     csv_number(res.waits.get(j.name, 0.0)), j.preemptions, status, reason])
    return rows


def allocation_rows(res: ReplayResult) -> list[list]:
    """Rows of allocations.csv (ALLOCATION_COLUMNS), times as the other CSVs write them."""
    return [[*r[:11], csv_number(r[11]), "" if r[12] is None else csv_number(r[12])]
            for r in res.allocations]


__all__ = ["ALLOCATION_COLUMNS", "OptionError", "ReplayOptions", "ReplayResult",
           "allocation_rows", "job_rows", "reasons", "replay"]
