"""FGD (fragmentation gradient descent, ATC'23): place where fragmentation grows least.

Score = int(100 * sigmoid(-delta / 1000)) where delta is the node's fragmentation increase in
milli-GPU; 50 means "no change". Sharing pods try every device that fits and keep the best
(lowest index on integer ties); that device is also the in-node choice.

Speed without changing a decision: devices of a node with the same free capacity give the
same state after placement, so only the first of them is tried; FGD's measure is computed
from cached per-node parts (`FragmentationModel.frag_after`), exact integers as before; and
the device found while scoring is kept per request shape and node version, so choosing it
does not score the node again.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import ClusterState, shape_key
from gpugov.model.request import PodRequest
from gpugov.placement.base import (
    Policy,
    PolicyContext,
    general_devices,
    lowest_fitting_devices,
)
from gpugov.placement.fragmentation import fgd_score

#: _EARLIER[j, i]: device i comes before device j (enough columns for any node)
_EARLIER = np.tri(256, k=-1, dtype=bool)


#: stale nodes up to this many are scored one at a time with scalar bookkeeping
#: (`_score_one`); more in one vectorised pass (`_scores_by_parts`)
SCALAR_NODES = 4

#: device choices kept per request shape (least recently used shapes are dropped)
MAX_CACHED_SHAPES = 256


class FgdPolicy(Policy):
    name = "fgd"
    label = "06-FGD"
    #: True = the memory-aware measure (the `gpugov` policy); FGD itself sees milli only.
    memory_aware = False

    def __init__(self, ctx: PolicyContext) -> None:
        super().__init__(ctx)
        self._devices_of: ClusterState | None = None
        #: per shape: (node version, best device) for sharing pods, as last scored
        self._devices: OrderedDict[tuple, tuple[np.ndarray, np.ndarray, tuple[int, int]]] = \
            OrderedDict()
        #: FGD's integer score per fragmentation gain (`_score_of`)
        self._gain_scores: dict[int, int] = {}
        #: the C path (`ranked`) serves policies whose score is FGD's own
        self._native_score = type(self).score is FgdPolicy.score
        #: (state, a node mask of its length, that mask's data address) for `ranked`
        self._mask: tuple[ClusterState, np.ndarray, int] | None = None
        #: (request, node, its version, device) the last `ranked` call found
        self._picked: tuple[PodRequest, int, int, int] | None = None

    def ranked(self, state: ClusterState, req: PodRequest, mask: np.ndarray, cache: object
               ) -> int | None:
        """`Placer._ranked` in one C call (native/placement/fgd.c) on the study's fast path:
        the stale masked nodes scored as `_score_one` scores them, the device found kept as
        `_scores` keeps it, the same argmax. None off that path or without the library."""
        if (not self._native_score or self.memory_aware or req.gpu_memory_mib
                or not state.fast_path(req)):
            return None
        ctx = self.ctx.fragmentation.native(state)
        if ctx is None:
            return None
        buffer = self._mask
        if buffer is None or buffer[0] is not state:
            mine = np.zeros(len(state), dtype=bool)  # the mask copied here: address known
            self._mask = buffer = (state, mine, mine.ctypes.data)
        n = len(buffer[1])  # the C code reads n entries of each array (ctx: n nodes)
        if (mask.shape != buffer[1].shape or len(cache.version) != n  # type: ignore
                or len(cache.tiebreak) != n):  # type: ignore[attr-defined]
            return None
        buffer[1][...] = mask
        dev_version = dev_device = 0
        if req.is_sharing:
            dev_version, dev_device = self._device_entry(state, req)[2]
        cv, cs, ck, tb = cache.addresses  # type: ignore[attr-defined]
        packed = ctx.lib.gg_fgd_ranked(ctx.ref, buffer[2], cv, cs, ck, tb,
                                     dev_version, dev_device, req.cpu_milli, req.gpu_milli,
                                     req.gpu_count, req.is_sharing, req.is_gpu)
        if packed < 0:
            return None
        node = packed >> 10
        if req.is_sharing:  # the device found, for `choose_devices` right after
            self._picked = (req, node, int(state.version[node]), (packed & 1023) - 1)
        return node

    def _device_cache(self, state: ClusterState, req: PodRequest
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Per node of `state`, for `req`'s shape: (node version when scored, best device)."""
        entry = self._device_entry(state, req)
        return entry[0], entry[1]

    def _device_entry(self, state: ClusterState, req: PodRequest
                      ) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """`_device_cache`'s two arrays and their data addresses (for the C path)."""
        if self._devices_of is not state:
            self._devices_of = state
            self._devices.clear()
        # what the score reads: on the trace engine's fast path CPU, milli and memory; off it
        # the device filter reads the whole request (mode, floor, seal...), as the engine's
        # score cache keys it
        key = ((req.cpu_milli, req.gpu_milli, req.gpu_memory_mib) if state.fast_path(req)
               else shape_key(req))
        entry = self._devices.get(key)
        if entry is None:
            version = np.full(len(state), -1, dtype=np.int64)
            device = np.full(len(state), -1, dtype=np.int64)
            entry = (version, device, (version.ctypes.data, device.ctypes.data))
            self._devices[key] = entry
            if len(self._devices) > MAX_CACHED_SHAPES:
                self._devices.popitem(last=False)
        else:
            self._devices.move_to_end(key)
        return entry

    def _frag(self, free: np.ndarray, cpu: np.ndarray, models: np.ndarray,
              mem_free: np.ndarray, mem_cap: np.ndarray) -> np.ndarray:
        model = self.ctx.fragmentation
        if self.memory_aware:
            return model.node_frag_memory(free, cpu, models, mem_free, mem_cap)
        return model.node_frag(free, cpu, models)

    def _scores(self, state: ClusterState, req: PodRequest, nodes: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """Per node: best integer score and the device achieving it (-1 if not sharing)."""
        if self.memory_aware or req.gpu_memory_mib:
            best, dev = self._scores_by_state(state, req, nodes)
        elif len(nodes) <= SCALAR_NODES and state.fast_path(req):
            listed = nodes.tolist()
            ctx = self.ctx.fragmentation.native(state)
            if ctx is not None:  # one C call per node (native/placement/fgd.c)
                call, ref = ctx.lib.gg_fgd_score_one, ctx.ref
                args = (req.cpu_milli, req.gpu_milli, req.gpu_count, req.is_sharing,
                        req.is_gpu)
                packed = [call(ref, n, *args) for n in listed]
                pairs = [(p >> 10, (p & 1023) - 1) for p in packed]
            else:
                pairs = [self._score_one(state, req, n) for n in listed]
            if req.is_sharing:  # scalar writes: a few nodes
                version, device = self._device_cache(state, req)
                for n, (_, d) in zip(listed, pairs, strict=True):
                    version[n] = state.version[n]
                    device[n] = d
            return (np.array([p[0] for p in pairs], dtype=np.int64),
                    np.array([p[1] for p in pairs], dtype=np.int64))
        else:
            best, dev = self._scores_by_parts(state, req, nodes)
        if req.is_sharing:
            version, device = self._device_cache(state, req)
            version[nodes] = state.version[nodes]
            device[nodes] = dev
        return best, dev

    def _scores_by_parts(self, state: ClusterState, req: PodRequest, nodes: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """FGD's measure (milli only) from cached per-node parts; the same integers as
        `_scores_by_state`."""
        model = self.ctx.fragmentation
        before, free_total, fit_count, big_sum = model.frag_and_parts(state, nodes)
        cpu_after = state.cpu_free[nodes] - req.cpu_milli
        models = state.model_idx[nodes]
        if not req.is_sharing:
            taken = 0
            if req.is_gpu:  # whole GPUs: the k lowest-index fully free devices become empty
                taken = np.minimum(state.full_gpus[nodes], req.gpu_count)
            after = model.frag_after(free_total, fit_count, big_sum, taken, MILLI_PER_GPU,
                                     req.gpu_milli, cpu_after, models)
            return self._to_score(before - after), np.full(len(nodes), -1, dtype=np.int64)
        free = state.gpu_free[nodes]
        # off the fast path only devices the filter accepts (mode, floor, seal...) count
        fits = free >= req.gpu_milli if state.fast_path(req) else state.device_fits(req, nodes)
        # a device with the same free milli as a lower-index one that also fits gives the
        # same state (off the fast path the lower one may not fit: another mode)
        same = ((free[:, :, None] == free[:, None, :]) & fits[:, None, :]
                & _EARLIER[:free.shape[1], :free.shape[1]])
        rows, cols = np.nonzero(fits & ~same.any(axis=2))
        after = model.frag_after(free_total[rows], fit_count[rows], big_sum[rows], 1,
                                 free[rows, cols], req.gpu_milli, cpu_after[rows], models[rows])
        return self._best_per_node(len(nodes), rows, cols, self._to_score(before[rows] - after))

    def _score_one(self, state: ClusterState, req: PodRequest, node: int) -> tuple[int, int]:
        """`_scores_by_parts` of one node on the fast path (the usual case: a few nodes
        changed since), with scalar bookkeeping: the same integer score and device (-1 if
        not sharing), the same tie-break."""
        model = self.ctx.fragmentation
        parts = model.parts_of(state, node)
        cpu_after = int(state.cpu_free[node]) - req.cpu_milli
        models = int(state.model_idx[node])
        if not req.is_sharing:
            taken = min(int(state.full_gpus[node]), req.gpu_count) if req.is_gpu else 0
            after = model.frag_after_one(parts, [MILLI_PER_GPU], taken, req.gpu_milli,
                                         cpu_after, models)
            return self._score_of(parts[0] - int(after[0])), -1
        frees: list[int] = []
        devs: list[int] = []
        for d, f in enumerate(state.gpu_free[node].tolist()):
            if f >= req.gpu_milli and f not in frees:  # the first device of each free value
                frees.append(f)
                devs.append(d)
        if not frees:
            return 0, -1
        after = model.frag_after_one(parts, frees, 1, req.gpu_milli, cpu_after, models)
        scores = [self._score_of(parts[0] - a) for a in after.tolist()]
        i = scores.index(max(scores))  # lowest device index on ties
        return scores[i], devs[i]

    def _score_of(self, gain: int) -> int:
        """`_to_score` of one gain, remembered (gains repeat across pods and nodes)."""
        score = self._gain_scores.get(gain)
        if score is None:
            if len(self._gain_scores) >= 65_536:
                self._gain_scores.clear()
            score = int(self._to_score(np.array([gain], dtype=np.int64))[0])
            self._gain_scores[gain] = score
        return score

    @staticmethod
    def _best_per_node(n: int, rows: np.ndarray, cols: np.ndarray, scores: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Best score per node and its device; lowest device index wins ties (rows/cols come
        from np.nonzero, in C order)."""
        if n == 1:  # the usual case (one node changed since): the first best is the lowest
            if not len(scores):
                return np.zeros(1, dtype=np.int64), np.full(1, -1, dtype=np.int64)
            i = int(scores.argmax())
            return scores[i:i + 1].copy(), cols[i:i + 1].astype(np.int64)
        order = np.lexsort((cols, -scores, rows))
        rows_s, scores_s, cols_s = rows[order], scores[order], cols[order]
        first = np.ones(len(rows_s), dtype=bool)
        first[1:] = rows_s[1:] != rows_s[:-1]
        best = np.zeros(n, dtype=np.int64)
        dev = np.full(n, -1, dtype=np.int64)
        best[rows_s[first]] = scores_s[first]
        dev[rows_s[first]] = cols_s[first]
        return best, dev

    def _scores_by_state(self, state: ClusterState, req: PodRequest, nodes: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """The measure of every candidate state built in full (the memory-aware measure,
        and requests that name GPU memory)."""
        model = self.ctx.fragmentation
        before = model.of_nodes(state, nodes, self.memory_aware)
        free = state.gpu_free[nodes]
        cpu_after = state.cpu_free[nodes] - req.cpu_milli
        models = state.model_idx[nodes]
        mem_free = mem_cap = free  # placeholders: only read by the memory-aware measure
        if self.memory_aware:
            mem_free, mem_cap = state.gpu_mem_free[nodes], state.gpu_mem_cap[nodes]
        if req.is_sharing:
            fits = (state.device_fits(req, nodes) if req.gpu_memory_mib or not state.fast_path(req)
                    else free >= req.gpu_milli)
            rows, cols = np.nonzero(fits)
            cand = free[rows].copy()
            cand[np.arange(len(rows)), cols] -= req.gpu_milli
            cand_mem = cand_cap = cand  # placeholders, as above
            if self.memory_aware:
                cand_mem, cand_cap = mem_free[rows], mem_cap[rows]
                cand_mem[np.arange(len(rows)), cols] -= req.gpu_memory_mib
            after = self._frag(cand, cpu_after[rows], models[rows], cand_mem, cand_cap)
            return self._best_per_node(len(nodes), rows, cols,
                                       self._to_score(before[rows] - after))
        after_free = free.copy()
        after_mem = mem_free.copy() if self.memory_aware else mem_free
        if req.is_gpu:
            # whole GPUs: the k lowest-index fully free devices become empty
            full = (state.device_fits(req, nodes) if req.gpu_memory_mib or not state.fast_path(req)
                    else free == MILLI_PER_GPU)
            taken = full & (np.cumsum(full, axis=1) <= req.gpu_count)
            after_free[taken] = 0
            if self.memory_aware:
                after_mem[taken] = 0
        after = self._frag(after_free, cpu_after, models, after_mem, mem_cap)
        return self._to_score(before - after), np.full(len(nodes), -1, dtype=np.int64)

    def _to_score(self, gain: np.ndarray) -> np.ndarray:
        model = self.ctx.fragmentation
        return fgd_score(gain, model.memory_total_weight if self.memory_aware
                         else model.total_weight)

    def score(self, state: ClusterState, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        return self._scores(state, req, nodes)[0]

    def choose_devices(self, state: ClusterState, req: PodRequest, node: int) -> tuple[int, ...]:
        if req.is_gpu and not state.fast_path(req):  # device modes, seals, constraints
            return general_devices(state, req, node)
        if req.is_sharing:
            picked = self._picked
            if (picked is not None and picked[0] is req and picked[1] == node
                    and picked[2] == state.version[node] and picked[3] >= 0):
                return (picked[3],)  # what `ranked` found for this request and node
            version, device = self._device_cache(state, req)
            if version[node] != state.version[node]:
                self._scores(state, req, np.array([node]))
            return (int(device[node]),)
        if not req.is_gpu:
            return ()
        return lowest_fitting_devices(state, req, node)
