"""The MPS control daemon's lifecycle (`gpugov.node.mps`) against a fake
`nvidia-cuda-mps-control` with the documented CLI contract (tests/node/fakes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpugov.k8s.annotations import Inventory, InventoryDevice
from gpugov.model.devices import DeviceMode
from gpugov.node.mps import MpsDaemon, MpsError

FAKE = str(Path(__file__).parent / "fakes" / "nvidia-cuda-mps-control")


def inventory(*modes: DeviceMode, replicas: int = 4) -> Inventory:
    return Inventory(tuple(
        InventoryDevice(index=i, uuid=f"GPU-{i}", model="H100-SXM5-80GB", memory_mib=81559,
                        mode=m, replicas=replicas if m in (DeviceMode.MPS,
                                                           DeviceMode.TIMESLICE) else 1)
        for i, m in enumerate(modes)))


@pytest.fixture
def daemon(tmp_path: Path):
    d = MpsDaemon(tmp_path / "mps", control=FAKE)
    yield d
    if d.alive():
        d.stop()


def state(d: MpsDaemon) -> dict:
    return json.loads((d.pipe_dir / "fake-state.json").read_text())


def test_started_for_the_mps_gpus_with_per_client_defaults(daemon: MpsDaemon) -> None:
    inv = inventory(DeviceMode.EXCLUSIVE, DeviceMode.MPS, DeviceMode.MPS)
    assert daemon.reconcile(inv) == "started"
    s = state(daemon)
    assert s["visible"] == ["GPU-1", "GPU-2"]  # only the MPS GPUs, in index order
    assert s["pinned"] == {"0": f"{81559 // 4}M", "1": f"{81559 // 4}M"}
    assert s["thread_percentage"] == 25
    assert daemon.reconcile(inv) == "unchanged"
    assert (daemon.pipe_dir / "control").exists()


def test_a_restarted_agent_adopts_the_running_daemon(daemon: MpsDaemon) -> None:
    inv = inventory(DeviceMode.MPS)
    daemon.reconcile(inv)
    again = MpsDaemon(daemon.root, control=FAKE)  # a new agent process
    assert again.reconcile(inv) == "adopted"
    assert again.alive()


def test_stopped_when_no_gpu_is_in_mps_mode_any_more(daemon: MpsDaemon) -> None:
    daemon.reconcile(inventory(DeviceMode.MPS))
    assert daemon.reconcile(inventory(DeviceMode.EXCLUSIVE)) == "stopped"
    assert not daemon.alive() and not (daemon.pipe_dir / "control").exists()
    assert daemon.reconcile(inventory(DeviceMode.EXCLUSIVE)) == "unchanged"


def test_a_daemon_that_died_is_started_again(daemon: MpsDaemon) -> None:
    inv = inventory(DeviceMode.MPS)
    daemon.reconcile(inv)
    daemon.command("quit")  # killed behind the agent's back
    assert daemon.reconcile(inv) == "started"


def test_refusals_of_the_control_binary_are_errors_naming_the_command(daemon: MpsDaemon
                                                                      ) -> None:
    with pytest.raises(MpsError, match="Cannot find MPS control daemon"):
        daemon.command("set_default_active_thread_percentage 50")
    daemon.reconcile(inventory(DeviceMode.MPS))
    with pytest.raises(MpsError, match="set_default_active_thread_percentage 500"):
        daemon.command("set_default_active_thread_percentage 500")
    missing = MpsDaemon(daemon.root / "other", control="/nonexistent/mps-control")
    with pytest.raises(MpsError, match="/nonexistent/mps-control -d"):
        missing.reconcile(inventory(DeviceMode.MPS))
