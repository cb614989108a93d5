"""DCGM's profiling fields (`DCGM_FI_PROF_*`) from NVML's GPM API (Hopper and later).

GPM metrics are averages between two samples of one GPU (or one MIG GPU instance). The sampler
keeps each target's sample of the previous scrape and reports the metrics between it and the
new one, so a target has values from its second scrape on and nothing is slept for. A GPU whose
driver says it lacks GPM (`nvmlGpmQueryDeviceSupport`: isSupportedDevice 0 on Volta/Ampere, or
an older driver without the functions) gets no `DCGM_FI_PROF_*` series: those need DCGM's own
profiling module there (docs/observability.md).
"""

from __future__ import annotations

import pynvml

from gpugov.node.nvml.library import Nvml

MIB = 1 << 20
# DCGM field -> (NVML GPM metric id, factor from NVML's unit to DCGM's)
GPM_FIELDS: dict[str, tuple[int, float]] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (1, 0.01),  # NVML_GPM_METRIC_GRAPHICS_UTIL, % -> ratio
    "DCGM_FI_PROF_SM_ACTIVE": (2, 0.01),  # SM_UTIL
    "DCGM_FI_PROF_SM_OCCUPANCY": (3, 0.01),  # SM_OCCUPANCY
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (5, 0.01),  # ANY_TENSOR_UTIL
    "DCGM_FI_PROF_DRAM_ACTIVE": (10, 0.01),  # DRAM_BW_UTIL
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": (11, 0.01),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": (12, 0.01),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": (13, 0.01),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (20, MIB),  # PCIE_TX_PER_SEC, MiB/s -> bytes/s
    "DCGM_FI_PROF_PCIE_RX_BYTES": (21, MIB),
}
Target = tuple[str, int | None]  # (GPU UUID, GPU instance id or None for the whole GPU)


class GpmSampler:
    """One GPM sample per target kept between scrapes; `read` gives the fields since the last."""

    def __init__(self, nv: Nvml) -> None:
        self.nv = nv
        self._prev: dict[Target, object] = {}
        self._supported: dict[str, bool] = {}

    def supported(self, handle: object, uuid: str) -> bool:
        if uuid not in self._supported:
            sup = self.nv.query("nvmlGpmQueryDeviceSupport", handle)
            self._supported[uuid] = bool(sup is not None and sup.isSupportedDevice)
        return self._supported[uuid]

    def read(self, handle: object, uuid: str, gi: int | None = None) -> dict[str, float]:
        """DCGM field -> value for the GPU (`gi` None) or one of its GPU instances."""
        if not self.supported(handle, uuid):
            return {}
        new = self.nv.query("nvmlGpmSampleAlloc")
        if new is None:
            return {}
        got = (self.nv.query("nvmlGpmSampleGet", handle, new) if gi is None
               else self.nv.query("nvmlGpmMigSampleGet", handle, gi, new))
        if got is None:
            self.nv.query("nvmlGpmSampleFree", new)
            return {}
        prev = self._prev.pop((uuid, gi), None)
        self._prev[(uuid, gi)] = new
        if prev is None:
            return {}
        try:
            return self._metrics(prev, new, gi is not None)
        finally:
            self.nv.query("nvmlGpmSampleFree", prev)

    def _metrics(self, a: object, b: object, mig: bool) -> dict[str, float]:
        fields = {f: v for f, v in GPM_FIELDS.items() if not (mig and v[0] in (20, 21))}
        req = pynvml.c_nvmlGpmMetricsGet_t()
        req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(fields)
        req.sample1, req.sample2 = a, b
        for i, (mid, _) in enumerate(fields.values()):
            req.metrics[i].metricId = mid
        if self.nv.query("nvmlGpmMetricsGet", req) is None:
            return {}
        out = {}
        for i, (name, (_, factor)) in enumerate(fields.items()):
            m = req.metrics[i]
            if m.nvmlReturn == pynvml.NVML_SUCCESS:
                out[name] = m.value * factor
        return out

    def forget(self, keep: set[Target]) -> None:
        """Free the samples of targets gone since (a GPU lost, a MIG instance destroyed)."""
        for t in [t for t in self._prev if t not in keep]:
            self.nv.query("nvmlGpmSampleFree", self._prev.pop(t))

    def close(self) -> None:
        self.forget(set())
