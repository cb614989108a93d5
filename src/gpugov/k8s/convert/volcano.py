"""Volcano `Queue` (scheduling.volcano.sh/v1beta1) -> gpugov Queue.

`deserved` (the capacity plugin's share) becomes the quota, else `guarantee.resource`;
`capability` the limit; `weight`, `priority` and `parent` carry over. The proportion plugin's
hierarchy annotations (`volcano.sh/hierarchy: root/eng/prod` with
`volcano.sh/hierarchy-weights: 1/2/8`) become parent queues named by their path
(`root`, `root-eng`) with those weights. A `parent` Volcano creates implicitly (`root`) is
created too.
"""

from __future__ import annotations

from typing import Any

from gpugov.k8s.convert.common import (
    ConvertError,
    Note,
    ident,
    name_of,
    number,
    queue,
    resource,
    spec_of,
)

API = "scheduling.volcano.sh/v1beta1"
KNOWN = {"weight", "capability", "reclaimable", "extendClusters", "guarantee", "affinity",
         "type", "parent", "deserved", "priority", "dequeueStrategy"}
HIERARCHY = "volcano.sh/hierarchy"
HIERARCHY_WEIGHTS = "volcano.sh/hierarchy-weights"


def _resources(obj: dict[str, Any], where: str, value: Any,
               notes: list[Note]) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConvertError(f"{ident(obj)}: {where}: {value!r} is not a resource list")
    out = {}
    for name, amount in value.items():
        got = resource(obj, where, str(name), amount, notes)
        if got:
            out[got[0]] = got[1]
    return out


def convert(obj: dict[str, Any], notes: list[Note]) -> list[dict[str, Any]]:
    name = name_of(obj)
    spec = spec_of(obj)
    src = ident(obj)
    for key in spec:
        if key not in KNOWN:
            raise ConvertError(f"{src}: spec.{key}: not a field of {API} Queue; allowed: "
                               f"{', '.join(sorted(KNOWN))}")
    deserved = _resources(obj, "spec.deserved", spec.get("deserved"), notes)
    guarantee_body = spec.get("guarantee") or {}
    if not isinstance(guarantee_body, dict):
        raise ConvertError(f"{src}: spec.guarantee: {guarantee_body!r} is not a mapping")
    guarantee = _resources(obj, "spec.guarantee.resource", guarantee_body.get("resource"),
                           notes)
    quota = dict(guarantee)
    quota.update(deserved)
    if deserved and guarantee and any(guarantee.get(r, 0) > v for r, v in deserved.items()):
        notes.append(Note(src, "spec.guarantee", "a guarantee above deserved: the quota is "
                          "deserved (gpugov has one guaranteed amount)"))
    elif deserved and guarantee:
        notes.append(Note(src, "spec.guarantee", "gpugov has one guaranteed amount: the quota "
                          "is deserved; the reservation below it is not kept"))
    limit = _resources(obj, "spec.capability", spec.get("capability"), notes)
    weight = number(obj, "spec.weight", spec["weight"]) if "weight" in spec else None
    priority = int(number(obj, "spec.priority", spec["priority"])) if "priority" in spec \
        else None
    if "reclaimable" in spec:
        notes.append(Note(src, "spec.reclaimable", f"{spec['reclaimable']!r}: gpugov always "
                          "reclaims borrowed resources for a queue under its quota "
                          "(lendingLimit caps what a queue lends)"))
    for key in ("extendClusters", "affinity", "type", "dequeueStrategy"):
        if key in spec:
            notes.append(Note(src, f"spec.{key}", "no gpugov equivalent; not carried over"))
    parent = spec.get("parent")
    if parent is not None and not isinstance(parent, str):
        raise ConvertError(f"{src}: spec.parent: {parent!r} is not a queue name")
    out: list[dict[str, Any]] = []
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if not isinstance(annotations, dict):
        raise ConvertError(f"{src}: metadata.annotations: {annotations!r:.60} is not a mapping")
    if HIERARCHY in annotations:
        parent, out, leaf_weight = _hierarchy(obj, name, annotations, parent, notes)
        weight = leaf_weight if leaf_weight is not None else weight
    elif parent == "root":
        out.append(queue("root"))
    out.append(queue(name, parent or None, quota, limit or None, weight=weight,
                     priority=priority))
    return out


def _hierarchy(obj: dict[str, Any], name: str, annotations: dict[str, Any],
               parent: str | None, notes: list[Note]
               ) -> tuple[str, list[dict[str, Any]], float | None]:
    """Parent queues for `root/eng/prod` (the last segment is this queue), and this queue's
    weight in the hierarchy (the last of hierarchy-weights)."""
    src = ident(obj)
    path = str(annotations[HIERARCHY]).strip("/").split("/")
    weights = str(annotations.get(HIERARCHY_WEIGHTS, "")).strip("/").split("/")
    if parent:
        raise ConvertError(f"{src}: spec.parent and metadata.annotations.{HIERARCHY} both "
                           "name a parent; allowed: one of them")
    if len(path) < 2 or any(not p for p in path):
        raise ConvertError(f"{src}: metadata.annotations.{HIERARCHY}: {annotations[HIERARCHY]!r}"
                           "; allowed: a path like root/eng/prod")
    if annotations.get(HIERARCHY_WEIGHTS) is not None and len(weights) != len(path):
        raise ConvertError(f"{src}: metadata.annotations.{HIERARCHY_WEIGHTS}: "
                           f"{annotations[HIERARCHY_WEIGHTS]!r} has {len(weights)} levels, the "
                           f"hierarchy {len(path)}")
    levels: list[float | None] = [None] * len(path)
    if annotations.get(HIERARCHY_WEIGHTS) is not None:
        for k, text in enumerate(weights):
            try:
                levels[k] = number(obj, f"metadata.annotations.{HIERARCHY_WEIGHTS}", float(text))
            except ValueError:
                raise ConvertError(f"{src}: metadata.annotations.{HIERARCHY_WEIGHTS}: "
                                   f"{text!r} is not a number") from None
    parents = [queue("-".join(path[:depth]), "-".join(path[:depth - 1]) or None,
                     weight=levels[depth - 1]) for depth in range(1, len(path))]
    notes.append(Note(src, f"metadata.annotations.{HIERARCHY}", f"parent queues "
                      f"{', '.join(p['metadata']['name'] for p in parents)} created for the "
                      f"path; the leaf is {name}"))
    return "-".join(path[:-1]), parents, levels[-1]
