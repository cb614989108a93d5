"""KAI-Scheduler `Queue` (scheduling.run.ai/v2) -> gpugov Queue.

KAI's fields (docs/queues/README.md of KAI-Scheduler): `resources.{gpu,cpu,memory}.{quota,
limit,overQuotaWeight}` in GPUs, millicores and MB (10^6 bytes); `quota: -1` is an unlimited
guarantee, `limit: -1` no limit, `limit` 0 or unset "no additional resources" (a cap at the
quota); `parentQueue`; `priority` (over-quota order, default 100).
"""

from __future__ import annotations

from typing import Any

from gpugov.k8s.convert.common import (
    GIB,
    ConvertError,
    Note,
    ident,
    name_of,
    number,
    queue,
    spec_of,
)

API = "scheduling.run.ai/v2"
# KAI resource -> (gpugov resource, factor from KAI's unit to gpugov's)
UNITS = {"gpu": ("gpu", 1.0), "cpu": ("cpu", 1 / 1000), "memory": ("memory", 1e6 / GIB)}
KNOWN = {"displayName", "parentQueue", "priority", "resources", "preemptMinRuntime",
         "reclaimMinRuntime"}


def convert(obj: dict[str, Any], notes: list[Note]) -> list[dict[str, Any]]:
    name = name_of(obj)
    spec = spec_of(obj)
    src = ident(obj)
    for key in spec:
        if key not in KNOWN:
            raise ConvertError(f"{src}: spec.{key}: not a field of {API} Queue; allowed: "
                               f"{', '.join(sorted(KNOWN))}")
    resources = spec.get("resources") or {}
    if not isinstance(resources, dict):
        raise ConvertError(f"{src}: spec.resources: {resources!r} is not a mapping")
    quota: dict[str, float] = {}
    limit: dict[str, float] = {}
    capped = False
    weights: dict[str, float] = {}
    for res, body in resources.items():
        if res not in UNITS:
            raise ConvertError(f"{src}: spec.resources.{res}: not a KAI queue resource; "
                               "allowed: gpu, cpu, memory")
        if not isinstance(body, dict):
            raise ConvertError(f"{src}: spec.resources.{res}: {body!r} is not a mapping")
        for key in body:
            if key not in ("quota", "limit", "overQuotaWeight"):
                raise ConvertError(f"{src}: spec.resources.{res}.{key}: not a field; allowed:"
                                   " quota, limit, overQuotaWeight")
        ours, factor = UNITS[res]
        at = f"spec.resources.{res}"
        q = number(obj, f"{at}.quota", body.get("quota", 0))
        lim = number(obj, f"{at}.limit", body.get("limit", 0))
        if "overQuotaWeight" in body:
            weights[res] = number(obj, f"{at}.overQuotaWeight", body["overQuotaWeight"])
        if q == -1:
            notes.append(Note(src, f"{at}.quota", "-1 (an unlimited guarantee) has no gpugov "
                              "equivalent: no quota written (a parent takes its children's sum;"
                              " a leaf is guaranteed nothing)"))
        elif q < 0:
            raise ConvertError(f"{src}: {at}.quota: {q:g}; allowed: -1 or >= 0")
        else:
            quota[ours] = round(q * factor, 6)
        if lim == -1:
            continue  # no limit
        if lim < 0:
            raise ConvertError(f"{src}: {at}.limit: {lim:g}; allowed: -1 or >= 0")
        if lim == 0 and q != -1:
            capped = True
            limit[ours] = quota.get(ours, 0.0)  # KAI: 0/unset = nothing beyond the quota
        elif lim > 0:
            limit[ours] = round(lim * factor, 6)
    if capped:
        notes.append(Note(src, "spec.resources.*.limit", "0 or unset: KAI allows nothing "
                          "beyond the quota (its scheduler checks requests against this "
                          "limit), written as limit = quota; set -1 for no limit"))
    weight = weights.get("gpu", next(iter(weights.values()), None))
    if len(set(weights.values())) > 1:
        notes.append(Note(src, "spec.resources.*.overQuotaWeight", f"per-resource weights "
                          f"{weights} become one queue weight, the gpu one ({weight:g})"))
    if "displayName" in spec:
        notes.append(Note(src, "spec.displayName", "no gpugov equivalent (the queue keeps its "
                          "metadata.name)"))
    for key in ("preemptMinRuntime", "reclaimMinRuntime"):
        if key in spec:
            notes.append(Note(src, f"spec.{key}", "per-queue minimum runtimes have no gpugov "
                              "equivalent: gpugov's is per priority class (PriorityPolicy "
                              "minRuntime)"))
    # KAI's default is 100: written out so unset and set queues keep their order
    priority = int(number(obj, "spec.priority", spec.get("priority", 100)))
    parent = spec.get("parentQueue")
    if parent is not None and not isinstance(parent, str):
        raise ConvertError(f"{src}: spec.parentQueue: {parent!r} is not a queue name")
    return [queue(name, parent or None, quota, limit or None, weight=weight,
                  priority=priority)]
