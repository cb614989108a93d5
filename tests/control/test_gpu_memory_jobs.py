"""The control plane places jobs that name GPU memory: memory is never overcommitted, a job
that fits nowhere for lack of GPU memory says so, untrusted tenants get whole cards with the
memory they need and no soft slices."""

from __future__ import annotations

import numpy as np
from cp_helpers import nodes, plane
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpugov.control import reasons
from gpugov.control.resources import GPUMEM
from gpugov.control.workload import PENDING, REJECTED, RUNNING, Job
from gpugov.model.cluster import NodeSpec
from gpugov.model.request import PodRequest

GIB = 1024


def mem_job(cp, name: str, queue: str, milli: int, gib: int, count: int = 1) -> Job:
    leaf, trust = cp.tree.resolve(queue)
    pod = PodRequest(name, 1000, 1024, count, milli, (), gib * GIB)
    return cp.submit(Job(name, leaf, cp.cfg.priority_class("low"), 0.0, 1, pod, trust))


def test_memory_slices_share_a_card_until_its_memory_is_gone() -> None:
    # one node with two 80 GiB cards; 30 GiB inference pods with little compute
    cp = plane([{"name": "a"}], nodes(1, gpus=2, model="A100-SXM4-80GB"))
    for i in range(5):
        mem_job(cp, f"p{i}", "a", 100, 30)
    cp.cycle(0)
    running = [j for j in cp.jobs.values() if j.status == RUNNING]
    assert len(running) == 4  # two per card: 3 x 30 GiB > 80 GiB although compute is left
    per_device: dict[int, int] = {}
    for j in running:
        a = j.allocations[0]
        assert a.memory_mib == 30 * GIB
        per_device[a.devices[0]] = per_device.get(a.devices[0], 0) + a.memory_mib
    assert sorted(per_device.values()) == [60 * GIB, 60 * GIB]
    waiting = cp.jobs["p4"]
    assert waiting.status == PENDING and waiting.reason == reasons.NO_NODE
    assert "GPU memory" in waiting.detail


def test_untrusted_slice_is_refused_and_its_whole_gpu_takes_a_card_with_enough_memory() -> None:
    cluster = nodes(1, gpus=2, model="T4") + nodes(1, gpus=2, model="A100-SXM4-80GB")
    cluster[1] = type(cluster[1])("big", 64_000, 262_144, 2, "A100-SXM4-80GB")
    cp = plane([{"name": "ext"}], cluster,
               tenants=[{"namespace": "ns-ext", "queue": "ext", "trust": "untrusted"}])
    # a soft slice gives soft isolation, below the untrusted tier's floor (hard): refused,
    # not silently widened to a whole device
    mem_job(cp, "x", "ns-ext", 200, 40)
    x = cp.jobs["x"]
    assert x.status == REJECTED and x.blocked_by == "isolation"
    assert "ask for a MIG profile or a whole GPU" in x.detail
    mem_job(cp, "w", "ns-ext", 1000, 40)  # a whole GPU with 40 GiB: no T4 (16 GiB) holds it
    cp.cycle(0)
    w = cp.jobs["w"]
    assert w.status == RUNNING
    a = w.allocations[0]
    assert cp.state.names[a.node] == "big" and a.milli == 1000
    assert cp.state.gpu_mem_free[a.node, a.devices[0]] == 0
    # the queue is charged the card it got, not the 40 GiB it named
    card = int(cp.state.gpu_mem_cap[a.node, a.devices[0]])
    assert cp.ledger.usage[cp.tree.index("ext"), GPUMEM] == card == 80 * GIB


jobs_st = st.lists(st.tuples(
    st.sampled_from(["ns-ext", "ns-int", "a"]), st.sampled_from(["high", "low"]),
    st.sampled_from([(1, 100), (1, 300), (1, 500), (1, 1000), (2, 1000)]),
    st.sampled_from([0, 0, 8, 20, 30, 50, 90]), st.integers(0, 3)), min_size=1, max_size=25)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs_st, st.lists(st.integers(0, 3), max_size=6))
def test_state_matches_running_jobs_and_memory_is_never_overcommitted(specs, finish) -> None:
    cluster = [NodeSpec("big0", 64_000, 262_144, 2, "A100-SXM4-80GB"),
               NodeSpec("big1", 64_000, 262_144, 2, "A100-SXM4-80GB"),
               NodeSpec("t4", 64_000, 262_144, 2, "T4")]
    cp = plane([{"name": "a"}, {"name": "ext"}, {"name": "int"}], cluster, policy="fgd",
               tenants=[{"namespace": "ns-ext", "queue": "ext", "trust": "untrusted"},
                        {"namespace": "ns-int", "queue": "int", "trust": "internal"}])
    for step in range(4):
        for i, (queue, pclass, (count, milli), gib, t) in enumerate(specs):
            if t == step:
                leaf, trust = cp.tree.resolve(queue)
                pod = PodRequest(f"j{i}", 1000, 1024, count, milli, (), gib * GIB)
                cp.submit(Job(f"j{i}", leaf, cp.cfg.priority_class(pclass), float(t), 1, pod,
                              trust))
        running = [j for j in cp.jobs.values() if j.status == RUNNING]
        if step in finish and running:
            cp.finish(running[0])
        cp.cycle(float(step * 10))
        s = cp.state
        milli = np.zeros_like(s.gpu_cap)
        memory = np.zeros_like(s.gpu_mem_cap)
        holders: dict[tuple[int, int], set[str]] = {}
        for j in cp.jobs.values():
            if j.status != RUNNING:
                continue
            for a in j.allocations:
                for d in a.devices:
                    milli[a.node, d] += a.milli
                    memory[a.node, d] += (s.gpu_mem_cap[a.node, d] if a.milli == 1000
                                          else a.memory_mib)
                    holders.setdefault((a.node, d), set()).add(j.name)
                    # memory named by the pod is there on every device it holds
                    assert s.gpu_mem_cap[a.node, d] >= j.pod.gpu_memory_mib
                if j.trust.value == "untrusted":
                    assert a.milli == 1000  # untrusted: whole devices only
        assert (milli == s.gpu_cap - s.gpu_free).all()
        assert (memory == s.gpu_mem_cap - s.gpu_mem_free).all()
        assert (memory <= s.gpu_mem_cap).all() and (milli <= s.gpu_cap).all()
        for names in holders.values():  # a whole device is never shared
            owners = [cp.jobs[n] for n in names]
            if any(a.milli == 1000 for o in owners for a in o.allocations):
                assert len(owners) == 1
