"""The FGD study's experiment procedure: one (trace, policy, seed) run on a fixed cluster.

Pods only arrive: the trace is shuffled per seed, topped up with random clones (or thinned)
until the total GPU request is `tune` x cluster GPU capacity, and placed one at a time; a pod
that fits nowhere is dropped and counted by reason. Metrics are recorded after every arrival.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.request import PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fgd_run import REASONS, TraceRun
from gpugov.placement.fragmentation import FragmentationMeter, FragmentationModel, TypicalPods
from gpugov.placement.registry import get_policy

#: `tune` is total GPU request / capacity; the study uses 1.3. Above 10 the table is meaningless
#: and the clone sequence grows without bound (`--tune inf` never ended).
MAX_TUNE = 10.0
#: the most arrivals one experiment may have (about 1 GB of per-arrival series)
MAX_ARRIVALS = 5_000_000


def expected_arrivals(pods: Sequence[PodRequest], gpu_capacity_milli: int, tune: float) -> int:
    """About how many arrivals `tuned_sequence` makes (to refuse a run before it starts)."""
    total = sum(p.total_gpu_milli for p in pods)
    if gpu_capacity_milli == 0 or total == 0:
        return len(pods)
    return int(len(pods) * max(1.0, tune * gpu_capacity_milli / total))


def tuned_sequence(pods: Sequence[PodRequest], gpu_capacity_milli: int, tune: float,
                   rng: np.random.Generator) -> list[PodRequest]:
    """Shuffle, then top up with clones or thin down to ~`tune` x GPU capacity.

    Top-up draws from the name-sorted trace with replacement and stops at the first clone
    whose per-GPU milli would overshoot (the study checks per-GPU, not total, milli).
    """
    by_name = sorted(pods, key=lambda p: p.name)
    order = [by_name[i] for i in rng.permutation(len(by_name))]
    if gpu_capacity_milli == 0:
        return order  # nothing to tune against: replay the trace as it is
    target = tune * gpu_capacity_milli
    total = sum(p.total_gpu_milli for p in order)
    if total < target and by_name:
        if not any(p.is_gpu for p in by_name):
            return order  # clones of CPU-only pods can never reach a GPU target
        i = 0
        while True:
            pod = by_name[int(rng.integers(len(by_name)))]
            if total + pod.gpu_milli > target:
                break
            order.append(pod.renamed(f"{pod.name}-tuned-{i}"))
            total += pod.total_gpu_milli
            i += 1
            if len(order) > MAX_ARRIVALS:
                raise ValueError(f"tune {tune:g} needs more than {MAX_ARRIVALS:,} arrivals "
                                 "on this cluster; use a smaller --tune")
    else:
        while total > target and order:
            gone = order.pop(int(rng.integers(len(order))))
            total -= gone.total_gpu_milli
    return order


@dataclass
class RunResult:
    """Per-arrival series (int64 arrays, one entry per pod) and outcome counts of one run."""

    policy: str
    label: str
    seed: int
    total_gpus: int
    arrived_milli: np.ndarray
    used_milli: np.ndarray
    frag_milli: np.ndarray  # float64: fragmentation in milli-GPU after each arrival
    idle_milli: np.ndarray
    pods: int
    placed: int
    failures: Counter = field(default_factory=Counter)
    #: per arrival: "" when placed, else why it fit nowhere (see ClusterState.failure_reason)
    outcomes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.pods - self.placed


def run_experiment(nodes: Sequence[NodeSpec], pods: Sequence[PodRequest], policy: str,
                   seed: int, tune: float = 1.3, typical: TypicalPods | None = None
                   ) -> RunResult:
    """Run one experiment; deterministic for a given (nodes, pods, policy, seed, tune)."""
    policy_cls = get_policy(policy)
    rng = np.random.default_rng(seed)
    state = ClusterState(nodes)
    typical = typical if typical is not None else TypicalPods.from_requests(pods)
    sequence = tuned_sequence(pods, state.total_gpu_milli, tune, rng)
    priority = rng.permutation(len(state))
    frag_model = FragmentationModel(typical, state)
    placer = Placer(state, policy_cls(PolicyContext(frag_model, rng)), priority)
    meter = FragmentationMeter(frag_model, state)

    n = len(sequence)
    arrived = np.zeros(n, dtype=np.int64)
    used = np.zeros(n, dtype=np.int64)
    frag = np.zeros(n, dtype=np.int64)
    outcomes: list[str] = []
    arrived_total = 0
    used_total = 0
    placed = 0
    # FGD's C path takes the plain pods' turns in one call each stretch (placement/fgd_run.py)
    fast = TraceRun.build(placer, meter, sequence, arrived, used, frag)
    i = 0
    while i < n:
        if fast is not None and state.fast_path(sequence[i]):
            stop, arrived_total, used_total, placed = fast.run(i, arrived_total, used_total,
                                                              placed)
            if stop < 0:
                fast = None
            elif stop > i:
                outcomes.extend([REASONS[c] for c in fast.outcome[i:stop].tolist()])
                i = stop
                continue
        pod = sequence[i]  # the Python path: this pod
        arrived_total += pod.total_gpu_milli
        decision = placer.place(pod)
        if decision.allocation is None:
            outcomes.append(decision.reason)
        else:
            placed += 1
            outcomes.append("")
            used_total += pod.total_gpu_milli
            meter.update(decision.allocation.node)  # CPU-only pods move frag too (Q3->Q4)
        arrived[i] = arrived_total
        used[i] = used_total
        frag[i] = meter.total
        i += 1
    failures = Counter(reason for reason in outcomes if reason)
    weight = frag_model.total_weight or 1
    return RunResult(
        policy=policy_cls.name, label=policy_cls.label, seed=seed,
        total_gpus=int(state.gpu_count.sum()), arrived_milli=arrived, used_milli=used,
        frag_milli=frag / weight, idle_milli=state.total_gpu_milli - used,
        pods=n, placed=placed, failures=failures, outcomes=outcomes,
    )
