"""One scenario per control-plane rule (see docs/control-plane.md)."""

from __future__ import annotations

from cp_helpers import gpus_used, job, nodes, plane, two_queues

from gpugov.control import reasons
from gpugov.control.workload import PENDING, REJECTED, RUNNING


def test_guaranteed_quota_reachable_within_one_cycle_after_burst():
    cp = two_queues()
    for i in range(8):
        job(cp, f"b{i}", "b")
    cp.cycle(0)
    assert gpus_used(cp, "b") == 8  # b borrows a's idle quota
    for i in range(4):
        job(cp, f"a{i}", "a", submit=10)
    result = cp.cycle(10)
    assert gpus_used(cp, "a") == 4 and gpus_used(cp, "b") == 4
    assert {e.kind for e in result.preempted} == {"reclaim"}
    assert all(e.victim_queue == "b" for e in result.preempted)


def test_borrowing_stops_at_borrowing_limit():
    cp = plane([{"name": "a", "quota": {"gpu": 2}, "borrowingLimit": {"gpu": 2}},
                {"name": "b", "quota": {"gpu": 6}}], nodes(2))
    for i in range(8):
        job(cp, f"a{i}", "a")
    cp.cycle(0)
    assert gpus_used(cp, "a") == 4
    waiting = [j for j in cp.jobs.values() if j.status == PENDING]
    assert waiting and all(j.reason == reasons.OVER_QUOTA for j in waiting)
    assert "cap 4" in waiting[0].detail


def test_lending_stops_at_lending_limit():
    cp = plane([{"name": "a", "quota": {"gpu": 4}, "lendingLimit": {"gpu": 1}},
                {"name": "b", "quota": {"gpu": 4}}], nodes(2))
    for i in range(8):
        job(cp, f"b{i}", "b")
    cp.cycle(0)
    assert gpus_used(cp, "b") == 5  # its quota + the 1 GPU a may lend
    assert cp.jobs["b7"].reason == reasons.FAIR_SHARE
    for i in range(3):
        job(cp, f"a{i}", "a", submit=1)
    result = cp.cycle(1)
    assert gpus_used(cp, "a") == 3 and not result.preempted  # a's reserve was kept free


def test_intra_queue_preemption_only_strictly_lower_preemptible_past_min_runtime():
    classes = [
        {"name": "high", "value": 1000, "preemptible": False},
        {"name": "mid", "value": 100, "preemptible": True},
        {"name": "low", "value": 10, "preemptible": True, "minRuntime": "100s"},
    ]
    cp = plane([{"name": "a", "quota": {"gpu": 4}}], nodes(1), priorityClasses=classes)
    job(cp, "h", "a", pclass="high")
    job(cp, "m", "a", pclass="mid")
    job(cp, "l1", "a", pclass="low")
    job(cp, "l2", "a", pclass="low")
    cp.cycle(0)
    assert all(cp.jobs[n].status == RUNNING for n in ("h", "m", "l1", "l2"))
    job(cp, "p", "a", pclass="mid", submit=10)
    assert not cp.cycle(10).preempted  # l1/l2 are still inside their minRuntime
    result = cp.cycle(200)
    assert [(e.victim, e.kind) for e in result.preempted] == [("l2", "preempt")]
    job(cp, "q", "a", gpus=2, pclass="high", submit=300)
    result = cp.cycle(300)
    victims = {e.victim for e in result.preempted}
    assert victims == {"l1", "p"}  # lowest priority first, then the newest equal one
    assert cp.jobs["h"].status == RUNNING and cp.jobs["m"].status == RUNNING
    job(cp, "m2", "a", pclass="mid", submit=400)
    assert not cp.cycle(400).preempted  # equal priority never preempts


def test_reclaim_never_takes_in_quota_resources():
    cp = plane([{"name": "a", "quota": {"gpu": 4}}, {"name": "b", "quota": {"gpu": 4}}],
               nodes(2))
    for i in range(3):
        job(cp, f"b{i}", "b", submit=i)
    job(cp, "b-big", "b", gpus=2, submit=5)  # b holds 5 of its quota 4
    for i in range(3):
        job(cp, f"a{i}", "a", submit=6)
    cp.cycle(6)
    assert gpus_used(cp, "b") == 5 and gpus_used(cp, "a") == 3
    job(cp, "a3", "a", submit=7)
    job(cp, "a4", "a", submit=7)
    result = cp.cycle(7)
    # evicting b-big (newest) would take b below its quota: a smaller victim is chosen
    assert [e.victim for e in result.preempted] == ["b2"]
    assert gpus_used(cp, "b") == 4 and cp.jobs["b-big"].status == RUNNING
    assert not cp.cycle(8).preempted and gpus_used(cp, "b") == 4


def test_gang_never_runs_partially_and_does_not_deadlock_the_queue():
    cp = plane([{"name": "a", "quota": {"gpu": 12}}], nodes(3))
    job(cp, "g1", "a", gpus=3, pods=2, submit=0)
    job(cp, "g2", "a", gpus=3, pods=2, submit=1)
    job(cp, "s", "a", gpus=1, submit=2)
    cp.cycle(2)
    assert cp.jobs["g1"].status == RUNNING and len(cp.jobs["g1"].allocations) == 2
    assert cp.jobs["g2"].status == PENDING and cp.jobs["g2"].allocations == []
    assert cp.jobs["g2"].reason == reasons.GANG
    assert cp.jobs["s"].status == RUNNING  # the queue moves on behind the gang
    assert "only 1 of its 2 pods" in cp.jobs["g2"].detail
    assert cp.state.used_gpu_milli == 7000
    cp.finish(cp.jobs["g1"])
    cp.cycle(3)
    assert cp.jobs["g2"].status == RUNNING and len(cp.jobs["g2"].allocations) == 2


def test_backfill_does_not_starve_the_head():
    cp = plane([{"name": "a", "quota": {"gpu": 8}}], nodes(2))
    for i in range(4):
        job(cp, f"s{i}", "a", submit=0)
    job(cp, "other", "a", gpus=4, submit=0)
    cp.cycle(0)  # n000 or n001 is full with `other`, the smalls fill the rest
    job(cp, "big", "a", gpus=4, submit=1)
    started_small = 0
    for t in range(2, 40):
        smalls = sorted((j for j in cp.jobs.values()
                         if j.status == RUNNING and j.name.startswith("s")),
                        key=lambda j: j.start)
        if smalls:
            cp.finish(smalls[0])
        job(cp, f"s{t + 10}", "a", submit=t)  # a steady stream of small jobs
        started = cp.cycle(t).started
        started_small += sum(j.name.startswith("s") for j in started)
        if cp.jobs["big"].status == RUNNING:
            break
    assert cp.jobs["big"].status == RUNNING, cp.jobs["big"].detail
    assert t <= 8


def test_backfill_still_uses_other_nodes_while_the_head_waits():
    cp = plane([{"name": "a", "quota": {"gpu": 12}}], nodes(3))
    job(cp, "o1", "a", gpus=3, submit=0)
    job(cp, "o2", "a", gpus=3, submit=0)
    job(cp, "o3", "a", gpus=2, submit=0)
    cp.cycle(0)
    job(cp, "big", "a", gpus=4, submit=1)
    for i in range(3):
        job(cp, f"s{i}", "a", submit=2)
    cp.cycle(2)
    assert cp.jobs["big"].status == PENDING and cp.jobs["big"].reason == reasons.NO_NODE
    # two smalls backfill the single free GPUs; the node big waits for stays free
    assert [cp.jobs[f"s{i}"].status for i in range(3)] == [RUNNING, RUNNING, PENDING]
    assert cp.jobs["s2"].reason == reasons.PRIORITY and "big" in cp.jobs["s2"].detail
    cp.finish(cp.jobs["o3"])
    cp.cycle(3)
    assert cp.jobs["big"].status == RUNNING


def test_equal_weight_idle_and_busy_queues_converge_to_equal_shares():
    cp = plane([{"name": "a"}, {"name": "b"}], nodes(2))
    for i in range(8):
        job(cp, f"b{i}", "b")
    cp.cycle(0)
    assert gpus_used(cp, "b") == 8
    for i in range(8):
        job(cp, f"a{i}", "a", submit=1)
    for t in range(1, 4):
        cp.cycle(t)
    assert gpus_used(cp, "a") == 4 and gpus_used(cp, "b") == 4
    assert list(cp.fair[:, 0]) == [4000, 4000]


def test_untrusted_tenant_never_shares_a_device():
    cp = plane([{"name": "ext"}, {"name": "int"}], nodes(1, gpus=2),
               tenants=[{"namespace": "ns-ext", "queue": "ext", "trust": "untrusted"},
                        {"namespace": "ns-int", "queue": "int", "trust": "internal"}])
    job(cp, "x", "ns-ext")  # a whole GPU
    job(cp, "i1", "ns-int", milli=300)
    job(cp, "i2", "ns-int", milli=300)
    job(cp, "i3", "ns-int", milli=300)
    slice_ = job(cp, "xs", "ns-ext", milli=300)  # a soft slice: below the tier's floor
    cp.cycle(0)
    assert slice_.status == REJECTED and slice_.blocked_by == "isolation"
    assert "ask for a MIG profile or a whole GPU" in slice_.detail
    x_dev = cp.jobs["x"].allocations[0].devices
    others = {d for n in ("i1", "i2", "i3") for d in cp.jobs[n].allocations[0].devices}
    assert x_dev[0] not in others and others == {1 - x_dev[0]}
    assert gpus_used(cp, "ext") == 1
    # the sealed device stays closed while x runs: a fourth slice waits for the shared one
    cp.finish(cp.jobs["i1"])
    job(cp, "i4", "ns-int", milli=800)
    cp.cycle(1)
    assert cp.jobs["i4"].status == PENDING


