"""A pod's GPU containers in the order the kubelet admits them, and what can run at once.

Shared by the webhook (`webhook.admission.pod_request`: the pod's one request is charged what
its GPU containers can hold at the same time) and the device plugin (`node.deviceplugin.
handshake`: which container of a pod an Allocate is for, and which of the pod's devices it may
take). Kubernetes' own rule (KEP-753, `resourcehelper.PodRequests`): init containers run one
after another before the app containers; a restartable init container (`restartPolicy:
Always`, a sidecar) keeps running beside everything after it. So a pod holds at most

    max(sum(app) + sum(sidecars), max over init i of (init_i + sum(sidecars before i)))

and the kubelet's device manager hands a regular init container's devices on to the
containers after it (sidecars and app containers keep theirs: they run together).

Pure functions over pod dicts; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["init", "sidecar", "app"]

#: most GPU containers one pod may list (bounds the per-container work on hostile specs)
MAX_GPU_CONTAINERS = 64


@dataclass(frozen=True, slots=True)
class Step:
    """One container that asks for a resource, in admission order."""

    name: str
    kind: Kind
    size: int  # devices of the resource it asks for

    @property
    def holds(self) -> bool:
        """Runs beside the containers after it (its devices are not handed on)."""
        return self.kind != "init"


def containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, Kind, Mapping[str, Any]]]:
    """(name, kind, container) of every container, init containers first (admission order)."""
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        return
    for key in ("initContainers", "containers"):
        items = spec.get(key) or []
        if not isinstance(items, list):
            continue
        for c in items:
            if not isinstance(c, Mapping):
                continue
            kind: Kind = "app"
            if key == "initContainers":
                kind = "sidecar" if c.get("restartPolicy") == "Always" else "init"
            yield str(c.get("name", "?")), kind, c


def effective(steps: Iterable[tuple[Kind, int]]) -> int:
    """What the containers can hold at once (the rule in the module docstring)."""
    app = sidecars = init_max = 0
    for kind, n in steps:
        if kind == "app":
            app += n
        elif kind == "sidecar":
            sidecars += n
            init_max = max(init_max, sidecars)
        else:
            init_max = max(init_max, n + sidecars)
    return max(app + sidecars, init_max)


def _size(value: Any) -> int:
    """An extended resource's count as the kubelet reads it (a whole number; else 0)."""
    text = str(value).strip()
    return int(text) if text.isdigit() and len(text) <= 6 else 0


def resource_steps(pod: Mapping[str, Any], resource: str) -> list[Step]:
    """The containers that ask for `resource` (limits, else requests), in admission order:
    the sequence of Allocate calls the kubelet makes for it."""
    out: list[Step] = []
    for name, kind, c in containers(pod):
        res = c.get("resources") or {}
        if not isinstance(res, Mapping):
            continue
        limits = res.get("limits") if isinstance(res.get("limits"), Mapping) else {}
        requests = res.get("requests") if isinstance(res.get("requests"), Mapping) else {}
        value = limits.get(resource, requests.get(resource))
        n = _size(value) if value is not None else 0
        if n > 0:
            out.append(Step(name, kind, n))
    return out
