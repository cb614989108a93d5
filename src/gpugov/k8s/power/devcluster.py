"""`gpugov dev up` with a cluster.yaml that has `powerDomains:`: the same racks as PowerDomain
objects, so the dev cluster's scheduler budgets what the replay budgets.

Membership becomes the domain label on each node (`powerDomainLabel`, default
`gpugov.io/rack`; a node listed in a domain's `nodes` gets the label too), and each
PowerDomain selects its nodes by that label.
"""

from __future__ import annotations

from typing import Any

from gpugov.k8s.power.contract import API_VERSION, GROUP, KIND
from gpugov.model.cluster_spec import ClusterFile, power_domains
from gpugov.model.power import DEFAULT_LABEL


def with_domains(cluster: ClusterFile, nodes: list[dict[str, Any]]
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the node objects with their domain label, the PowerDomain objects to create)."""
    member, _ = power_domains(cluster)  # checked when the file was parsed
    label = cluster.power_domain_label
    for n in nodes:
        dom = member.get(n["metadata"]["name"])
        if dom is not None:
            n["metadata"].setdefault("labels", {})[label] = dom.name
    objs = []
    for d in cluster.power_domains:
        spec: dict[str, Any] = {"panelWatts": d.panel_watts, "ratio": d.ratio}
        if label != DEFAULT_LABEL:
            spec["nodeSelector"] = {"matchLabels": {label: d.name}}
        objs.append({"apiVersion": f"{GROUP}/{API_VERSION}", "kind": KIND,
                     "metadata": {"name": d.name}, "spec": spec})
    return nodes, objs
