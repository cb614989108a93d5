"""Scrub a GPU (or a MIG instance) between tenants, from the node, not from the tenant.

Memory a process leaves behind when it exits, crashes, destroys its context or resets its
primary context is released by the driver without gpugov's library seeing a free, and
whole-GPU and MIG pods run without the library at all. So the node agent zeroes a device's
memory itself before the device (or MIG instance) goes to a pod of another tenant: a child
process takes every byte the driver will give (`cuMemAlloc_v2` in shrinking chunks), zeroes
it (`cuMemsetD8_v2`), synchronises and frees it. The child runs without the enforcement
library (no limits, nothing charged) and is killed if it hangs; the agent holds no CUDA
context of its own.

`python -m gpugov.node.scrub <index | GPU-uuid | MIG-uuid>` runs one scrub and prints one JSON
line: bytes zeroed, the free bytes the driver reported first, seconds, and the CUDA error if
any. A UUID is scrubbed through `CUDA_VISIBLE_DEVICES=<uuid>`, which is how a MIG instance
is addressed.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from ctypes import byref, c_int, c_size_t, c_ulonglong, c_void_p
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1 << 20
FIRST_CHUNK = 256 * MIB
SMALLEST_CHUNK = 2 * MIB
MAX_CHUNKS = 1 << 16  # bound on allocations held at once (16 TiB at the first chunk size)


@dataclass(frozen=True)
class ScrubResult:
    device: str
    bytes: int = 0  # zeroed
    free_before: int = 0  # what the driver reported free before the scrub
    seconds: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.bytes > 0

    @property
    def gib_per_second(self) -> float:
        return self.bytes / (1 << 30) / self.seconds if self.seconds > 0 else 0.0


def _zero_all(cuda: ctypes.CDLL) -> dict[str, object]:
    """In the child: take, zero and free every byte the driver hands out on device 0."""
    t0 = time.monotonic()
    ctx = c_void_p()
    rc = cuda.cuInit(0)
    rc = rc or cuda.cuDevicePrimaryCtxRetain(byref(ctx), c_int(0))
    rc = rc or cuda.cuCtxSetCurrent(ctx)
    if rc:
        return {"error": f"cannot open a context on the device (CUDA error {rc})"}
    free, total = c_size_t(), c_size_t()
    rc = cuda.cuMemGetInfo_v2(byref(free), byref(total))
    if rc:
        return {"error": f"cuMemGetInfo failed (CUDA error {rc})"}
    ptrs: list[int] = []
    zeroed, chunk, error = 0, FIRST_CHUNK, ""
    while chunk >= SMALLEST_CHUNK and len(ptrs) < MAX_CHUNKS:
        p = c_ulonglong()
        rc = cuda.cuMemAlloc_v2(byref(p), c_size_t(chunk))
        if rc:
            chunk //= 2  # out of memory at this size: try smaller pieces of what is left
            continue
        ptrs.append(p.value)
        rc = cuda.cuMemsetD8_v2(p, ctypes.c_ubyte(0), c_size_t(chunk))
        if rc:
            error = f"cuMemsetD8 failed (CUDA error {rc})"
            break
        zeroed += chunk
    rc = cuda.cuCtxSynchronize()
    if rc and not error:
        error = f"cuCtxSynchronize failed (CUDA error {rc})"
    for p in ptrs:
        cuda.cuMemFree_v2(c_ulonglong(p))
    cuda.cuDevicePrimaryCtxRelease_v2(c_int(0))
    return {"bytes": zeroed, "free_before": free.value, "seconds": time.monotonic() - t0,
            "error": error}


def _child_env(device: str, cuda_lib: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUGOV_") and k != "LD_PRELOAD"}
    env["CUDA_VISIBLE_DEVICES"] = device
    if cuda_lib is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(cuda_lib), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), *filter(None, [env.get("PYTHONPATH")])])
    return env


def scrub_device(device: str | int, cuda_lib: Path | None = None,
                 timeout: float = 300.0) -> ScrubResult:
    """Zero every free byte of `device` (an index, a GPU UUID or a MIG UUID) in a child
    process; never raises for driver trouble: the result carries the error."""
    dev = str(device)
    try:
        p = subprocess.run([sys.executable, "-m", "gpugov.node.scrub", dev], capture_output=True,
                           text=True, timeout=timeout, env=_child_env(dev, cuda_lib))
    except subprocess.TimeoutExpired:
        return ScrubResult(dev, error=f"the scrub did not finish within {timeout:.0f} s")
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return ScrubResult(dev, error=f"the scrub gave no answer (exit {p.returncode}): "
                                      f"{p.stderr.strip()[-300:]}")
    return ScrubResult(dev, int(out.get("bytes", 0)), int(out.get("free_before", 0)),
                       float(out.get("seconds", 0.0)), str(out.get("error", "")))


@dataclass
class Handover:
    """Which tenant last had each device, so a device is scrubbed before another tenant gets
    it (and not between two pods of the same tenant). Kept in a JSON file so an agent restart
    does not forget that a device still holds a tenant's data: an unknown previous tenant
    counts as another tenant."""

    state: Path
    last: dict[str, str] = field(default_factory=dict)  # device UUID -> tenant

    @classmethod
    def load(cls, state: Path) -> Handover:
        try:
            raw = json.loads(state.read_text())
            last = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        except (OSError, ValueError):
            last = {}
        return cls(state, last)

    def needs_scrub(self, uuid: str, tenant: str) -> bool:
        return self.last.get(uuid) != tenant

    def before_handover(self, uuid: str, tenant: str, cuda_lib: Path | None = None,
                        address: str | int | None = None) -> ScrubResult | None:
        """Scrub `uuid` unless `tenant` had it last; None when no scrub was needed. The device
        is recorded as the tenant's only after a successful scrub. `address`: how the driver
        is told which device (an index, or the UUID itself when None)."""
        if not self.needs_scrub(uuid, tenant):
            return None
        result = scrub_device(uuid if address is None else address, cuda_lib)
        if result.ok:
            self.last[uuid] = tenant
            tmp = self.state.with_name(f".{self.state.name}.tmp{os.getpid()}")
            tmp.write_text(json.dumps(self.last, sort_keys=True))
            os.replace(tmp, self.state)
        return result


def handover_for(state_dir: Path, setting: str | None = None) -> Handover | None:
    """The device plugin's handover record, or None when scrubbing is off.

    `setting` (default: env `GPUGOV_SCRUB`): `on` always scrubs (a node without a loadable
    CUDA driver then refuses whole-GPU and MIG handovers: fail closed), `off` never does,
    `auto` (the default) scrubs where `libcuda.so.1` loads — every GPU node — and says once
    that it is off elsewhere (a CPU-only test or dev node)."""
    import logging

    mode = (setting or os.environ.get("GPUGOV_SCRUB") or "auto").strip().lower()
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"GPUGOV_SCRUB={mode!r}; allowed: auto, on, off")
    if mode == "off":
        return None
    if mode == "auto":
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:
            logging.getLogger("gpugov.scrub").warning(
                "no CUDA driver (libcuda.so.1) here: whole GPUs and MIG instances are handed "
                "to another tenant without a scrub (GPUGOV_SCRUB=on refuses instead)")
            return None
    state_dir.mkdir(parents=True, exist_ok=True)
    return Handover.load(state_dir / "handover.json")


def main(argv: list[str]) -> None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        print(json.dumps({"error": f"libcuda.so.1 not loadable: {e}"}), flush=True)
        return
    out = _zero_all(cuda)
    out["device"] = argv[0] if argv else ""
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

