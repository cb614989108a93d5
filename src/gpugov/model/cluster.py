"""Cluster state as numpy arrays, so placement can score every node in one vectorised pass.

One row per node; GPUs are a padded `[nodes, max_gpus]` matrix of free milli where padding
columns hold 0 (a device with nothing free never fits a request with milli > 0, and adds
nothing to any sum, so padding needs no special case). Snapshots are plain array copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU
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

    def __post_init__(self) -> None:
        for field in ("cpu_milli", "memory_mib", "gpu_count"):
            if getattr(self, field) < 0:
                raise ValueError(f"node {self.name}: {field} must be >= 0")
        if self.gpu_count > 0 and not self.model:
            raise ValueError(f"node {self.name}: a node with GPUs needs a GPU model")


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

    def feasible(self, req: PodRequest) -> np.ndarray:
        """Boolean mask of nodes where `req` fits: CPU, memory, GPU model and GPU capacity."""
        ok = (self.cpu_free >= req.cpu_milli) & (self.mem_free >= req.memory_mib)
        if req.gpu_milli > 0:
            ok &= self.model_mask(req.models)
            if req.gpu_count == 1:
                ok &= self.max_gpu_free >= req.gpu_milli
            else:
                ok &= self.full_gpus >= req.gpu_count
        return ok

    def failure_reason(self, req: PodRequest) -> str:
        """Why `req` fits nowhere, naming the first constraint no node can satisfy."""
        if req.gpu_milli > 0:
            model_ok = self.model_mask(req.models)
            if not model_ok.any():
                return "gpu-model"
            if req.gpu_count == 1:
                gpu_ok = model_ok & (self.max_gpu_free >= req.gpu_milli)
            else:
                gpu_ok = model_ok & (self.full_gpus >= req.gpu_count)
            if not gpu_ok.any():
                return "gpu"
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
            self.kind_count[n, pod_kind(req)] -= 1
        self.cpu_free[n] += req.cpu_milli
        self.mem_free[n] += req.memory_mib
        self.pod_count[n] -= 1
        if (self.gpu_free[n] > self.gpu_cap[n]).any() or self.cpu_free[n] > self.cpu_cap[n]:
            raise ValueError(f"{req.name}: release of an allocation that was never made")
        self._refresh(n)

    def _refresh(self, n: int) -> None:
        row = self.gpu_free[n]
        self.gpu_free_total[n] = row.sum()
        self.full_gpus[n] = (row == MILLI_PER_GPU).sum()
        self.max_gpu_free[n] = row.max()
        self.version[n] += 1

    # -- snapshots -------------------------------------------------------------------------
    _MUTABLE = ("cpu_free", "mem_free", "gpu_free", "kind_count", "pod_count", "version",
                "gpu_free_total", "full_gpus", "max_gpu_free")

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
