"""`gpugov`, the production placement policy (the scheduler's and the control plane's default):
FGD's fragmentation gradient descent with a memory-aware measure, extended to every device
mode, NVLink topology and power.

Two paths, so the FGD study's numbers stay exact:

- **Trace work** (every device soft, no taints or power budgets, requests without modes or
  constraints — `ClusterState.fast_path`): FGD over the memory-aware measure
  (`FragmentationModel.node_frag_memory`, over every typical shape when shapes name memory).
  When no typical pod names GPU memory (the openb traces) it decides exactly as FGD does. A
  sharing pod that names memory takes FGD's best-gain device; among equal gains, the device
  whose free memory and free compute stay most in proportion (a two-dimensional fit).
- **Everything else** (MIG, time-slice, MPS, exclusive devices, seals, taints, budgets; and
  multi-GPU pods where NVLink domains are known): a score in 0..100 from four terms,
  `WEIGHTS` (docs/placement-study.md has the measurements that chose them):
  - the mode's own fragmentation term: a soft slice or whole GPUs, the FGD gain of the
    memory-aware measure for the devices gpugov would take (a soft slice on the device with
    the best gain, ties as above); a MIG instance, the share of the card's MIG placeability
    the least-fragmenting valid start loses (`placement.mig.start_loss_table`; a free
    instance of a fixed layout loses none); a time-slice or MPS replica, how full the device
    already is (fill devices already in that mode before starting fresh ones);
  - topology (multi-GPU pods): 1 when the devices share one NVLink domain, 0.5 unknown, 0
    split; the device set is then the best-fitting domain (`topology.nvlink_set`);
  - power: the share of the node's devices still idle after the pod, on a node with a power
    budget the smaller of that and the budget's share left; a busy device costs nothing more;
  - energy: the model's perf-per-watt relative to the best model in the cluster.
  Power and energy weigh half a point each: tie-breakers. Whole-GPU pods prefer exclusive
  devices over fully free soft ones (those stay for slices).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU, get_model
from gpugov.model.cluster import MODE_CODE, ClusterState, shape_key
from gpugov.model.devices import DeviceMode
from gpugov.model.mig_table import has_mig
from gpugov.model.request import PodRequest
from gpugov.placement.base import truncate
from gpugov.placement.fgd import FgdPolicy
from gpugov.placement.mig import placeability_table, start_loss_table
from gpugov.placement.topology import nvlink_set

_EXCLUSIVE = MODE_CODE[DeviceMode.EXCLUSIVE]
#: request shapes whose device choices are kept (least recently used dropped)
MAX_CACHED_CHOICES = 128


@dataclass(frozen=True, slots=True)
class Weights:
    """Weights of the general path's terms (they sum to 1; the score is 100 x the sum)."""

    fragmentation: float = 0.89
    topology: float = 0.10
    power: float = 0.005
    energy: float = 0.005


#: chosen on bench/bench_mixed_modes.py (docs/placement-study.md)
WEIGHTS = Weights()


class GpugovPolicy(FgdPolicy):
    name = "gpugov"
    label = "07-gpugov"

    @property
    def memory_aware(self) -> bool:  # FgdPolicy's switch, per workload
        """The memory-aware measure where typical shapes name GPU memory; otherwise it is
        FGD's measure exactly, so FGD's faster path computes it (the same integers)."""
        return self.ctx.fragmentation.names_memory

    #: the general path's weights; a bench may try others on an instance
    weights: Weights = WEIGHTS

    def _fgd_path(self, state: ClusterState, req: PodRequest) -> bool:
        """True where FGD's own (memory-aware) decision is gpugov's: trace work, CPU-only
        pods, and everything but multi-GPU pods on nodes whose NVLink domains are known."""
        if not req.is_gpu:
            return True
        if not state.fast_path(req):
            return False
        return req.gpu_count == 1 or not bool((state.dev_nvlink >= 0).any())

    def score(self, state: ClusterState, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        if self._fgd_path(state, req):
            return super().score(state, req, nodes)
        return self.general(state, req, nodes)[0]

    def choose_devices(self, state: ClusterState, req: PodRequest, node: int) -> tuple[int, ...]:
        if self._fgd_path(state, req):
            if req.is_sharing and req.gpu_memory_mib:  # FGD's best gain, gpugov's ties
                nodes = np.array([node])
                taken = self._soft(state, req, nodes, state.device_fits(req, nodes))[1][0]
                return (int(np.flatnonzero(taken)[0]),)
            return super().choose_devices(state, req, node)
        versions, devices = self._taken_cache(state, req)
        if versions[node] == state.version[node]:  # chosen while scoring, node unchanged
            taken = devices[node]
        else:  # the device choice is the mode's term alone
            nodes = np.array([node])
            taken = self._mode_term(state, req, nodes, state.device_fits(req, nodes))[1][0]
        chosen = tuple(int(i) for i in np.flatnonzero(taken))
        # several MIG instances: the first device; the state places them (`mig_instances`)
        if len(chosen) != (1 if req.mode is DeviceMode.MIG else req.gpu_count):
            raise ValueError(f"{req.name}: needs {req.gpu_count} fitting devices on "
                             f"{state.names[node]}, found {len(chosen)}")
        return chosen

    # -- the general path ------------------------------------------------------------------
    def general(self, state: ClusterState, req: PodRequest, nodes: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """Per node of `nodes` (all feasible): the score (int64, 0..100) and the devices
        gpugov would take there (bool [nodes, devices])."""
        primary, taken = self._mode_term(state, req, nodes, state.device_fits(req, nodes))
        versions, devices = self._taken_cache(state, req)
        versions[nodes] = state.version[nodes]
        devices[nodes] = taken
        w = self.weights
        total = w.fragmentation * primary + w.energy * self._energy(state, nodes)
        if w.topology and req.gpu_count > 1:
            total += w.topology * _topology(state, nodes, taken)
        else:
            total += w.topology
        if w.power:
            total += w.power * _headroom(state, nodes, taken)
        return np.minimum(np.maximum(truncate(100.0 * total), 0), 100), taken

    def _taken_cache(self, state: ClusterState, req: PodRequest
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Per request shape: the node versions and the devices chosen when they were last
        scored, so choosing devices on the winning node does not compute them again."""
        if getattr(self, "_taken_of", None) is not state:
            self._taken: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
            self._taken_of = state
        key = shape_key(req)
        entry = self._taken.get(key)
        if entry is None:
            entry = (np.full(len(state), -1, dtype=np.int64),
                     np.zeros(state.gpu_free.shape, dtype=bool))
            self._taken[key] = entry
            if len(self._taken) > MAX_CACHED_CHOICES:
                self._taken.popitem(last=False)
        else:
            self._taken.move_to_end(key)
        return entry

    def _mode_term(self, state: ClusterState, req: PodRequest, nodes: np.ndarray,
                   fits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The request mode's fragmentation term (0..1) per node and the devices it takes."""
        mode = req.slice_mode
        if mode is DeviceMode.MIG:
            return self._mig(state, req, nodes, fits)
        if mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
            return self._replicas(state, req, nodes, fits)
        if mode is DeviceMode.SOFT:
            return self._soft(state, req, nodes, fits)
        return self._whole(state, req, nodes, fits)

    def _energy(self, state: ClusterState, nodes: np.ndarray) -> np.ndarray:
        """The node model's perf-per-watt relative to the best in the cluster (unknown: 0.5;
        per model, computed once per state)."""
        if getattr(self, "_energy_of", None) is not state:
            ppw = np.array([get_model(m).perf_per_watt or 0.0 for m in state.model_names]
                           + [0.0])
            best = ppw.max()
            self._energy_by_model = np.where(ppw > 0, ppw / best, 0.5) if best > 0 \
                else np.full(len(ppw), 0.5)
            self._energy_of = state
        return self._energy_by_model[state.model_idx[nodes]]

    def _gain(self, state: ClusterState, req: PodRequest, rows: np.ndarray,
              free: np.ndarray) -> np.ndarray:
        """FGD gain of the memory-aware measure as a sigmoid in 0..1 (0.5 = no change) of the
        nodes `rows` moving to GPU state `free` with the pod's CPU taken (the measure's
        memory weight is 0, so memory does not change it: `fragmentation.MEMORY_WEIGHT`)."""
        model = self.ctx.fragmentation
        before = model.of_nodes(state, rows, memory=True)
        after = model.node_frag_memory(free, state.cpu_free[rows] - req.cpu_milli,
                                       state.model_idx[rows], state.gpu_mem_free[rows],
                                       state.gpu_mem_cap[rows])
        x = (before - after) / ((model.memory_total_weight or 1) * float(MILLI_PER_GPU))
        return 1.0 / (1.0 + np.exp(-x))

    def _soft(self, state: ClusterState, req: PodRequest, nodes: np.ndarray, fits: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
        if req.gpu_count > 1:
            return self._soft_many(state, req, nodes, fits)
        rows, cols = np.nonzero(fits)
        if not len(rows):
            return np.zeros(len(nodes)), np.zeros(fits.shape, dtype=bool)
        pick = np.arange(len(rows))
        free = state.gpu_free[nodes[rows]]
        free[pick, cols] -= req.gpu_milli
        mem = state.gpu_mem_free[nodes[rows]]
        mem[pick, cols] -= state.memory_need(req, (nodes[rows], cols))
        gain = self._gain(state, req, nodes[rows], free)
        # best gain per node; ties: the device whose free memory and compute stay most in
        # proportion (least |memory share left - compute share left|), then the lowest index
        cap = np.maximum(state.gpu_mem_cap[nodes[rows], cols], 1)
        balance = np.abs(mem[pick, cols] / cap - free[pick, cols] / MILLI_PER_GPU)
        order = np.lexsort((cols, balance, -gain, rows))
        first = order[np.r_[True, rows[order][1:] != rows[order][:-1]]]
        primary = np.zeros(len(nodes))
        taken = np.zeros(fits.shape, dtype=bool)
        primary[rows[first]] = gain[first]
        taken[rows[first], cols[first]] = True
        return primary, taken

    def _soft_many(self, state: ClusterState, req: PodRequest, nodes: np.ndarray,
                   fits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """N soft slices (one per device): per node the N fitting devices with the least
        free compute (best fit, lowest index on ties), scored by the FGD gain of taking them."""
        k = req.gpu_count
        width = fits.shape[1]
        key = np.where(fits, state.gpu_free[nodes] * (width + 1) + np.arange(width),
                       np.iinfo(np.int64).max)
        order = np.argsort(key, axis=1, kind="stable")
        taken = np.zeros(fits.shape, dtype=bool)
        np.put_along_axis(taken, order[:, :k], True, axis=1)
        taken &= fits
        if req.nvlink:  # topology required: the best fits inside one NVLink domain
            domains = state.dev_nvlink[nodes]
            for i in range(len(nodes)):
                same = nvlink_set(domains[i], [int(c) for c in order[i] if fits[i, c]], k)
                taken[i] = False
                if same is not None:
                    taken[i, list(same)] = True
        ok = taken.sum(axis=1) == k
        taken[~ok] = False
        free = np.where(taken, state.gpu_free[nodes] - req.gpu_milli, state.gpu_free[nodes])
        return np.where(ok, self._gain(state, req, nodes, free), 0.0), taken

    def _whole(self, state: ClusterState, req: PodRequest, nodes: np.ndarray, fits: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        k = req.gpu_count
        width = fits.shape[1]
        # exclusive devices first (fully free soft ones stay for slices), then lowest index
        key = (state.dev_mode[nodes] != _EXCLUSIVE) * width + np.arange(width)
        order = np.argsort(np.where(fits, key, 2 * width), axis=1, kind="stable")
        taken = np.zeros(fits.shape, dtype=bool)
        np.put_along_axis(taken, order[:, :k], True, axis=1)
        taken &= fits
        if k > 1:
            domains = state.dev_nvlink[nodes]
            for i in np.flatnonzero((domains >= 0).any(axis=1)):
                cand = [int(c) for c in order[i] if fits[i, c]]
                same = nvlink_set(domains[i], cand, k)
                if same is not None:
                    taken[i] = False
                    taken[i, list(same)] = True
        free = np.where(taken, 0, state.gpu_free[nodes])
        return self._gain(state, req, nodes, free), taken

    def _mig_losses(self, state: ClusterState, profile: str) -> np.ndarray:
        """Per GPU model of `state` (row -1: none), occupied-slice mask and free compute
        slices: the share of an empty card's placeability a new `profile` instance loses
        (inf where it fits nowhere), stacked so many devices are looked up at once."""
        if getattr(self, "_losses_of", None) is not state:
            self._losses: dict[str, np.ndarray] = {}
            self._losses_of = state
        stacked = self._losses.get(profile)
        if stacked is None:
            names = [m for m in state.model_names if has_mig(m)]
            shape = (1, 1)
            if names:
                shape = tuple(np.max([placeability_table(m).shape for m in names], axis=0))
            stacked = np.full((len(state.model_names) + 1, *shape), np.inf)
            for i, name in enumerate(state.model_names):
                if has_mig(name):
                    table = start_loss_table(name, profile)[0]
                    empty = placeability_table(name)[0, -1]
                    stacked[i, :table.shape[0], :table.shape[1]] = table / empty
            self._losses[profile] = stacked
        return stacked

    def _mig(self, state: ClusterState, req: PodRequest, nodes: np.ndarray, fits: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
        stacked = self._mig_losses(state, req.mig_profile)
        occ = np.minimum(state.mig_occ[nodes], stacked.shape[1] - 1)
        compute = np.minimum(state.mig_compute_free[nodes], stacked.shape[2] - 1)
        loss = stacked[state.model_idx[nodes][:, None], occ, compute]
        loss = np.where(state.mig_fixed[nodes], 0.0, loss)  # a fixed instance is already cut
        loss = np.where(fits, loss, np.inf)
        col = loss.argmin(axis=1)
        best = loss[np.arange(len(nodes)), col]
        taken = np.zeros(fits.shape, dtype=bool)
        ok = np.isfinite(best)
        taken[np.flatnonzero(ok), col[ok]] = True
        return np.where(ok, 1.0 - np.minimum(np.maximum(best, 0.0), 1.0), 0.0), taken

    def _replicas(self, state: ClusterState, req: PodRequest, nodes: np.ndarray,
                  fits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cap = np.maximum(state.rep_cap[nodes], 1)
        fill = 1.0 - (state.rep_free[nodes] - 1) / cap  # 1 = the device's last replica
        key = fill
        if req.slice_mode is DeviceMode.TIMESLICE:  # ties: the most memory unpromised
            mem_cap = np.maximum(state.gpu_mem_cap[nodes], 1)
            key = fill + 1e-3 * state.gpu_mem_free[nodes] / mem_cap / cap
        key = np.where(fits, key, -np.inf)
        col = key.argmax(axis=1)
        rows = np.arange(len(nodes))
        ok = np.isfinite(key[rows, col])
        taken = np.zeros(fits.shape, dtype=bool)
        taken[rows[ok], col[ok]] = True
        return np.where(ok, fill[rows, col], 0.0), taken


def _topology(state: ClusterState, nodes: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """1 when a multi-GPU pod's devices share one NVLink domain, 0.5 when a device's domain
    is unknown, 0 when they span domains."""
    dom = state.dev_nvlink[nodes]
    unknown = (taken & (dom < 0)).any(axis=1)
    hi = np.where(taken, dom, np.iinfo(np.int64).min).max(axis=1)
    lo = np.where(taken, dom, np.iinfo(np.int64).max).min(axis=1)
    return np.where(unknown, 0.5, np.where(hi == lo, 1.0, 0.0))


def _headroom(state: ClusterState, nodes: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """Power headroom left after the pod, as a share: of the budget on a node with one (its
    busy devices at TDP), of the node's devices without (idle devices draw nothing here).
    A device already hosting a pod costs nothing more."""
    idle = state.dev_pods[nodes] == 0
    new = (taken & idle).sum(axis=1)
    gpus = np.maximum(state.gpu_count[nodes], 1)
    share = (idle.sum(axis=1) - (state.gpu_cap[nodes] == 0).sum(axis=1) - new) / gpus
    if state.has_power:
        budget = state.power_budget[nodes]
        limited = np.isfinite(budget) & (budget > 0)
        if limited.any():
            head = budget - (state.busy_gpus[nodes] + new) * state.dev_tdp[nodes]
            of_budget = head / np.where(limited, budget, 1.0)
            share = np.where(limited, np.minimum(share, of_budget), share)
    return np.minimum(np.maximum(share, 0.0), 1.0)
