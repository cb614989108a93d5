"""What every converter shares: the report, object names, and Kubernetes resources -> gpugov's.

gpugov's queue resources are `gpu` (GPUs), `cpu` (cores), `memory` (GiB), `gpumem` (GiB of GPU
memory) and `mig-<profile>` (instances). Each source resource name maps to one of them or is
reported as having no equivalent; amounts are read the way Kubernetes reads them, bounded
(gpugov.k8s.quantity), so a hostile value is an error naming the object and field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpugov.k8s.crds import API_VERSION
from gpugov.k8s.quantity import parse_quantity

GIB = 2**30
MAX_AMOUNT = 1e15  # beyond any real count of GPUs, cores or GiB


class ConvertError(ValueError):
    """An object that cannot be converted; names the object, field and value."""


@dataclass(frozen=True, slots=True)
class Note:
    """One thing of a source object with no (or a changed) gpugov equivalent."""

    source: str  # "<apiVersion> <Kind>/<name>"
    field: str
    note: str

    def line(self) -> str:
        return f"{self.source}: {self.field}: {self.note}"


@dataclass
class Conversion:
    objects: list[dict[str, Any]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def ident(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    ns = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
    return f"{obj.get('apiVersion')} {obj.get('kind')}/{ns}{meta.get('name')}"


def name_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise ConvertError(f"{ident(obj)}: metadata.name: {name!r}; allowed: a non-empty name")
    return name


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec", {})
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise ConvertError(f"{ident(obj)}: spec: {spec!r} is not a mapping")
    return spec


def number(obj: dict[str, Any], where: str, value: Any) -> float:
    """A plain YAML number (KAI's fields), finite and bounded."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
            value) or abs(value) > MAX_AMOUNT:
        raise ConvertError(f"{ident(obj)}: {where}: {value!r}; allowed: a number between "
                           f"-{MAX_AMOUNT:g} and {MAX_AMOUNT:g}")
    return float(value)


def _tidy(x: float) -> float:
    return float(f"{x:.6g}")


def resource(obj: dict[str, Any], where: str, name: str, amount: Any,
             notes: list[Note]) -> tuple[str, float] | None:
    """A Kubernetes resource name and quantity as a gpugov resource and amount (None: no
    equivalent, noted)."""
    try:
        q = parse_quantity(amount)
    except ValueError as e:
        raise ConvertError(f"{ident(obj)}: {where}.{name}: {e}") from None
    if q < 0:
        raise ConvertError(f"{ident(obj)}: {where}.{name}: {amount!r} is negative; "
                           "allowed: >= 0")
    if name == "cpu":
        return "cpu", _tidy(float(q))
    if name == "memory":
        return "memory", _tidy(float(q) / GIB)
    if name == "nvidia.com/gpu":
        return "gpu", _tidy(float(q))
    if name in ("nvidia.com/gpumem", "nvidia.com/total-gpumem"):  # HAMi (and its Kueue
        return "gpumem", _tidy(float(q) / 1024)  # quota resource): MiB of GPU memory
    if name.startswith("nvidia.com/mig-"):
        return "mig-" + name.removeprefix("nvidia.com/mig-"), _tidy(float(q))
    if name == "nvidia.com/total-gpucores":  # HAMi's Kueue quota: % of a GPU's cores, summed
        notes.append(Note(ident(obj), f"{where}.{name}", f"{amount} not carried over: gpugov "
                          "has no separate compute-percent quota; its gpu quota is GPUs of "
                          f"compute ({amount} % = {float(q) / 100:g} GPUs), here taken from "
                          "nvidia.com/gpu, which HAMi counts in vGPUs"))
        return None
    notes.append(Note(ident(obj), f"{where}.{name}", f"{amount} not carried over: gpugov "
                      "queues count gpu, cpu, memory, gpumem and mig-<profile> only"))
    return None


def queue(name: str, parent: str | None = None, quota: dict[str, float] | None = None,
          limit: dict[str, float] | None = None, borrowing: dict[str, float] | None = None,
          lending: dict[str, float] | None = None, weight: float | None = None,
          priority: int | None = None) -> dict[str, Any]:
    """A gpugov Queue object (only the fields given)."""
    spec: dict[str, Any] = {}
    if parent:
        spec["parent"] = parent
    for key, value in (("quota", quota), ("limit", limit), ("borrowingLimit", borrowing),
                       ("lendingLimit", lending)):
        if value is not None:
            spec[key] = dict(value)
    if weight is not None:
        spec["weight"] = weight
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": API_VERSION, "kind": "Queue", "metadata": {"name": name},
            "spec": spec}


def tenant(namespace: str, queue_name: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "Tenant", "metadata": {"name": namespace},
            "spec": {"namespaces": [namespace], "queue": queue_name}}
