"""DotProd: prefer nodes whose free (CPU, GPU) vector is least aligned with the request."""

from __future__ import annotations

import numpy as np

from gpugov.model.cluster import ClusterState
from gpugov.model.request import PodRequest
from gpugov.placement.base import MAX_SPEC_CPU, MAX_SPEC_GPU, Policy, truncate


class DotProductPolicy(Policy):
    name = "dotprod"
    label = "02-DotProd"

    def score(self, state: ClusterState, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        cpu = (req.cpu_milli / MAX_SPEC_CPU) * (state.cpu_free[nodes] / MAX_SPEC_CPU)
        gpu = (req.total_gpu_milli / MAX_SPEC_GPU) * (state.gpu_free_total[nodes] / MAX_SPEC_GPU)
        return truncate(100.0 * (1.0 - (cpu + gpu) / 2.0))
