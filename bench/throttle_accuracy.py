"""Compute-quota accuracy of libgpugov on the fake driver: device share vs quota per pattern.

Builds the library, the fake driver and the test client (tests/native/native_build.py), then
for each launch pattern and quota runs the client flat out and prints the fraction of
device time the fake GPU spent on its kernels (the fake's own busy time, so a slow host
only matters if it cannot keep up with the quota). Patterns (tests/fake_cuda/drvtest.c):
uniform (one 500 us kernel), random (one kernel with data-dependent durations 50 us-1.05 ms),
periodic16 (1 ms kernels with a 10 us one every 16th launch, the same function), loop4 (a
training-loop-like sequence of four kernels: 2 ms, 100 us, 500 us, 50 us), first (100 ms
kernels measured from the first launch of the process). Prints numbers, asserts nothing.
Run: python bench/throttle_accuracy.py [seconds=2] [library=<built from native/>]
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "native"))
from native_build import build_all, compiler  # noqa: E402

PATTERNS = ["uniform", "random", "periodic16", "loop4", "first"]
QUOTAS = [10, 20, 50]


def main(seconds: float = 2.0, library: str | None = None) -> None:
    """Print one row per pattern: measured share at each quota."""
    if compiler() is None:
        sys.exit("needs a C compiler (cc)")
    with tempfile.TemporaryDirectory() as tmp:
        build = build_all(Path(tmp), test_hooks=False)
        rows = []
        for pattern in PATTERNS:
            shares = []
            for quota in QUOTAS:
                env = build.env({"GPUGOV_CORE_LIMIT": str(quota)})
                if library:
                    env["LD_PRELOAD"] = library
                out = subprocess.run([str(build.drvtest), "procaddr", "ctx:0",
                                      f"pattern:{pattern}:{seconds}"], env=env, check=True,
                                     capture_output=True, text=True, timeout=120).stdout
                m = re.search(r"pattern rc=0 util=([0-9.]+)", out)
                shares.append(100 * float(m.group(1)) if m else float("nan"))
            rows.append((pattern, shares))
    head = "".join(f"{f'quota {q} %':>14}" for q in QUOTAS)
    print(f"{'pattern':<12}{head}")
    for pattern, shares in rows:
        print(f"{pattern:<12}" + "".join(f"{s:>13.1f}%" for s in shares))
    print(f"device share of the fake GPU over {seconds} s per cell (first: from process start)")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0,
         sys.argv[2] if len(sys.argv) > 2 else None)
