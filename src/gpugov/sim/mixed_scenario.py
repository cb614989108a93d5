"""The built-in mixed-fleet scenario (`gpugov replay --scenario mixed`).

Two node pools from a `cluster.yaml` (4 x 8 H100 80 GB, 4 x 4 L40S 48 GB = 48 GPUs) and three
tenants whose jobs are written as container limits (the jobs file's `resources` column):
inference pods asking for GPU-memory slices (5-40 GiB, 10-50 % of the SMs), whole-GPU training
gangs, and an untrusted partner asking for slices (each gets a whole device: untrusted tenants
never share). MIG pods are not part of it yet: MIG in the replay is planned (the engine does not
model MIG instances). Generated from a fixed seed: every run prints the same numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from gpugov.control.config import ControlConfig, parse_config
from gpugov.model.cluster import NodeSpec
from gpugov.model.cluster_spec import parse_cluster_yaml
from gpugov.sim.jobs import JobSpec, resource_limits

SOURCE = "<built-in mixed scenario>"

MIXED_CLUSTER = """
nodePools:
  - {name: h100, count: 4, model: H100-SXM5-80GB, gpus: 8, cpuMilli: 192000,
     memoryMiB: 2097152, topology: nvswitch}
  - {name: l40s, count: 4, model: L40S, gpus: 4, cpuMilli: 64000, memoryMiB: 524288,
     topology: pcie}
"""

MIXED_QUEUES = """
queues:
  - {name: inference, quota: {gpu: 16}, weight: 2, priority: 10}
  - {name: training, quota: {gpu: 24}, weight: 2}
  - {name: partner, quota: {gpu: 8}, limit: {gpu: 16}, weight: 1}
tenants:
  - {namespace: ns-infer, queue: inference, trust: trusted}
  - {namespace: ns-train, queue: training, trust: internal}
  - {namespace: ns-partner, queue: partner, trust: untrusted}
priorityClasses:
  - {name: serving, value: 1000, preemptible: false}
  - {name: normal, value: 100, preemptible: true}
  - {name: scavenger, value: 10, preemptible: true}
"""


def mixed_config() -> ControlConfig:
    return parse_config(yaml.safe_load(MIXED_QUEUES), SOURCE)


def mixed_nodes() -> list[NodeSpec]:
    cluster = parse_cluster_yaml(yaml.safe_load(MIXED_CLUSTER), SOURCE)
    return [NodeSpec(name, p.cpu_milli, p.memory_mib, p.gpus, p.model)
            for p in cluster.node_pools for name in cluster.node_names(p)]


def _job(name: str, namespace: str, pclass: str, submit: float, duration: float, pods: int,
         resources: str, cpu_milli: int, memory_mib: int) -> JobSpec:
    gpus, milli, gpu_memory, models = resource_limits(Path(SOURCE), 0, resources)
    return JobSpec(name, "", pclass, round(submit), round(duration), pods, gpus, milli,
                   cpu_milli, memory_mib, models, gpu_memory_mib=gpu_memory,
                   namespace=namespace)


def mixed_jobs(seed: int = 11, hours: float = 24.0) -> list[JobSpec]:
    """Steady inference slices, bursts of training gangs, a bursty untrusted partner."""
    rng = np.random.default_rng(seed)
    horizon = hours * 3600
    out: list[JobSpec] = []
    for i, t in enumerate(np.sort(rng.uniform(0, horizon, 240))):
        gib = int(rng.integers(1, 9)) * 5  # 5..40 GiB
        cores = int(rng.integers(1, 6)) * 10  # 10..50 %
        out.append(_job(f"infer-{i:04d}", "ns-infer", "serving", float(t),
                        float(rng.exponential(3 * 3600)) + 600, 1,
                        f"nvidia.com/gpu=1;nvidia.com/gpumem={gib * 1024};"
                        f"nvidia.com/gpucores={cores}", 4000, 16384))
    for b in range(6):
        t0 = rng.uniform(0, horizon * 0.8)
        for k in range(int(rng.integers(2, 6))):
            gpus = int(rng.choice([2, 4, 8]))
            pods = int(rng.choice([1, 2]))
            out.append(_job(f"train-{b}-{k}", "ns-train", str(rng.choice(["normal",
                                                                         "scavenger"])),
                            t0 + 120 * k, float(rng.exponential(4 * 3600)) + 1200, pods,
                            f"nvidia.com/gpu={gpus}", 8000 * gpus, 65536 * gpus))
    for i, t in enumerate(np.sort(rng.uniform(0, horizon, 60))):
        gib = int(rng.integers(1, 5)) * 5
        out.append(_job(f"partner-{i:04d}", "ns-partner", "scavenger", float(t),
                        float(rng.exponential(3600)) + 300, 1,
                        f"nvidia.com/gpumem={gib * 1024};nvidia.com/gpucores=20", 4000, 16384))
    return out
