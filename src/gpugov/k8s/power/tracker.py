"""What the scheduler keeps about power: PowerDomain objects, the nodes' published draw,
and the statuses to write (admitted from the one state, measured from the agents, caps).

The scheduler is the component that computes domain-level draw: it already watches every
node (so it reads each agent's `gpugov.io/power`) and holds the state whose admitted draw
is the other half of the status; node agents read only the caps of their own node.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpugov.k8s.power.capping import Key
from gpugov.k8s.power.contract import POWER, DevicePower, decode_power
from gpugov.k8s.power.domains import DomainView, assign, domain_caps, measured_w, status_doc
from gpugov.model.cluster import ClusterState, NodeSpec

log = logging.getLogger("gpugov.scheduler")


class PowerTracker:
    def __init__(self) -> None:
        self.objs: dict[str, dict[str, Any]] = {}
        self.power: dict[str, list[DevicePower]] = {}
        self.views: list[DomainView] = []
        self.caps: dict[str, dict[Key, float]] = {}
        self.written: dict[str, dict[str, Any]] = {}
        self.errors: dict[str, str] = {}  # node -> why its gpugov.io/power was not read

    # -- watch events ----------------------------------------------------------------------
    def set_object(self, obj: Mapping[str, Any]) -> bool:
        """A PowerDomain was added or changed; True when its spec changed (a rebuild)."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        old = self.objs.get(name)
        self.objs[name] = dict(obj)
        if obj.get("status") and name not in self.written:
            self.written[name] = obj["status"]  # what a previous leader wrote
        return old is None or old.get("spec") != obj.get("spec")

    def delete_object(self, name: str) -> bool:
        self.written.pop(name, None)
        self.caps.pop(name, None)
        return self.objs.pop(name, None) is not None

    def set_node(self, name: str, annotations: Mapping[str, str] | None) -> None:
        text = (annotations or {}).get(POWER)
        try:
            got = decode_power(text)
        except ValueError as e:
            if self.errors.get(name) != str(e):
                log.warning("node %s: %s; its draw is not counted", name, e)
            self.errors[name] = str(e)
            self.power.pop(name, None)
            return
        self.errors.pop(name, None)
        if got:
            self.power[name] = got
        else:
            self.power.pop(name, None)

    def delete_node(self, name: str) -> None:
        self.power.pop(name, None)
        self.errors.pop(name, None)

    # -- rebuild ---------------------------------------------------------------------------
    def apply(self, specs: Sequence[NodeSpec]) -> list[NodeSpec]:
        """The nodes with their power domain filled in."""
        member, self.views = assign(list(self.objs.values()),
                                    [(s.name, dict(s.labels)) for s in specs])
        out = []
        for s in specs:
            dom = member.get(s.name)
            if dom is None:
                out.append(s)
                continue
            # the caps the capping loop set are not counted as room: admission would then
            # chase its own emergency caps (admit more, draw more, cap more)
            out.append(dataclasses.replace(s, power_domain=dom))
        return out

    # -- status ----------------------------------------------------------------------------
    def statuses(self, state: ClusterState | None, priorities: Mapping[Key, int],
                 partial: bool = False) -> dict[str, dict[str, Any]]:
        """Per PowerDomain whose status changed since written: the doc to merge. A
        scheduler that manages part of the cluster (`partial`: a --node-selector) writes
        only the domains holding some of its nodes, so two schedulers never fight over one
        domain's status."""
        admitted = state.domain_draw_mw() if state is not None else {}
        measured = measured_w(self.views, self.power)
        out = {}
        for v in self.views:
            if partial and not v.nodes:
                continue
            caps = domain_caps(v, self.power, priorities, self.caps.get(v.name, {}))
            self.caps[v.name] = caps
            got = admitted.get(v.name)
            doc = status_doc(v, got[0] if got else None, measured.get(v.name), caps)
            if _comparable(self.written.get(v.name)) != _comparable(doc):
                out[v.name] = doc
        return out

    def status_written(self, name: str, doc: dict[str, Any]) -> None:
        self.written[name] = doc


def _comparable(doc: Mapping[str, Any] | None) -> Any:
    """A status without the conditions' timestamps."""
    if doc is None:
        return None
    conds = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
             for c in doc.get("conditions") or []]
    return {**doc, "conditions": conds}


def device_priorities(pods: Iterable[Any]) -> dict[Key, int]:
    """(node, device index) -> the highest priority of the live pods on it (PodInfo-like
    objects with `node`, `done`, `priority` and `allocation`)."""
    out: dict[Key, int] = {}
    for p in pods:
        if p.done or not p.node or p.allocation is None:
            continue
        for d in p.allocation.devices:
            key = (p.node, d.index)
            out[key] = max(out.get(key, p.priority), p.priority)
    return out
