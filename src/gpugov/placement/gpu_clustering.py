"""GpuClustering: keep pods of the same GPU shape together, and fill used nodes first."""

from __future__ import annotations

import numpy as np

from gpugov.model.cluster import ClusterState, pod_kind
from gpugov.model.request import PodRequest
from gpugov.placement.base import MAX_SPEC_GPU, Policy


class GpuClusteringPolicy(Policy):
    name = "gpuclustering"
    label = "03-GpuClustering"

    def score(self, state: ClusterState, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        if not req.is_gpu:
            return np.zeros(len(nodes), dtype=np.int64)
        used = MAX_SPEC_GPU - state.gpu_free_total[nodes]
        base = np.clip(25 * used // MAX_SPEC_GPU, 0, 25)
        kinds = state.kind_count[nodes] > 0
        kind = pod_kind(req)
        has_own = kinds[:, kind]
        n_kinds = kinds.sum(axis=1)
        bonus = np.where(
            n_kinds == 0, 25, np.where(has_own, np.where(n_kinds == 1, 75, 50), 0)
        )
        return (base + bonus).astype(np.int64)
