"""The cycle's cache of refusals by device charge (a job placed, then refused because the
devices it got cost its queue more than its demand) decides exactly what the plain cycle
decides: the mixed-fleet scenario, its queues squeezed so such refusals recur every cycle,
replayed both ways."""

from __future__ import annotations

import json

import yaml

from gpugov.control.config import parse_config
from gpugov.sim.mixed_scenario import MIXED_QUEUES, SOURCE, mixed_jobs, mixed_nodes
from gpugov.sim.replay import ReplayOptions, job_rows, replay
from gpugov.sim.replay_report import JOBS_HEADER, _csv


def _squeezed():  # type: ignore[no-untyped-def]
    doc = yaml.safe_load(MIXED_QUEUES)
    for q in doc["queues"]:
        q["quota"] = {"gpu": max(1, q["quota"]["gpu"] // 4), "gpumem": 80}
        q.pop("limit", None)
    return parse_config(doc, SOURCE)


def test_charge_refusals_cached_in_a_cycle_decide_as_the_plain_cycle(monkeypatch):
    from gpugov.control.cycle import ControlPlane

    refused: list[str] = []
    real = ControlPlane.check_charge

    def spy(self, job, allocations):  # a placement its devices' charge refused
        charged, verdict = real(self, job, allocations)
        if verdict is not None:
            refused.append(verdict.resource)
        return charged, verdict
    monkeypatch.setattr(ControlPlane, "check_charge", spy)
    cfg, nodes, specs = _squeezed(), mixed_nodes(), mixed_jobs(hours=1.5)
    out, computed = {}, {}
    for fast in (True, False):
        refused.clear()
        res = replay(cfg, nodes, specs, ReplayOptions(progress=False, fast=fast), SOURCE)
        out[fast] = (_csv(job_rows(res), JOBS_HEADER), json.dumps(res.snapshot))
        computed[fast] = len(refused)
    assert out[True][0] == out[False][0]  # jobs.csv byte for byte
    assert out[True][1] == out[False][1]  # reasons of the jobs still pending
    # the plain cycle places and refuses again for every such job; the fast one once per
    # shape until something starts
    assert 0 < computed[True] < computed[False] / 2, computed
