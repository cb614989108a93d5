"""What gpugov's own scheduler does with a pod's ResourceClaims (docs/dra.md).

A pod that names `spec.resourceClaims` and asks gpugov's scheduler to place it is refused with
this reason instead of being bound with its claims unallocated (the kubelet would then hold
it forever in ContainerCreating, and its devices would escape the queues): gpugov's scheduler
does not allocate claims yet (planned: it writes the claim's allocation and reservation
itself, so queues, fair share, gangs and preemption apply). Such pods run today through
kube-scheduler, which allocates from gpugov's published ResourceSlices, with gpugov's kubelet
plugin enforcing each slice on the node.
"""

from __future__ import annotations

from typing import Any

#: what the pod should do instead (one sentence, shown in its condition)
INSTEAD = ("leave schedulerName unset (kube-scheduler allocates claims from gpugov's "
           "ResourceSlices, docs/dra.md), or ask for GPUs with nvidia.com/gpu resources")


def refusal(spec: dict[str, Any]) -> str:
    """Why gpugov's scheduler cannot place a pod with this spec ("" = no claims)."""
    claims = spec.get("resourceClaims")
    if not claims:
        return ""
    names = [str(c.get("name")) for c in claims if isinstance(c, dict)][:4]
    return (f"spec.resourceClaims {names}: gpugov's scheduler does not allocate "
            f"DynamicResourceAllocation claims yet (planned); {INSTEAD}")
