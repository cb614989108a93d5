"""Isolation on mixed nodes: one request onto a node whose GPUs are in different modes.

A node may mix modes across its GPUs (`model/devices.py`): some MIG, some soft, some
time-sliced, some MPS, some whole. A pod must get a slice whose delivered isolation is never
below what it requires — the stronger of its own `isolation` and its tenant's trust-tier floor
(`model.isolation.required_isolation`). Only devices whose mode delivers at least that are
considered; the others are looked at only to say *why not*.

Preference order (the first mode that fits wins), per kind of request:

- **fraction** (soft spellings: `gpumem`, `gpucores`, KAI fractions), starting at the required
  level: `mps`, `timeslice` (none) → `soft` (soft) → `mig`, `exclusive` (hard).
  1. *Weakest sufficient level first.* On a mixed node isolation is the scarce resource: an
     untrusted pod can use nothing but MIG instances and whole devices, so every trusted pod
     put there without need takes room a stricter tenant could not get anywhere else — and the
     weaker modes pack tighter (a soft slice reserves exactly what was asked, replicas share).
  2. *Within a level, the mode that reserves least beyond the request.* MIG rounds up to the
     smallest profile covering compute and memory (a larger covering profile if that one has no
     valid free start); a whole device rounds up to the card. Among the none-level modes MPS
     goes first: its per-client caps bound what a neighbour can take, where a time-slice replica
     only adds to the memory risk.
- **whole** (`nvidia.com/gpu: N`): free exclusive devices, the best-connected set
  (`topology.best_device_set`); a single GPU may also take a full-size MIG instance (7g) when
  no exclusive device is free. Multi-GPU requests never use MIG: MIG disables P2P/NVLink
  between GPU instances, so an all-reduce across them would crawl over host memory.
- **mig** (`nvidia.com/mig-<profile>: N`): only MIG devices, each instance at a valid free
  start chosen by `placement.mig.place_on_gpus` (fragmentation-aware).
- **replica** (`nvidia.com/gpu.shared`): time-slice devices only. A replica has no size, so it
  cannot be upgraded to a soft or hard slice when the tier requires one: it is refused and
  the reason says what to ask for instead.

Pure functions: device states are frozen, a decision returns the node's new devices and
changes nothing else. The request is `model.gpu_request.GpuRequest`, the one request model
the k8s driver translates every spelling into.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpugov.model.catalog import MILLI_PER_GPU, get_model
from gpugov.model.devices import (
    Device,
    DeviceMode,
    DeviceState,
    ExclusiveState,
    MigState,
    MpsState,
    TimesliceState,
)
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import MIN_ISOLATION, IsolationLevel, TrustTier, required_isolation
from gpugov.model.mig import MigGeometry, MigInstance, MigProfile, get_geometry
from gpugov.placement.mig import place_on_gpus
from gpugov.placement.soft import PodType, place_mps, place_soft, place_timeslice
from gpugov.placement.topology import (
    SAME_NVLINK,
    ScoreWeights,
    best_device_set,
    node_score,
    pair_distance,
)

GIB = 1024

# Expected soft-slice demand for the 2-D fragmentation measure (placement/soft.py): an assumed
# mix of notebooks and small/medium inference pods, not measured. Pass your own when known.
DEFAULT_WORKLOAD = (PodType(100, 6 * GIB, 0.4), PodType(250, 12 * GIB, 0.4),
                    PodType(400, 30 * GIB, 0.2))

NONE_MODES = (DeviceMode.MPS, DeviceMode.TIMESLICE)


@dataclass(frozen=True, slots=True)
class Slice:
    """What the pod gets on one device: `milli`/`memory_mib` are what the slice reserves (a
    whole device reserves the card, a MIG instance its profile, a replica what it may touch)."""

    device: int  # Device.index
    mode: DeviceMode
    milli: int
    memory_mib: int
    mig: MigInstance | None = None

    @property
    def isolation(self) -> IsolationLevel:
        return self.mode.isolation


@dataclass(frozen=True, slots=True)
class Placed:
    """A decision: the slices, the node's devices after it, and how far down the preference
    order it had to go (0 = first choice), which `choose_node` compares across nodes."""

    slices: tuple[Slice, ...]
    required: IsolationLevel
    devices: tuple[Device, ...]
    preference: int

    @property
    def isolation(self) -> IsolationLevel:
        """Delivered isolation: the weakest over the slices (all share one mode today)."""
        return min(s.isolation for s in self.slices)

    @property
    def mode(self) -> DeviceMode:
        return self.slices[0].mode


@dataclass(frozen=True, slots=True)
class Refused:
    """Nothing fits. `weaker_had_room`: a device with weaker isolation than required could have
    taken the pod — the refusal is the isolation policy at work, not a full node."""

    reason: str
    required: IsolationLevel
    weaker_had_room: bool = False


Decision = Placed | Refused


def request_kind(request: GpuRequest) -> str:
    """`whole`, `mig`, `replica` or `fraction` (see the module docstring)."""
    if request.mode is DeviceMode.MIG:
        return "mig"
    if request.mode is DeviceMode.TIMESLICE:
        return "replica"
    if request.mode is DeviceMode.EXCLUSIVE and (request.milli or 0) >= MILLI_PER_GPU:
        return "whole"
    return "fraction"


def preference_order(kind: str) -> tuple[DeviceMode, ...]:
    """Every mode a request of this kind could use, best first, before the isolation filter."""
    if kind == "whole":
        return (DeviceMode.EXCLUSIVE, DeviceMode.MIG)
    if kind == "mig":
        return (DeviceMode.MIG,)
    if kind == "replica":
        return (DeviceMode.TIMESLICE,)
    return (*NONE_MODES, DeviceMode.SOFT, DeviceMode.MIG, DeviceMode.EXCLUSIVE)


def memory_on(request: GpuRequest, card_mib: int) -> int | None:
    """Memory the request needs on a card of that size (None = not stated)."""
    if request.memory_mib is not None:
        return request.memory_mib
    if request.memory_percent is not None:
        return math.ceil(card_mib * request.memory_percent / 100)
    return None


def need_on(request: GpuRequest, card_mib: int) -> tuple[int, int]:
    """(milli, MiB) a fractional request needs on a card of that size.

    Memory not stated = the whole card (HAMi's default: without `gpumem` a pod may use all of
    it), so it is never under-counted; compute not stated = the memory share of the card.
    """
    mem = memory_on(request, card_mib)
    mem = card_mib if mem is None else mem
    if request.milli is not None:
        return request.milli, mem
    share = math.ceil(MILLI_PER_GPU * mem / card_mib) if card_mib else MILLI_PER_GPU
    return min(MILLI_PER_GPU, max(1, share)), mem


# --- one function per mode: (slices, {position: new state}) or a short reason -------------

Tried = tuple[list[Slice], dict[int, DeviceState]] | str


@dataclass(frozen=True, slots=True)
class _Ctx:
    devices: Sequence[Device]
    eligible: tuple[int, ...]  # positions of healthy devices of allowed models
    request: GpuRequest
    kind: str
    pod: str
    workload: Sequence[PodType]

    def of_mode(self, mode: DeviceMode) -> list[int]:
        return [k for k in self.eligible if self.devices[k].mode is mode]


def _try_exclusive(c: _Ctx) -> Tried:
    pos = c.of_mode(DeviceMode.EXCLUSIVE)
    if not pos:
        return "no exclusive device"
    count = c.request.count if c.kind == "whole" else 1

    def fits(k: int) -> bool:  # a fraction may ask for more memory than a small card has
        d = c.devices[k]
        return c.kind != "fraction" or need_on(c.request, d.memory_mib)[1] <= d.memory_mib

    free = [k for k in pos if c.devices[k].state == ExclusiveState() and fits(k)]
    if len(free) < count:
        return f"{len(free)} of {len(pos)} free, {count} needed"
    topo = [d.topology for d in c.devices]
    chosen = best_device_set(topo, free, count)
    assert chosen is not None  # len(free) >= count
    if c.request.topology == "required" and count > 1:
        worst = max(pair_distance(topo[a], topo[b]) for a in chosen for b in chosen if a < b)
        if worst > SAME_NVLINK:
            return (f"gpugov.io/topology=required: no {count} free exclusive devices share an "
                    "NVLink domain")
    slices = [Slice(c.devices[k].index, DeviceMode.EXCLUSIVE, MILLI_PER_GPU,
                    c.devices[k].memory_mib) for k in chosen]
    return slices, {k: ExclusiveState(owner=c.pod) for k in chosen}


def _covers(c: _Ctx) -> Callable[[MigGeometry, MigProfile, int], bool]:
    """Which MIG profiles can serve the request on a card (geometry, profile, card MiB)."""
    if c.kind == "mig":
        return lambda g, p, card: p.name == c.request.mig_profile
    if c.kind == "whole":
        return lambda g, p, card: p == g.whole

    def fraction(g: MigGeometry, p: MigProfile, card: int) -> bool:
        milli, mem = need_on(c.request, card)
        if c.request.memory_mib is not None:
            mem_ok = p.memory_mib >= mem
        else:  # "P % of the card" (unstated = 100 %) is that share of the memory slices: a
            # 4g.40gb is half an H100 although it reports 39.5 GiB of the card's 80
            pct = c.request.memory_percent if c.request.memory_percent is not None else 100
            mem_ok = p.memory_slices * 100 >= pct * g.memory_slices
        return p.compute_slices * MILLI_PER_GPU >= milli * g.compute_slices and mem_ok
    return fraction


def _try_mig(c: _Ctx) -> Tried:
    pos = c.of_mode(DeviceMode.MIG)
    if not pos:
        return "no MIG device"
    if c.kind == "whole" and c.request.count > 1:
        return "multi-GPU requests take whole exclusive devices (MIG has no P2P/NVLink)"
    covers = _covers(c)
    # profile name -> (compute share, MiB) and the MIG devices whose model offers it and on
    # which it covers the request; smallest profile first (least rounded-up waste).
    groups: dict[str, tuple[tuple[float, int], list[int]]] = {}
    for k in pos:
        d = c.devices[k]
        g = get_geometry(d.model)
        for p in g.base_profiles():
            if covers(g, p, d.memory_mib):
                size = (p.compute_slices / g.compute_slices, p.memory_mib)
                groups.setdefault(p.name, (size, []))[1].append(k)
    if not groups:
        what = c.request.mig_profile or "the request"
        return f"no MIG profile of these GPUs covers {what}"
    order = sorted(groups.items(), key=lambda kv: (kv[1][0], kv[0]))
    states: dict[int, DeviceState] = {}
    slices: list[Slice] = []
    count = c.request.count if c.kind in ("mig", "whole") else 1
    for _ in range(count):
        for name, (_, ks) in order:
            cur = [states.get(k, c.devices[k].state) for k in ks]
            got = place_on_gpus(cur, name, c.pod)  # type: ignore[arg-type]
            if got is None:
                continue
            i, new = got
            k = ks[i]
            inst = _new_instance(cur[i], new, c.pod)  # type: ignore[arg-type]
            g = get_geometry(new.model)
            p = g.profile(name)
            states[k] = new
            slices.append(Slice(c.devices[k].index, DeviceMode.MIG,
                                MILLI_PER_GPU * p.compute_slices // g.compute_slices,
                                p.memory_mib, inst))
            break
        else:
            names = ", ".join(n for n, _ in order[:3])
            return (f"no valid free start for {names} on {len(pos)} MIG device(s)"
                    + (f" ({len(slices)} of {count} placed)" if slices else ""))
    return slices, states


def _new_instance(before: MigState, after: MigState, owner: str) -> MigInstance:
    """The instance `owner` gained between two states of one GPU."""
    had = {i for i, o in zip(before.instances, before.owners, strict=True) if o == owner}
    gained = [i for i, o in zip(after.instances, after.owners, strict=True)
              if o == owner and i not in had]
    return gained[0]


def _by_need(c: _Ctx, mode: DeviceMode) -> list[tuple[tuple[int, int], list[int]]]:
    """Devices of a mode grouped by what the request needs on them (cards may differ)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for k in c.of_mode(mode):
        groups.setdefault(need_on(c.request, c.devices[k].memory_mib), []).append(k)
    return list(groups.items())


def _try_soft(c: _Ctx) -> Tried:
    groups = _by_need(c, DeviceMode.SOFT)
    if not groups:
        return "no soft device"
    for (milli, mem), ks in groups:
        got = place_soft([c.devices[k].state for k in ks], c.pod, milli, mem,  # type: ignore
                         c.workload)
        if got is not None:
            k = ks[got[0]]
            return [Slice(c.devices[k].index, DeviceMode.SOFT, milli, mem)], {k: got[1]}
    (milli, mem), _ = groups[0]
    return f"none has {milli} milli and {mem} MiB free"


def _try_timeslice(c: _Ctx) -> Tried:
    groups = _by_need(c, DeviceMode.TIMESLICE)
    if not groups:
        return "no time-slice device"
    for (_, mem), ks in groups:
        got = place_timeslice([c.devices[k].state for k in ks], c.pod, mem)  # type: ignore
        if got is not None:
            k = ks[got[0]]
            st: TimesliceState = got[1]
            return ([Slice(c.devices[k].index, DeviceMode.TIMESLICE,
                           MILLI_PER_GPU // st.replicas, mem)], {k: st})
    return "all out of replicas"


def _try_mps(c: _Ctx) -> Tried:
    groups = _by_need(c, DeviceMode.MPS)
    if not groups:
        return "no MPS device"
    for (milli, mem), ks in groups:
        got = place_mps([c.devices[k].state for k in ks], c.pod, milli, mem)  # type: ignore
        if got is not None:
            k = ks[got[0]]
            st: MpsState = got[1]
            return ([Slice(c.devices[k].index, DeviceMode.MPS, st.client_milli,
                           st.client_memory_mib)], {k: st})
    return "no free client slot under the per-client caps"


_TRY: dict[DeviceMode, Callable[[_Ctx], Tried]] = {
    DeviceMode.EXCLUSIVE: _try_exclusive, DeviceMode.MIG: _try_mig, DeviceMode.SOFT: _try_soft,
    DeviceMode.TIMESLICE: _try_timeslice, DeviceMode.MPS: _try_mps,
}


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


def _why_required(request: GpuRequest, tier: TrustTier, required: IsolationLevel) -> str:
    floor = MIN_ISOLATION[tier]
    if request.isolation is not None and request.isolation > floor:
        return f"asked by the pod; tenant tier {tier} needs {floor}"
    return f"tenant tier {tier}"


def place_mixed(devices: Sequence[Device], request: GpuRequest, tier: TrustTier, pod: str,
                workload: Sequence[PodType] = DEFAULT_WORKLOAD) -> Decision:
    """Give `pod` the slice(s) of `request` on this node, never below the required isolation.

    Tries the modes in `preference_order` (weakest sufficient level first, then least
    reserved beyond the request) and returns the first that fits, or a `Refused` whose reason
    says what blocked it — the isolation policy or a lack of room.
    """
    required = required_isolation(request.isolation, tier)
    kind = request_kind(request)
    if kind == "replica" and request.mig_profile:
        return Refused(f"time-sliced MIG instances ({request.mig_profile}.shared) are not "
                       "modelled by mixed placement; ask for the MIG instance itself", required)
    if kind == "fraction" and request.count != 1:
        return Refused("a fractional request takes one device; ask for whole GPUs instead",
                       required)
    eligible = tuple(k for k, d in enumerate(devices)
                     if d.healthy and (not request.models or d.model in request.models))
    if not eligible:
        models = ", ".join(request.models) if request.models else "any"
        return Refused(f"no healthy device of model {models} on this node", required)
    ctx = _Ctx(devices, eligible, request, kind, pod, workload)
    plan = preference_order(kind)
    allowed = [m for m in plan if m.isolation >= required]
    reasons: list[str] = []
    for rank, mode in enumerate(allowed):
        got = _TRY[mode](ctx)
        if isinstance(got, str):
            reasons.append(f"{mode}: {got}")
            continue
        slices, states = got
        new = tuple(replace(d, state=states[k]) if k in states else d
                    for k, d in enumerate(devices))
        return Placed(tuple(slices), required, new, rank)
    weaker = [m for m in plan if m.isolation < required and not isinstance(_TRY[m](ctx), str)]
    why = _why_required(request, tier, required)
    if weaker:
        levels = "/".join(dict.fromkeys(str(m.isolation) for m in weaker))
        msg = (f"needs {required} isolation ({why}); node has room only on "
               f"{'/'.join(weaker)} devices, which deliver {levels}")
        if kind == "replica":
            msg += ("; a time-slice replica has no size to upgrade: ask for nvidia.com/gpumem "
                    "+ nvidia.com/gpucores, a MIG profile, or nvidia.com/gpu: 1")
        return Refused(msg, required, weaker_had_room=True)
    if not allowed:
        return Refused(f"needs {required} isolation ({why}); {describe(request)} is only "
                       f"served by {'/'.join(plan)} devices, which deliver less", required)
    return Refused(f"no room for {describe(request)} at {required} isolation or above: "
                   + "; ".join(reasons), required)


# --- across nodes -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NodeChoice:
    node: str
    placed: Placed
    score: float  # topology.node_score of the chosen devices, 0..100


def choose_node(nodes: Sequence[tuple[str, Sequence[Device]]], request: GpuRequest,
                tier: TrustTier, pod: str, weights: ScoreWeights = ScoreWeights(),
                cpu_numa: int | None = None,
                workload: Sequence[PodType] = DEFAULT_WORKLOAD) -> NodeChoice | Refused:
    """The best node among several mixed-mode nodes, without changing any of them.

    Order: first the preference order of `place_mixed` (a node that can serve the pod at the
    weaker sufficient level, or with less rounding, wins — same reason as on one node), then
    `topology.node_score` (0.5 topology fit + 0.3 NUMA affinity + 0.2 energy by default, see
    `ScoreWeights`), then the order of `nodes` (deterministic ties).
    """
    found: list[tuple[int, str, Placed]] = []  # (order, name, decision)
    refusals: list[tuple[str, Refused]] = []
    for order, (name, devs) in enumerate(nodes):
        got = place_mixed(devs, request, tier, pod, workload)
        if isinstance(got, Refused):
            refusals.append((name, got))
        else:
            found.append((order, name, got))
    if not found:
        required = required_isolation(request.isolation, tier)
        shown = "; ".join(f"{n}: {r.reason}" for n, r in refusals[:3])
        more = f" (+{len(refusals) - 3} more nodes)" if len(refusals) > 3 else ""
        return Refused(shown + more, required,
                       weaker_had_room=any(r.weaker_had_room for _, r in refusals))
    chosen_of: list[list[int]] = []
    for order, _, placed in found:
        at = {d.index: k for k, d in enumerate(nodes[order][1])}
        chosen_of.append([at[s.device] for s in placed.slices])
    ppw = [get_model(nodes[f[0]][1][ch[0]].model).perf_per_watt
           for f, ch in zip(found, chosen_of, strict=True)]
    best_ppw = max((p for p in ppw if p is not None), default=0.0)
    scored = []
    for (order, name, placed), chosen in zip(found, chosen_of, strict=True):
        devs = nodes[order][1]
        model = devs[chosen[0]].model
        score = node_score([d.topology for d in devs], chosen, model, best_ppw, weights,
                           cpu_numa)
        scored.append((placed.preference, -score, order, name, placed))
    pref, neg, _, name, placed = min(scored, key=lambda t: t[:3])
    return NodeChoice(name, placed, -neg)
