"""Time-sliced MIG on the node: NVIDIA's time-slicing config for `nvidia.com/mig-<profile>`
becomes replicas of every instance of that profile in the inventory, which the device plugin
advertises as `nvidia.com/mig-<profile>.shared` (never whole), and a replica's container gets
the library capped at its record's memory; several instances of one pod are all visible."""

from __future__ import annotations

from pathlib import Path

from gpugov.k8s.annotations import AllocatedDevice
from gpugov.model.devices import DeviceMode
from gpugov.node.deviceplugin.all_in_one import NodeFile
from gpugov.node.deviceplugin.resources import plugin_devices
from gpugov.node.deviceplugin.response import ResponseConfig, container_response
from gpugov.node.nvml.discovery import GpuInfo, MigDevice, NodeGpus
from gpugov.node.nvml.source import SharingPolicy, inventory_from

NVIDIA_CONFIG = {"version": "v1", "sharing": {"timeSlicing": {
    "renameByDefault": True, "resources": [
    {"name": "nvidia.com/mig-1g.10gb", "replicas": 4}]}}}


def _node() -> NodeGpus:
    mig = (MigDevice("3g.40gb", 9, 1, 0, 4, "MIG-a"), MigDevice("2g.20gb", 14, 2, 4, 2, "MIG-b"),
           MigDevice("1g.10gb", 19, 3, 6, 1, "MIG-c"))
    return NodeGpus((GpuInfo(0, "GPU-0", "NVIDIA H100 80GB HBM3", "H100-SXM5-80GB", 81559,
                             mig_capable=True, mig_enabled=True, mig=mig),))


def test_nvidias_mig_time_slicing_config_serves_replicas_under_shared(tmp_path: Path) -> None:
    node_file = NodeFile.model_validate({"nvidiaConfig": NVIDIA_CONFIG})
    assert node_file.mig_replicas() == (("1g.10gb", 4),)
    inv = inventory_from(_node(), sharing=SharingPolicy(mig_replicas=node_file.mig_replicas()))
    assert [m.replicas for m in inv.devices[0].mig] == [1, 1, 4]
    res = plugin_devices(inv)
    assert [d.id for d in res["nvidia.com/mig-1g.10gb.shared"]] == [
        f"MIG-c::{n}" for n in range(4)]
    assert "nvidia.com/mig-1g.10gb" not in res and len(res["nvidia.com/mig-3g.40gb"]) == 1
    # a replica's container: the instance, the library, its memory cap, no compute cap
    cfg = ResponseConfig(tmp_path, tmp_path / "libgpugov.so", device_specs=False)
    slice_ = AllocatedDevice(0, DeviceMode.MIG, 35, 2496, "GPU-0", "1g.10gb", 6, "MIG-c",
                             mig_replicas=4)
    resp = container_response(res["nvidia.com/mig-1g.10gb.shared"][:1], {"MIG-c": slice_}, cfg,
                              ("ns", "p", "uid"), None)
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == "MIG-c"
    assert resp.envs["GPUGOV_MEMORY_LIMIT_0"] == "2496Mi"
    assert "GPUGOV_CORE_LIMIT_0" not in resp.envs
    # an oversubscribing tenant's replica (0 MiB): no library, no limit
    uncapped = AllocatedDevice(0, DeviceMode.MIG, 35, 0, "GPU-0", "1g.10gb", 6, "MIG-c",
                               mig_replicas=4)
    resp = container_response(res["nvidia.com/mig-1g.10gb.shared"][:1], {"MIG-c": uncapped},
                              cfg, ("ns", "p", "uid"), None)
    assert not any(k.startswith("GPUGOV_") for k in resp.envs)


def test_several_instances_of_one_pod_are_all_visible(tmp_path: Path) -> None:
    mig = tuple(MigDevice("1g.10gb", 19, i + 1, i, 1, f"MIG-{i}") for i in range(7))
    node = NodeGpus((GpuInfo(0, "GPU-0", "NVIDIA H100 80GB HBM3", "H100-SXM5-80GB", 81559,
                             mig_capable=True, mig_enabled=True, mig=mig),))
    devs = plugin_devices(inventory_from(node))["nvidia.com/mig-1g.10gb"]
    two = [devs[5], devs[2]]
    slices = {d.mig_uuid: AllocatedDevice(0, DeviceMode.MIG, 142, 9984, "GPU-0", "1g.10gb",
                                          d.mig_start, d.mig_uuid) for d in two}
    cfg = ResponseConfig(tmp_path, None, device_specs=False)
    resp = container_response(two, slices, cfg, ("ns", "p", "uid"), None)
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == "MIG-2,MIG-5"
