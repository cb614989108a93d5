"""Run the FGD study on every openb trace and print allocation at 100 % / 130 % per policy.

Usage: python bench/fgd_all_traces.py [--trace-dir DIR] [--seeds 42-51] [--jobs 2]
The study's artifact has 17 traces x 6 policies x 10 seeds; FGD is best on every trace.
Prints one line per trace (mean over seeds) and whether FGD is the best policy there.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpugov.placement.registry import POLICIES
from gpugov.sim.report import summarise
from gpugov.sim.study import parse_seeds, run_study
from gpugov.sim.trace import load_nodes, load_pods

DEFAULT_TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / \
    "alibaba-gpu-v2023"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    nodes = load_nodes(args.trace_dir / "openb_node_list_gpu_node.csv")
    seeds = parse_seeds(args.seeds)
    labels = [p.label for p in POLICIES.values()]
    print(f"{'trace':<28}" + "".join(f"{lab[3:]:>16}" for lab in labels) + "  FGD best  sec")
    for path in sorted(args.trace_dir.glob("openb_pod_list_*.csv")):
        t0 = time.perf_counter()
        result = run_study(nodes, load_pods(path), path.stem, list(POLICIES), seeds, 1.3,
                           args.jobs)
        rows = {r.label: r for r in summarise(result)}
        cells = "".join(f"{rows[lab].at_100[0]:>7.2f}/{rows[lab].at_end[0]:<8.2f}"
                        for lab in labels)
        best = all(rows["06-FGD"].at_100[0] >= r.at_100[0] and
                   rows["06-FGD"].at_end[0] >= r.at_end[0] for r in rows.values())
        print(f"{path.stem[15:]:<28}{cells}  {'yes' if best else 'NO':>8}"
              f"  {time.perf_counter() - t0:4.0f}", flush=True)


if __name__ == "__main__":
    main()
