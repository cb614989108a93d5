"""Reclaim must not give up because small victims came first in policy order."""

from tests.control.cp_helpers import gpus_used, job, nodes, plane

from gpugov.control.workload import RUNNING


def test_reclaim_does_not_give_up_when_small_victims_come_first():
    # one 4-GPU node: b holds a whole GPU (oldest) and two 0.6 slices (newer) that share
    # their devices with a's 0.4 slices, so evicting them frees no whole GPU
    cp = plane([{"name": "a", "quota": {"gpu": 3}}, {"name": "b", "quota": {"gpu": 1}}],
               nodes(1))
    steps = [("b-whole", "b", 1000), ("a-f1", "a", 400), ("b-f1", "b", 600),
             ("a-f2", "a", 400), ("b-f2", "b", 600), ("a0", "a", 1000)]
    for t, (name, queue, milli) in enumerate(steps):
        job(cp, name, queue, milli=milli, submit=t)
        cp.cycle(t)
        assert cp.jobs[name].status == RUNNING, name
    assert round(gpus_used(cp, "b"), 3) == 2.2  # over its quota of 1
    job(cp, "a-new", "a", submit=10)
    result = cp.cycle(1000)
    # newest-first would take b-f2 and b-f1, after which evicting b-whole breaks b's quota:
    # the whole GPU alone is the one victim that works, and it keeps b at its quota
    assert [(e.victim, e.kind) for e in result.preempted] == [("b-whole", "reclaim")]
    assert cp.jobs["a-new"].status == RUNNING
    assert cp.jobs["b-f1"].status == RUNNING and cp.jobs["b-f2"].status == RUNNING
    assert round(gpus_used(cp, "b"), 3) == 1.2
