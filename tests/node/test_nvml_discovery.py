"""NVML discovery on the fake driver: models, memory, MIG, topology, NUMA, degraded drivers."""

from __future__ import annotations

import pynvml
import pytest
from nvml_fake import A30, A100_80, H100_80, T4

from gpugov.node.nvml.discovery import discover, mig_profiles
from gpugov.node.nvml.library import Nvml, NvmlUnavailable


def test_discovers_models_memory_topology(node, open_nvml):
    for _ in range(4):
        node.gpu(H100_80, "nvlink 18 1", "numa 0", "power 70000 700000", "cc 9 0")
    node.gpu(T4, "numa 1", "cc 7 5")
    node.add("topo 0 1 20")  # 0 and 1 behind one PCIe switch
    node.add("topo 2 3 10")
    found = discover(open_nvml(node))
    assert [g.model for g in found.gpus] == ["H100-SXM5-80GB"] * 4 + ["T4"]
    h = found.by_index(0)
    assert h.memory_mib == 81559 and h.uuid.startswith("GPU-") and h.pci_device_id == "0x233010DE"
    assert h.compute_capability == (9, 0) and h.power_limit_w == 700.0
    assert h.nvlinks == 18 and h.mig_capable and not h.mig_enabled
    # the four NVLink GPUs form one domain; the T4 has none
    assert {found.by_index(i).nvlink_domain for i in range(4)} == {0}
    assert found.by_index(4).nvlink_domain is None
    # PCIe switches: {0,1}, {2,3}, {4}
    sw = [found.by_index(i).pcie_switch for i in range(5)]
    assert sw[0] == sw[1] and sw[2] == sw[3] and len(set(sw)) == 3
    assert found.by_index(4).numa == 1 and not found.by_index(4).mig_capable
    assert found.driver_version == "550.107.02" and found.cuda_version == (12, 4)


def test_reads_mig_geometry_and_instances(node, open_nvml):
    node.gpu(A100_80, "mig-mode 1", "gi 9 4", "gi 19 0", "gi 19 1")
    node.gpu(A30, "mig-mode 1", "gi 0 0")
    nv = open_nvml(node)
    found = discover(nv)
    a100 = found.by_index(0)
    assert a100.mig_enabled
    assert [(m.profile, m.start, m.size) for m in a100.mig] == [
        ("1g.10gb", 0, 1), ("1g.10gb", 1, 1), ("3g.40gb", 4, 4)]
    assert all(m.uuid.startswith("MIG-") for m in a100.mig)
    profiles = {p.name: p for p in mig_profiles(nv, pynvml.nvmlDeviceGetHandleByIndex(0))}
    assert profiles["3g.40gb"].starts == (0, 4) and profiles["3g.40gb"].profile_id == 9
    assert profiles["1g.20gb"].starts == (0, 2, 4, 6) and profiles["1g.20gb"].memory_slices == 2
    assert profiles["7g.80gb"].sms == 98
    # the A30 numbers its profiles differently: 4g.24gb is ID 0 and takes all 4 slices
    a30 = found.by_index(1)
    assert [(m.profile, m.profile_id, m.size) for m in a30.mig] == [("4g.24gb", 0, 4)]


def test_older_driver_degrades_to_older_calls(node, open_nvml):
    """A driver without the newer symbols still gives memory, MIG geometry names aside."""
    node.gpu(A100_80, "mig-mode 1", "gi 14 0")
    nv = open_nvml(node, legacy=True)
    found = discover(nv)
    g = found.by_index(0)
    assert g.memory_mib == 81920  # v1 memory query
    assert found.cuda_version == (12, 4)  # v1 CUDA version query
    assert any(m.startswith("nvmlSystemGetCudaDriverVersion_v2:function_not_found")
               for m in found.missing)
    # the v1 profile struct carries no name: it comes from the catalog by profile ID
    assert g.mig_enabled and [(m.profile, m.start) for m in g.mig] == [("2g.20gb", 0)]


def test_unsupported_queries_leave_defaults(node, open_nvml):
    node.gpu(A100_80, "unsupported numa", "unsupported nvlink", "unsupported topology",
             "unsupported power")
    node.gpu(A100_80, "unsupported topology")
    found = discover(open_nvml(node))
    g = found.by_index(0)
    assert g.power_limit_w is None and g.nvlinks == 0 and g.pcie_switch is None
    assert g.memory_mib == 81920


def test_lost_gpu_is_left_out(node, open_nvml):
    node.gpu(A100_80)
    node.gpu(A100_80, "lost 1")
    nv = open_nvml(node)
    found = discover(nv)
    assert [g.index for g in found.gpus] == [0]
    assert nv.errors["gpu_is_lost"] == 1


def test_missing_library_is_a_clear_error(tmp_path):
    with pytest.raises(NvmlUnavailable, match="cannot load NVML"):
        Nvml(str(tmp_path / "libnvidia-ml.so.1"))


def test_board_name_unknown_but_pci_id_known_is_the_catalog_model(node, open_nvml):
    # drivers and OEMs spell board names differently; mig-parted matches the PCI device id
    node.gpu(("0x290110DE", 183359, "NVIDIA B200 OEM board"), "cc 10 0")
    node.gpu(("0x12345678", 1024, "Some Future GPU"))
    found = discover(open_nvml(node))
    assert [g.model for g in found.gpus] == ["B200", "Some Future GPU"]
