"""PowerDomain objects -> the state's power domains, and the status the scheduler writes.

Membership: a PowerDomain's `spec.nodeSelector` (label selector), or, without one, nodes
labelled `gpugov.io/rack=<name>`. A node two domains select is a conflict: it is placed in
the domain with the smaller budget (the safer answer) and both domains say so in a
`NodeConflict` condition; a domain that selects no node says `NoNodes`. An object whose spec
the CRD's validation would refuse (written before the CRD, or by a client that skipped it)
is ignored with an `Invalid` condition naming the field, never guessed at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpugov.k8s.power.capping import CapDevice, Key, plan_caps
from gpugov.k8s.power.contract import DevicePower
from gpugov.k8s.webhook.tenancy import selector_matches
from gpugov.model.power import DEFAULT_LABEL, DEFAULT_RATIO, PowerDomain, domain_problems


@dataclass
class DomainView:
    """One PowerDomain as the scheduler understands it."""

    name: str
    domain: PowerDomain | None
    selector: dict[str, Any] | None
    problems: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


def parse_domain(obj: Mapping[str, Any]) -> DomainView:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        return DomainView(name, None, None, ["spec: expected an object"])
    panel, ratio = spec.get("panelWatts"), spec.get("ratio", DEFAULT_RATIO)
    problems = [f"spec.{p}" for p in domain_problems(name, panel, ratio)
                if not p.startswith("name")]
    selector = spec.get("nodeSelector")
    if selector is not None and not isinstance(selector, dict):
        problems.append(f"spec.nodeSelector: {selector!r} is not a label selector")
    if problems:
        return DomainView(name, None, None, problems)
    return DomainView(name, PowerDomain(name, float(panel), float(ratio)), selector)


def assign(objs: Sequence[Mapping[str, Any]], nodes: Sequence[tuple[str, Mapping[str, str]]],
           label: str = DEFAULT_LABEL) -> tuple[dict[str, PowerDomain], list[DomainView]]:
    """(node -> its domain, every domain's view with members and problems)."""
    views = sorted((parse_domain(o) for o in objs), key=lambda v: v.name)
    member: dict[str, DomainView] = {}
    for name, labels in nodes:
        chosen = []
        for v in views:
            if v.domain is None:
                continue
            if v.selector is not None:
                ok = selector_matches(v.selector, labels)
            else:
                ok = labels.get(label) == v.name
            if ok:
                chosen.append(v)
        if len(chosen) > 1:
            names = ", ".join(v.name for v in chosen)
            for v in chosen:
                v.conflicts.append(f"node {name} is selected by {names}")
            chosen.sort(key=lambda v: (v.domain.budget_w, v.name))  # type: ignore[union-attr]
        if chosen:
            member[name] = chosen[0]
            chosen[0].nodes.append(name)
    out = {n: v.domain for n, v in member.items() if v.domain is not None}
    return out, views


def measured_w(views: Sequence[DomainView], power: Mapping[str, Sequence[DevicePower]]
               ) -> dict[str, float | None]:
    """Sum of the members' published GPU draw per domain (None: no member published)."""
    out: dict[str, float | None] = {}
    for v in views:
        got = [d.draw_w for n in v.nodes for d in power.get(n, ())]
        out[v.name] = round(sum(got), 1) if any(n in power for n in v.nodes) else None
    return out


def domain_caps(view: DomainView, power: Mapping[str, Sequence[DevicePower]],
                priorities: Mapping[Key, int], current: Mapping[Key, float]
                ) -> dict[Key, float]:
    """The capping plan of one domain from its members' measurements."""
    if view.domain is None:
        return {}
    devices = []
    for n in view.nodes:
        for d in power.get(n, ()):
            top = d.max_w or d.limit_w or d.draw_w
            devices.append(CapDevice(n, d.index, priorities.get((n, d.index), -(2**31)),
                                     d.draw_w, d.min_w or 0.0, top))
    return plan_caps(view.domain.budget_w, devices, current)


def status_doc(view: DomainView, admitted_mw: int | None, measured: float | None,
               caps: Mapping[Key, float]) -> dict[str, Any]:
    """The PowerDomain's status (conditions: Ready, or what is wrong)."""
    doc: dict[str, Any] = {"nodes": len(view.nodes)}
    conditions = []
    if view.domain is None:
        conditions.append(("Invalid", "; ".join(view.problems)))
    else:
        budget = view.domain.budget_w
        doc["budgetWatts"] = round(budget, 1)
        if admitted_mw is not None:
            doc["admittedWatts"] = round(admitted_mw / 1000, 1)
            doc["headroomWatts"] = round(budget - admitted_mw / 1000, 1)
        if measured is not None:
            doc["measuredWatts"] = measured
        if not view.nodes:
            conditions.append(("NoNodes", "no node matches the domain's nodeSelector "
                               f"(or, without one, the label {DEFAULT_LABEL}={view.name})"))
        if view.conflicts:
            conditions.append(("NodeConflict", "; ".join(view.conflicts)[:1000] +
                               "; a node belongs to one domain (it is counted in the one "
                               "with the smaller budget)"))
        if measured is not None and measured > budget:
            conditions.append(("OverBudget", f"measured {measured:.0f} W > budget "
                               f"{budget:.0f} W; GPUs are capped, lowest priority first"))
    caps_doc: dict[str, dict[str, float]] = {}
    for (node, index), watts in sorted(caps.items()):
        caps_doc.setdefault(node, {})[str(index)] = watts
    doc["caps"] = caps_doc
    doc["conditions"] = [{"type": "Ready", "status": "False" if conditions else "True",
                          "reason": conditions[0][0] if conditions else "Ready",
                          "message": " | ".join(m for _, m in conditions)[:2000]}]
    return doc
