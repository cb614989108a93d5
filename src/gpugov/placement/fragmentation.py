"""GPU fragmentation as defined by FGD (USENIX ATC'23): free GPU capacity that the expected
workload (the "typical pods") cannot use, weighted by how often each typical pod occurs.

Everything is kept in exact integers: a node's fragmentation is stored as
`sum_m count_m * frag_m` (milli-GPU times pod counts), so "no change" is exactly zero and
integer scores derived from it are free of float noise. Divide by `TypicalPods.total` to
get milli-GPU.

GPU memory: typical shapes also carry the GPU memory they ask per device (0 in the openb
traces, whose shapes and numbers are therefore exactly the study's). The FGD measure itself
ignores memory (`memory=False`, what FGD-on-milli sees). The memory-aware measure
(`memory=True`, used by the `gpugov` policy) is FGD's compute measure plus
`MEMORY_WEIGHT` x the memory no typical shape can use (in milli units of each device's
capacity: free MiB x 1000 / capacity MiB; a shape uses a device's memory only if both its
milli and its memory fit there), both over the complete set of shapes
(`TypicalPods.complete`): naming memory splits each compute shape into memory variants, and
the 95 % cut then drops rarer shapes — on the memory-bound workload the whole-GPU ones —
that the measure must see to keep whole GPUs free. docs/placement-study.md has the
measurements that chose this.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import ClusterState
from gpugov.model.request import PodRequest
from gpugov.placement import native_fgd

#: share of pods the typical set must cover (the study's podPopularityThreshold).
POPULARITY_THRESHOLD = 0.95
#: weight of the memory fragment in the memory-aware measure, as (numerator, denominator)
#: to stay in exact integers; chosen by bench/bench_memory_bound.py (docs/placement-study.md):
#: 0 measured best — every weight tried above it allocated less compute and memory
MEMORY_WEIGHT = (0, 1)
#: a GPU count no node reaches: a shape ruled out by model or CPU never "fits"
_NEVER = np.iinfo(np.int64).max
#: the most entries of `FragmentationModel._need`'s table (models x CPU levels x shapes);
#: a larger typical set computes each row instead
NEED_TABLE_MAX = 2_000_000


def typical_key(req: PodRequest) -> tuple[int, int, int, str, int]:
    """(cpu, milli, count, model spec, GPU memory per device) — the study's key (host memory
    plays no part), plus the GPU memory the pod names (0 for every openb pod)."""
    if not req.is_gpu:
        return (req.cpu_milli, 0, 0, "", 0)
    return (req.cpu_milli, req.gpu_milli, req.gpu_count, "|".join(req.models),
            req.gpu_memory_mib)


@dataclass(frozen=True)
class TypicalPods:
    """The workload distribution M: typical pod shapes and their integer counts."""

    cpu: np.ndarray  # int64[M]
    milli: np.ndarray  # int64[M], 0 for CPU-only shapes
    count: np.ndarray  # int64[M], GPUs per pod
    models: tuple[tuple[str, ...], ...]  # allowed models per shape, () = any
    weight: np.ndarray  # int64[M], pod counts (the probabilities are weight / total)
    memory: np.ndarray  # int64[M], GPU memory MiB per device, 0 = not asked
    #: every shape, uncut — set only when some shape names GPU memory (the memory-aware
    #: measure's set); None otherwise
    complete: TypicalPods | None = None

    @property
    def total(self) -> int:
        return int(self.weight.sum())

    def __len__(self) -> int:
        return len(self.weight)

    @classmethod
    def from_requests(
        cls, pods: Iterable[PodRequest], threshold: float = POPULARITY_THRESHOLD
    ) -> TypicalPods:
        """Most popular shapes covering `threshold` of the pods, CPU-only shapes included.

        Shapes are sorted by count, ties by key descending, and taken one at a time until
        the covered share reaches the threshold — as the study's GetTypicalPods does.
        """
        counts = Counter(typical_key(p) for p in pods)
        typical = cls._from_counts(counts, threshold)
        if threshold < 1.0 and any(k[4] for k in counts):
            typical = dataclasses.replace(typical, complete=cls._from_counts(counts, 1.0))
        return typical

    @classmethod
    def _from_counts(cls, counts: Counter, threshold: float) -> TypicalPods:
        n = sum(counts.values())
        ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        chosen: list[tuple[tuple[int, int, int, str, int], int]] = []
        covered = 0
        for key, c in ordered:
            if n and covered >= threshold * n:
                break
            chosen.append((key, c))
            covered += c
        return cls(
            cpu=np.array([k[0] for k, _ in chosen], dtype=np.int64),
            milli=np.array([k[1] for k, _ in chosen], dtype=np.int64),
            count=np.array([k[2] for k, _ in chosen], dtype=np.int64),
            models=tuple(tuple(x for x in k[3].split("|") if x) for k, _ in chosen),
            weight=np.array([c for _, c in chosen], dtype=np.int64),
            memory=np.array([k[4] for k, _ in chosen], dtype=np.int64),
        )


class FragmentationModel:
    """Evaluates FGD fragmentation of (hypothetical) node states against typical pods."""

    def __init__(self, typical: TypicalPods, state: ClusterState) -> None:
        self.typical = typical
        self.total_weight = typical.total
        gpu_shapes = typical.milli > 0
        # Per (node model, shape): may the shape use this model? Row -1 = node without model.
        access = np.zeros((len(state.model_names) + 1, len(typical)), dtype=bool)
        for j, allowed in enumerate(typical.models):
            for i, name in enumerate(state.model_names):
                access[i, j] = not allowed or name in allowed
        # Shapes whose fragment is the whole free GPU capacity unless they fit (Q3).
        self._access = access & gpu_shapes[None, :]
        self._milli = np.where(gpu_shapes, typical.milli, 1)  # avoid 0: never "fits"
        self._count = typical.count
        self._cpu = typical.cpu
        self._weight = typical.weight
        self._memory = typical.memory
        #: whether any typical shape names GPU memory; if none does, memory cannot be
        #: fragmented in a way the workload notices and the memory-aware measure is FGD's.
        self.names_memory = bool((typical.memory > 0).any())
        #: the model the memory-aware measure uses: over every shape when the set was cut
        self._memory_model = (FragmentationModel(typical.complete, state)
                              if self.names_memory and typical.complete is not None else self)
        # fragmentation of each node's current state, valid while its version is unchanged
        # (index 0 = FGD's, valid per `_parts_version`; 1 = memory-aware, per
        # `_cached_version`)
        self._cached_version = np.full(len(state), -1, dtype=np.int64)
        self._cached = np.zeros((2, len(state)), dtype=np.int64)
        # per node, the parts of FGD's measure that depend on its GPUs alone (`node_parts`),
        # valid while its version is unchanged: what `frag_after` starts from
        self._parts_version = np.full(len(state), -1, dtype=np.int64)
        self._free_total = np.zeros(len(state), dtype=np.int64)
        # one row per node: [fit count | big sum], so one node's parts are one array
        self._both = np.zeros((len(state), 2 * len(typical)), dtype=np.int64)
        self._fit_count = self._both[:, :len(typical)]
        self._big_sum = self._both[:, len(typical):]
        #: the shapes' CPU requests, sorted and distinct: a node's CPU "level" is how many
        #: of them it can hold (`_need`)
        self._cpu_levels = sorted(set(typical.cpu.tolist()))
        self._need_table: np.ndarray | None = None  # built on first use (`_need`)
        self._table: np.ndarray | None = None  # built on first use (`_parts_by_table`)
        #: (free milli, milli taken) -> what one GPU loses of the parts (`_loss`)
        self._losses: dict[tuple[int, int], np.ndarray] = {}
        #: milli taken -> `_loss` of every free milli (`_loss_table`)
        self._loss_tables: dict[int, np.ndarray] = {}
        #: the C context over this model's and one state's arrays (`native`); False = none
        self._native: native_fgd.FgdContext | None | bool = None

    def native(self, state: ClusterState) -> native_fgd.FgdContext | None:
        """The C path's context for `state` (native/placement/fgd.c), or None: library
        absent or switched off, a table too large, or another state than the first."""
        ctx = self._native
        if ctx is None:
            self._native = ctx = native_fgd.FgdContext.build(
                self, state, native_fgd.score_thresholds(
                    lambda g: fgd_score(g, self.total_weight), self.total_weight)) or False
        if ctx and ctx.matches(state):
            return ctx
        return None

    def frag_of(self, state: ClusterState, node: int) -> int:
        """`parts_of(state, node)[0]`: the node's fragmentation, its parts refreshed."""
        ctx = self.native(state)
        if ctx is not None:
            return ctx.lib.gg_fgd_refresh(ctx.ref, node)
        return self.parts_of(state, node)[0]

    def node_frag(self, gpu_free: np.ndarray, cpu_free: np.ndarray, model_idx: np.ndarray
                  ) -> np.ndarray:
        """Weighted fragmentation (int64, milli x pod count) of each given node state.

        A shape m that fits a node (enough GPUs with free >= its milli, enough CPU, allowed
        model) sees only the GPUs too small for it as fragment; any other shape — CPU-only
        shapes included — sees all free GPU capacity as fragment. Hence
        frag = W * free_total - sum over fitting m of w_m * (capacity of GPUs big enough).
        """
        if gpu_free.shape[0] == 0 or self.total_weight == 0:
            return np.zeros(gpu_free.shape[0], dtype=np.int64)
        big = gpu_free[:, :, None] >= self._milli[None, None, :]  # [C, G, M]
        fit_count = big.sum(axis=1)  # [C, M]
        big_sum = np.einsum("cg,cgm->cm", gpu_free, big.astype(np.int64))
        fits = (fit_count >= self._count[None, :]) & (cpu_free[:, None] >= self._cpu[None, :])
        fits &= self._access[model_idx]
        free_total = gpu_free.sum(axis=1)
        usable = (np.where(fits, big_sum, 0) * self._weight[None, :]).sum(axis=1)
        return self.total_weight * free_total - usable

    # -- the same measure in parts, for many hypothetical states of one node at once ---------
    # `node_frag` above is the definition; the functions below compute exactly the same
    # integers from per-node parts that depend on the GPUs alone (cached per node version),
    # so a candidate state costs [shapes] operations instead of [GPUs x shapes]
    # (tests/placement/test_fragmentation_fast.py checks them against `node_frag`).

    def node_parts(self, gpu_free: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(free total [C], per shape: GPUs with free >= its milli [C, M], their free milli
        summed [C, M]) of each given node's GPUs."""
        big = gpu_free[:, :, None] >= self._milli[None, None, :]  # [C, G, M]
        big_sum = np.einsum("cg,cgm->cm", gpu_free, big.astype(np.int64))
        return gpu_free.sum(axis=1), big.sum(axis=1), big_sum

    def frag_from_parts(self, free_total: np.ndarray, fit_count: np.ndarray,
                        big_sum: np.ndarray, cpu_free: np.ndarray, model_idx: np.ndarray
                        ) -> np.ndarray:
        """`node_frag` of node states given by their parts (see `node_parts`)."""
        if self.total_weight == 0:
            return np.zeros(len(free_total), dtype=np.int64)
        fits = (fit_count >= self._count) & (cpu_free[:, None] >= self._cpu)
        fits &= self._access[model_idx]
        if len(fits) > 256:  # many states: one pass without the [C, M] product (same ints)
            return self.total_weight * free_total - np.einsum("cm,cm,m->c", fits, big_sum,
                                                                self._weight)
        return self.total_weight * free_total - (fits * big_sum) @ self._weight

    def _lookup(self) -> np.ndarray:
        """The table of `_parts_by_table` (built on first use)."""
        if self._table is None:
            f = np.arange(MILLI_PER_GPU + 1, dtype=np.int64)[:, None]
            big = f >= self._milli[None, :]
            self._table = np.concatenate([big, np.where(big, f, 0)], axis=1)
        return self._table

    def _parts_by_table(self, gpu_free: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`node_parts` by looking each GPU's free milli up in a table (row f: per shape,
        f >= its milli, then f or 0), for free milli within 0..MILLI_PER_GPU."""
        both = self._lookup()[gpu_free].sum(axis=1)  # [C, 2M]
        m = len(self._milli)
        return gpu_free.sum(axis=1), both[:, :m], both[:, m:]

    def frag_and_parts(self, state: ClusterState, nodes: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """FGD's fragmentation of the nodes' current states and their `node_parts`, cached
        per node version (one cache check for both)."""
        stale = nodes[self._parts_version[nodes] != state.version[nodes]]
        if len(stale):
            free = state.gpu_free[stale]
            in_table = free.min() >= 0 and free.max() <= MILLI_PER_GPU
            parts = self._parts_by_table(free) if in_table else self.node_parts(free)
            self._free_total[stale], self._fit_count[stale], self._big_sum[stale] = parts
            self._cached[0, stale] = self.frag_from_parts(*parts, state.cpu_free[stale],
                                                          state.model_idx[stale])
            self._parts_version[stale] = state.version[stale]
        return (self._cached[0, nodes], self._free_total[nodes], self._fit_count[nodes],
                self._big_sum[nodes])

    def parts_of(self, state: ClusterState, node: int) -> tuple[int, int, np.ndarray]:
        """`frag_and_parts` of one node with scalar bookkeeping (the hot path: one node
        changes per placement): (fragmentation, free total, [fit count | big sum] [2M])."""
        version = int(state.version[node])
        if self._parts_version[node] != version:
            free = state.gpu_free[node]
            values = free.tolist()  # a few GPUs: Python's min/max/sum beat numpy's here
            if not values or min(values) < 0 or max(values) > MILLI_PER_GPU:
                self.frag_and_parts(state, np.array([node]))
            else:
                both = self._lookup()[free].sum(axis=0)
                free_total = sum(values)
                frag = 0
                if self.total_weight:
                    m = len(self._milli)
                    need = self._need(int(state.model_idx[node]), int(state.cpu_free[node]))
                    frag = (self.total_weight * free_total
                            - int(((both[:m] >= need) * both[m:]) @ self._weight))
                self._free_total[node] = free_total
                self._both[node] = both
                self._cached[0, node] = frag
                self._parts_version[node] = version
                return frag, free_total, both
        return int(self._cached[0, node]), int(self._free_total[node]), self._both[node]

    def _need(self, model_idx: int, cpu: int) -> np.ndarray:
        """[M]: per shape, how many big-enough GPUs it needs to fit a node of this model
        (index into `_access`) with `cpu` milli free; an unreachable count where its model
        or CPU rules it out. `fit count >= _need(...)` is `frag_from_parts`'s `fits`."""
        level = bisect_right(self._cpu_levels, cpu)
        if self._need_table is None:
            rows, m = self._access.shape
            if rows * (len(self._cpu_levels) + 1) * m > NEED_TABLE_MAX:
                return np.where(self._access[model_idx] & (cpu >= self._cpu), self._count,
                                _NEVER)
            levels = np.array([-1, *self._cpu_levels], dtype=np.int64)  # level k holds these
            ok = self._access[:, None, :] & (levels[None, :, None] >= self._cpu[None, None, :])
            self._need_table = np.where(ok, self._count, _NEVER)
        return self._need_table[model_idx, level]

    def _loss(self, free: int, milli: int) -> np.ndarray:
        """[2M]: what a GPU with `free` milli free adds to (fit count, big sum) minus what
        it adds after losing `milli` (`frag_after`'s `lost` and `drop` for one GPU)."""
        key = (free, milli)
        row = self._losses.get(key)
        if row is None:
            if len(self._losses) >= 65_536:  # bounded: request shapes are tenant input
                self._losses.clear()
            after = free - milli
            was = self._milli <= free
            still = self._milli <= after
            row = np.concatenate([was ^ still, was * free - still * after]).astype(np.int64)
            self._losses[key] = row
        return row

    def _loss_table(self, milli: int) -> np.ndarray:
        """`_loss` of every free milli 0..MILLI_PER_GPU for one `milli` ([1001, 2M] int32:
        values are at most MILLI_PER_GPU), kept for a few request sizes."""
        table = self._loss_tables.get(milli)
        if table is None:
            if len(self._loss_tables) >= 32:
                self._loss_tables.clear()
            f = np.arange(MILLI_PER_GPU + 1, dtype=np.int64)[:, None]
            after = f - milli
            was = self._milli <= f
            still = self._milli <= after
            table = np.concatenate([was ^ still, was * f - still * after], axis=1
                                   ).astype(np.int32)
            self._loss_tables[milli] = table
        return table

    def frag_after_one(self, parts: tuple[int, int, np.ndarray], frees: list[int],
                       taken: int, milli: int, cpu_after: int, model_idx: int) -> np.ndarray:
        """`frag_after` for candidate states of ONE node (the parts of `parts_of`): per
        entry of `frees`, `taken` GPUs with that free milli each lose `milli`."""
        _, free_total, both = parts
        if self.total_weight == 0:
            return np.zeros(len(frees), dtype=np.int64)
        m = len(self._milli)
        loss = (self._loss(frees[0], milli)[None, :] if len(frees) == 1
                else np.array([self._loss(f, milli) for f in frees]))
        after = both - (loss if taken == 1 else loss * taken)  # [K, 2M]
        usable = ((after[:, :m] >= self._need(model_idx, cpu_after)) * after[:, m:]
                  ) @ self._weight
        return self.total_weight * (free_total - taken * milli) - usable

    def frag_after(self, free_total: np.ndarray, fit_count: np.ndarray, big_sum: np.ndarray,
                   taken: np.ndarray | int, free: np.ndarray | int, milli: int,
                   cpu_after: np.ndarray, model_idx: np.ndarray) -> np.ndarray:
        """`node_frag` of node states after `taken` of their GPUs, each with `free` milli
        free, lose `milli` each (per row; `taken` 0 = a CPU-only pod), from the parts of the
        states before. A GPU stays big enough for the shapes with milli <= free - milli and
        stops being big enough for those with free - milli < milli_m <= free."""
        free = np.asarray(free).reshape(-1, 1)
        if isinstance(taken, int) and taken == 1 and len(free) > 16 and milli >= 0 and (
                free.min() >= 0 and free.max() <= MILLI_PER_GPU):  # many rows: look them up
            loss = self._loss_table(milli)[free[:, 0]]
            m = len(self._milli)
            return self.frag_from_parts(free_total - milli, fit_count - loss[:, :m],
                                        big_sum - loss[:, m:], cpu_after, model_idx)
        after = free - milli
        was = self._milli <= free  # [C, M]
        still = self._milli <= after
        lost = was ^ still  # `still` implies `was`
        # what the GPUs add to big_sum before minus after: free where big, minus after where
        # still big
        drop = was * free - still * after
        if isinstance(taken, int) and taken == 1:  # one device (sharing pods): no products
            return self.frag_from_parts(free_total - milli, fit_count - lost, big_sum - drop,
                                        cpu_after, model_idx)
        taken = np.asarray(taken).reshape(-1, 1)
        return self.frag_from_parts(free_total - taken[:, 0] * milli, fit_count - taken * lost,
                                    big_sum - taken * drop, cpu_after, model_idx)

    def node_frag_memory(self, gpu_free: np.ndarray, cpu_free: np.ndarray,
                         model_idx: np.ndarray, mem_free: np.ndarray, mem_cap: np.ndarray
                         ) -> np.ndarray:
        """Memory-aware fragmentation (int64, milli x pod count of the measure's set) of each
        given node state: FGD's compute fragment plus `MEMORY_WEIGHT` x the memory fragment
        (free memory, in milli of the device, that no typical shape fitting the device in
        both milli and memory can use), both over `TypicalPods.complete`.
        Exactly `node_frag` when no typical shape names memory.
        """
        if not self.names_memory:
            return self.node_frag(gpu_free, cpu_free, model_idx)
        m = self._memory_model
        if m is not self:
            return m.node_frag_memory(gpu_free, cpu_free, model_idx, mem_free, mem_cap)
        num, den = MEMORY_WEIGHT
        if gpu_free.shape[0] == 0 or self.total_weight == 0 or num == 0:
            return self.node_frag(gpu_free, cpu_free, model_idx)
        big = (gpu_free[:, :, None] >= self._milli[None, None, :]) & (
            mem_free[:, :, None] >= self._memory[None, None, :])  # [C, G, M]
        fit_count = big.sum(axis=1)
        mem_milli = np.where(mem_cap > 0, mem_free * 1000 // np.maximum(mem_cap, 1), 0)
        big_mem = np.einsum("cg,cgm->cm", mem_milli, big.astype(np.int64))
        fits = (fit_count >= self._count[None, :]) & (cpu_free[:, None] >= self._cpu[None, :])
        fits &= self._access[model_idx]
        usable_mem = (np.where(fits, big_mem, 0) * self._weight[None, :]).sum(axis=1)
        memory = self.total_weight * mem_milli.sum(axis=1) - usable_mem
        return self.node_frag(gpu_free, cpu_free, model_idx) + memory * num // den

    @property
    def memory_total_weight(self) -> int:
        """Pod count of the set the memory-aware measure uses (its unit's divisor)."""
        return self._memory_model.total_weight if self.names_memory else self.total_weight

    def of_nodes(self, state: ClusterState, nodes: np.ndarray, memory: bool = False
                 ) -> np.ndarray:
        """Fragmentation of the nodes' current states (cached per node version); `memory`
        selects the memory-aware measure."""
        if not memory:
            return self.frag_and_parts(state, nodes)[0]
        cached_version, cached = self._cached_version, self._cached[1]
        stale = nodes[cached_version[nodes] != state.version[nodes]]
        if len(stale):
            cached[stale] = self.node_frag_memory(
                state.gpu_free[stale], state.cpu_free[stale], state.model_idx[stale],
                state.gpu_mem_free[stale], state.gpu_mem_cap[stale])
            cached_version[stale] = state.version[stale]
        return cached[nodes]


def fgd_score(gain: np.ndarray, weight: int) -> np.ndarray:
    """FGD's integer score of fragmentation gains (milli x pod count, `weight` the pod
    count): int(100 * sigmoid(gain / weight / 1000)), truncated toward zero as Go does."""
    x = gain / ((weight or 1) * float(MILLI_PER_GPU))
    return np.trunc(100.0 / (1.0 + np.exp(-x))).astype(np.int64)


class FragmentationMeter:
    """Keeps the cluster's total fragmentation current as nodes change (exact integers)."""

    def __init__(self, model: FragmentationModel, state: ClusterState) -> None:
        self.model = model
        self.state = state
        self.per_node = model.of_nodes(state, np.arange(len(state)))
        self.total = int(self.per_node.sum())

    def update(self, node: int) -> None:
        new = self.model.frag_of(self.state, node)
        self.total += new - int(self.per_node[node])
        self.per_node[node] = new

    def resync(self) -> None:
        self.per_node = self.model.of_nodes(self.state, np.arange(len(self.state)))
        self.total = int(self.per_node.sum())

    @property
    def milli(self) -> float:
        """Cluster fragmentation in milli-GPU."""
        return self.total / self.model.total_weight if self.model.total_weight else 0.0
