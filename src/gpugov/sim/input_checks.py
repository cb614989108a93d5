"""Checks on a whole workload before running it: inputs that would only print `nan` or
`0 jobs` are refused, and pods that no node could ever hold are reported, not silently
counted as failures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.request import PodRequest
from gpugov.sim.text_input import InputFileError


def require_gpus(nodes: Sequence[NodeSpec], source: Path | str) -> None:
    """A placement study of GPUs needs at least one node with a GPU."""
    if not nodes:
        raise InputFileError(source, None, None, "no nodes (only a header?)")
    if not any(n.gpu_count for n in nodes):
        raise InputFileError(source, None, "gpu",
                             f"none of the {len(nodes)} nodes has a GPU; nothing to place on")


def require_gpu_pods(pods: Sequence[PodRequest], source: Path | str, what: str = "pods"
                     ) -> None:
    """At least one pod must ask for a GPU, or every GPU number is 0 or undefined."""
    if not pods:
        raise InputFileError(source, None, None, f"no {what} (only a header?)")
    if not any(p.gpu_count for p in pods):
        raise InputFileError(source, None, "num_gpu",
                             f"none of the {len(pods)} {what} asks for a GPU; nothing to compare")


def never_fit(nodes: Sequence[NodeSpec], pods: Sequence[PodRequest]) -> dict[str, list[str]]:
    """Pods that fit on no node even when the cluster is empty, by reason
    (`gpu-model`, `gpu`, `cpu`, `memory`): names in file order."""
    state = ClusterState(nodes)
    out: dict[str, list[str]] = {}
    verdict: dict[tuple, str] = {}
    for p in pods:
        key = (p.cpu_milli, p.memory_mib, p.gpu_count, p.gpu_milli, p.models)
        if key not in verdict:
            verdict[key] = "" if state.feasible(p).any() else state.failure_reason(p)
        if verdict[key]:
            out.setdefault(verdict[key], []).append(p.name)
    return out


def never_fit_warning(nodes: Sequence[NodeSpec], pods: Sequence[PodRequest],
                      source: Path | str) -> str | None:
    """One line for the user, or None when every pod fits somewhere."""
    bad = never_fit(nodes, pods)
    if not bad:
        return None
    total = sum(len(v) for v in bad.values())
    parts = []
    for reason, names in sorted(bad.items(), key=lambda kv: -len(kv[1])):
        example = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        parts.append(f"{reason}: {len(names)} ({example})")
    model_failures = set(bad.get("gpu-model", ()))
    models = Counter(m for p in pods if p.name in model_failures for m in p.models)
    hint = (f"; GPU models no node has: {', '.join(sorted(models))}" if models else "")
    return (f"{source}: {total} of {len(pods)} pods fit on no node even in an empty cluster "
            f"and will be counted as failed — {'; '.join(parts)}{hint}")
