"""`gpugov dev demo`: three teams on a dev cluster, and what the scheduler decided, read back.

The scenario (package data `gpugov/k8s/data/dev-demo.yaml`) is applied step by step: Queues,
Tenants of three trust tiers and a PriorityClass; pods in HAMi, KAI and NVIDIA spellings; a
burst that borrows beyond its quota (with a scheduler-plugins gang); a team taking its quota
back (reclaim); an urgent pod preempting a batch pod of its own team. Each step waits for the
outcome it announces. The summary is built from the API alone — bindings and their
`gpugov.io/allocation` records, the `Preempted` Events and the pending conditions gpugov's
scheduler wrote, Queue status — so it tells what happened, not what was meant to.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.kube import Kube

SCENARIO = "dev-demo.yaml"
QUEUES = f"/apis/{names.GROUP}/{names.VERSION}/{names.QUEUES}"
TENANTS = f"/apis/{names.GROUP}/{names.VERSION}/{names.TENANTS}"


class DemoError(RuntimeError):
    """A step did not reach its outcome in time; the message says which and what is seen."""


def scenario() -> dict[str, Any]:
    """The scenario from the installed package (not a path into a checkout)."""
    text = resources.files("gpugov.k8s").joinpath("data", SCENARIO).read_text("utf-8")
    return yaml.safe_load(text)


def namespaces(scn: dict[str, Any] | None = None) -> list[str]:
    return [t["namespace"] for t in (scn or scenario())["teams"]]


def _path(obj: dict[str, Any]) -> str:
    """The collection an object is created in."""
    kind, ns = obj["kind"], obj["metadata"].get("namespace")
    if kind == "Namespace":
        return "/api/v1/namespaces"
    if kind == "Pod":
        return f"/api/v1/namespaces/{ns}/pods"
    if kind == "Queue":
        return QUEUES
    if kind == "Tenant":
        return TENANTS
    if kind == "PriorityClass":
        return "/apis/scheduling.k8s.io/v1/priorityclasses"
    if kind == "PodGroup":
        return f"/apis/{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}/namespaces/{ns}/" \
               f"{names.PODGROUPS}"
    raise ValueError(f"the demo does not create {kind}")


@dataclass
class Result:
    """What the API says after the demo (the summary and the e2e test read this)."""

    pods: list[dict[str, Any]] = field(default_factory=list)
    #: (namespace/victim, kind "reclaim"|"preempt", preemptor namespace/name)
    evictions: list[tuple[str, str, str]] = field(default_factory=list)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: queue -> most GPUs it held during the burst (from its status)
    peak_usage: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def _gpus(status: dict[str, Any] | None) -> float:
    usage = (status or {}).get("usage") or {}
    try:
        return float(usage.get("gpu", 0) or 0)
    except (TypeError, ValueError):
        return 0.0


def _quota(spec: dict[str, Any]) -> float:
    try:
        return float(((spec or {}).get("quota") or {}).get("gpu", 0))
    except (TypeError, ValueError):
        return 0.0


async def _list(kube: Kube, path: str, query: list[tuple[str, str]] | None = None) -> list:
    status, doc = await kube.request("GET", path, query=query)
    if status != 200:
        raise DemoError(f"GET {path}: HTTP {status}: {(doc or {}).get('message')}")
    return doc.get("items") or []


async def _pods(kube: Kube, ns_list: list[str]) -> list[dict[str, Any]]:
    out = []
    for ns in ns_list:
        out += await _list(kube, f"/api/v1/namespaces/{ns}/pods")
    return out


def _bound(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and not pod["metadata"].get("deletionTimestamp")


def pending_reason(pod: dict[str, Any]) -> str:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c.get("message") or c.get("reason") or ""
    return ""


async def _evictions(kube: Kube, ns_list: list[str]) -> list[tuple[str, str, str]]:
    out = []
    for ns in ns_list:
        for ev in await _list(kube, f"/api/v1/namespaces/{ns}/events",
                              [("fieldSelector", "reason=Preempted")]):
            msg = ev.get("message") or ""
            # gpugov's scheduler: "gpugov: evicted (<kind>) for pod <ns>/<name>"
            if not msg.startswith("gpugov: evicted ("):
                continue
            kind = msg.split("(", 1)[1].split(")", 1)[0]
            who = msg.rsplit(" ", 1)[-1]
            obj = ev.get("involvedObject") or {}
            out.append((f"{obj.get('namespace')}/{obj.get('name')}", kind, who))
    return sorted(set(out))


async def _reset(kube: Kube, scn: dict[str, Any], timeout: float,
                 say: Callable[[str], None]) -> None:
    """Remove a previous run's namespaces and objects, so the demo starts from its setup."""
    present = []
    for ns in namespaces(scn):
        status, _ = await kube.request("GET", f"/api/v1/namespaces/{ns}")
        if status == 200:
            present.append(ns)
            await kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods",
                               {"gracePeriodSeconds": 0})
            await kube.request("DELETE", f"/api/v1/namespaces/{ns}")
    if present:
        say(f"removing the previous demo ({', '.join(present)})")
    for step in scn["steps"]:
        for obj in step["objects"]:
            if obj["kind"] in ("Queue", "Tenant", "PriorityClass"):
                await kube.request("DELETE", f"{_path(obj)}/{obj['metadata']['name']}")
    deadline = time.monotonic() + timeout
    while present:
        present = [ns for ns in present
                   if (await kube.request("GET", f"/api/v1/namespaces/{ns}"))[0] == 200]
        if time.monotonic() > deadline:
            raise DemoError(f"namespaces {present} of a previous demo are still terminating")
        await asyncio.sleep(0.3)


async def _other_gpu_pods(kube: Kube, ns_list: list[str]) -> list[str]:
    """Live pods outside the demo's namespaces that hold a gpugov allocation."""
    out = []
    for p in await _list(kube, "/api/v1/pods"):
        meta = p["metadata"]
        if meta.get("namespace") in ns_list or (p.get("status") or {}).get("phase") in (
                "Succeeded", "Failed"):
            continue
        if names.ANN_ALLOCATION in (meta.get("annotations") or {}):
            out.append(f"{meta['namespace']}/{meta['name']}")
    return sorted(out)


def restricted(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod with the securityContext Pod Security `restricted` asks for (what an
    untrusted Tenant's namespaces enforce; docs/tenancy.md), unless it sets its own."""
    pod = copy.deepcopy(pod)
    spec = pod.setdefault("spec", {})
    spec.setdefault("securityContext", {"runAsNonRoot": True, "runAsUser": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}})
    for c in spec.get("containers") or []:
        c.setdefault("securityContext", {"allowPrivilegeEscalation": False,
                                         "capabilities": {"drop": ["ALL"]}})
    return pod


async def _create(kube: Kube, obj: dict[str, Any]) -> None:
    body = restricted(obj) if obj["kind"] == "Pod" else copy.deepcopy(obj)
    for _ in range(50):  # a fresh namespace or CRD can answer 404/429/503 for a moment
        status, doc = await kube.request("POST", _path(body), body)
        if status in (200, 201, 409):
            return
        if status not in (404, 429, 500, 503):
            break
        await asyncio.sleep(0.2)
    name = f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
    raise DemoError(f"creating {name}: HTTP {status}: {(doc or {}).get('message')}")


async def _until(check: Callable[[], Any], timeout: float, what: str,
                 seen: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoError(f"after {timeout:g} s still waiting for: {what}\n{await seen()}")
        await asyncio.sleep(0.3)


async def _describe(kube: Kube, ns_list: list[str]) -> str:
    lines = []
    for p in await _pods(kube, ns_list):
        where = p["spec"].get("nodeName") or pending_reason(p) or "pending"
        lines.append(f"  {p['metadata']['namespace']}/{p['metadata']['name']}: {where}")
    return "\n".join(lines)


async def run_async(kubeconfig: Path, say: Callable[[str], None] = lambda _m: None,
                    timeout: float = 120.0) -> Result:
    scn = scenario()
    ns_list = namespaces(scn)
    kube = await Kube.from_kubeconfig(kubeconfig)
    result = Result()
    try:
        await _reset(kube, scn, timeout, say)
        others = await _other_gpu_pods(kube, ns_list)
        if others:
            say(f"note: other GPU pods run on this cluster ({', '.join(others[:5])}"
                f"{', ...' if len(others) > 5 else ''}); the demo is sized for the built-in "
                "fleet of `gpugov dev up` with nothing else on it, so some steps may differ")
        for step in scn["steps"]:
            t0 = time.monotonic()
            say(f"[{step['name']}] {step['say']}")
            for obj in step["objects"]:
                await _create(kube, obj)
            waits = set(step.get("pending") or ())
            pods = [(o["metadata"]["namespace"], o["metadata"]["name"])
                    for o in step["objects"] if o["kind"] == "Pod"]
            pods, left = ([k for k in pods if k[1] not in waits],
                          [k for k in pods if k[1] in waits])

            async def seen() -> str:
                return await _describe(kube, ns_list)

            if step.get("wait") == "bound":
                async def all_bound(pods: list = pods, left: list = left) -> bool:
                    items = {(p["metadata"]["namespace"], p["metadata"]["name"]): p
                             for p in await _pods(kube, ns_list)}
                    return all(k in items and _bound(items[k]) for k in pods) and \
                        all(k in items and pending_reason(items[k]) for k in left)
                await _until(all_bound, timeout, f"step {step['name']}: its pods bound"
                             + (f", {', '.join(n for _, n in left)} told why it waits"
                                if left else ""),
                             seen)
            elif step.get("wait") == "borrowing":
                queue = step["queue"]

                async def borrowing(queue: str = queue, pods: list = pods) -> bool:
                    status, q = await kube.request("GET", f"{QUEUES}/{queue}")
                    if status != 200:
                        return False
                    used = _gpus(q.get("status"))
                    result.peak_usage[queue] = max(result.peak_usage.get(queue, 0.0), used)
                    # borrowing, and every burst pod either bound or told why it waits
                    items = {(p["metadata"]["namespace"], p["metadata"]["name"]): p
                             for p in await _pods(kube, ns_list)}
                    settled = all(k in items and (_bound(items[k]) or pending_reason(items[k]))
                                  for k in pods)
                    return used > _quota(q.get("spec") or {}) and settled
                await _until(borrowing, timeout,
                             f"step {step['name']}: queue {queue} above its quota", seen)
            result.seconds[step["name"]] = round(time.monotonic() - t0, 2)
        result.pods = await _pods(kube, ns_list)
        result.evictions = await _evictions(kube, ns_list)
        for q in await _list(kube, QUEUES):
            result.queues[q["metadata"]["name"]] = q
    finally:
        await kube.close()
    return result


def run(kubeconfig: Path, say: Callable[[str], None] = lambda _m: None,
        timeout: float = 120.0) -> Result:
    """Apply the scenario on the cluster of `kubeconfig`; DemoError if a step stalls."""
    return asyncio.run(run_async(kubeconfig, say, timeout))


def summary(result: Result) -> list[str]:
    """What happened and why, in a few lines, from what the API holds."""
    scn = scenario()
    lines = ["What happened (read back from the API: bindings, Preempted events, conditions, "
             "Queue status):"]
    by_ns: dict[str, list[dict[str, Any]]] = {}
    for p in result.pods:
        by_ns.setdefault(p["metadata"]["namespace"], []).append(p)
    for team in scn["teams"]:
        ns, qname = team["namespace"], team["queue"]
        q = result.queues.get(qname, {})
        bound = sorted(p["metadata"]["name"] for p in by_ns.get(ns, []) if _bound(p))
        lines.append(f"- {ns} ({team['spelling']}; Tenant {team['tenant']}, trust "
                     f"{team['trust']}; Queue {qname} quota {_quota(q.get('spec') or {}):g} GPU"
                     f"): holds {_gpus(q.get('status')):.2f} GPU, running "
                     f"{', '.join(bound) or 'nothing'}")
    for qname, peak in sorted(result.peak_usage.items()):
        quota = _quota(result.queues.get(qname, {}).get("spec") or {})
        if peak > quota:
            lines.append(f"- {qname} borrowed: it held {peak:.2f} GPU at the burst, "
                         f"{peak - quota:.2f} above its quota of {quota:g}, on GPUs no one "
                         "else was asking for")
    for victim, kind, who in sorted(result.evictions, key=lambda e: (e[1] != "reclaim", e)):
        why = ("reclaim: the preemptor's queue was under its fair share and the victim's "
               "above it" if kind == "reclaim" else
               "preempt: same queue, at its cap, and the victim's priority class is lower")
        lines.append(f"- {victim} was evicted for {who} ({why})")
    for p in result.pods:
        if not _bound(p) and pending_reason(p):
            lines.append(f"- {p['metadata']['namespace']}/{p['metadata']['name']} waits: "
                         f"{pending_reason(p)}")
    return lines


async def top_snapshot(kubeconfig: Path, prometheus: str | None = None,
                       settle: float = 30.0) -> Any:
    """The `gpugov top` picture of the cluster: declared and allocated, plus the used view
    from the dev cluster's Prometheus (the simulated exporter's series) when `prometheus`.

    The demo's pods are seconds old and rate() under-reads series younger than its window,
    so it reads with a 10 s window and waits up to `settle` seconds until every device is
    measured and no pod reads as idle (a simulated pod always uses 55-95 % of its share, so
    an idle reading there is a young window, not a finding)."""
    import asyncio
    import time

    from gpugov.observe.cluster import api_client
    from gpugov.observe.promapi import Prometheus
    from gpugov.observe.snapshot import from_cluster

    api = await api_client(kubeconfig)
    try:
        if not prometheus:
            return await from_cluster(api, None, None)
        async with Prometheus(prometheus) as prom:
            deadline = time.monotonic() + settle
            while True:
                snap = await from_cluster(api, prom, None, window="10s")
                measured = bool(snap.devices) and all(d.busy is not None
                                                      for d in snap.devices if d.allocated)
                if (measured and not any(p.idle_compute for p in snap.pods)) or \
                        time.monotonic() >= deadline:
                    return snap
                await asyncio.sleep(2.0)
    finally:
        await api.close()
