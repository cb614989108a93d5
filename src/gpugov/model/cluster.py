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

Every device has a mode (`DeviceMode`), held as small integer codes so a request is tested
against all devices at once:
- `soft` (the default, and what every trace node is): whole-GPU pods take a fully free
  device, sharing pods a two-dimensional fit of compute milli and GPU memory;
- `exclusive`: whole-GPU pods only;
- `mig`: MIG instances at valid starts (a bitmask of occupied memory slices per device; a
  fixed layout is a bitmask over the model's placements that are free);
- `timeslice` / `mps`: replica counters; a time-slice pod is charged the memory it names
  (card/replicas if it names none), which the enforcement library caps it at, unless its
  tenant opted in to oversubscription (charged and capped at nothing), so capped time-slicing
  never promises more memory than the card has; an MPS client is capped at memory/clients and
  1000/clients milli, which is what it is charged.
Each charge is also taken from the device's free milli and memory, so the FGD measures see
a MIG instance or a replica as used capacity.

A pod never lands below its isolation floor (`min_isolation`: soft devices and capped
time-slice replicas deliver soft, MPS and oversubscribing replicas none, whole devices and MIG
hard; a device holding an oversubscribing replica delivers none to anyone, so an
oversubscribing replica never joins a device holding a replica that needs soft, and the other
way round), a sealed pod (an untrusted tenant's)
never shares a device with another tenant, node selectors and NoSchedule/NoExecute taints
hold as in Kubernetes, and a node's power budget is hard: every device hosting a pod counts
at its model's TDP.

Plain trace work (soft devices, no taints, budgets or seals; requests without modes or
constraints) keeps the original fast path of per-node summaries; everything else goes
through the per-device filter, whose node masks and device fits are cached per request shape
and refreshed only for nodes whose `version` moved.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU, get_model
from gpugov.model.constraints import (
    Taint,
    affinity_matches,
    intolerable_preferences,
    preference_weight,
    selects,
    tolerates,
)
from gpugov.model.devices import DeviceConfig, DeviceMode, DeviceTopology
from gpugov.model.isolation import IsolationLevel
from gpugov.model.mig import MIG_GEOMETRIES, layout_errors
from gpugov.model.mig_table import has_mig, mig_table
from gpugov.model.power import PowerDomain, device_power_mw, over_budget_message, share_mw
from gpugov.model.request import Allocation, PodRequest

#: column of `kind_count` for sharing pods; whole-GPU pods use column = their GPU count.
SHARE_KIND = 0

#: device mode codes held in `ClusterState.dev_mode`.
MODE_CODE = {DeviceMode.EXCLUSIVE: 0, DeviceMode.MIG: 1, DeviceMode.SOFT: 2,
             DeviceMode.TIMESLICE: 3, DeviceMode.MPS: 4}
_EXCL, _MIG, _SOFT, _TS, _MPS = range(5)
#: mode code of the padding columns in the filter's view: no request's mode matches it.
_NO_DEVICE = 5
#: isolation each mode delivers to a pod that shares the device (a whole device is hard).
_MODE_ISO = np.array([2, 2, 1, 1, 0, 0], dtype=np.int8)

#: the most memory slices of any MIG model: occupancy bitmasks are below 1 << this.
MEMORY_SLICES = max(g.memory_slices for g in MIG_GEOMETRIES.values())

#: failure reasons, in the order the filter applies them (docs/contracts.md).
REASONS = ("gpu-model", "node-selector", "taint", "gpu-mode", "isolation", "tenant-isolation",
           "mig-slice", "replicas", "gpu", "gpu-memory", "power", "topology", "cpu", "memory")


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
    #: per-device modes, one per GPU; empty = every device `DeviceConfig()` (soft).
    devices: tuple[DeviceConfig, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    #: hard limit on the TDP of the devices hosting pods; None = no limit.
    power_budget_w: float | None = None
    #: per-device interconnect; empty = unknown.
    topology: tuple[DeviceTopology, ...] = ()
    #: the rack/row/PDU feeding this node (model/power.py); None = not budgeted.
    power_domain: PowerDomain | None = None
    #: the power limit the node agent set on its devices (W), when below the TDP.
    gpu_power_cap_w: float | None = None

    def __post_init__(self) -> None:
        for field in ("cpu_milli", "memory_mib", "gpu_count"):
            if getattr(self, field) < 0:
                raise ValueError(f"node {self.name}: {field} must be >= 0")
        if self.gpu_memory_mib is not None and self.gpu_memory_mib < 0:
            raise ValueError(f"node {self.name}: gpu_memory_mib must be >= 0")
        if self.gpu_count > 0 and not self.model:
            raise ValueError(f"node {self.name}: a node with GPUs needs a GPU model")
        if self.devices and len(self.devices) != self.gpu_count:
            raise ValueError(f"node {self.name}: {len(self.devices)} device modes for "
                             f"{self.gpu_count} GPUs")
        if self.topology and len(self.topology) != self.gpu_count:
            raise ValueError(f"node {self.name}: {len(self.topology)} device topologies for "
                             f"{self.gpu_count} GPUs")
        if self.power_budget_w is not None and not self.power_budget_w >= 0:
            raise ValueError(f"node {self.name}: power_budget_w must be >= 0")
        for k, d in enumerate(self.devices):
            if d.mode is DeviceMode.MIG:
                if not has_mig(self.model):
                    raise ValueError(f"node {self.name}: device {k}: {self.model} has no MIG")
                if d.mig_layout is not None:
                    table = mig_table(self.model)
                    errors = layout_errors(table.geometry, d.mig_layout)
                    errors += [f"{i.profile} is a media-extension profile (not modelled)"
                               for i in d.mig_layout if i.profile not in table.by_profile]
                    if errors:
                        raise ValueError(f"node {self.name}: device {k}: invalid MIG layout: "
                                         + "; ".join(errors))

    def device_config(self, k: int) -> DeviceConfig:
        return self.devices[k] if self.devices else _DEFAULT_DEVICE

    @property
    def device_memory_mib(self) -> int:
        """Memory of each of this node's devices (0 when neither node nor catalog knows)."""
        if self.gpu_memory_mib is not None:
            return self.gpu_memory_mib
        return get_model(self.model).memory_mib or 0 if self.model else 0


_DEFAULT_DEVICE = DeviceConfig()


def pod_kind(req: PodRequest) -> int:
    """GPU-affinity kind of a GPU pod: SHARE_KIND for sharing pods (MIG instances too,
    however many), else its GPU count."""
    return SHARE_KIND if req.is_sharing or req.mode is DeviceMode.MIG else req.gpu_count


class ClusterState:
    """Free and capacity vectors of every node, plus per-node derived summaries.

    Derived arrays (`gpu_free_total`, `full_gpus`, `max_gpu_free`) and the per-node
    `version` counter are kept in step by `allocate`/`release`; policies use `version` to
    know which cached node scores are stale.
    """

    #: inter-pod placement (pod affinity, anti-affinity, topology spread) of requests that
    #: carry `PodRequest.pods`: an object with mask/reason/moved/has_scores/scores, hung on
    #: the state for one scheduling cycle (`k8s/scheduler/pod_affinity.py`); None = none
    pod_filter: Any = None

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
        self._init_devices(width)

    def _init_devices(self, width: int) -> None:
        """Per-device modes, replicas, MIG occupancy, tenants and power (see module doc)."""
        n = len(self.nodes)
        self.dev_mode = np.full((n, width), _SOFT, dtype=np.int8)
        self.rep_cap = np.zeros((n, width), dtype=np.int64)
        self.rep_free = np.zeros((n, width), dtype=np.int64)
        self.mig_fixed = np.zeros((n, width), dtype=bool)
        self.mig_occ = np.zeros((n, width), dtype=np.int64)  # occupied memory slices
        self.mig_compute_free = np.zeros((n, width), dtype=np.int64)
        self.mig_layout_free = np.zeros((n, width), dtype=np.int64)  # fixed: free placements
        self.dev_pods = np.zeros((n, width), dtype=np.int64)
        self.dev_sealed = np.zeros((n, width), dtype=np.int64)
        self.dev_owner = np.full((n, width), -1, dtype=np.int64)
        #: time-slice replicas live per device that oversubscribe (uncapped) / need soft
        self.dev_uncapped = np.zeros((n, width), dtype=np.int64)
        self.dev_needs_soft = np.zeros((n, width), dtype=np.int64)
        self.dev_nvlink = np.full((n, width), -1, dtype=np.int64)
        self.power_budget = np.full(n, np.inf)
        self.dev_tdp = np.zeros(n)
        self.busy_gpus = np.zeros(n, dtype=np.int64)
        self._tenant_ids: dict[str, int] = {}
        #: time-sliced MIG instances (node, device, placement number) -> [replicas, free
        #: replicas, free memory MiB, uncapped replicas, replicas needing soft]
        self.mig_shared: dict[tuple[int, int, int], list[int]] = {}
        self._constraint_masks: dict[tuple, np.ndarray] = {}
        self._fit_cache: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
        self.has_taints = any(s.taints for s in self.nodes)
        #: some node has a PreferNoSchedule taint: placement scores it (`preference`)
        self.has_soft_taints = any(t.effect == "PreferNoSchedule" for s in self.nodes
                                   for t in s.taints)
        self.has_power = any(s.power_budget_w is not None for s in self.nodes)
        self._init_domains()
        for i, spec in enumerate(self.nodes):
            if spec.power_budget_w is not None:
                self.power_budget[i] = spec.power_budget_w
                self.dev_tdp[i] = (get_model(spec.model).tdp_w or 0) if spec.model else 0
            for k, topo in enumerate(spec.topology):
                if topo.nvlink_domain is not None:
                    self.dev_nvlink[i, k] = topo.nvlink_domain
            for k, cfg in enumerate(spec.devices):
                self.dev_mode[i, k] = MODE_CODE[cfg.mode]
                if cfg.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
                    self.rep_cap[i, k] = self.rep_free[i, k] = cfg.replicas
                elif cfg.mode is DeviceMode.MIG:
                    table = mig_table(spec.model)
                    self.mig_compute_free[i, k] = table.geometry.compute_slices
                    if cfg.mig_layout is not None:
                        self.mig_fixed[i, k] = True
                        whole = tuple(m for m in cfg.mig_layout if m.replicas <= 1)
                        self.mig_layout_free[i, k] = table.layout_mask(whole)
                        for m in cfg.mig_layout:
                            if m.replicas > 1:  # time-sliced: only its replicas are handed out
                                pk = table.number(m.profile, m.start)
                                self.mig_shared[(i, k, pk)] = [
                                    m.replicas, m.replicas, table.placements[pk].memory_mib, 0, 0]
        #: True while every device is soft and no node has taints or a budget: plain
        #: requests may then use the per-node summaries (the trace engine's fast path).
        #: the filter's view of the modes: padding columns are no device at all
        self._filter_mode = np.where(self.gpu_cap > 0, self.dev_mode, _NO_DEVICE).astype(np.int8)
        #: devices a whole-GPU pod may take (exclusive or soft)
        self._whole_ok = (self._filter_mode == _EXCL) | (self._filter_mode == _SOFT)
        self._slots = self._count_slots(slice(None))
        self.plain = bool((self.dev_mode == _SOFT).all()) and not self.has_taints \
            and not self.has_power and not self.has_domains
        self._sealed_pods = 0

    def _init_domains(self) -> None:
        """Power domains (model/power.py): each node's domain, the budgets, and the admitted
        draw per domain in milliwatts, starting at every device's idle draw."""
        n = len(self.nodes)
        self.node_dom = np.full(n, -1, dtype=np.int64)
        self.node_idle_mw = np.zeros(n, dtype=np.int64)
        self.node_span_mw = np.zeros(n, dtype=np.int64)  # full-load minus idle, per device
        self.domains: list[PowerDomain] = []
        index: dict[str, int] = {}
        for i, spec in enumerate(self.nodes):
            d = spec.power_domain
            if d is None:
                continue
            k = index.setdefault(d.name, len(self.domains))
            if k == len(self.domains):
                self.domains.append(d)
            elif self.domains[k] != d:
                raise ValueError(f"node {spec.name}: power domain {d.name} is described two "
                                 f"ways ({self.domains[k]} and {d})")
            self.node_dom[i] = k
            idle, peak = device_power_mw(spec.model, spec.gpu_power_cap_w)
            self.node_idle_mw[i], self.node_span_mw[i] = idle, peak - idle
        self.has_domains = bool(self.domains)
        #: False while a driver counts pods that already run (`counting_running`): a rack's
        #: budget governs admission, and what runs is counted even when over it
        self.admit_power = True
        self.dom_budget_mw = np.array([d.budget_mw for d in self.domains], dtype=np.int64)
        self.dom_admitted_mw = np.zeros(len(self.domains), dtype=np.int64)
        np.add.at(self.dom_admitted_mw, self.node_dom[self.node_dom >= 0],
                  (self.node_idle_mw * self.gpu_count)[self.node_dom >= 0])

    @contextlib.contextmanager
    def counting_running(self):
        """Within: allocations count what already runs (a restart, a budget lowered under
        running pods, GPUs whose power limits were lowered) without the racks' or nodes'
        power budgets refusing it; the draw is still summed."""
        before, self.admit_power = self.admit_power, False
        try:
            yield self
        finally:
            self.admit_power = before
            self._fit_cache.clear()  # nothing computed without the budgets is kept

    def domain_draw_mw(self) -> dict[str, tuple[int, int]]:
        """(admitted, budget) milliwatts of each power domain."""
        return {d.name: (int(self.dom_admitted_mw[k]), int(self.dom_budget_mw[k]))
                for k, d in enumerate(self.domains)}

    def _charge_milli(self, req: PodRequest, nodes):
        """The compute milli `req` is charged per device of `nodes` (as `charge` does, for
        many devices at once): what its expected draw scales with."""
        mode = req.slice_mode
        if mode is DeviceMode.EXCLUSIVE:
            return MILLI_PER_GPU
        if mode is DeviceMode.MIG:
            per_model = self._per_node_int(("mig-milli", req.mig_profile), lambda s: (
                mig_table(s.model).milli(req.mig_profile) if has_mig(s.model) and
                req.mig_profile in mig_table(s.model).by_profile else MILLI_PER_GPU))
            got = per_model[nodes]
            return got.reshape(-1, 1) if np.ndim(got) else got
        if mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
            return MILLI_PER_GPU // np.maximum(self.rep_cap[nodes], 1)
        return req.gpu_milli

    def _domain_fits(self, req: PodRequest, nodes) -> np.ndarray:
        """Devices of `nodes` whose domain can feed `req` on `gpu_count` such devices."""
        dom = self.node_dom[nodes]
        if not self.admit_power:
            return np.ones(self.gpu_cap[nodes].shape, dtype=bool)
        span = self.node_span_mw[nodes]
        head = np.where(dom >= 0, self.dom_budget_mw[dom] - self.dom_admitted_mw[dom]
                        if len(self.domains) else 0, np.iinfo(np.int64).max // 4)
        if np.ndim(dom):
            head, span = head.reshape(-1, 1), span.reshape(-1, 1)
        need = share_mw(span, self._charge_milli(req, nodes)) * req.gpu_count
        return np.broadcast_to(need <= head, self.gpu_cap[nodes].shape)

    def _domain_node_ok(self, req: PodRequest, nodes=slice(None)):
        """Nodes of `nodes` whose rack can feed `req` on `gpu_count` devices (no rack: True);
        a node's devices share its model, so this is the device step `_domain_fits` per node
        (time-slice/MPS devices of different replica counts: the largest share)."""
        dom = self.node_dom[nodes]
        if not self.admit_power:
            return np.ones(np.shape(dom), dtype=bool) if np.ndim(dom) else np.True_
        milli = self._charge_milli(req, nodes)
        if np.ndim(milli) > np.ndim(dom):  # per device (time-slice/MPS): the largest
            milli = np.max(milli, axis=-1)
        need = share_mw(self.node_span_mw[nodes], milli) * req.gpu_count
        head = self.dom_budget_mw[dom] - self.dom_admitted_mw[dom]
        return (dom < 0) | (need <= head)

    def power_message(self, req: PodRequest) -> str | None:
        """Why power blocked `req`, in watts: the domain (among the nodes its other tests
        allow) that comes closest, e.g. 'power domain r3 would draw 27.1 kW of 26.4 kW
        allowed (80 % of 33 kW)'; None when no domain is involved."""
        if not self.has_domains or not req.gpu_count:
            return None
        ok = self._node_mask(req) & (self.node_dom >= 0)
        fits = None
        for reason, mask in self._device_steps(req, slice(None)):
            if reason != "power":
                fits = mask if fits is None else fits & mask
        if fits is not None:
            ok &= fits.sum(axis=1) >= req.gpu_count
        if not ok.any():
            ok = self._node_mask(req) & (self.node_dom >= 0)
            if not ok.any():
                return None
        nodes = np.flatnonzero(ok)
        milli = self._charge_milli(req, nodes)
        if np.ndim(milli) == 2:  # per device: the node's largest
            milli = np.max(milli, axis=1)
        need = share_mw(self.node_span_mw[nodes], milli) * req.gpu_count
        dom = self.node_dom[nodes]
        would = self.dom_admitted_mw[dom] + need
        best = int(np.argmin(would - self.dom_budget_mw[dom]))
        return over_budget_message(self.domains[int(dom[best])], int(would[best]))

    def _domain_add_mw(self, n: int, milli: int, devices: int) -> int:
        return int(share_mw(int(self.node_span_mw[n]), milli)) * devices

    # -- queries ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def used_gpu_milli(self) -> int:
        return self.total_gpu_milli - int(self.gpu_free_total.sum())

    def tenant_id(self, tenant: str) -> int:
        """A small integer per tenant name ("" = -1, no tenant)."""
        if not tenant:
            return -1
        return self._tenant_ids.setdefault(tenant, len(self._tenant_ids))

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

    def selector_mask(self, req: PodRequest) -> np.ndarray:
        """Nodes whose labels carry the request's nodeSelector and match its required node
        affinity (some term)."""
        return self._per_node(("sel", req.node_selector, req.node_affinity),
                              lambda s: selects(req.node_selector, dict(s.labels))
                              and affinity_matches(req.node_affinity, dict(s.labels), s.name))

    def taint_mask(self, req: PodRequest) -> np.ndarray:
        """Nodes whose NoSchedule/NoExecute taints the request tolerates."""
        return self._per_node(("tol", req.tolerations),
                              lambda s: tolerates(req.tolerations, s.taints))

    def has_preferences(self, req: PodRequest) -> bool:
        """True when `preference` may rank nodes for `req`."""
        return bool(req.preferred) or self.has_soft_taints or (
            req.pods is not None and self.pod_filter is not None
            and self.pod_filter.has_scores(req))

    def preference(self, req: PodRequest, nodes: np.ndarray) -> np.ndarray:
        """kube-scheduler's NodeAffinity and TaintToleration scores of `nodes`, each normalized
        to 0..100 over them and weighted as its default profile does (2 and 3): preferred
        node affinity weights summed, and PreferNoSchedule taints the pod does not tolerate
        (fewer is better). Placement adds this to its own 0..100 score."""
        out = np.zeros(len(nodes), dtype=np.int64)
        if req.preferred:
            got = self._per_node_int(("pref", req.preferred), lambda s: preference_weight(
                req.preferred, dict(s.labels), s.name))[nodes]
            top = int(got.max()) if len(got) else 0
            if top > 0:
                out += 2 * (got * 100 // top)
        if self.has_soft_taints:
            bad = self._per_node_int(("prefer-taint", req.tolerations),
                                     lambda s: intolerable_preferences(req.tolerations,
                                                                       s.taints))[nodes]
            top = int(bad.max()) if len(bad) else 0
            out += 3 * (100 - bad * 100 // top if top > 0 else 100)
        if req.pods is not None and self.pod_filter is not None:  # inter-pod scores
            out += self.pod_filter.scores(req, nodes)
        return out

    def _per_node_int(self, key: tuple, value: Callable[[NodeSpec], int]) -> np.ndarray:
        got = self._constraint_masks.get(key)
        if got is None:
            got = np.array([value(s) for s in self.nodes], dtype=np.int64)
            self._constraint_masks[key] = got
        return got

    def _per_node(self, key: tuple, test: Callable[[NodeSpec], bool]) -> np.ndarray:
        """A node mask that never changes (specs are fixed), computed once per key."""
        mask = self._constraint_masks.get(key)
        if mask is None:
            mask = np.array([test(s) for s in self.nodes], dtype=bool)
            self._constraint_masks[key] = mask
        return mask

    def fast_path(self, req: PodRequest) -> bool:
        """True when the per-node summaries answer for `req` (see module doc): every device
        soft, no taints or budgets, no sealed slice live, and a plain request. Policies use it
        to keep the study's exact arithmetic on trace work."""
        return self.plain and self._sealed_pods == 0 and req.is_plain

    def device_fits(self, req: PodRequest, nodes: np.ndarray | int | slice = slice(None)
                    ) -> np.ndarray:
        """Which devices of `nodes` could take `req` on their own: its mode, isolation floor,
        tenant seal, replicas or MIG slices, free milli and GPU memory, and power (whole
        GPUs: fully free devices whose memory is large enough)."""
        if self.fast_path(req):
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
        if isinstance(nodes, int | np.integer):  # one node: its cached row when fresh
            entry = self._fit_cache.get(shape_key(req))
            if entry is not None and entry[2] is not None and \
                    entry[0][nodes] == self.version[nodes]:
                row = entry[2][nodes].copy()
                if self.has_domains and req.gpu_count and not self._domain_node_ok(req, nodes):
                    row[:] = False
                return row
        return self._steps_fit(req, nodes)

    def _steps_fit(self, req: PodRequest, nodes, domains: bool = True) -> np.ndarray:
        fits = None
        for _, mask in self._device_steps(req, nodes, domains):
            fits = mask if fits is None else fits & mask
        assert fits is not None
        if req.nvlink and req.gpu_count > 1 and req.mode is not DeviceMode.MIG:
            fits = self._nvlink_fits(fits, nodes, req.gpu_count)
        return fits

    def room(self, req: PodRequest, fits: np.ndarray, nodes=slice(None)) -> np.ndarray:
        """How many of `req`'s devices each node of `nodes` can take, from its device `fits`:
        fitting devices, or, for several MIG instances, the instances of the profile that
        still fit on them (a device may take more than one)."""
        if req.mode is DeviceMode.MIG and req.gpu_count > 1:
            return np.where(fits, self._mig_capacity(req.mig_profile, nodes), 0).sum(axis=-1)
        return fits.sum(axis=-1)

    def _nvlink_fits(self, fits: np.ndarray, nodes, count: int) -> np.ndarray:
        """`gpugov.io/topology: required`: of the fitting devices, those in an NVLink domain
        with at least `count` fitting devices (a device of unknown domain is in none), so any
        `count` chosen in one such domain never span two."""
        dom = self.dev_nvlink[nodes]
        two = fits.ndim == 2
        f, dom = (fits, dom) if two else (fits[None], dom[None])
        ok = np.zeros_like(f)
        for d in np.unique(dom[dom >= 0]):
            in_d = f & (dom == d)
            ok |= in_d & (in_d.sum(axis=1) >= count)[:, None]
        return ok if two else ok[0]

    def nvlink_domains(self, req: PodRequest, node: int, devices) -> bool:
        """True unless `req` needs one NVLink domain and `devices` of `node` are not in one."""
        if not req.nvlink or len(devices) < 2:
            return True
        dom = {int(self.dev_nvlink[node, d]) for d in devices}
        return len(dom) == 1 and min(dom) >= 0

    def _device_steps(self, req: PodRequest, nodes, domains: bool = True):
        """(reason, device mask) of each device-level test, in `REASONS` order (a test that
        passes every device, e.g. an isolation floor of none, is left out). `domains=False`
        leaves the racks' headroom out: the cached fits do (it changes with every allocation
        in the rack; `feasible` and `device_fits` apply it on top, `_domain_node_ok`)."""
        mode = req.slice_mode
        if mode is DeviceMode.EXCLUSIVE:
            yield "gpu-mode", self._whole_ok[nodes]
        else:
            dm = self._filter_mode[nodes]
            # a time-sliced MIG instance's replica sits on a MIG device
            yield "gpu-mode", dm == (_MIG if req.mig_shared else MODE_CODE[mode])
            if mode is DeviceMode.TIMESLICE and req.oversubscribe:
                # uncapped: delivers none, and never next to a replica that needs soft
                ok = req.min_isolation <= IsolationLevel.NONE
                yield "isolation", (self.dev_needs_soft[nodes] == 0) & ok
            elif req.min_isolation > IsolationLevel.NONE:
                iso = _MODE_ISO[dm] >= int(req.min_isolation)
                if mode is DeviceMode.TIMESLICE:
                    iso &= self.dev_uncapped[nodes] == 0
                if req.mig_shared:  # a capped replica delivers soft, whatever the device
                    iso &= req.min_isolation <= IsolationLevel.SOFT
                yield "isolation", iso
        pods = None
        # a whole GPU takes only a device nobody holds (step `gpu`): a seal adds nothing
        if (req.sealed or self._sealed_pods) and mode is not DeviceMode.EXCLUSIVE:
            tid = self.tenant_id(req.tenant)
            pods = self.dev_pods[nodes]
            if tid >= 0:
                own = self.dev_owner[nodes] == tid
                if req.sealed:
                    yield "tenant-isolation", (pods == 0) | ((self.dev_sealed[nodes] > 0) & own)
                else:
                    yield "tenant-isolation", (self.dev_sealed[nodes] == 0) | own
            elif req.sealed:
                yield "tenant-isolation", pods == 0
            else:
                yield "tenant-isolation", self.dev_sealed[nodes] == 0
        if mode is DeviceMode.MIG:
            yield "mig-slice", self._mig_fits(req.mig_profile, nodes)
        elif req.mig_shared:
            yield from self._mig_shared_fits(req, nodes)
        elif mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
            yield "replicas", self.rep_free[nodes] > 0
            if mode is DeviceMode.MPS:
                cap = np.maximum(self.rep_cap[nodes], 1)
                yield "gpu", req.gpu_milli <= self.gpu_cap[nodes] // cap
                yield "gpu-memory", req.gpu_memory_mib <= self.gpu_mem_cap[nodes] // cap
            elif not req.oversubscribe:
                need = req.gpu_memory_mib if req.gpu_memory_mib else \
                    self.gpu_mem_cap[nodes] // np.maximum(self.rep_cap[nodes], 1)
                yield "gpu-memory", self.gpu_mem_free[nodes] >= need
        elif mode is DeviceMode.EXCLUSIVE:
            yield "gpu", self.gpu_free[nodes] == MILLI_PER_GPU
            if req.gpu_memory_mib:
                yield "gpu-memory", self.gpu_mem_cap[nodes] >= req.gpu_memory_mib
        else:
            yield "gpu", self.gpu_free[nodes] >= req.gpu_milli
            if req.gpu_memory_mib or req.gpu_memory_percent:
                yield "gpu-memory", self.gpu_mem_free[nodes] >= self.memory_need(req, nodes)
        if self.has_power:
            if pods is None:
                pods = self.dev_pods[nodes]
            power = (pods > 0) | (self._power_slots(nodes) >= 1) | (not self.admit_power)
            yield "power", (power & self._domain_fits(req, nodes)
                            if self.has_domains and domains else power)
        elif self.has_domains and domains:
            yield "power", self._domain_fits(req, nodes)

    def _power_slots(self, nodes) -> np.ndarray:
        """How many more devices each node may power up within its budget ([n, 1])."""
        slots = self._slots[nodes]
        return slots.reshape(-1, 1) if np.ndim(slots) else slots

    def _node_slots(self, n: int) -> float:
        """`_count_slots` of one node, in plain floats (the same arithmetic)."""
        budget = float(self.power_budget[n])
        tdp = float(self.dev_tdp[n])
        if math.isinf(budget) or not tdp > 0:
            return math.inf
        return float(math.floor((budget - int(self.busy_gpus[n]) * tdp) / max(tdp, 1e-9)))

    def _count_slots(self, nodes) -> np.ndarray:
        """`_power_slots` from the budgets and busy devices (kept in `_slots` by allocate,
        release and restore)."""
        budget = self.power_budget[nodes]
        tdp = self.dev_tdp[nodes]
        head = budget - self.busy_gpus[nodes] * tdp
        slots = np.where(tdp > 0, np.floor(head / np.maximum(tdp, 1e-9)), np.inf)
        return np.where(np.isinf(budget), np.inf, slots)

    def _mig_fits(self, profile: str, nodes) -> np.ndarray:
        """MIG devices of `nodes` with room for an instance of `profile` at a valid start."""
        free_by_occ, compute, known, layout_bits = self._mig_profile_arrays(profile)
        idx = self.model_idx[nodes]
        occ = self.mig_occ[nodes]
        if np.ndim(occ) == 2:  # several nodes: [nodes, width]
            idx = idx[:, None]
        # a start is free when its slices miss the occupied ones: looked up per occupancy
        dyn = free_by_occ[idx, occ] & (self.mig_compute_free[nodes] >= compute[idx])
        fixed = (self.mig_layout_free[nodes] & layout_bits[idx]) != 0
        return known[idx] & np.where(self.mig_fixed[nodes], fixed, dyn)

    def _mig_shared_fits(self, req: PodRequest, nodes):
        """("replicas", mask), ("gpu-memory", mask): devices of `nodes` with a time-sliced
        instance of the request's profile that has a free replica its capping agrees with
        (an uncapped replica never joins replicas that need soft, nor the other way round),
        and, of those, one with the memory the replica is charged."""
        rep = np.zeros(self.gpu_cap.shape, dtype=bool)
        mem = np.zeros(self.gpu_cap.shape, dtype=bool)
        for (i, d, k), (cap, free, mem_free, uncapped, soft) in self.mig_shared.items():
            pl = mig_table(self.nodes[i].model).placements[k]
            if pl.profile != req.mig_profile or free <= 0:
                continue
            if soft if req.oversubscribe else (
                    uncapped and req.min_isolation > IsolationLevel.NONE):
                continue
            rep[i, d] = True
            mem[i, d] |= mem_free >= self._replica_memory(req, pl.memory_mib, cap)
        yield "replicas", rep[nodes]
        yield "gpu-memory", mem[nodes]

    @staticmethod
    def _replica_memory(req: PodRequest, instance_mib: int, replicas: int) -> int:
        """What one replica of a time-sliced MIG instance is charged (and capped at): the
        memory it names, else the instance's ÷ replicas; nothing when oversubscribing."""
        return 0 if req.oversubscribe else (req.gpu_memory_mib or instance_mib // replicas)

    def _mig_capacity(self, profile: str, nodes) -> np.ndarray:
        """How many more instances of `profile` each MIG device of `nodes` can take."""
        counts, layout_bits = self._mig_count_arrays(profile)
        idx = self.model_idx[nodes]
        occ = self.mig_occ[nodes]
        if np.ndim(occ) == 2:
            idx = idx[:, None]
        comp = np.minimum(self.mig_compute_free[nodes], counts.shape[2] - 1)
        dyn = counts[idx, occ, comp]
        fixed = np.bitwise_count(self.mig_layout_free[nodes] & layout_bits[idx])
        return np.where(self.mig_fixed[nodes], fixed, dyn).astype(np.int64)

    def _mig_count_arrays(self, profile: str):
        """Per GPU model (row -1: no model): for every occupied-slice mask and free compute
        slices, how many instances of `profile` still fit (its placements never partly
        overlap each other, so taking free ones in start order counts the most), and the
        profile's placement numbers as a bitmask (fixed layouts)."""
        key = ("mig-count", profile)
        got = self._constraint_masks.get(key)
        if got is None:
            width = max(g.compute_slices for g in MIG_GEOMETRIES.values()) + 1
            counts = np.zeros((len(self.model_names) + 1, 1 << MEMORY_SLICES, width),
                              dtype=np.int64)
            layout_bits = np.zeros(len(self.model_names) + 1, dtype=np.int64)
            for i, model in enumerate(self.model_names):
                ks = mig_table(model).by_profile.get(profile, ()) if has_mig(model) else ()
                if not ks:
                    continue
                table = mig_table(model)
                pls = sorted((table.placements[k] for k in ks), key=lambda p: p.start)
                per = np.arange(width) // pls[0].compute_slices
                for occ in range(1 << MEMORY_SLICES):
                    taken, n = occ, 0
                    for pl in pls:
                        if not taken & pl.bits:
                            taken, n = taken | pl.bits, n + 1
                    counts[i, occ] = np.minimum(n, per)
                layout_bits[i] = sum(1 << k for k in ks)
            got = (counts, layout_bits)
            self._constraint_masks[key] = got
        return got

    def _mig_profile_arrays(self, profile: str):
        """Per GPU model (row -1: no model): for every occupied-slice mask whether some valid
        start of `profile` is free, the profile's compute slices, whether the model offers it,
        and its placements' numbers as a bitmask (for fixed layouts)."""
        key = ("mig", profile)
        got = self._constraint_masks.get(key)
        if got is None:
            m = len(self.model_names)
            masks = np.arange(1 << MEMORY_SLICES, dtype=np.int64)
            free_by_occ = np.zeros((m + 1, 1 << MEMORY_SLICES), dtype=bool)
            compute = np.zeros(m + 1, dtype=np.int64)
            known = np.zeros(m + 1, dtype=bool)
            layout_bits = np.zeros(m + 1, dtype=np.int64)
            for i, model in enumerate(self.model_names):
                if not has_mig(model):
                    continue
                table = mig_table(model)
                ks = table.by_profile.get(profile, ())
                for k in ks:
                    free_by_occ[i] |= (masks & table.placements[k].bits) == 0
                    layout_bits[i] |= 1 << k
                if ks:
                    known[i] = True
                    compute[i] = table.placements[ks[0]].compute_slices
            got = (free_by_occ, compute, known, layout_bits)
            self._constraint_masks[key] = got
        return got

    def _node_mask(self, req: PodRequest) -> np.ndarray:
        """Node-level tests that never change: GPU model, nodeSelector, taints (cached per
        request shape; read only)."""
        key = ("node", req.models if req.gpu_milli > 0 else None, req.node_selector,
               req.node_affinity, req.tolerations if self.has_taints else ())
        ok = self._constraint_masks.get(key)
        if ok is None:
            ok = self.model_mask(req.models) if req.gpu_milli > 0 else np.ones(len(self), bool)
            if req.node_selector or req.node_affinity:
                ok = ok & self.selector_mask(req)
            if self.has_taints:
                ok = ok & self.taint_mask(req)
            self._constraint_masks[key] = ok
        return ok

    def _gpu_fit(self, req: PodRequest) -> np.ndarray:
        """Nodes with enough GPU room for `req` (milli, and memory when asked)."""
        if not req.gpu_memory_mib:
            if req.gpu_count == 1:
                return self.max_gpu_free >= req.gpu_milli
            return self.full_gpus >= req.gpu_count
        return self.device_fits(req).sum(axis=1) >= req.gpu_count

    def feasible(self, req: PodRequest) -> np.ndarray:
        """Boolean mask of nodes where `req` fits: CPU, memory, GPU model, node constraints
        and, per device, mode, isolation, tenant, MIG slices or replicas, compute, GPU memory
        and power."""
        if self.fast_path(req):
            ok = (self.cpu_free >= req.cpu_milli) & (self.mem_free >= req.memory_mib)
            if req.gpu_milli > 0:
                ok &= self.model_mask(req.models)
                ok &= self._gpu_fit(req)
            return ok
        ok = self._general_entry(req)[1].copy()
        if self.has_domains and req.gpu_count:  # racks' headroom: fresh, never cached
            ok &= self._domain_node_ok(req)
        if req.pods is not None and self.pod_filter is not None:  # inter-pod placement
            ok &= self.pod_filter.mask(req)
        return ok

    def _general_entry(self, req: PodRequest, create: bool = True):
        """(node versions, node mask, device fits or None) of `req`'s shape, refreshed for
        the nodes whose version moved since; None when not cached and not `create`."""
        key = shape_key(req)
        entry = self._fit_cache.get(key)
        if entry is None:
            if not create:
                return None
            mask, fits = self._general_fit(req, np.arange(len(self)))
            entry = (self.version.copy(), mask, fits)
            self._fit_cache[key] = entry
            if len(self._fit_cache) > 512:
                self._fit_cache.pop(next(iter(self._fit_cache)))
            return entry
        versions, mask, fits = entry
        stale = np.flatnonzero(versions != self.version)
        if len(stale):
            mask[stale], fresh = self._general_fit(req, stale)
            if fits is not None:
                fits[stale] = fresh
            versions[stale] = self.version[stale]
        return entry

    def _general_fit(self, req: PodRequest, nodes: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray | None]:
        """Node mask and device fits ([nodes, max_gpus]; None for CPU-only pods)."""
        ok = self._node_mask(req)[nodes]
        ok &= (self.cpu_free[nodes] >= req.cpu_milli) & (self.mem_free[nodes] >= req.memory_mib)
        fits = None
        if req.gpu_count:
            fits = self._steps_fit(req, nodes, domains=False)
            ok &= self.room(req, fits, nodes) >= req.gpu_count
            if self.has_power and req.gpu_count > 1 and req.mode is not DeviceMode.MIG:
                ok &= self._power_slots(nodes)[:, 0] >= req.gpu_count
        return ok, fits

    def failure_reason(self, req: PodRequest) -> str:
        """Why `req` fits nowhere, naming the first constraint no node can satisfy, one of
        `REASONS`: e.g. `gpu-model`, `taint`, `isolation`, `mig-slice`, `gpu` (compute),
        `gpu-memory`, `power`, `cpu` or `memory` (host memory)."""
        if self.fast_path(req):
            return self._fast_failure_reason(req)
        ok = np.ones(len(self), dtype=bool)
        if req.gpu_milli > 0:
            ok &= self.model_mask(req.models)
            if not ok.any():
                return "gpu-model"
        if req.node_selector or req.node_affinity:
            ok &= self.selector_mask(req)
            if not ok.any():
                return "node-selector"
        if self.has_taints:
            ok &= self.taint_mask(req)
            if not ok.any():
                return "taint"
        if req.pods is not None and self.pod_filter is not None and \
                not (ok & self.pod_filter.mask(req)).any():
            return self.pod_filter.reason(req, ok)
        if req.gpu_count:
            if req.mode is not DeviceMode.MIG:  # a device may take several MIG instances
                ok &= self.gpu_count >= req.gpu_count  # too few devices at all: compute
                if not ok.any():
                    return "gpu"
            fits = None
            # several MIG instances: a device counts once until their slices are tested
            slices = req.mode is not DeviceMode.MIG
            for reason, mask in self._device_steps(req, slice(None)):
                fits = mask if fits is None else fits & mask
                slices |= reason == "mig-slice"
                have = self.room(req, fits) if slices else \
                    np.where(fits.any(axis=-1), req.gpu_count, 0)
                if not (ok & (have >= req.gpu_count)).any():
                    return reason
            assert fits is not None
            ok &= self.room(req, fits) >= req.gpu_count
            if self.has_power and req.gpu_count > 1 and req.mode is not DeviceMode.MIG:
                ok &= self._power_slots(slice(None))[:, 0] >= req.gpu_count
                if not ok.any():
                    return "power"
            if req.nvlink and req.gpu_count > 1 and req.mode is not DeviceMode.MIG:
                fits = self._nvlink_fits(fits, slice(None), req.gpu_count)
                ok &= fits.sum(axis=1) >= req.gpu_count
                if not ok.any():
                    return "topology"
        ok &= self.cpu_free >= req.cpu_milli
        if not ok.any():
            return "cpu"
        return "memory"

    def _fast_failure_reason(self, req: PodRequest) -> str:
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

    # -- what a placement charges -------------------------------------------------------------
    def charge(self, req: PodRequest, node: int, device: int, start: int | None = None
               ) -> tuple[int, int]:
        """(milli, GPU memory MiB) a pod of `req` takes from `device` of `node`: a whole GPU
        its device; a MIG instance its profile's share and memory; a time-slice replica
        1/replicas of compute and the memory it names (card/replicas if none, nothing if its
        tenant accepts oversubscription), and a replica of a time-sliced MIG instance (the one
        at `start`, else the one `mig_start` picks) the same out of its instance; an MPS
        client the per-client caps; a soft slice what it asks."""
        mode = req.slice_mode
        if mode is DeviceMode.EXCLUSIVE:
            return MILLI_PER_GPU, int(self.gpu_mem_cap[node, device])
        if mode is DeviceMode.MIG:
            table = mig_table(self.nodes[node].model)
            p = table.geometry.profile(req.mig_profile)
            return table.milli(req.mig_profile), p.memory_mib
        if req.mig_shared:
            table = mig_table(self.nodes[node].model)
            at = self.mig_start(req, node, device) if start is None or start < 0 else start
            cap, inst = self._shared_instance(req, node, device, at)
            return table.milli(req.mig_profile) // cap, self._replica_memory(req, inst, cap)
        if mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
            reps = max(int(self.rep_cap[node, device]), 1)
            milli = MILLI_PER_GPU // reps
            if mode is DeviceMode.MPS:
                return milli, int(self.gpu_mem_cap[node, device]) // reps
            if req.oversubscribe:
                return milli, 0
            return milli, req.gpu_memory_mib or int(self.gpu_mem_cap[node, device]) // reps
        if req.gpu_memory_percent:
            return req.gpu_milli, int(self.memory_need(req, (node, device)))
        return req.gpu_milli, req.gpu_memory_mib

    def memory_need(self, req: PodRequest, where) -> np.ndarray:
        """GPU memory (MiB) `req` needs on each device of `where` (an index into the
        [node, device] arrays): `gpu_memory_mib`, or `gpu_memory_percent` of that device's
        own card (rounded up), so a percentage is a share of the card the pod lands on."""
        if req.gpu_memory_percent:
            cap = self.gpu_mem_cap[where]
            return -((-cap * round(req.gpu_memory_percent * 1000)) // 100_000)
        return np.asarray(req.gpu_memory_mib)

    def mig_start(self, req: PodRequest, node: int, device: int) -> int:
        """The start for a new `req.mig_profile` instance on `device`: on a fixed layout the
        lowest free instance of that profile; on a dynamic device the valid free start that
        leaves the most placements of every profile open (fragmentation-aware, as
        `placement.mig` does: larger profiles weigh more)."""
        table = mig_table(self.nodes[node].model)
        if req.mig_shared:
            return self._shared_start(req, node, device)
        ks = table.by_profile[req.mig_profile]
        if self.mig_fixed[node, device]:
            free = int(self.mig_layout_free[node, device])
            for k in ks:
                if free >> k & 1:
                    return table.placements[k].start
            raise ValueError(f"{req.name}: no free {req.mig_profile} instance on device "
                             f"{device} of {self.names[node]}")
        start = _best_start(self.nodes[node].model, req.mig_profile,
                            int(self.mig_occ[node, device]),
                            int(self.mig_compute_free[node, device]))
        if start < 0:
            raise ValueError(f"{req.name}: no free {req.mig_profile} start on device {device} "
                             f"of {self.names[node]}")
        return start

    def _shared_start(self, req: PodRequest, node: int, device: int) -> int:
        """The time-sliced instance of `req.mig_profile` on `device` whose replica `req`
        takes: of those with a free replica, capping that agrees and the memory, the fullest
        (replicas of one instance are packed), lowest start on ties."""
        table = mig_table(self.nodes[node].model)
        best: tuple[int, int] | None = None
        for k in table.by_profile.get(req.mig_profile, ()):
            e = self.mig_shared.get((node, device, k))
            if e is None or e[1] <= 0 or (e[4] if req.oversubscribe else (
                    e[3] and req.min_isolation > IsolationLevel.NONE)):
                continue
            pl = table.placements[k]
            if e[2] < self._replica_memory(req, pl.memory_mib, e[0]):
                continue
            if best is None or (e[1], pl.start) < best:
                best = (e[1], pl.start)
        if best is None:
            raise ValueError(f"{req.name}: no time-sliced {req.mig_profile} instance with a free "
                             f"replica on device {device} of {self.names[node]}")
        return best[1]

    def _shared_instance(self, req: PodRequest, node: int, device: int, start: int
                         ) -> tuple[int, int]:
        """(replicas, memory MiB) of the time-sliced instance at `start` of `device`."""
        k, e = self._shared_entry(req, node, device, start)
        return e[0], mig_table(self.nodes[node].model).placements[k].memory_mib

    def _shared_entry(self, req: PodRequest, node: int, device: int, start: int
                      ) -> tuple[int, list[int]]:
        """(placement number, `mig_shared` entry) of the time-sliced instance at `start` of
        `device`; ValueError when there is none."""
        try:
            k = mig_table(self.nodes[node].model).number(req.mig_profile, start)
        except KeyError as e:
            raise ValueError(f"{req.name}: {e.args[0]}") from None
        e = self.mig_shared.get((node, device, k))
        if e is None:
            raise ValueError(f"{req.name}: {req.mig_profile}@{start} on device {device} of "
                             f"{self.names[node]} is not a time-sliced instance")
        return k, e

    def mig_instances(self, req: PodRequest, node: int, first: int | None = None
                      ) -> Allocation:
        """The allocation of `req`'s `gpu_count` MIG instances on `node`: instances are taken
        on the device `first` (the policy's choice) while it has room, then on the fitting
        devices already most cut up (whole devices stay whole), each at the start `mig_start`
        would pick."""
        fits = self.device_fits(req, node)
        cands = [int(d) for d in np.flatnonzero(fits)]
        cands.sort(key=lambda d: (d != first, int(self.mig_compute_free[node, d]), d))
        model = self.nodes[node].model
        table = mig_table(model)
        ks = table.by_profile[req.mig_profile]
        occ = {d: int(self.mig_occ[node, d]) for d in cands}
        comp = {d: int(self.mig_compute_free[node, d]) for d in cands}
        lay = {d: int(self.mig_layout_free[node, d]) for d in cands}
        got: list[tuple[int, int]] = []
        for _ in range(req.gpu_count):
            for d in cands:
                if self.mig_fixed[node, d]:
                    k = next((k for k in ks if lay[d] >> k & 1), -1)
                    start = table.placements[k].start if k >= 0 else -1
                else:
                    start = _best_start(model, req.mig_profile, occ[d], comp[d])
                    k = table.number(req.mig_profile, start) if start >= 0 else -1
                if k < 0:
                    continue
                pl = table.placements[k]
                lay[d] &= ~(1 << k)
                occ[d] |= pl.bits
                comp[d] -= pl.compute_slices
                got.append((d, start))
                break
            else:
                raise ValueError(f"{req.name}: {req.gpu_count} × {req.mig_profile} do not fit "
                                 f"on {self.names[node]}")
        got.sort()
        milli, memory = self.charge(req, node, got[0][0])
        return Allocation(node, tuple(d for d, _ in got), milli, memory,
                          mig_starts=tuple(s for _, s in got))

    # -- updates ---------------------------------------------------------------------------
    def allocate(self, req: PodRequest, alloc: Allocation) -> None:
        """Commit `alloc` for `req`; raises if it would overcommit anything or break a
        constraint (mode, isolation, seal, MIG slice, replica, power, node constraint)."""
        n = alloc.node
        if self.cpu_free[n] < req.cpu_milli or self.mem_free[n] < req.memory_mib:
            raise ValueError(f"{req.name}: node {self.names[n]} lacks CPU or memory")
        devs = list(alloc.devices)
        if len(devs) != req.gpu_count or (
                len(set(devs)) != len(devs) and req.mode is not DeviceMode.MIG):
            raise ValueError(f"{req.name}: needs {req.gpu_count} distinct devices, got {devs}")
        fast = self.fast_path(req)
        if not devs and not fast and not self._node_mask(req)[n]:
            raise ValueError(f"{req.name}: node {self.names[n]} breaks the pod's nodeSelector "
                             "or taints")
        if devs:
            if max(devs) >= self.gpu_count[n] or min(devs) < 0:
                raise ValueError(f"{req.name}: devices {devs} are not on {self.names[n]}")
            k = int(self.node_dom[n]) if self.has_domains else -1
            add = self._domain_add_mw(n, alloc.milli, len(devs)) if k >= 0 else 0
            if k >= 0 and self.admit_power and \
                    self.dom_admitted_mw[k] + add > self.dom_budget_mw[k]:
                raise ValueError(f"{req.name}: " + over_budget_message(
                    self.domains[k], int(self.dom_admitted_mw[k] + add)))
            if fast:
                self._allocate_plain(req, alloc, n, devs)
            else:
                self._allocate_general(req, alloc, n, devs)
            if k >= 0:
                self._domain_moved(k, add)
            self.kind_count[n, pod_kind(req)] += 1
            if len(devs) == 1:  # scalar indexing: the trace engine's hot path
                self.dev_pods[n, devs[0]] += 1
            else:
                self.dev_pods[n, devs] += 1
            if self.has_power:
                self.busy_gpus[n] = int((self.dev_pods[n] > 0).sum())
                self._slots[n] = self._node_slots(n)
        self.cpu_free[n] -= req.cpu_milli
        self.mem_free[n] -= req.memory_mib
        self.pod_count[n] += 1
        self._refresh(n)
        if req.pods is not None and self.pod_filter is not None:
            self.pod_filter.moved(req, n, 1)

    def _allocate_plain(self, req: PodRequest, alloc: Allocation, n: int,
                        devs: list[int]) -> None:
        if len(devs) == 1 and alloc.milli < MILLI_PER_GPU:  # a sharing pod: scalar updates
            d = devs[0]
            if self.gpu_free[n, d] < alloc.milli:
                raise ValueError(f"{req.name}: device {d} on {self.names[n]} lacks capacity")
            if alloc.memory_mib:
                if self.gpu_mem_free[n, d] < alloc.memory_mib:
                    raise ValueError(
                        f"{req.name}: device {d} on {self.names[n]} lacks GPU memory")
                self.gpu_mem_free[n, d] -= alloc.memory_mib
            self.gpu_free[n, d] -= alloc.milli
            return
        if (self.gpu_free[n, devs] < alloc.milli).any():
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

    def _allocate_general(self, req: PodRequest, alloc: Allocation, n: int,
                          devs: list[int]) -> None:
        if not self._node_mask(req)[n]:
            raise ValueError(f"{req.name}: node {self.names[n]} breaks the pod's GPU model, "
                             "nodeSelector or taints")
        fits = self.device_fits(req, n)
        if not fits[devs].all():
            raise ValueError(f"{req.name}: devices {devs} on {self.names[n]} cannot take it "
                             f"({self.why_not_device(req, n, devs)})")
        if not self.nvlink_domains(req, n, devs):
            raise ValueError(f"{req.name}: devices {devs} on {self.names[n]} span NVLink "
                             "domains, and the pod needs one (gpugov.io/topology: required)")
        idle = len({d for d in devs if self.dev_pods[n, d] == 0})
        if self.has_power and idle > 1 and self._slots[n] < idle and self.admit_power:
            raise ValueError(f"{req.name}: node {self.names[n]} has no power budget left")
        for d in devs:
            milli, mem = self.charge(req, n, d, alloc.mig_start)
            if (milli, mem) != (alloc.milli, alloc.memory_mib):
                raise ValueError(f"{req.name}: allocation charges {alloc.milli} milli and "
                                 f"{alloc.memory_mib} MiB, the device takes {milli} and {mem}")
        mode = req.slice_mode
        if mode is DeviceMode.MIG:
            self._take_mig(req, alloc, n)
        elif req.mig_shared:
            self._take_replica(req, alloc, n, devs[0], 1)
        elif mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
            self.rep_free[n, devs] -= 1
            self._count_capping(req, n, devs, 1)
        if mode is DeviceMode.EXCLUSIVE:
            self.gpu_mem_free[n, devs] = 0
        elif len(devs) > 1 and mode is DeviceMode.MIG:  # a device may hold several instances
            np.subtract.at(self.gpu_mem_free[n], devs, alloc.memory_mib)
        else:
            self.gpu_mem_free[n, devs] -= alloc.memory_mib
        if len(devs) > 1 and mode is DeviceMode.MIG:
            np.subtract.at(self.gpu_free[n], devs, alloc.milli)
        else:
            self.gpu_free[n, devs] -= alloc.milli
        if _seals(req):
            self.dev_sealed[n, devs] += 1
            self._sealed_pods += 1
        tid = self.tenant_id(req.tenant)
        if req.sealed or tid >= 0:
            empty = self.dev_pods[n, devs] == 0
            self.dev_owner[n, np.array(devs)[empty]] = tid

    def _take_mig(self, req: PodRequest, alloc: Allocation, n: int) -> None:
        """Occupy the MIG instances `alloc` names, after checking all of them (a refusal
        changes nothing)."""
        if not alloc.instances:
            raise ValueError(f"{req.name}: the allocation names no MIG instance start")
        table = mig_table(self.nodes[n].model)
        occ: dict[int, int] = {}
        comp: dict[int, int] = {}
        lay: dict[int, int] = {}
        for d, start in alloc.instances:
            try:
                k = table.number(req.mig_profile, start)
            except KeyError as e:
                raise ValueError(f"{req.name}: {e.args[0]}") from None
            pl = table.placements[k]
            if d not in occ:
                occ[d], comp[d] = int(self.mig_occ[n, d]), int(self.mig_compute_free[n, d])
                lay[d] = int(self.mig_layout_free[n, d])
            if self.mig_fixed[n, d]:
                if not lay[d] >> k & 1:
                    raise ValueError(f"{req.name}: {req.mig_profile}@{start} is not a free "
                                     f"instance of device {d} on {self.names[n]}")
                lay[d] &= ~(1 << k)
            elif occ[d] & pl.bits or comp[d] < pl.compute_slices:
                raise ValueError(f"{req.name}: {req.mig_profile}@{start} overlaps an instance "
                                 f"on device {d} of {self.names[n]}")
            occ[d] |= pl.bits
            comp[d] -= pl.compute_slices
        for d in occ:
            self.mig_occ[n, d], self.mig_compute_free[n, d] = occ[d], comp[d]
            if self.mig_fixed[n, d]:
                self.mig_layout_free[n, d] = lay[d]

    def _take_replica(self, req: PodRequest, alloc: Allocation, n: int, d: int,
                      step: int) -> None:
        """Take (`step` 1) or give back (-1) one replica of the time-sliced MIG instance at
        `alloc.mig_start` of device `d`."""
        table = mig_table(self.nodes[n].model)
        k, e = self._shared_entry(req, n, d, alloc.mig_start)
        if step > 0 and (e[1] <= 0 or e[2] < alloc.memory_mib):
            raise ValueError(f"{req.name}: the time-sliced {req.mig_profile}@{alloc.mig_start} "
                             f"on device {d} of {self.names[n]} has no replica or memory left")
        if step < 0 and (e[1] >= e[0] or e[2] + alloc.memory_mib >
                         table.placements[k].memory_mib):
            raise ValueError(f"{req.name}: release of an allocation that was never made")
        e[1] -= step
        e[2] -= step * alloc.memory_mib
        if req.oversubscribe:
            e[3] += step
        elif req.min_isolation > IsolationLevel.NONE:
            e[4] += step

    def _count_capping(self, req: PodRequest, n: int, devs: list[int], step: int) -> None:
        """Keep `dev_uncapped` / `dev_needs_soft` of a time-slice replica's device."""
        if req.slice_mode is not DeviceMode.TIMESLICE:
            return
        if req.oversubscribe:
            self.dev_uncapped[n, devs] += step
        elif req.min_isolation > IsolationLevel.NONE:
            self.dev_needs_soft[n, devs] += step

    def why_not_device(self, req: PodRequest, n: int, devs: list[int]) -> str:
        """The first device-level test `devs` of node `n` fail for `req`."""
        for reason, mask in self._device_steps(req, np.array([n])):
            if not mask[0][devs].all():
                return reason
        if not self.nvlink_domains(req, n, devs):
            return "topology"
        return "fits"

    def release(self, req: PodRequest, alloc: Allocation) -> None:
        """Undo `allocate` (a pod left or was evicted)."""
        n = alloc.node
        devs = list(alloc.devices)
        if devs:
            if (self.dev_pods[n, devs] <= 0).any():
                raise ValueError(f"{req.name}: release of an allocation that was never made")
            mode = req.slice_mode
            if req.mig_shared:  # checks first: a refused release changes nothing
                self._take_replica(req, alloc, n, devs[0], -1)
            if len(devs) > 1 and mode is DeviceMode.MIG:  # a device may hold several
                np.add.at(self.gpu_free[n], devs, alloc.milli)
                np.add.at(self.gpu_mem_free[n], devs, alloc.memory_mib)
            else:
                self.gpu_free[n, devs] += alloc.milli
            if len(devs) > 1 and mode is DeviceMode.MIG:
                pass
            elif alloc.milli >= MILLI_PER_GPU and mode in (DeviceMode.EXCLUSIVE,
                                                           DeviceMode.SOFT):
                self.gpu_mem_free[n, devs] = self.gpu_mem_cap[n, devs]
            else:
                self.gpu_mem_free[n, devs] += alloc.memory_mib
            if mode is DeviceMode.MIG:
                table = mig_table(self.nodes[n].model)
                for d, start in alloc.instances:
                    k = table.number(req.mig_profile, start)
                    pl = table.placements[k]
                    self.mig_occ[n, d] &= ~pl.bits
                    self.mig_compute_free[n, d] += pl.compute_slices
                    if self.mig_fixed[n, d]:
                        self.mig_layout_free[n, d] |= 1 << k
            elif req.mig_shared:
                pass
            elif mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
                self.rep_free[n, devs] += 1
                self._count_capping(req, n, devs, -1)
            if _seals(req):
                self.dev_sealed[n, devs] -= 1
                self._sealed_pods -= 1
            self.dev_pods[n, devs] -= 1
            if self.has_domains and self.node_dom[n] >= 0:
                self._domain_moved(int(self.node_dom[n]),
                                   -self._domain_add_mw(n, alloc.milli, len(devs)))
            gone = np.array(devs)[self.dev_pods[n, devs] == 0]
            self.dev_owner[n, gone] = -1
            self.kind_count[n, pod_kind(req)] -= 1
            if self.has_power:
                self.busy_gpus[n] = int((self.dev_pods[n] > 0).sum())
                self._slots[n] = self._node_slots(n)
        self.cpu_free[n] += req.cpu_milli
        self.mem_free[n] += req.memory_mib
        self.pod_count[n] -= 1
        if ((self.gpu_free[n] > self.gpu_cap[n]).any() or self.cpu_free[n] > self.cpu_cap[n]
                or (self.gpu_mem_free[n] > self.gpu_mem_cap[n]).any()
                or (self.rep_free[n] > self.rep_cap[n]).any()):
            raise ValueError(f"{req.name}: release of an allocation that was never made")
        self._refresh(n)
        if req.pods is not None and self.pod_filter is not None:
            self.pod_filter.moved(req, n, -1)

    def _domain_moved(self, k: int, add: int) -> None:
        """Charge `add` mW to domain `k`. The other nodes of the rack keep their version:
        the cached fits leave the racks' headroom out (`_device_steps(domains=False)`)."""
        self.dom_admitted_mw[k] += add

    def _refresh(self, n: int) -> None:
        row = self.gpu_free[n].tolist()  # a few devices: Python's sum/count/max beat numpy's
        self.gpu_free_total[n] = sum(row)
        self.full_gpus[n] = row.count(MILLI_PER_GPU)
        self.max_gpu_free[n] = max(row)
        self.version[n] += 1

    # -- snapshots -------------------------------------------------------------------------
    _MUTABLE = ("cpu_free", "mem_free", "gpu_free", "gpu_mem_free", "kind_count", "pod_count",
                "version", "gpu_free_total", "full_gpus", "max_gpu_free", "rep_free",
                "mig_occ", "mig_compute_free", "mig_layout_free", "dev_pods", "dev_sealed",
                "dev_owner", "busy_gpus", "dev_uncapped", "dev_needs_soft",
                "dom_admitted_mw")

    def snapshot(self) -> dict[str, np.ndarray]:
        """A copy of everything allocation changes; `restore` puts it back."""
        snap = {k: getattr(self, k).copy() for k in self._MUTABLE}
        snap["_sealed_pods"] = np.array(self._sealed_pods)
        if self.mig_shared:
            snap["_mig_shared"] = {k: list(v) for k, v in self.mig_shared.items()}
        return snap

    def restore(self, snap: dict[str, np.ndarray]) -> None:
        # Versions must move forward so score caches never mistake restored rows for fresh.
        changed = np.flatnonzero(
            (snap["version"] != self.version) | (snap["gpu_free_total"] != self.gpu_free_total)
        )
        bump = self.version.max() + 1 if len(self) else 0
        for k in self._MUTABLE:
            getattr(self, k)[...] = snap[k]
        self._sealed_pods = int(snap["_sealed_pods"])
        for k, v in snap.get("_mig_shared", {}).items():
            self.mig_shared[k][:] = v
        self.version[changed] = bump
        if self.has_power:
            self._slots = self._count_slots(slice(None))


def _seals(req: PodRequest) -> bool:
    """A sealed pod marks its devices only when it could share them: a whole GPU is never
    shared (it holds all of the device), so a sealed whole-GPU pod leaves the fast path
    open to everyone else."""
    return req.sealed and req.slice_mode is not DeviceMode.EXCLUSIVE


def shape_key(req: PodRequest) -> tuple:
    """Everything of a request the filter reads (not its name)."""
    return (req.cpu_milli, req.memory_mib, req.gpu_count, req.gpu_milli, req.models,
            req.gpu_memory_mib, req.gpu_memory_percent, req.mode, req.mig_profile,
            int(req.min_isolation), req.tenant, req.nvlink, req.node_affinity, req.preferred,
            req.sealed, req.node_selector, req.tolerations, req.oversubscribe)


@cache
def _best_start(model: str, profile: str, occ: int, compute: int) -> int:
    """The valid free start of `profile` on a dynamic MIG device of `model` with occupied
    slices `occ` and `compute` free compute slices that leaves the most placeability (lowest
    start on ties); -1 when none is free."""
    table = mig_table(model)
    best: tuple[float, int] | None = None
    for k in table.by_profile[profile]:
        pl = table.placements[k]
        if occ & pl.bits or pl.compute_slices > compute:
            continue
        after = _placeability(table, occ | pl.bits, compute - pl.compute_slices)
        if best is None or after > best[0]:
            best = (after, pl.start)
    return -1 if best is None else best[1]


def _placeability(table, occ: int, compute_free: int) -> float:
    """Weighted count of free valid starts over all profiles after a change (higher = less
    fragmented; a profile weighs its compute slices, as `placement.mig.default_weights`)."""
    total = 0.0
    for pl in table.placements:
        if not occ & pl.bits and pl.compute_slices <= compute_free:
            total += pl.compute_slices
    return total
