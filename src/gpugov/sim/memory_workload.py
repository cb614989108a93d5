"""Generated workloads the `gpugov` policy is measured on: a memory-bound one (inference pods
that name GPU memory on 80 GiB cards) and a mixed-mode one (MIG, soft, exclusive and
time-slice devices on one fleet, and requests for each).

What the `gpugov` policy is measured on against FGD-on-milli and BestFit
(bench/bench_memory_bound.py). Each pod asks for one shared GPU with a compute share and a
GPU memory amount drawn independently, so some pods are memory-heavy and compute-light and
others the reverse — the mix where placing by compute alone strands memory or compute.
A small share of pods take whole GPUs (1, 2 or 4), as training jobs beside inference do.
"""

from __future__ import annotations

import numpy as np

from gpugov.model.cluster import NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode, DeviceTopology
from gpugov.model.mig_table import mig_table
from gpugov.model.request import PodRequest

GIB = 1024
#: the card every node carries (80 GiB, MIG-capable, in the catalog)
CARD = "A100-SXM4-80GB"


def memory_bound_nodes(count: int = 64, gpus: int = 8) -> list[NodeSpec]:
    """`count` nodes of `gpus` 80 GiB cards with room in CPU and host memory."""
    return [NodeSpec(f"mem-{i:03d}", 128_000, 1_048_576, gpus, CARD) for i in range(count)]


def memory_bound_pods(count: int = 4000, seed: int = 0, memory_gib: tuple[int, int] = (5, 40),
                      compute_pct: tuple[int, int] = (10, 50), whole_share: float = 0.05
                      ) -> list[PodRequest]:
    """Inference pods of `memory_gib` GiB (uniform in 5 GiB steps) and `compute_pct` %
    compute (uniform in 10 % steps), 4 cores each, plus `whole_share` of whole-GPU pods
    (1, 2 or 4 GPUs, 8 cores per GPU); deterministic per `seed`. Sizes come in steps, as
    model-serving deployments do, so the workload has a few dozen typical shapes."""
    rng = np.random.default_rng(seed)
    memories = np.arange(memory_gib[0], memory_gib[1] + 1, 5) * GIB
    millis = np.arange(compute_pct[0], compute_pct[1] + 1, 10) * 10
    pods: list[PodRequest] = []
    for i in range(count):
        if rng.random() < whole_share:
            n = int(rng.choice([1, 2, 4]))
            pods.append(PodRequest(f"train-{i:05d}", 8000 * n, 32_768 * n, n, 1000))
            continue
        mem = int(rng.choice(memories))
        milli = int(rng.choice(millis))
        pods.append(PodRequest(f"infer-{i:05d}", 4000, 16_384, 1, milli, (), mem))
    return pods


#: the MIG profiles of the mixed workload and how often each is asked for
MIG_MIX = {"1g.10gb": 0.4, "2g.20gb": 0.25, "3g.40gb": 0.2, "4g.40gb": 0.05, "7g.80gb": 0.1}
#: time-slice replicas per device in the mixed fleet (a replica is charged 1000/this milli)
TIMESLICE_REPLICAS = 4


def mixed_fleet_nodes(per_pool: int = 8, budget_share: float = 0.5) -> list[NodeSpec]:
    """Four pools of `per_pool` nodes (224 GPUs at 8): A100-80GB with devices 0-3 in dynamic
    MIG and 4-7 soft (one NVSwitch domain); H100-SXM exclusive (one NVSwitch domain), the
    first `budget_share` of them with a power budget of six of their eight GPUs;
    H100-PCIe soft with NVLink bridges pairing devices (domains 0,0,1,1,2,2,3,3); L40S with
    devices 0-1 time-sliced into `TIMESLICE_REPLICAS` replicas and 2-3 soft (no NVLink)."""
    mig, soft = DeviceConfig(DeviceMode.MIG), DeviceConfig(DeviceMode.SOFT)
    excl = DeviceConfig(DeviceMode.EXCLUSIVE)
    ts = DeviceConfig(DeviceMode.TIMESLICE, replicas=TIMESLICE_REPLICAS)
    switch = tuple(DeviceTopology(nvlink_domain=0) for _ in range(8))
    pairs = tuple(DeviceTopology(nvlink_domain=k // 2) for k in range(8))
    nodes: list[NodeSpec] = []
    for i in range(per_pool):
        nodes.append(NodeSpec(f"a100-{i}", 128_000, 1_048_576, 8, "A100-SXM4-80GB",
                              devices=(mig,) * 4 + (soft,) * 4, topology=switch))
    budgeted = int(per_pool * budget_share)
    for i in range(per_pool):
        budget = 6 * 700.0 if i < budgeted else None
        nodes.append(NodeSpec(f"h100-{i}", 192_000, 2_097_152, 8, "H100-SXM5-80GB",
                              devices=(excl,) * 8, topology=switch, power_budget_w=budget))
    for i in range(per_pool):
        nodes.append(NodeSpec(f"h100p-{i}", 128_000, 1_048_576, 8, "H100-PCIE-80GB",
                              devices=(soft,) * 8, topology=pairs))
    for i in range(per_pool):
        nodes.append(NodeSpec(f"l40s-{i}", 64_000, 524_288, 4, "L40S",
                              devices=(ts,) * 2 + (soft,) * 2))
    return nodes


#: shares of the mixed stream: soft slices, MIG instances, time-slice replicas, whole GPUs
MIXED_SHARES = (0.4, 0.2, 0.1, 0.3)


def mixed_pods(count: int = 600, seed: int = 0,
               shares: tuple[float, float, float, float] = MIXED_SHARES) -> list[PodRequest]:
    """A mixed request stream, deterministic per `seed`, in `shares` (default 40 % soft
    inference slices of 5-40 GiB by 5 and 10-50 % compute by 10, 20 % MIG instances in
    `MIG_MIX`, 10 % time-slice replicas naming 4, 8 or 12 GiB, 30 % whole-GPU pods of 1, 2,
    4 or 8 GPUs at 40/30/20/10 %)."""
    if len(shares) != 4 or min(shares) < 0 or not sum(shares) > 0:
        raise ValueError(f"shares must be 4 numbers >= 0 with a positive sum, got {shares}")
    edges = np.cumsum(shares) / sum(shares)
    rng = np.random.default_rng(seed)
    memories = np.arange(5, 41, 5) * GIB
    profiles, weights = list(MIG_MIX), np.array(list(MIG_MIX.values()))
    table = mig_table("A100-SXM4-80GB")
    pods: list[PodRequest] = []
    for i in range(count):
        kind = rng.random()
        if kind < edges[0]:
            pods.append(PodRequest(f"infer-{i:05d}", 4000, 16_384, 1,
                                   int(rng.integers(1, 6)) * 100, (),
                                   int(rng.choice(memories))))
        elif kind < edges[1]:
            profile = profiles[int(rng.choice(len(profiles), p=weights / weights.sum()))]
            pods.append(PodRequest(f"mig-{i:05d}", 4000, 16_384, 1, table.milli(profile),
                                   mode=DeviceMode.MIG, mig_profile=profile))
        elif kind < edges[2]:
            pods.append(PodRequest(f"ts-{i:05d}", 2000, 8_192, 1,
                                   1000 // TIMESLICE_REPLICAS, (),
                                   int(rng.choice([4, 8, 12])) * GIB,
                                   mode=DeviceMode.TIMESLICE))
        else:
            n = int(rng.choice([1, 2, 4, 8], p=[0.4, 0.3, 0.2, 0.1]))
            pods.append(PodRequest(f"train-{i:05d}", 8000 * n, 32_768 * n, n, 1000))
    return pods
