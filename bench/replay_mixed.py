"""Where the time of a mixed-fleet replay goes: the built-in mixed scenario, scaled.

Usage: python bench/replay_mixed.py [--scale 1 2 4 8] [--repeat 3] [--fixed-quotas]

For each scale k the scenario's fleet has k times as many nodes per pool, its job
generator k times the arrival rate (the same 24 h; `mixed_jobs` is re-run with its seed and
its jobs copied k times under new names, shifted by a few seconds) and its queues k times
their quotas and limits: the same scenario k times over. With `--fixed-quotas` the queues
keep their 1x quotas, so at larger k most jobs wait over quota and every cycle walks that
growing backlog (cost ~ backlog x cycles). Each phase is timed in
this process (CPU time, `time.process_time`, median of `--repeat`): reading the cluster file
(`fleet_nodes`), compiling every job row (`to_jobs`, with the fleet check), and the replay
itself. Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import yaml

from gpugov.control.config import parse_config
from gpugov.control.tree import build_tree
from gpugov.model.cluster_spec import parse_cluster_yaml
from gpugov.sim.fleet import fleet_nodes
from gpugov.sim.jobs import to_jobs
from gpugov.sim.mixed_scenario import MIXED_CLUSTER, MIXED_QUEUES, SOURCE, mixed_jobs
from gpugov.sim.replay import ReplayOptions, replay


def scaled(k: int):  # type: ignore[no-untyped-def]
    data = yaml.safe_load(MIXED_CLUSTER)
    for pool in data["nodePools"]:
        pool["count"] *= k
    base = mixed_jobs()
    jobs = [dataclasses.replace(j, name=f"{j.name}-x{c}", submit=j.submit + 7 * c)
            for c in range(k) for j in base]
    return data, jobs


def scaled_config(k: int):  # type: ignore[no-untyped-def]
    """The scenario's queues with quotas and limits times k."""
    doc = yaml.safe_load(MIXED_QUEUES)
    for q in doc["queues"]:
        for key in ("quota", "limit"):
            if key in q:
                q[key] = {r: v * k for r, v in q[key].items()}
    return parse_config(doc, SOURCE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fixed-quotas", action="store_true",
                    help="keep the 1x queue quotas at every scale")
    args = ap.parse_args()
    print("scale  nodes   GPUs  jobs  fleet_s  compile_s  replay_s  cycles  s/job_ms  vs_1x")
    base = None
    for k in args.scale:
        data, specs = scaled(k)
        cfg = scaled_config(1 if args.fixed_quotas else k)
        times: dict[str, list[float]] = {"fleet": [], "compile": [], "replay": []}
        cycles = 0
        nodes = []
        for _ in range(args.repeat):
            t = time.process_time()
            nodes = fleet_nodes(parse_cluster_yaml(data, SOURCE, True), SOURCE)
            times["fleet"].append(time.process_time() - t)
            t = time.process_time()
            to_jobs(specs, cfg, build_tree(cfg), SOURCE, nodes)
            times["compile"].append(time.process_time() - t)
            t = time.process_time()
            res = replay(cfg, nodes, specs, ReplayOptions(progress=False), SOURCE)
            times["replay"].append(time.process_time() - t)
            cycles = res.cycles
        gpus = sum(n.gpu_count for n in nodes)
        med = {key: statistics.median(v) for key, v in times.items()}
        per_job = med["replay"] / len(specs)
        base = base or per_job
        print(f"{k:>5}  {len(nodes):>5}  {gpus:>5}  {len(specs):>4}  {med['fleet']:>7.3f}  "
              f"{med['compile']:>9.3f}  {med['replay']:>8.2f}  {cycles:>6}  "
              f"{per_job * 1000:>8.2f}  {per_job / base:>5.2f}")


if __name__ == "__main__":
    main()
