"""Helpers shared by the scheduler's end-to-end tests and `bench/k8s_throughput.py`.

Manifests for GPU nodes and pods, waiting on API conditions, and the invariants a user
relies on, checked from the API alone (allocation records against bindings and capacity).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
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


#: what `gpu_pod` tolerates unless told otherwise: every taint
TOLERATE_ALL = ({"operator": "Exists"},)


def gpu_pod(name: str, namespace: str, scheduler: str, limits: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
            priority_class: str = "", node_selector: dict[str, str] | None = None,
            tolerations: tuple[dict, ...] | list[dict] = TOLERATE_ALL) -> dict:
    """A pod asking for GPUs through resource limits (default: one whole GPU)."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "fake",
                        "resources": {"limits": limits or {names.GPU_RESOURCE: "1"}}}],
        "tolerations": [dict(t) for t in tolerations]}
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
    no device is shared beyond 1000 milli; no index beyond the node's GPU count; no MIG
    instance given twice, and MIG instances never share a device with another kind of slice.
    """
    problems = []
    milli: Counter[tuple[str, int]] = Counter()
    exclusive: Counter[tuple[str, int]] = Counter()
    instances: Counter[tuple[str, int, str, int | None]] = Counter()
    replicas: Counter[tuple[str, int, str, int | None]] = Counter()
    limit: dict[tuple[str, int, str, int | None], int] = {}
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
            if str(d.mode) == "mig":
                where = (node, d.index, str(d.mig_profile), d.mig_start)
                if d.mig_replicas > 1:  # a replica of a time-sliced instance
                    replicas[where] += 1
                    limit[where] = d.mig_replicas
                else:
                    instances[where] += 1
                continue
            milli[(node, d.index)] += d.milli
            if str(d.mode) == "exclusive":
                exclusive[(node, d.index)] += 1
    problems += [f"device {k} given whole to {n} pods" for k, n in exclusive.items() if n > 1]
    problems += [f"device {k} shared beyond one GPU ({m} milli)" for k, m in milli.items()
                 if m > 1000 and exclusive[k] == 0]
    problems += [f"device {k} given whole and shared" for k, n in exclusive.items()
                 if n == 1 and milli[k] > 1000]
    problems += [f"MIG instance {k} given to {n} pods" for k, n in instances.items() if n > 1]
    problems += [f"time-sliced MIG instance {k} given {n} replicas of {limit[k]}"
                 for k, n in replicas.items() if n > limit[k]]
    problems += [f"MIG instance {k} given whole and as replicas" for k in replicas
                 if instances[k]]
    problems += [f"device {k[:2]} holds a MIG instance and another slice"
                 for k in instances if milli[k[:2]] or exclusive[k[:2]]]
    return problems


async def untaint_ready(kube: Kube, nodes: list[str]) -> None:
    """Remove the `node.kubernetes.io/not-ready` taint the apiserver puts on new nodes, as the
    node lifecycle controller does once they are Ready (the local plane does not run it)."""
    for name in nodes:
        _, obj = await kube.request("GET", f"/api/v1/nodes/{name}")
        taints = (obj.get("spec") or {}).get("taints") or []
        keep = [t for t in taints if t.get("key") != "node.kubernetes.io/not-ready"]
        if len(keep) < len(taints):
            status, doc = await kube.request(
                "PATCH", f"/api/v1/nodes/{name}",
                [{"op": "replace", "path": "/spec/taints", "value": keep}],
                content_type="application/json-patch+json")
            if status != 200:
                raise RuntimeError(f"untaint {name}: HTTP {status}: {(doc or {}).get('message')}")


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


# -- one test's slice of a shared control plane (tests/k8s, with the devcluster fixture) -----

_ids = itertools.count()
TIMEOUT = 90.0
QUEUES = f"/apis/{names.GROUP}/{names.VERSION}/{names.QUEUES}"
TENANTS = f"/apis/{names.GROUP}/{names.VERSION}/{names.TENANTS}"


def gpugov_argv(*args: str) -> list[str]:
    """This gpugov's CLI in a child process (`python -m gpugov`, same interpreter)."""
    return [sys.executable, "-m", "gpugov", *args]


class Env:
    """One test's slice of the shared cluster: nodes, namespace, queues, its scheduler."""

    def __init__(self, cluster, kube: Kube, uid: str, ns: str) -> None:
        self.cluster, self.kube, self.uid, self.ns = cluster, kube, uid, ns
        self.scheduler = f"gpugov-{uid}"
        self.label = {"gpugov-test": uid}
        self.nodes: dict[str, int] = {}
        self.cluster_objs: list[str] = []
        self.procs: list[str] = []
        #: namespace -> the Tenant `queue` made for it (replaced by an explicit `tenant`)
        self.auto_tenants: dict[str, str] = {}

    async def add_nodes(self, count: int, gpus: int, prefix: str = "n") -> list[str]:
        made = [gpu_node(f"{self.uid}-{prefix}{i}", gpus, self.label) for i in range(count)]
        for n in made:
            self.nodes[n["metadata"]["name"]] = gpus
        return await self._create_nodes(made)

    async def _create_nodes(self, made: list[dict]) -> list[str]:
        await create_all(self.kube, "/api/v1/nodes", made)
        want = {n["metadata"]["name"] for n in made}

        async def ready():
            items, _ = await self.kube.list_all("/api/v1/nodes",
                                                label_selector=f"gpugov-test={self.uid}")
            ok = {n["metadata"]["name"] for n in items
                  if any(c.get("type") == "Ready" and c.get("status") == "True"
                         for c in (n.get("status") or {}).get("conditions") or [])}
            return want <= ok

        await wait_until(ready, TIMEOUT, f"kwok to mark {sorted(want)} Ready")
        await untaint_ready(self.kube, sorted(want))
        return [n["metadata"]["name"] for n in made]

    async def add_pools(self, *pools: dict) -> list[str]:
        """Nodes of `cluster.yaml` node pools (`gpugov dev up`'s: inventory, GFD labels, device
        resources, labels, taints), named `<uid>-<pool>-<i>`; returns their names."""
        from gpugov.k8s.devcluster.cluster_file import node_objects, parse_cluster_yaml

        named = [dict(p, name=f"{self.uid}-{p['name']}") for p in pools]
        made = node_objects(parse_cluster_yaml({"nodePools": named}, "test pools"))
        for n, gpus in zip(made, [p.get("gpus", 0) for p in named for _ in range(p["count"])],
                           strict=True):
            n["metadata"]["labels"].update(self.label)
            self.nodes[n["metadata"]["name"]] = gpus
        return await self._create_nodes(made)

    async def queue(self, name: str, **spec) -> str:
        """A Queue `<uid>-<name>`. The first leaf queue made also gets a Tenant charging the
        test's namespace to it (gpugov takes a pod's queue from its namespace's Tenant, never
        from the pod), unless a `tenant` names that namespace."""
        full = f"{self.uid}-{name}"
        await create_all(self.kube, QUEUES, [{"apiVersion": "gpugov.io/v1alpha1", "kind": "Queue",
                                             "metadata": {"name": full}, "spec": spec}])
        self.cluster_objs.append(f"{QUEUES}/{full}")
        if self.ns not in self.auto_tenants and "parent" not in spec:
            tname = f"{self.uid}-ns-{self.ns}"
            await self._create_tenant(tname, {"namespaces": [self.ns], "queue": full})
            self.auto_tenants[self.ns] = tname
        return full

    async def tenant(self, name: str, spec: dict) -> None:
        full = f"{self.uid}-{name}"
        for ns in spec.get("namespaces") or []:
            auto = self.auto_tenants.get(ns)
            if auto:  # an explicit Tenant for the namespace replaces the one `queue` made
                await self.kube.request("DELETE", f"{TENANTS}/{auto}")
                self.auto_tenants[ns] = ""
        await self._create_tenant(full, spec)

    async def _create_tenant(self, full: str, spec: dict) -> None:
        await create_all(self.kube, TENANTS, [{"apiVersion": "gpugov.io/v1alpha1",
                                              "kind": "Tenant", "metadata": {"name": full},
                                              "spec": spec}])
        self.cluster_objs.append(f"{TENANTS}/{full}")

    async def pods(self, specs: list[dict]) -> None:
        await create_all(self.kube, "/api/v1/namespaces/{ns}/pods", specs)

    def pod(self, name: str, queue: str | None, **kw) -> dict:
        """A GPU pod of this test's scheduler. `queue` is written as the webhook would
        (`gpugov.io/queue`) for the reader: the scheduler charges the namespace's Tenant."""
        ann = dict(kw.pop("annotations", {}))
        if queue:
            ann[names.ANN_QUEUE] = queue
        return gpu_pod(name, kw.pop("namespace", self.ns), self.scheduler, annotations=ann,
                       **kw)

    def start_scheduler(self, tag: str = "", *extra: str, kubeconfig: Path | None = None) -> str:
        """`gpugov scheduler` for this test's nodes and schedulerName; `kubeconfig` (default:
        the admin's) e.g. the chart ServiceAccount's (`cluster.component_kubeconfig`)."""
        name = f"sched-{self.uid}{tag}"
        self.cluster.plane.start_process(name, gpugov_argv(
            "scheduler", "--kubeconfig", str(kubeconfig or self.cluster.kubeconfig),
            "--scheduler-name", self.scheduler, "--node-selector", f"gpugov-test={self.uid}",
            *extra))
        self.procs.append(name)
        return name

    def kill(self, name: str) -> None:
        proc = self.cluster.plane.procs.procs[name]
        os.killpg(proc.pid, signal.SIGKILL)
        if proc.popen is not None:
            proc.popen.wait(timeout=10)

    def log(self, name: str) -> str:
        return Path(self.cluster.plane.procs.procs[name].log).read_text(errors="replace")

    def alive(self, name: str) -> bool:
        return self.cluster.plane.procs.procs[name].running()

    async def list(self) -> list[dict]:
        return await pods(self.kube, self.ns)

    async def wait_bound(self, n: int, ns: str | None = None) -> list[dict]:
        async def check():
            items = await pods(self.kube, ns or self.ns)
            return items if len(bound(items)) >= n else None

        return await wait_until(check, TIMEOUT, f"{n} pods bound in {ns or self.ns}")

    async def cleanup(self) -> None:
        for name in self.procs:
            with contextlib.suppress(KeyError):
                self.cluster.plane.procs.stop(name, grace=5)
        for path in self.cluster_objs:
            await self.kube.request("DELETE", path)
        for node in self.nodes:
            await self.kube.request("DELETE", f"/api/v1/nodes/{node}")


@contextlib.asynccontextmanager
async def env(cluster) -> AsyncIterator[Env]:
    kube = await Kube.from_kubeconfig(cluster.kubeconfig)
    try:
        from gpugov.k8s.devcluster.dev import install_crds  # the CRDs' owner installs them

        await install_crds(cluster.kubeconfig)
        await install_podgroup_crd(kube)
        ns = await cluster.unique_namespace("sched")
        e = Env(cluster, kube, f"s{next(_ids)}{os.getpid() % 1000}", ns)
        try:
            yield e
        finally:
            await e.cleanup()
    finally:
        await kube.close()


def condition(pod: dict) -> tuple[str, str] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c.get("reason", ""), c.get("message", "")
    return None


def by_name(items: list[dict]) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in items}


