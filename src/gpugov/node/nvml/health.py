"""GPU health from NVML: XID critical errors and lost GPUs mark a device unhealthy; it is
healthy again once it answers and no critical XID arrived for `recovery_s`.

XIDs that an application causes (13 graphics exception, 31 MMU fault, 43 channel stopped, 45
preemptive cleanup, 68 video processor exception, 109 context switch timeout) say nothing about
the GPU and are ignored, as NVIDIA's device plugin does. Events are drained from an NVML event
set without blocking (`poll`), so the exporter can do it at scrape time and the agent in its
loop; no thread is needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pynvml

from gpugov.node.nvml.library import GpuLost, Nvml

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
DEFAULT_RECOVERY_S = 300.0


@dataclass
class DeviceHealth:
    healthy: bool = True
    last_xid: int = 0
    last_bad: float | None = None  # clock time of the last critical XID / lost answer
    reason: str = ""


@dataclass
class HealthTracker:
    """XID events and lost-GPU answers -> per-device health, with a recovery window."""

    nvml: Nvml
    recovery_s: float = DEFAULT_RECOVERY_S
    clock: Callable[[], float] = time.monotonic
    devices: dict[int, DeviceHealth] = field(default_factory=dict)
    _set: object | None = None
    _handles: dict[int, object] = field(default_factory=dict)
    events_supported: dict[int, bool] = field(default_factory=dict)

    def register(self) -> None:
        """Create the event set and subscribe every GPU to XID critical errors."""
        if self._set is None:
            self._set = self.nvml.query(pynvml.nvmlEventSetCreate)
        count = self.nvml.query(pynvml.nvmlDeviceGetCount) or 0
        for i in range(count):
            self.devices.setdefault(i, DeviceHealth())
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
            except pynvml.NVMLError:
                continue
            self._handles[i] = h
            if self._set is not None and i not in self.events_supported:
                try:  # returns None on success, so not through Nvml.query
                    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError,
                                                    self._set)
                    self.events_supported[i] = True
                except pynvml.NVMLError:
                    self.events_supported[i] = False  # e.g. vGPU: health from probing only
                    self.nvml.missing["nvmlDeviceRegisterEvents:not_supported"] += 1

    def close(self) -> None:
        if self._set is not None:
            self.nvml.query(pynvml.nvmlEventSetFree, self._set)
            self._set = None

    def _index_of(self, handle: object) -> int | None:
        for i, h in self._handles.items():
            if ctypes_addr(h) == ctypes_addr(handle):
                return i
        return None

    def poll(self, timeout_ms: int = 0) -> list[tuple[int, int]]:
        """Drain pending XID events and probe lost GPUs; returns the (index, xid) seen."""
        if not self.devices:
            self.register()
        seen: list[tuple[int, int]] = []
        now = self.clock()
        while self._set is not None:
            try:
                data = pynvml.nvmlEventSetWait_v2(self._set, timeout_ms)
            except pynvml.NVMLError:
                break  # NVML_ERROR_TIMEOUT: nothing pending (or events unsupported)
            timeout_ms = 0
            idx = self._index_of(data.device)
            if idx is None:
                continue
            xid = int(data.eventData)
            seen.append((idx, xid))
            dev = self.devices.setdefault(idx, DeviceHealth())
            dev.last_xid = xid
            if xid not in APPLICATION_XIDS:
                dev.healthy, dev.last_bad, dev.reason = False, now, f"XID {xid}"
        for i, dev in self.devices.items():
            lost = self._probe_lost(i)
            if lost:
                dev.healthy, dev.last_bad, dev.reason = False, now, "GPU is lost"
            elif not dev.healthy and dev.last_bad is not None and \
                    now - dev.last_bad >= self.recovery_s:
                dev.healthy, dev.reason = True, ""
        return seen

    def _probe_lost(self, index: int) -> bool:
        h = self._handles.get(index)
        try:
            if h is None:
                h = pynvml.nvmlDeviceGetHandleByIndex(index)
                self._handles[index] = h
            self.nvml.query(pynvml.nvmlDeviceGetUUID, h)
        except (GpuLost, pynvml.NVMLError_GpuIsLost):
            return True
        except pynvml.NVMLError:
            return False
        return False

    def healthy(self, index: int) -> bool:
        d = self.devices.get(index)
        return d.healthy if d else True


def ctypes_addr(handle: object) -> int:
    """Address a pynvml handle points at (handles of one device compare equal by it)."""
    import ctypes
    return ctypes.cast(handle, ctypes.c_void_p).value or 0
