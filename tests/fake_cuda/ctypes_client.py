"""A Python program reaching the driver like ctypes-based tools do: dlopen + dlsym.

Run under LD_PRELOAD=libgpugov.so with the fake driver on LD_LIBRARY_PATH; prints
one JSON object with what the program saw.
"""

from __future__ import annotations

import ctypes
import json
import sys


def main(chunk: int) -> None:
    cuda = ctypes.CDLL("libcuda.so.1")
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    out: dict[str, object] = {"init": cuda.cuInit(0)}
    ctx = ctypes.c_void_p()
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
    cuda.cuCtxSetCurrent(ctx)
    ptr = ctypes.c_ulonglong()
    allocated = 0
    while cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(chunk)) == 0:
        allocated += chunk
    out["allocated"] = allocated
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    out["meminfo"] = [free.value, total.value]
    nvml.nvmlInit_v2()
    dev = ctypes.c_void_p()
    nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
    mem = (ctypes.c_ulonglong * 3)()
    out["nvml_rc"] = nvml.nvmlDeviceGetMemoryInfo(dev, mem)
    out["nvml"] = list(mem)
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]))
