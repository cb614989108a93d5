"""Why is my job pending? A plain-data snapshot of the control plane, and its reading.

`snapshot` turns the live state into JSON-able data (per queue: quota, usage, fair share;
per job: status, reason, detail, position in its queue; a driver that keeps times, such as
the replay, adds every job's wait and end, finished jobs included), so `gpugov explain` can
answer from a replay's output folder without re-running anything. `validate_snapshot`
checks a snapshot read back from a file before anything is taken from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpugov.control import reasons
from gpugov.control.bookkeeping import Bookkeeping as ControlPlane
from gpugov.control.workload import FINISHED, PENDING, REJECTED, RUNNING

STATUSES = (PENDING, RUNNING, FINISHED, REJECTED)
#: amounts every snapshot has (gpumem and MIG profiles are added where known)
_REQUIRED = ("gpu", "cpu", "memory")


def snapshot(cp: ControlPlane, now: float, waits: Mapping[str, float] | None = None,
             ends: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The state at `now`. With `waits` (job -> seconds pending so far, for every job that
    arrived) and `ends` (job -> end time), finished jobs are kept too and every job carries
    its wait; without them only unfinished jobs are listed."""
    tree = cp.tree
    _res = tree.resources.amounts
    queues = {}
    for q, name in enumerate(tree.names):
        queues[name] = {
            "parent": tree.names[tree.parent[q]] if tree.parent[q] >= 0 else None,
            "leaf": bool(tree.is_leaf[q]),
            "quota": _res(tree.quota[q]), "usage": _res(cp.ledger.usage[q]),
            "fair_share": _res(cp.fair[q]),
            "pending": len(cp.backlog[q]), "running": len(cp.running[q]),
        }
    jobs = {}
    for q in range(len(tree)):
        order = cp.pending(q)
        for pos, j in enumerate(order, 1):
            jobs[j.name] = _job(cp, j, pos, len(order))
        for j in cp.running[q].values():
            jobs[j.name] = _job(cp, j, 0, len(order))
    for j in cp.jobs.values():
        if j.name in jobs:
            continue
        if j.status != FINISHED or waits is not None:
            jobs[j.name] = _job(cp, j, 0, 0)
    if waits is not None:
        for name, j in jobs.items():
            j["wait_s"] = waits.get(name, 0.0)
            if j["status"] == FINISHED:
                j["end_s"] = None if ends is None else ends.get(name)
    return {"time": now, "queues": queues, "jobs": jobs}


def _job(cp: ControlPlane, j: Any, pos: int, depth: int) -> dict[str, Any]:
    return {
        "queue": cp.tree.names[j.leaf], "status": j.status, "reason": j.reason,
        "detail": j.detail, "position": pos, "queue_depth": depth,
        "priority": j.pclass.name, "submit_s": j.submit, "pods": j.pods,
        "start_s": j.start if j.start >= 0 else None, "preemptions": j.preemptions,
        "demand": cp.tree.resources.amounts(j.demand), "blocked_by": j.blocked_by,
    }


class SnapshotError(ValueError):
    """A snapshot that is not what `snapshot` writes; the message names the field."""


def _number(x: Any, optional: bool = False) -> bool:
    if x is None:
        return optional
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _check_res(where: str, value: Any, problems: list[str]) -> None:
    if not isinstance(value, Mapping) or any(not _number(value.get(r)) for r in _REQUIRED) \
            or any(not _number(v) for v in value.values()):
        problems.append(f"{where}: expected {{gpu, cpu, memory[, gpumem, mig-...]}} numbers "
                        f"(got {value!r})")


def validate_snapshot(snap: Any) -> dict[str, Any]:
    """`snap` if it has the shape `snapshot` writes; else SnapshotError listing what is wrong."""
    if not isinstance(snap, Mapping):
        raise SnapshotError(f"expected an object with 'time', 'queues' and 'jobs' (got "
                            f"{type(snap).__name__})")
    problems: list[str] = []
    if not _number(snap.get("time")):
        problems.append(f"time: expected a finite number (got {snap.get('time')!r})")
    queues, jobs = snap.get("queues"), snap.get("jobs")
    if not isinstance(queues, Mapping):
        problems.append(f"queues: expected an object of queues (got {type(queues).__name__})")
        queues = {}
    if not isinstance(jobs, Mapping):
        problems.append(f"jobs: expected an object of jobs (got {type(jobs).__name__})")
        jobs = {}
    for name, q in queues.items():
        if not isinstance(q, Mapping):
            problems.append(f"queues.{name}: expected an object (got {q!r})")
            continue
        for key in ("quota", "usage", "fair_share"):
            _check_res(f"queues.{name}.{key}", q.get(key), problems)
    for name, j in jobs.items():
        where = f"jobs.{name}"
        if not isinstance(j, Mapping):
            problems.append(f"{where}: expected an object (got {j!r})")
            continue
        if j.get("queue") not in queues:
            problems.append(f"{where}.queue: {j.get('queue')!r} is not a queue of the snapshot")
        if j.get("status") not in STATUSES:
            problems.append(f"{where}.status: {j.get('status')!r}; allowed: "
                            f"{', '.join(STATUSES)}")
        if not isinstance(j.get("blocked_by", ""), str):
            problems.append(f"{where}.blocked_by: expected text (got {j.get('blocked_by')!r})")
        for key in ("reason", "detail", "priority"):
            if not isinstance(j.get(key), str):
                problems.append(f"{where}.{key}: expected text (got {j.get(key)!r})")
        for key, optional in (("submit_s", False), ("start_s", True), ("wait_s", True),
                              ("end_s", True)):
            if not _number(j.get(key), optional):
                problems.append(f"{where}.{key}: expected a finite number (got "
                                f"{j.get(key)!r})")
        for key in ("position", "queue_depth", "pods", "preemptions"):
            v = j.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                problems.append(f"{where}.{key}: expected a whole number >= 0 (got {v!r})")
        _check_res(f"{where}.demand", j.get("demand"), problems)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise SnapshotError("; ".join(problems[:5]) + more)
    return dict(snap)


def explain(snap: dict[str, Any], job: str) -> list[str]:
    """Lines answering "why is JOB pending (or not)" from a snapshot.

    SnapshotError (a ValueError) if the snapshot is malformed; KeyError if the job is not in
    it (not submitted by the snapshot's time, or a snapshot that keeps no finished jobs).
    """
    snap = validate_snapshot(snap)
    if job not in snap["jobs"]:
        keeps_finished = any(j["status"] == FINISHED for j in snap["jobs"].values()) or any(
            "wait_s" in j for j in snap["jobs"].values())
        why = ("it had not been submitted by then" if keeps_finished else
               "this snapshot keeps unfinished jobs only")
        raise KeyError(f"job {job!r} is not in the snapshot at t={snap['time']:g}s ({why}; "
                       f"{len(snap['jobs'])} jobs are listed)")
    j = snap["jobs"][job]
    q = snap["queues"][j["queue"]]
    lines = [f"job {job} in queue {j['queue']} (priority class {j['priority']}), "
             f"at t={snap['time']:g}s: {j['status']}"]
    if j["status"] == PENDING:
        lines.append(f"reason: {j['reason']}" + (f" - {j['detail']}" if j["detail"] else ""))
        if j.get("blocked_by"):
            lines.append(f"blocked by: {_dimension(j['blocked_by'])}")
        lines.append(f"position: {j['position']} of {j['queue_depth']} pending in its queue")
    elif j["status"] == FINISHED:
        end = j.get("end_s")
        lines.append(f"submitted at t={j['submit_s']:g}s, last started at "
                     + (f"t={j['start_s']:g}s" if j["start_s"] is not None else "-")
                     + (f", ended at t={end:g}s" if end is not None else ", ended"))
    elif j["reason"]:
        lines.append(f"reason: {j['reason']} - {j['detail']}")
        if j.get("blocked_by"):
            lines.append(f"blocked by: {_dimension(j['blocked_by'])}")
    else:
        lines.append(f"started at t={j['start_s']:g}s")
    if j.get("wait_s") is not None and j["status"] != REJECTED:
        lines.append(f"waited {j['wait_s']:g} s in total (time pending, over all its "
                     "episodes)")
    # before placement a job's GPU memory is a lower bound (a whole GPU is charged the card
    # it gets): control.resources.demand_estimate
    lines.append(f"asks for: {j['pods']} pod(s), in total "
                 f"{_fmt(j['demand'], least=j['status'] != RUNNING)}")
    lines.append(f"queue {j['queue']}: uses {_fmt(q['usage'])}; fair share "
                 f"{_fmt(q['fair_share'])}; quota {_fmt(q['quota'])}")
    if j["preemptions"]:
        lines.append(f"preempted {j['preemptions']} time(s)"
                     + ("" if j["status"] == FINISHED else " so far"))
    return lines


def _fmt(res: Mapping[str, float], least: bool = False) -> str:
    out = f"{res['gpu']:g} GPU, {res['cpu']:g} cores, {res['memory']:g} GiB"
    if res.get("gpumem"):
        out += f", {'at least ' if least else ''}{res['gpumem']:g} GiB GPU memory"
    for r, v in res.items():
        if r.startswith("mig-") and v:
            out += f", {v:g} x {r}"
    return out


#: dimensions both placement and quotas compare (the reason line says which one blocked)
_SHARED_DIMENSIONS = {"gpu": "GPU compute (gpu)", "cpu": "CPU (cpu)",
                      "memory": "host memory (memory)"}


def _dimension(code: str) -> str:
    """A `Job.blocked_by` code in words: placement dimensions and queue resources."""
    if code.startswith("mig-"):
        return f"MIG instances of the queue's {code} quota"
    if code == "gpumem":
        return "GPU memory quota (gpumem)"
    if code in _SHARED_DIMENSIONS:
        return _SHARED_DIMENSIONS[code]
    if code in reasons.NODE_WORDS:
        return f"{code} ({reasons.NODE_WORDS[code]})"
    return code
