"""Live test stacks: exporter series (or the real exporter), a real Prometheus and a live
reconciler, started together and stopped exactly."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "helm" / "gpugov" / "files" / "alerts.yaml"
#: one minute of the rules' time is this many seconds in the live tests (windows and `for:`)
RULE_SCALE = 0.25
SCRAPE = "250ms"


def scaled_rules(text: str, scale: float = RULE_SCALE) -> str:
    """The alert rules with every duration (`for:` and range windows) scaled down, so the
    live demo sees in seconds what production sees in minutes."""
    def ms(m: re.Match) -> str:
        value, unit = float(m.group(1)), m.group(2)
        minutes = value * {"s": 1 / 60, "m": 1, "h": 60}[unit]
        return f"{max(1, round(minutes * scale * 1000))}ms"
    text = re.sub(r"(?<=for: )(\d+)([smh])\b", ms, text)
    return re.sub(r"(?<=\[)(\d+)([smh])(?=\])", ms, text)


@dataclass
class Stack:
    """Prometheus scraping the scenario's exporter series and a live reconciler."""

    prom: object
    reconciler: object
    exporter: object
    reconciler_url: str


@contextlib.contextmanager
def run_reconciler(prom_url: str, port: int, source, tree=None) -> Iterator[object]:  # noqa: ANN001
    """A live `Reconciler` serving /metrics on `port`, reading the cluster from `source`."""
    from gpugov.observe.reconciler import Options, Reconciler

    rec = Reconciler(Options(None, prom_url, "127.0.0.1", port, interval=0.25, window="3s"),
                     tree)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    started = threading.Event()

    async def main() -> None:
        ready = asyncio.Event()
        task = asyncio.create_task(rec.serve(stop, source, ready))
        await ready.wait()
        started.set()
        await task

    runner = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    runner.start()
    try:
        assert started.wait(10), "reconciler did not start"
        yield rec
    finally:
        loop.call_soon_threadsafe(stop.set)
        runner.join(15)
        loop.close()


@contextlib.contextmanager
def make_stack(tmp: Path, leak_limit: float | None = None,
               leak_rate: float | None = None) -> Iterator[Stack]:
    """Exporter series + Prometheus (with the rules scaled by RULE_SCALE) + a reconciler."""
    import obs_prometheus as promserver
    import obs_scenario as scenario
    from observe_data import QUEUES_YAML
    from prometheus_client import CollectorRegistry, start_http_server

    from gpugov.observe.reconciler import load_tree

    if promserver.PROMETHEUS is None:
        pytest.skip("needs prometheus (Debian package; .ci/setup.d/10-debian-packages.sh)")
    exporter = scenario.ExporterSeries(leak_limit or scenario.LEAK_LIMIT,
                                       leak_rate or scenario.LEAK_RATE)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(exporter)
    exp_port = promserver.free_port()
    server, thread = start_http_server(exp_port, "127.0.0.1", registry=reg)
    rec_port = promserver.free_port()
    rules = tmp / "rules.yaml"
    rules.write_text(scaled_rules(RULES.read_text()))
    prom = promserver.start(tmp / "prom", [f"127.0.0.1:{exp_port}", f"127.0.0.1:{rec_port}"],
                            [rules], SCRAPE)
    (tmp / "queues.yaml").write_text(QUEUES_YAML)

    async def source() -> tuple[list[dict], list[dict]]:
        return scenario.pods(), scenario.nodes()

    try:
        with run_reconciler(prom.url, rec_port, source, load_tree(tmp / "queues.yaml")) as rec:
            yield Stack(prom, rec, exporter, f"http://127.0.0.1:{rec_port}")
    finally:
        prom.stop()
        server.shutdown()
        server.server_close()
        thread.join(5)


