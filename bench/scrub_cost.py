"""Cost of the node's scrub between tenants (gpugov.node.scrub): bytes zeroed and seconds.

On a real GPU (no arguments): scrubs device 0 — ALL of its free memory — a few times and
prints bytes, seconds and GiB/s; run it on an idle node. With `fake`, builds the fake driver
(tests/native/native_build.py) and scrubs its 1 GiB device of host memory instead, which
measures the mechanism (child process, chunked allocations, memsets), not a GPU.
Prints numbers, asserts nothing.
Run: python bench/scrub_cost.py [fake] [rounds=3]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "native"))

from gpugov.node.scrub import scrub_device  # noqa: E402


def main(fake: bool, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cuda_lib = None
        if fake:
            from native_build import build_all

            cuda_lib = build_all(Path(tmp), test_hooks=False).dir
        print(f"{'round':<7}{'bytes zeroed':>16}{'seconds':>10}{'GiB/s':>8}")
        for i in range(rounds):
            r = scrub_device(0, cuda_lib)
            if r.error:
                print(f"{i:<7}error: {r.error}")
                continue
            print(f"{i:<7}{r.bytes:>16}{r.seconds:>10.3f}{r.gib_per_second:>8.1f}")
    print("device 0, every free byte: " + ("the fake driver (host memory)" if fake else "real GPU"))


if __name__ == "__main__":
    args = sys.argv[1:]
    is_fake = bool(args) and args[0] == "fake"
    main(is_fake, int(args[1 if is_fake else 0]) if len(args) > (1 if is_fake else 0) else 3)
