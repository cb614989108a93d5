"""Shared pieces of the DRA tests: a control plane with the DRA alpha gates gpugov uses, kwok
GPU nodes carrying a `gpugov.io/inventory`, and a kube-scheduler (DynamicResources on)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from gpugov.k8s.annotations import Inventory, InventoryDevice, MigInstance, encode_inventory
from gpugov.k8s.devcluster.plane import LocalControlPlane
from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.scheduler.kube import Kube
from gpugov.model.devices import DeviceMode

#: the alpha gates gpugov uses on 1.34: soft slices (DRAConsumableCapacity) and governing
#: kube-scheduler's allocations (DRADeviceBindingConditions); apiserver, scheduler, KCM
GATES = "--feature-gates=DRAConsumableCapacity=true,DRADeviceBindingConditions=true"
TIMEOUT = 60.0


def dra_plane(workdir: Path) -> LocalControlPlane:
    """etcd + apiserver + KCM + kwok + kube-scheduler, DRAConsumableCapacity on everywhere."""
    cfg = workdir / "sched.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    cfg.write_text(yaml.safe_dump({"apiVersion": "kubescheduler.config.k8s.io/v1",
                                   "kind": "KubeSchedulerConfiguration",
                                   "leaderElection": {"leaderElect": False}}))
    return LocalControlPlane(workdir, scheduler_config=cfg, die_with_parent=True, extra_args={
        "kube-apiserver": [GATES], "kube-scheduler": [GATES],
        "kube-controller-manager": [GATES]})


def inventory(*devices: InventoryDevice) -> Inventory:
    return Inventory(tuple(devices))


def gpu(index: int, mode: DeviceMode = DeviceMode.EXCLUSIVE, model: str = "A100-SXM4-80GB",
        memory_mib: int = 81920, replicas: int = 1, mig: tuple[MigInstance, ...] = (),
        nvlink: int | None = 0, pcie: int | None = None, numa: int = 0,
        healthy: bool = True) -> InventoryDevice:
    return InventoryDevice(index=index, uuid=f"GPU-{model[:4].lower()}-{index:04d}",
                           model=model, memory_mib=memory_mib, mode=mode, replicas=replicas,
                           numa=numa, nvlink_domain=nvlink,
                           pcie_switch=index // 2 if pcie is None else pcie, healthy=healthy,
                           mig=mig)


def kwok_node(name: str, inv: Inventory | None, annotations: dict[str, str] | None = None
              ) -> dict[str, Any]:
    ann = {"kwok.x-k8s.io/node": "fake", **(annotations or {})}
    if inv is not None:
        ann["gpugov.io/inventory"] = encode_inventory(inv)
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": ann,
                         "labels": {"type": "kwok", "gpugov.io/dra": "true"}},
            "status": {"capacity": capacity, "allocatable": capacity}}


def claim_pod(name: str, ns: str, claims: dict[str, str], scheduler: str = "default-scheduler",
              template: bool = False, containers: list[dict] | None = None) -> dict[str, Any]:
    """A pod whose container uses the named claims (`resourceClaimName`, or a template)."""
    key = "resourceClaimTemplateName" if template else "resourceClaimName"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulerName": scheduler,
                     "tolerations": [{"operator": "Exists"}],
                     "resourceClaims": [{"name": k, key: v} for k, v in claims.items()],
                     "containers": containers or [
                         {"name": "main", "image": "fake",
                          "resources": {"claims": [{"name": k} for k in claims]}}]}}


def claim(name: str, ns: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": requests}}}


def request(name: str, cls: str, count: int = 1, selector: str | None = None,
            capacity: dict[str, str] | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {"name": name, "exactly": exactly}


async def wait_for(fn: Callable[[], Awaitable[Any]], what: str,
                   timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await fn()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


async def post(kube: Kube, path: str, obj: dict, expect: tuple[int, ...] = (200, 201)
               ) -> dict:
    """POST `obj` and return the reply; a status outside `expect` fails naming path and reply."""
    status, doc = await kube.request("POST", path, obj)
    assert status in expect, (path, status, doc)
    return doc


async def stop_all(stop: asyncio.Event, tasks: list[asyncio.Task], *clients: Kube) -> None:
    """A test's teardown: stop its background loops, wait for them, close its clients."""
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in clients:
        await c.close()


def start_kube_scheduler(plane: LocalControlPlane, tag: str) -> str:
    """A second kube-scheduler (default profile) under the plane's bookkeeping."""
    cfg = plane.workdir / f"ksched-{tag}.yaml"
    cfg.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(plane.kubeconfig), "qps": 500, "burst": 1000},
        "leaderElection": {"leaderElect": False}}))
    kc = str(plane.kubeconfig)
    name = f"kube-scheduler-{tag}"
    plane.start_process(name, [str(plane.bin / "kube-scheduler"), f"--config={cfg}",
                               "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                               f"--authentication-kubeconfig={kc}",
                               f"--authorization-kubeconfig={kc}",
                               f"--cert-dir={plane.workdir / ('certs-' + tag)}"])
    return name


def plane_fixture(tmp_path_factory: Any) -> Iterator[LocalControlPlane]:
    from gpugov.k8s.devcluster.pytest_plugin import ensure_binaries_or_skip

    ensure_binaries_or_skip()
    plane = dra_plane(tmp_path_factory.mktemp("dra-plane"))
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
