"""gpugov's device plugin against the kubelet's own device manager (k8s.io/kubernetes
pkg/kubelet/cm/devicemanager v1.34.2, driven by kubelet_driver/main.go).

Every admission below goes through the upstream code: registration, ListAndWatch,
GetPreferredAllocation, the device manager's own choice of device IDs, Allocate and the
container run options it would hand to the runtime.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.driver import KubeletPeer  # noqa: E402
from kubelet_driver.scenario import (  # noqa: E402
    NODE,
    gpu,
    mig,
    mig_uuid,
    mixed_node,
    running_plugin,
    scheduled_pod,
    short_dir,
    soft,
    timeslice,
    uuid,
    whole,
)

from gpugov.k8s.annotations import ALLOCATED, Inventory, decode_allocated  # noqa: E402
from gpugov.model.devices import DeviceMode  # noqa: E402
from gpugov.node.deviceplugin import MemoryPodSource  # noqa: E402

GPU, SHARED = "nvidia.com/gpu", "nvidia.com/gpu.shared"


async def until(peer: KubeletPeer, check: Callable[[dict[str, Any]], bool],
                timeout: float = 20) -> dict[str, Any]:
    """Poll the device manager's capacity until `check` holds (bounded, not a timing assert)."""
    deadline = time.monotonic() + timeout
    while True:
        cap = await asyncio.to_thread(peer.capacity)
        if check(cap):
            return cap
        if time.monotonic() > deadline:
            raise AssertionError(f"device manager never reached the expected state: {cap}")
        await asyncio.sleep(0.05)


def envs(result: dict[str, Any]) -> dict[str, str]:
    return {e["Name"]: e["Value"] for e in result["containers"][0]["options"]["Envs"] or []}


def mounts(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["ContainerPath"]: m for m in result["containers"][0]["options"]["Mounts"] or []}


def ids(result: dict[str, Any], resource: str) -> list[str]:
    return result["containers"][0]["deviceIDs"][resource]


class Node:
    """A plugin and a device-manager peer on one short plugin folder."""

    def __init__(self, binary: Path, tmp: Path, inventory: Inventory,
                 pods: MemoryPodSource | None = None) -> None:
        self.binary, self.tmp, self.inventory = binary, tmp, inventory
        self.pods = pods or MemoryPodSource()
        self.peer: KubeletPeer | None = None

    async def start_kubelet(self, plugin_dir: Path) -> KubeletPeer:
        self.peer = KubeletPeer(self.binary, plugin_dir, self.tmp / "kubelet-driver.log")
        await asyncio.to_thread(self.peer.start)
        return self.peer

    async def admit(self, name: str, limits: dict[str, int]) -> dict[str, Any]:
        assert self.peer is not None
        return await asyncio.to_thread(self.peer.admit, f"uid-{name}", name, limits)


def run(binary: Path, tmp: Path, inventory: Inventory, body, pods: MemoryPodSource | None = None,
        kubelet_first: bool = True) -> None:
    """Start kubelet peer + plugin, wait until registered, run `body(node, mgr, source)`."""
    async def main() -> None:
        node = Node(binary, tmp, inventory, pods)
        with short_dir() as plugin_dir:
            if kubelet_first:
                await node.start_kubelet(plugin_dir)
            try:
                async with running_plugin(plugin_dir, tmp / "state", inventory,
                                          node.pods) as (mgr, source):
                    if not kubelet_first:
                        await node.start_kubelet(plugin_dir)
                    assert node.peer is not None
                    await until(node.peer, lambda c: set(c["capacity"]) >= set(mgr.plugins))
                    await body(node, mgr, source)
            finally:
                if node.peer is not None:
                    await asyncio.to_thread(node.peer.stop)
    asyncio.run(main())


def test_registration_and_list_and_watch_advertise_every_resource(
        kubelet_driver_binary: Path, tmp_path: Path) -> None:
    async def body(node: Node, mgr, source) -> None:
        cap = await asyncio.to_thread(node.peer.capacity)
        assert cap["capacity"] == {GPU: 4 + 4, "nvidia.com/mig-3g.40gb": 1,
                                   "nvidia.com/mig-1g.10gb": 2, SHARED: 2}
        assert cap["allocatable"] == cap["capacity"]
        assert set(cap["allocatableDevices"][GPU]) == {uuid(i) for i in range(4)} | {
            f"{uuid(4)}::{n}" for n in range(4)}
        assert set(cap["allocatableDevices"]["nvidia.com/mig-1g.10gb"]) == {
            mig_uuid(5, 4), mig_uuid(5, 5)}
        assert mgr.registrations == 4

    # the plugin starts before the kubelet: it registers when kubelet.sock appears
    run(kubelet_driver_binary, tmp_path, mixed_node(), body, kubelet_first=False)


def test_health_changes_reach_the_device_manager(kubelet_driver_binary: Path,
                                                 tmp_path: Path) -> None:
    async def body(node: Node, mgr, source) -> None:
        source.set_health(uuid(1), False)  # an XID on GPU 1
        cap = await until(node.peer, lambda c: c["allocatable"].get(GPU) == 7)
        assert cap["capacity"][GPU] == 8
        assert uuid(1) not in cap["allocatableDevices"][GPU]
        source.set_health(uuid(1), True)  # recovered
        cap = await until(node.peer, lambda c: c["allocatable"].get(GPU) == 8)
        assert cap["allocatableDevices"][GPU][uuid(1)] == "Healthy"
        source.set_health(uuid(4), False)  # a soft-shared GPU: all its replicas go
        await until(node.peer, lambda c: c["allocatable"].get(GPU) == 4)
        source.set_health(uuid(4), True)
        source.remove(uuid(3))  # lost from the bus
        cap = await until(node.peer, lambda c: c["capacity"].get(GPU) == 7)
        assert uuid(3) not in cap["allocatableDevices"][GPU]

    run(kubelet_driver_binary, tmp_path, mixed_node(), body)


def test_whole_gpus_go_where_the_scheduler_put_them(kubelet_driver_binary: Path,
                                                    tmp_path: Path) -> None:
    async def body(node: Node, mgr, source) -> None:
        node.pods.put(scheduled_pod("train", [whole(1), whole(3)]))
        result = await node.admit("train", {GPU: 2})
        assert result["ok"], result
        assert ids(result, GPU) == sorted([uuid(1), uuid(3)])
        e = envs(result)
        assert e["NVIDIA_VISIBLE_DEVICES"] == f"{uuid(1)},{uuid(3)}"
        assert e["CUDA_VISIBLE_DEVICES"] == e["NVIDIA_VISIBLE_DEVICES"]
        assert not any(k.startswith("GPUGOV_") for k in e)  # whole GPUs: nothing to enforce
        devs = {d["PathInContainer"] for d in result["containers"][0]["options"]["Devices"]}
        assert devs == {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                        "/dev/nvidia1", "/dev/nvidia3"}
        claimed, _ = decode_allocated(node.pods.get("team-a", "train")["metadata"]
                                      ["annotations"][ALLOCATED])
        assert sorted(claimed) == sorted([uuid(1), uuid(3)])

    run(kubelet_driver_binary, tmp_path, mixed_node(), body)


def test_mig_instance_is_the_one_the_scheduler_chose(kubelet_driver_binary: Path,
                                                     tmp_path: Path) -> None:
    async def body(node: Node, mgr, source) -> None:
        node.pods.put(scheduled_pod("infer", [mig(5, "1g.10gb", 5)]))
        result = await node.admit("infer", {"nvidia.com/mig-1g.10gb": 1})
        assert result["ok"], result
        assert ids(result, "nvidia.com/mig-1g.10gb") == [mig_uuid(5, 5)]
        e = envs(result)
        assert e["NVIDIA_VISIBLE_DEVICES"] == mig_uuid(5, 5)
        assert not any(k.startswith("GPUGOV_") for k in e)  # MIG is hard isolation

    run(kubelet_driver_binary, tmp_path, mixed_node(), body)


def test_soft_slice_gets_library_limits_and_region(kubelet_driver_binary: Path,
                                                   tmp_path: Path) -> None:
    async def body(node: Node, mgr, source) -> None:
        node.pods.put(scheduled_pod("notebook", [soft(4, 300, 20480)]))
        result = await node.admit("notebook", {GPU: 1})
        assert result["ok"], result
        (got,) = ids(result, GPU)
        assert got.startswith(uuid(4) + "::")
        e = envs(result)
        assert e["NVIDIA_VISIBLE_DEVICES"] == uuid(4)
        assert e["GPUGOV_MEMORY_LIMIT_0"] == "20480Mi"
        assert e["GPUGOV_CORE_LIMIT_0"] == "30"
        assert e["GPUGOV_SHARED_REGION"] == "/var/run/gpugov/region"
        assert e["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        m = mounts(result)
        assert m["/etc/ld.so.preload"]["ReadOnly"] is True
        preload = Path(m["/etc/ld.so.preload"]["HostPath"]).read_text().strip()
        assert preload == "/usr/local/gpugov/lib/libgpugov.so"
        assert m[preload]["HostPath"].endswith("libgpugov.so") and m[preload]["ReadOnly"]
        region = Path(m["/var/run/gpugov"]["HostPath"])
        assert region.name == "team-a_notebook_uid-notebook"  # <ns>_<pod>_<uid>: the exporter's
        assert not m["/var/run/gpugov"]["ReadOnly"]
        assert (region / "devices").read_text() == uuid(4) + "\n"  # ordinal -> UUID
        # a time-sliced replica: capped at its memory share by the library, compute not
        node.pods.put(scheduled_pod("batch", [timeslice(6, 40779)]))
        result = await node.admit("batch", {SHARED: 1})
        assert result["ok"], result
        e = envs(result)
        assert e["NVIDIA_VISIBLE_DEVICES"] == uuid(6)
        assert e["GPUGOV_MEMORY_LIMIT_0"] == "40779Mi" and "GPUGOV_CORE_LIMIT_0" not in e
        assert mounts(result)["/etc/ld.so.preload"]["ReadOnly"] is True
        # an oversubscribing Tenant's replica (0 MiB): visible device only, no enforcement
        node.pods.put(scheduled_pod("loose", [timeslice(6)]))
        result = await node.admit("loose", {SHARED: 1})
        assert result["ok"], result
        assert envs(result)["NVIDIA_VISIBLE_DEVICES"] == uuid(6)
        assert "GPUGOV_MEMORY_LIMIT_0" not in envs(result)
        assert "/etc/ld.so.preload" not in mounts(result)

    run(kubelet_driver_binary, tmp_path, mixed_node(), body)


@pytest.mark.parametrize("n_pods", [2, 20])
def test_pods_bound_together_are_each_admitted_with_their_own_slice(
        kubelet_driver_binary: Path, tmp_path: Path, n_pods: int) -> None:
    """n pods land on one node at once (4 soft GPUs, mixed sizes, no lock anywhere); the
    device manager admits them in the order they were bound, as the kubelet's sync loop does."""
    inventory = Inventory(tuple(gpu(i, DeviceMode.SOFT, replicas=8, nvlink=0)
                                for i in range(4)))
    rng = random.Random(n_pods)
    plan = {f"p{k:02d}": soft(rng.randrange(4), rng.choice([100, 250, 500]),
                              rng.choice([4096, 8192, 10240, 16384])) for k in range(n_pods)}

    async def body(node: Node, mgr, source) -> None:
        async def bind(name: str) -> None:
            await asyncio.sleep(rng.random() / 100)
            node.pods.put(scheduled_pod(name, [plan[name]]))
        await asyncio.gather(*(bind(n) for n in plan))  # bound concurrently, in random order
        bind_order = sorted(plan, key=lambda n: int(
            node.pods.get("team-a", n)["metadata"]["resourceVersion"]))
        got: dict[str, dict[str, Any]] = {}
        for name in bind_order:
            result = await node.admit(name, {GPU: 1})
            assert result["ok"], (name, result)
            got[name] = result
        for name, result in got.items():
            (device_id,) = ids(result, GPU)
            want = plan[name]
            assert device_id.startswith(uuid(want.index) + "::"), (name, device_id)
            e = envs(result)
            assert e["GPUGOV_MEMORY_LIMIT_0"] == f"{want.memory_mib}Mi"
            assert e["GPUGOV_CORE_LIMIT_0"] == str(want.milli // 10)
            claimed, _ = decode_allocated(node.pods.get("team-a", name)["metadata"]
                                          ["annotations"][ALLOCATED])
            assert claimed == [device_id]
        all_ids = [ids(r, GPU)[0] for r in got.values()]
        assert len(set(all_ids)) == n_pods  # no replica handed out twice
        per_gpu = Counter(i.split("::")[0] for i in all_ids)
        assert per_gpu == Counter(uuid(d.index) for d in plan.values())

    run(kubelet_driver_binary, tmp_path, inventory, body)


def test_kubelet_restart_reregisters(kubelet_driver_binary: Path, tmp_path: Path) -> None:
    async def body(node: Node, mgr, source) -> None:
        node.pods.put(scheduled_pod("before", [whole(0)]))
        assert (await node.admit("before", {GPU: 1}))["ok"]
        before = mgr.registrations
        plugin_dir = node.peer.plugin_dir
        await asyncio.to_thread(node.peer.stop)
        await node.start_kubelet(plugin_dir)  # deletes our sockets, recreates kubelet.sock
        await until(node.peer, lambda c: c["allocatable"] == {
            GPU: 8, "nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-1g.10gb": 2, SHARED: 2})
        for _ in range(200):  # Register's reply may trail the kubelet's first ListAndWatch
            if mgr.registrations >= before + len(mgr.plugins):
                break
            await asyncio.sleep(0.05)
        assert mgr.registrations == before + len(mgr.plugins)  # each plugin once more
        assert all(p.socket.exists() for p in mgr.plugins.values())
        node.pods.put(scheduled_pod("after", [whole(2)]))
        result = await node.admit("after", {GPU: 1})
        assert result["ok"], result
        assert ids(result, GPU) == [uuid(2)]

    run(kubelet_driver_binary, tmp_path, mixed_node(), body)


def test_bad_input_fails_that_admission_with_a_clear_message_and_the_plugin_keeps_serving(
        kubelet_driver_binary: Path, tmp_path: Path) -> None:
    async def body(node: Node, mgr, source) -> None:
        node.pods.put(scheduled_pod("corrupt", [], annotation="{not json"))
        result = await node.admit("corrupt", {GPU: 1})
        assert not result["ok"]
        assert "team-a/corrupt: gpugov.io/allocation: not JSON" in result["error"]

        node.pods.delete("team-a", "corrupt")
        node.pods.put(scheduled_pod("elsewhere", [whole(0)], allocation_node="gpu-node-9"))
        result = await node.admit("elsewhere", {GPU: 1})
        assert not result["ok"]
        assert "node is 'gpu-node-9' but the pod is bound to 'gpu-node-1'" in result["error"]

        node.pods.delete("team-a", "elsewhere")
        result = await node.admit("ghost", {GPU: 1})  # the kubelet has it, the API does not
        assert not result["ok"]
        assert f"no pod bound to node {NODE} has a gpugov.io/allocation" in result["error"]

        node.pods.put(scheduled_pod("wrong-version", [], annotation=json.dumps(
            {"v": 9, "node": NODE, "isolation": "hard", "devices": []})))
        result = await node.admit("wrong-version", {GPU: 1})
        assert "schema version 9 is not known" in result["error"]

        node.pods.put(scheduled_pod("fine", [whole(2)]))
        result = await node.admit("fine", {GPU: 1})
        assert result["ok"], result  # still serving
        assert ids(result, GPU) == [uuid(2)]

    run(kubelet_driver_binary, tmp_path, mixed_node(), body)
