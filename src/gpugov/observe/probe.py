"""Probe workloads for `gpugov verify`, run in a child process through the CUDA driver API.

`python -m gpugov.observe.probe info|memory|compute|leave|peek ...` loads `libcuda.so.1` and
`libnvidia-ml.so.1` with ctypes (no CUDA toolkit), does one thing a container would do, and
prints JSON lines with what it saw. The parent (`verify.py`) decides pass/fail; the probe
never judges. The enforcement library, when tested, is preloaded into this process.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from ctypes import byref, c_int, c_size_t, c_uint, c_uint64, c_ulonglong, c_void_p
from typing import Any

CUDA_ERROR_OUT_OF_MEMORY = 2
PATTERN = 0xA5
#: a kernel that spins for a given number of clock cycles (real GPUs: JIT-compiled by the
#: driver from PTX, so no toolkit is needed)
SPIN_PTX = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 cycles)
{
  .reg .pred p;
  .reg .u64 start, now, target, c;
  ld.param.u64 c, [cycles];
  mov.u64 start, %clock64;
  add.u64 target, start, c;
LOOP:
  mov.u64 now, %clock64;
  setp.lt.u64 p, now, target;
  @p bra LOOP;
  ret;
}
\x00"""


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


class Driver:
    """The few driver calls the probes need; every call returns the CUresult."""

    def __init__(self) -> None:
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.ctx = c_void_p()

    def init(self) -> int:
        rc = self.cuda.cuInit(0)
        if rc:
            return rc
        rc = self.cuda.cuDevicePrimaryCtxRetain(byref(self.ctx), 0)
        return rc or self.cuda.cuCtxSetCurrent(self.ctx)

    def alloc(self, size: int) -> tuple[int, int]:
        ptr = c_ulonglong()
        rc = self.cuda.cuMemAlloc_v2(byref(ptr), c_size_t(size))
        return rc, ptr.value

    def free(self, ptr: int) -> int:
        return self.cuda.cuMemFree_v2(c_ulonglong(ptr))

    def mem_info(self) -> tuple[int, int, int]:
        free, total = c_size_t(), c_size_t()
        rc = self.cuda.cuMemGetInfo_v2(byref(free), byref(total))
        return rc, free.value, total.value

    def total_mem(self) -> tuple[int, int]:
        total = c_size_t()
        rc = self.cuda.cuDeviceTotalMem_v2(byref(total), c_int(0))
        return rc, total.value


def nvml_memory() -> dict[str, object]:
    """NVML's view of device 0 (total, used), or why it is not available. A function this
    NVML lacks (an older or minimal one) degrades the answer, never ends the probe."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        return {"error": f"libnvidia-ml.so.1 not loadable: {e}"}
    for name in ("nvmlInit_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetMemoryInfo",
                 "nvmlShutdown"):
        if not hasattr(nvml, name):
            return {"error": f"this NVML has no {name}"}
    if nvml.nvmlInit_v2():
        return {"error": "nvmlInit_v2 failed"}
    dev = c_void_p()
    rc = nvml.nvmlDeviceGetHandleByIndex_v2(c_uint(0), byref(dev))
    mem = (c_ulonglong * 3)()
    rc = rc or nvml.nvmlDeviceGetMemoryInfo(dev, mem)
    out: dict[str, object] = {"rc": rc, "total": mem[0], "free": mem[1], "used": mem[2]}
    missing = [n for n in ("nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
                           "nvmlDeviceGetMigDeviceHandleByIndex") if not hasattr(nvml, n)]
    if missing:
        out["mig_missing"] = missing
        nvml.nvmlShutdown()
        return out
    cur, pend = c_uint(), c_uint()
    mig_rc = nvml.nvmlDeviceGetMigMode(dev, byref(cur), byref(pend))
    out["mig_rc"], out["mig_mode"] = mig_rc, cur.value if mig_rc == 0 else None
    if mig_rc == 0 and cur.value == 1:
        count = c_uint()
        sizes = []
        if nvml.nvmlDeviceGetMaxMigDeviceCount(dev, byref(count)) == 0:
            for i in range(count.value):
                mig = c_void_p()
                if nvml.nvmlDeviceGetMigDeviceHandleByIndex(dev, c_uint(i), byref(mig)) == 0:
                    m = (c_ulonglong * 3)()
                    if nvml.nvmlDeviceGetMemoryInfo(mig, m) == 0:
                        sizes.append(m[0])
        out["mig_instance_bytes"] = sizes
    nvml.nvmlShutdown()
    return out


def info() -> None:
    """Run without the library: the card as the driver really reports it."""
    d = Driver()
    rc = d.init()
    if rc:
        emit(step="info", init_rc=rc)
        return
    total_rc, total = d.total_mem()
    emit(step="info", init_rc=0, total_rc=total_rc, total=total,
         fake=hasattr(d.cuda, "fakegpu_make_function"), nvml=nvml_memory())


def memory(limit: int) -> None:
    """Memory view, a held allocation (for the region check), the cap, and scrub."""
    d = Driver()
    rc = d.init()
    emit(step="init", rc=rc)
    if rc:
        return
    info_rc, free, total = d.mem_info()
    total_rc, dev_total = d.total_mem()
    emit(step="view", rc=info_rc, free=free, total=total, device_total_rc=total_rc,
         device_total=dev_total, nvml=nvml_memory())
    held = max(1 << 20, (limit // 4) & ~((1 << 20) - 1))
    rc, ptr = d.alloc(held)
    emit(step="hold", rc=rc, bytes=held if rc == 0 else 0)
    sys.stdin.readline()  # the parent reads the accounting region now
    if rc == 0:
        d.free(ptr)
    chunk = max(1 << 20, limit // 16)
    ptrs, allocated, refusal = [], 0, None
    while allocated <= limit + chunk:  # never walk a real card far past the cap
        rc, ptr = d.alloc(chunk)
        if rc:
            refusal = rc
            break
        ptrs.append(ptr)
        allocated += chunk
    for p in ptrs:
        d.free(p)
    emit(step="cap", chunk=chunk, allocated=allocated, refusal=refusal)
    size = 1 << 20
    rc, ptr = d.alloc(size)
    if rc:
        emit(step="scrub", rc=rc)
        return
    d.cuda.cuMemcpyHtoD_v2(c_ulonglong(ptr), ctypes.create_string_buffer(bytes([PATTERN]) * size),
                           c_size_t(size))
    d.free(ptr)
    reused, stale, tries = False, 0, []
    for _ in range(8):  # the allocator usually hands the same pages back at once
        rc, again = d.alloc(size)
        if rc:
            break
        buf = (ctypes.c_ubyte * size)()
        d.cuda.cuMemcpyDtoH_v2(buf, c_ulonglong(again), c_size_t(size))
        stale = max(stale, bytes(buf).count(PATTERN))
        reused = reused or again == ptr
        tries.append(again)
    for p in tries:
        d.free(p)
    emit(step="scrub", rc=0, reused=reused, stale_bytes=stale, size=size)


def leave(size: int) -> None:
    """A tenant process that writes a pattern into `size` bytes and exits without freeing
    them (as a crash would): the driver releases them, gpugov's library sees no free."""
    d = Driver()
    rc = d.init()
    ptr = 0
    if not rc:
        rc, ptr = d.alloc(size)
    if not rc:
        rc = d.cuda.cuMemsetD8_v2(c_ulonglong(ptr), ctypes.c_ubyte(PATTERN), c_size_t(size))
        rc = rc or d.cuda.cuCtxSynchronize()
    emit(step="leave", rc=rc, size=size)


def peek(size: int) -> None:
    """The next tenant: allocates `size` bytes and counts the previous one's pattern in them."""
    d = Driver()
    rc = d.init()
    if rc:
        emit(step="peek", rc=rc)
        return
    rc, ptr = d.alloc(size)
    if rc:
        emit(step="peek", rc=rc)
        return
    buf = (ctypes.c_ubyte * size)()
    rc = d.cuda.cuMemcpyDtoH_v2(buf, c_ulonglong(ptr), c_size_t(size))
    emit(step="peek", rc=rc, size=size, stale_bytes=bytes(buf).count(PATTERN))
    d.free(ptr)


def _kernel(cuda: ctypes.CDLL) -> tuple[int, c_void_p, Any, str]:
    """A kernel of fixed duration: the fake driver's, or the PTX spin kernel."""
    if hasattr(cuda, "fakegpu_make_function"):  # the fake driver: kernels of a set duration
        cuda.fakegpu_make_function.restype = c_void_p
        return 0, c_void_p(cuda.fakegpu_make_function(c_uint64(500_000))), None, ""
    module, func = c_void_p(), c_void_p()
    rc = cuda.cuModuleLoadData(byref(module), SPIN_PTX)
    rc = rc or cuda.cuModuleGetFunction(byref(func), module, b"spin")
    cycles = c_uint64(1_000_000)
    params = (c_void_p * 1)(ctypes.cast(byref(cycles), c_void_p))
    params._keep = cycles  # type: ignore[attr-defined]  # keep the argument alive
    return rc, func, params, "cannot load the spin kernel (PTX JIT)" if rc else ""


def calibrate() -> None:
    """Run without the library: how long one kernel takes on the device (events)."""
    d = Driver()
    rc = d.init()
    if rc:
        emit(step="calibrate", rc=rc, error=f"cuInit/context -> {rc}")
        return
    cuda = d.cuda
    rc, func, params, error = _kernel(cuda)
    if rc:
        emit(step="calibrate", rc=rc, error=error)
        return
    start_ev, end_ev, ms = c_void_p(), c_void_p(), ctypes.c_float()
    cuda.cuEventCreate(byref(start_ev), 0)
    cuda.cuEventCreate(byref(end_ev), 0)
    cuda.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, None, params, None)  # warm-up
    cuda.cuCtxSynchronize()
    n = 10
    cuda.cuEventRecord(start_ev, None)
    for _ in range(n):
        rc = rc or cuda.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, None, params, None)
    cuda.cuEventRecord(end_ev, None)
    cuda.cuEventSynchronize(end_ev)
    cuda.cuEventElapsedTime(byref(ms), start_ev, end_ev)
    emit(step="calibrate", rc=rc, kernel_s=ms.value / 1000.0 / n)


def compute(seconds: float, kernel_s: float) -> None:
    """Launch as fast as allowed for `seconds`; busy = launches x kernel time / wall time."""
    d = Driver()
    rc = d.init()
    emit(step="init", rc=rc)
    if rc:
        return
    cuda = d.cuda
    rc, func, params, error = _kernel(cuda)
    if rc:
        emit(step="compute", rc=rc, error=error)
        return
    launches, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        rc = cuda.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, None, params, None)
        if rc:
            break
        launches += 1
    cuda.cuCtxSynchronize()
    wall = time.monotonic() - t0
    emit(step="compute", rc=rc, kernel_s=kernel_s, launches=launches, wall_s=wall,
         busy=launches * kernel_s / wall)


def main(argv: list[str]) -> None:
    try:
        if argv[0] == "info":
            info()
        elif argv[0] == "memory":
            memory(int(argv[1]))
        elif argv[0] == "leave":
            leave(int(argv[1]))
        elif argv[0] == "peek":
            peek(int(argv[1]))
        elif argv[0] == "calibrate":
            calibrate()
        elif argv[0] == "compute":
            compute(float(argv[1]), float(argv[2]))
        else:
            raise SystemExit(f"unknown probe {argv[0]!r}")
    except OSError as e:  # libcuda.so.1 not loadable
        emit(step="load", error=str(e))


if __name__ == "__main__":
    main(sys.argv[1:])
