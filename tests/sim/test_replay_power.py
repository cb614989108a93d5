"""Power domains in the replay: the generated power-constrained fleet never admits more than
80 % of any rack's panel, summary.json reports per-rack p99/max of admitted power, energy
and perf per watt, removing the budgets never lowers allocation, and cluster.yaml
powerDomains reach the replay (bad ones: exit 2 naming the field)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.sim.power_scenario import PANELS, power_config, power_jobs, power_nodes
from gpugov.sim.replay import ReplayOptions, replay
from gpugov.sim.replay_report import summary

runner = CliRunner()


def _run(budgets: bool, policy: str = "gpugov") -> dict:
    res = replay(power_config(), power_nodes(budgets), power_jobs(jobs=150, hours=8),
                 ReplayOptions(policy=policy, progress=False))
    return summary(res)


def test_power_scenario_stays_within_every_racks_budget_and_reports_it():
    with_b, without = _run(True), _run(False)
    doms = {d["domain"]: d for d in with_b["power"]["domains"]}
    assert set(doms) == set(PANELS)
    for name, d in doms.items():
        assert d["budget_w"] == PANELS[name] * 0.8
        assert d["admitted_p99_w"] <= d["admitted_max_w"] <= d["budget_w"]
        assert d["admitted_max_pct_of_panel"] <= 80.0 and not d["over_budget"]
        assert d["energy_kwh"] > 0
    # the panels bind: some rack reaches within one GPU's draw of its budget
    assert any(d["budget_w"] - d["admitted_max_w"] < 630 for d in doms.values())
    assert without["power"]["domains"] == []
    # unbudgeted, the same racks are reported by label: some draw more than 80 % of the panel
    racks = {r["rack"]: r for r in without["power"]["racks"]}
    assert set(racks) == set(PANELS)
    assert any(r["admitted_max_w"] > 0.8 * PANELS[n] for n, r in racks.items())
    # removing the budgets never lowers allocation (here: it raises it)
    alloc = with_b["power"]["allocated_gpu_seconds"]
    assert without["power"]["allocated_gpu_seconds"] >= alloc
    assert with_b["power"]["gpu_seconds_per_kwh"] > 0
    assert 0 < with_b["job_completion_rate"] <= 1 and with_b["wait_p50_s"] >= 0


CLUSTER = """
nodePools:
  - {name: a, count: 2, model: H100-SXM5-80GB, gpus: 8, cpuMilli: 64000, memoryMiB: 262144,
     labels: {gpugov.io/rack: r1}}
powerDomains:
  - {name: r1, panelWatts: %s}
"""
QUEUES = "queues:\n  - {name: q, quota: {gpu: 16}}\n"
JOBS = ("name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,cpu_milli,"
        "memory_mib\n" + "".join(f"j{i},q,,{i},100,1,1,1000,1000,1024\n" for i in range(16)))


def test_cluster_yaml_power_domains_in_replay_and_bad_ones_exit_2(tmp_path):
    (tmp_path / "q.yaml").write_text(QUEUES)
    (tmp_path / "jobs.csv").write_text(JOBS)
    (tmp_path / "c.yaml").write_text(CLUSTER % 10000)  # 8 kW: (8000 - 1120) / 630 = 10 GPUs
    out = runner.invoke(app, ["replay", "--nodes", str(tmp_path / "c.yaml"), "--jobs",
                              str(tmp_path / "jobs.csv"), "--queues", str(tmp_path / "q.yaml"),
                              "--out", str(tmp_path / "out"), "--no-plots"])
    assert out.exit_code == 0, out.output
    summ = json.loads((tmp_path / "out" / "summary.json").read_text())
    (dom,) = summ["power"]["domains"]
    assert dom["domain"] == "r1" and dom["admitted_max_w"] == 1120 + 10 * 630
    assert summ["gpu_allocated_max"] == 10
    for bad, field in (("0", "panelWatts"), (".nan", "panelWatts"), ("-1", "panelWatts")):
        (tmp_path / "c.yaml").write_text(CLUSTER % bad)
        out = runner.invoke(app, ["replay", "--nodes", str(tmp_path / "c.yaml"), "--jobs",
                                  str(tmp_path / "jobs.csv"), "--queues",
                                  str(tmp_path / "q.yaml"), "--out", str(tmp_path / "o2")])
        assert out.exit_code == 2 and f"powerDomains[0].{field}" in out.output, out.output
    (tmp_path / "c.yaml").write_text(CLUSTER % 10000 + "  - {name: r9, panelWatts: 100}\n")
    out = runner.invoke(app, ["replay", "--nodes", str(tmp_path / "c.yaml"), "--jobs",
                              str(tmp_path / "jobs.csv"), "--queues", str(tmp_path / "q.yaml"),
                              "--out", str(tmp_path / "o3")])
    assert out.exit_code == 2 and "powerDomains.r9: has no nodes" in out.output, out.output
