"""One validated GPU request, whatever spelling it came in (see `k8s.resources`).

Pure data shared by the drivers that translate requests and the placement that serves them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpugov.model.catalog import CATALOG, MILLI_PER_GPU
from gpugov.model.constraints import Toleration
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel, TrustTier, required_isolation
from gpugov.model.mig import get_geometry, models_with_profile
from gpugov.model.request import PodRequest


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What one container asks for, whatever the spelling. Per-device values: a soft slice
    with `count` N is that slice on each of N distinct devices of one node (HAMi's
    `nvidia.com/gpu: N` with `gpumem`/`gpucores`, KAI's `gpu-fraction-num-devices`).

    `milli` None = compute not stated (a memory-only soft slice, HAMi's `defaultCores: 0`):
    it has no compute limit and shares the device's time; `to_pod_request` charges placement
    and quotas the memory's share of the card as its compute (docs/migration.md).
    `memory_percent` is a share of the card the pod lands on, resolved per candidate device
    by the state (`PodRequest.gpu_memory_percent`), never of one card for the whole fleet.
    `isolation` is the minimum the pod asked for; None = let the tenant's trust tier decide
    (`model.isolation.required_isolation`). `priority` is HAMi's task priority (0 high,
    1 low; None = not stated), carried to the node for the in-GPU mechanism.
    """

    count: int
    mode: DeviceMode
    milli: int | None = MILLI_PER_GPU
    memory_mib: int | None = None
    memory_percent: float | None = None
    mig_profile: str | None = None
    models: tuple[str, ...] = ()
    isolation: IsolationLevel | None = None
    topology: str = "preferred"
    spellings: tuple[str, ...] = ()
    priority: int | None = None

    @property
    def delivered_isolation(self) -> IsolationLevel:
        return self.mode.isolation

    def memory_on(self, card_memory_mib: int) -> int | None:
        """GPU memory (MiB) this request needs on each device of a card with
        `card_memory_mib` MiB: `memory_mib` when stated, else `memory_percent` of that card,
        else None (the request names no memory)."""
        if self.memory_mib is not None:
            return self.memory_mib
        if self.memory_percent is not None:
            return math.ceil(card_memory_mib * self.memory_percent / 100)
        return None

    def to_pod_request(self, name: str, cpu_milli: int = 0, memory_mib: int = 0,
                       card_memory_mib: int | None = None, *, modes: bool = False,
                       tier: TrustTier | None = None, tenant: str = "",
                       node_selector: tuple[tuple[str, str], ...] = (),
                       tolerations: tuple[Toleration, ...] = (),
                       oversubscribe: bool = False) -> PodRequest:
        """The engine's request: compute share per device and GPU memory per device.

        `gpu_memory_mib` is the MiB the request names (0 otherwise, and for MIG, whose
        profile fixes the memory), so the state only places it on devices with that much
        free memory; a soft slice's `memory_percent` becomes `gpu_memory_percent`, which the
        state resolves on each candidate device's own card. A memory-only slice (`milli`
        None) is charged the memory's share as its compute, for packing and quotas: the
        percentage itself, or MiB over `card_memory_mib` (default: the largest card in the
        catalog), a lower bound on smaller cards.

        With `modes` (a state whose devices have modes: the replay) the request is compiled in
        full (`compile_modes`): slice mode, MIG profile, isolation floor from the request and
        the tenant's trust `tier`, the seal of an untrusted tenant, the node constraints.
        Without it, every request is a whole GPU or a soft slice (the milli-only engine's view,
        what a state of all-soft devices serves).
        """
        card = card_memory_mib or largest_card_mib()
        need = self.memory_on(card)
        milli = self.milli
        if milli is None and self.memory_mib is None and self.memory_percent is not None:
            milli = min(MILLI_PER_GPU, max(1, math.ceil(self.memory_percent * 10)))
        elif milli is None:
            milli = min(MILLI_PER_GPU, max(1, math.ceil(MILLI_PER_GPU * (need or card) / card)))
        if self.mode is DeviceMode.MIG and self.mig_profile:
            milli = mig_milli(self.mig_profile, self.models)
            need = None
        if not modes:
            return PodRequest(name, cpu_milli, memory_mib, self.count, milli, self.models,
                              **self._memory_fields(need, milli))
        return self.compile_modes(name, cpu_milli, memory_mib, milli, int(need or 0), tier,
                                  tenant, node_selector, tolerations, oversubscribe)

    def _memory_fields(self, need: int | None, milli: int) -> dict:
        """PodRequest's per-device memory (a percentage stays a percentage, resolved per
        device by the state) and mode (N soft slices say so)."""
        out: dict = {}
        if self.memory_mib is None and self.memory_percent is not None:
            # a whole card (or a MIG profile) holds its memory: no share to resolve
            if milli < MILLI_PER_GPU and self.mode is DeviceMode.SOFT:
                out["gpu_memory_percent"] = float(self.memory_percent)
        else:
            out["gpu_memory_mib"] = int(need or 0)
        if self.count > 1 and milli < MILLI_PER_GPU:
            out["mode"] = DeviceMode.SOFT
        return out

    def compile_modes(self, name: str, cpu_milli: int, memory_mib: int, milli: int, need: int,
                      tier: TrustTier | None, tenant: str,
                      node_selector: tuple[tuple[str, str], ...],
                      tolerations: tuple[Toleration, ...], oversubscribe: bool) -> PodRequest:
        """`to_pod_request` with modes (see there). The isolation floor is
        `required_isolation(isolation, tier)` (the request's own ask without a tier); the mode
        is kept even when it delivers less (a soft slice or time-slice replica of a tenant
        whose tier needs more): placement then refuses it with reason `isolation`, as the
        webhook refuses such a pod, rather than widening it. An untrusted tenant's pod is
        sealed: it never shares a device with another tenant. A time-slice replica (and an
        MPS client that states no compute) asks for 1 milli, a lower bound: the state charges
        it 1000/replicas of the device it lands on. Several MIG instances are `count`
        instances of the profile (a device may hold more than one); a time-slice replica of a
        MIG instance (`mig-<profile>.shared`) is a `timeslice` request naming the profile,
        charged like a time-slice replica out of its instance."""
        floor = (required_isolation(self.isolation, tier) if tier is not None
                 else self.isolation or IsolationLevel.NONE)
        # `topology: required` is the state's NVLink filter (reason `topology`); a Tenant's
        # oversubscription uncaps only its time-slice replicas that need no isolation (the
        # scheduler's rule, k8s.scheduler.translate)
        common = dict(models=self.models, min_isolation=floor, tenant=tenant,
                      sealed=tier is TrustTier.UNTRUSTED, node_selector=node_selector,
                      tolerations=tolerations, nvlink=self.topology == "required",
                      oversubscribe=oversubscribe and self.mode is DeviceMode.TIMESLICE
                      and floor == IsolationLevel.NONE)
        mode = self.mode
        if mode is DeviceMode.MIG:
            return PodRequest(name, cpu_milli, memory_mib, self.count, milli,
                              mode=DeviceMode.MIG, mig_profile=str(self.mig_profile), **common)
        if mode is DeviceMode.TIMESLICE and self.mig_profile:
            return PodRequest(name, cpu_milli, memory_mib, 1, 1, mode=mode,
                              mig_profile=self.mig_profile, gpu_memory_mib=need, **common)
        if mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
            # the state charges a replica 1000/replicas whatever this says; the milli asked is
            # only the lower bound the control plane's capacity and quota checks start from
            ask = self.milli if mode is DeviceMode.MPS and self.milli is not None else 1
            return PodRequest(name, cpu_milli, memory_mib, 1, ask, mode=mode,
                              gpu_memory_mib=need, **common)
        return PodRequest(name, cpu_milli, memory_mib, self.count, milli,
                          **self._memory_fields(need, milli), **common)


def largest_card_mib() -> int:
    """Memory of the largest card in the catalog (the default card for memory shares)."""
    return max(m.memory_mib or 0 for m in CATALOG.values())


def mig_milli(profile: str, models: tuple[str, ...]) -> int:
    """Compute share of a MIG profile: its compute slices over the GPU's."""
    candidates = [m for m in models_with_profile(profile) if not models or m in models]
    g = get_geometry(candidates[0])
    return MILLI_PER_GPU * g.profile(profile).compute_slices // g.compute_slices
