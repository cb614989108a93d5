"""Time one FGD-study experiment per policy (default trace, tune 1.3, one seed, one core).

Usage: python bench/bench_fgd_experiment.py [--trace-dir DIR] [--seed 42] [--repeat 3]
                                            [--both-paths]
Prints seconds (best of --repeat) and pods/s per policy. The study's Go simulator takes about
10 minutes per experiment on 2 vCPUs. `--both-paths` also times each policy with FGD's C path
switched off (GPUGOV_PLACEMENT_NATIVE=0), runs alternated, in a last column.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from gpugov.placement.fragmentation import TypicalPods
from gpugov.placement.registry import POLICIES
from gpugov.sim.experiment import run_experiment
from gpugov.sim.trace import load_nodes, load_pods

DEFAULT_TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / \
    "alibaba-gpu-v2023"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--workload", default="openb_pod_list_default")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--both-paths", action="store_true",
                    help="also time each policy with FGD's C path off, runs alternated")
    args = ap.parse_args()
    nodes = load_nodes(args.trace_dir / "openb_node_list_gpu_node.csv")
    pods = load_pods(args.trace_dir / f"{args.workload}.csv")
    typical = TypicalPods.from_requests(pods)
    print(f"{args.workload}: {len(nodes)} nodes, {len(pods)} trace pods, tune 1.3, "
          f"seed {args.seed}, best of {args.repeat}")
    print(f"{'policy':<16}{'seconds':>10}{'pods/s':>10}{'pods':>8}{'alloc%':>8}"
          + (f"{'C off s':>10}" if args.both_paths else ""))
    for name in POLICIES:
        best, result, best_off = float("inf"), None, float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = run_experiment(nodes, pods, name, args.seed, 1.3, typical)
            best = min(best, time.perf_counter() - t0)
            if args.both_paths:
                os.environ["GPUGOV_PLACEMENT_NATIVE"] = "0"
                t0 = time.perf_counter()
                run_experiment(nodes, pods, name, args.seed, 1.3, typical)
                best_off = min(best_off, time.perf_counter() - t0)
                del os.environ["GPUGOV_PLACEMENT_NATIVE"]
        assert result is not None
        alloc = 100 * result.used_milli[-1] / (1000 * result.total_gpus)
        print(f"{result.label:<16}{best:>10.2f}{result.pods / best:>10.0f}{result.pods:>8}"
              f"{alloc:>8.2f}" + (f"{best_off:>10.2f}" if args.both_paths else ""))


if __name__ == "__main__":
    main()
