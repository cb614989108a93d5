"""The "must show" demo: an idle pod, a leaking pod and an oversized request make the three
views diverge; the metrics show it, the alerts fire (rules with durations scaled from minutes
to quarter-seconds, on a real Prometheus), `gpugov top` names the offenders and
`gpugov rightsize` gives the advice. docs/observability.md walks through the same run."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from obs_scenario import GIB, UUIDS
from obs_stacks import make_stack
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.observe import rightsize
from gpugov.observe.promapi import Prometheus

EXPECTED = {
    ("GpugovGpuHoarding", "team-a/idle"),
    ("GpugovGpuMemoryLeak", "team-a/leaky"),
    ("GpugovRepeatedQuotaRefusals", "team-a/leaky"),
    ("GpugovTimesliceMemoryOvercommit", UUIDS[3]),
    ("GpugovEnforcementBypass", "pid 4242"),
    ("GpugovZombieGpuMemory", "team-b/finished-job"),
    ("GpugovGpuThermalThrottling", UUIDS[3]),
    ("GpugovQueueStarvation", "team-b"),
    ("GpugovNodeAgentMissing", "node-2"),
}


def _who(labels: dict[str, str]) -> str:
    if "pod" in labels:
        return f"{labels['namespace']}/{labels['pod']}"
    if "pid" in labels:
        return f"pid {labels['pid']}"
    for key in ("queue", "UUID", "node"):
        if key in labels:
            return labels[key]
    return "?"


def test_demo_views_diverge_alerts_fire_top_and_rightsize(tmp_path: Path) -> None:
    with make_stack(tmp_path, leak_limit=12 * GIB, leak_rate=GIB) as s:
        seen: set[tuple[str, str]] = set()
        deadline = time.monotonic() + 90
        while not seen >= EXPECTED and time.monotonic() < deadline:
            for a in s.prom.query('ALERTS{alertstate="firing"}'):
                seen.add((a["metric"]["alertname"], _who(a["metric"])))
            time.sleep(0.25)
        assert seen >= EXPECTED, f"never fired: {EXPECTED - seen}"
        # their look-alikes stayed silent: busy pods are not hoarding, flat memory is no leak
        assert {w for a, w in seen if a == "GpugovGpuHoarding"} == {"team-a/idle"}
        assert {w for a, w in seen if a == "GpugovGpuMemoryLeak"} == {"team-a/leaky"}
        assert not {w for a, w in seen if a == "GpugovGpuPowerThrottling"}

        def one(q: str) -> float:
            return float(s.prom.query(q)[0]["value"][1])

        sel = '{namespace="team-b",pod="oversized"}'
        assert one(f"gpugov_declared_memory_bytes{sel}") == 40 * GIB
        assert one(f"gpugov_allocated_memory_bytes{sel}") == 40 * GIB
        assert one(f"gpugov_used_memory_bytes{sel}") == 2 * GIB
        assert one('gpugov_efficiency_ratio{pod="oversized",resource="memory"}') == 0.05
        assert one('gpugov_used_gpus{pod="idle"}') == 0
        assert one('gpugov_allocated_gpus{pod="idle"}') == 1

        top = CliRunner().invoke(app, ["top", "--once", "--prometheus", s.prom.url,
                                       "--window", "5s"])
        assert top.exit_code == 0, top.output
        (tmp_path / "top.txt").write_text(top.output)
        print(top.output)  # the capture docs/observability.md shows
        for words in ("team-a/idle", "team-a/leaky", "team-b/oversized", "timeslice"):
            assert words in top.output

        async def advice() -> dict[str, rightsize.Advice]:
            async with Prometheus(s.prom.url) as prom:
                obs = await rightsize.observe(prom, "30s", "250ms", "2s")
            return {o.workload: rightsize.recommend(o) for o in obs}

        adv = asyncio.run(advice())
        assert adv["oversized"].memory == 2.5 * GIB
        assert adv["oversized"].frees_memory == 37.5 * GIB
        assert adv["leaky"].memory >= 12 * GIB  # never below the observed peak
        assert adv["idle"].frees_memory > 70 * GIB  # 2 GiB used of a whole 80 GiB card
