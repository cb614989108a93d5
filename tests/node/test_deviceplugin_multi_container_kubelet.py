"""Pods with several GPU containers and GPU init containers, against the kubelet's own device
manager (k8s.io/kubernetes pkg/kubelet/cm/devicemanager v1.34.2, kubelet_driver/main.go).

The kubelet calls Allocate once per container, init containers first, and hands an init
container's devices on to the containers after it. What each container got — its device IDs,
env, device nodes, the library's limits and its region — is read from the device manager's
own answer (the run options it would give the runtime).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.scenario import (  # noqa: E402
    gpu,
    scheduled_pod,
    soft,
    uuid,
    whole,
)
from test_deviceplugin_kubelet import Node, run  # noqa: E402

from gpugov.k8s.annotations import (  # noqa: E402
    ALLOCATED,
    Inventory,
    decode_allocated,
    decode_allocated_containers,
)
from gpugov.model.devices import DeviceMode  # noqa: E402

GPU = "nvidia.com/gpu"


def with_containers(pod: dict[str, Any], containers: list[tuple[str, int]],
                    inits: list[tuple[str, int]] = (), sidecars: tuple[str, ...] = ()
                    ) -> dict[str, Any]:
    """The scheduled pod's spec as the user wrote it: these containers ask `nvidia.com/gpu`."""
    def spec(name: str, n: int) -> dict[str, Any]:
        c = {"name": name, "image": "x", "resources": {"limits": {GPU: str(n)}}}
        if name in sidecars:
            c["restartPolicy"] = "Always"
        return c
    pod["spec"]["containers"] = [spec(n, k) for n, k in containers]
    if inits:
        pod["spec"]["initContainers"] = [spec(n, k) for n, k in inits]
    return pod


def peer_containers(containers: list[tuple[str, int]], inits: list[tuple[str, int]] = (),
                    sidecars: tuple[str, ...] = ()) -> tuple[list[dict], list[dict]]:
    def one(name: str, n: int) -> dict[str, Any]:
        c: dict[str, Any] = {"name": name, "limits": {GPU: n}}
        if name in sidecars:
            c["restartPolicy"] = "Always"
        return c
    return [one(n, k) for n, k in containers], [one(n, k) for n, k in inits]


def got(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """container name -> {ids, keys, env, devices, mounts} from the device manager's answer."""
    out = {}
    for c in result["containers"]:
        opts = c["options"]
        ids = c["deviceIDs"].get(GPU, [])
        out[c["name"]] = {
            "init": c["init"], "ids": ids, "keys": sorted({i.split("::")[0] for i in ids}),
            "env": {e["Name"]: e["Value"] for e in opts["Envs"] or []},
            "devices": sorted(d["PathInContainer"] for d in opts["Devices"] or []),
            "mounts": {m["ContainerPath"]: m["HostPath"] for m in opts["Mounts"] or []}}
    return out


async def admitted(node: Node, pod: dict[str, Any], apps: list[tuple[str, int]],
                   inits: list[tuple[str, int]] = (), sidecars: tuple[str, ...] = ()
                   ) -> dict[str, dict[str, Any]]:
    """Schedule `pod` with these GPU containers, have the kubelet admit it (which must
    succeed) and return what each container got."""
    name = pod["metadata"]["name"]
    node.pods.put(with_containers(pod, apps, inits, sidecars))
    cs, ics = peer_containers(apps, inits, sidecars)
    result = await asyncio.to_thread(node.peer.admit_pod, pod["metadata"]["uid"], name, cs, ics)
    assert result["ok"], result
    return got(result)


def two_soft_gpus() -> Inventory:
    """GPUs 0-3 whole; 4 and 7 soft (4 replicas each)."""
    return Inventory((*(gpu(i, nvlink=0) for i in range(4)),
                      gpu(4, DeviceMode.SOFT, replicas=4, numa=1),
                      gpu(7, DeviceMode.SOFT, replicas=4, numa=1)))


def test_two_app_containers_and_an_init_container_each_get_their_own_whole_gpus(
        kubelet_driver_binary: Path, tmp_path: Path) -> None:
    apps, inits = [("train", 2), ("eval", 1)], [("fetch", 1)]

    async def body(node: Node, mgr, source) -> None:
        g = await admitted(node, scheduled_pod("job", [whole(0), whole(1), whole(3)]),
                           apps, inits)
        record = {uuid(0), uuid(1), uuid(3)}
        assert [n for n in g] == ["fetch", "train", "eval"]  # init first, as admitted
        assert len(g["train"]["keys"]) == 2 and len(g["eval"]["keys"]) == 1
        # app containers: disjoint, all from the scheduler's record, together all of it
        assert not set(g["train"]["keys"]) & set(g["eval"]["keys"])
        assert set(g["train"]["keys"]) | set(g["eval"]["keys"]) == record
        # the init container ran on one of the pod's devices, which the kubelet handed on
        assert set(g["fetch"]["keys"]) < record
        for name, c in g.items():
            assert c["env"]["NVIDIA_VISIBLE_DEVICES"] == ",".join(c["keys"]), name
            nodes = {f"/dev/nvidia{int(k.split('-')[1])}" for k in c["keys"]}
            assert set(c["devices"]) == nodes | {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                                 "/dev/nvidia-uvm-tools"}, name
            assert not any(k.startswith("GPUGOV_") for k in c["env"])  # whole GPUs
        ann = node.pods.get("team-a", "job")["metadata"]["annotations"][ALLOCATED]
        assert sorted(decode_allocated(ann)[0]) == sorted(record)
        claims = {c.name: sorted(c.device_ids) for c in decode_allocated_containers(ann)}
        assert claims == {n: c["ids"] for n, c in g.items()}

    run(kubelet_driver_binary, tmp_path, two_soft_gpus(), body)


def test_soft_slice_containers_get_different_gpus_their_limits_and_their_own_region(
        kubelet_driver_binary: Path, tmp_path: Path) -> None:
    apps, inits = [("a", 1), ("b", 1)], [("warmup", 1)]

    async def body(node: Node, mgr, source) -> None:
        g = await admitted(node, scheduled_pod(
            "nb", [soft(4, 300, 20480), soft(7, 300, 20480)]), apps, inits)
        assert g["a"]["keys"] != g["b"]["keys"]  # two slices on two GPUs, as placed
        assert {*g["a"]["keys"], *g["b"]["keys"]} == {uuid(4), uuid(7)}
        assert g["warmup"]["ids"][0] in g["a"]["ids"] + g["b"]["ids"]  # handed on
        regions = set()
        for name, c in g.items():
            e = c["env"]
            assert e["NVIDIA_VISIBLE_DEVICES"] == c["keys"][0]
            assert e["GPUGOV_MEMORY_LIMIT_0"] == "20480Mi", name
            assert e["GPUGOV_CORE_LIMIT_0"] == "30", name
            assert e["GPUGOV_DEVICE_UUIDS"] == c["keys"][0]
            host = c["mounts"]["/var/run/gpugov"]
            assert host.endswith(f"team-a_nb_uid-nb/containers/{name}"), host
            assert (Path(host) / "devices").read_text() == c["keys"][0] + "\n"
            regions.add(host)
        assert len(regions) == 3  # no two containers share a region's device slots

    run(kubelet_driver_binary, tmp_path, two_soft_gpus(), body)


def test_an_init_container_larger_than_the_app_containers_gets_the_pods_devices(
        kubelet_driver_binary: Path, tmp_path: Path) -> None:
    apps, inits = [("serve", 1)], [("load", 3)]

    async def body(node: Node, mgr, source) -> None:
        g = await admitted(node, scheduled_pod("big", [whole(0), whole(1), whole(2)]),
                           apps, inits)
        assert g["load"]["keys"] == sorted([uuid(0), uuid(1), uuid(2)])
        assert set(g["serve"]["keys"]) < set(g["load"]["keys"])  # one of them, handed on

    run(kubelet_driver_binary, tmp_path, two_soft_gpus(), body)


def test_a_sidecar_keeps_its_gpu_beside_the_app_container(kubelet_driver_binary: Path,
                                                          tmp_path: Path) -> None:
    apps, inits, sidecars = [("main", 1)], [("proxy", 1), ("prep", 1)], ("proxy",)

    async def body(node: Node, mgr, source) -> None:
        g = await admitted(node, scheduled_pod("sc", [whole(1), whole(2)]), apps, inits,
                           sidecars)
        assert g["proxy"]["keys"] != g["main"]["keys"]  # they run together
        assert g["prep"]["keys"] != g["proxy"]["keys"]  # prep runs beside the sidecar
        assert {*g["proxy"]["keys"], *g["main"]["keys"]} == {uuid(1), uuid(2)}

    run(kubelet_driver_binary, tmp_path, two_soft_gpus(), body)


def test_a_record_too_small_for_the_containers_is_refused_with_the_reason(
        kubelet_driver_binary: Path, tmp_path: Path) -> None:
    apps = [("a", 1), ("b", 1)]

    async def body(node: Node, mgr, source) -> None:
        node.pods.put(with_containers(scheduled_pod("short", [whole(2)]), apps))
        cs, _ = peer_containers(apps)
        result = await asyncio.to_thread(node.peer.admit_pod, "uid-short", "short", cs)
        assert not result["ok"]
        assert ("team-a/short: gpugov.io/allocation: 1 nvidia.com/gpu devices for containers "
                "that hold 2 at once") in result["error"]

    run(kubelet_driver_binary, tmp_path, two_soft_gpus(), body)


def test_each_container_gets_the_driver_capabilities_its_own_env_asks(
        kubelet_driver_binary: Path, tmp_path: Path) -> None:
    """NVIDIA_DRIVER_CAPABILITIES is per container: a video encoder beside a trainer gets
    `video`, the trainer does not (the pod's union went to both)."""
    apps = [("encode", 1), ("train", 1)]

    async def body(node: Node, mgr, source) -> None:
        pod = with_containers(scheduled_pod("mixed", [whole(0), whole(1)]), apps)
        pod["spec"]["containers"][0]["env"] = [
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "video"}]
        node.pods.put(pod)
        cs, _ = peer_containers(apps)
        result = await asyncio.to_thread(node.peer.admit_pod, pod["metadata"]["uid"],
                                         "mixed", cs)
        assert result["ok"], result
        g = got(result)
        caps = {n: c["env"]["NVIDIA_DRIVER_CAPABILITIES"] for n, c in g.items()}
        assert caps == {"encode": "compute,utility,video", "train": "compute,utility"}

    run(kubelet_driver_binary, tmp_path, two_soft_gpus(), body)
