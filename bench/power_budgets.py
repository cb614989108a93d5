"""The power-constrained fleet (`gpugov replay --scenario power`, sim/power_scenario.py)
replayed under gpugov, FGD and BestFit, with the racks' budgets and without them: what the
constraint costs and that it holds.

    PYTHONPATH=src python3 bench/power_budgets.py [--jobs 600] [--hours 24]

Columns: mean allocated GPUs, p99 and max rack power (admitted, % of the panel; the worst
rack; without budgets, what the same racks would draw), energy (kWh, expected draw of the
whole fleet), perf per watt (allocated GPU-seconds per kWh), job completion rate, P50
pending -> running (s), wall time of the replay (s; noisy on a shared machine: compare
within one run).
"""

from __future__ import annotations

import argparse
import time

from gpugov.sim.power_scenario import PANELS, power_config, power_jobs, power_nodes
from gpugov.sim.replay import ReplayOptions, replay
from gpugov.sim.replay_report import summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=600)
    ap.add_argument("--hours", type=float, default=24.0)
    args = ap.parse_args()
    jobs = power_jobs(jobs=args.jobs, hours=args.hours)
    print(f"{'policy':8} {'budgets':7} {'alloc':>6} {'p99%':>6} {'max%':>6} {'kWh':>8} "
          f"{'GPUs/kWh':>9} {'done':>5} {'p50wait':>8} {'wall':>6}")
    for policy in ("gpugov", "fgd", "bestfit"):
        for budgets in (True, False):
            t0 = time.perf_counter()
            res = replay(power_config(), power_nodes(budgets), jobs,
                         ReplayOptions(policy=policy, progress=False))
            wall = time.perf_counter() - t0
            s = summary(res)
            p = s["power"]
            doms = p["domains"]
            if not doms:  # unbudgeted: the same racks' draw, as a share of the same panels
                doms = [{"admitted_p99_pct_of_panel": 100 * r["admitted_p99_w"]
                         / PANELS[r["rack"]], "admitted_max_pct_of_panel": 100
                         * r["admitted_max_w"] / PANELS[r["rack"]]} for r in p["racks"]]
            p99 = max(d["admitted_p99_pct_of_panel"] for d in doms)
            top = max(d["admitted_max_pct_of_panel"] for d in doms)
            print(f"{policy:8} {'yes' if budgets else 'no':7} {s['gpu_allocated_mean']:6.1f} "
                  f"{p99:6.1f} {top:6.1f} {p['fleet_energy_kwh']:8.0f} "
                  f"{p['gpu_seconds_per_kwh']:9.0f} {s['job_completion_rate']:5.2f} "
                  f"{s['wait_p50_s']:8.0f} {wall:6.1f}")


if __name__ == "__main__":
    main()
