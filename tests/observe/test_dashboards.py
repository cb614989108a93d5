"""Every Grafana panel's query returns data from a real Prometheus scraping the reconciler
and the exporter's series (the demo scenario)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpugov.observe import names

DASHBOARDS = Path(__file__).resolve().parents[2] / "deploy/helm/gpugov/files/dashboards"
FILES = sorted(DASHBOARDS.glob("*.json"))


def _targets(path: Path) -> list[tuple[str, str]]:
    dash = json.loads(path.read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def _concrete(expr: str) -> str:
    """What Grafana sends with every variable at "All" (allValue .*)."""
    expr = expr.replace("$__rate_interval", "3s")
    return re.sub(r"\$\{?(tenant|queue|node|namespace|pod)\}?", ".*", expr)


def test_the_four_dashboards_exist_and_are_grafana_json() -> None:
    assert {f.stem for f in FILES} == {"cluster", "tenant-queue", "node-device", "pod"}
    for f in FILES:
        dash = json.loads(f.read_text())
        assert dash["uid"].startswith("gpugov-") and dash["panels"], f
        ids = [p["id"] for p in dash["panels"]]
        assert len(ids) == len(set(ids)), f"{f.name}: duplicate panel ids"
        for p in dash["panels"]:
            assert p["datasource"]["uid"] == "${datasource}", (f.name, p["title"])


def test_dashboards_use_only_contract_metric_names() -> None:
    for f in FILES:
        for title, expr in _targets(f):
            used = {w for w in re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", expr)
                    if w.startswith(("gpugov_", "DCGM_"))}
            assert used <= names.ALL_METRICS, (f.name, title, used - names.ALL_METRICS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_panel_query_returns_data(stack, path: Path) -> None:
    # the reconciler has joined the used view (needs two exporter scrapes for rates)
    stack.prom.wait_for('gpugov_used_compute_ratio{pod="leaky"} > 0')
    stack.prom.wait_for("rate(gpugov_idle_allocated_gpu_seconds_total[3s]) > 0")
    empty = []
    for title, expr in _targets(path):
        if not stack.prom.query(_concrete(expr)):
            empty.append(f"{title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)
    dash = json.loads(path.read_text())
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.+), (\w+)\)", v["query"]["query"])
            assert m, v
            metric = _concrete(m.group(1))
            assert stack.prom.query(f"group by ({m.group(2)}) ({metric})"), v["name"]
