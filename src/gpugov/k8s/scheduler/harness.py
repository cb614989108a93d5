"""Helpers shared by the scheduler's end-to-end tests and `bench/k8s_throughput.py`.

Manifests for GPU nodes and pods, waiting on API conditions, and the invariants a user
relies on, checked from the API alone (allocation records against bindings and capacity).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from gpugov.k8s.annotations import decode_allocation, gfd_labels
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.kube import Kube


def gpu_node(name: str, gpus: int, labels: dict[str, str] | None = None,
             model: str = "A100-SXM4-80GB", cpu: str = "128", memory: str = "1Ti") -> dict:
    """A Node object (kwok-managed) with GPU capacity and GFD labels."""
    capacity = {"cpu": cpu, "memory": memory, "pods": "1000", names.GPU_RESOURCE: str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {**gfd_labels(model, gpus), **(labels or {}),
                                                  "type": "kwok"},
                         "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"taints": []},
            "status": {"capacity": capacity, "allocatable": capacity}}


def gpu_pod(name: str, namespace: str, scheduler: str, limits: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
            priority_class: str = "", node_selector: dict[str, str] | None = None) -> dict:
    """A pod asking for GPUs through resource limits (default: one whole GPU)."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "fake",
                        "resources": {"limits": limits or {names.GPU_RESOURCE: "1"}}}],
        "tolerations": [{"operator": "Exists"}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": annotations or {}, "labels": labels or {}},
            "spec": spec}


async def create_all(kube: Kube, path: str, objs: list[dict], concurrency: int = 64) -> None:
    """POST every object to `path` (formatted with the object's namespace), failing loudly."""
    sem = asyncio.Semaphore(concurrency)

    async def one(o: dict) -> None:
        async with sem:
            p = path.format(ns=(o.get("metadata") or {}).get("namespace", ""))
            status, doc = await kube.request("POST", p, o)
            if status not in (200, 201):
                raise RuntimeError(f"POST {p} {o['metadata'].get('name')}: HTTP {status}: "
                                   f"{(doc or {}).get('message')}")

    await asyncio.gather(*(one(o) for o in objs))


async def wait_until(check: Callable[[], Awaitable[Any]], timeout: float, what: str,
                     interval: float = 0.2) -> Any:
    """Poll `check` until it returns something truthy; TimeoutError says what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {timeout:g} s still waiting for: {what}")
        await asyncio.sleep(interval)


async def pods(kube: Kube, namespace: str, selector: str = "") -> list[dict]:
    items, _ = await kube.list_all(f"/api/v1/namespaces/{namespace}/pods",
                                   label_selector=selector)
    return items


def bound(items: list[dict]) -> list[dict]:
    return [p for p in items if (p.get("spec") or {}).get("nodeName")]


def invariant_problems(items: list[dict], capacity: dict[str, int]) -> list[str]:
    """What is wrong with the bound pods' allocation records, from the API objects alone.

    Every bound pod has a readable record naming its node; no whole device is given twice;
    no device is shared beyond 1000 milli; no index beyond the node's GPU count.
    """
    problems = []
    milli: Counter[tuple[str, int]] = Counter()
    exclusive: Counter[tuple[str, int]] = Counter()
    for p in bound(items):
        meta = p.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        text = (meta.get("annotations") or {}).get(names.ANN_ALLOCATION)
        if text is None:
            problems.append(f"{key}: bound without an allocation record")
            continue
        rec = decode_allocation(text)
        node = p["spec"]["nodeName"]
        if rec.node != node:
            problems.append(f"{key}: bound to {node} but its record says {rec.node}")
        for d in rec.devices:
            if d.index >= capacity.get(node, 0):
                problems.append(f"{key}: device {d.index} beyond {node}'s GPUs")
            milli[(node, d.index)] += d.milli
            if str(d.mode) in ("exclusive", "mig"):
                exclusive[(node, d.index)] += 1
    problems += [f"device {k} given whole to {n} pods" for k, n in exclusive.items() if n > 1]
    problems += [f"device {k} shared beyond one GPU ({m} milli)" for k, m in milli.items()
                 if m > 1000 and exclusive[k] == 0]
    problems += [f"device {k} given whole and shared" for k, n in exclusive.items()
                 if n == 1 and milli[k] > 1000]
    return problems


def podgroup_crd() -> dict:
    """A minimal CRD for scheduler-plugins' PodGroup (`scheduling.x-k8s.io/v1alpha1`), for
    clusters that do not run scheduler-plugins: gpugov reads only `spec.minMember`."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{names.PODGROUPS}.{names.PODGROUP_GROUP}"},
        "spec": {
            "group": names.PODGROUP_GROUP, "scope": "Namespaced",
            "names": {"kind": "PodGroup", "listKind": "PodGroupList",
                      "plural": names.PODGROUPS, "singular": "podgroup", "shortNames": ["pg"]},
            "versions": [{
                "name": names.PODGROUP_VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                             "properties": {"minMember": {"type": "integer", "minimum": 1}}},
                    "status": {"type": "object",
                               "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


async def install_podgroup_crd(kube: Kube, timeout: float = 30.0) -> None:
    """Create the PodGroup CRD unless it exists, and wait until it is served."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    status, doc = await kube.request("POST", path, podgroup_crd())
    if status not in (201, 409):
        raise RuntimeError(f"PodGroup CRD: HTTP {status}: {(doc or {}).get('message')}")

    async def served() -> bool:
        s, _ = await kube.request(
            "GET", f"/apis/{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}/{names.PODGROUPS}")
        return s == 200

    await wait_until(served, timeout, "the PodGroup CRD to be served")
