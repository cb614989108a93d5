"""One scheduling cycle at scale: 5,000 nodes x 8 GPUs, up to 50,000 pending pods in 200 leaf
queues (20 orgs x 10 teams). Prints cycle time and pods placed per second for several queue
depths, so growth with depth is visible (`cpu_s`: the process's CPU time for the cycle, steadier
than wall time on a loaded machine). A benchmark: it prints numbers, asserts nothing.

    python bench/control_cycle.py [--policy fgd] [--depths 5000,20000,50000] [--gpu-memory]

--gpu-memory: nodes carry 80 GiB cards and the sharing shapes also name GPU memory
(`GPU_MEMORY_MIB`), so the filter and the device choice check both dimensions.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gpugov.control.config import parse_config
from gpugov.control.cycle import new_control_plane
from gpugov.control.workload import Job
from gpugov.model.cluster import NodeSpec
from gpugov.model.request import PodRequest

SHAPES = [  # (gpu_count, gpu_milli, cpu_milli, memory_mib, weight)
    (1, 1000, 8000, 32768, 0.50), (1, 500, 4000, 16384, 0.15), (1, 250, 2000, 8192, 0.15),
    (2, 1000, 16000, 65536, 0.10), (4, 1000, 32000, 131072, 0.05),
    (8, 1000, 64000, 262144, 0.05),
]

#: GPU memory per device named by the sharing shapes under --gpu-memory (by gpu_milli)
GPU_MEMORY_MIB = {500: 40 * 1024, 250: 20 * 1024}


def config(orgs: int = 20, teams: int = 10, gpus: int = 40_000) -> dict:
    queues = []
    per_org = gpus // orgs
    for o in range(orgs):
        queues.append({"name": f"org{o}", "quota": {"gpu": per_org}, "weight": 1 + o % 3})
        for t in range(teams):
            queues.append({"name": f"org{o}-t{t}", "parent": f"org{o}",
                           "quota": {"gpu": per_org // teams}, "weight": 1 + t % 2})
    return {"queues": queues, "priorityClasses": [
        {"name": "high", "value": 1000, "preemptible": True},
        {"name": "low", "value": 10, "preemptible": True}]}


def run(depth: int, policy: str, seed: int = 0, gpu_memory: bool = False
        ) -> tuple[float, int, int]:
    rng = np.random.default_rng(seed)
    cfg = parse_config(config())
    model = "A100-SXM4-80GB" if gpu_memory else "A100"
    nodes = [NodeSpec(f"n{i:05d}", 128_000, 1_048_576, 8, model) for i in range(5000)]
    p = np.array([s[4] for s in SHAPES])
    kinds = rng.choice(len(SHAPES), size=depth, p=p / p.sum())
    leaves = rng.integers(0, 200, size=depth)
    pods = [PodRequest(f"p{i}", SHAPES[k][2], SHAPES[k][3], SHAPES[k][0], SHAPES[k][1], (),
                       GPU_MEMORY_MIB.get(SHAPES[k][1], 0) if gpu_memory else 0)
            for i, k in enumerate(kinds)]
    cp = new_control_plane(cfg, nodes, policy=policy, seed=seed, workload=pods)
    leaf_ids = [i for i, leaf in enumerate(cp.tree.is_leaf) if leaf]
    for i, pod in enumerate(pods):
        cls = cfg.priority_class("high" if i % 4 == 0 else "low")
        cp.submit(Job(pod.name, leaf_ids[leaves[i]], cls, float(i), 1, pod))
    t0, c0 = time.perf_counter(), time.process_time()
    result = cp.cycle(float(depth))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    return elapsed, cpu, len(result.started), result.considered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--depths", default="5000,20000,50000")
    ap.add_argument("--gpu-memory", action="store_true",
                    help="sharing pods also name GPU memory (80 GiB cards)")
    a = ap.parse_args()
    print(f"policy={a.policy} nodes=5000x8 GPUs leaf queues=200 gpu-memory={a.gpu_memory}")
    print(f"{'pending':>8} {'cycle_s':>8} {'cpu_s':>7} {'placed':>7} {'considered':>10} "
          f"{'pods/s':>8} {'us/pending':>10}")
    for depth in (int(d) for d in a.depths.split(",")):
        elapsed, cpu, placed, considered = run(depth, a.policy, gpu_memory=a.gpu_memory)
        print(f"{depth:>8} {elapsed:>8.2f} {cpu:>7.2f} {placed:>7} {considered:>10} "
              f"{placed / elapsed:>8.0f} {1e6 * elapsed / depth:>10.1f}")


if __name__ == "__main__":
    main()
