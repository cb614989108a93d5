"""Node labels in NVIDIA GPU feature discovery's convention, from live NVML discovery, so
nodeSelectors written for GFD keep working on gpugov nodes."""

from __future__ import annotations

import re
from collections import Counter

from gpugov.k8s.annotations import (
    GFD_COUNT,
    GFD_FAMILY,
    GFD_MEMORY,
    GFD_MIG_STRATEGY,
    GFD_PRESENT,
    GFD_PRODUCT,
)
from gpugov.model.devices import DeviceMode
from gpugov.node.nvml.discovery import NodeGpus
from gpugov.node.nvml.source import SharingPolicy

MIG_LABEL_PREFIX = "nvidia.com/mig-"  # per-profile labels of the mixed strategy
# the keys gfd_labels writes; only these are ever deleted (the GPU Operator's
# nvidia.com/gpu.deploy.*, users' nvidia.com/mig.config and the like are never touched)
OWNED_KEYS = frozenset({
    GFD_PRESENT, GFD_PRODUCT, GFD_COUNT, GFD_MEMORY, GFD_FAMILY, GFD_MIG_STRATEGY,
    "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy", "nvidia.com/mig.capable",
    "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor",
    *(f"nvidia.com/cuda.driver-version.{k}" for k in ("major", "minor", "revision", "full")),
    *(f"nvidia.com/cuda.runtime-version.{k}" for k in ("major", "minor", "full")),
})
_OWNED_MIG = re.compile(r"^nvidia\.com/mig-[A-Za-z0-9.+-]+\.(count|memory)$")
MIG_CONFIG = "nvidia.com/mig.config"  # input: desired mig-parted config name
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"  # pending | success | failed

_FAMILY = {5: "maxwell", 6: "pascal", 7: "volta", 8: "ampere", 9: "hopper", 10: "blackwell",
           12: "blackwell"}


def family(cc: tuple[int, int] | None) -> str | None:
    if cc is None:
        return None
    major, minor = cc
    if (major, minor) == (7, 5):
        return "turing"
    if (major, minor) == (8, 9):
        return "ada-lovelace"
    return _FAMILY.get(major)


def product(nvml_name: str) -> str:
    """GFD's product label: characters outside [A-Za-z0-9-_. ] dropped, spaces -> '-'."""
    return re.sub(r"[^A-Za-z0-9\-_. ]", "", nvml_name).strip().replace(" ", "-")[:63]


def gfd_labels(node: NodeGpus, sharing: SharingPolicy = SharingPolicy(),
               shared_suffix: bool = False) -> dict[str, str]:
    """GFD's labels. `shared_suffix` (an NVIDIA config with `renameByDefault: false`): a
    time-sliced or MPS node's product ends with `-SHARED`, as GFD writes it, so NVIDIA's pods
    that select it find the node (and gpugov reads that selector as one replica)."""
    if not node.gpus:
        return {GFD_PRESENT: "false"}
    name = Counter(g.name for g in node.gpus).most_common(1)[0][0]
    first = next(g for g in node.gpus if g.name == name)
    labels = {
        GFD_PRESENT: "true",
        GFD_PRODUCT: product(name)[:56] + "-SHARED" if shared_suffix and sharing.mode in (
            DeviceMode.TIMESLICE, DeviceMode.MPS) else product(name),
        GFD_COUNT: str(len(node.gpus)),
        GFD_MEMORY: str(first.memory_mib),
        "nvidia.com/gpu.replicas": str(sharing.replicas if sharing.mode in (
            DeviceMode.TIMESLICE, DeviceMode.MPS) else 1),
        "nvidia.com/gpu.sharing-strategy": {DeviceMode.TIMESLICE: "time-slicing",
                                            DeviceMode.MPS: "mps"}.get(sharing.mode, "none"),
        "nvidia.com/mig.capable": str(any(g.mig_capable for g in node.gpus)).lower(),
        GFD_MIG_STRATEGY: "mixed" if any(g.mig_enabled for g in node.gpus) else "none",
    }
    fam = family(first.compute_capability)
    if fam:
        labels[GFD_FAMILY] = fam
    if first.compute_capability:
        labels["nvidia.com/gpu.compute.major"] = str(first.compute_capability[0])
        labels["nvidia.com/gpu.compute.minor"] = str(first.compute_capability[1])
    parts = node.driver_version.split(".")
    if len(parts) >= 2 and all(p.isdigit() for p in parts):
        labels["nvidia.com/cuda.driver-version.major"] = parts[0]
        labels["nvidia.com/cuda.driver-version.minor"] = parts[1]
        if len(parts) > 2:
            labels["nvidia.com/cuda.driver-version.revision"] = parts[2]
        labels["nvidia.com/cuda.driver-version.full"] = node.driver_version
    if node.cuda_version:
        major, minor = node.cuda_version
        labels["nvidia.com/cuda.runtime-version.major"] = str(major)
        labels["nvidia.com/cuda.runtime-version.minor"] = str(minor)
        labels["nvidia.com/cuda.runtime-version.full"] = f"{major}.{minor}"
    if sharing.mig_strategy == "single":  # GFD's single-strategy labels (node/mig_strategy.py)
        from gpugov.node.mig_strategy import single_labels
        from gpugov.node.nvml.source import inventory_from
        return single_labels(node, inventory_from(node, sharing=sharing), labels)
    mig: Counter[str] = Counter()
    mem: dict[str, int] = {}
    for g in node.gpus:
        for m in g.mig:
            key = m.profile.replace("+", ".")
            mig[key] += 1
            mem[key] = m.memory_mib
    for key, n in sorted(mig.items()):
        labels[f"{MIG_LABEL_PREFIX}{key}.count"] = str(n)
        labels[f"{MIG_LABEL_PREFIX}{key}.memory"] = str(mem[key])
    return labels


def stale(current: dict[str, str], new: dict[str, str]) -> list[str]:
    """Labels this agent owns that are on the node but no longer true (to delete)."""
    return [k for k in current if k not in new and (k in OWNED_KEYS or _OWNED_MIG.match(k))]
