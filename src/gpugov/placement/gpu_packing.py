"""GpuPacking: fill partly used GPUs first, then free GPUs on used nodes, then idle nodes."""

from __future__ import annotations

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import ClusterState
from gpugov.model.request import PodRequest
from gpugov.placement.base import Policy


class GpuPackingPolicy(Policy):
    name = "gpupacking"
    label = "04-GpuPacking"

    def score(self, state: ClusterState, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        if not req.is_gpu:
            return np.zeros(len(nodes), dtype=np.int64)
        full = state.full_gpus[nodes]
        idle = full == state.gpu_count[nodes]
        idle_score = np.maximum(33 - full, full)
        if req.is_sharing:
            free = state.gpu_free[nodes]
            fits = (state.device_fits(req, nodes) if req.gpu_memory_mib or not state.fast_path(req)
                    else free >= req.gpu_milli)
            tightest = np.where(fits, free, MILLI_PER_GPU + 1).min(axis=1)
            shared = np.maximum(100 - tightest // 100, 50)
            partial = np.where(tightest >= MILLI_PER_GPU, 49, shared)
        else:
            partial = np.full(len(nodes), max(50 - req.gpu_count, 33), dtype=np.int64)
        return np.where(idle, idle_score, partial).astype(np.int64)
