"""dcgm-exporter's default counters, read from NVML: the one table the exporter serves from.

Each field keeps dcgm-exporter's name, Prometheus type, help text and unit
(`etc/default-counters.csv`), and says which NVML call gives it. A call the GPU or driver
refuses gives no series for that GPU, as dcgm-exporter gives none for a blank DCGM value.
Fields NVML cannot give are listed in `NEEDS_DCGM` with the reason (docs/observability.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pynvml

from gpugov.node.nvml.gpm import GPM_FIELDS
from gpugov.node.nvml.library import MEMORY_V2, Nvml


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    kind: str  # "gauge" | "counter"
    help: str
    source: str  # the NVML call, for docs and errors


FIELDS: tuple[Field, ...] = (
    Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
          "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"),
    Field("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
          "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)"),
    Field("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).",
          "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP); HBM parts only"),
    Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).",
          "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"),
    Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "nvmlDeviceGetPowerUsage"),
    Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
          "Total energy consumption since boot (in mJ).", "nvmlDeviceGetTotalEnergyConsumption"),
    Field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.",
          "nvmlDeviceGetPcieReplayCounter"),
    Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).",
          "nvmlDeviceGetUtilizationRates.gpu; not defined under MIG"),
    Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
          "nvmlDeviceGetUtilizationRates.memory; not defined under MIG"),
    Field("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).",
          "nvmlDeviceGetEncoderUtilization"),
    Field("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).",
          "nvmlDeviceGetDecoderUtilization"),
    Field("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.",
          "nvmlEventSetWait (NVML_EVENT_TYPE_XID_CRITICAL_ERROR)"),
    Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
          "nvmlDeviceGetMemoryInfo_v2.free (v1 without v2)"),
    Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
          "nvmlDeviceGetMemoryInfo_v2.used"),
    Field("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).",
          "nvmlDeviceGetMemoryInfo_v2.reserved (drivers >= 510)"),
    Field("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
          "Total number of NVLink bandwidth counters for all lanes.",
          "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX + _RX), KiB; "
          "Hopper and later with NVLinks"),
    Field("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
          "Number of remapped rows for uncorrectable errors", "nvmlDeviceGetRemappedRows; Ampere+"),
    Field("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
          "Number of remapped rows for correctable errors", "nvmlDeviceGetRemappedRows; Ampere+"),
    Field("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
          "nvmlDeviceGetRemappedRows; Ampere+"),
    Field("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge",
          "Current clock event reasons (NVML bitmask).",
          "nvmlDeviceGetCurrentClocksEventReasons (ThrottleReasons on older drivers)"),
    Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge",
          "Ratio of time the graphics engine is active.", "GPM GRAPHICS_UTIL; Hopper+"),
    Field("DCGM_FI_PROF_SM_ACTIVE", "gauge",
          "The ratio of cycles an SM has at least 1 warp assigned.", "GPM SM_UTIL; Hopper+"),
    Field("DCGM_FI_PROF_SM_OCCUPANCY", "gauge",
          "The ratio of number of warps resident on an SM.", "GPM SM_OCCUPANCY; Hopper+"),
    Field("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
          "Ratio of cycles the tensor (HMMA) pipe is active.", "GPM ANY_TENSOR_UTIL; Hopper+"),
    Field("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is "
          "active sending or receiving data.", "GPM DRAM_BW_UTIL; Hopper+"),
    Field("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active.",
          "GPM FP64_UTIL; Hopper+"),
    Field("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active.",
          "GPM FP32_UTIL; Hopper+"),
    Field("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active.",
          "GPM FP16_UTIL; Hopper+"),
    Field("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe "
          "bus - including both protocol headers and data payloads - in bytes per second.",
          "GPM PCIE_TX_PER_SEC on Hopper+, else nvmlDeviceGetPcieThroughput(TX) KB/s x 1024"),
    Field("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - "
          "including both protocol headers and data payloads - in bytes per second.",
          "GPM PCIE_RX_PER_SEC on Hopper+, else nvmlDeviceGetPcieThroughput(RX) KB/s x 1024"),
)
BY_NAME = {f.name: f for f in FIELDS}
# dcgm-exporter's default label field: a label on every series, not a series
DRIVER_VERSION_LABEL = "DCGM_FI_DRIVER_VERSION"
# default counters NVML cannot give, with why (the exporter does not serve them)
NEEDS_DCGM: dict[str, str] = {
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "a vGPU guest's licence state (DCGM's vGPU module); "
    "bare-metal and passthrough GPUs have no licence to report",
    "DCGM_FI_PROF_* on Volta, Turing and Ampere": "NVML's GPM API exists on Hopper and later "
    "only; older GPUs' profiling counters are read by DCGM's profiling module",
}
# fields with a value per MIG GPU instance (GPU_I_ID/GPU_I_PROFILE labels)
MIG_FIELDS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED",
              *(f for f in GPM_FIELDS if f not in ("DCGM_FI_PROF_PCIE_TX_BYTES",
                                                   "DCGM_FI_PROF_PCIE_RX_BYTES")))
FI_MEMORY_TEMP = 82
FI_NVLINK_TX, FI_NVLINK_RX = 138, 139


def memory(nv: Nvml, h: object) -> dict[str, float]:
    """FB used/free/reserved in MiB (reserved only from the v2 call)."""
    if MEMORY_V2 is not None:
        m = nv.query(pynvml.nvmlDeviceGetMemoryInfo, h, MEMORY_V2)
        if m is not None:
            return {"DCGM_FI_DEV_FB_USED": m.used / 2**20, "DCGM_FI_DEV_FB_FREE": m.free / 2**20,
                    "DCGM_FI_DEV_FB_RESERVED": m.reserved / 2**20}
    m = nv.query(pynvml.nvmlDeviceGetMemoryInfo, h)
    if m is None:
        return {}
    return {"DCGM_FI_DEV_FB_USED": m.used / 2**20, "DCGM_FI_DEV_FB_FREE": m.free / 2**20}


def _field_values(nv: Nvml, h: object) -> dict[str, float]:
    vals = nv.query(pynvml.nvmlDeviceGetFieldValues, h,
                    [FI_MEMORY_TEMP, FI_NVLINK_TX, FI_NVLINK_RX])
    if vals is None:
        return {}
    got = {}
    for v in vals:
        if v.nvmlReturn != pynvml.NVML_SUCCESS:
            continue
        got[v.fieldId] = float(v.value.uiVal if v.valueType == 1 else v.value.ullVal)
    out = {}
    if FI_MEMORY_TEMP in got:
        out["DCGM_FI_DEV_MEMORY_TEMP"] = got[FI_MEMORY_TEMP]
    if FI_NVLINK_TX in got and FI_NVLINK_RX in got:
        out["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] = got[FI_NVLINK_TX] + got[FI_NVLINK_RX]
    return out


def _first(value: object, index: int = 0) -> float | None:
    return None if value is None else float(value[index])  # type: ignore[index]


def device_fields(nv: Nvml, h: object) -> dict[str, float]:
    """The whole-GPU fields except XID (events), utilization/FB/power/temp/SM clock/clock
    reasons (already in DeviceSample) and GPM (the sampler)."""
    reads: dict[str, Callable[[], float | None]] = {
        "DCGM_FI_DEV_MEM_CLOCK": lambda: nv.query(pynvml.nvmlDeviceGetClockInfo, h,
                                                  pynvml.NVML_CLOCK_MEM),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
            lambda: nv.query(pynvml.nvmlDeviceGetTotalEnergyConsumption, h),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda: nv.query(pynvml.nvmlDeviceGetPcieReplayCounter,
                                                            h),
        "DCGM_FI_DEV_ENC_UTIL": lambda: _first(nv.query(pynvml.nvmlDeviceGetEncoderUtilization,
                                                        h)),
        "DCGM_FI_DEV_DEC_UTIL": lambda: _first(nv.query(pynvml.nvmlDeviceGetDecoderUtilization,
                                                        h)),
    }
    out = {name: float(v) for name, read in reads.items() if (v := read()) is not None}
    rows = nv.query(pynvml.nvmlDeviceGetRemappedRows, h)
    if rows is not None:
        corr, unc, _pending, failure = rows
        out.update({"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": float(corr),
                    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": float(unc),
                    "DCGM_FI_DEV_ROW_REMAP_FAILURE": float(failure)})
    out.update(_field_values(nv, h))
    mem = memory(nv, h)
    if "DCGM_FI_DEV_FB_RESERVED" in mem:
        out["DCGM_FI_DEV_FB_RESERVED"] = mem["DCGM_FI_DEV_FB_RESERVED"]
    return out


def pcie_fallback(nv: Nvml, h: object) -> dict[str, float]:
    """PCIe throughput without GPM (all GPUs since Maxwell): NVML's KB/s, as bytes/s."""
    out = {}
    for name, counter in (("DCGM_FI_PROF_PCIE_TX_BYTES", pynvml.NVML_PCIE_UTIL_TX_BYTES),
                          ("DCGM_FI_PROF_PCIE_RX_BYTES", pynvml.NVML_PCIE_UTIL_RX_BYTES)):
        v = nv.query(pynvml.nvmlDeviceGetPcieThroughput, h, counter)
        if v is not None:
            out[name] = float(v) * 1024
    return out
