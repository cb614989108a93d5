"""Random: a uniformly random feasible node and a random fitting device (the study's floor)."""

from __future__ import annotations

import numpy as np

from gpugov.model.cluster import ClusterState
from gpugov.model.request import PodRequest
from gpugov.placement.base import Policy, general_devices, lowest_fitting_devices


class RandomPolicy(Policy):
    name = "random"
    label = "01-Random"
    cacheable = False

    def score(self, state: ClusterState, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        scores = np.zeros(len(nodes), dtype=np.int64)
        if len(nodes):
            scores[int(self.ctx.rng.integers(len(nodes)))] = 100
        return scores

    def choose_devices(self, state: ClusterState, req: PodRequest, node: int) -> tuple[int, ...]:
        if req.is_gpu and not state.fast_path(req):  # device modes, seals, constraints
            return general_devices(state, req, node)
        if req.is_sharing:
            fitting = np.flatnonzero(state.device_fits(req, node))
            return (int(fitting[int(self.ctx.rng.integers(len(fitting)))]),)
        if not req.is_gpu:
            return ()
        return lowest_fitting_devices(state, req, node)
