"""The decision engine for one pod: filter, score (with a per-node cache), break ties, pick
devices. Pure: no I/O, no clock; the only randomness comes from the context's generator.

Ties go to ONE node priority order fixed per run (the study breaks ties by node names that
carry a random prefix); a fresh random pick per tie would cost FGD ~5 points of allocation.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import ClusterState, shape_key
from gpugov.model.devices import DeviceMode
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.base import Policy
from gpugov.placement.fragmentation import typical_key

#: score caches kept per request shape; old shapes are evicted least-recently-used.
MAX_CACHED_SHAPES = 256
#: the ranking key of a node outside the mask: below any score's key, negative ones too
_NO_NODE = np.iinfo(np.int64).min


@dataclass(frozen=True, slots=True)
class Decision:
    """The engine's answer: an allocation, or the reason nothing fits."""

    allocation: Allocation | None
    reason: str = ""


class _ScoreCache:
    """Scores of one request shape per node, valid while the node's version is unchanged;
    `key` is the engine's ranking key of each scored node (score x nodes + tie-break);
    `tiebreak` is the engine's tie-break per node; `addresses` are the four arrays' data
    addresses, for a policy's compiled path (`Policy.ranked`)."""

    __slots__ = ("version", "score", "key", "tiebreak", "addresses")

    def __init__(self, n: int, tiebreak: np.ndarray) -> None:
        self.version = np.full(n, -1, dtype=np.int64)
        self.score = np.zeros(n, dtype=np.int64)
        self.key = np.zeros(n, dtype=np.int64)
        self.tiebreak = tiebreak
        self.addresses = (self.version.ctypes.data, self.score.ctypes.data, self.key.ctypes.data,
                          tiebreak.ctypes.data)


class Placer:
    """Places requests on a `ClusterState` with one policy and a fixed tie-break order."""

    def __init__(self, state: ClusterState, policy: Policy, priority: np.ndarray | None = None):
        self.state = state
        self.policy = policy
        n = len(state)
        order = np.arange(n) if priority is None else np.asarray(priority)
        if sorted(order.tolist()) != list(range(n)):
            raise ValueError("priority must be a permutation of node indexes")
        # rank[node] = position in the priority order; tie-break key prefers smaller rank.
        self.rank = np.empty(n, dtype=np.int64)
        self.rank[order] = np.arange(n)
        self._tiebreak = np.ascontiguousarray(n - 1 - self.rank, dtype=np.int64)
        self._caches: OrderedDict[tuple, _ScoreCache] = OrderedDict()
        #: the score is the key as it is (no normalising pass over the feasible nodes): the
        #: ranking key can then be cached per node with its score (`_ranked`)
        self._plain_rank = policy.cacheable and type(policy).normalize is Policy.normalize

    def _cache(self, req: PodRequest) -> _ScoreCache:
        # plain requests: the study's shape; any other: everything the filter reads (a
        # score may depend on which devices fit, e.g. a tenant's seal or isolation floor)
        key = ((typical_key(req), req.gpu_memory_mib) if self.state.fast_path(req)
               else shape_key(req))
        cache = self._caches.get(key)
        if cache is None:
            cache = _ScoreCache(len(self.state), self._tiebreak)
            self._caches[key] = cache
            if len(self._caches) > MAX_CACHED_SHAPES:
                self._caches.popitem(last=False)
        else:
            self._caches.move_to_end(key)
        return cache

    def _ranked(self, req: PodRequest, mask: np.ndarray) -> int:
        """The best node of `mask` (at least one node): the highest cached key, after
        scoring the masked nodes whose version moved. Whole-length arrays, no gathers: the
        same node `decide`'s general path picks (keys are distinct, so the first maximum of
        either is the one node with the largest key)."""
        cache = self._cache(req)
        node = self.policy.ranked(self.state, req, mask, cache)
        if node is not None:  # the policy's compiled path: the same node
            return node
        version = self.state.version
        stale = (mask & (cache.version != version)).nonzero()[0]
        if len(stale):
            score = self.policy.score(self.state, req, stale)
            cache.score[stale] = score
            cache.key[stale] = score * len(self.state) + self._tiebreak[stale]
            cache.version[stale] = version[stale]
        return int(np.where(mask, cache.key, _NO_NODE).argmax())

    def scores(self, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        """Policy scores of `nodes` (all feasible for `req`), served from cache when fresh."""
        if not self.policy.cacheable:
            return self.policy.score(self.state, req, nodes)
        cache = self._cache(req)
        versions = self.state.version[nodes]
        stale = nodes[cache.version[nodes] != versions]
        if len(stale):
            cache.score[stale] = self.policy.score(self.state, req, stale)
            cache.version[stale] = self.state.version[stale]
        if self._plain_rank:  # `_ranked` reads the key of every fresh node
            cache.key[stale] = cache.score[stale] * len(self.state) + self._tiebreak[stale]
        return cache.score[nodes]

    def decide(self, req: PodRequest, exclude: np.ndarray | None = None) -> Decision:
        """Choose a node and devices for `req` without changing the state.

        `exclude` (a boolean node mask) hides nodes held for someone else; when only hidden
        nodes would fit, the reason is "reserved".
        """
        feasible = self.state.feasible(req)
        if self._plain_rank and not self.state.has_preferences(req):
            mask = feasible if exclude is None else feasible & ~exclude
            if mask.any():
                node = self._ranked(req, mask)
                devices = self.policy.choose_devices(self.state, req, node)
                return Decision(allocation_for(self.state, req, node, devices))
        nodes = np.flatnonzero(feasible if exclude is None else feasible & ~exclude)
        if len(nodes) == 0:
            if exclude is not None and feasible.any():
                return Decision(None, "reserved")
            return Decision(None, self.state.failure_reason(req))
        if len(nodes) == 1:
            node = int(nodes[0])
        else:
            s = self.policy.normalize(self.scores(req, nodes))
            if self.state.has_preferences(req):  # preferred node affinity, PreferNoSchedule
                s = s + self.state.preference(req, nodes)
            key = s * len(self.state) + self._tiebreak[nodes]
            node = int(nodes[int(key.argmax())])
        devices = self.policy.choose_devices(self.state, req, node)
        return Decision(allocation_for(self.state, req, node, devices))

    def place(self, req: PodRequest) -> Decision:
        """Decide and commit."""
        decision = self.decide(req)
        if decision.allocation is not None:
            self.state.allocate(req, decision.allocation)
        return decision


def allocation_for(state: ClusterState, req: PodRequest, node: int,
                   devices: tuple[int, ...]) -> Allocation:
    """The allocation of `req` on `devices` of `node`: milli and GPU memory per device (a
    whole GPU holds its device's memory); several MIG instances start on `devices[0]` and
    go where the state finds them (`ClusterState.mig_instances`)."""
    if not devices:
        return Allocation(node, (), 0)
    if not state.fast_path(req):
        if req.mode is DeviceMode.MIG and req.gpu_count > 1:  # several instances
            return state.mig_instances(req, node, devices[0])
        start = state.mig_start(req, node, devices[0]) if req.mig_profile else -1
        milli, memory = state.charge(req, node, devices[0], start)
        return Allocation(node, devices, milli, memory, start)
    memory = req.gpu_memory_mib
    if req.gpu_milli >= MILLI_PER_GPU:
        memory = int(state.gpu_mem_cap[node, devices[0]])
    return Allocation(node, devices, req.gpu_milli, memory)
