"""One reconcile cycle when a source is down: what can be read is still served, the failure
is counted, nothing raises."""

from __future__ import annotations

import asyncio

import obs_prometheus
from observe_data import device, node, pod
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpugov.observe.cluster import ClusterError
from gpugov.observe.promapi import Prometheus
from gpugov.observe.reconciler import Options, Reconciler


def _scrape(rec: Reconciler) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(generate_latest(rec.registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_prometheus_down_keeps_declared_and_allocated_and_kubernetes_down_keeps_last() -> None:
    url = f"http://127.0.0.1:{obs_prometheus.free_port()}"
    rec = Reconciler(Options(None, url, "127.0.0.1", 0))
    objects = ([pod("p", request={"count": 1}, devices=[device("GPU-1")])],
               [node("node-1", ["GPU-1"])])
    up = {"k8s": True}

    async def source() -> tuple[list[dict], list[dict]]:
        if not up["k8s"]:
            raise ClusterError("cannot list from the Kubernetes API: connection refused")
        return objects

    async def cycles() -> None:
        async with Prometheus(url) as prom:
            await rec.cycle(source, prom)
            up["k8s"] = False
            await rec.cycle(source, prom)

    asyncio.run(cycles())
    got = _scrape(rec)
    assert [s.value for s in got["gpugov_allocated_gpus"]] == [1]  # kept from the last read
    assert "gpugov_used_gpus" not in got  # unknown, not zero
    assert "gpugov_node_agent_missing" not in got  # no measurement: not blamed on the node
    errors = {s.labels["reason"]: s.value for s in got["gpugov_reconciler_errors_total"]}
    assert errors == {"prometheus-unreachable": 2, "kubernetes-unreachable": 1}
