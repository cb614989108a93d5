"""Quotas and fair share in GPU memory (`gpumem`, GiB) and MIG profiles (`mig-<profile>`
counts); preemption and reclaim of MIG and soft-slice pods; trust tiers on MIG devices."""

from __future__ import annotations

import numpy as np
import pytest
from cp_helpers import CLASSES, nodes, plane
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpugov.control import reasons
from gpugov.control.config import ConfigError, parse_config
from gpugov.control.explain import explain, snapshot
from gpugov.control.resources import GPUMEM
from gpugov.control.tree import build_tree
from gpugov.control.workload import PENDING, REJECTED, RUNNING, Job
from gpugov.model.cluster import NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode
from gpugov.model.mig import MIG_GEOMETRIES
from gpugov.model.request import PodRequest

GIB = 1024
A100 = "A100-SXM4-80GB"
ONE_G = "1g.10gb"


def mig_nodes(count: int, gpus: int = 1) -> list[NodeSpec]:
    return [NodeSpec(f"m{i}", 64_000, 262_144, gpus, A100,
                     devices=(DeviceConfig(DeviceMode.MIG),) * gpus) for i in range(count)]


def submit(cp, name: str, queue: str, pod: PodRequest, pclass: str = "low", pods: int = 1,
           submit_s: float = 0.0, tenant: str = "") -> Job:
    leaf, trust = cp.tree.resolve(queue)
    return cp.submit(Job(name, leaf, cp.cfg.priority_class(pclass), submit_s, pods, pod, trust,
                         tenant=tenant))


def mig_pod(name: str, profile: str = ONE_G) -> PodRequest:
    milli = 1000 * MIG_GEOMETRIES[A100].profile(profile).compute_slices // 7
    return PodRequest(name, 1000, 1024, 1, milli, (), mode=DeviceMode.MIG, mig_profile=profile)


def slice_pod(name: str, gib: int, milli: int = 200) -> PodRequest:
    return PodRequest(name, 1000, 1024, 1, milli, (), gib * GIB)


def whole_pod(name: str, models: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest(name, 1000, 1024, 1, 1000, models)


def col(cp, resource: str) -> int:
    return cp.tree.resources.column(resource)


# -- config ---------------------------------------------------------------------------------

def test_config_takes_gpumem_and_mig_profiles_into_the_tree_arrays() -> None:
    cfg = parse_config({"queues": [
        {"name": "org", "quota": {"gpumem": 160, "mig-1g.10gb": 6}},
        {"name": "a", "parent": "org", "quota": {"gpumem": 100, "mig-1g.10gb": 4},
         "limit": {"mig-1g.10gb": 5}},
        {"name": "b", "parent": "org", "quota": {"gpumem": 60, "mig-3g.40gb": 1}}]})
    tree = build_tree(cfg)
    assert tree.resources.names == ("gpu", "cpu", "memory", "gpumem", "mig-1g.10gb",
                                    "mig-3g.40gb")
    a = tree.index("a")
    assert tree.quota[a, GPUMEM] == 100 * GIB  # GiB in YAML, MiB inside
    assert tree.quota[a, 4] == 4 and tree.limit[a, 4] == 5 and tree.limit[a, GPUMEM] == np.inf
    # the parent names no mig-3g.40gb quota: it gets its children's sum
    assert tree.quota[tree.index("org"), 5] == 1
    assert list(tree.governed) == [False, False, False, True, True, True]


@pytest.mark.parametrize("quota,needle", [
    ({"gpumemx": 1}, "queues[0].quota: unknown resource 'gpumemx'; allowed: gpu, cpu, memory, "
                     "gpumem, or mig-<profile>"),
    ({"mig-9g.99gb": 1}, "queues[0].quota: unknown MIG profile '9g.99gb' in 'mig-9g.99gb'; "
                         "allowed profiles: 1g.10gb"),
    ({"mig-1g.10gb": 1.5}, "queues[0].quota: mig-1g.10gb: 1.5 is not a whole number of MIG "
                           "instances"),
    ({"gpumem": -1}, "queues[0].quota: gpumem: -1 is negative"),
])
def test_bad_gpumem_and_mig_amounts_are_refused_naming_path_value_and_allowed(quota, needle):
    with pytest.raises(ConfigError) as err:
        parse_config({"queues": [{"name": "a", "quota": quota}]})
    assert any(p.startswith(needle) for p in err.value.problems), err.value.problems


def test_children_mig_quotas_above_the_parent_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"queues\[0\].quota.mig-1g.10gb: children of 'org'"):
        parse_config({"queues": [{"name": "org", "quota": {"mig-1g.10gb": 2}},
                                 {"name": "a", "parent": "org", "quota": {"mig-1g.10gb": 3}}]})


# -- GPU memory quotas ----------------------------------------------------------------------

def test_gpumem_quota_holds_slices_and_says_gpu_memory_blocked() -> None:
    cp = plane([{"name": "a", "limit": {"gpumem": 60}}], nodes(1, gpus=2, model=A100))
    for i in range(3):
        submit(cp, f"s{i}", "a", slice_pod(f"s{i}", 30))
    cp.cycle(0)
    assert [cp.jobs[f"s{i}"].status for i in range(3)] == [RUNNING, RUNNING, PENDING]
    s2 = cp.jobs["s2"]
    assert s2.reason == reasons.OVER_QUOTA and s2.blocked_by == "gpumem"
    assert "queue a would hold 90 GiB of GPU memory (gpumem), above its cap 60" in s2.detail
    assert "ask for less GPU memory per device" in s2.detail
    assert cp.ledger.usage[cp.tree.index("a"), GPUMEM] == 60 * GIB
    lines = explain(snapshot(cp, 0.0), "s2")
    assert "blocked by: GPU memory quota (gpumem)" in lines
    assert any("in total 1 GPU" not in ln and "30 GiB GPU memory" in ln for ln in lines)


def test_a_whole_gpu_is_charged_the_card_it_got_checked_before_commit() -> None:
    # a T4 (16 GiB) busy with queue b's job, an 80 GiB A100 free. Queue a may hold 50 GiB of
    # GPU memory: its whole-GPU job passes the check before placement (at least the
    # smallest card, 16 GiB), lands on the A100, and is refused before commit (80 > 50)
    cluster = [NodeSpec("t4", 64_000, 262_144, 1, "T4"), NodeSpec("big", 64_000, 262_144, 1, A100)]
    cp = plane([{"name": "a", "limit": {"gpumem": 50}}, {"name": "b"}], cluster)
    submit(cp, "bt4", "b", whole_pod("bt4", ("T4",)))
    cp.cycle(0)
    assert cp.jobs["bt4"].status == RUNNING
    before = cp.state.snapshot()
    w = submit(cp, "w", "a", whole_pod("w"))
    assert w.demand[GPUMEM] == 16 * 1024  # smallest allowed card: a lower bound
    cp.cycle(1)
    assert w.status == PENDING and w.reason == reasons.OVER_QUOTA and w.blocked_by == "gpumem"
    assert "would hold 80 GiB of GPU memory (gpumem), above its cap 50" in w.detail
    after = cp.state.snapshot()
    assert all(np.array_equal(before[k], after[k]) for k in before if k != "version")
    assert cp.ledger.usage[cp.tree.index("a")].sum() == 0
    # once the T4 is free the same job runs there and is charged 16 GiB
    cp.finish(cp.jobs["bt4"])
    cp.cycle(2)
    assert w.status == RUNNING and cp.state.names[w.allocations[0].node] == "t4"
    assert cp.ledger.usage[cp.tree.index("a"), GPUMEM] == 16 * 1024


def test_fair_share_of_gpu_memory_is_water_filled_by_weight() -> None:
    cp = plane([{"name": "a", "weight": 1, "limit": {"gpumem": 10_000}},
                {"name": "b", "weight": 3}], nodes(2, gpus=4, model=A100))
    for q in ("a", "b"):
        for i in range(10):
            submit(cp, f"{q}{i}", q, whole_pod(f"{q}{i}"))
    fair = cp.refresh_fair_share(0.0)
    card = 80 * GIB
    assert cp.capacity[GPUMEM] == 8 * card
    assert fair[cp.tree.index("a"), GPUMEM] == pytest.approx(2 * card)
    assert fair[cp.tree.index("b"), GPUMEM] == pytest.approx(6 * card)


# -- MIG quotas, reclaim and gangs -----------------------------------------------------------

def test_mig_profile_quota_counts_instances() -> None:
    cp = plane([{"name": "a", "limit": {"mig-1g.10gb": 2}}], mig_nodes(1))
    assert cp.capacity[col(cp, "mig-1g.10gb")] == 7  # one A100 holds seven 1g.10gb
    for i in range(3):
        submit(cp, f"m{i}", "a", mig_pod(f"m{i}"))
    cp.cycle(0)
    assert [cp.jobs[f"m{i}"].status for i in range(3)] == [RUNNING, RUNNING, PENDING]
    m2 = cp.jobs["m2"]
    assert m2.reason == reasons.OVER_QUOTA and m2.blocked_by == "mig-1g.10gb"
    assert "mig-1g.10gb instances" in m2.detail and "ask for another profile" in m2.detail
    a = cp.jobs["m0"].allocations[0]
    assert a.mig_start >= 0 and a.memory_mib == MIG_GEOMETRIES[A100].profile(ONE_G).memory_mib


def test_high_priority_mig_pods_reclaim_instances_from_a_borrowing_queue() -> None:
    cp = plane([{"name": "hi", "quota": {"mig-1g.10gb": 4}},
                {"name": "lo", "quota": {"mig-1g.10gb": 3}}], mig_nodes(1))
    for i in range(7):  # lo borrows hi's idle quota: the device is full
        submit(cp, f"lo{i}", "lo", mig_pod(f"lo{i}"), pclass="low", submit_s=i)
    cp.cycle(0)
    assert all(cp.jobs[f"lo{i}"].status == RUNNING for i in range(7))
    assert int(cp.state.mig_compute_free[0, 0]) == 0
    for i in range(2):
        submit(cp, f"hi{i}", "hi", mig_pod(f"hi{i}"), pclass="mid", submit_s=10)
    res = cp.cycle(10)
    assert {e.kind for e in res.preempted} == {"reclaim"} and len(res.preempted) == 2
    assert all(cp.jobs[f"hi{i}"].status == RUNNING for i in range(2))
    lo = [j for j in cp.jobs.values() if j.name.startswith("lo")]
    assert sum(j.status == RUNNING for j in lo) == 5  # keeps its quota (3) and more
    # the evicted instances were freed and re-used: exactly one instance per running pod
    running = [j for j in cp.jobs.values() if j.status == RUNNING]
    starts = sorted(j.allocations[0].mig_start for j in running)
    assert starts == list(range(7))
    assert cp.ledger.usage[cp.tree.index("lo"), col(cp, "mig-1g.10gb")] == 5


def test_a_gang_of_mig_pods_runs_all_or_nothing() -> None:
    # GPU memory governs (not compute), so only MIG slices decide: each node keeps room for
    # one 2g.20gb instance after five 1g.10gb pods
    cp = plane([{"name": "a", "limit": {"gpumem": 1000}}], mig_nodes(2))
    for i in range(10):
        submit(cp, f"s{i}", "a", mig_pod(f"s{i}"))
    cp.cycle(0)
    assert sum(j.status == RUNNING for j in cp.jobs.values()) == 10
    before = cp.state.snapshot()
    g = submit(cp, "gang", "a", mig_pod("gang", "2g.20gb"), pods=3)
    cp.cycle(1)
    assert g.status == PENDING and g.reason == reasons.GANG and g.allocations == []
    assert g.blocked_by == "mig-slice"
    assert "only 2 of its 3 pods fit at once (mig-slice" in g.detail
    after = cp.state.snapshot()
    assert all(np.array_equal(before[k], after[k]) for k in before if k != "version")
    for j in [j for j in cp.jobs.values() if j.status == RUNNING and j.allocations[0].node == 0]:
        cp.finish(j)
    cp.cycle(2)
    assert g.status == RUNNING and len(g.allocations) == 3
    assert len({(a.node, a.mig_start) for a in g.allocations}) == 3


def test_a_mig_gang_larger_than_the_cluster_is_rejected_naming_mig_slices() -> None:
    cp = plane([{"name": "a"}], mig_nodes(1))
    g = submit(cp, "g", "a", mig_pod("g", "3g.40gb"), pods=3)
    assert g.status == REJECTED and g.blocked_by == "mig-slice"
    assert "only 2 of its 3 pods at once even when empty" in g.detail


# -- soft slices: preemption by GPU memory ----------------------------------------------------

def test_a_soft_slice_preempts_a_lower_priority_slice_for_gpu_memory() -> None:
    cp = plane([{"name": "a", "quota": {"gpu": 4}}], nodes(1, gpus=1, model=A100))
    low = submit(cp, "low", "a", slice_pod("low", 60), pclass="mid")
    cp.cycle(0)
    assert low.status == RUNNING
    high = submit(cp, "high", "a", slice_pod("high", 40), pclass="high", submit_s=5)
    res = cp.cycle(5)
    # compute was free (200 + 200 of 1000 milli): GPU memory (60 + 40 > 80 GiB) blocked
    assert [(e.victim, e.kind) for e in res.preempted] == [("low", "preempt")]
    assert high.status == RUNNING and low.status == PENDING
    assert int(cp.state.gpu_mem_free[0, 0]) == 40 * GIB


def test_a_soft_slice_waiting_for_memory_says_gpu_memory_blocked() -> None:
    cp = plane([{"name": "a"}], nodes(1, gpus=1, model=A100))
    submit(cp, "big", "a", slice_pod("big", 60))
    w = submit(cp, "w", "a", slice_pod("w", 40))
    cp.cycle(0)
    assert w.reason == reasons.NO_NODE and w.blocked_by == "gpu-memory"
    assert w.detail.startswith("gpu-memory: no node has a GPU with both the compute and "
                               "the 40960 MiB of GPU memory free; ask for less GPU memory")


# -- trust tiers ----------------------------------------------------------------------------

def test_trust_tiers_set_isolation_floor_and_seal_from_the_tenant() -> None:
    cfg = {"tenants": [{"namespace": "ns-ext", "queue": "ext", "trust": "untrusted"},
                       {"namespace": "ns-int", "queue": "int", "trust": "internal"},
                       {"namespace": "ns-t", "queue": "t", "trust": "trusted"}]}
    cp = plane([{"name": "ext"}, {"name": "int"}, {"name": "t"}], mig_nodes(2), **cfg)
    x = submit(cp, "x", "ns-ext", mig_pod("x"), tenant="ns-ext")
    i = submit(cp, "i", "ns-int", mig_pod("i"), tenant="ns-int")
    t = submit(cp, "t", "ns-t", mig_pod("t"), tenant="ns-t")
    assert (str(x.request.min_isolation), x.request.sealed, x.request.tenant) == \
        ("hard", True, "ns-ext")
    assert (str(i.request.min_isolation), i.request.sealed) == ("soft", False)
    assert (str(t.request.min_isolation), t.request.sealed) == ("none", False)
    # a driver's stricter setting is kept, never loosened by the tier
    strict = PodRequest("s", 0, 0, 1, 1000, (), min_isolation=x.request.min_isolation)
    assert str(submit(cp, "s", "ns-t", strict).request.min_isolation) == "hard"


def test_untrusted_mig_pods_never_share_a_device_with_another_tenant() -> None:
    cp = plane([{"name": "ext"}, {"name": "int"}], mig_nodes(1, gpus=2),
               tenants=[{"namespace": "ns-ext", "queue": "ext", "trust": "untrusted"},
                        {"namespace": "ns-int", "queue": "int", "trust": "internal"}])
    for k in range(2):
        submit(cp, f"x{k}", "ns-ext", mig_pod(f"x{k}"), tenant="ns-ext")
    for k in range(8):
        submit(cp, f"i{k}", "ns-int", mig_pod(f"i{k}"), tenant="ns-int", submit_s=1)
    cp.cycle(0)
    dev_of = {j.name: j.allocations[0].devices[0] for j in cp.jobs.values()
              if j.status == RUNNING}
    x_devs = {dev_of["x0"], dev_of["x1"]}
    assert len(x_devs) == 1  # one tenant's sealed pods may share a device with each other
    assert all(d not in x_devs for n, d in dev_of.items() if n.startswith("i"))
    assert sum(n.startswith("i") for n in dev_of) == 7  # the other device: seven 1g.10gb
    # i7 waits although x's device has five free 1g.10gb slots
    assert cp.jobs["i7"].status == PENDING and cp.jobs["i7"].blocked_by == "mig-slice"
    assert int(cp.state.mig_compute_free[0, next(iter(x_devs))]) == 5


def test_every_placement_reason_has_words_that_say_what_to_change() -> None:
    from gpugov.model.cluster import REASONS

    for code in REASONS:
        words = reasons.node_words(code)
        assert words and words != code
    assert "ask for a MIG profile or a whole GPU" in reasons.NODE_WORDS["isolation"]
    assert CLASSES  # the helper classes (high non-preemptible) are what these tests use


@pytest.mark.parametrize("dimension", ["gpu-model", "node-selector", "taint", "gpu-mode",
                                       "power"])
def test_a_job_no_node_can_ever_take_is_rejected_naming_the_dimension(dimension) -> None:
    from gpugov.model.constraints import Taint

    node = NodeSpec("n0", 64_000, 262_144, 2, A100, labels=(("zone", "a"),),
                    taints=(Taint("dedicated", "infer"),) if dimension == "taint" else (),
                    power_budget_w=400.0 if dimension == "power" else None)
    cp = plane([{"name": "a"}], [node])
    pod = {"gpu-model": PodRequest("p", 0, 0, 1, 1000, ("H100-SXM5-80GB",)),
           "node-selector": PodRequest("p", 0, 0, 1, 1000, node_selector=(("zone", "b"),)),
           "taint": PodRequest("p", 0, 0, 1, 1000),
           "gpu-mode": mig_pod("p"),
           "power": PodRequest("p", 0, 0, 2, 1000)}[dimension]
    j = submit(cp, "p", "a", pod)
    assert j.status == REJECTED and j.blocked_by == dimension
    assert f"({dimension}: {reasons.node_words(dimension, j.request)})" in j.detail
    assert "even when empty" in j.detail


# -- invariants over random mixed work --------------------------------------------------------

_KINDS = ["mig1", "mig3", "slice20", "slice40", "whole", "whole2"]


def _pod(kind: str, name: str) -> PodRequest:
    return {"mig1": lambda: mig_pod(name), "mig3": lambda: mig_pod(name, "3g.40gb"),
            "slice20": lambda: slice_pod(name, 20), "slice40": lambda: slice_pod(name, 40, 400),
            "whole": lambda: whole_pod(name),
            "whole2": lambda: PodRequest(name, 1000, 1024, 2, 1000)}[kind]()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "ns-x"]), st.sampled_from(_KINDS),
                          st.integers(1, 2), st.sampled_from(["low", "mid"]),
                          st.integers(0, 3)), min_size=1, max_size=20),
       st.lists(st.integers(0, 3), max_size=4))
def test_gpumem_and_mig_caps_hold_and_the_ledger_is_what_allocations_charge(specs, finish):
    cluster = mig_nodes(1, gpus=2) + [NodeSpec("s0", 64_000, 262_144, 2, A100)]
    cp = plane([{"name": "a", "quota": {"gpumem": 100, "mig-1g.10gb": 3},
                 "limit": {"gpumem": 150, "mig-1g.10gb": 5}},
                {"name": "b", "quota": {"gpumem": 100}, "limit": {"mig-3g.40gb": 1}},
                {"name": "x"}], cluster,
               tenants=[{"namespace": "ns-x", "queue": "x", "trust": "untrusted"}])
    gov = cp.tree.governed
    for step in range(4):
        for i, (queue, kind, pods, pclass, t) in enumerate(specs):
            if t == step:
                submit(cp, f"j{i}", queue, _pod(kind, f"j{i}"), pclass=pclass, pods=pods,
                       submit_s=float(t), tenant=queue)
        running = [j for j in cp.jobs.values() if j.status == RUNNING]
        if step in finish and running:
            cp.finish(running[0])
        cp.cycle(float(step * 10))
        running = [j for j in cp.jobs.values() if j.status == RUNNING]
        # no queue above its cap in any governed column, GPU memory and MIG included
        assert (cp.ledger.usage[:, gov] <= cp.tree.cap[:, gov] + 1e-6).all()
        # the ledger is what the allocations charge: card memory for whole GPUs, one
        # instance per MIG pod
        for q in range(len(cp.tree)):
            mine = [j for j in running if j.leaf == q]
            mem = sum(a.memory_mib * len(a.devices) for j in mine for a in j.allocations)
            assert cp.ledger.usage[q, GPUMEM] == mem
            for c, r in enumerate(cp.tree.resources.names):
                if r.startswith("mig-"):
                    n = sum(len(j.allocations) for j in mine if j.request.mig_profile == r[4:])
                    assert cp.ledger.usage[q, c] == n
        for j in running:
            for a in j.allocations:
                for d in a.devices:
                    if j.request.slice_mode is DeviceMode.EXCLUSIVE:
                        assert a.memory_mib == cp.state.gpu_mem_cap[a.node, d]
                    if j.request.sealed:  # untrusted: alone on its devices but its own
                        holders = {o.request.tenant for o in running for b in o.allocations
                                   if b.node == a.node and d in b.devices}
                        assert holders == {j.request.tenant}


def test_an_unlent_gpumem_reserve_stays_free_for_its_owner() -> None:
    # a keeps all of its 80 GiB of GPU memory quota (lendingLimit 0); the cluster has two
    # 80 GiB cards, so b's second whole GPU waits although a card is free
    cp = plane([{"name": "a", "quota": {"gpumem": 80}, "lendingLimit": {"gpumem": 0}},
                {"name": "b"}], nodes(1, gpus=2, model=A100))
    b0, b1 = (submit(cp, f"b{i}", "b", whole_pod(f"b{i}")) for i in range(2))
    cp.cycle(0)
    assert b0.status == RUNNING and b1.status == PENDING and b1.blocked_by == "gpumem"
    assert "+ 80 idle reserve that is never lent" in b1.detail
    a0 = submit(cp, "a0", "a", whole_pod("a0"), submit_s=1)
    cp.cycle(1)
    assert a0.status == RUNNING  # the reserve was kept for it
    snap = snapshot(cp, 1.0)
    assert snap["queues"]["a"]["usage"]["gpumem"] == 80.0
    assert snap["queues"]["a"]["quota"]["gpumem"] == 80.0


def test_queue_status_and_explain_show_mig_instances() -> None:
    cp = plane([{"name": "a", "quota": {"mig-1g.10gb": 2}}], mig_nodes(1))
    for i in range(3):
        submit(cp, f"m{i}", "a", mig_pod(f"m{i}"))
    cp.cycle(0)
    snap = snapshot(cp, 0.0)
    q = snap["queues"]["a"]
    assert q["usage"]["mig-1g.10gb"] == 3 and q["quota"]["mig-1g.10gb"] == 2
    assert q["fair_share"]["mig-1g.10gb"] == 3  # it borrows what nobody else wants
    assert snap["jobs"]["m0"]["demand"]["mig-1g.10gb"] == 1
    assert any("3 x mig-1g.10gb" in line for line in explain(snap, "m0"))


def test_a_higher_class_mig_pod_preempts_within_its_queue() -> None:
    cp = plane([{"name": "a", "quota": {"gpu": 1}}], mig_nodes(1))
    for i in range(7):
        submit(cp, f"lo{i}", "a", mig_pod(f"lo{i}"), pclass="low", submit_s=i)
    cp.cycle(0)
    hi = submit(cp, "hi", "a", mig_pod("hi", "2g.20gb"), pclass="mid", submit_s=10)
    res = cp.cycle(10)
    assert hi.status == RUNNING and {e.kind for e in res.preempted} == {"preempt"}
    # a 2g.20gb instance needs two adjacent free slices: the victims are the ones freeing them
    assert len(res.preempted) == 2
    freed = {cp.jobs[e.victim].name for e in res.preempted}
    assert all(cp.jobs[n].status == PENDING for n in freed)


def test_every_blocked_job_names_its_dimension_even_when_the_answer_was_cached() -> None:
    cp = plane([{"name": "a", "limit": {"gpumem": 60}}], nodes(1, gpus=2, model=A100))
    for i in range(4):  # two fit the gpumem cap, two identical ones do not
        submit(cp, f"a{i}", "a", slice_pod(f"a{i}", 30))
    cp.cycle(0)
    assert [cp.jobs[f"a{i}"].blocked_by for i in range(4)] == ["", "", "gpumem", "gpumem"]
    cp = plane([{"name": "b"}], nodes(1, gpus=1, model=A100))
    for i in range(3):  # the card's memory is gone after one 60 GiB slice
        submit(cp, f"b{i}", "b", slice_pod(f"b{i}", 60))
    cp.cycle(0)
    assert [cp.jobs[f"b{i}"].blocked_by for i in range(3)] == ["", "gpu-memory", "gpu-memory"]
    assert cp.jobs["b2"].detail == cp.jobs["b1"].detail


def test_mig_capacity_counts_fixed_layouts_and_dynamic_devices() -> None:
    from gpugov.model.mig import MigInstance

    layout = (MigInstance(0, "3g.40gb"), MigInstance(4, "2g.20gb"), MigInstance(6, "1g.10gb"))
    fixed = DeviceConfig(DeviceMode.MIG, mig_layout=layout)
    node = NodeSpec("m", 64_000, 262_144, 3, A100,
                    devices=(fixed, DeviceConfig(DeviceMode.MIG), DeviceConfig()))
    cp = plane([{"name": "a", "limit": {"mig-1g.10gb": 100, "mig-3g.40gb": 100,
                                        "mig-7g.80gb": 100}}], [node])
    cap = {r: cp.capacity[c] for c, r in enumerate(cp.tree.resources.names)}
    # the fixed device holds one 1g.10gb and one 3g.40gb; the dynamic one up to 7 and 2;
    # the soft device none
    assert (cap["mig-1g.10gb"], cap["mig-3g.40gb"], cap["mig-7g.80gb"]) == (8, 3, 1)
    assert cap["gpumem"] == 3 * 80 * GIB


def test_a_blocked_mig_job_reserves_a_node_that_can_hold_it() -> None:
    # two MIG nodes full of 1g.10gb pods; a 7g.80gb job (a whole MIG device) waits with
    # no-node-fits and reserves one node, so later 1g.10gb jobs cannot refill it
    cp = plane([{"name": "a"}], mig_nodes(2))
    for i in range(14):
        submit(cp, f"s{i}", "a", mig_pod(f"s{i}"))
    cp.cycle(0)
    big = submit(cp, "big", "a", mig_pod("big", "7g.80gb"), submit_s=1)  # nothing to preempt
    cp.cycle(1)
    assert big.status == PENDING and big.reason == reasons.NO_NODE  # the cluster is full
    assert len(cp.reservations["big"]) == 1
    node = int(cp.reservations["big"][0])
    for j in [j for j in cp.jobs.values() if j.status == RUNNING]:
        if j.allocations[0].node == node:
            cp.finish(j)
            break
    late = submit(cp, "late", "a", mig_pod("late"), submit_s=2)
    cp.cycle(2)
    assert late.status == PENDING and late.reason == reasons.PRIORITY
    for j in [j for j in cp.jobs.values() if j.status == RUNNING]:
        if j.allocations[0].node == node:
            cp.finish(j)
    cp.cycle(3)
    assert big.status == RUNNING and big.allocations[0].node == node
