"""Power as the reconciler exports it: per PowerDomain the panel, the budget, what the
scheduler admitted and what the GPUs measured; per pod the GPU power it is charged with.

Measured draw comes from the node agents' `gpugov.io/power` (k8s/power/contract.py), summed
over the domain's nodes with the scheduler's own membership rules (k8s/power/domains.py), so
the reconciler and the scheduler agree on which node is in which rack. Admitted draw is the
scheduler's (the PowerDomain's `status.admittedWatts`): the engine's expected draw.

A pod is charged its share of each of its GPUs' measured draw: the GPU's draw split over the
pods on it in proportion to their compute milli (a whole GPU: all of it). `gpugov report`
integrates this series into kWh per tenant (observe/chargeback.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpugov.k8s.power.contract import POWER, DevicePower, decode_power
from gpugov.k8s.power.domains import assign, measured_w
from gpugov.observe import names as m
from gpugov.observe.views import PodRecord


def node_power(nodes: Iterable[Mapping[str, Any]]) -> tuple[dict[str, list[DevicePower]],
                                                             list[str]]:
    """Each node's published GPU draw, and problems (an annotation gpugov cannot read)."""
    out: dict[str, list[DevicePower]] = {}
    problems = []
    for n in nodes:
        meta = n.get("metadata") or {}
        name = str(meta.get("name", ""))
        text = (meta.get("annotations") or {}).get(POWER)
        try:
            got = decode_power(text)
        except ValueError as e:
            problems.append(f"node {name}: {e}; its draw is not counted")
            continue
        if got:
            out[name] = got
    return out, problems


def domain_rows(domains: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]],
                power: Mapping[str, Sequence[DevicePower]]) -> list[dict[str, Any]]:
    """Per domain: name, panel, budget, admitted (None: not written yet), measured."""
    labels = [(str((n.get("metadata") or {}).get("name", "")),
               (n.get("metadata") or {}).get("labels") or {}) for n in nodes]
    _, views = assign(domains, labels)
    measured = measured_w(views, power)
    status = {str((d.get("metadata") or {}).get("name", "")): d.get("status") or {}
              for d in domains}
    rows = []
    for v in views:
        if v.domain is None:
            continue
        admitted = status.get(v.name, {}).get("admittedWatts")
        rows.append({"domain": v.name, "panel": v.domain.panel_w, "budget": v.domain.budget_w,
                     "admitted": admitted if isinstance(admitted, int | float) else None,
                     "measured": measured.get(v.name)})
    return rows


def pod_watts(pods: Iterable[PodRecord], power: Mapping[str, Sequence[DevicePower]]
              ) -> dict[tuple[str, str, str, str], float]:
    """(namespace, pod, tenant, queue) -> GPU watts charged to it (see module doc)."""
    running = [p for p in pods if p.running and p.node and p.devices]
    on_device: dict[tuple[str, int], int] = {}
    for p in running:
        for d in p.devices:
            on_device[(p.node, d.index)] = on_device.get((p.node, d.index), 0) + max(d.milli, 1)
    out: dict[tuple[str, str, str, str], float] = {}
    for p in running:
        draws = {d.index: d.draw_w for d in power.get(p.node or "", ())}
        watts = 0.0
        for d in p.devices:
            draw = draws.get(d.index)
            if draw is not None:
                watts += draw * max(d.milli, 1) / on_device[(p.node, d.index)]
        if draws:
            out[(p.namespace, p.name, p.tenant, p.queue)] = round(watts, 3)
    return out


class PowerMetrics(Collector):
    """The series of this module; `update` replaces them each reconcile cycle."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.pods: dict[tuple[str, str, str, str], float] = {}

    def update(self, domains: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]],
               pods: Iterable[PodRecord]) -> list[str]:
        power, problems = node_power(nodes)
        self.rows = domain_rows(domains, nodes, power)
        self.pods = pod_watts(pods, power)
        return problems

    def collect(self) -> Iterator[Metric]:
        fams = {name: GaugeMetricFamily(name, doc, labels=["domain"]) for name, doc in (
            (m.POWER_PANEL, "the power domain's panel rating, W"),
            (m.POWER_BUDGET, "what admitted draw may reach (ratio x panel), W"),
            (m.POWER_ADMITTED, "expected draw of the admitted pods and idle GPUs (the "
                               "scheduler's state), W"),
            (m.POWER_MEASURED, "measured GPU draw of the domain's nodes, W"))}
        for r in self.rows:
            fams[m.POWER_PANEL].add_metric([r["domain"]], r["panel"])
            fams[m.POWER_BUDGET].add_metric([r["domain"]], r["budget"])
            if r["admitted"] is not None:
                fams[m.POWER_ADMITTED].add_metric([r["domain"]], r["admitted"])
            if r["measured"] is not None:
                fams[m.POWER_MEASURED].add_metric([r["domain"]], r["measured"])
        yield from fams.values()
        pod = GaugeMetricFamily(m.POD_GPU_POWER, "GPU power charged to the pod (its share of "
                                "its GPUs' measured draw), W",
                                labels=["namespace", "pod", "tenant", "queue"])
        for labels, watts in sorted(self.pods.items()):
            pod.add_metric(list(labels), watts)
        yield pod
