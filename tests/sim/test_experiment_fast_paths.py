"""A whole experiment with the per-pod fast paths (the engine's cached ranking, FGD's scalar
and table-driven measure) gives exactly the run of the reference procedure: the engine's
general path and FGD measuring every candidate state in full. Every series, every outcome."""

from __future__ import annotations

import numpy as np
import pytest

import gpugov.sim.experiment as experiment
from gpugov.model.cluster import NodeSpec
from gpugov.model.request import PodRequest
from gpugov.placement import native_fgd
from gpugov.placement.engine import Placer
from gpugov.placement.fgd import FgdPolicy
from gpugov.placement.registry import get_policy


class _GeneralPlacer(Placer):
    """The engine without its ranked path: gather the feasible nodes, score, argmax."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._plain_rank = False


class _ReferenceFgd(FgdPolicy):
    """FGD measuring every candidate state in full (`_scores_by_state`), no scalar path."""

    def _scores(self, state, req, nodes):  # type: ignore[no-untyped-def]
        best, dev = self._scores_by_state(state, req, nodes)
        if req.is_sharing:
            version, device = self._device_cache(state, req)
            version[nodes] = state.version[nodes]
            device[nodes] = dev
        return best, dev


def _trace(seed: int) -> tuple[list[NodeSpec], list[PodRequest]]:
    rng = np.random.default_rng(seed)
    models = ("T4", "V100M16", "G2")
    nodes = [NodeSpec(f"n{i:03d}", int(rng.choice([32000, 64000, 96000])), 262144,
                      int(rng.choice([1, 2, 4, 8])), models[int(rng.integers(3))])
             for i in range(80)]
    pods = []
    for i in range(400):
        kind = rng.random()
        cpu = int(rng.choice([1000, 4000, 8000, 16000]))
        spec = (models[int(rng.integers(3))],) if rng.random() < 0.2 else ()
        if kind < 0.1:
            pods.append(PodRequest(f"p{i:04d}", cpu, 1024))
        elif kind < 0.7:
            pods.append(PodRequest(f"p{i:04d}", cpu, 1024, 1,
                                   int(rng.choice([100, 250, 500, 700, 333])), spec))
        else:
            pods.append(PodRequest(f"p{i:04d}", cpu, 1024, int(rng.choice([1, 2, 4])), 1000,
                                   spec))
    return nodes, pods


@pytest.mark.parametrize("native", [True, False], ids=["c-path", "python-path"])
@pytest.mark.parametrize("policy", ["fgd", "bestfit", "gpupacking", "dotprod"])
@pytest.mark.parametrize("seed", [3, 11])
def test_fast_paths_give_the_reference_run(policy: str, seed: int, native: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With FGD's C path (native/placement/fgd.c) and with it switched off."""
    nodes, pods = _trace(seed)
    monkeypatch.setenv(native_fgd.ENV_SWITCH, "1" if native else "0")
    assert (native_fgd.library() is not None) is native
    fast = experiment.run_experiment(nodes, pods, policy, seed)
    monkeypatch.setenv(native_fgd.ENV_SWITCH, "0")  # the reference: Python throughout
    monkeypatch.setattr(experiment, "Placer", _GeneralPlacer)
    monkeypatch.setattr(experiment, "get_policy",
                        lambda name: _ReferenceFgd if name == "fgd" else get_policy(name))
    ref = experiment.run_experiment(nodes, pods, policy, seed)
    assert fast.placed == ref.placed and fast.outcomes == ref.outcomes
    for name in ("arrived_milli", "used_milli", "frag_milli", "idle_milli"):
        assert np.array_equal(getattr(fast, name), getattr(ref, name)), name
    assert 0 < fast.placed < fast.pods  # the run reached the full cluster
