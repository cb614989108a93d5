"""Power in observability: the reconciler's per-rack series (budget, admitted, measured) and
per-pod GPU power, the over-budget alert evaluated by a real Prometheus, and energy (kWh and
cost) per tenant in `gpugov report`."""

from __future__ import annotations

import asyncio
import csv
import io
import time
from pathlib import Path

import obs_prometheus as promserver
import pytest
from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from gpugov.k8s.annotations import AllocatedDevice
from gpugov.k8s.power.contract import POWER, DevicePower, encode_power
from gpugov.model.devices import DeviceMode
from gpugov.observe import chargeback
from gpugov.observe.power import PowerMetrics
from gpugov.observe.promapi import Prometheus

RULES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpugov" / "files" / \
    "alerts.yaml"


def node(name: str, rack: str, draws: list[float]) -> dict:
    return {"metadata": {"name": name, "labels": {"gpugov.io/rack": rack},
                         "annotations": {POWER: encode_power(
                             [DevicePower(i, w, 1e6, 400.0, 100.0, 400.0)
                              for i, w in enumerate(draws)])}}}


def domain(name: str, panel: float, admitted: float | None = None) -> dict:
    obj = {"metadata": {"name": name}, "spec": {"panelWatts": panel}}
    if admitted is not None:
        obj["status"] = {"admittedWatts": admitted}
    return obj


def pod(name: str, tenant: str, node_name: str, *devices: tuple[int, int]):
    from gpugov.observe.views import PodRecord
    return PodRecord("ns", name, "Running", node_name, tenant, "q", None, tuple(
        AllocatedDevice(index=i, uuid=f"GPU-{i}", mode=DeviceMode.SOFT, milli=milli,
                        memory_mib=1024) for i, milli in devices))


def metrics() -> PowerMetrics:
    pm = PowerMetrics()
    problems = pm.update(
        [domain("r1", 2000, admitted=1400), domain("r2", 5000)],
        [node("a", "r1", [350, 350, 300, 40]), node("b", "r1", [900, 60]),
         node("c", "r2", [100]), {"metadata": {"name": "bad", "labels": {
             "gpugov.io/rack": "r2"}, "annotations": {POWER: "{oops"}}}],
        [pod("p1", "t1", "a", (0, 1000)), pod("p2", "t1", "a", (1, 250)),
         pod("p3", "t2", "a", (1, 750), (2, 1000))])
    assert problems == ["node bad: gpugov.io/power: not JSON; its draw is not counted"]
    return pm


def test_rack_series_sum_the_agents_draw_and_pods_get_their_share():
    text = generate_latest(_registry(metrics())).decode()
    assert 'gpugov_power_domain_budget_watts{domain="r1"} 1600.0' in text
    assert 'gpugov_power_domain_admitted_watts{domain="r1"} 1400.0' in text
    assert 'gpugov_power_domain_measured_watts{domain="r1"} 2000.0' in text
    assert 'gpugov_power_domain_measured_watts{domain="r2"} 100.0' in text
    assert 'gpugov_power_domain_admitted_watts{domain="r2"}' not in text  # not written yet
    # GPU 1 (350 W) is shared 250:750 by p2 and p3; p3 also has all of GPU 2 (300 W)
    assert 'gpugov_pod_gpu_power_watts{namespace="ns",pod="p1",queue="q",tenant="t1"} 350.0' \
        in text
    assert 'gpugov_pod_gpu_power_watts{namespace="ns",pod="p2",queue="q",tenant="t1"} 87.5' \
        in text
    assert 'gpugov_pod_gpu_power_watts{namespace="ns",pod="p3",queue="q",tenant="t2"} 562.5' \
        in text


def _registry(pm: PowerMetrics) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(pm)
    return reg


@pytest.mark.skipif(promserver.PROMETHEUS is None, reason="needs prometheus (Debian package)")
def test_prometheus_raises_the_over_budget_alert_and_report_charges_energy(tmp_path):
    port = promserver.free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=_registry(metrics()))
    prom = promserver.start(tmp_path / "prom", [f"127.0.0.1:{port}"], [RULES])
    try:
        # r1 measures 2000 W against 1600 W: the alert is pending (its `for` is 2m)
        got = prom.wait_for('ALERTS{alertname="GpugovPowerDomainOverBudget"}', timeout=60)
        assert {a["metric"]["domain"] for a in got} == {"r1"}
        assert got[0]["metric"]["alertstate"] == "pending"
        time.sleep(6)  # a few scrapes of the pods' power

        async def report():
            async with Prometheus(prom.url) as p:
                return await chargeback.chargeback(p, "5s", "1s", price=2.0, energy_price=0.5)

        async def jobs():
            async with Prometheus(prom.url) as p:
                return await chargeback.energy_by_job(p, "5s", "1s", energy_price=0.5)

        rows = {r.tenant: r for r in asyncio.run(report())}
        per_job = {(j.namespace, j.job, j.tenant): j for j in asyncio.run(jobs())}
        assert set(per_job) == {("ns", "p1", "t1"), ("ns", "p2", "t1"), ("ns", "p3", "t2")}
        assert per_job[("ns", "p1", "t1")].energy_kwh == pytest.approx(
            rows["t1"].energy_kwh * 350 / 437.5, rel=0.05)
        assert "energy_kwh,energy_cost" in chargeback.jobs_csv_text(list(per_job.values()))
        # t1: 437.5 W for ~5 s, t2: 562.5 W (1 s steps of the subquery; kWh = W x s / 3.6e6)
        for tenant, watts in (("t1", 437.5), ("t2", 562.5)):
            kwh = rows[tenant].energy_kwh
            assert watts * 4 / 3.6e6 <= kwh <= watts * 7 / 3.6e6, (tenant, kwh)
        table = list(csv.DictReader(io.StringIO(chargeback.csv_text(list(rows.values())))))
        t2 = next(r for r in table if r["tenant"] == "t2")
        assert float(t2["energy_cost"]) == pytest.approx(0.5 * float(t2["energy_kwh"]), abs=0.01)
    finally:
        prom.stop()
        server.shutdown()
        thread.join(5)


@pytest.mark.parametrize("bad", ["-1", "nan", "inf", "1e10"])
def test_a_bad_kwh_price_exits_2_naming_it(bad, tmp_path):
    from typer.testing import CliRunner

    from gpugov.cli import app
    out = CliRunner().invoke(app, ["report", "--prometheus", "http://127.0.0.1:1",
                                   "--kwh-price", bad, "--out", str(tmp_path / "r")])
    assert out.exit_code == 2 and "--kwh-price" in out.output, out.output
    assert not (tmp_path / "r").exists()
