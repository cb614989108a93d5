"""Power domains in the one state: a pod is admitted only while its rack's expected draw
stays within ratio × panel, the refusal names the rack in watts, and the admitted draw is
exactly what the live allocations add to the devices' idle draw."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_state_properties import make_placer, node_specs, requests

from gpugov.model.catalog import MILLI_PER_GPU, get_model
from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceMode
from gpugov.model.power import (
    IDLE_SHARE,
    PowerDomain,
    device_power_mw,
    domain_problems,
    resolve_domains,
)
from gpugov.model.request import PodRequest
from gpugov.placement.engine import allocation_for

H100 = "H100-SXM5-80GB"


def rack(name: str, panel_w: float, *nodes: str, gpus: int = 8, cap: float | None = None
         ) -> list[NodeSpec]:
    d = PowerDomain(name, panel_w)
    return [NodeSpec(n, 64000, 262144, gpus, H100, power_domain=d, gpu_power_cap_w=cap)
            for n in nodes]


def whole(name: str, count: int = 1) -> PodRequest:
    return PodRequest(name, 1000, 1024, count, MILLI_PER_GPU)


def test_rack_budget_refuses_the_pod_that_would_overdraw_and_names_it_in_watts():
    # 2 nodes x 8 H100 (700 W): idle 16 x 70 W = 1.12 kW; budget 0.8 x 10 kW = 8 kW
    # -> (8000 - 1120) / 630 = 10.9 whole GPUs may run at full draw
    state = ClusterState(rack("r3", 10_000, "a", "b"))
    placed = 0
    for i in range(16):
        req = whole(f"p{i}")
        mask = state.feasible(req)
        if not mask.any():
            break
        n = int(np.flatnonzero(mask)[0])
        dev = int(np.flatnonzero(state.device_fits(req, n))[0])
        state.allocate(req, allocation_for(state, req, n, (dev,)))
        placed += 1
    assert placed == 10
    assert state.failure_reason(whole("x")) == "power"
    msg = state.power_message(whole("x"))
    # 1120 W idle + 11 x 630 W = 8050 W
    assert msg == "power domain r3 would draw 8.1 kW of 8.0 kW allowed (80 % of 10.0 kW)"
    admitted, budget = state.domain_draw_mw()["r3"]
    assert admitted == 1_120_000 + 10 * 630_000 <= budget == 8_000_000


def test_a_node_outside_the_rack_is_not_limited_and_a_half_gpu_draws_half():
    nodes = rack("r1", 2_000, "a", gpus=2) + [NodeSpec("free", 64000, 262144, 2, H100)]
    state = ClusterState(nodes)
    # budget 1600 W - idle 140 W = 1460 W: two full H100 (1260 W) fit, not a third share
    half = PodRequest("h", 0, 0, 1, 500)
    assert state.feasible(whole("w", 2)).tolist() == [True, True]
    state.allocate(whole("w", 2), allocation_for(state, whole("w", 2), 0, (0, 1)))
    assert state.feasible(half).tolist() == [False, True]
    assert state.failure_reason(whole("y", 3)) == "gpu"


def test_the_cap_the_agent_set_lowers_the_expected_draw():
    assert device_power_mw(H100) == (70_000, 700_000)
    assert device_power_mw(H100, 400) == (70_000, 400_000)
    # 8 GPUs capped at 400 W: idle 560 W + 8 x 330 W = 3.2 kW fits 0.8 x 4 kW; uncapped not
    capped = ClusterState(rack("r", 4_000, "a", cap=400))
    uncapped = ClusterState(rack("r", 4_000, "a"))
    assert capped.feasible(whole("p", 8)).tolist() == [True]
    assert uncapped.feasible(whole("p", 8)).tolist() == [False]
    assert uncapped.failure_reason(whole("p", 8)) == "power"


@pytest.mark.parametrize(("panel", "ratio", "field"), [
    (0, 0.8, "panelWatts"), (-5, 0.8, "panelWatts"), (math.nan, 0.8, "panelWatts"),
    (math.inf, 0.8, "panelWatts"), (1000, 0, "ratio"), (1000, 1.2, "ratio"),
    (1000, math.nan, "ratio")])
def test_bad_domains_are_refused_naming_the_field(panel, ratio, field):
    assert any(p.startswith(field) for p in domain_problems("r1", panel, ratio))
    with pytest.raises(ValueError, match=field):
        PowerDomain("r1", panel, ratio)


def test_domain_resolution_names_empty_domains_double_membership_and_unknown_labels():
    doms = [PowerDomain("r1", 10_000), PowerDomain("r2", 10_000), PowerDomain("r9", 1_000)]
    nodes = [("a", {"gpugov.io/rack": "r1"}), ("b", {"gpugov.io/rack": "r2"}),
             ("c", {"gpugov.io/rack": "r7"})]
    got, problems = resolve_domains(nodes, doms, members={"r1": ["b"]})
    assert got["a"].name == "r1"
    text = "\n".join(problems)
    assert "node 'b' is already" in text or "node b: in domain 'r1'" in text
    assert "r7" in text and "names no power domain" in text
    assert "powerDomains.r9: has no nodes" in text


# -- properties ------------------------------------------------------------------------------
@st.composite
def budgeted_fleets(draw):
    count = draw(st.integers(1, 5))
    nodes = [draw(node_specs(i)) for i in range(count)]
    nodes.append(NodeSpec(f"n{count}", 16000, 65536, 2, H100))
    domains = [PowerDomain(f"r{k}", draw(st.sampled_from([500.0, 1500.0, 3000.0, 8000.0])),
                           draw(st.sampled_from([0.8, 0.8, 0.5, 1.0]))) for k in range(2)]
    out = []
    for spec in nodes:
        pick = draw(st.integers(-1, 1))
        cap = draw(st.sampled_from([None, None, 150.0, 300.0]))
        if pick >= 0 and spec.gpu_count:
            spec = dataclasses.replace(spec, power_domain=domains[pick], gpu_power_cap_w=cap)
        out.append(spec)
    return out


def oracle_draw_mw(state: ClusterState, live) -> dict[str, int]:
    """Idle draw of every device in each domain + each allocation's share (recomputed)."""
    total: dict[str, int] = {}
    for spec in state.nodes:
        if spec.power_domain is not None:
            idle, _ = device_power_mw(spec.model, spec.gpu_power_cap_w)
            total[spec.power_domain.name] = total.get(spec.power_domain.name, 0) + \
                idle * spec.gpu_count
    for _, a in live:
        spec = state.nodes[a.node]
        if spec.power_domain is not None and a.devices:
            idle, peak = device_power_mw(spec.model, spec.gpu_power_cap_w)
            total[spec.power_domain.name] += \
                len(a.devices) * -(-(peak - idle) * a.milli // MILLI_PER_GPU)
    return total


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(fleet=budgeted_fleets(), reqs=st.lists(requests(), min_size=1, max_size=25),
       policy=st.sampled_from(["gpugov", "fgd", "bestfit"]), data=st.data())
def test_admitted_power_never_exceeds_any_domain_budget(fleet, reqs, policy, data):
    state = ClusterState(fleet)
    free = ClusterState([dataclasses.replace(s, power_domain=None) for s in fleet])
    placer = make_placer(state, policy, reqs, 0)
    live = []
    for i, req in enumerate(reqs):
        req = dataclasses.replace(req, name=f"p{i}")
        # removing the budgets never turns a node away: the filter only ever narrows
        twin = free.feasible(req)
        assert not (state.feasible(req) & ~twin).any()
        d = placer.place(req)
        if d.allocation is not None:
            free.allocate(req, d.allocation)
            live.append((req, d.allocation))
        elif twin.any() and d.reason == "power":
            assert state.power_message(req) is not None
        if live and data.draw(st.integers(0, 4)) == 0:
            r, a = live.pop(data.draw(st.integers(0, len(live) - 1)))
            state.release(r, a)
            free.release(r, a)
        want = oracle_draw_mw(state, live)
        for name, (admitted, budget) in state.domain_draw_mw().items():
            assert admitted == want[name]
            # idle draw alone may exceed a tiny panel: then nothing more is admitted there
            assert admitted <= budget or admitted == oracle_draw_mw(state, [])[name]


def test_idle_share_is_the_documented_assumption():
    assert IDLE_SHARE == 0.10 and get_model(H100).tdp_w == 700
    assert DeviceMode.EXCLUSIVE  # whole GPUs are charged 1000 milli: a full device's draw


# -- cluster.yaml ----------------------------------------------------------------------------
POOLS = {"nodePools": [
    {"name": "a", "count": 2, "model": H100, "gpus": 8, "cpuMilli": 64000,
     "memoryMiB": 262144, "labels": {"gpugov.io/rack": "r1"}},
    {"name": "b", "count": 1, "model": H100, "gpus": 8, "cpuMilli": 64000,
     "memoryMiB": 262144}]}


def test_cluster_yaml_power_domains_reach_the_replays_nodes():
    from gpugov.model.cluster_spec import parse_cluster_yaml
    from gpugov.sim.fleet import fleet_nodes
    data = dict(POOLS, powerDomains=[{"name": "r1", "panelWatts": 33000},
                                     {"name": "r2", "panelWatts": 9000, "ratio": 0.5,
                                      "nodes": ["b-0"]}])
    nodes = fleet_nodes(parse_cluster_yaml(data, "c.yaml"), "c.yaml")
    assert [(n.name, n.power_domain.name, n.power_domain.budget_w) for n in nodes] == [
        ("a-0", "r1", 26400.0), ("a-1", "r1", 26400.0), ("b-0", "r2", 4500.0)]


@pytest.mark.parametrize(("domains", "says"), [
    ([{"name": "r1", "panelWatts": 0}], "powerDomains[0].panelWatts"),
    ([{"name": "r1", "panelWatts": ".nan"}], "powerDomains[0].panelWatts"),
    ([{"name": "r1", "panelWatts": 1000, "ratio": 1.5}], "powerDomains[0].ratio"),
    ([{"name": "r1", "panelWatts": 1000, "ratio": 0}], "powerDomains[0].ratio"),
    ([{"name": "r1", "panelWatts": 1000}, {"name": "r9", "panelWatts": 1000}],
     "powerDomains.r9: has no nodes"),
    ([{"name": "r1", "panelWatts": 1000}, {"name": "r2", "panelWatts": 1000,
                                           "nodes": ["a-0"]}], "a node is in one domain"),
    ([{"name": "r1", "panelWatts": 1000, "nodes": ["zz"]}], "no node 'zz'"),
])
def test_bad_power_domains_in_cluster_yaml_are_refused_naming_the_field(domains, says):
    import yaml

    from gpugov.model.cluster_spec import ClusterFileError, parse_cluster_yaml
    from gpugov.model.validation import yaml_loader
    data = yaml.load(yaml.safe_dump(dict(POOLS, powerDomains=domains)).replace("'.nan'", ".nan"),
                     Loader=yaml_loader())  # noqa: S506 - SafeLoader
    with pytest.raises(ClusterFileError, match=None) as err:
        parse_cluster_yaml(data, "c.yaml")
    assert says in str(err.value)


def test_what_already_runs_is_counted_over_rack_and_node_budgets():
    # 2 A100 (400 W) behind a 400 W node budget and a rack that admits one GPU: a running
    # 2-GPU pod is counted anyway (a restart, a panel derated under it, limits lowered by
    # capping), and nothing new is admitted while it runs
    d = PowerDomain("r", 600)  # 480 W: idle 80 W + one GPU at 360 W
    spec = NodeSpec("a", 64000, 262144, 2, "A100-SXM4-80GB", power_budget_w=400.0,
                    power_domain=d)
    state = ClusterState([spec])
    two = whole("two", 2)
    with pytest.raises(ValueError, match="power"):
        state.allocate(two, allocation_for(state, two, 0, (0, 1)))
    with state.counting_running():
        state.allocate(two, allocation_for(state, two, 0, (0, 1)))
    assert state.domain_draw_mw()["r"] == (80_000 + 2 * 360_000, 480_000)
    assert not state.feasible(PodRequest("more", 0, 0, 1, 1)).any()
    state.release(two, allocation_for(state, two, 0, (0, 1)))
    assert state.feasible(whole("one")).tolist() == [True]
    assert not state.feasible(whole("both", 2)).any()
    assert state.failure_reason(whole("both", 2)) == "power"
