"""Cluster state as numpy arrays, so placement can score every node in one vectorised pass.

One row per node; GPUs are padded `[nodes, max_gpus]` matrices of free compute milli and
free GPU memory MiB where padding columns hold 0 (a device with nothing free never fits a
request with milli > 0, and adds nothing to any sum, so padding needs no special case).
Snapshots are plain array copies.

GPU memory is a real dimension: a device's capacity is its model's memory from the catalog
(or the node's own figure, e.g. what NVML reported). A model whose memory is unknown (the
trace's undisclosed G2/G3) gets capacity 0: requests that name no memory (every openb pod)
place exactly as before, and a request that does name memory never lands on a card whose
memory nobody can vouch for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU, get_model
from gpugov.model.request import Allocation, PodRequest

#: column of `kind_count` for sharing pods; whole-GPU pods use column = their GPU count.
SHARE_KIND = 0


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node as a trace or the API describes it: capacity only, nothing allocated."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    model: str = ""
    #: memory of each device in MiB; None = the catalog's figure for `model` (0 if unknown).
    gpu_memory_mib: int | None = None

    def __post_init__(self) -> None:
        for field in ("cpu_milli", "memory_mib", "gpu_count"):
            if getattr(self, field) < 0:
                raise ValueError(f"node {self.name}: {field} must be >= 0")
        if self.gpu_memory_mib is not None and self.gpu_memory_mib < 0:
            raise ValueError(f"node {self.name}: gpu_memory_mib must be >= 0")
        if self.gpu_count > 0 and not self.model:
            raise ValueError(f"node {self.name}: a node with GPUs needs a GPU model")

    @property
    def device_memory_mib(self) -> int:
        """Memory of each of this node's devices (0 when neither node nor catalog knows)."""
        if self.gpu_memory_mib is not None:
            return self.gpu_memory_mib
        return get_model(self.model).memory_mib or 0 if self.model else 0


def pod_kind(req: PodRequest) -> int:
    """GPU-affinity kind of a GPU pod: SHARE_KIND for sharing pods, else its GPU count."""
    return SHARE_KIND if req.is_sharing else req.gpu_count


class ClusterState:
    """Free and capacity vectors of every node, plus per-node derived summaries.

    Derived arrays (`gpu_free_total`, `full_gpus`, `max_gpu_free`) and the per-node
    `version` counter are kept in step by `allocate`/`release`; policies use `version` to
    know which cached node scores are stale.
    """

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        self.nodes: tuple[NodeSpec, ...] = tuple(nodes)
        n = len(self.nodes)
        self.names: list[str] = [s.name for s in self.nodes]
        self.model_names: list[str] = sorted({s.model for s in self.nodes if s.model})
        index = {m: i for i, m in enumerate(self.model_names)}
        self.model_idx = np.array([index.get(s.model, -1) for s in self.nodes], dtype=np.int64)
        self.cpu_cap = np.array([s.cpu_milli for s in self.nodes], dtype=np.int64)
        self.mem_cap = np.array([s.memory_mib for s in self.nodes], dtype=np.int64)
        self.gpu_count = np.array([s.gpu_count for s in self.nodes], dtype=np.int64)
        self.max_gpus = int(self.gpu_count.max()) if n else 0
        width = max(self.max_gpus, 1)
        cols = np.arange(width)
        self.gpu_cap = np.where(cols[None, :] < self.gpu_count[:, None], MILLI_PER_GPU, 0)
        self.gpu_cap = self.gpu_cap.astype(np.int64).reshape(n, width)
        self.total_gpu_milli = int(self.gpu_cap.sum())
        dev_mem = np.array([s.device_memory_mib for s in self.nodes], dtype=np.int64)
        self.gpu_mem_cap = np.where(self.gpu_cap > 0, dev_mem.reshape(n, 1), 0).astype(np.int64)
        self.gpu_mem_cap = self.gpu_mem_cap.reshape(n, width)
        self.gpu_mem_free = self.gpu_mem_cap.copy()
        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        self.gpu_free = self.gpu_cap.copy()
        self.kind_count = np.zeros((n, width + 1), dtype=np.int64)
        self.pod_count = np.zeros(n, dtype=np.int64)
        self.version = np.zeros(n, dtype=np.int64)
        self.gpu_free_total = self.gpu_free.sum(axis=1)
        self.full_gpus = (self.gpu_free == MILLI_PER_GPU).sum(axis=1)
        self.max_gpu_free = self.gpu_free.max(axis=1) if n else np.zeros(0, dtype=np.int64)
        self._model_masks: dict[tuple[str, ...], np.ndarray] = {}

    # -- queries ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def used_gpu_milli(self) -> int:
        return self.total_gpu_milli - int(self.gpu_free_total.sum())

    def model_mask(self, models: tuple[str, ...]) -> np.ndarray:
        """Nodes whose GPU model is one of `models` (empty = every node with GPUs)."""
        mask = self._model_masks.get(models)
        if mask is None:
            if models:
                wanted = [i for i, m in enumerate(self.model_names) if m in models]
                mask = np.isin(self.model_idx, wanted)
            else:
                mask = self.gpu_count > 0
            self._model_masks[models] = mask
        return mask

    def device_fits(self, req: PodRequest, nodes: np.ndarray | int | slice = slice(None)
                    ) -> np.ndarray:
        """Which devices of `nodes` could take `req` on their own: free milli and, when the
        request names GPU memory, free memory too (whole GPUs: fully free devices whose
        memory is large enough)."""
        free = self.gpu_free[nodes]
        if req.gpu_milli >= MILLI_PER_GPU:
            fits = free == MILLI_PER_GPU
            if req.gpu_memory_mib:
                fits &= self.gpu_mem_cap[nodes] >= req.gpu_memory_mib
            return fits
        fits = free >= req.gpu_milli
        if req.gpu_memory_mib:
            fits &= self.gpu_mem_free[nodes] >= req.gpu_memory_mib
        return fits

    def _gpu_fit(self, req: PodRequest) -> np.ndarray:
        """Nodes with enough GPU room for `req` (milli, and memory when asked)."""
        if not req.gpu_memory_mib:
            if req.gpu_count == 1:
                return self.max_gpu_free >= req.gpu_milli
            return self.full_gpus >= req.gpu_count
        return self.device_fits(req).sum(axis=1) >= req.gpu_count

    def feasible(self, req: PodRequest) -> np.ndarray:
        """Boolean mask of nodes where `req` fits: CPU, memory, GPU model and GPU capacity
        (compute milli and, when the request names it, GPU memory)."""
        ok = (self.cpu_free >= req.cpu_milli) & (self.mem_free >= req.memory_mib)
        if req.gpu_milli > 0:
            ok &= self.model_mask(req.models)
            ok &= self._gpu_fit(req)
        return ok

    def failure_reason(self, req: PodRequest) -> str:
        """Why `req` fits nowhere, naming the first constraint no node can satisfy:
        `gpu-model`, `gpu` (compute), `gpu-memory`, `cpu` or `memory` (host memory)."""
        if req.gpu_milli > 0:
            model_ok = self.model_mask(req.models)
            if not model_ok.any():
                return "gpu-model"
            if req.gpu_count == 1:
                milli_ok = model_ok & (self.max_gpu_free >= req.gpu_milli)
            else:
                milli_ok = model_ok & (self.full_gpus >= req.gpu_count)
            if not milli_ok.any():
                return "gpu"
            gpu_ok = milli_ok & self._gpu_fit(req) if req.gpu_memory_mib else milli_ok
            if not gpu_ok.any():
                return "gpu-memory"
        else:
            gpu_ok = np.ones(len(self), dtype=bool)
        cpu_ok = gpu_ok & (self.cpu_free >= req.cpu_milli)
        if not cpu_ok.any():
            return "cpu"
        return "memory"

    # -- updates ---------------------------------------------------------------------------
    def allocate(self, req: PodRequest, alloc: Allocation) -> None:
        """Commit `alloc` for `req`; raises if it would overcommit anything."""
        n = alloc.node
        if self.cpu_free[n] < req.cpu_milli or self.mem_free[n] < req.memory_mib:
            raise ValueError(f"{req.name}: node {self.names[n]} lacks CPU or memory")
        devs = list(alloc.devices)
        if len(set(devs)) != len(devs) or len(devs) != req.gpu_count:
            raise ValueError(f"{req.name}: needs {req.gpu_count} distinct devices, got {devs}")
        if devs:
            if max(devs) >= self.gpu_count[n] or (self.gpu_free[n, devs] < alloc.milli).any():
                raise ValueError(f"{req.name}: devices {devs} on {self.names[n]} lack capacity")
            if alloc.milli >= MILLI_PER_GPU:
                # a fully free device has all its memory free: only milli > 0 holds memory
                self.gpu_mem_free[n, devs] = 0
            elif alloc.memory_mib:
                if (self.gpu_mem_free[n, devs] < alloc.memory_mib).any():
                    raise ValueError(
                        f"{req.name}: devices {devs} on {self.names[n]} lack GPU memory")
                self.gpu_mem_free[n, devs] -= alloc.memory_mib
            self.gpu_free[n, devs] -= alloc.milli
            self.kind_count[n, pod_kind(req)] += 1
        self.cpu_free[n] -= req.cpu_milli
        self.mem_free[n] -= req.memory_mib
        self.pod_count[n] += 1
        self._refresh(n)

    def release(self, req: PodRequest, alloc: Allocation) -> None:
        """Undo `allocate` (a pod left or was evicted)."""
        n = alloc.node
        devs = list(alloc.devices)
        if devs:
            self.gpu_free[n, devs] += alloc.milli
            if alloc.milli >= MILLI_PER_GPU:
                self.gpu_mem_free[n, devs] = self.gpu_mem_cap[n, devs]
            elif alloc.memory_mib:
                self.gpu_mem_free[n, devs] += alloc.memory_mib
            self.kind_count[n, pod_kind(req)] -= 1
        self.cpu_free[n] += req.cpu_milli
        self.mem_free[n] += req.memory_mib
        self.pod_count[n] -= 1
        if ((self.gpu_free[n] > self.gpu_cap[n]).any() or self.cpu_free[n] > self.cpu_cap[n]
                or (self.gpu_mem_free[n] > self.gpu_mem_cap[n]).any()):
            raise ValueError(f"{req.name}: release of an allocation that was never made")
        self._refresh(n)

    def _refresh(self, n: int) -> None:
        row = self.gpu_free[n]
        self.gpu_free_total[n] = row.sum()
        self.full_gpus[n] = (row == MILLI_PER_GPU).sum()
        self.max_gpu_free[n] = row.max()
        self.version[n] += 1

    # -- snapshots -------------------------------------------------------------------------
    _MUTABLE = ("cpu_free", "mem_free", "gpu_free", "gpu_mem_free", "kind_count", "pod_count",
                "version", "gpu_free_total", "full_gpus", "max_gpu_free")

    def snapshot(self) -> dict[str, np.ndarray]:
        """A copy of everything allocation changes; `restore` puts it back."""
        return {k: getattr(self, k).copy() for k in self._MUTABLE}

    def restore(self, snap: dict[str, np.ndarray]) -> None:
        # Versions must move forward so score caches never mistake restored rows for fresh.
        changed = np.flatnonzero(
            (snap["version"] != self.version) | (snap["gpu_free_total"] != self.gpu_free_total)
        )
        bump = self.version.max() + 1 if len(self) else 0
        for k in self._MUTABLE:
            getattr(self, k)[...] = snap[k]
        self.version[changed] = bump
