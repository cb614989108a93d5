"""Kueue `ClusterQueue`, `Cohort` and `LocalQueue` (kueue.x-k8s.io/v1beta1 and v1beta2) ->
gpugov Queues and Tenants.

A ClusterQueue's `nominalQuota`, `borrowingLimit` and `lendingLimit` per resource (summed over
its flavors: gpugov has no flavors) become quota, borrowingLimit and lendingLimit; its cohort
(`cohort` in v1beta1, `cohortName` in v1beta2) becomes its parent Queue; without a cohort
Kueue never lets it borrow, so its limit is its quota. `fairSharing.weight` is the weight. A
LocalQueue maps its namespace to its ClusterQueue: a Tenant.
"""

from __future__ import annotations

from typing import Any

from gpugov.k8s.convert.common import (
    ConvertError,
    Note,
    ident,
    name_of,
    queue,
    resource,
    spec_of,
    tenant,
)
from gpugov.k8s.quantity import parse_quantity

APIS = ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")
COHORT_FIELD = {"kueue.x-k8s.io/v1beta1": "cohort", "kueue.x-k8s.io/v1beta2": "cohortName"}
CQ_KNOWN = {"resourceGroups", "cohort", "cohortName", "queueingStrategy", "namespaceSelector",
            "flavorFungibility", "preemption", "admissionChecks", "admissionChecksStrategy",
            "stopPolicy", "fairSharing", "admissionScope", "concurrentAdmissionPolicy"}
NOT_CARRIED = ("queueingStrategy", "flavorFungibility", "preemption", "admissionChecks",
               "admissionChecksStrategy", "stopPolicy", "admissionScope",
               "concurrentAdmissionPolicy")


def _groups(obj: dict[str, Any], spec: dict[str, Any], notes: list[Note]
            ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(nominal, borrowingLimit, lendingLimit) per gpugov resource, summed over flavors."""
    src = ident(obj)
    nominal: dict[str, float] = {}
    borrow: dict[str, float] = {}
    lend: dict[str, float] = {}
    flavors: dict[str, set[str]] = {}
    groups = spec.get("resourceGroups") or []
    if not isinstance(groups, list):
        raise ConvertError(f"{src}: spec.resourceGroups: {groups!r} is not a list")
    for gi, group in enumerate(groups):
        flavor_list = group.get("flavors") if isinstance(group, dict) else None
        if not isinstance(flavor_list, list):
            raise ConvertError(f"{src}: spec.resourceGroups[{gi}].flavors: {flavor_list!r:.60}"
                               " is not a list of flavors")
        for fi, flavor in enumerate(flavor_list):
            res_list = flavor.get("resources") if isinstance(flavor, dict) else None
            if not isinstance(res_list, list):
                raise ConvertError(f"{src}: spec.resourceGroups[{gi}].flavors[{fi}].resources:"
                                   f" {res_list!r:.60} is not a list of resources")
            fname = flavor.get("name", f"#{fi}")
            for ri, res in enumerate(res_list):
                at = f"spec.resourceGroups[{gi}].flavors[{fi}].resources[{ri}]"
                if not isinstance(res, dict) or not isinstance(res.get("name"), str):
                    raise ConvertError(f"{src}: {at}: {res!r}; allowed: name and nominalQuota")
                for key, into in (("nominalQuota", nominal), ("borrowingLimit", borrow),
                                  ("lendingLimit", lend)):
                    if key not in res:
                        continue
                    got = resource(obj, f"{at}.{key}", res["name"], res[key],
                                   notes if key == "nominalQuota" else [])
                    if got:
                        into[got[0]] = round(into.get(got[0], 0.0) + got[1], 6)
                        flavors.setdefault(got[0], set()).add(str(fname))
    for r, names in sorted(flavors.items()):
        if len(names) > 1:
            notes.append(Note(src, "spec.resourceGroups", f"{r}: flavors "
                              f"{', '.join(sorted(names))} summed into one amount (gpugov "
                              "places across the whole pool; pin nodes with the pod's "
                              "nodeSelector)"))
    return nominal, borrow, lend


def convert_cluster_queue(obj: dict[str, Any], notes: list[Note]) -> list[dict[str, Any]]:
    name = name_of(obj)
    spec = spec_of(obj)
    src = ident(obj)
    api = obj["apiVersion"]
    for key in spec:
        if key not in CQ_KNOWN:
            raise ConvertError(f"{src}: spec.{key}: not a field of {api} ClusterQueue")
    other = "cohortName" if COHORT_FIELD[api] == "cohort" else "cohort"
    if other in spec:
        raise ConvertError(f"{src}: spec.{other}: not a field of {api} ClusterQueue; "
                           f"{api} spells it {COHORT_FIELD[api]}")
    cohort = spec.get(COHORT_FIELD[api])
    if cohort is not None and not isinstance(cohort, str):
        raise ConvertError(f"{src}: spec.{COHORT_FIELD[api]}: {cohort!r} is not a name")
    nominal, borrow, lend = _groups(obj, spec, notes)
    weight = None
    fair = spec.get("fairSharing") or {}
    if isinstance(fair, dict) and "weight" in fair:
        try:
            weight = float(parse_quantity(fair["weight"]))
        except ValueError as e:
            raise ConvertError(f"{src}: spec.fairSharing.weight: {e}") from None
    sel = spec.get("namespaceSelector")
    if sel not in (None, {}):
        notes.append(Note(src, "spec.namespaceSelector", f"{sel!r}: gpugov maps namespaces to "
                          "queues with Tenants (one per LocalQueue's namespace here); the "
                          "selector is not carried over"))
    for key in NOT_CARRIED:
        if key in spec:
            notes.append(Note(src, f"spec.{key}", "no gpugov equivalent; not carried over "
                              "(gpugov's preemption follows priority classes and quotas)"
                              if key == "preemption" else "no gpugov equivalent; not carried "
                              "over"))
    limit = None
    if not cohort:
        limit = dict(nominal)
        notes.append(Note(src, f"spec.{COHORT_FIELD[api]}", "none: Kueue lets it use only its "
                          "nominal quota, written as limit = quota"))
    return [queue(name, cohort or None, nominal, limit, borrow or None, lend or None,
                  weight=weight)]


def convert_cohort(obj: dict[str, Any], notes: list[Note]) -> list[dict[str, Any]]:
    """A Cohort object (v1beta2; v1alpha1's parent field is `parentName`) -> a parent Queue."""
    name = name_of(obj)
    spec = spec_of(obj)
    nominal, borrow, lend = _groups(obj, spec, notes)
    parent = spec.get("parentName")
    return [queue(name, parent if isinstance(parent, str) and parent else None,
                  nominal or None, None, borrow or None, lend or None)]


def convert_local_queue(obj: dict[str, Any], notes: list[Note],
                        namespace: str = "default") -> list[dict[str, Any]]:
    """`namespace`: where `kubectl apply` would put a LocalQueue that names none."""
    name_of(obj)
    spec = spec_of(obj)
    src = ident(obj)
    ns = (obj.get("metadata") or {}).get("namespace")
    cq = spec.get("clusterQueue")
    if ns is None:
        ns = namespace
        notes.append(Note(src, "metadata.namespace", f"none: the namespace it is applied in, "
                          f"taken as {namespace!r} (gpugov crd convert --namespace)"))
    if not isinstance(ns, str) or not ns:
        raise ConvertError(f"{src}: metadata.namespace: {ns!r}; a LocalQueue lives in the "
                           "namespace it serves")
    if not isinstance(cq, str) or not cq:
        raise ConvertError(f"{src}: spec.clusterQueue: {cq!r}; allowed: a ClusterQueue name")
    for key in spec:
        if key != "clusterQueue":
            notes.append(Note(src, f"spec.{key}", "no gpugov equivalent; not carried over"))
    return [tenant(ns, cq)]
