"""The reconciler's exposition: names of docs/contracts.md, bounded labels, counters."""

from __future__ import annotations

import pytest
from observe_data import MIB, device, node, pod
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpugov.observe import names as m
from gpugov.observe.metrics import ReconcilerMetrics
from gpugov.observe.reconciler import records
from gpugov.observe.views import DeviceUse, reconcile


def _scrape(metrics: ReconcilerMetrics) -> dict[str, list]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(metrics)
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _rec(n_pods: int = 2, busy: float = 0.0):
    pods = [pod(f"p{i}", request={"count": 1, "memoryMiB": 81920},
                devices=[device(f"GPU-{i}", i)])
            for i in range(n_pods)]
    uses = [DeviceUse("team-a", f"p{i}", f"GPU-{i}", 1024 * MIB, busy) for i in range(n_pods)]
    recs, nodes, _ = records(pods, [node("node-1", [f"GPU-{i}" for i in range(n_pods)])])
    return reconcile(recs, nodes, uses, {"node-1"})


def test_every_view_is_exported_per_pod_with_tenant_and_queue() -> None:
    metrics = ReconcilerMetrics()
    metrics.update(_rec(), dt=0.0, refused={})
    got = _scrape(metrics)
    for name in (*m.GPUS.values(), *m.MEMORY.values(), *m.COMPUTE.values()):
        assert len(got[name]) == 2, name
        assert set(got[name][0].labels) == {"namespace", "pod", "tenant", "queue"}
    assert got[m.MEMORY["used"]][0].value == 1024 * MIB
    assert {s.labels["resource"] for s in got[m.EFFICIENCY]} == {"memory", "compute"}


def test_idle_counter_adds_idle_compute_times_elapsed_seconds() -> None:
    metrics = ReconcilerMetrics()
    metrics.update(_rec(busy=0.0), dt=0.0, refused={})
    metrics.update(_rec(busy=0.0), dt=30.0, refused={})
    metrics.update(_rec(busy=0.9), dt=30.0, refused={})  # busy now: nothing added
    got = _scrape(metrics)[m.IDLE_ALLOCATED]
    assert [s.value for s in got] == [30.0, 30.0]


def test_refusals_count_growth_of_the_exporter_counter_and_survive_its_restart() -> None:
    metrics = ReconcilerMetrics()
    key = ("team-a", "p0")
    for total in (5, 8, 8, 2):  # baseline 5, +3, +0, exporter restarted: +2
        metrics.update(_rec(), dt=1.0, refused={key: total})
    got = [s for s in _scrape(metrics)[m.QUOTA_REFUSALS]
           if s.labels["pod"] == "p0"]
    assert got[0].value == 5 and got[0].labels["reason"] == "memory-cap"


def test_pods_beyond_the_cap_fold_into_other_and_sums_stay_exact() -> None:
    metrics = ReconcilerMetrics(max_pods=3)
    metrics.update(_rec(n_pods=10), dt=0.0, refused={})
    got = _scrape(metrics)[m.GPUS["allocated"]]
    assert len(got) == 4
    assert sum(s.value for s in got) == 10
    assert [s.value for s in got if s.labels["pod"] == "_other"] == [7]


def test_queue_device_and_problem_series() -> None:
    pods = [pod("ts0", request={"count": 1}, devices=[device("GPU-1", mode="timeslice",
                                                              milli=500, memory_mib=61440)]),
            pod("ts1", request={"count": 1}, devices=[device("GPU-1", mode="timeslice",
                                                              milli=500, memory_mib=61440)]),
            pod("plain", gpu_limit=1, node="node-2")]
    recs, nodes, _ = records(pods, [node("node-1", ["GPU-1"])])
    metrics = ReconcilerMetrics()
    metrics.update(reconcile(recs, nodes, [], {"node-1"}), dt=0.0, refused={})
    got = _scrape(metrics)
    assert got[m.TIMESLICE_OVERCOMMIT][0].value == pytest.approx(1.5)
    assert got[m.TIMESLICE_OVERCOMMIT][0].labels == {"node": "node-1", "gpu": "0",
                                                     "UUID": "GPU-1"}
    assert {s.labels["queue"] for s in got[m.QUEUE_USAGE]} == {"team-a"}
    problems = {s.labels["reason"]: s.value for s in got[m.RECONCILER_PROBLEMS]}
    assert problems == {"pod-annotation": 1}
