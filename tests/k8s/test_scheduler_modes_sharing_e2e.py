"""Sharing modes end to end: gpugov's scheduler on a real kube-apiserver binds the pods, then
`gpugov node device-plugin` (its own process, pods read from the apiserver) answers the
kubelet's own device manager (`tests/node/kubelet_driver`) for each bound pod, so every
assertion reads what a container would really get: its devices and its limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpugov.k8s.annotations import INVENTORY, decode_inventory, encode_inventory
from gpugov.k8s.scheduler.harness import TIMEOUT, bound, condition, env, pods, wait_until
from gpugov.node.mps import MpsDaemon

sys.path.insert(0, str(Path(__file__).parents[1] / "node"))
from kubelet_driver.driver import DriverUnavailable, KubeletPeer, build  # noqa: E402
from kubelet_driver.scenario import short_dir  # noqa: E402

SHARED = "nvidia.com/gpu.shared"


@pytest.fixture(scope="module")
def kubelet_driver_binary() -> Path:
    try:
        return build()
    except DriverUnavailable as exc:
        pytest.skip(str(exc))


def pool(name: str, gpus: int, devices: list, **extra) -> dict:
    return {"name": name, "count": 1, "model": "H100-SXM5-80GB", "gpus": gpus,
            "cpuMilli": 64000, "memoryMiB": 524288, "devices": devices, **extra}


@contextlib.asynccontextmanager
async def node_side(cluster, kube, node: str, binary: Path, tmp: Path
                    ) -> AsyncIterator[tuple[KubeletPeer, Any]]:
    """The node's device plugin (serving the node's published inventory) and a kubelet
    device manager it registers with; yields (peer, inventory)."""
    _, obj = await kube.request("GET", f"/api/v1/nodes/{node}")
    inventory = decode_inventory(obj["metadata"]["annotations"][INVENTORY])
    inv_file = tmp / "inventory.json"
    inv_file.write_text(encode_inventory(inventory))
    with short_dir() as plugin_dir:
        peer = KubeletPeer(binary, plugin_dir, tmp / "kubelet.log")
        await asyncio.to_thread(peer.start)
        log = open(tmp / "device-plugin.log", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [sys.executable, "-c", "from gpugov.cli import app; app()", "node",
             "device-plugin", "--devices", str(inv_file), "--node-name", node,
             "--plugin-dir", str(plugin_dir), "--state-dir", str(tmp / "state"),
             "--kubeconfig", str(cluster.kubeconfig)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield peer, inventory
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            log.close()
            await asyncio.to_thread(peer.stop)


async def wait_resource(peer: KubeletPeer, resource: str, count: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    while (await asyncio.to_thread(peer.capacity))["allocatable"].get(resource) != count:
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        await asyncio.sleep(0.1)


def arrival(pod: dict) -> tuple[str, int]:
    """The order the kubelet's watch delivers bound pods in (docs/device-plugin.md): the
    bind's time, then the pod's last write."""
    scheduled = next((c.get("lastTransitionTime") or "" for c in
                      (pod.get("status") or {}).get("conditions") or []
                      if c.get("type") == "PodScheduled" and c.get("status") == "True"), "")
    return scheduled, int(pod["metadata"]["resourceVersion"])


async def admit(peer: KubeletPeer, pod: dict, limits: dict[str, int]) -> dict[str, str]:
    """The kubelet's admission of a bound pod; its first container's environment."""
    m = pod["metadata"]
    r = await asyncio.to_thread(peer.admit, m["uid"], m["name"], limits, m["namespace"])
    assert r["ok"], r
    return {e["Name"]: e["Value"] for e in r["containers"][0]["options"]["Envs"]}


def test_four_time_slice_replicas_per_card_bind_each_capped_in_its_allocate_response(
        k8s_control_plane, kubelet_driver_binary: Path, tmp_path: Path) -> None:
    """The default (internal) Tenant time-slices: 4 replicas of a card bind, each capped at
    card/4 (or the memory it names) by the Allocate response; a 5th waits."""
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            (node,) = await e.add_pools(pool("ts", 1, [
                {"index": "0", "mode": "timeslice", "replicas": 4}]))
            q = await e.queue("q")  # its Tenant: trust internal (the CRD default)
            e.start_scheduler()
            await e.pods([e.pod(f"r{i}", None, limits={SHARED: "1"}) for i in range(3)]
                         + [e.pod("named", None, limits={SHARED: "1",
                                                         "nvidia.com/gpumem": "12000"})])
            await e.wait_bound(4)
            await e.pods([e.pod("r4", None, limits={SHARED: "1"})])
            async with node_side(k8s_control_plane, e.kube, node, kubelet_driver_binary,
                                 tmp_path) as (peer, inv):
                card = inv.devices[0].memory_mib
                await wait_resource(peer, SHARED, 4, tmp_path / "device-plugin.log")
                caps = {}
                for p in sorted(bound(await e.list()), key=arrival):
                    envs = await admit(peer, p, {SHARED: 1})
                    assert envs["NVIDIA_VISIBLE_DEVICES"] == inv.devices[0].uuid
                    assert "GPUGOV_CORE_LIMIT_0" not in envs  # compute: time-slicing
                    caps[p["metadata"]["name"]] = envs["GPUGOV_MEMORY_LIMIT_0"]
            assert caps == {"named": "12000Mi", **{f"r{i}": f"{card // 4}Mi"
                                                   for i in range(3)}}
            assert q
            later = {p["metadata"]["name"]: p for p in await e.list()}
            assert not later["r4"]["spec"].get("nodeName")  # the 4 replicas are taken

    asyncio.run(main())


MPS = "nvidia.com/gpu.mps"
FAKE_MPS = str(Path(__file__).parents[1] / "node" / "fakes" / "nvidia-cuda-mps-control")


def test_mps_clients_bind_with_their_caps_in_the_allocate_response(
        k8s_control_plane, kubelet_driver_binary: Path, tmp_path: Path) -> None:
    """A trusted Tenant's `nvidia.com/gpu.mps` pods on a GPU in mps mode (4 clients): each
    bound client gets the daemon's pipe and its caps (25 % of the SMs, card/4 pinned memory);
    a client asking for more than a cap is refused with `gpu`, an internal tenant's with
    `isolation`."""
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            (node,) = await e.add_pools(pool("mps", 1, [
                {"index": "0", "mode": "mps", "replicas": 4}]))
            q = await e.queue("q")
            await e.tenant("t", {"namespaces": [e.ns], "queue": q, "trust": "trusted"})
            internal = await k8s_control_plane.unique_namespace("mps-int")
            await e.tenant("i", {"namespaces": [internal], "queue": q, "trust": "internal"})
            e.start_scheduler()
            await e.pods([e.pod(f"c{i}", None, limits={MPS: "1"}) for i in range(3)]
                         + [e.pod("big", None, limits={MPS: "1", "nvidia.com/gpucores": "50"}),
                            e.pod("int", None, limits={MPS: "1"}, namespace=internal)])
            await e.wait_bound(3)
            msgs = {}
            for ns, name in ((e.ns, "big"), (internal, "int")):
                async def refused(ns=ns, name=name):
                    got = {p["metadata"]["name"]: condition(p) for p in await pods(e.kube, ns)}
                    return got.get(name)

                msgs[name] = (await wait_until(refused, TIMEOUT, f"{name} refused"))[1]
            assert "(gpu: " in msgs["big"] and "isolation" in msgs["int"]
            daemon = MpsDaemon(tmp_path / "state" / "mps", control=FAKE_MPS)
            async with node_side(k8s_control_plane, e.kube, node, kubelet_driver_binary,
                                 tmp_path) as (peer, inv):
                assert daemon.reconcile(inv) == "started"
                try:
                    card = inv.devices[0].memory_mib
                    await wait_resource(peer, MPS, 4, tmp_path / "device-plugin.log")
                    for p in sorted(bound(await e.list()), key=arrival):
                        envs = await admit(peer, p, {MPS: 1})
                        assert envs["NVIDIA_VISIBLE_DEVICES"] == inv.devices[0].uuid
                        assert envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/pipe"
                        assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
                        assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={card // 4}M"
                finally:
                    daemon.stop()

    asyncio.run(main())
