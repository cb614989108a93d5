"""BestFit: prefer the node with the least CPU + GPU left over after placement."""

from __future__ import annotations

import numpy as np

from gpugov.model.cluster import ClusterState
from gpugov.model.request import PodRequest
from gpugov.placement.base import MAX_SPEC_CPU, MAX_SPEC_GPU, Policy, truncate


class BestFitPolicy(Policy):
    name = "bestfit"
    label = "05-BestFit"

    def score(self, state: ClusterState, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        cpu_left = (state.cpu_free[nodes] - req.cpu_milli) / MAX_SPEC_CPU
        gpu_left = (state.gpu_free_total[nodes] - req.total_gpu_milli) / MAX_SPEC_GPU
        return truncate(100.0 * (1.0 - (0.5 * cpu_left + 0.5 * gpu_left)))

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Min-max to 0..100 in integers over the feasible nodes (all 0 when equal)."""
        if len(scores) == 0:
            return scores
        lo, hi = int(scores.min()), int(scores.max())
        if hi == lo:
            return np.zeros_like(scores)
        return (scores - lo) * 100 // (hi - lo)
