"""End to end: `gpugov node device-plugin` as its own process, pods in a real kube-apiserver
(the session's local control plane), admissions by the kubelet's own device manager.

Covers what the in-memory pod source cannot: the field-selector list, the
resourceVersion-conditional PATCH refused with a real 409, SIGTERM shutdown of the command.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.driver import DriverUnavailable, KubeletPeer, build  # noqa: E402
from kubelet_driver.scenario import gpu, short_dir, soft, uuid, whole  # noqa: E402

from gpugov.k8s.annotations import (  # noqa: E402
    ALLOCATED,
    ALLOCATION,
    Allocation,
    Inventory,
    decode_allocated,
    encode_allocation,
    encode_inventory,
)
from gpugov.model.devices import DeviceMode  # noqa: E402
from gpugov.model.isolation import IsolationLevel  # noqa: E402
from gpugov.node.deviceplugin.resources import socket_name  # noqa: E402
from gpugov.node.proto import deviceplugin_pb2 as pb  # noqa: E402
from gpugov.node.proto import deviceplugin_pb2_grpc as pb_grpc  # noqa: E402

GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def kubelet_driver_binary() -> Path:
    try:
        return build()
    except DriverUnavailable as exc:
        pytest.skip(str(exc))


def pod_manifest(name: str, node: str, alloc: Allocation) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {ALLOCATION: encode_allocation(alloc)}},
            "spec": {"nodeName": node, "containers": [{
                "name": "main", "image": "registry.invalid/cuda:12",
                "resources": {"limits": {GPU: "1"}}}]}}


def test_device_plugin_command_with_real_apiserver_and_device_manager(
        k8s_control_plane, kubelet_driver_binary: Path, tmp_path: Path) -> None:
    from kubernetes_asyncio import client

    cluster = k8s_control_plane
    inventory = Inventory((gpu(0), gpu(1, DeviceMode.SOFT, replicas=24),
                           gpu(2, DeviceMode.SOFT, replicas=12)))
    inv_file = tmp_path / "inventory.json"
    inv_file.write_text(encode_inventory(inventory))

    with socket.socket() as sock:  # a free loopback port, picked now
        sock.bind(("127.0.0.1", 0))
        metrics_port = sock.getsockname()[1]

    async def main() -> None:
        ns = await cluster.unique_namespace("dp")
        node = f"gpu-{ns}"
        with short_dir() as plugin_dir:
            peer = KubeletPeer(kubelet_driver_binary, plugin_dir, tmp_path / "kubelet.log")
            await asyncio.to_thread(peer.start)
            log = open(tmp_path / "device-plugin.log", "w")  # noqa: SIM115 - closed below
            proc = subprocess.Popen(
                [sys.executable, "-c", "from gpugov.cli import app; app()", "node",
                 "device-plugin", "--devices", str(inv_file), "--node-name", node,
                 "--plugin-dir", str(plugin_dir), "--state-dir", str(tmp_path / "state"),
                 "--kubeconfig", str(cluster.kubeconfig),
                 "--metrics-listen", f"127.0.0.1:{metrics_port}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                await body(ns, node, peer, plugin_dir)
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=20) == 0
                assert not (plugin_dir / socket_name(GPU)).exists()  # cleaned up on the way out
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
                log.close()
                await asyncio.to_thread(peer.stop)

    async def body(ns: str, node: str, peer: KubeletPeer, plugin_dir: Path) -> None:
        deadline = time.monotonic() + 60
        while (await asyncio.to_thread(peer.capacity))["allocatable"].get(GPU) != 1 + 24 + 12:
            assert time.monotonic() < deadline, (tmp_path / "device-plugin.log").read_text()
            await asyncio.sleep(0.1)
        async with cluster.api() as api:
            core = client.CoreV1Api(api)
            # 12 soft pods of different sizes on GPU 1 and a whole GPU, created at once
            sizes = {f"s{k:02d}": 1000 + 100 * k for k in range(12)}
            allocs = {n: Allocation(node, IsolationLevel.SOFT, (soft(1, 100, mib),))
                      for n, mib in sizes.items()}
            allocs["whole"] = Allocation(node, IsolationLevel.HARD, (whole(0),))
            created = await asyncio.gather(*(core.create_namespaced_pod(
                ns, pod_manifest(n, node, a)) for n, a in allocs.items()))
            # the kubelet admits in the order its watch delivers the binds
            for p in sorted(created, key=lambda p: int(p.metadata.resource_version)):
                r = await asyncio.to_thread(peer.admit, p.metadata.uid, p.metadata.name,
                                            {GPU: 1}, ns)
                assert r["ok"], r
                envs = {e["Name"]: e["Value"] for e in r["containers"][0]["options"]["Envs"]}
                (dev_id,) = r["containers"][0]["deviceIDs"][GPU]
                if p.metadata.name == "whole":
                    assert dev_id == uuid(0) and "GPUGOV_MEMORY_LIMIT_0" not in envs
                else:
                    assert dev_id.startswith(uuid(1) + "::")
                    assert envs["GPUGOV_MEMORY_LIMIT_0"] == f"{sizes[p.metadata.name]}Mi"
                fresh = await core.read_namespaced_pod(p.metadata.name, ns)
                assert decode_allocated(fresh.metadata.annotations[ALLOCATED])[0] == [dev_id]

            # identical pods, 12 Allocate calls at once straight to the plugin socket: the
            # apiserver's 409 on a stale resourceVersion settles every race
            same = Allocation(node, IsolationLevel.SOFT, (soft(2, 50, 512),))
            await asyncio.gather(*(core.create_namespaced_pod(
                ns, pod_manifest(f"same{k:02d}", node, same)) for k in range(12)))
        async with grpc.aio.insecure_channel(f"unix://{plugin_dir / socket_name(GPU)}") as ch:
            stub = pb_grpc.DevicePluginStub(ch)
            await asyncio.gather(*(stub.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[f"{uuid(2)}::{n}"])]))
                for n in range(12)))
        async with cluster.api() as api:
            pods = (await client.CoreV1Api(api).list_namespaced_pod(ns)).items
            claims = sorted(decode_allocated(p.metadata.annotations[ALLOCATED])[0][0]
                            for p in pods if p.metadata.name.startswith("same"))
            assert claims == sorted(f"{uuid(2)}::{n}" for n in range(12))
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode())
        assert ('gpugov_deviceplugin_allocations_total{outcome="ok",resource="nvidia.com/gpu"} '
                '25.0') in text  # 13 admissions + 12 direct claims

    asyncio.run(main())
