"""gpugov's device plugin over its own gRPC socket, as the kubelet calls it: topology-aware
GetPreferredAllocation, Allocate claims with no lock, refusals; and the generated stubs."""

from __future__ import annotations

import asyncio
import filecmp
import sys
from dataclasses import replace as dataclasses_replace
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.scenario import (  # noqa: E402
    gpu,
    mig,
    mig_uuid,
    mixed_node,
    running_plugin,
    scheduled_pod,
    short_dir,
    soft,
    uuid,
    whole,
)

from gpugov.k8s.annotations import ALLOCATED, Inventory, decode_allocated  # noqa: E402
from gpugov.model.devices import DeviceMode  # noqa: E402
from gpugov.node.deviceplugin import MemoryPodSource  # noqa: E402
from gpugov.node.deviceplugin.resources import plugin_devices, socket_name  # noqa: E402
from gpugov.node.deviceplugin.response import core_percent  # noqa: E402
from gpugov.node.proto import deviceplugin_pb2 as pb  # noqa: E402
from gpugov.node.proto import deviceplugin_pb2_grpc as pb_grpc  # noqa: E402

GPU = "nvidia.com/gpu"


def with_plugin(tmp: Path, inventory: Inventory, pods: MemoryPodSource, body,
                with_library: bool = True) -> None:
    """Run `body(stub_for(resource), pods)` against a running plugin (no kubelet needed)."""
    async def main() -> None:
        with short_dir() as plugin_dir:
            async with running_plugin(plugin_dir, tmp / "state", inventory, pods,
                                      with_library=with_library) as (mgr, _):
                channels: list[grpc.aio.Channel] = []

                def stub(resource: str) -> pb_grpc.DevicePluginStub:
                    ch = grpc.aio.insecure_channel(f"unix://{plugin_dir / socket_name(resource)}")
                    channels.append(ch)
                    return pb_grpc.DevicePluginStub(ch)
                try:
                    await body(stub, pods)
                finally:
                    for ch in channels:
                        await ch.close()
    asyncio.run(main())


async def preferred(stub: pb_grpc.DevicePluginStub, available: list[str], size: int,
                    must: list[str] = ()) -> list[str]:
    resp = await stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=available,
                                               must_include_deviceIDs=list(must),
                                               allocation_size=size)]))
    return list(resp.container_responses[0].deviceIDs)


def nvswitch_node() -> Inventory:
    """16 GPUs on two NVSwitch planes (0-7, 8-15), two NUMA nodes."""
    return Inventory(tuple(gpu(i, nvlink=i // 8, numa=i // 8) for i in range(16)))


def pcie_node() -> Inventory:
    """8 PCIe GPUs, no NVLink: pairs behind one PCIe switch, 0-3 on NUMA 0, 4-7 on NUMA 1."""
    return Inventory(tuple(gpu(i, pcie=i // 2, numa=i // 4) for i in range(8)))


def test_preferred_allocation_keeps_a_set_inside_one_nvswitch_plane(tmp_path: Path) -> None:
    async def body(stub, pods) -> None:
        s = stub(GPU)
        # plane 0 has 3 free, plane 1 has 5 free: 4 GPUs fit only in plane 1
        avail = [uuid(i) for i in (0, 1, 2, 8, 9, 10, 11, 12)]
        got = await preferred(s, avail, 4)
        assert len(got) == 4 and all(uuid(8) <= g <= uuid(15) for g in got)
        # 2 GPUs: best fit takes them from the fuller plane, keeping plane 1's block whole
        got = await preferred(s, avail, 2)
        assert set(got) <= {uuid(0), uuid(1), uuid(2)}
        # must_include is honoured
        got = await preferred(s, avail, 2, must=[uuid(12)])
        assert uuid(12) in got and all(uuid(8) <= g for g in got)

    with_plugin(tmp_path, nvswitch_node(), MemoryPodSource(), body)


def test_preferred_allocation_on_pcie_prefers_switch_then_numa(tmp_path: Path) -> None:
    async def body(stub, pods) -> None:
        s = stub(GPU)
        got = await preferred(s, [uuid(i) for i in (0, 2, 3, 5)], 2)
        assert sorted(got) == [uuid(2), uuid(3)]  # same PCIe switch
        got = await preferred(s, [uuid(i) for i in (0, 1, 4, 5, 6)], 3)
        assert sorted(got) == [uuid(4), uuid(5), uuid(6)]  # one NUMA node, not across

    with_plugin(tmp_path, pcie_node(), MemoryPodSource(), body)


def test_preferred_allocation_steers_to_the_scheduler_choice(tmp_path: Path) -> None:
    pods = MemoryPodSource()
    pods.put(scheduled_pod("spread", [whole(0), whole(7)]))  # the scheduler's (odd) choice

    async def body(stub, pods) -> None:
        got = await preferred(stub(GPU), [uuid(i) for i in range(8)], 2)
        assert sorted(got) == [uuid(0), uuid(7)]

    with_plugin(tmp_path, pcie_node(), pods, body)


def test_concurrent_allocates_claim_each_pod_once_without_a_lock(tmp_path: Path) -> None:
    """20 identically shaped pods, 20 Allocate calls at once: the resourceVersion-conditional
    PATCH lets exactly one claim win per pod; losers move on to the next pod."""
    inventory = Inventory((gpu(0, DeviceMode.SOFT, replicas=20),))
    pods = MemoryPodSource(list_delay_s=0.01)  # every call lists the same unclaimed pods
    for k in range(20):
        pods.put(scheduled_pod(f"w{k:02d}", [soft(0, 50, 2048)]))

    async def body(stub, pods) -> None:
        s = stub(GPU)
        resps = await asyncio.gather(*(s.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[f"{uuid(0)}::{n}"])])) for n in range(20)))
        assert all(r.container_responses[0].envs["GPUGOV_MEMORY_LIMIT_0"] == "2048Mi"
                   for r in resps)
        claimed = [decode_allocated(pods.get("team-a", f"w{k:02d}")["metadata"]["annotations"]
                                    [ALLOCATED])[0] for k in range(20)]
        assert sorted(i for ids in claimed for i in ids) == sorted(
            f"{uuid(0)}::{n}" for n in range(20))  # every replica claimed by exactly one pod
        assert pods.conflicts > 0  # the claims really raced

    with_plugin(tmp_path, inventory, pods, body)


def test_allocate_again_for_the_same_devices_returns_the_same_answer(tmp_path: Path) -> None:
    """After a kubelet restart the device manager may call Allocate again for a running
    container: the pod that already claimed those IDs gets the same answer, nothing new."""
    pods = MemoryPodSource()
    pods.put(scheduled_pod("a", [soft(4, 500, 8192)]))
    pods.put(scheduled_pod("b", [soft(4, 250, 4096)]))

    async def body(stub, pods) -> None:
        s = stub(GPU)
        req = pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[f"{uuid(4)}::2"])])
        first = await s.Allocate(req)
        rv = pods.get("team-a", "a")["metadata"]["resourceVersion"]
        again = await s.Allocate(req)
        assert again == first
        assert first.container_responses[0].envs["GPUGOV_MEMORY_LIMIT_0"] == "8192Mi"
        assert pods.get("team-a", "a")["metadata"]["resourceVersion"] == rv
        assert ALLOCATED not in pods.get("team-a", "b")["metadata"]["annotations"]

    with_plugin(tmp_path, mixed_node(), pods, body)


def test_refusals_name_the_problem_and_the_server_keeps_serving(tmp_path: Path) -> None:
    pods = MemoryPodSource()
    pods.put(scheduled_pod("m", [mig(5, "1g.10gb", 4)]))
    pods.put(scheduled_pod("gone-instance", [mig(5, "2g.20gb", 0)]))

    async def body(stub, pods) -> None:
        s = stub("nvidia.com/mig-1g.10gb")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await s.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=["MIG-not-ours"])]))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "device IDs ['MIG-not-ours'] are not nvidia.com/mig-1g.10gb devices" in \
            err.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as err:  # kubelet picked the other instance
            await s.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[mig_uuid(5, 5)])]))
        details = err.value.details()
        assert "team-a/m wants ['" + mig_uuid(5, 4) + "']" in details
        assert "team-a/gone-instance: gpugov.io/allocation: devices[0]: no MIG instance " \
               "2g.20gb at start 0" in details
        ok = await s.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[mig_uuid(5, 4)])]))
        assert ok.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == mig_uuid(5, 4)

    with_plugin(tmp_path, mixed_node(), pods, body)


def test_without_the_library_soft_slices_are_refused_unclaimed(tmp_path: Path) -> None:
    pods = MemoryPodSource()
    pods.put(scheduled_pod("nb", [soft(4, 500, 8192)]))
    pods.put(scheduled_pod("w", [whole(0)]))

    async def body(stub, pods) -> None:
        s = stub(GPU)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await s.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[f"{uuid(4)}::0"])]))
        assert "pod team-a/nb: soft slices need the enforcement library" in err.value.details()
        assert ALLOCATED not in pods.get("team-a", "nb")["metadata"]["annotations"]
        ok = await s.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[uuid(0)])]))
        assert ok.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == uuid(0)

    with_plugin(tmp_path, mixed_node(), pods, body, with_library=False)


def test_soft_slices_on_two_gpus_get_per_ordinal_limits(tmp_path: Path) -> None:
    inventory = Inventory(tuple(gpu(i, DeviceMode.SOFT, replicas=4) for i in range(3)))
    pods = MemoryPodSource()
    pods.put(scheduled_pod("two", [soft(2, 1000, 30000), soft(0, 200, 10000)],
                           **{"gpugov.io/trust-tier": "trusted"}))

    async def body(stub, pods) -> None:
        s = stub(GPU)
        ids = await preferred(s, [f"{uuid(i)}::{n}" for i in range(3) for n in range(4)], 2)
        assert sorted(i.split("::")[0] for i in ids) == [uuid(0), uuid(2)]
        r = (await s.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=ids)]))).container_responses[0]
        assert r.envs["NVIDIA_VISIBLE_DEVICES"] == f"{uuid(0)},{uuid(2)}"  # PCI order
        assert (r.envs["GPUGOV_MEMORY_LIMIT_0"], r.envs["GPUGOV_CORE_LIMIT_0"]) == ("10000Mi",
                                                                                   "20")
        assert (r.envs["GPUGOV_MEMORY_LIMIT_1"], r.envs["GPUGOV_CORE_LIMIT_1"]) == ("30000Mi",
                                                                                   "100")
        assert r.envs["GPUGOV_SCRUB"] == "0"  # trusted tier only
        # the library maps its indexes to these UUIDs, in the same order as the limits
        assert r.envs["GPUGOV_DEVICE_UUIDS"] == f"{uuid(0)},{uuid(2)}"

    with_plugin(tmp_path, inventory, pods, body)


def test_resource_names_and_ids() -> None:
    inv = mixed_node()
    res = plugin_devices(Inventory((*inv.devices, gpu(9, DeviceMode.MIG,
                                                      mig=[("1g.10gb+me", 0)]))))
    assert set(res) == {GPU, "nvidia.com/gpu.shared", "nvidia.com/mig-3g.40gb",
                        "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.me"}
    assert all(len(d.id) <= 63 for devs in res.values() for d in devs)  # the API's limit
    assert socket_name("nvidia.com/mig-1g.10gb") == "gpugov-mig-1g.10gb.sock"
    assert [core_percent(m) for m in (1, 10, 11, 333, 1000)] == [1, 1, 2, 34, 100]


def test_generated_stubs_match_the_proto(tmp_path: Path) -> None:
    """The committed *_pb2*.py are what grpcio-tools makes of deviceplugin.proto today."""
    pytest.importorskip("grpc_tools")
    from gpugov.node.proto import generate

    generate.generate(tmp_path)
    here = Path(generate.__file__).parent
    for name in ("deviceplugin_pb2.py", "deviceplugin_pb2.pyi", "deviceplugin_pb2_grpc.py"):
        fresh = tmp_path / "gpugov" / "node" / "proto" / name
        assert filecmp.cmp(fresh, here / name, shallow=False), (
            f"{name} is stale: run `python -m gpugov.node.proto.generate` and commit")


def test_proto_keeps_the_kubelet_field_numbers() -> None:
    """The wire format depends on these numbers (data-plane-facts §3.3)."""
    f = {m: {fd.name: fd.number for fd in getattr(pb, m).DESCRIPTOR.fields} for m in (
        "RegisterRequest", "Device", "ContainerPreferredAllocationRequest",
        "ContainerAllocateResponse", "Mount", "DeviceSpec")}
    assert f["RegisterRequest"] == {"version": 1, "endpoint": 2, "resource_name": 3,
                                    "options": 4}
    assert f["Device"] == {"ID": 1, "health": 2, "topology": 3}
    assert f["ContainerPreferredAllocationRequest"] == {
        "available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}
    assert f["ContainerAllocateResponse"] == {"envs": 1, "mounts": 2, "devices": 3,
                                              "annotations": 4, "cdi_devices": 5}
    assert f["Mount"] == {"container_path": 1, "host_path": 2, "read_only": 3}
    assert f["DeviceSpec"] == {"container_path": 1, "host_path": 2, "permissions": 3}
    assert pb.DESCRIPTOR.package == "v1beta1"
    assert pb.DESCRIPTOR.services_by_name["DevicePlugin"].full_name == "v1beta1.DevicePlugin"


def test_mps_clients_get_the_daemon_and_their_caps_or_a_refusal_without_it(
        tmp_path: Path) -> None:
    """`nvidia.com/gpu.mps` IDs per client; Allocate refuses while no MPS control daemon
    runs, then gives the pipe, the shm folder and the client's caps."""
    from gpugov.k8s.annotations import AllocatedDevice
    from gpugov.node.mps import MpsDaemon

    inventory = Inventory((gpu(0, DeviceMode.MPS, replicas=4),))
    assert [d.id for d in plugin_devices(inventory)["nvidia.com/gpu.mps"]] == [
        f"{uuid(0)}::{n}" for n in range(4)]
    client = AllocatedDevice(index=0, mode=DeviceMode.MPS, milli=250, memory_mib=20389,
                             uuid=uuid(0))
    pods = MemoryPodSource()
    pods.put(scheduled_pod("c0", [client]))
    daemon = MpsDaemon(tmp_path / "state" / "mps",
                       control=str(Path(__file__).parent / "fakes" / "nvidia-cuda-mps-control"))

    async def body(stub, pods) -> None:
        s = stub("nvidia.com/gpu.mps")
        req = pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[f"{uuid(0)}::0"])])
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await s.Allocate(req)
        assert "MPS clients need the MPS control daemon" in err.value.details()
        assert ALLOCATED not in pods.get("team-a", "c0")["metadata"]["annotations"]
        assert daemon.reconcile(inventory) == "started"
        try:
            got = (await s.Allocate(req)).container_responses[0]
        finally:
            daemon.stop()
        assert got.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/pipe"
        assert got.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert got.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20389M"
        mounts = {m.container_path: m.host_path for m in got.mounts}
        assert mounts["/mps/pipe"] == str(daemon.pipe_dir)
        assert mounts["/dev/shm"] == str(daemon.shm_dir)
        assert "GPUGOV_MEMORY_LIMIT_0" not in got.envs  # MPS caps, not the library's

    with_plugin(tmp_path, inventory, pods, body)


def test_memory_only_slice_gets_no_compute_cap_and_priority_reaches_the_container(
        tmp_path: Path) -> None:
    """A memory-only slice (HAMi `gpumem` without `gpucores`) shares the device's time: its
    memory is capped, its compute is not; HAMi's task priority is passed on both names; every
    container gets the toolkit's compute capability."""
    inventory = Inventory(tuple(gpu(i, DeviceMode.SOFT, replicas=4) for i in range(2)))
    pods = MemoryPodSource()
    pods.put(scheduled_pod("memonly", [dataclasses_replace(
        soft(0, 250, 20000), compute_limited=False, priority=0)]))
    pods.put(scheduled_pod("capped", [soft(1, 300, 8000)]))

    async def body(stub, pods) -> None:
        s = stub(GPU)
        r = (await s.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[f"{uuid(0)}::0"])]))).container_responses[0]
        assert r.envs["GPUGOV_MEMORY_LIMIT_0"] == "20000Mi"
        assert "GPUGOV_CORE_LIMIT_0" not in r.envs
        assert (r.envs["GPUGOV_TASK_PRIORITY"], r.envs["CUDA_TASK_PRIORITY"]) == ("0", "0")
        assert r.envs["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
        r = (await s.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[f"{uuid(1)}::0"])]))).container_responses[0]
        assert (r.envs["GPUGOV_MEMORY_LIMIT_0"], r.envs["GPUGOV_CORE_LIMIT_0"]) == ("8000Mi",
                                                                                   "30")
        assert "GPUGOV_TASK_PRIORITY" not in r.envs and "CUDA_TASK_PRIORITY" not in r.envs
        assert r.envs["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"

    with_plugin(tmp_path, inventory, pods, body)


def _caps_tree(root: Path, gpu_index: int, gi: int, ci: int, gi_minor: int,
               ci_minor: int) -> None:
    """The driver's /proc capability files for one MIG instance, as the real driver writes
    them (/proc/driver/nvidia/capabilities/gpu<i>/mig/gi<g>[/ci<c>]/access)."""
    gi_dir = root / "driver/nvidia/capabilities" / f"gpu{gpu_index}" / "mig" / f"gi{gi}"
    (gi_dir / f"ci{ci}").mkdir(parents=True)
    (gi_dir / "access").write_text(f"DeviceFileMinor: {gi_minor}\nDeviceFileMode: 292\n"
                                   "DeviceFileModify: 1\n")
    (gi_dir / f"ci{ci}" / "access").write_text(f"DeviceFileMinor: {ci_minor}\n"
                                               "DeviceFileMode: 292\nDeviceFileModify: 1\n")


def test_a_mig_instance_gets_its_gi_and_ci_capability_device_nodes(tmp_path: Path) -> None:
    """As the NVIDIA plugin does: a MIG container gets /dev/nvidia-caps/nvidia-cap<N> for its
    GPU instance and compute instance (minors from the driver's /proc files); an instance
    NVML no longer knows, or a missing capability file, refuses the Allocate by name."""
    from gpugov.model.devices import DeviceTopology
    from gpugov.node.deviceplugin.resources import PluginDevice
    from gpugov.node.deviceplugin.response import ResponseConfig, container_response

    proc = tmp_path / "proc"
    _caps_tree(proc, 5, gi=3, ci=0, gi_minor=39, ci_minor=40)
    ids = {mig_uuid(5, 4): (3, 0)}
    cfg = ResponseConfig(state_dir=tmp_path / "state", library=None, dev_root="/host/dev",
                         proc_root=str(proc), mig_ids=ids.get)
    dev = PluginDevice(id=mig_uuid(5, 4), resource="nvidia.com/mig-1g.10gb", uuid=uuid(5),
                       index=5, mode=DeviceMode.MIG, healthy=True, numa=0,
                       topology=DeviceTopology(None, None, 0), mig_profile="1g.10gb",
                       mig_start=4, mig_uuid=mig_uuid(5, 4))
    rec = mig(5, "1g.10gb", 4)
    r = container_response([dev], {dev.key: rec}, cfg, ("ns", "p", "u"), None)
    specs = {d.container_path: d.host_path for d in r.devices}
    assert specs["/dev/nvidia-caps/nvidia-cap39"] == "/host/dev/nvidia-caps/nvidia-cap39"
    assert specs["/dev/nvidia-caps/nvidia-cap40"] == "/host/dev/nvidia-caps/nvidia-cap40"
    assert "/dev/nvidia5" in specs and r.envs["NVIDIA_VISIBLE_DEVICES"] == mig_uuid(5, 4)
    # without device specs (the NVIDIA runtime injects devices) none are passed
    r = container_response([dev], {dev.key: rec}, dataclasses_replace(cfg, device_specs=False),
                           ("ns", "p", "u"), None)
    assert not r.devices
    with pytest.raises(ValueError, match="NVML does not know MIG instance"):
        container_response([dev], {dev.key: rec}, dataclasses_replace(cfg, mig_ids={}.get),
                           ("ns", "p", "u"), None)
    (proc / "driver/nvidia/capabilities/gpu5/mig/gi3/ci0/access").unlink()
    with pytest.raises(ValueError, match=r"gi3/ci0/access"):
        container_response([dev], {dev.key: rec}, cfg, ("ns", "p", "u"), None)
