"""FGD (fragmentation gradient descent, ATC'23): place where fragmentation grows least.

Score = int(100 * sigmoid(-delta / 1000)) where delta is the node's fragmentation increase in
milli-GPU; 50 means "no change". Sharing pods try every device that fits and keep the best
(lowest index on integer ties); that device is also the in-node choice.
"""

from __future__ import annotations

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import ClusterState
from gpugov.model.request import PodRequest
from gpugov.placement.base import Policy, general_devices, lowest_fitting_devices, truncate


class FgdPolicy(Policy):
    name = "fgd"
    label = "06-FGD"
    #: True = the memory-aware measure (the `gpugov` policy); FGD itself sees milli only.
    memory_aware = False

    def _frag(self, free: np.ndarray, cpu: np.ndarray, models: np.ndarray,
              mem_free: np.ndarray, mem_cap: np.ndarray) -> np.ndarray:
        model = self.ctx.fragmentation
        if self.memory_aware:
            return model.node_frag_memory(free, cpu, models, mem_free, mem_cap)
        return model.node_frag(free, cpu, models)

    def _scores(self, state: ClusterState, req: PodRequest, nodes: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """Per node: best integer score and the device achieving it (-1 if not sharing)."""
        model = self.ctx.fragmentation
        before = model.of_nodes(state, nodes, self.memory_aware)
        free = state.gpu_free[nodes]
        cpu_after = state.cpu_free[nodes] - req.cpu_milli
        models = state.model_idx[nodes]
        mem_free = mem_cap = free  # placeholders: only read by the memory-aware measure
        if self.memory_aware:
            mem_free, mem_cap = state.gpu_mem_free[nodes], state.gpu_mem_cap[nodes]
        if req.is_sharing:
            fits = state.device_fits(req, nodes) if req.gpu_memory_mib else free >= req.gpu_milli
            rows, cols = np.nonzero(fits)
            cand = free[rows].copy()
            cand[np.arange(len(rows)), cols] -= req.gpu_milli
            cand_mem = cand_cap = cand  # placeholders, as above
            if self.memory_aware:
                cand_mem, cand_cap = mem_free[rows], mem_cap[rows]
                cand_mem[np.arange(len(rows)), cols] -= req.gpu_memory_mib
            after = self._frag(cand, cpu_after[rows], models[rows], cand_mem, cand_cap)
            scores = self._to_score(before[rows] - after)
            # best per node; lowest device index wins ties (rows/cols are in C order)
            order = np.lexsort((cols, -scores, rows))
            rows_s, scores_s, cols_s = rows[order], scores[order], cols[order]
            first = np.ones(len(rows_s), dtype=bool)
            first[1:] = rows_s[1:] != rows_s[:-1]
            best = np.zeros(len(nodes), dtype=np.int64)
            dev = np.full(len(nodes), -1, dtype=np.int64)
            best[rows_s[first]] = scores_s[first]
            dev[rows_s[first]] = cols_s[first]
            return best, dev
        after_free = free.copy()
        after_mem = mem_free.copy() if self.memory_aware else mem_free
        if req.is_gpu:
            # whole GPUs: the k lowest-index fully free devices become empty
            full = (state.device_fits(req, nodes) if req.gpu_memory_mib
                    else free == MILLI_PER_GPU)
            taken = full & (np.cumsum(full, axis=1) <= req.gpu_count)
            after_free[taken] = 0
            if self.memory_aware:
                after_mem[taken] = 0
        after = self._frag(after_free, cpu_after, models, after_mem, mem_cap)
        return self._to_score(before - after), np.full(len(nodes), -1, dtype=np.int64)

    def _to_score(self, gain: np.ndarray) -> np.ndarray:
        model = self.ctx.fragmentation
        weight = (model.memory_total_weight if self.memory_aware else model.total_weight) or 1
        x = gain / (weight * float(MILLI_PER_GPU))
        return truncate(100.0 / (1.0 + np.exp(-x)))

    def score(self, state: ClusterState, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        return self._scores(state, req, nodes)[0]

    def choose_devices(self, state: ClusterState, req: PodRequest, node: int) -> tuple[int, ...]:
        if req.is_gpu and not state._fast(req):  # device modes, seals, constraints
            return general_devices(state, req, node)
        if req.is_sharing:
            return (int(self._scores(state, req, np.array([node]))[1][0]),)
        if not req.is_gpu:
            return ()
        return lowest_fitting_devices(state, req, node)
