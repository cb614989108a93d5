"""The replay's fast path decides exactly what the plain cycle decides, and `--period`.

The fast path (per-cycle caches, skipping cycles that provably decide nothing new) is an
internal switch, `ReplayOptions.fast`; these tests replay the same inputs both ways and
compare the rendered jobs.csv and snapshot byte for byte.
"""

from __future__ import annotations

import json

import pytest

from gpugov.control.config import parse_config
from gpugov.model.cluster import NodeSpec
from gpugov.sim.jobs import JobSpec
from gpugov.sim.replay import ReplayOptions, job_rows, replay
from gpugov.sim.replay_report import JOBS_HEADER, _csv, queue_rows
from gpugov.sim.scenario import scenario_config, scenario_jobs, scenario_nodes

CLASSES = [{"name": "high", "value": 1000, "preemptible": False},
           {"name": "low", "value": 10, "preemptible": True, "minRuntime": "60s"}]


def _outputs(cfg, nodes, specs, **opts) -> tuple[str, str, str]:
    res = replay(cfg, nodes, specs, ReplayOptions(progress=False, **opts))
    return (_csv(job_rows(res), JOBS_HEADER), json.dumps(res.snapshot),
            repr(queue_rows(res))), res


def _both(cfg, nodes, specs, **opts):
    (fast, res), (plain, ref) = (_outputs(cfg, nodes, specs, fast=True, **opts),
                                 _outputs(cfg, nodes, specs, fast=False, **opts))
    assert fast[0] == plain[0]  # jobs.csv byte for byte
    assert fast[1] == plain[1]  # snapshot: reasons and positions of pending jobs
    assert fast[2] == plain[2]  # queues.csv: usage and fair share over time
    assert ref.skipped_cycles == 0 and res.cycles == ref.cycles
    return res


def _backlog_specs(n: int = 80) -> list[JobSpec]:
    """More work than the cluster holds: a deep backlog of mixed shapes in two queues."""
    shapes = [(1, 1000), (1, 500), (2, 1000), (4, 1000), (1, 250)]
    out = []
    for i in range(n):
        gpus, milli = shapes[i % len(shapes)]
        out.append(JobSpec(f"j{i:03d}", "a" if i % 3 else "b", "high" if i % 7 == 0 else "low",
                           float(5 * i), float(300 + 37 * (i % 11)), 2 if i % 13 == 0 else 1,
                           gpus, milli, 1000, 1024))
    return out


@pytest.mark.parametrize("extra", [
    {},
    {"backfill": {"headGrace": "40s"}},
    {"fairShare": {"halfLife": "10m", "historyWindow": "1h"}},
])
def test_fast_path_replays_a_deep_backlog_identically(extra):
    cfg = parse_config({"queues": [{"name": "a", "quota": {"gpu": 4}},
                                   {"name": "b", "quota": {"gpu": 4}}],
                        "priorityClasses": CLASSES, **extra})
    nodes = [NodeSpec(f"n{i}", 64_000, 262_144, 4, "A100") for i in range(2)]
    res = _both(cfg, nodes, _backlog_specs(), period=50.0)
    assert res.skipped_cycles > 0  # the period ticks between events are provably idle


def test_fast_path_replays_the_built_in_scenario_identically():
    res = _both(scenario_config(), scenario_nodes(), scenario_jobs(hours=2))
    assert res.preemptions  # reclaim and preemption paths were exercised


def test_random_policy_cycles_are_never_skipped():
    """Random placement draws numbers while deciding: skipping would shift the draws."""
    cfg = parse_config({"queues": [{"name": "a", "quota": {"gpu": 4}},
                                   {"name": "b", "quota": {"gpu": 4}}],
                        "priorityClasses": CLASSES})
    nodes = [NodeSpec(f"n{i}", 64_000, 262_144, 4, "A100") for i in range(2)]
    res = _both(cfg, nodes, _backlog_specs(60), period=25.0, policy="random")
    assert res.skipped_cycles == 0


# -- --period ------------------------------------------------------------------------------
def _grace_case() -> tuple:
    """One 4-GPU node. `hold` (3 GPUs) runs until t=200; `big` (4 GPUs, t=0) waits; at t=100
    `small` (1 GPU, same class, runs 1000 s) arrives in queue b, which is served first (it
    uses nothing). headGrace 30 s: only a cycle between t=30 and t=100 lets `big` reserve
    the node before `small` takes the free GPU (`small` is behind `big`, so a reservation
    holds it off)."""
    classes = [{"name": "high", "value": 1000, "preemptible": False},
               {"name": "low", "value": 10, "preemptible": True}]  # no minRuntime wake-ups
    cfg = parse_config({"queues": [{"name": "a", "quota": {"gpu": 4}}, {"name": "b"}],
                        "priorityClasses": classes, "backfill": {"headGrace": "30s"},
                        "preemption": {"enabled": False}})
    nodes = [NodeSpec("n0", 64_000, 262_144, 4, "A100")]
    specs = [JobSpec("a-hold", "a", "low", 0, 200, 1, 3, 1000, 1000, 1024),
             JobSpec("big", "a", "low", 0, 10, 1, 4, 1000, 1000, 1024),
             JobSpec("small", "b", "low", 100, 1000, 1, 1, 1000, 1000, 1024)]
    return cfg, nodes, specs


def test_period_runs_cycles_between_events():
    cfg, nodes, specs = _grace_case()
    without = replay(cfg, nodes, specs, ReplayOptions(progress=False))
    # events only: the head cannot reserve before `small` arrives, so `small` backfills
    # the free GPU at t=100 and `big` waits for it to end
    assert without.starts == {"a-hold": 0, "small": 100, "big": 1100}
    cfg, nodes, specs = _grace_case()
    with_period = replay(cfg, nodes, specs, ReplayOptions(period=50, progress=False))
    # the tick at t=50 (past headGrace) reserves the node for `big`: `small` is held off
    # and `big` starts as soon as `hold` leaves
    assert with_period.starts == {"a-hold": 0, "big": 200, "small": 210}
    assert with_period.cycles > without.cycles


def test_period_ticks_stop_when_nothing_is_pending():
    cfg = parse_config({"queues": [{"name": "a", "quota": {"gpu": 4}}],
                        "priorityClasses": CLASSES})
    nodes = [NodeSpec("n0", 64_000, 262_144, 4, "A100")]
    specs = [JobSpec("x", "a", "low", 0, 10_000, 1, 1, 1000, 1000, 1024)]
    res = replay(cfg, nodes, specs, ReplayOptions(period=1, progress=False))
    assert res.cycles == 1 and res.ends == {"x": 10_000}
