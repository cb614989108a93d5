"""The replay always finishes what can run, accounts time exactly, and stops ticking.

Issue 14: the gang deadlock (its exact repro, through the CLI), `--period` hanging when a
job can never start, jobs blocked only by other queues' idle reserves. Issue 13 items 1,
4, 9, 14: lost wait time, `--until` summaries, `explain` of finished jobs and of bad
snapshots, bad options, and queue configs checked against the cluster.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.control.config import ConfigError, parse_config
from gpugov.control.cycle import ControlPlane, CycleResult
from gpugov.control.workload import FINISHED, PENDING, REJECTED
from gpugov.model.cluster import NodeSpec
from gpugov.sim.jobs import JobSpec
from gpugov.sim.replay import ReplayOptions, replay
from gpugov.sim.scenario import scenario_config, scenario_jobs, scenario_nodes

runner = CliRunner()

ISSUE14_NODES = """sn,cpu_milli,memory_mib,gpu,model
n1,64000,262144,8,G2
n2,64000,262144,8,G2
n3,4000,262144,8,G2
"""
ISSUE14_QUEUES = """queues:
  - {name: q1, quota: {gpu: 8}}
  - {name: q2, quota: {gpu: 8}}
  - {name: q3, quota: {gpu: 8}, priority: 10}
priorityClasses:
  - {name: high, value: 100}
  - {name: low, value: 10}
"""
HEADER = "name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,cpu_milli,memory_mib\n"
ISSUE14_JOBS = HEADER + """L1,q2,low,0,50,1,2,1000,40000,1024
L2,q2,low,0,200,1,4,1000,40000,1024
C,q3,low,1,50,1,4,1000,40000,1024
B,q1,low,1,10,2,4,1000,40000,1024
A,q1,high,50,10,2,4,1000,40000,1024
"""


def _write(tmp_path: Path, nodes: str, queues: str, jobs: str) -> list[str]:
    for name, text in (("nodes.csv", nodes), ("queues.yaml", queues), ("jobs.csv", jobs)):
        (tmp_path / name).write_text(text)
    return ["replay", "--nodes", str(tmp_path / "nodes.csv"), "--jobs",
            str(tmp_path / "jobs.csv"), "--queues", str(tmp_path / "queues.yaml")]


def _rows(out: Path) -> dict[str, dict[str, str]]:
    return {r["name"]: r for r in csv.DictReader((out / "jobs.csv").open())}


@pytest.mark.parametrize("preemption", [True, False])
@pytest.mark.parametrize("period", [None, "5"])
def test_issue14_gangs_finish_on_the_empty_cluster(tmp_path, preemption, period):
    queues = ISSUE14_QUEUES + ("" if preemption else "preemption: {enabled: false}\n")
    args = _write(tmp_path, ISSUE14_NODES, queues, ISSUE14_JOBS)
    out = tmp_path / "out"
    extra = [] if period is None else ["--period", period]
    r = runner.invoke(app, [*args, "--out", str(out), "--no-plots", *extra])
    assert r.exit_code == 0, r.output
    rows = _rows(out)
    assert {n: rows[n]["status"] for n in rows} == dict.fromkeys(rows, "finished")
    # L2 leaves at t=200: the cluster is empty and A (ahead: higher class) runs, then B
    assert float(rows["A"]["start_s"]) == 200 and float(rows["B"]["start_s"]) == 210
    for r_ in rows.values():  # nobody is still waiting at the end
        assert float(r_["end_s"]) - float(r_["submit_s"]) >= float(r_["wait_s"])


# -- replay-wide liveness and exact accounting (hypothesis) -----------------------------------
@st.composite
def traces(draw):
    nodes = [NodeSpec(f"n{i}", draw(st.sampled_from([4_000, 64_000, 64_000])), 262_144,
                      draw(st.sampled_from([4, 8])), "A100")
             for i in range(draw(st.integers(1, 3)))]
    queues = [{"name": f"q{i}", "quota": {"gpu": draw(st.integers(0, 8))}}
              for i in range(draw(st.integers(1, 3)))]
    for q in queues:
        if draw(st.booleans()):
            q["lendingLimit"] = {"gpu": draw(st.integers(0, q["quota"]["gpu"]))}
    classes = [{"name": "high", "value": 100, "preemptible": draw(st.booleans())},
               {"name": "low", "value": 10}]
    specs = [JobSpec(f"j{i}", f"q{draw(st.integers(0, len(queues) - 1))}",
                     draw(st.sampled_from(["high", "low"])), draw(st.integers(0, 100)),
                     draw(st.integers(1, 60)), draw(st.integers(1, 3)),
                     draw(st.sampled_from([1, 2, 4])), 1000,
                     draw(st.sampled_from([1_000, 40_000])), 1024)
             for i in range(draw(st.integers(1, 12)))]
    cfg = {"queues": queues, "priorityClasses": classes,
           "preemption": {"enabled": draw(st.booleans())},
           "backfill": {"headGrace": draw(st.sampled_from([0, 20]))}}
    return nodes, cfg, specs, draw(st.sampled_from([0.0, 0.0, 7.0]))


def _check_accounting(res) -> None:
    """Every finished job: waits + running episodes == end - submit."""
    for j in res.jobs:
        if j.status != FINISHED:
            continue
        ran = sum(stop - start for start, stop in res.episodes[j.name])
        assert res.waits[j.name] + ran == pytest.approx(res.ends[j.name] - j.submit), j.name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_replay_never_ends_with_an_admissible_job_pending(trace):
    nodes, cfg_data, specs, period = trace
    cfg = parse_config(cfg_data)
    try:
        res = replay(cfg, nodes, specs, ReplayOptions(period=period, progress=False))
    except ConfigError as e:  # reserves the cluster cannot honour: refused up front
        assert "idle reserves" in str(e)
        return
    # the replay ran out of events, so the cluster is idle: every job that was not
    # rejected (rejection = could not run even on the idle cluster) has finished
    assert res.cp.state.used_gpu_milli == 0
    left = {j.name: j.detail for j in res.jobs if j.status == PENDING}
    assert not left
    assert all(j.status in (FINISHED, REJECTED) for j in res.jobs)
    _check_accounting(res)


def test_built_in_scenario_accounts_every_second_and_queues_each_job_once():
    # one mid-trace run (the issue's --until 200000) serves all three checks
    res = replay(scenario_config(), scenario_nodes(), scenario_jobs(),
                 ReplayOptions(until=200_000, progress=False))
    assert sum(j.status == FINISHED for j in res.jobs) > 300
    _check_accounting(res)
    # issue 13: nlp-0044 was started and evicted in one cycle and reported wait 0
    assert res.waits["nlp-0044"] >= 141_861
    for leaf, jobs in enumerate(res.cp.backlog):
        assert len({j.name for j in jobs}) == len(jobs), res.cp.tree.names[leaf]
    by_queue: dict[str, list[int]] = {}
    for j in res.snapshot["jobs"].values():
        if j["status"] == PENDING:
            by_queue.setdefault(j["queue"], []).append(j["position"])
    assert by_queue
    for positions in by_queue.values():
        assert sorted(positions) == list(range(1, len(positions) + 1))


def test_period_ticks_stop_when_nothing_can_change(monkeypatch):
    """A control plane that never starts anything must not make `--period` tick forever:
    once no arrival or departure is left, the clock stops."""
    monkeypatch.setattr(ControlPlane, "cycle", lambda self, now: CycleResult())
    cfg = parse_config({"queues": [{"name": "a"}]})
    nodes = [NodeSpec("n0", 64_000, 262_144, 4, "A100")]
    specs = [JobSpec("x", "a", "", 0, 10, 1, 1, 1000, 1000, 1024),
             JobSpec("y", "a", "", 30, 10, 1, 1, 1000, 1000, 1024)]
    res = replay(cfg, nodes, specs, ReplayOptions(period=1, progress=False))
    # ticks at t=1..29 while y's arrival is ahead, then none: the replay ends at t=30
    assert res.cycles == 31 and res.end == 30
    assert res.waits == {"x": 30, "y": 0}


# -- --until, explain -------------------------------------------------------------------------
def test_until_before_the_last_arrival_summarises_the_jobs_so_far(tmp_path):
    jobs = HEADER + "a,q1,low,0,100,1,1,1000,1000,1024\nb,q1,low,10,5,1,1,1000,1000,1024\n" \
        "late,q1,low,500,5,1,1,1000,1000,1024\n"
    args = _write(tmp_path, ISSUE14_NODES, ISSUE14_QUEUES, jobs)
    out = tmp_path / "out"
    r = runner.invoke(app, [*args, "--until", "50", "--out", str(out), "--no-plots"])
    assert r.exit_code == 0, r.output
    rows = _rows(out)
    assert set(rows) == {"a", "b"}  # `late` was not submitted by t=50
    assert rows["a"]["status"] == "running" and rows["b"]["status"] == "finished"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["jobs"] == 2
    r = runner.invoke(app, ["explain", "b", "--run", str(out)])
    assert r.exit_code == 0, r.output
    assert "finished" in r.output and "ended at t=15s" in r.output and "waited 0 s" in r.output
    r = runner.invoke(app, ["explain", "late", "--run", str(out)])
    assert r.exit_code == 2 and "not been submitted" in r.output


@pytest.mark.parametrize("text,expected", [
    ("[]", "expected an object with 'time', 'queues' and 'jobs' (got list)"),
    ('{"time": 1, "queues": {}, "jobs": []}', "jobs: expected an object of jobs"),
    ('{"time": "x", "queues": {}, "jobs": {}}', "time: expected a finite number"),
    ('{"time": 1, "queues": {}, "jobs": {"j": {"queue": "q"}}}', "jobs.j.queue: 'q'"),
    ("not json", "cannot read"),
])
def test_explain_refuses_a_bad_snapshot(tmp_path, text, expected):
    (tmp_path / "snapshot.json").write_text(text)
    r = runner.invoke(app, ["explain", "j", "--run", str(tmp_path)])
    assert r.exit_code == 2 and expected in r.output, r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("option,value", [
    ("--seed", "-1"), ("--period", "-5"), ("--period", "nan"), ("--period", "inf"),
    ("--period", "1e-9"),  # issue 22, finding 5: it used to tick 10^9 times per second
    ("--until", "nan"), ("--until", "-3"),
])
def test_bad_replay_options_exit_2_naming_the_option(option, value):
    r = runner.invoke(app, ["replay", option, value])
    assert r.exit_code == 2, r.output
    assert f"{option}: must be" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("scenario", [[], ["--scenario", "mixed"]])
def test_an_unknown_policy_exits_2_naming_it_with_the_built_in_scenarios(scenario):
    """Issue 22, finding 4: it was a KeyError traceback without input files."""
    r = runner.invoke(app, ["replay", "--policy", "nosuch", *scenario])
    assert r.exit_code == 2, r.output
    assert "--policy: unknown policy 'nosuch'" in r.output and "Traceback" not in r.output


# -- jobs blocked only by other queues' idle reserves ---------------------------------------
def _plain_cfg(queues: list[dict]) -> str:
    return json.dumps({"queues": queues, "priorityClasses": [{"name": "low", "value": 10}]})


def test_job_blocked_only_by_other_queues_reserves_is_rejected_with_a_consistent_reason(
        tmp_path):
    # 2 nodes x 4 GPUs; queue a keeps 6 GPUs it never lends; a 4-GPU job of queue b could
    # pass its own caps but never the cluster: rejected at once, with the reserve named
    queues = _plain_cfg([{"name": "a", "quota": {"gpu": 6}, "lendingLimit": {"gpu": 0}},
                         {"name": "b", "quota": {"gpu": 2}}])
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,4,G2\nn2,64000,262144,4,G2\n"
    jobs = HEADER + "big,b,low,0,10,2,2,1000,1000,1024\nok,b,low,0,10,1,2,1000,1000,1024\n"
    out = tmp_path / "out"
    r = runner.invoke(app, [*_write(tmp_path, nodes, queues, jobs), "--out", str(out),
                            "--no-plots"])
    assert r.exit_code == 0, r.output
    rows = _rows(out)
    assert rows["ok"]["status"] == "finished"
    assert rows["big"]["status"] == "rejected"
    assert ("10 GPUs would be held (4 in use or asked for + 6 idle reserve that is never "
            "lent), the cluster has 8") in rows["big"]["reason"]


def test_sibling_reserve_above_the_parents_cap_rejects_with_held_amounts():
    cfg = parse_config({"queues": [
        {"name": "p", "quota": {"gpu": 8}, "limit": {"gpu": 8}},
        {"name": "c1", "parent": "p", "quota": {"gpu": 6}, "lendingLimit": {"gpu": 0}},
        {"name": "c2", "parent": "p", "quota": {"gpu": 2}}]})
    nodes = [NodeSpec(f"n{i}", 64_000, 262_144, 8, "A100") for i in range(2)]
    specs = [JobSpec("j", "c2", "", 0, 10, 1, 4, 1000, 1000, 1024)]
    res = replay(cfg, nodes, specs, ReplayOptions(progress=False))
    j = res.cp.jobs["j"]
    assert j.status == REJECTED
    assert ("queue p would hold 10 GPUs (4 in use or asked for + 6 idle reserve that is "
            "never lent), above its cap 8") in j.detail


def test_reserves_the_cluster_cannot_honour_are_refused(tmp_path):
    queues = _plain_cfg([{"name": "a", "quota": {"gpu": 6}, "lendingLimit": {"gpu": 0}},
                         {"name": "b", "quota": {"gpu": 6}, "lendingLimit": {"gpu": 1}}])
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,8,G2\n"
    jobs = HEADER + "x,a,low,0,10,1,1,1000,1000,1024\n"
    out = tmp_path / "out"
    r = runner.invoke(app, [*_write(tmp_path, nodes, queues, jobs), "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "queues.yaml" in r.output and "idle reserves" in r.output
    assert "11 GPUs" in r.output and "cluster's 8 GPUs" in r.output
    assert not out.exists()


def test_quota_above_the_whole_cluster_is_warned_about(tmp_path):
    queues = _plain_cfg([{"name": "a", "quota": {"gpu": 1000}}])
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,8,G2\n"
    jobs = HEADER + "x,a,low,0,10,1,1,1000,1000,1024\n"
    r = runner.invoke(app, _write(tmp_path, nodes, queues, jobs))
    assert r.exit_code == 0, r.output
    assert "warning: queue a: quota 1000 GPUs is above the whole cluster (8 GPUs)" in r.output
