"""Why is my job pending? A plain-data snapshot of the control plane, and its reading.

`snapshot` turns the live state into JSON-able data (per queue: quota, usage, fair share;
per unfinished job: status, reason, detail, position in its queue), so `gpugov explain`
can answer from a replay's output folder without re-running anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpugov.control.config import RESOURCES, SCALE
from gpugov.control.workload import FINISHED, PENDING

if TYPE_CHECKING:
    from gpugov.control.cycle import ControlPlane


def _res(vec: Any) -> dict[str, float]:
    return {r: round(float(vec[i]) / SCALE[i], 3) for i, r in enumerate(RESOURCES)}


def snapshot(cp: ControlPlane, now: float) -> dict[str, Any]:
    tree = cp.tree
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
        if j.name not in jobs and j.status != FINISHED:
            jobs[j.name] = _job(cp, j, 0, 0)
    return {"time": now, "queues": queues, "jobs": jobs}


def _job(cp: ControlPlane, j: Any, pos: int, depth: int) -> dict[str, Any]:
    return {
        "queue": cp.tree.names[j.leaf], "status": j.status, "reason": j.reason,
        "detail": j.detail, "position": pos, "queue_depth": depth,
        "priority": j.pclass.name, "submit_s": j.submit, "pods": j.pods,
        "start_s": j.start if j.start >= 0 else None, "preemptions": j.preemptions,
        "demand": _res(j.demand),
    }


def explain(snap: dict[str, Any], job: str) -> list[str]:
    """Lines answering "why is JOB pending (or not)" from a snapshot; KeyError if unknown."""
    if job not in snap["jobs"]:
        raise KeyError(f"job {job!r} is not in the snapshot (finished jobs are not kept; "
                       f"{len(snap['jobs'])} unfinished jobs are)")
    j = snap["jobs"][job]
    q = snap["queues"][j["queue"]]
    lines = [f"job {job} in queue {j['queue']} (priority class {j['priority']}), "
             f"at t={snap['time']:g}s: {j['status']}"]
    if j["status"] == PENDING:
        lines.append(f"reason: {j['reason']}" + (f" - {j['detail']}" if j["detail"] else ""))
        lines.append(f"position: {j['position']} of {j['queue_depth']} pending in its queue")
    elif j["reason"]:
        lines.append(f"reason: {j['reason']} - {j['detail']}")
    else:
        lines.append(f"started at t={j['start_s']:g}s")
    lines.append(f"asks for: {j['pods']} pod(s), in total {_fmt(j['demand'])}")
    lines.append(f"queue {j['queue']}: uses {_fmt(q['usage'])}; fair share "
                 f"{_fmt(q['fair_share'])}; quota {_fmt(q['quota'])}")
    if j["preemptions"]:
        lines.append(f"preempted {j['preemptions']} time(s) so far")
    return lines


def _fmt(res: dict[str, float]) -> str:
    return f"{res['gpu']:g} GPU, {res['cpu']:g} cores, {res['memory']:g} GiB"
