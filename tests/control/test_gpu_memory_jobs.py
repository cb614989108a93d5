"""The control plane places jobs that name GPU memory: memory is never overcommitted, a job
that fits nowhere for lack of GPU memory says so, untrusted tenants keep their memory need."""

from __future__ import annotations

from cp_helpers import nodes, plane

from gpugov.control import reasons
from gpugov.control.workload import PENDING, RUNNING, Job
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


def test_untrusted_tenant_takes_a_whole_card_with_enough_memory() -> None:
    cluster = nodes(1, gpus=2, model="T4") + nodes(1, gpus=2, model="A100-SXM4-80GB")
    cluster[1] = type(cluster[1])("big", 64_000, 262_144, 2, "A100-SXM4-80GB")
    cp = plane([{"name": "ext"}], cluster,
               tenants=[{"namespace": "ns-ext", "queue": "ext", "trust": "untrusted"}])
    mem_job(cp, "x", "ns-ext", 200, 40)  # a 40 GiB slice: no T4 (16 GiB) can hold it
    cp.cycle(0)
    x = cp.jobs["x"]
    assert x.status == RUNNING
    assert cp.state.names[x.allocations[0].node] == "big"
    assert x.allocations[0].milli == 1000  # untrusted: the whole device
    assert cp.state.gpu_mem_free[x.allocations[0].node, x.allocations[0].devices[0]] == 0
