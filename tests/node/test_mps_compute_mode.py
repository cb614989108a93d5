"""The MPS GPUs' compute mode (issue 20): EXCLUSIVE_PROCESS through NVML before the control
daemon starts, DEFAULT after it stops, as NVIDIA's mps-control-daemon does; every refusal
(no root, a GPU without compute modes, a GPU in MIG mode, processes already running) leaves
the daemon stopped and names the GPU and the reason. Fake NVML (tests/fake_cuda/fake_nvml.c:
`nvmlDeviceSetComputeMode` as documented) and the fake `nvidia-cuda-mps-control`."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest
from nvml_fake import A100_80, H100_80

from gpugov.k8s.annotations import Inventory, InventoryDevice
from gpugov.model.devices import DeviceMode
from gpugov.node.mps import DEFAULT, EXCLUSIVE_PROCESS, MpsDaemon, MpsError, NvmlComputeModes

FAKE = str(Path(__file__).parent / "fakes" / "nvidia-cuda-mps-control")


def _uuid(i: int) -> str:
    return f"GPU-{i:08d}-1111-2222-3333-{i:012d}"


def _inventory(n: int) -> Inventory:
    return Inventory(tuple(InventoryDevice(i, _uuid(i), "H100-SXM5-80GB", 81559, DeviceMode.MPS,
                                           4) for i in range(n)))


def _mode(i: int) -> int:
    return pynvml.nvmlDeviceGetComputeMode(pynvml.nvmlDeviceGetHandleByUUID(_uuid(i)))


@pytest.fixture
def daemon(tmp_path: Path):
    d = MpsDaemon(tmp_path / "mps", control=FAKE, modes=NvmlComputeModes())
    yield d
    if d.alive():
        d.command("quit")


def test_mps_gpus_are_exclusive_process_while_the_daemon_runs(node, open_nvml, daemon,
                                                              monkeypatch):
    monkeypatch.setenv("FAKE_NVML_ROOT", "1")
    node.gpu(H100_80)
    node.gpu(H100_80)
    open_nvml(node)
    assert (_mode(0), _mode(1)) == (DEFAULT, DEFAULT)
    assert daemon.reconcile(_inventory(2)) == "started"
    assert (_mode(0), _mode(1)) == (EXCLUSIVE_PROCESS, EXCLUSIVE_PROCESS)
    assert daemon.reconcile(Inventory(())) == "stopped"
    assert (_mode(0), _mode(1)) == (DEFAULT, DEFAULT)


def test_without_root_nvml_refuses_and_the_daemon_stays_stopped(node, open_nvml, daemon,
                                                                monkeypatch):
    monkeypatch.setenv("FAKE_NVML_ROOT", "0")
    node.gpu(H100_80)
    open_nvml(node)
    with pytest.raises(MpsError, match="no permission.*root"):
        daemon.reconcile(_inventory(1))
    assert not daemon.alive() and _mode(0) == DEFAULT


def test_a_gpu_with_processes_is_not_switched_and_none_is_half_switched(node, open_nvml,
                                                                        daemon, monkeypatch):
    monkeypatch.setenv("FAKE_NVML_ROOT", "1")
    node.gpu(H100_80)
    node.gpu(H100_80)
    node.add("proc 1 4242 1073741824")
    open_nvml(node)
    with pytest.raises(MpsError) as info:
        daemon.reconcile(_inventory(2))
    assert _uuid(1) in str(info.value) and "4242" in str(info.value)
    assert not daemon.alive()
    assert (_mode(0), _mode(1)) == (DEFAULT, DEFAULT)  # GPU 0 was put back


@pytest.mark.parametrize("extra, words", [
    (("compute-mode unsupported",), "no compute modes"),
    (("mig-mode 1",), "MIG mode"),
])
def test_gpus_nvml_refuses_are_named(node, open_nvml, daemon, monkeypatch, extra, words):
    monkeypatch.setenv("FAKE_NVML_ROOT", "1")
    node.gpu(A100_80, *extra)
    open_nvml(node)
    with pytest.raises(MpsError, match=words):
        daemon.reconcile(_inventory(1))
    assert not daemon.alive()
