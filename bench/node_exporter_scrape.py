"""Milliseconds one exporter scrape takes (NVML reads, XID drain, regions, /proc, detection),
on the tests' fake NVML: the fake's own cost is tiny, so this is gpugov's side of a scrape.

Node: GPUS GPUs (every other one in MIG mode with 4 instances), one process per GPU accounted
by a pod region, plus one bypassing process. Prints numbers, asserts nothing.
Run: python bench/node_exporter_scrape.py [gpus] [scrapes]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "node"))
sys.path.insert(0, str(ROOT / "tests" / "native"))
from nvml_fake import A100_80, FakeNode, build_fakes  # noqa: E402
from region_files import SlotSpec, start_ticks, write_region  # noqa: E402


def main() -> None:
    gpus = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    scrapes = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        libs = build_fakes(t / "build")
        node = FakeNode(t / "node")
        procs = [subprocess.Popen(["sleep", "600"], start_new_session=True)
                 for _ in range(gpus + 1)]
        try:
            for i in range(gpus):
                extra = [f"proc {procs[i].pid} {1 << 30}"]
                if i % 2:
                    extra = ["mig-mode 1", "gi 9 0", "gi 14 4", "gi 19 6", "gi 19 7"]
                node.gpu(A100_80, *extra)
                if not i % 2:
                    uid = f"00000000-0000-0000-0000-{i:012d}"
                    write_region(t / "regions" / f"ns_pod-{i}_{uid}" / "region", [8 << 30],
                                 [50], [SlotSpec(procs[i].pid, start_ticks(procs[i].pid),
                                                 [1 << 30])])
            node.add(f"proc 0 {procs[-1].pid} {1 << 29}")
            os.environ.update(node.write())
            from prometheus_client import generate_latest

            from gpugov.node.exporter import ExporterConfig, NodeCollector, make_registry
            from gpugov.node.nvml.library import Nvml

            nv = Nvml(str(libs.current / "libnvidia-ml.so.1"))
            reg = make_registry(NodeCollector(nv, ExporterConfig("bench", t / "regions")))
            generate_latest(reg)  # warm up
            times = []
            for _ in range(scrapes):
                t0 = time.perf_counter()
                body = generate_latest(reg)
                times.append((time.perf_counter() - t0) * 1000)
            nv.close()
        finally:
            for p in procs:
                p.kill()
                p.wait()
    times.sort()
    lines = body.decode().splitlines()
    series = sum(1 for ln in lines if ln and not ln.startswith("#"))
    print(f"gpus={gpus} regions={(gpus + 1) // 2} scrapes={scrapes} series={series}")
    print(f"scrape ms: median {statistics.median(times):.2f}  "
          f"p95 {times[int(0.95 * (len(times) - 1))]:.2f}  max {times[-1]:.2f}")


if __name__ == "__main__":
    main()
