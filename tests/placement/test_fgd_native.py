"""FGD's C path (native/placement/fgd.c) gives exactly the Python path's scores, devices,
fragmentation and picks; it stays inside its arrays; the Python path answers without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.placement.test_fragmentation_fast import MODELS, free_st, pod_st

from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.request import PodRequest
from gpugov.placement import native_fgd
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fgd import FgdPolicy
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods, fgd_score

REPO = Path(__file__).resolve().parents[2]
nodes_st = st.lists(
    st.builds(lambda i, cpu, gpus, model: NodeSpec(f"n{i}", cpu, 10**6, gpus,
                                                   model if gpus else ""),
              st.integers(0, 10**6), st.sampled_from([0, 32000, 64000, 96000, 128000]),
              st.sampled_from([0, 1, 2, 4, 8]), st.sampled_from([*MODELS, "A100"])),
    min_size=1, max_size=12, unique_by=lambda n: n.name,
)


@pytest.fixture(autouse=True)
def _library_built() -> None:
    # the package build compiles it; without it these tests would compare Python to itself
    assert native_fgd.library() is not None, f"{native_fgd.LIBRARY} missing: pip install -e ."


def _run(nodes: list[NodeSpec], typical: list[PodRequest], pods: list[PodRequest],
         native: bool) -> tuple[list, list, ClusterState]:
    """Place `pods` in order with FGD; (decisions, cluster fragmentation after each)."""
    state = ClusterState(nodes)
    before = os.environ.get(native_fgd.ENV_SWITCH)
    os.environ[native_fgd.ENV_SWITCH] = "1" if native else "0"
    try:
        model = FragmentationModel(TypicalPods.from_requests(typical), state)
        model.native(state)  # the context is chosen once per model and state
    finally:
        if before is None:
            del os.environ[native_fgd.ENV_SWITCH]
        else:
            os.environ[native_fgd.ENV_SWITCH] = before
    policy = FgdPolicy(PolicyContext(model, np.random.default_rng(0)))
    placer = Placer(state, policy, np.random.default_rng(1).permutation(len(state)))
    assert (model.native(state) is not None) is native
    decisions, frag = [], []
    for i, pod in enumerate(pods):
        d = placer.place(pod)
        a = d.allocation
        decisions.append((d.reason, None if a is None else (a.node, a.devices, a.milli)))
        frag.append(int(model.of_nodes(state, np.arange(len(state))).sum()))
        if i % 7 == 6 and a is not None:  # departures move versions back and forth
            state.release(pod, a)
    return decisions, frag, state


@settings(max_examples=60, deadline=None)
@given(nodes_st, st.lists(pod_st(), min_size=1, max_size=20),
       st.lists(pod_st(), min_size=1, max_size=60))
def test_c_path_places_as_the_python_path(nodes, typical, pods) -> None:
    got = _run(nodes, typical, pods, True)
    want = _run(nodes, typical, pods, False)
    assert got[0] == want[0]
    assert got[1] == want[1]
    for name in ("gpu_free", "cpu_free", "version"):
        assert np.array_equal(getattr(got[2], name), getattr(want[2], name))


@settings(max_examples=60, deadline=None)
@given(nodes_st, st.lists(pod_st(), min_size=1, max_size=20), st.data())
def test_one_node_score_device_and_fragmentation_equal_python(nodes, typical, data) -> None:
    state = ClusterState(nodes)
    width = state.gpu_free.shape[1]
    for n in range(len(state)):  # random free milli and CPU on every node
        k = int(state.gpu_count[n])
        state.gpu_free[n, :k] = data.draw(st.lists(free_st, min_size=k, max_size=k))
        state.cpu_free[n] = data.draw(st.integers(0, int(state.cpu_cap[n])))
        state.full_gpus[n] = int((state.gpu_free[n] == 1000).sum())
        state.version[n] += 1
    typ = TypicalPods.from_requests(typical)
    c_model, py_model = FragmentationModel(typ, state), FragmentationModel(typ, state)
    ctx = c_model.native(state)
    assert ctx is not None and width == ctx.ctx.width
    c_policy = FgdPolicy(PolicyContext(c_model, np.random.default_rng(0)))
    py_policy = FgdPolicy(PolicyContext(py_model, np.random.default_rng(0)))
    pod = data.draw(pod_st())
    for n in range(len(state)):
        assert ctx.lib.gg_fgd_refresh(ctx.ref, n) == py_model.parts_of(state, n)[0]
        assert np.array_equal(c_model._both[n], py_model._both[n])
        if int(state.cpu_free[n]) < pod.cpu_milli:
            continue  # the score is asked of feasible nodes only
        packed = ctx.lib.gg_fgd_score_one(ctx.ref, n, pod.cpu_milli, pod.gpu_milli,
                                          pod.gpu_count, pod.is_sharing, pod.is_gpu)
        assert (packed >> 10, (packed & 1023) - 1) == py_policy._score_one(state, pod, n)
    assert c_policy.memory_aware is False


@pytest.mark.parametrize("weight", [1, 7, 95, 10_825])
def test_score_thresholds_give_the_formula(weight: int) -> None:
    thresholds = native_fgd.score_thresholds(lambda g: fgd_score(g, weight), weight)
    # every gain where the score moves (|x| < 40: beyond, 0 or 100 throughout), and far out
    span = 40 * weight * 1000
    gains = np.unique(np.concatenate([
        np.linspace(-span, span, 200_001).astype(np.int64), thresholds[1:][thresholds[1:] < 2**62],
        thresholds[1:][thresholds[1:] < 2**62] - 1, [-(2**40), 2**40]]))
    with np.errstate(over="ignore"):
        want = fgd_score(gains, weight)
    got = (gains[:, None] >= thresholds[None, 1:]).sum(axis=1)
    assert np.array_equal(got, want)


def test_switched_off_or_missing_library_leaves_the_python_path(monkeypatch) -> None:
    monkeypatch.setenv(native_fgd.ENV_SWITCH, "0")
    assert native_fgd.library() is None
    state = ClusterState([NodeSpec("a", 8000, 10**6, 2, "T4")])
    model = FragmentationModel(TypicalPods.from_requests([PodRequest("t", 0, 0, 1, 500)]),
                               state)
    assert model.native(state) is None
    placer = Placer(state, FgdPolicy(PolicyContext(model, np.random.default_rng(0))))
    assert placer.place(PodRequest("p", 1000, 1024, 1, 500)).allocation is not None


def test_arrays_the_c_code_cannot_read_safely_are_refused(monkeypatch) -> None:
    state = ClusterState([NodeSpec("a", 8000, 10**6, 2, "T4"), NodeSpec("b", 8000, 10**6, 0)])
    typ = TypicalPods.from_requests([PodRequest("t", 0, 0, 1, 500)])
    model = FragmentationModel(typ, state)
    ctx = model.native(state)
    assert ctx is not None
    assert ctx.lib.gg_fgd_refresh(ctx.ref, 2) == -1 and ctx.lib.gg_fgd_refresh(ctx.ref, -1) == -1
    assert ctx.lib.gg_fgd_score_one(ctx.ref, 5, 0, 500, 1, 1, 1) == -1
    # a state whose arrays are not the context's: the Python path
    state.gpu_free = np.asfortranarray(state.gpu_free)
    assert model.native(state) is None
    fresh = FragmentationModel(typ, state)  # and a non-contiguous array is never pointed at
    assert fresh.native(state) is None


SANITIZED_RUN = """
import numpy as np
from hypothesis import given, settings, strategies as st
import test_fgd_native as t
from gpugov.placement import native_fgd
assert native_fgd.library() is not None
@settings(max_examples=40, deadline=None, database=None)
@given(t.nodes_st, st.lists(t.pod_st(), min_size=1, max_size=20),
       st.lists(t.pod_st(), min_size=1, max_size=60))
def run(nodes, typical, pods):
    assert t._run(nodes, typical, pods, True)[:2] == t._run(nodes, typical, pods, False)[:2]
run()
import pytest
import test_fgd_run as r
@settings(max_examples=30, deadline=None, database=None)
@given(t.nodes_st, st.lists(st.one_of(t.pod_st(), r.other_pod_st()), min_size=1, max_size=40),
       st.integers(0, 2**32 - 1))
def trace_run(nodes, pods, seed):  # the whole C loop (gg_fgd_run), turns with Python
    pods = [r.PodRequest(f"p{i}", p.cpu_milli, p.memory_mib, p.gpu_count, p.gpu_milli,
                         p.models, p.gpu_memory_mib, p.mode, tenant=p.tenant, sealed=p.sealed,
                         min_isolation=p.min_isolation) for i, p in enumerate(pods)]
    with pytest.MonkeyPatch.context() as mp:
        r._same(r._experiment(nodes, pods, seed, 1.3, True, mp),
                r._experiment(nodes, pods, seed, 1.3, False, mp))
trace_run()
print("ok")
"""


def test_under_asan_and_ubsan(tmp_path: Path) -> None:
    cc = os.environ.get("CC", "cc")
    asan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True)
    if not Path(asan.stdout.strip()).is_file():
        pytest.skip("no libasan for this compiler")
    lib = tmp_path / "libgpugov_placement.so"
    subprocess.run([cc, "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-fPIC", "-shared",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-fno-omit-frame-pointer", "-o", str(lib),
                    str(REPO / "native" / "placement" / "fgd.c")], check=True)
    env = {**os.environ, "LD_PRELOAD": asan.stdout.strip(), "GPUGOV_PLACEMENT_LIBRARY": str(lib),
           "ASAN_OPTIONS": "detect_leaks=0:exitcode=66", "PYTHONPATH":
           os.pathsep.join([str(Path(__file__).parent), str(REPO),
                            os.environ.get("PYTHONPATH", "")]),
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=67"}
    r = subprocess.run([sys.executable, "-c", SANITIZED_RUN], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-4000:]
    assert "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr
