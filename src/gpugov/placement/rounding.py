"""Rounding a request up to a stronger mode when its tenant's trust tier needs it.

The engine never rounds: a `PodRequest` names one kind of slice (`mode`) and `Placer` places
exactly that, on devices of that mode, never below `min_isolation`. A driver that wants a
request served "however the fleet can, at the isolation the tenant needs" compiles the
request's acceptable forms and tries them in order against the one `ClusterState`:

- **fraction** (`gpumem`, `gpucores`, KAI fractions): `mps` (isolation none) → `soft`, then
  a `timeslice` replica capped at the fraction's memory (both soft; an oversubscribing
  tenant's replica is not capped: none) → `mig` (the smallest profile covering its compute
  and memory, then larger ones) → `exclusive` (a whole GPU; hard). Only forms whose
  isolation meets the required level are tried, weakest level first.
  1. *Weakest sufficient level first.* On a mixed fleet isolation is the scarce resource: an
     untrusted pod can use nothing but MIG instances and whole devices, so a trusted pod put
     there without need takes room a stricter tenant could not get anywhere else; the weaker
     modes also pack tighter.
  2. *Within a level, the form that reserves least beyond the request.* MIG rounds up to a
     covering profile, a whole device to the card; a soft slice goes before a time-slice
     replica because it also enforces the compute share (a replica's compute is whatever
     the driver's time-slicing gives it).
- **whole** (`nvidia.com/gpu: N`): N whole GPUs; one GPU may instead take a full-size MIG
  instance (7g) when no whole device is free. Multi-GPU requests never use MIG (no
  P2P/NVLink between GPU instances); their devices are the best-connected fitting set
  (`topology.best_device_set`), and `gpugov.io/topology: required` refuses a set that spans
  NVLink domains.
- **mig** (`nvidia.com/mig-<profile>: 1`): that profile only.
- **replica** (`nvidia.com/gpu.shared`): a time-slice replica only; it has no size, so it is
  never upgraded, and a refusal says what to ask for instead.

A fraction that states no memory counts the whole card (HAMi's default: without `gpumem` a pod
may use all of it), so it is never under-counted; shares of "the card" are of the largest card
the request may land on. The first form that fits anywhere wins; the node among those is the
policy's choice. `place_rounded` decides without changing the state; the caller commits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import ClusterState
from gpugov.model.devices import DeviceMode
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import MIN_ISOLATION, IsolationLevel, TrustTier, required_isolation
from gpugov.model.mig import MigGeometry, MigProfile
from gpugov.model.mig_table import has_mig, mig_table
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.engine import Placer, allocation_for
from gpugov.placement.topology import SAME_NVLINK, best_device_set, pair_distance


def request_kind(request: GpuRequest) -> str:
    """`whole`, `mig`, `replica` or `fraction` (see the module docstring)."""
    if request.mode is DeviceMode.MIG:
        return "mig"
    if request.mode is DeviceMode.TIMESLICE:
        return "replica"
    if request.mode is DeviceMode.EXCLUSIVE and (request.milli or 0) >= MILLI_PER_GPU:
        return "whole"
    return "fraction"


def need_on(request: GpuRequest, card_mib: int) -> tuple[int, int]:
    """(milli, MiB) a fractional request needs on a card of that size: memory not stated =
    the whole card; compute not stated = the memory's share of the card."""
    mem = request.memory_on(card_mib)
    mem = card_mib if mem is None else mem
    if request.milli is not None:
        return request.milli, mem
    share = math.ceil(MILLI_PER_GPU * mem / card_mib) if card_mib else MILLI_PER_GPU
    return min(MILLI_PER_GPU, max(1, share)), mem


def covering_profiles(geometry: MigGeometry, milli: int, memory_mib: int | None = None,
                      memory_percent: float | None = None) -> list[MigProfile]:
    """Base profiles with at least `milli` of compute and the memory asked, smallest first.

    Memory is `memory_mib` when given, else `memory_percent` of the card (unstated: all of
    it) as that share of the memory slices — a 4g.40gb is half an H100 although it reports
    39.5 GiB of the card's 80."""
    def covers(p: MigProfile) -> bool:
        if p.compute_slices * MILLI_PER_GPU < milli * geometry.compute_slices:
            return False
        if memory_mib is not None:
            return p.memory_mib >= memory_mib
        pct = 100.0 if memory_percent is None else memory_percent
        return p.memory_slices * 100 >= pct * geometry.memory_slices
    return sorted((p for p in geometry.base_profiles() if covers(p)),
                  key=lambda p: (p.compute_slices, p.memory_slices, p.name))


def _card_mib(state: ClusterState, models: tuple[str, ...]) -> int:
    """Memory of the largest card among nodes of `models` (any model when empty)."""
    mask = state.model_mask(models)
    caps = state.gpu_mem_cap[mask]
    return int(caps.max()) if caps.size else 0


def compiled_forms(request: GpuRequest, name: str, state: ClusterState, *,
                   min_isolation: IsolationLevel = IsolationLevel.NONE, tenant: str = "",
                   sealed: bool = False, oversubscribe: bool = False, cpu_milli: int = 0,
                   memory_mib: int = 0) -> list[PodRequest]:
    """Every form `request` may take on this fleet, best first, before the isolation filter
    (see the module docstring). Empty when the request cannot be expressed at all."""
    kind = request_kind(request)
    base = PodRequest(name, cpu_milli, memory_mib, 1, MILLI_PER_GPU, request.models,
                      min_isolation=min_isolation, tenant=tenant, sealed=sealed,
                      oversubscribe=oversubscribe, nvlink=request.topology == "required")
    mig_models = [m for m in state.model_names if has_mig(m)
                  and (not request.models or m in request.models)]

    def mig_forms(pick: Callable[[MigGeometry], Iterable[MigProfile]]) -> list[PodRequest]:
        """One form per profile `pick` offers on the fleet's MIG models, smallest first."""
        found: dict[str, tuple[tuple, list[str], int]] = {}
        for m in mig_models:
            table = mig_table(m)
            for p in pick(table.geometry):
                if p.name not in table.by_profile:
                    continue
                size = (p.compute_slices / table.geometry.compute_slices, p.memory_mib, p.name)
                found.setdefault(p.name, (size, [], table.milli(p.name)))[1].append(m)
        return [replace(base, gpu_milli=milli, models=tuple(ms), mode=DeviceMode.MIG,
                        mig_profile=pname)
                for pname, (_, ms, milli) in sorted(found.items(), key=lambda kv: kv[1][0])]

    if kind == "mig":  # `count` instances of the profile (a GPU may hold several)
        return [replace(f, gpu_count=request.count) for f in mig_forms(
            lambda g: [g.profile(request.mig_profile)]
            if request.mig_profile in g.profile_names() else [])]
    if kind == "replica" and request.mig_profile:  # a replica of a time-sliced instance
        return [replace(f, gpu_milli=1, gpu_memory_mib=request.memory_mib or 0,
                        mode=DeviceMode.TIMESLICE) for f in mig_forms(
            lambda g: [g.profile(request.mig_profile)]
            if request.mig_profile in g.profile_names() else [])]
    if kind == "whole":
        need = request.memory_on(_card_mib(state, request.models)) or 0
        forms = [replace(base, gpu_count=request.count, gpu_memory_mib=need,
                         mode=DeviceMode.EXCLUSIVE)]
        if request.count == 1:
            forms += mig_forms(lambda g: [g.whole])
        return forms
    if request.count != 1:
        return []
    milli, mem = need_on(request, _card_mib(state, request.models))
    if kind == "replica":
        return [replace(base, gpu_milli=milli, gpu_memory_mib=mem, mode=DeviceMode.TIMESLICE)]
    forms = [replace(base, gpu_milli=milli, gpu_memory_mib=mem, mode=m)
             for m in (DeviceMode.MPS, DeviceMode.SOFT, DeviceMode.TIMESLICE)]
    forms.sort(key=delivered)  # stable: weakest level first, the order above within one
    forms += mig_forms(lambda g: covering_profiles(g, milli, request.memory_mib,
                                                   request.memory_percent))
    forms.append(replace(base, gpu_memory_mib=mem, mode=DeviceMode.EXCLUSIVE))
    return forms


def delivered(form: PodRequest) -> IsolationLevel:
    """Isolation a form delivers: its mode's, none for an oversubscribing (uncapped)
    time-slice replica."""
    if form.slice_mode is DeviceMode.TIMESLICE and form.oversubscribe:
        return IsolationLevel.NONE
    return form.slice_mode.isolation


def describe(request: GpuRequest) -> str:
    """Short human shape of a request, for reasons: `4 whole GPUs`, `1 × 250m/12288 MiB`."""
    kind = request_kind(request)
    if kind == "whole":
        return f"{request.count} whole GPU{'s' if request.count > 1 else ''}"
    if kind == "mig":
        return f"{request.count} × MIG {request.mig_profile}"
    if kind == "replica":
        return "1 time-slice replica"
    mem = (f"{request.memory_mib} MiB" if request.memory_mib is not None
           else f"{request.memory_percent:g}% memory" if request.memory_percent is not None
           else "whole-card memory")
    milli = "memory share" if request.milli is None else f"{request.milli}m"
    return f"1 × {milli}/{mem}"


@dataclass(frozen=True, slots=True)
class Rounded:
    """The outcome: the form that fit and where, or why nothing did.

    `rank` is how far down the acceptable forms it had to go (0 = first choice).
    `weaker_had_room`: a form with weaker isolation than required would have fit — the refusal
    is the isolation policy at work, not a full fleet."""

    required: IsolationLevel
    request: PodRequest | None = None
    allocation: Allocation | None = None
    rank: int = -1
    reason: str = ""
    weaker_had_room: bool = False

    @property
    def placed(self) -> bool:
        return self.allocation is not None

    @property
    def isolation(self) -> IsolationLevel:
        """Isolation delivered (a whole device and a MIG instance are hard)."""
        assert self.request is not None
        return delivered(self.request)


def place_rounded(placer: Placer, request: GpuRequest, name: str, tier: TrustTier, *,
                  tenant: str = "", oversubscribe: bool = False, cpu_milli: int = 0,
                  memory_mib: int = 0, exclude: np.ndarray | None = None) -> Rounded:
    """The first acceptable form of `request` that fits `placer.state`, never below the
    isolation its request and tier require; untrusted tenants' pods are sealed (never share a
    device with another tenant). Does not change the state: commit `allocation` for `request`
    with `placer.state.allocate`."""
    state = placer.state
    required = required_isolation(request.isolation, tier)
    forms = compiled_forms(request, name, state, min_isolation=required, tenant=tenant,
                           sealed=tier is TrustTier.UNTRUSTED, oversubscribe=oversubscribe,
                           cpu_milli=cpu_milli, memory_mib=memory_mib)
    if not forms:
        return Rounded(required, reason=_inexpressible(request))
    allowed = [f for f in forms if delivered(f) >= required]
    reasons: dict[str, str] = {}
    for rank, form in enumerate(allowed):
        got = _decide(placer, form, request.topology == "required", exclude)
        if isinstance(got, Allocation):
            return Rounded(required, form, got, rank)
        reasons.setdefault(str(form.slice_mode), got)
    weaker = [f for f in forms if delivered(f) < required
              and _fits_somewhere(state, replace(f, min_isolation=IsolationLevel.NONE), exclude)]
    why = _why_required(request, tier)
    if weaker:
        modes = "/".join(dict.fromkeys(str(f.slice_mode) for f in weaker))
        levels = "/".join(dict.fromkeys(str(delivered(f)) for f in weaker))
        msg = (f"needs {required} isolation ({why}); room only on {modes} devices, which "
               f"deliver {levels}")
        if request_kind(request) == "replica":
            msg += ("; a time-slice replica has no size to upgrade: ask for nvidia.com/gpumem "
                    "+ nvidia.com/gpucores, a MIG profile, or nvidia.com/gpu: 1")
        return Rounded(required, reason=msg, weaker_had_room=True)
    if not allowed:
        served = "/".join(dict.fromkeys(str(f.slice_mode) for f in forms))
        return Rounded(required, reason=f"needs {required} isolation ({why}); "
                       f"{describe(request)} is only served by {served} devices, which "
                       "deliver less")
    return Rounded(required, reason=f"no room for {describe(request)} at {required} isolation "
                   "or above: " + "; ".join(f"{m}: {r}" for m, r in reasons.items()))


def _decide(placer: Placer, form: PodRequest, nvlink_required: bool,
            exclude: np.ndarray | None) -> Allocation | str:
    """An allocation of `form`, or the state's reason (`model.cluster.REASONS`). Multi-GPU
    whole forms take the best-connected fitting devices of the chosen node; with
    `nvlink_required`, nodes whose best set spans NVLink domains are passed over."""
    state = placer.state
    held = np.zeros(len(state), bool) if exclude is None else exclude
    split = np.zeros(len(state), bool)  # nodes passed over: their best set spans domains
    while True:
        d = placer.decide(form, held | split if split.any() else exclude)
        if d.allocation is None:
            if d.reason == "topology" or (
                    split.any() and not (state.feasible(form) & ~held & ~split).any()):
                return "no free devices inside one NVLink domain (gpugov.io/topology=required)"
            return d.reason
        node = d.allocation.node
        topo = state.nodes[node].topology
        if form.gpu_count < 2 or not topo:
            return d.allocation
        free = [int(i) for i in np.flatnonzero(state.device_fits(form, node))]
        chosen = best_device_set(topo, free, form.gpu_count)
        assert chosen is not None  # the node is feasible: enough devices fit
        worst = max(pair_distance(topo[a], topo[b]) for a in chosen for b in chosen if a < b)
        if not nvlink_required or worst <= SAME_NVLINK:
            return allocation_for(state, form, node, chosen)
        split[node] = True


def _fits_somewhere(state: ClusterState, form: PodRequest, exclude: np.ndarray | None) -> bool:
    ok = state.feasible(form)
    return bool((ok if exclude is None else ok & ~exclude).any())


def _why_required(request: GpuRequest, tier: TrustTier) -> str:
    floor = MIN_ISOLATION[tier]
    if request.isolation is not None and request.isolation > floor:
        return f"asked by the pod; tenant tier {tier} needs {floor}"
    return f"tenant tier {tier}"


def _inexpressible(request: GpuRequest) -> str:
    kind = request_kind(request)
    if kind == "mig" or (kind == "replica" and request.mig_profile):
        return (f"no GPU model of this fleet offers MIG profile {request.mig_profile}; ask for "
                "a profile its MIG GPUs have")
    return "a fractional request takes one device; ask for whole GPUs instead"
