"""Compute-quota accuracy of libgpugov on the fake driver: device share vs quota per pattern.

Builds the library, the fake driver and the test client (tests/native/native_build.py), then
for each launch pattern and quota runs the client flat out and prints the fraction of
device time the fake GPU spent on its kernels (the fake's own busy time, so a slow host
only matters if it cannot keep up with the quota). Patterns (tests/fake_cuda/drvtest.c):
- fixed: one 500 us kernel (fixed cost);
- random: one kernel with data-dependent durations 50 us-1.05 ms;
- argdep: one kernel whose argument decides its cost: 20 us, or 4 ms one launch in 8;
- rotating: a new launch shape every launch, 10 us at a shape's first launch, 2 ms after;
- periodic16: 1 ms kernels with a 10 us one every 16th launch, the same function;
- loop4: four kernels in turn (2 ms, 100 us, 500 us, 50 us), a training loop;
- multistream: 500 us kernels alternating between two streams of the device;
- multidevice: 1 ms cooperative launches over two devices from device 0's context, only
  device 1 limited (its share is printed);
- short-lived: processes that each launch 20 kernels of 2 ms and exit at once, one after
  another, sharing one region (share = device time submitted / wall time);
- first: 100 ms kernels measured from the first launch of the process.
Each cell is one window of SECONDS (default 10). Prints numbers, asserts nothing.
Run: python bench/throttle_accuracy.py [seconds=10] [library=<built from native/>] [patterns=a,b]
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "native"))
from native_build import Build, build_all, compiler  # noqa: E402

PATTERNS = ["fixed", "random", "argdep", "rotating", "periodic16", "loop4", "multistream",
            "multidevice", "short-lived", "first"]
QUOTAS = [10, 20, 50]
DRV_NAME = {"fixed": "uniform"}


def _env(build: Build, library: str | None, extra: dict[str, str]) -> dict[str, str]:
    env = build.env({"GPUGOV_LOG_LEVEL": "error", "FAKECUDA_DEVICES": "2", **extra})
    if library:
        env["LD_PRELOAD"] = library
    return env


def short_lived(build: Build, library: str | None, quota: int, seconds: float, tmp: Path) -> float:
    """Share of device time submitted by back-to-back short processes over `seconds`."""
    region = tmp / f"region-{quota}"
    region.unlink(missing_ok=True)
    env = _env(build, library, {"GPUGOV_CORE_LIMIT": str(quota),
                                "GPUGOV_SHARED_REGION": str(region)})
    t0, submitted = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        out = subprocess.run([str(build.drvtest), "procaddr", "ctx:0", "burst:20:2000"], env=env,
                             capture_output=True, text=True, timeout=120).stdout
        m = re.search(r"submitted=(\d+)", out)
        submitted += int(m.group(1)) if m else 0
    return submitted / ((time.monotonic() - t0) * 1e9)


def share(build: Build, library: str | None, pattern: str, quota: int, seconds: float,
          tmp: Path) -> float:
    if pattern == "short-lived":
        return short_lived(build, library, quota, seconds, tmp)
    limit = {"GPUGOV_CORE_LIMIT_1": str(quota)} if pattern == "multidevice" else {
        "GPUGOV_CORE_LIMIT": str(quota)}
    out = subprocess.run([str(build.drvtest), "procaddr", "ctx:0",
                          f"pattern:{DRV_NAME.get(pattern, pattern)}:{seconds}"],
                         env=_env(build, library, limit), check=True, capture_output=True,
                         text=True, timeout=seconds * 3 + 60).stdout
    m = re.search(r"pattern rc=0 util=([0-9.]+)", out)
    return float(m.group(1)) if m else float("nan")


def main(seconds: float = 10.0, library: str | None = None,
         patterns: list[str] | None = None) -> None:
    """Print one row per pattern: measured share at each quota, and the worst error."""
    if compiler() is None:
        sys.exit("needs a C compiler (cc)")
    with tempfile.TemporaryDirectory() as tmp:
        build = build_all(Path(tmp), test_hooks=False)
        head = "".join(f"{f'quota {q} %':>12}" for q in QUOTAS)
        print(f"{'pattern':<13}{head}{'worst error':>13}", flush=True)
        for pattern in patterns or PATTERNS:
            shares = [100 * share(build, library, pattern, q, seconds, Path(tmp)) for q in QUOTAS]
            worst = max(abs(s - q) for s, q in zip(shares, QUOTAS, strict=True))
            print(f"{pattern:<13}" + "".join(f"{s:>11.1f}%" for s in shares)
                  + f"{worst:>11.1f} pt", flush=True)
    print(f"device share of the fake GPU over one {seconds} s window per cell "
          "(first: from process start)")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0,
         sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None,
         sys.argv[3].split(",") if len(sys.argv) > 3 else None)
