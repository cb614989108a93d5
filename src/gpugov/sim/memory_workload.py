"""A generated memory-bound workload: inference pods that name GPU memory on 80 GiB cards.

What the `gpugov` policy is measured on against FGD-on-milli and BestFit
(bench/bench_memory_bound.py). Each pod asks for one shared GPU with a compute share and a
GPU memory amount drawn independently, so some pods are memory-heavy and compute-light and
others the reverse — the mix where placing by compute alone strands memory or compute.
A small share of pods take whole GPUs (1, 2 or 4), as training jobs beside inference do.
"""

from __future__ import annotations

import numpy as np

from gpugov.model.cluster import NodeSpec
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
