"""The device plugin's QoS boards: every pod on a shared device reads the device's board
folder and writes only its own pod's file (native/qos.c, docs/enforcement.md)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.scenario import soft, timeslice, uuid, whole  # noqa: E402

from gpugov.model.devices import DeviceMode, DeviceTopology  # noqa: E402
from gpugov.node.deviceplugin.resources import PluginDevice  # noqa: E402
from gpugov.node.deviceplugin.response import ResponseConfig, container_response  # noqa: E402


def device(i: int, mode: DeviceMode) -> PluginDevice:
    return PluginDevice(id=f"{uuid(i)}::0", resource="nvidia.com/gpu", uuid=uuid(i), index=i,
                        mode=mode, healthy=True, numa=0, topology=DeviceTopology(None, None, 0))


def test_shared_devices_get_the_board_folder_read_only_and_the_pods_own_file_writable(
        tmp_path: Path) -> None:
    cfg = ResponseConfig(state_dir=tmp_path / "state", library=tmp_path / "libgpugov.so")
    devs = [device(1, DeviceMode.SOFT), device(3, DeviceMode.TIMESLICE)]
    slices = {uuid(1): replace(soft(1, 500, 8000), priority=0),
              uuid(3): timeslice(3, memory_mib=4000)}
    r = container_response(devs, slices, cfg, ("team-a", "infer", "u1"), None)
    mounts = {m.container_path: (m.host_path, m.read_only) for m in r.mounts}
    pod_file = "team-a_infer_u1"
    assert (r.envs["GPUGOV_QOS_DIR"], r.envs["GPUGOV_QOS_SELF"]) == ("/var/run/gpugov-qos",
                                                                     pod_file)
    assert r.envs["GPUGOV_TASK_PRIORITY"] == "0"
    for ordinal, i in ((0, 1), (1, 3)):  # container ordinal -> the physical device's folder
        folder = cfg.state_dir / "qos" / uuid(i)
        assert mounts[f"/var/run/gpugov-qos/{ordinal}"] == (str(folder), True)
        assert mounts[f"/var/run/gpugov-qos/{ordinal}/{pod_file}"] == (str(folder / pod_file),
                                                                       False)
        assert (folder / pod_file).is_file()  # a bind mount needs its source to exist
    # a second pod on device 1 gets its own file in the same folder
    r2 = container_response([devs[0]], {uuid(1): soft(1, 250, 4000)}, cfg,
                            ("team-b", "train", "u2"), None)
    assert r2.envs["GPUGOV_QOS_SELF"] == "team-b_train_u2"
    assert sorted(p.name for p in (cfg.state_dir / "qos" / uuid(1)).iterdir()) == [
        "team-a_infer_u1", "team-b_train_u2"]


def test_devices_without_the_library_get_no_board(tmp_path: Path) -> None:
    cfg = ResponseConfig(state_dir=tmp_path / "state", library=tmp_path / "libgpugov.so")
    r = container_response([device(0, DeviceMode.EXCLUSIVE)], {uuid(0): whole(0)}, cfg,
                           ("ns", "p", "u"), None)
    assert "GPUGOV_QOS_DIR" not in r.envs
    assert not any(m.container_path.startswith("/var/run/gpugov-qos") for m in r.mounts)
