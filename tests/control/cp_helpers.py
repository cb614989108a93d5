"""Small clusters and configs for scenario tests of the control plane."""

from __future__ import annotations

from typing import Any

from gpugov.control.config import parse_config
from gpugov.control.cycle import ControlPlane, new_control_plane
from gpugov.control.workload import Job
from gpugov.model.cluster import NodeSpec
from gpugov.model.request import PodRequest


def nodes(count: int, gpus: int = 4, cpu: int = 64_000, mem: int = 262_144,
          model: str = "A100") -> list[NodeSpec]:
    return [NodeSpec(f"n{i:03d}", cpu, mem, gpus, model) for i in range(count)]


CLASSES = [
    {"name": "high", "value": 1000, "preemptible": False},
    {"name": "mid", "value": 100, "preemptible": True},
    {"name": "low", "value": 10, "preemptible": True},
]


def plane(queues: list[dict[str, Any]], cluster: list[NodeSpec], policy: str = "bestfit",
          **extra: Any) -> ControlPlane:
    cfg = parse_config({"queues": queues, "priorityClasses": CLASSES, **extra})
    return new_control_plane(cfg, cluster, policy=policy, seed=0)


def job(cp: ControlPlane, name: str, queue: str, gpus: int = 1, pods: int = 1,
        pclass: str = "low", submit: float = 0.0, milli: int = 1000) -> Job:
    leaf, trust = cp.tree.resolve(queue)
    pod = PodRequest(name, 1000, 1024, gpus if milli == 1000 else 1, milli)
    return cp.submit(Job(name, leaf, cp.cfg.priority_class(pclass), submit, pods, pod, trust))


def gpus_used(cp: ControlPlane, queue: str) -> float:
    return float(cp.ledger.usage[cp.tree.index(queue), 0] / 1000)


def two_queues() -> ControlPlane:
    return plane([{"name": "a", "quota": {"gpu": 4}}, {"name": "b", "quota": {"gpu": 4}}],
                 nodes(2))
