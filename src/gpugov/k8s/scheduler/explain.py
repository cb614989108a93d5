"""`gpugov explain pod NS/NAME`: why a pod is pending and where it stands, from the live API.

Lists what the scheduler watches, rebuilds the same state, and runs one cycle without
writing anything: the answer is what the scheduler would decide now (reason, position in
the queue, the queue's usage and fair share), next to what the running scheduler last
wrote on the pod (its PodScheduled condition).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpugov.control.explain import explain, snapshot
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.kube import Kube, message
from gpugov.k8s.scheduler.runner import PATHS, Runner
from gpugov.k8s.scheduler.state import SchedulerState


class ExplainError(LookupError):
    """The pod cannot be explained (not found, not gpugov's); the message says why."""


async def explain_pod(kubeconfig: Path | str, namespace: str, name: str,
                      policy: str = "gpugov", scheduler_name: str = names.SCHEDULER_NAME,
                      node_selector: dict[str, str] | None = None,
                      say: Callable[[str], None] = lambda _step: None) -> list[str]:
    """`say(step)` as each step begins: on a cluster of thousands of nodes and pods the lists
    and the cycle take seconds."""
    say(f"reading pod {namespace}/{name}")
    kube = await Kube.from_kubeconfig(kubeconfig)
    try:
        status, pod = await kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        if status == 404:
            raise ExplainError(f"pod {namespace}/{name} not found")
        if status != 200:
            raise ExplainError(f"cannot read pod {namespace}/{name}: HTTP {status}: "
                               f"{message(pod)}")
        state = SchedulerState(policy=policy, scheduler_name=scheduler_name,
                               node_selector=node_selector)
        runner = Runner(kube, state, None)
        for i, kind in enumerate(PATHS, 1):
            say(f"listing what the scheduler watches ({i}/{len(PATHS)}: {kind})")
            await runner.sync(kind)
    finally:
        await kube.close()
    say(f"one scheduling cycle over {len(runner.seen['pod']):,} pods and "
        f"{len(runner.seen['node']):,} nodes")
    from gpugov.k8s.webhook.dra_translate import explain_lines  # DRA mode's record

    dra = explain_lines(pod)
    try:
        return explain_from_state(state, pod, time.time()) + dra
    except ExplainError:
        if not dra:
            raise
        return [f"pod {namespace}/{name}: pending; kube-scheduler allocates its claims "
                "(DRA mode): its Events say why it waits", *dra]


def explain_from_state(state: SchedulerState, pod: dict, now: float) -> list[str]:
    """The explanation lines for `pod` given a state fed with the cluster's objects."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    written = next((c.get("message", "") for c in (pod.get("status") or {}).get("conditions")
                    or [] if c.get("type") == "PodScheduled" and c.get("status") == "False"),
                   "")
    if spec.get("nodeName"):
        alloc = (meta.get("annotations") or {}).get(names.ANN_ALLOCATION, "(no allocation record)")
        lines = [f"pod {key}: bound to node {spec['nodeName']}", f"allocation: {alloc}"]
        state.rebuild(now)  # what the scheduler counts for it
        if key in state.held:
            lines.append(f"gpugov does not trust its record: {state.held[key]}")
        return lines
    if spec.get("schedulerName") != state.scheduler_name:
        raise ExplainError(f"pod {key} has schedulerName {spec.get('schedulerName')!r}, not "
                           f"{state.scheduler_name!r}: gpugov does not schedule it")
    plan = state.cycle(now)
    lines = [f"pod {key}: pending"]
    if any(b.key == key for b in plan.binds):
        lines.append("it fits now: the scheduler binds it in its next cycle "
                     f"(is a scheduler with schedulerName {state.scheduler_name} running?)")
    cond = next((c for c in plan.conditions if c.key == key), None)
    job = state.job_for(key)
    if job is not None and state.cp is not None and not lines[1:]:
        lines += explain(snapshot(state.cp, now), job.name)[1:]
        if job.pods > 1:
            lines.append(f"gang: {job.pods} pods placed together (all or nothing)")
    elif cond is not None:
        lines.append(f"reason: {cond.message.removeprefix('gpugov: ')}")
    elif key in state.written:
        lines.append(f"reason: {state.written[key].removeprefix('gpugov: ')}")
    holds = sorted(f"{k} ({why})" for k, why in state.held.items())
    if holds:
        lines.append("devices held for bound pods gpugov cannot account for: "
                     + "; ".join(holds[:5]) + (f"; and {len(holds) - 5} more"
                                                if len(holds) > 5 else ""))
    if written:
        lines.append(f"scheduler's last condition on the pod: {written}")
    return lines
