"""The scheduler's Prometheus metrics (names in docs/contracts.md), read at scrape time from
the counters the state, the applier and the runner keep anyway."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

BAD_INPUT = "gpugov_scheduler_bad_input_total"
API_WRITES = "gpugov_scheduler_api_writes_total"
CYCLES = "gpugov_scheduler_cycles_total"
BOUND = "gpugov_scheduler_pods_bound_total"
REBUILDS = "gpugov_scheduler_rebuilds_total"
PENDING = "gpugov_scheduler_pending_pods"
LEADER = "gpugov_scheduler_leader"


class SchedulerCollector(Collector):
    """`parts()` returns (state, applier, runner, is_leader) when asked, so a collector can be
    registered before the scheduler exists (a standby exports leader=0)."""

    def __init__(self, parts: Callable[[], tuple[Any, Any, Any, bool]]) -> None:
        self.parts = parts

    def collect(self) -> Iterator[Any]:
        state, applier, runner, leader = self.parts()
        bad = CounterMetricFamily(BAD_INPUT, "objects gpugov could not use (logged, skipped)",
                                  labels=["kind"])
        writes = CounterMetricFamily(API_WRITES, "API writes by kind and outcome",
                                     labels=["what", "outcome"])
        if state is not None:
            for kind, n in sorted(state.errors.items()):
                bad.add_metric([kind], n)
        if applier is not None:
            for key, n in sorted(applier.outcomes.items()):
                what, _, outcome = key.partition("-")
                writes.add_metric([what, outcome], n)
        yield bad
        yield writes
        yield CounterMetricFamily(CYCLES, "scheduling cycles run",
                                  value=runner.cycles if runner else 0)
        yield CounterMetricFamily(BOUND, "pods bound", value=runner.bound if runner else 0)
        yield CounterMetricFamily(REBUILDS, "state rebuilds from the API objects",
                                  value=state.rebuilds if state else 0)
        yield GaugeMetricFamily(PENDING, "pods of this scheduler not bound yet",
                                value=len(state._pending_pods()) if state else 0)
        yield GaugeMetricFamily(LEADER, "1 while this replica leads", value=int(leader))


def serve_metrics(host: str, port: int, collector: SchedulerCollector) -> None:
    """Serve /metrics on HOST:PORT in a thread (prometheus_client's own server)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(collector)
    start_http_server(port, addr=host, registry=registry)
