"""All placement policies by command-line name. Adding a policy = one module + one line here."""

from __future__ import annotations

from gpugov.placement.base import Policy
from gpugov.placement.best_fit import BestFitPolicy
from gpugov.placement.dot_product import DotProductPolicy
from gpugov.placement.fgd import FgdPolicy
from gpugov.placement.gpu_clustering import GpuClusteringPolicy
from gpugov.placement.gpu_packing import GpuPackingPolicy
from gpugov.placement.random_node import RandomPolicy

POLICIES: dict[str, type[Policy]] = {
    p.name: p
    for p in (
        RandomPolicy,
        DotProductPolicy,
        GpuClusteringPolicy,
        GpuPackingPolicy,
        BestFitPolicy,
        FgdPolicy,
    )
}


def get_policy(name: str) -> type[Policy]:
    """Look a policy up by name or label (e.g. "fgd" or "06-FGD"), case-insensitively."""
    wanted = name.strip().lower()
    for p in POLICIES.values():
        if wanted in (p.name, p.label.lower()):
            return p
    raise KeyError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}")
