"""The built-in mixed-fleet scenario (`gpugov replay --scenario mixed`).

A `cluster.yaml` fleet of 64 GPUs in real modes and four tenants whose jobs are written as
container limits (the jobs file's `resources`, `tolerations` and `node_selector` columns):

- `train`: 4 x 8 H100 on NVSwitch, every device exclusive (none named in `devices:`);
  internal whole-GPU training gangs select it (`pool=train`);
- `mig`: 2 x 8 H100, devices 0-3 with a fixed MIG layout (3g.40gb, 2g.20gb, 2 x 1g.10gb),
  4-7 dynamic MIG (instances made at valid starts where pods land);
- `soft`: 2 x 4 A100 80 GB, soft slices (GPU memory + compute);
- `edge`: 4 x 4 L40S, devices 0-1 soft and 2-3 time-sliced (4 replicas), tainted
  `dedicated=infer:NoSchedule` and held to 1050 W (three of its four 350 W cards busy).

Tenants: a trusted inference tenant (memory slices of 5-40 GiB and 10-50 % of the SMs, half of
them tolerating the edge taint; MIG instances; time-slice replicas on the edge pool), an
internal training tenant (gangs of 1-2 pods x 2/4/8 whole GPUs) and an untrusted partner
(MIG instances, which seal their device against other tenants, and whole GPUs: its tier needs
hard isolation, which a soft slice cannot give). Generated from a fixed seed: every run
prints the same numbers.
"""

from __future__ import annotations

import numpy as np
import yaml

from gpugov.control.config import ControlConfig, parse_config
from gpugov.model.cluster import NodeSpec
from gpugov.model.cluster_spec import parse_cluster_yaml
from gpugov.sim.fleet import fleet_nodes
from gpugov.sim.jobs import (
    JobSpec,
    gpu_request,
    legacy_fields,
    parse_node_selector,
    parse_tolerations,
)

SOURCE = "<built-in mixed scenario>"

MIXED_CLUSTER = """
nodePools:
  - {name: train, count: 4, model: H100-SXM5-80GB, gpus: 8, cpuMilli: 192000,
     memoryMiB: 2097152, topology: nvswitch, labels: {pool: train}}
  - name: mig
    count: 2
    model: H100-SXM5-80GB
    gpus: 8
    cpuMilli: 192000
    memoryMiB: 2097152
    topology: nvswitch
    labels: {pool: mig}
    devices:
      - {index: "0-3", mode: mig, layout: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}
      - {index: "4-7", mode: mig}
  - name: soft
    count: 2
    model: A100-SXM4-80GB
    gpus: 4
    cpuMilli: 128000
    memoryMiB: 1048576
    topology: nvswitch
    devices: [{index: "0-3", mode: soft}]
  - name: edge
    count: 4
    model: L40S
    gpus: 4
    cpuMilli: 64000
    memoryMiB: 524288
    topology: pcie
    powerBudgetW: 1050
    labels: {zone: edge}
    taints: [{key: dedicated, value: infer, effect: NoSchedule}]
    devices:
      - {index: "0-1", mode: soft}
      - {index: "2-3", mode: timeslice, replicas: 4}
"""

MIXED_QUEUES = """
queues:
  - {name: inference, quota: {gpu: 24}, weight: 2, priority: 10}
  - {name: training, quota: {gpu: 32}, weight: 2}
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

EDGE_TOLERATION = "dedicated=infer:NoSchedule"
MIG_PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")


def mixed_config() -> ControlConfig:
    return parse_config(yaml.safe_load(MIXED_QUEUES), SOURCE)


def mixed_nodes() -> list[NodeSpec]:
    """The fleet, through the replay's own cluster.yaml reader."""
    cluster = parse_cluster_yaml(yaml.safe_load(MIXED_CLUSTER), SOURCE, dynamic_mig=True)
    return fleet_nodes(cluster, SOURCE)


def _job(name: str, namespace: str, pclass: str, submit: float, duration: float, pods: int,
         resources: str, cpu_milli: int, memory_mib: int, tolerations: str = "",
         node_selector: str = "") -> JobSpec:
    """A job as a jobs-file row would spell it, read by the jobs file's own parsers."""
    req = gpu_request(SOURCE, 0, resources)
    gpus, milli, gpu_memory, models = legacy_fields(req)
    return JobSpec(name, "", pclass, round(submit), round(duration), pods, gpus, milli,
                   cpu_milli, memory_mib, models, gpu_memory_mib=gpu_memory,
                   namespace=namespace, gpu_request=req,
                   node_selector=parse_node_selector(SOURCE, 0, node_selector),
                   tolerations=parse_tolerations(SOURCE, 0, tolerations))


def mixed_jobs(seed: int = 11, hours: float = 24.0) -> list[JobSpec]:
    """Steady inference (slices, MIG, time-slice replicas), bursts of training gangs, a
    bursty untrusted partner."""
    rng = np.random.default_rng(seed)
    horizon = hours * 3600
    out: list[JobSpec] = []
    for i, t in enumerate(np.sort(rng.uniform(0, horizon, 200))):
        gib = int(rng.integers(1, 9)) * 5  # 5..40 GiB
        cores = int(rng.integers(1, 6)) * 10  # 10..50 %
        out.append(_job(f"infer-{i:04d}", "ns-infer", "serving", float(t),
                        float(rng.exponential(3 * 3600)) + 600, 1,
                        f"nvidia.com/gpu=1;nvidia.com/gpumem={gib * 1024};"
                        f"nvidia.com/gpucores={cores}", 4000, 16384,
                        tolerations=EDGE_TOLERATION if i % 2 else ""))
    for i, t in enumerate(np.sort(rng.uniform(0, horizon, 80))):
        profile = MIG_PROFILES[int(rng.choice(3, p=[0.5, 0.3, 0.2]))]
        out.append(_job(f"mig-{i:04d}", "ns-infer", "serving", float(t),
                        float(rng.exponential(2 * 3600)) + 600, 1,
                        f"nvidia.com/mig-{profile}=1", 2000, 8192))
    for i, t in enumerate(np.sort(rng.uniform(0, horizon, 40))):
        out.append(_job(f"shared-{i:04d}", "ns-infer", "serving", float(t),
                        float(rng.exponential(3600)) + 300, 1, "nvidia.com/gpu.shared=1",
                        2000, 8192, tolerations=EDGE_TOLERATION, node_selector="zone=edge"))
    for b in range(6):
        t0 = rng.uniform(0, horizon * 0.8)
        for k in range(int(rng.integers(2, 6))):
            gpus = int(rng.choice([2, 4, 8]))
            pods = int(rng.choice([1, 2]))
            out.append(_job(f"train-{b}-{k}", "ns-train", str(rng.choice(["normal",
                                                                         "scavenger"])),
                            t0 + 120 * k, float(rng.exponential(4 * 3600)) + 1200, pods,
                            f"nvidia.com/gpu={gpus}", 8000 * gpus, 65536 * gpus,
                            node_selector="pool=train"))
    for i, t in enumerate(np.sort(rng.uniform(0, horizon, 60))):
        res = f"nvidia.com/mig-{MIG_PROFILES[i % 3]}=1" if i % 2 else "nvidia.com/gpu=1"
        out.append(_job(f"partner-{i:04d}", "ns-partner", "scavenger", float(t),
                        float(rng.exponential(3600)) + 300, 1, res, 4000, 16384))
    return out
