"""A GPU container that needs more driver capabilities than compute,utility (issue 19): its
own `NVIDIA_DRIVER_CAPABILITIES` (e.g. `video`, `all`) is checked by the webhook against the
NVIDIA Container Toolkit's documented set (unknown values refused, naming them) and passed by
the device plugin in the Allocate answer, plus compute,utility; the spec is the record (a
container's env cannot change after creation)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc
import pytest

from gpugov.k8s.driver_capabilities import CapabilityError, of_pod
from gpugov.k8s.webhook import admission
from gpugov.k8s.webhook.tenancy import Resolution
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import TrustTier
from gpugov.node.deviceplugin import MemoryPodSource
from gpugov.node.deviceplugin.resources import socket_name
from gpugov.node.proto import deviceplugin_pb2 as pb
from gpugov.node.proto import deviceplugin_pb2_grpc as pb_grpc

sys.path.insert(0, str(Path(__file__).parents[1] / "node"))
from kubelet_driver.scenario import (  # noqa: E402
    gpu,
    running_plugin,
    scheduled_pod,
    short_dir,
    uuid,
    whole,
)

from gpugov.k8s.annotations import Inventory  # noqa: E402


def _pod(env: list[dict] | None, limits: dict | None = None, other_env: list | None = None):
    containers = [{"name": "main", "image": "x",
                   "resources": {"limits": limits or {"nvidia.com/gpu": "1"}},
                   **({"env": env} if env is not None else {})}]
    if other_env is not None:
        containers.append({"name": "side", "image": "y", "env": other_env})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": containers}}


def _caps(value: str) -> list[dict]:
    return [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": value}]


def _mutate(pod: dict) -> dict:
    res = Resolution("t", "q", TrustTier.INTERNAL)
    review = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
              "namespace": "ns", "operation": "CREATE", "object": pod}
    return admission.mutate(review, lambda ns: res)["response"]


@pytest.mark.parametrize("value, want", [
    (None, "compute,utility"),
    ("video", "compute,utility,video"),
    ("graphics, display ,compat32", "compute,compat32,display,graphics,utility"),
    ("utility", "compute,utility"),
    ("all", "all"),
    ("video,all", "all"),
])
def test_what_the_gpu_container_asks_is_admitted_and_passed(value, want):
    pod = _pod(_caps(value) if value is not None else None)
    assert _mutate(pod)["allowed"]
    assert of_pod(pod) == want


def test_a_side_container_without_gpus_does_not_count():
    assert of_pod(_pod(None, other_env=_caps("video"))) == "compute,utility"


@pytest.mark.parametrize("env, words", [
    (_caps("video,hologram"), ["'hologram'", "allowed: compute", "spec.containers[0].env[0]"]),
    ([{"name": "NVIDIA_DRIVER_CAPABILITIES",
       "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}], ["valueFrom"]),
    (_caps("x" * 300), ["longer than 256"]),
])
def test_unknown_or_unreadable_capabilities_are_refused_naming_them(env, words):
    out = _mutate(_pod(env))
    assert not out["allowed"]
    for w in words:
        assert w in out["status"]["message"]


def test_a_volcano_pod_is_read_before_its_resources_are_rewritten():
    pod = _pod(_caps("bogus"), limits={"volcano.sh/vgpu-number": "1"})
    assert not _mutate(pod)["allowed"]


def _with_containers(pod: dict, env: list[dict]) -> dict:
    pod["spec"]["containers"] = [{"name": "main", "env": env,
                                  "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    return pod


def test_the_device_plugin_passes_the_containers_capabilities(tmp_path):
    """Over the plugin's gRPC socket: the video pod's Allocate carries
    compute,utility,video; a pod whose spec names an unknown capability (it bypassed the
    webhook) is refused by name, not given a default silently."""
    inventory = Inventory(tuple(gpu(i, DeviceMode.EXCLUSIVE) for i in range(2)))
    pods = MemoryPodSource()
    pods.put(_with_containers(scheduled_pod("vid", [whole(0)]), _caps("video")))
    pods.put(_with_containers(scheduled_pod("bad", [whole(1)]), _caps("hologram")))

    async def main() -> None:
        with short_dir() as plugin_dir:
            async with running_plugin(plugin_dir, tmp_path / "state", inventory, pods):
                ch = grpc.aio.insecure_channel(
                    f"unix://{plugin_dir / socket_name('nvidia.com/gpu')}")
                try:
                    s = pb_grpc.DevicePluginStub(ch)
                    r = (await s.Allocate(pb.AllocateRequest(container_requests=[
                        pb.ContainerAllocateRequest(devices_ids=[uuid(0)])]))
                         ).container_responses[0]
                    assert r.envs["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility,video"
                    with pytest.raises(grpc.aio.AioRpcError) as info:
                        await s.Allocate(pb.AllocateRequest(container_requests=[
                            pb.ContainerAllocateRequest(devices_ids=[uuid(1)])]))
                    assert "hologram" in str(info.value.details())
                finally:
                    await ch.close()
    asyncio.run(main())


def test_capability_errors_are_value_errors():
    with pytest.raises(CapabilityError):
        of_pod(_pod(_caps("nope")))


def test_a_kai_annotation_pods_container_is_checked_before_it_gets_resources():
    """KAI's gpu-fraction pods name no GPU resource at admission (the webhook writes them on
    the container KAI gives the fraction): that container's env is what counts."""
    pod = _pod(_caps("video"), limits={"cpu": "1"})
    pod["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    assert of_pod(pod) == "compute,utility,video"
    pod["spec"]["containers"][0]["env"] = _caps("bogus")
    assert not _mutate(pod)["allowed"]
