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
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.driver import KubeletPeer  # noqa: E402
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


def test_node_run_serves_plugin_agent_and_exporter_in_one_process(
        k8s_control_plane, kubelet_driver_binary: Path, fakes, node, tmp_path: Path) -> None:
    """What the chart's DaemonSet runs: `gpugov node run --config node.yaml` on a fake-NVML
    node; the kubelet sees the soft split, the agent publishes the same inventory, the
    exporter answers, and a soft-slice pod gets the library copied into the state folder."""
    from kubernetes_asyncio import client
    from nvml_fake import A100_80

    from gpugov.k8s.annotations import INVENTORY, decode_inventory

    cluster = k8s_control_plane
    node.gpu(A100_80)
    node.gpu(A100_80)
    env = {**os.environ, **node.write()}
    (tmp_path / "node.yaml").write_text("defaultMode: soft\nsoftSplit: 3\nmigStrategy: mixed\n"
                                        "devices: []\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def main() -> None:
        ns = await cluster.unique_namespace("run")
        name = f"gpu-run-{ns}"
        await cluster.acreate_nodes([{"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}}}])
        state = tmp_path / "state"
        with short_dir() as plugin_dir:
            peer = KubeletPeer(kubelet_driver_binary, plugin_dir, tmp_path / "kubelet.log")
            await asyncio.to_thread(peer.start)
            log = open(tmp_path / "node-run.log", "w")  # noqa: SIM115 - closed below
            proc = subprocess.Popen(
                [sys.executable, "-c", "from gpugov.cli import app; app()", "node", "run",
                 "--config", str(tmp_path / "node.yaml"), "--node-name", name,
                 "--listen", f"127.0.0.1:{port}", "--state-dir", str(state),
                 "--plugin-dir", str(plugin_dir), "--kubeconfig", str(cluster.kubeconfig),
                 "--nvml-library", str(fakes.current / "libnvidia-ml.so.1"),
                 "--interval", "0.5"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
            try:
                deadline = time.monotonic() + 60
                while (await asyncio.to_thread(peer.capacity))["allocatable"] != {GPU: 6}:
                    assert time.monotonic() < deadline, (tmp_path / "node-run.log").read_text()
                    await asyncio.sleep(0.1)
                async with cluster.api() as api:
                    core = client.CoreV1Api(api)
                    while INVENTORY not in ((await core.read_node(name)).metadata.annotations
                                            or {}):
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.1)
                    inv = decode_inventory((await core.read_node(name)).metadata.annotations[
                        INVENTORY])
                    assert [d.mode for d in inv.devices] == [DeviceMode.SOFT] * 2
                    g1 = inv.devices[1]
                    slice_ = replace(soft(1, 250, 4096), uuid=g1.uuid)
                    pod = await core.create_namespaced_pod(ns, pod_manifest(
                        "nb", name, Allocation(name, IsolationLevel.SOFT, (slice_,))))
                r = await asyncio.to_thread(peer.admit, pod.metadata.uid, "nb", {GPU: 1}, ns)
                assert r["ok"], r
                opts = r["containers"][0]["options"]
                envs = {e["Name"]: e["Value"] for e in opts["Envs"]}
                assert envs["NVIDIA_VISIBLE_DEVICES"] == g1.uuid
                assert envs["GPUGOV_MEMORY_LIMIT_0"] == "4096Mi"
                lib = {m["ContainerPath"]: m["HostPath"] for m in opts["Mounts"]}[
                    "/usr/local/gpugov/lib/libgpugov.so"]
                assert Path(lib) == state / "lib" / "libgpugov.so" and Path(lib).is_file()
                text = await asyncio.to_thread(lambda: urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())
                assert "DCGM_FI_DEV_FB_USED" in text
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=20) == 0
                assert not (plugin_dir / socket_name(GPU)).exists()
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
                log.close()
                await asyncio.to_thread(peer.stop)

    asyncio.run(main())
