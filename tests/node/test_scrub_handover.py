"""The device plugin scrubs a whole GPU before a pod of another tenant gets it (issue 21,
class 13 wired in): on the fake driver whose device memory outlives its processes, what one
tenant's exited process left is zero when the next tenant's container is allocated."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_device import MiB, leave_secret, visible  # noqa: E402
from kubelet_driver.scenario import (  # noqa: E402
    gpu,
    running_plugin,
    scheduled_pod,
    short_dir,
    soft,
    uuid,
    whole,
)

from gpugov.k8s.annotations import Inventory  # noqa: E402
from gpugov.model.devices import DeviceMode  # noqa: E402
from gpugov.node.deviceplugin import MemoryPodSource  # noqa: E402
from gpugov.node.deviceplugin.resources import socket_name  # noqa: E402
from gpugov.node.proto import deviceplugin_pb2 as pb  # noqa: E402
from gpugov.node.proto import deviceplugin_pb2_grpc as pb_grpc  # noqa: E402
from gpugov.node.scrub import Handover, handover_for  # noqa: E402


def _allocate(tmp: Path, inventory: Inventory, pods: MemoryPodSource, ids: list[list[str]],
              **cfg) -> list[object]:
    """Allocate each id list in turn; the answer or the gRPC error of each."""
    out: list[object] = []

    async def main() -> None:
        with short_dir() as plugin_dir:
            sock = f"unix://{plugin_dir / socket_name('nvidia.com/gpu')}"
            async with running_plugin(plugin_dir, tmp / "state", inventory, pods, **cfg), \
                    grpc.aio.insecure_channel(sock) as ch:
                stub = pb_grpc.DevicePluginStub(ch)
                for one in ids:
                    try:
                        out.append(await stub.Allocate(pb.AllocateRequest(
                            container_requests=[pb.ContainerAllocateRequest(
                                devices_ids=one)])))
                    except grpc.aio.AioRpcError as e:
                        out.append(e)
    asyncio.run(main())
    return out


def test_class13_a_whole_gpu_is_scrubbed_before_another_tenant_gets_it(scrub_fake, device_file,
                                                                      tmp_path: Path) -> None:
    handover = Handover.load(tmp_path / "handover.json")
    inv = Inventory((gpu(0, DeviceMode.EXCLUSIVE),))
    pods = MemoryPodSource()
    pods.put(scheduled_pod("a", [whole(0)], namespace="team-a"))
    (first,) = _allocate(tmp_path, inv, pods, [[uuid(0)]], handover=handover,
                         scrub_cuda_lib=scrub_fake.dir)
    assert not isinstance(first, grpc.aio.AioRpcError), first
    leave_secret(scrub_fake, device_file)  # team-a's container ran and left its data
    pods.delete("team-a", "a")
    pods.put(scheduled_pod("a2", [whole(0)], namespace="team-a"))
    (same,) = _allocate(tmp_path, inv, pods, [[uuid(0)]], handover=handover,
                        scrub_cuda_lib=scrub_fake.dir)
    assert not isinstance(same, grpc.aio.AioRpcError), same
    assert visible(scrub_fake, device_file) == 16 * MiB  # the same tenant: no scrub, no cost
    pods.delete("team-a", "a2")
    pods.put(scheduled_pod("b", [whole(0)], namespace="team-b"))
    (other,) = _allocate(tmp_path, inv, pods, [[uuid(0)]], handover=handover,
                         scrub_cuda_lib=scrub_fake.dir)
    assert not isinstance(other, grpc.aio.AioRpcError), other
    assert visible(scrub_fake, device_file) == 0  # zeroed before team-b's container got the GPU
    assert Handover.load(tmp_path / "handover.json").last[uuid(0)] == "team-b"


def test_class13_a_failed_scrub_refuses_the_handover_and_shared_devices_are_not_scrubbed(
        scrub_fake, device_file, tmp_path: Path) -> None:
    broken = Handover.load(tmp_path / "handover.json")
    inv = Inventory((gpu(0, DeviceMode.EXCLUSIVE), gpu(1, DeviceMode.SOFT, replicas=4)))
    pods = MemoryPodSource()
    pods.put(scheduled_pod("b", [whole(0)], namespace="team-b"))
    pods.put(scheduled_pod("s", [soft(1, 250, 1024)], namespace="team-c"))
    refused, shared = _allocate(tmp_path, inv, pods, [[uuid(0)], [f"{uuid(1)}::0"]],
                                handover=broken, scrub_cuda_lib=tmp_path / "no-driver-here")
    assert isinstance(refused, grpc.aio.AioRpcError)
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "could not be scrubbed before pod team-b/b of another tenant" in refused.details()
    assert not isinstance(shared, grpc.aio.AioRpcError), shared  # soft: never scrubbed
    assert uuid(0) not in broken.last  # not recorded as team-b's: the retry scrubs again


def test_scrub_setting_is_checked(tmp_path: Path) -> None:
    assert handover_for(tmp_path, "off") is None
    assert isinstance(handover_for(tmp_path, "on"), Handover)
    with pytest.raises(ValueError, match="GPUGOV_SCRUB='sometimes'; allowed: auto, on, off"):
        handover_for(tmp_path, "sometimes")
