"""Run the MIG layout planner on a trace: the openb cluster re-imagined with MIG GPUs.

Mapping (documented in docs/gpus-and-modes.md): every trace node keeps its name and GPU count,
but its GPUs become `model` (e.g. H100-SXM5-80GB). Every GPU pod becomes per-device profile
demand: `gpu_milli` → the smallest profile whose compute share covers it
(`placement.mig_planner.profile_for_milli`: ≤142 → 1g, ≤285 → 2g, ≤428 → 3g, ≤571 → 4g, else
7g); a k-GPU pod asks for k whole-GPU (7g) instances. Node boundaries and CPU/memory are
ignored by the planner: served demand is counted per instance over the whole cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpugov.model.mig import get_geometry
from gpugov.model.request import PodRequest
from gpugov.placement.mig_planner import (
    GpuSlot,
    Plan,
    balanced_layout,
    plan_layouts,
    profile_for_milli,
    served_slices,
    static_plan,
)
from gpugov.sim.input_checks import require_gpu_pods, require_gpus
from gpugov.sim.trace import load_nodes, load_pods


def demand_from_pods(model: str, pods: list[PodRequest]) -> Counter[str]:
    g = get_geometry(model)
    demand: Counter[str] = Counter()
    for p in pods:
        if p.gpu_count:
            demand[profile_for_milli(g, p.gpu_milli)] += p.gpu_count
    return demand


@dataclass(frozen=True, slots=True)
class PlanRow:
    name: str
    served_instances: int
    served_slices: int
    demand_instances: int
    demand_slices: int
    gpus_changed: int


@dataclass(slots=True)
class TracePlanReport:
    model: str
    gpus: int
    demand: Counter[str]
    rows: list[PlanRow]
    plan: Plan


def run(nodes_path: Path | str, pods_path: Path | str, model: str,
        start: str = "disabled",
        say: Callable[[str], None] = lambda _step: None) -> TracePlanReport:
    """Plan vs. the static baselines. `start`: the layout GPUs have before planning
    (`disabled` = MIG off, `balanced`, `1g`); all GPUs are idle (a fresh roll-out).
    `say(step)` as each step begins (the planner's time grows with the GPUs: seconds on the
    openb cluster's 6,212)."""
    g = get_geometry(model)
    initial = {"disabled": (), "balanced": balanced_layout(model),
               "1g": (g.base_profiles()[0].name,) * g.compute_slices}[start]
    say("reading the nodes and pods")
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    require_gpus(nodes, nodes_path)
    require_gpu_pods(pods, pods_path)
    slots = [GpuSlot(n.name, i, initial) for n in nodes for i in range(n.gpu_count)]
    demand = demand_from_pods(model, pods)
    say(f"planning layouts of {len(slots):,} GPUs for {len(pods):,} pods")
    one_g = min(g.base_profiles(), key=lambda p: (p.memory_slices, p.compute_slices)).name
    plans = {
        f"static {g.compute_slices}×{one_g}": static_plan(
            model, slots, demand, (one_g,) * g.compute_slices),
        "static mixed (mig-parted all-balanced)": static_plan(
            model, slots, demand, balanced_layout(model)),
        "static whole GPUs (MIG off)": static_plan(model, slots, demand, ()),
        "gpugov planner": plan_layouts(model, slots, demand),
    }
    total_slices = served_slices(g, demand)
    rows = [PlanRow(name, sum(p.served_after.values()), served_slices(g, p.served_after),
                    sum(demand.values()), total_slices, p.changed)
            for name, p in plans.items()]
    return TracePlanReport(model, len(slots), demand, rows, plans["gpugov planner"])
