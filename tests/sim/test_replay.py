"""`gpugov replay` / `gpugov explain` end to end, the job-file loader and the openb adapter."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.sim.jobs import load_job_file, openb_queue
from gpugov.sim.replay import replay
from gpugov.sim.scenario import scenario_config, scenario_jobs, scenario_nodes

runner = CliRunner()
NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},64000,262144,4,A100\n" for i in range(2))
QUEUES = """
queues:
  - {name: a, quota: {gpu: 4}}
  - {name: b, quota: {gpu: 4}}
tenants:
  - {namespace: ns-a, queue: a}
priorityClasses:
  - {name: high, value: 1000, preemptible: false}
  - {name: low, value: 10}
"""
HEADER = "name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,cpu_milli,memory_mib\n"
JOBS = HEADER + "".join(f"b{i},b,low,0,100,1,1,1000,1000,1024\n" for i in range(8)) + \
    "gang,ns-a,low,10,50,2,2,1000,1000,1024\nbig,a,high,20,10,1,4,1000,1000,1024\n"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, text in (("nodes.csv", NODES), ("q.yaml", QUEUES), ("jobs.csv", JOBS)):
        (tmp_path / name).write_text(text)
        out[name] = tmp_path / name
    return out


def args(files, out):
    return ["replay", "--cluster", str(files["nodes.csv"]), "--jobs", str(files["jobs.csv"]),
            "--queues", str(files["q.yaml"]), "--out", str(out), "--no-plots"]


def test_replay_writes_jobs_queues_and_reclaims(files, tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, args(files, out))
    assert r.exit_code == 0, r.output
    rows = {row["name"]: row for row in csv.DictReader((out / "jobs.csv").open())}
    # t=10: the gang reclaims a's quota from b; t=20: `big` (high) preempts the gang inside
    # queue a; t=30: big is done and the gang runs again, whole
    assert rows["gang"]["status"] == "finished" and float(rows["gang"]["start_s"]) == 30
    assert rows["gang"]["preemptions"] == "1" and float(rows["gang"]["wait_s"]) == 10
    assert sum(int(rows[f"b{i}"]["preemptions"]) for i in range(8)) == 4
    assert rows["big"]["status"] == "finished" and float(rows["big"]["wait_s"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reclaims"] == 4
    assert (out / "queues.csv").read_text().startswith("time_s,queue,usage_gpus,fair_share")


def test_explain_reads_a_mid_replay_snapshot(files, tmp_path):
    out = tmp_path / "run"
    files["jobs.csv"].write_text(HEADER + "x,b,low,0,100,1,4,1000,1000,1024\n"
                                 "y,b,low,1,100,1,4,1000,1000,1024\n"
                                 "z,b,low,2,100,1,4,1000,1000,1024\n")
    assert runner.invoke(app, args(files, out) + ["--until", "5"]).exit_code == 0
    r = runner.invoke(app, ["explain", "z", "--run", str(out)])
    assert r.exit_code == 0, r.output
    assert "pending" in r.output and "reason: no-node-fits" in r.output
    assert "position: 1 of 1" in r.output
    r = runner.invoke(app, ["explain", "nope", "--run", str(out)])
    assert r.exit_code == 2 and "not in the snapshot" in r.output


@pytest.mark.parametrize("target,text,expected", [
    ("q.yaml", "queues: [{name: a, quota: {gpu: -2}}]", "queues[0].quota"),
    ("jobs.csv", HEADER + "j,nowhere,low,0,1,1,1,1000,1,1\n", "line 2, field 'queue'"),
    ("jobs.csv", HEADER + "j,a,urgent,0,1,1,1,1000,1,1\n", "field 'priority'"),
    ("jobs.csv", HEADER + "j,a,low,-5,1,1,1,1000,1,1\n", "field 'submit_s'"),
    ("jobs.csv", HEADER + "j,a,low,0,1,1,2,500,1,1\n", "field 'gpu_milli'"),
    ("nodes.csv", "sn,cpu_milli\nx,1\n", "missing column"),
])
def test_bad_input_exits_2_without_partial_output(files, tmp_path, target, text, expected):
    files[target].write_text(text)
    out = tmp_path / "run"
    r = runner.invoke(app, args(files, out))
    assert r.exit_code == 2
    assert expected in r.output
    assert not out.exists()


def test_partial_arguments_are_refused(files, tmp_path):
    r = runner.invoke(app, ["replay", "--jobs", str(files["jobs.csv"])])
    assert r.exit_code == 2 and "together" in r.output


def test_built_in_scenario_is_deterministic_and_multi_tenant():
    specs = scenario_jobs(hours=8)
    a = replay(scenario_config(), scenario_nodes(), specs)
    b = replay(scenario_config(), scenario_nodes(), specs)
    assert [r["wait_p95_s"] for r in a.summary()] == [r["wait_p95_s"] for r in b.summary()]
    assert len(a.summary()) == 4 and 0 < a.jain_index() <= 1


def test_openb_adapter_assigns_tenants_by_qos_and_stable_hash(trace_dir):
    specs = load_job_file(trace_dir / "openb_pod_list_default.csv")
    assert len(specs) == 8152
    first = specs[0]
    assert (first.queue, first.priority) == openb_queue(first.name, "LS")
    assert first.queue.startswith("online-") and first.duration == 12537496
    assert {s.queue for s in specs} == {"online-a", "online-b", "batch-a", "batch-b"}


def test_fair_share_follows_demand_down_when_nothing_is_pending(tmp_path: Path) -> None:
    """After departures with an empty backlog the reported fair share must not stay stale
    (a stale share would drag usage/fair share and Jain's index down)."""
    from gpugov.control.config import parse_config
    from gpugov.sim.jobs import JobSpec
    from gpugov.sim.trace import load_nodes

    (tmp_path / "n.csv").write_text(NODES)
    cfg = parse_config({"queues": [{"name": "a", "quota": {"gpu": 4}},
                                   {"name": "b", "quota": {"gpu": 4}}]}, "<test>")
    specs = [JobSpec("long", "a", "", 0, 1000, 1, 1, 1000, 1000, 1024),
             JobSpec("short", "a", "", 0, 100, 1, 2, 1000, 1000, 1024)]
    res = replay(cfg, load_nodes(tmp_path / "n.csv"), specs)
    a = res.queue_names().index("a")
    late = res.times > 200  # "short" has left, "long" still runs, nothing pending
    assert late.any()
    assert (res.usage[late, a] == 1).all() and (res.fair[late, a] == 1).all()


def test_openb_trace_converts_to_a_job_file_with_exact_times(tmp_path: Path) -> None:
    pods = tmp_path / "openb.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                    "creation_time,deletion_time,scheduled_time\n"
                    "p0,1000,1024,1,500,,LS,Running,12537496,12902961,0\n"
                    "p1,2000,2048,2,1000,,BE,Running,7,107,0\n")
    out = tmp_path / "jobs.csv"
    res = runner.invoke(app, ["openb-jobs", str(pods), "--out", str(out)])
    assert res.exit_code == 0, res.output
    jobs = {j.name: j for j in load_job_file(out)}
    assert jobs["p0"].submit == 12537496 and jobs["p0"].duration == 12902961 - 12537496
    assert jobs["p0"].queue.startswith("online-") and jobs["p1"].queue.startswith("batch-")
    assert (jobs["p1"].gpu_per_pod, jobs["p1"].gpu_milli) == (2, 1000)
    bad = runner.invoke(app, ["openb-jobs", str(tmp_path / "missing.csv"), "--out", str(out)])
    assert bad.exit_code == 2 and "cannot read" in bad.output
