"""Live per-device readings, taken when asked (at scrape time), each with its fallbacks."""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml

from gpugov.node.nvml.dcgm_fields import device_fields, memory
from gpugov.node.nvml.library import MEMORY_V2, GpuLost, Nvml


@dataclass(frozen=True, slots=True)
class Process:
    pid: int  # host PID namespace
    used_bytes: int | None  # None: the driver cannot say (e.g. no permission on a MIG parent)
    gi_id: int | None = None


@dataclass(frozen=True, slots=True)
class MigSample:
    gi_id: int
    uuid: str
    fb_used_mib: float | None
    fb_free_mib: float | None
    fb_reserved_mib: float | None = None


@dataclass(frozen=True, slots=True)
class DeviceSample:
    index: int
    uuid: str = ""
    name: str = ""
    lost: bool = False
    gpu_util: float | None = None
    mem_copy_util: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: int | None = None
    processes: tuple[Process, ...] | None = None  # None: the driver cannot list them
    mig: tuple[MigSample, ...] = field(default=())
    # the other dcgm-exporter default counters NVML gave (gpugov.node.nvml.dcgm_fields)
    fields: dict[str, float] = field(default_factory=dict)


def _processes(nv: Nvml, h: object) -> tuple[Process, ...] | None:
    procs = nv.first(("nvmlDeviceGetComputeRunningProcesses_v3", (h,)),
                     (pynvml.nvmlDeviceGetComputeRunningProcesses_v2, (h,)))
    if procs is None:
        return None
    out = []
    for p in procs:
        gi = getattr(p, "gpuInstanceId", None)
        gi = None if gi is None or gi == 0xFFFFFFFF else int(gi)
        used = p.usedGpuMemory
        out.append(Process(int(p.pid), None if used is None else int(used), gi))
    return tuple(out)


def _memory(nv: Nvml, h: object) -> tuple[float | None, float | None]:
    mem = nv.first((pynvml.nvmlDeviceGetMemoryInfo, (h, MEMORY_V2)),
                   (pynvml.nvmlDeviceGetMemoryInfo, (h,)))
    if mem is None:
        return None, None
    return mem.used / 2**20, mem.free / 2**20


def sample_device(nv: Nvml, index: int) -> DeviceSample:
    """One device's readings; a lost GPU gives `lost=True` and nothing else."""
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = nv.query(pynvml.nvmlDeviceGetUUID, h) or ""
        name = nv.query(pynvml.nvmlDeviceGetName, h) or ""
        util = nv.query(pynvml.nvmlDeviceGetUtilizationRates, h)  # NotSupported under MIG
        used, free = _memory(nv, h)
        power = nv.query(pynvml.nvmlDeviceGetPowerUsage, h)
        temp = nv.query(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)
        clock = nv.query(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)
        throttle = nv.first(("nvmlDeviceGetCurrentClocksEventReasons", (h,)),
                            (pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, (h,)))
        procs = _processes(nv, h)
        mig: list[MigSample] = []
        mode = nv.query(pynvml.nvmlDeviceGetMigMode, h)
        if mode and mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE:
            for i in range(nv.query(pynvml.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
                m = nv.query(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
                if m is None:
                    continue
                gi = nv.query(pynvml.nvmlDeviceGetGpuInstanceId, m)
                mu, mf = _memory(nv, m)
                reserved = memory(nv, m).get("DCGM_FI_DEV_FB_RESERVED")
                if gi is not None:
                    mig.append(MigSample(int(gi), nv.query(pynvml.nvmlDeviceGetUUID, m) or "",
                                         mu, mf, reserved))
        fields = device_fields(nv, h)
    except (GpuLost, pynvml.NVMLError_GpuIsLost):
        return DeviceSample(index, lost=True)
    return DeviceSample(
        index, uuid, name, False,
        None if util is None else float(util.gpu), None if util is None else float(util.memory),
        used, free, None if power is None else power / 1000, None if temp is None else float(temp),
        None if clock is None else float(clock), None if throttle is None else int(throttle),
        procs, tuple(mig), fields)


def sample_all(nv: Nvml) -> list[DeviceSample]:
    count = nv.query(pynvml.nvmlDeviceGetCount) or 0
    return [sample_device(nv, i) for i in range(count)]
