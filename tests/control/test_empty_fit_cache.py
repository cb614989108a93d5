"""The control plane's "could this job ever run here" answer, cached per request shape, is
the answer computed afresh (the vectorised count on the fast path, a first fit on the empty
cluster otherwise), whatever the order of the questions."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.control import gang
from gpugov.control.schema import PriorityClassConfig
from gpugov.control.workload import Job
from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode
from gpugov.model.isolation import TrustTier
from gpugov.model.request import PodRequest

MODEL = "A100-SXM4-80GB"
DEVICES = (DeviceConfig(), DeviceConfig(DeviceMode.EXCLUSIVE), DeviceConfig(DeviceMode.MIG),
           DeviceConfig(DeviceMode.TIMESLICE, replicas=2),
           DeviceConfig(DeviceMode.TIMESLICE, replicas=4), DeviceConfig(DeviceMode.MPS, replicas=3))
#: requests of both paths: first fit (MIG, replicas, sealed, exclusive) and the fast path
KINDS = (
    dict(gpu_count=1, gpu_milli=1000),
    dict(gpu_count=4, gpu_milli=1000),
    dict(gpu_count=1, gpu_milli=250),
    dict(),  # CPU only
    dict(gpu_count=1, gpu_milli=142, mode=DeviceMode.MIG, mig_profile="1g.10gb"),
    dict(gpu_count=2, gpu_milli=285, mode=DeviceMode.MIG, mig_profile="2g.20gb"),
    dict(gpu_count=1, gpu_milli=428, mode=DeviceMode.MIG, mig_profile="3g.40gb"),
    dict(gpu_count=1, gpu_milli=250, mode=DeviceMode.TIMESLICE, gpu_memory_mib=16384),
    dict(gpu_count=1, gpu_milli=250, mode=DeviceMode.MPS),
    dict(gpu_count=1, gpu_milli=300, gpu_memory_mib=20480),
    dict(gpu_count=2, gpu_milli=1000, mode=DeviceMode.EXCLUSIVE),
    dict(gpu_count=1, gpu_milli=500, gpu_memory_mib=40960, tenant="t", sealed=True),
)
CLASS = PriorityClassConfig(name="c", value=0)

node_specs = st.lists(
    st.tuples(st.lists(st.sampled_from(DEVICES), min_size=1, max_size=4),
              st.sampled_from([8_000, 32_000, 64_000])),
    min_size=1, max_size=5)
questions = st.lists(st.tuples(st.integers(0, len(KINDS) - 1), st.integers(1, 14),
                               st.sampled_from([1_000, 6_000, 20_000])),
                     min_size=1, max_size=25)


def _uncached(state: ClusterState, job: Job) -> tuple[int, str]:
    """The answer as it was computed for every job before the cache."""
    req = job.request
    if state.fast_path(req):
        fit = int(gang.pods_per_node(state, req, free=False).sum())
        if fit >= job.pods:
            return job.pods, ""
        if fit == 0:
            return 0, gang.empty_twin(state).failure_reason(req)
        return fit, "gpu" if req.is_gpu else "cpu"
    return gang.first_fit_empty(state, req, job.pods)


def _nodes(specs: list[tuple[list[DeviceConfig], int]]) -> list[NodeSpec]:
    return [NodeSpec(f"n{i}", cpu, 262_144, len(devs), MODEL, devices=tuple(devs))
            for i, (devs, cpu) in enumerate(specs)]


def _job(i: int, kind: int, pods: int, cpu: int) -> Job:
    pod = PodRequest(f"job-{i}", cpu, 4096, **KINDS[kind])
    return Job(f"job-{i}", 0, CLASS, 0.0, pods, pod, TrustTier.TRUSTED)


@settings(max_examples=60, deadline=None)
@given(specs=node_specs, asked=questions)
def test_the_cached_answer_is_a_fresh_first_fit(specs, asked):
    state = ClusterState(_nodes(specs))
    for i, (kind, pods, cpu) in enumerate(asked):
        job = _job(i, kind, pods, cpu)
        cached = gang.empty_cluster_fit(state, job)
        fresh = ClusterState(_nodes(specs))  # nothing cached for it yet
        assert cached == _uncached(fresh, job), (kind, pods, cpu)
        assert gang.empty_cluster_fit(fresh, job) == cached


def test_jobs_that_differ_only_in_name_share_one_first_fit(monkeypatch):
    state = ClusterState(_nodes([([DEVICES[2]] * 2, 64_000)]))
    calls: list[int] = []
    real = gang.first_fit_empty

    def counted(state, req, pods):
        calls.append(pods)
        return real(state, req, pods)
    monkeypatch.setattr(gang, "first_fit_empty", counted)
    answers = [gang.empty_cluster_fit(state, _job(i, 4, pods, 1_000))
               for i, pods in enumerate([3, 2, 3, 30, 5, 31])]
    # 2 MIG devices x 7 instances of 1g.10gb: 14 pods fit at once, the 15th finds no slice
    assert answers == [(3, ""), (2, ""), (3, ""), (14, "mig-slice"), (5, ""), (14, "mig-slice")]
    assert calls == [3, 30]  # fewer pods than shown to fit, or past the limit: no first fit
    other = dataclasses.replace(_job(9, 4, 3, 1_000).pod, name="x", cpu_milli=2_000)
    gang.empty_cluster_fit(state, Job("x", 0, CLASS, 0.0, 3, other, TrustTier.TRUSTED))
    assert calls == [3, 30, 3]  # another shape: its own first fit


def test_the_fast_path_counts_the_empty_nodes_once_per_shape(monkeypatch):
    state = ClusterState([NodeSpec(f"n{i}", 64_000, 262_144, 8, MODEL) for i in range(3)])
    calls: list[int] = []
    real = gang.pods_per_node

    def counted(state, req, free):
        calls.append(free)
        return real(state, req, free)
    monkeypatch.setattr(gang, "pods_per_node", counted)
    answers = [gang.empty_cluster_fit(state, _job(i, 1, pods, 1_000))
               for i, pods in enumerate([2, 6, 7, 1])]
    assert answers == [(2, ""), (6, ""), (6, "gpu"), (1, "")]  # 3 nodes x 2 pods of 4 GPUs
    assert calls == [False]  # one count of the empty nodes for the shape, not one per job
