"""Many experiments at once: policies x seeds, optionally in parallel processes.

Workers receive the trace once (pool initializer) and return only the discretised curves and
outcome counts, so results are small and the parent stays responsive for progress output.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpugov.model.cluster import NodeSpec
from gpugov.model.request import PodRequest
from gpugov.placement.fragmentation import TypicalPods
from gpugov.placement.registry import POLICIES, PRODUCTION_POLICIES, get_policy
from gpugov.sim.curves import discretise
from gpugov.sim.experiment import run_experiment


@dataclass
class RunSummary:
    """What is kept of one experiment: its curves and outcome counts."""

    policy: str
    label: str
    seed: int
    total_gpus: int
    curves: dict[str, np.ndarray]
    pods: int
    placed: int
    failures: Counter = field(default_factory=Counter)


@dataclass
class StudyResult:
    workload: str
    tune: float
    runs: list[RunSummary]

    def by_policy(self) -> dict[str, list[RunSummary]]:
        out: dict[str, list[RunSummary]] = {}
        for r in self.runs:
            out.setdefault(r.label, []).append(r)
        return out


MAX_SEED = 2**32 - 1  # numpy's seed range is wider; this is what people use
MAX_SEEDS = 10_000


def parse_seeds(text: str) -> list[int]:
    """'42-51', '42,43,50' or '7' -> list of seeds (ranges inclusive)."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if b < a or b - a >= MAX_SEEDS:
                    raise ValueError
                seeds.extend(range(a, b + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise ValueError(f"bad seed list {text!r}: use e.g. 42-51 or 42,43,44 "
                             f"(seeds 0..{MAX_SEED})") from None
        if len(seeds) > MAX_SEEDS:
            raise ValueError(f"bad seed list {text!r}: more than {MAX_SEEDS} seeds")
    if not seeds:
        raise ValueError(f"bad seed list {text!r}: no seeds")
    bad = [s for s in seeds if not 0 <= s <= MAX_SEED]
    if bad:
        raise ValueError(f"bad seed list {text!r}: seed {bad[0]} is outside 0..{MAX_SEED}")
    dupes = sorted({s for s in seeds if seeds.count(s) > 1})
    if dupes:
        raise ValueError(f"bad seed list {text!r}: seed {dupes[0]} is listed twice")
    return seeds


def resolve_policies(names: Sequence[str]) -> list[str]:
    """Policy names in the study's order, then gpugov's production policies; 'all' expands
    to the study's six (named others are added to them); an item may be a comma list
    (`fgd,best-fit`). ValueError when nothing is named (`--policy ""`)."""
    items = [part.strip() for n in names for part in n.split(",") if part.strip()]
    if not items:
        raise ValueError(f"--policy: no policy named (got {list(names)!r}); allowed: "
                         f"{', '.join([*POLICIES, *PRODUCTION_POLICIES])} or all")
    chosen = {get_policy(n).name for n in items if n.lower() != "all"}
    if any(n.lower() == "all" for n in items):
        chosen |= set(POLICIES)
    return [p for p in (*POLICIES, *PRODUCTION_POLICIES) if p in chosen]


_WORKER: dict[str, object] = {}


def _init_worker(nodes: Sequence[NodeSpec], pods: Sequence[PodRequest], tune: float) -> None:
    _WORKER.update(nodes=nodes, pods=pods, tune=tune, typical=TypicalPods.from_requests(pods))


def _run_one(task: tuple[str, int]) -> RunSummary:
    policy, seed = task
    tune = float(_WORKER["tune"])  # type: ignore[arg-type]
    r = run_experiment(_WORKER["nodes"], _WORKER["pods"], policy, seed, tune,  # type: ignore[arg-type]
                       typical=_WORKER["typical"])  # type: ignore[arg-type]
    return RunSummary(r.policy, r.label, r.seed, r.total_gpus, discretise(r, tune), r.pods,
                      r.placed, r.failures)


def run_study(nodes: Sequence[NodeSpec], pods: Sequence[PodRequest], workload: str,
              policies: Sequence[str], seeds: Sequence[int], tune: float = 1.3, jobs: int = 1,
              on_done: Callable[[RunSummary], None] | None = None) -> StudyResult:
    """Run every (policy, seed); results come back in (policy, seed) order whatever `jobs`."""
    tasks = [(p, s) for p in policies for s in seeds]
    jobs = max(1, min(jobs, len(tasks), os.cpu_count() or 1))
    results: dict[tuple[str, int], RunSummary] = {}
    if jobs == 1:
        _init_worker(nodes, pods, tune)
        for t in tasks:
            results[t] = _run_one(t)
            if on_done:
                on_done(results[t])
    else:
        from concurrent.futures import ProcessPoolExecutor  # only here: ~10 ms of import

        with ProcessPoolExecutor(jobs, initializer=_init_worker,
                                 initargs=(nodes, pods, tune)) as pool:
            for t, r in zip(tasks, pool.map(_run_one, tasks), strict=True):
                results[t] = r
                if on_done:
                    on_done(r)
    return StudyResult(workload, tune, [results[t] for t in tasks])
