"""What gpugov's own scheduler refuses of a pod's ResourceClaims (docs/dra.md).

gpugov's scheduler allocates claims of gpugov's DeviceClasses itself (`k8s/dra/allocate.py`,
`k8s/scheduler/dra_alloc.py`): queues, fair share, gangs and preemption apply to such pods.
What the pod's spec alone shows it cannot place is refused here, naming the field: a pod
asking for GPUs both through `nvidia.com/` resources and through claims (two paths for one
pod's GPUs), or a `spec.resourceClaims` that is not a list of named claims.
"""

from __future__ import annotations

from typing import Any

#: most claims one pod may name (tenant input, bounded before anything reads it)
MAX_POD_CLAIMS = 16


def refusal(spec: dict[str, Any]) -> str:
    """Why gpugov's scheduler cannot place a pod with this spec's claims ("" = it can, or the
    pod names no claim)."""
    claims = spec.get("resourceClaims")
    if not claims:
        return ""
    if not isinstance(claims, list) or len(claims) > MAX_POD_CLAIMS or \
            not all(isinstance(c, dict) and c.get("name") for c in claims):
        return (f"spec.resourceClaims: expected a list of at most {MAX_POD_CLAIMS} named "
                "claims")
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            res = (c.get("resources") or {}) if isinstance(c, dict) else {}
            for part in ("limits", "requests"):
                values = res.get(part)
                if isinstance(values, dict) and any(str(k).startswith("nvidia.com/")
                                                    for k in values):
                    return (f"spec.{key}[{c.get('name')}].resources.{part}: asks for "
                            "nvidia.com/ resources and spec.resourceClaims; a pod's GPUs come "
                            "from one path (DRA claims, or the device plugin)")
    return ""
