"""dcgm-exporter compatibility of `gpugov node exporter` on the fake NVML: dcgm-exporter's own
default counter list (tests/node/upstream/dcgm-exporter, unedited) is served by name and with
its labels, the profiling fields come from GPM on Hopper (per MIG instance too), and GPUs or
drivers without a counter give no series for it, as the real NVML refuses it there."""

from __future__ import annotations

import csv
from pathlib import Path

from nvml_fake import A100_80, H100_80, T4
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpugov.node.exporter import ExporterConfig, NodeCollector, make_registry
from gpugov.node.nvml.dcgm_fields import BY_NAME, DRIVER_VERSION_LABEL, NEEDS_DCGM
from gpugov.observe import names

UPSTREAM = Path(__file__).parent / "upstream" / "dcgm-exporter"
GPM = "gpm 61 55 30 42 37 3 20 9"  # graphics sm occupancy tensor dram fp64 fp32 fp16 (%)


def default_counters() -> list[tuple[str, str]]:
    """(field, type) of every counter dcgm-exporter enables by default."""
    rows = []
    for line in (UPSTREAM / "default-counters.csv").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            field, kind, _ = next(csv.reader([line], skipinitialspace=True))
            rows.append((field.strip(), kind.strip()))
    return rows


def scrape(c: NodeCollector) -> dict[str, list[tuple[dict, float]]]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(generate_latest(make_registry(c)).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def by_gpu(m: dict, name: str, gi: str = "") -> dict[str, float]:
    return {lab["gpu"]: v for lab, v in m.get(name, []) if lab.get("GPU_I_ID", "") == gi}


def test_every_default_counter_is_served_or_named_as_needing_dcgm() -> None:
    rows = default_counters()
    assert len(rows) == 26  # the upstream file at the recorded commit
    for field, kind in rows:
        if kind == "label":
            assert field == DRIVER_VERSION_LABEL
        elif field in BY_NAME:
            assert field in names.EXPORTER_METRICS, field
        else:
            assert field in NEEDS_DCGM, f"{field}: neither exported nor explained"


def test_hopper_gives_profiling_fields_older_gpus_refuse_them(node, open_nvml) -> None:
    node.gpu(H100_80, "cc 9 0", GPM, "pcie-kbps 2048 1024", "encdec 7 11", "nvlink 18 1",
             "nvlink-kib 4000 6000", "remapped-rows 2 1 0 0")
    node.gpu(A100_80, "pcie-kbps 512 256", "util 40 10")
    node.gpu(T4, "cc 7 5")
    c = NodeCollector(open_nvml(node), ExporterConfig("n1"))
    first = scrape(c)
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" not in first  # GPM needs two samples
    m = scrape(c)
    assert by_gpu(m, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") == {"0": 0.42}
    assert by_gpu(m, "DCGM_FI_PROF_GR_ENGINE_ACTIVE") == {"0": 0.61}
    assert by_gpu(m, "DCGM_FI_PROF_DRAM_ACTIVE") == {"0": 0.37}
    # PCIe: GPM's MiB/s on Hopper, nvmlDeviceGetPcieThroughput's KB/s elsewhere, in bytes/s
    assert by_gpu(m, "DCGM_FI_PROF_PCIE_TX_BYTES") == {"0": 2 << 20, "1": 512 * 1024,
                                                       "2": 0.0}
    # NVML-only counters, each where the real NVML has it
    assert set(by_gpu(m, "DCGM_FI_DEV_MEMORY_TEMP")) == {"0", "1"}  # HBM; T4 is GDDR6
    assert by_gpu(m, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS") == {"0": 2, "1": 0}  # Ampere+
    assert by_gpu(m, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL") == {"0": 10000}
    assert by_gpu(m, "DCGM_FI_DEV_ENC_UTIL")["0"] == 7
    assert set(by_gpu(m, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")) == {"0", "1", "2"}
    assert set(by_gpu(m, "DCGM_FI_DEV_FB_RESERVED")) == {"0", "1", "2"}
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in m  # dcgm-exporter's name only
    assert set(by_gpu(m, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")) == {"0", "1", "2"}
    labels = m["DCGM_FI_DEV_GPU_TEMP"][0][0]
    assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "hostname",
            DRIVER_VERSION_LABEL} <= set(labels)
    assert (labels["pci_bus_id"], labels["device"], labels[DRIVER_VERSION_LABEL]) == (
        "00000000:10:00.0", "nvidia0", "550.107.02")


def test_mig_instances_get_profiling_and_memory_rows(node, open_nvml) -> None:
    node.gpu(H100_80, "cc 9 0", "mig-mode 1", "gi 9 0", "gi 14 4", GPM,
             "gpm-gi 1 80 70 50 66 20 0 10 5", "gpm-gi 5 10 10 5 0 3 0 1 0")
    c = NodeCollector(open_nvml(node), ExporterConfig("n1"))
    scrape(c)
    m = scrape(c)
    rows = {(lab["GPU_I_ID"], lab["GPU_I_PROFILE"]): v
            for lab, v in m["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] if lab["GPU_I_ID"]}
    gis = {lab["GPU_I_ID"] for lab, _ in m["DCGM_FI_DEV_FB_USED"] if lab["GPU_I_ID"]}
    assert len(rows) == len(gis) == 2
    assert sorted(rows.values()) == [0.0, 0.66]
    assert {p for _, p in rows} == {"3g.40gb", "2g.20gb"}
    # utilization is not defined under MIG: NVML refuses it, no series
    assert "DCGM_FI_DEV_GPU_UTIL" not in m


def test_older_driver_without_gpm_gives_no_profiling_fields(node, open_nvml) -> None:
    node.gpu(H100_80, "cc 9 0", GPM, "pcie-kbps 100 100")
    c = NodeCollector(open_nvml(node, legacy=True), ExporterConfig("n1"))
    scrape(c)
    m = scrape(c)
    assert not [n for n in m if n.startswith("DCGM_FI_PROF_") and "PCIE" not in n]
    assert by_gpu(m, "DCGM_FI_PROF_PCIE_RX_BYTES") == {"0": 100 * 1024}
    assert "gpugov_exporter_errors_total" not in m  # degraded is not an error
