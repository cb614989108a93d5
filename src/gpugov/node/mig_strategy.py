"""NVIDIA's MIG `single` strategy on a gpugov node (node.yaml `migStrategy: single`, or the
NVIDIA config's `flags.migStrategy: single`).

As the NVIDIA device plugin v0.20 (internal/rm: `assertAllMigDevicesAreValid(uniform=true)`)
and GFD (`setInvalidMigStrategyLabels`) do it: every MIG instance of the node is served as
`nvidia.com/gpu` (its `MIG-…` UUID as the device ID), and GFD's labels describe one instance
(`nvidia.com/gpu.product: <product>-MIG-<profile>`, `gpu.count` = instances, `gpu.memory` =
an instance's MiB, `mig.strategy: single`) — but only when the node is uniform: every GPU in
MIG mode, each with instances, all of one profile. Otherwise nothing MIG is served (NVIDIA's
plugin refuses to start) and the product label says `-MIG-INVALID` with count 0, so a pod
that selects a `-MIG-<profile>` product never lands there; the reason is the one NVIDIA gives.
Time-sliced instances are not combined with `single` (refused likewise).
"""

from __future__ import annotations

from gpugov.k8s.annotations import Inventory
from gpugov.model.devices import DeviceMode
from gpugov.node.nvml.discovery import NodeGpus

SINGLE = "single"
MIXED = "mixed"
STRATEGIES = (MIXED, SINGLE)


def single_problem(inventory: Inventory) -> str | None:
    """Why the node cannot be served with the single strategy (NVIDIA's words), or None."""
    devs = [d for d in inventory.devices]
    if not devs:
        return "No MIG devices present on node"
    if any(d.mode is not DeviceMode.MIG for d in devs):
        return ("for mig.strategy=single all devices on the node must be configured with the "
                "same migEnabled value")
    for d in devs:
        if not any(m.uuid for m in d.mig):
            return f"device {d.index} has no MIG devices configured"
    if any(m.replicas > 1 for d in devs for m in d.mig):
        return "time-sliced MIG instances are served with mig.strategy=mixed only"
    if len({m.profile for d in devs for m in d.mig if m.uuid}) != 1:
        return "more than one MIG device type present on node"
    return None


def single_labels(node: NodeGpus, inventory: Inventory, labels: dict[str, str]
                  ) -> dict[str, str]:
    """GFD's labels under the single strategy, from the `none`-strategy ones (`labels`)."""
    out = dict(labels)
    out["nvidia.com/mig.strategy"] = SINGLE
    product = out.get("nvidia.com/gpu.product", "")
    if single_problem(inventory) is not None:
        out.update({"nvidia.com/gpu.product": f"{product}-MIG-INVALID",
                    "nvidia.com/gpu.count": "0", "nvidia.com/gpu.memory": "0"})
        return out
    migs = [m for g in node.gpus for m in g.mig if m.uuid]
    out.update({"nvidia.com/gpu.product": f"{product}-MIG-{migs[0].profile}",
                "nvidia.com/gpu.count": str(len(migs)),
                "nvidia.com/gpu.memory": str(migs[0].memory_mib)})
    return out
