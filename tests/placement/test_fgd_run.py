"""A whole FGD trace run through the C loop (native/placement/fgd.c `gg_fgd_run`,
gpugov.placement.fgd_run) gives exactly the Python path's run: every series, every outcome
and reason, every array of the cluster state and the meter — also when pods the C loop does
not serve (GPU memory named, a sealed tenant, a device mode) take turns with it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.placement.test_fgd_native import nodes_st
from tests.placement.test_fragmentation_fast import MODELS, pod_st

import gpugov.sim.experiment as experiment
from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.model.request import PodRequest
from gpugov.placement import fgd_run, native_fgd

#: what allocation changes in the state (ClusterState._MUTABLE's plain-pod part and more)
STATE_ARRAYS = ("cpu_free", "mem_free", "gpu_free", "gpu_mem_free", "kind_count", "pod_count",
                "version", "gpu_free_total", "full_gpus", "max_gpu_free", "dev_pods",
                "dev_sealed", "dev_owner", "rep_free")


@st.composite
def other_pod_st(draw: st.DrawFn) -> PodRequest:
    """Pods the C loop leaves to the Python path."""
    kind = draw(st.sampled_from(["memory", "sealed", "floor", "mps"]))
    cpu = draw(st.sampled_from([0, 1000, 8000]))
    if kind == "memory":
        return PodRequest("m", cpu, 1024, 1, draw(st.sampled_from([250, 500, 1000])),
                          gpu_memory_mib=draw(st.sampled_from([1024, 8192, 40000])))
    if kind == "sealed":
        return PodRequest("s", cpu, 1024, 1, 500, tenant="t", sealed=True)
    if kind == "floor":
        return PodRequest("f", cpu, 1024, 1, 250, min_isolation=IsolationLevel.HARD)
    return PodRequest("x", cpu, 1024, 1, 1000, mode=DeviceMode.MPS)


class _Recording(ClusterState):
    made: list[ClusterState] = []

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        _Recording.made.append(self)


class _Counting(fgd_run.TraceRun):
    served = 0

    def run(self, start, *totals):  # type: ignore[no-untyped-def]
        stop, *rest = super().run(start, *totals)
        _Counting.served += max(stop - start, 0)
        return (stop, *rest)


def _experiment(nodes: list[NodeSpec], pods: list[PodRequest], seed: int, tune: float,
                native: bool, monkeypatch: pytest.MonkeyPatch
                ) -> tuple[experiment.RunResult, ClusterState, int]:
    """(the run, its cluster state after, pods the C loop served)."""
    monkeypatch.setenv(native_fgd.ENV_SWITCH, "1" if native else "0")
    monkeypatch.setattr(experiment, "ClusterState", _Recording)
    monkeypatch.setattr(experiment, "TraceRun", _Counting)
    _Recording.made, _Counting.served = [], 0
    result = experiment.run_experiment(nodes, pods, "fgd", seed, tune)
    return result, _Recording.made[-1], _Counting.served


def _same(got: tuple, want: tuple) -> None:
    a, b = got[0], want[0]
    assert a.outcomes == b.outcomes
    assert (a.placed, a.pods, a.failures) == (b.placed, b.pods, b.failures)
    assert list(a.failures) == list(b.failures)  # insertion order too (first failure first)
    for name in ("arrived_milli", "used_milli", "frag_milli", "idle_milli"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for name in STATE_ARRAYS:
        assert np.array_equal(getattr(got[1], name), getattr(want[1], name)), name


@settings(max_examples=50, deadline=None)
@given(nodes_st, st.lists(pod_st(), min_size=1, max_size=40), st.integers(0, 2**32 - 1),
       st.sampled_from([0.5, 1.3, 3.0]))
def test_c_loop_runs_as_the_python_path(nodes, pods, seed, tune) -> None:
    pods = [PodRequest(f"p{i}", p.cpu_milli, p.memory_mib, p.gpu_count, p.gpu_milli, p.models)
            for i, p in enumerate(pods)]
    with pytest.MonkeyPatch.context() as mp:
        got = _experiment(nodes, pods, seed, tune, True, mp)
        want = _experiment(nodes, pods, seed, tune, False, mp)
    _same(got, want)
    assert want[2] == 0
    if any(n.gpu_count for n in nodes):
        assert got[2] == got[0].pods  # every plain pod through the C loop


@settings(max_examples=50, deadline=None)
@given(nodes_st, st.lists(st.one_of(pod_st(), other_pod_st()), min_size=1, max_size=40),
       st.integers(0, 2**32 - 1))
def test_pods_left_to_python_take_turns_with_the_c_loop(nodes, pods, seed) -> None:
    pods = [PodRequest(f"p{i}", p.cpu_milli, p.memory_mib, p.gpu_count, p.gpu_milli, p.models,
                       p.gpu_memory_mib, p.mode, tenant=p.tenant, sealed=p.sealed,
                       min_isolation=p.min_isolation) for i, p in enumerate(pods)]
    with pytest.MonkeyPatch.context() as mp:
        got = _experiment(nodes, pods, seed, 1.3, True, mp)
        want = _experiment(nodes, pods, seed, 1.3, False, mp)
    _same(got, want)


def test_every_reason_the_c_loop_gives_is_the_states(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [NodeSpec("a", 8000, 4096, 2, "T4"), NodeSpec("b", 64000, 2048, 0)]
    pods = [PodRequest("model", 1000, 100, 1, 500, ("V100M32",)),  # gpu-model
            PodRequest("whole", 1000, 100, 4, 1000),  # gpu: 2 devices at most
            PodRequest("cpu", 9000, 100, 1, 100),  # cpu: the GPU node has 8 cores
            PodRequest("mem", 1000, 8192, 1, 100),  # memory
            PodRequest("cpu-only", 100_000, 1),  # cpu, a CPU-only pod
            PodRequest("ok", 1000, 100, 1, 300)]
    with pytest.MonkeyPatch.context() as mp:
        got = _experiment(nodes, pods, 7, 2.5, True, mp)  # 2.5: exactly the pods
        want = _experiment(nodes, pods, 7, 2.5, False, mp)
    _same(got, want)
    assert got[2] == got[0].pods
    assert set(got[0].failures) == {"gpu-model", "gpu", "cpu", "memory"}
    assert set(fgd_run.REASONS[1:]) == set(got[0].failures)


def test_a_state_whose_arrays_were_replaced_is_left_to_python(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gpugov.placement.base import PolicyContext
    from gpugov.placement.engine import Placer
    from gpugov.placement.fgd import FgdPolicy
    from gpugov.placement.fragmentation import (
        FragmentationMeter,
        FragmentationModel,
        TypicalPods,
    )

    monkeypatch.setenv(native_fgd.ENV_SWITCH, "1")
    state = ClusterState([NodeSpec("a", 8000, 10**6, 2, "T4")])
    pods = [PodRequest("p", 1000, 1024, 1, 500), PodRequest("q", 1000, 1024, 1, 500)]
    model = FragmentationModel(TypicalPods.from_requests(pods), state)
    placer = Placer(state, FgdPolicy(PolicyContext(model, np.random.default_rng(0))))
    meter = FragmentationMeter(model, state)
    series = [np.zeros(2, dtype=np.int64) for _ in range(3)]
    run = fgd_run.TraceRun.build(placer, meter, pods, *series)
    assert run is not None
    assert run.run(0, 0, 0, 0) == (2, 1000, 1000, 2)
    state.mem_free = state.mem_free.copy()
    before = state.version.copy()
    assert run.run(0, 0, 0, 0)[0] == -1
    assert np.array_equal(state.version, before)
    assert fgd_run.TraceRun.build(placer, meter, pods, *series[:2],
                                  np.zeros(2)) is None  # float series: not what C writes


def test_mask_of_models_reaches_the_c_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [NodeSpec(f"n{i}", 32000, 10**6, 4, MODELS[i % 3]) for i in range(9)]
    pods = [PodRequest(f"p{i}", 1000, 1024, 1, 250 * (1 + i % 4),
                       (MODELS[i % 3],) if i % 2 else ()) for i in range(60)]
    with pytest.MonkeyPatch.context() as mp:
        got = _experiment(nodes, pods, 3, 1.3, True, mp)
        want = _experiment(nodes, pods, 3, 1.3, False, mp)
    _same(got, want)
    assert got[2] == got[0].pods
