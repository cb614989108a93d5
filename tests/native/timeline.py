"""The fake driver's shared timeline (FAKECUDA_SHARED_TIMELINE) from the outside: each
process's device time as the fake accounts it, for tests and benches of several processes
sharing one device (tests/fake_cuda/fake_cuda.c)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import time
from pathlib import Path

from native_build import Build


class Timeline:
    """Reads per-client device time (FAKECUDA_CLIENT) from one shared timeline file."""

    def __init__(self, build: Build, path: Path) -> None:
        os.environ["FAKECUDA_SHARED_TIMELINE"] = str(path)
        copy = path.parent / f"libcuda-reader-{path.name}.so"  # a fresh load reads this file
        shutil.copy(build.dir / "libcuda.so.1", copy)
        self.lib = ctypes.CDLL(str(copy), mode=ctypes.RTLD_LOCAL)
        f = self.lib.fakegpu_timeline_clients
        f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                      ctypes.c_void_p]
        w = self.lib.fakegpu_timeline_waited
        w.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        self.path = path
        self.clients = (ctypes.c_uint32 * 64)()
        self.done = (ctypes.c_uint64 * 64)()
        self.sample()  # the fake reads its environment at its first call
        del os.environ["FAKECUDA_SHARED_TIMELINE"]

    def sample(self, device: int = 0) -> tuple[int, dict[int, int]]:
        """(now in ns, device time executed so far per client in ns)."""
        now = ctypes.c_uint64()
        n = self.lib.fakegpu_timeline_clients(device, self.clients, self.done, 64,
                                              ctypes.byref(now))
        out: dict[int, int] = {}
        for i in range(max(n, 0)):
            out[self.clients[i]] = out.get(self.clients[i], 0) + self.done[i]
        return now.value, out

    def waited(self, device: int = 0) -> dict[int, int]:
        """Per client: how long (ns) other clients' work ran while it had work queued."""
        waited = (ctypes.c_uint64 * 64)()
        n = self.lib.fakegpu_timeline_waited(device, self.clients, waited, 64)
        out: dict[int, int] = {}
        for i in range(max(n, 0)):
            out[self.clients[i]] = out.get(self.clients[i], 0) + waited[i]
        return out

    def windows(self, seconds: float, window: float) -> list[tuple[float, dict[int, float]]]:
        """Per window: the device's utilisation and each client's share of the window."""
        out = []
        prev = self.sample()
        end = time.monotonic() + seconds
        while time.monotonic() < end - window / 2:
            time.sleep(window)
            cur = self.sample()
            dt = cur[0] - prev[0]
            shares = {c: (cur[1][c] - prev[1].get(c, 0)) / dt for c in cur[1]}
            out.append((sum(shares.values()), shares))
            prev = cur
        return out

    def pod(self, build: Build, client: int, load: str, env: dict[str, str],
            library: bool = True) -> subprocess.Popen[str]:
        """Starts one process (drvtest `load:…`) on device 0 of this timeline."""
        full = {"FAKECUDA_SHARED_TIMELINE": str(self.path), "FAKECUDA_CLIENT": str(client),
                "GPUGOV_LOG_LEVEL": "error", **env}
        return subprocess.Popen([str(build.drvtest), "procaddr", "ctx:0", load],
                                env=build.env(full, preload=library), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
