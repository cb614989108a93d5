"""The same workload on the same cluster, cut five ways: whole GPUs, MIG, soft slices,
time-slices, MPS. What each mode allocates, what isolation it delivers, and what it wastes.

Workload: a seeded mix of notebook, inference, fine-tune and multi-GPU training pods, each with a
compute share (milli) *and* the GPU memory it will touch (the openb trace has no GPU memory, so
the mix is generated; see docs/gpus-and-modes.md). Every cluster is one `ClusterState` whose
devices are all in one mode (`NodeSpec.devices`); each pod is compiled to the `PodRequest` that
mode serves (`compile_for`) and placed by the engine (`Placer`, BestFit by default) in a seeded
order. Multi-GPU pods ask for whole GPUs, which only soft and exclusive devices give: MIG
instances have no P2P/NVLink between them, and time-slicing and MPS hand out one replica per
device (the NVIDIA plugin's `failRequestsGreaterThanOne`), so on those clusters they are
refused and counted under the engine's reason (`gpu-mode`).

Metrics, per mode:
- pods placed and requested compute placed (share of the cluster's GPUs); refusals by reason;
- isolation delivered (`hard`, `soft`, `none`);
- stranded memory: memory of GPUs that host at least one pod, claimed by no pod (a whole GPU
  given to a 6 GiB notebook strands the rest);
- MIG idle compute slices on GPUs in MIG mode that host an instance;
- time-slice memory risk: per GPU, memory the co-located pods may touch / card memory; the
  worst GPU and the share of GPUs above 1.0 (they can OOM each other: nothing enforces it).
  `timeslice` is what the NVIDIA plugin does (replicas counted, memory not: the tenant has
  opted in to oversubscription); `timeslice-capped` is gpugov's default, where a replica is
  charged the memory it names, so the risk never exceeds 1.

`gpugov modes --mixed`: a pool whose GPUs mix the modes and tenants of the three trust tiers;
each pod is served through `placement.rounding.place_rounded` (weakest sufficient isolation
first, least rounded-up form), never below its tier's floor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU, get_model
from gpugov.model.cluster import ClusterState, NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode, hgx_topology
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import MIN_ISOLATION, IsolationLevel, TrustTier
from gpugov.model.mig import get_geometry
from gpugov.model.request import PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import get_policy
from gpugov.placement.rounding import covering_profiles, place_rounded

GIB = 1024
#: host CPU and memory of every generated node: enough that only GPUs decide.
NODE_CPU_MILLI = 256_000
NODE_MEMORY_MIB = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Pod:
    name: str
    count: int  # devices; > 1 means whole GPUs
    milli: int  # per device
    memory_mib: int  # per device


# (kind, milli, memory GiB, devices, share of pods) — an assumed mix, not measured
WORKLOAD_MIX = (
    ("notebook", 100, 6, 1, 0.25),
    ("inference-small", 250, 12, 1, 0.25),
    ("inference-medium", 400, 30, 1, 0.15),
    ("fine-tune", 1000, 60, 1, 0.20),
    ("train-4gpu", 1000, 70, 4, 0.10),
    ("train-8gpu", 1000, 75, 8, 0.05),
)


def generate_workload(n_pods: int, seed: int = 0) -> list[Pod]:
    """Seeded pods from WORKLOAD_MIX; memory jittered ±25 %."""
    rng = np.random.default_rng(seed)
    shares = np.array([m[4] for m in WORKLOAD_MIX])
    kinds = rng.choice(len(WORKLOAD_MIX), size=n_pods, p=shares / shares.sum())
    jitter = rng.uniform(0.75, 1.25, size=n_pods)
    pods = []
    for i, (k, j) in enumerate(zip(kinds, jitter, strict=True)):
        kind, milli, gib, count, _ = WORKLOAD_MIX[k]
        pods.append(Pod(f"{kind}-{i}", count, milli, int(gib * GIB * j)))
    return pods


@dataclass(frozen=True, slots=True)
class ModeResult:
    mode: str
    isolation: IsolationLevel
    pods_placed: int
    pods_total: int
    compute_placed: float  # share of cluster GPUs' compute given to placed pods' requests
    stranded_memory: float  # share of memory on occupied GPUs claimed by no pod
    mig_idle_slices: int | None
    ts_max_risk: float | None
    ts_overcommitted: float | None  # share of time-sliced GPUs with risk > 1
    #: refused pods by the engine's reason (`model.cluster.REASONS`)
    refused: dict[str, int] = field(default_factory=dict)


#: accepted ranges of `gpugov modes` options (inclusive)
LIMITS = {"pod-count": (1, 1_000_000), "node-count": (1, 100_000), "seed": (0, 2**32 - 1),
          "replicas": (2, 64)}


def mode_nodes(mode: DeviceMode, nodes: int, gpus_per_node: int, model: str,
               replicas: int) -> list[NodeSpec]:
    """`nodes` nodes of `gpus_per_node` `model` GPUs, every device in `mode` (dynamic MIG)."""
    cfg = DeviceConfig(mode, replicas if mode in (DeviceMode.TIMESLICE, DeviceMode.MPS) else 1)
    topo = hgx_topology(gpus_per_node)
    return [NodeSpec(f"{mode.value}-{i}", NODE_CPU_MILLI, NODE_MEMORY_MIB, gpus_per_node, model,
                     devices=(cfg,) * gpus_per_node, topology=topo) for i in range(nodes)]


def compile_for(mode: DeviceMode, pod: Pod, model: str, oversubscribe: bool = True
                ) -> PodRequest:
    """The request `pod` becomes on a cluster whose devices are all in `mode`: whole GPUs
    for multi-GPU pods (and for every pod on exclusive devices); on MIG the smallest profile
    with enough compute and memory (the whole-GPU profile if none); a soft slice; one
    time-slice replica (charged the memory it names unless `oversubscribe`); an MPS client."""
    whole = PodRequest(pod.name, 0, 0, pod.count, MILLI_PER_GPU, mode=DeviceMode.EXCLUSIVE)
    if pod.count > 1 or mode is DeviceMode.EXCLUSIVE:
        return whole
    milli = min(pod.milli, MILLI_PER_GPU)
    if mode is DeviceMode.MIG:
        profile, profile_milli = _mig_profile(model, milli, pod.memory_mib)
        return PodRequest(pod.name, 0, 0, 1, profile_milli, mode=DeviceMode.MIG,
                          mig_profile=profile)
    if mode is DeviceMode.SOFT:
        if milli >= MILLI_PER_GPU:
            return replace(whole, mode=None)
        return PodRequest(pod.name, 0, 0, 1, milli, gpu_memory_mib=pod.memory_mib)
    return PodRequest(pod.name, 0, 0, 1, milli, gpu_memory_mib=pod.memory_mib, mode=mode,
                      oversubscribe=oversubscribe and mode is DeviceMode.TIMESLICE)


@cache
def _mig_profile(model: str, milli: int, memory_mib: int) -> tuple[str, int]:
    """(name, compute milli) of the smallest profile with `milli` and `memory_mib`, else the
    whole-GPU profile."""
    g = get_geometry(model)
    fitting = covering_profiles(g, milli, memory_mib)
    p = fitting[0] if fitting else g.whole
    return p.name, MILLI_PER_GPU * p.compute_slices // g.compute_slices


def _placer(state: ClusterState, policy: str, seed: int = 0) -> Placer:
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests([]), state),
                        np.random.default_rng(seed))
    return Placer(state, get_policy(policy)(ctx))


def simulate(mode: DeviceMode, pods: list[Pod], nodes: int = 16, gpus_per_node: int = 8,
             model: str = "H100-SXM5-80GB", replicas: int = 4, oversubscribe: bool = True,
             policy: str = "bestfit", tick: Callable[[int], None] | None = None
             ) -> ModeResult:
    """Place `pods` in order on a fresh cluster where every GPU is in `mode` (see the module
    docstring); `oversubscribe` applies to time-slice replicas only; `tick(i)` now and then
    with the number of pods placed so far."""
    card = get_model(model).memory_mib or 0
    state = ClusterState(mode_nodes(mode, nodes, gpus_per_node, model, replicas))
    placer = _placer(state, policy)
    claimed = np.zeros((nodes, gpus_per_node))  # memory pods touch, per GPU
    refused: Counter[str] = Counter()
    placed = compute = 0
    for i, pod in enumerate(pods):
        if tick is not None and i % 256 == 0:
            tick(i)
        d = placer.place(compile_for(mode, pod, model, oversubscribe))
        if d.allocation is None:
            refused[d.reason] += 1
            continue
        placed += 1
        compute += pod.count * pod.milli
        claimed[d.allocation.node, list(d.allocation.devices)] += pod.memory_mib
    total_gpus = nodes * gpus_per_node
    occupied = state.dev_pods[:, :gpus_per_node] > 0
    occ_mem = occupied.sum() * card
    stranded = float(np.clip(card - claimed, 0, None)[occupied].sum() / occ_mem) if occ_mem else 0
    mig_idle = None
    if mode is DeviceMode.MIG:
        mig_idle = int(state.mig_compute_free[:, :gpus_per_node][occupied].sum())
    ts_max = ts_over = None
    if mode is DeviceMode.TIMESLICE:
        risk = claimed / card
        ts_max = float(risk.max())
        ts_over = float((risk > 1.0).sum() / total_gpus)
    name = mode.value if oversubscribe or mode is not DeviceMode.TIMESLICE \
        else "timeslice-capped"
    iso = IsolationLevel.NONE if mode is DeviceMode.TIMESLICE and oversubscribe \
        else mode.isolation  # an uncapped replica isolates nothing
    return ModeResult(name, iso, placed, len(pods),
                      compute / (total_gpus * MILLI_PER_GPU), stranded, mig_idle, ts_max,
                      ts_over, dict(sorted(refused.items())))


def compare(n_pods: int = 100, seed: int = 0, nodes: int = 16, gpus_per_node: int = 8,
            model: str = "H100-SXM5-80GB", replicas: int = 4, policy: str = "bestfit",
            tick: Callable[[int], None] | None = None) -> list[ModeResult]:
    """Run every mode on the same seeded workload (same order); time-slicing twice: as the
    NVIDIA plugin does it (memory oversubscribed) and with gpugov's memory cap. `tick(done)`
    hears of progress over all runs (6 × n_pods placements)."""
    pods = generate_workload(n_pods, seed)
    runs = [(m, True) for m in (DeviceMode.EXCLUSIVE, DeviceMode.MIG, DeviceMode.SOFT,
                                DeviceMode.TIMESLICE)]
    runs += [(DeviceMode.TIMESLICE, False), (DeviceMode.MPS, True)]
    rows = []
    for k, (m, over) in enumerate(runs):
        step = None if tick is None else (lambda i, k=k: tick(k * len(pods) + i))
        rows.append(simulate(m, pods, nodes, gpus_per_node, model, replicas,
                             oversubscribe=over, policy=policy, tick=step))
    if tick is not None:
        tick(len(runs) * len(pods))
    return rows


# --- isolation on mixed nodes: `gpugov modes --mixed` -------------------------------------
#
# A node pool whose GPUs are in different modes, and tenants of the three trust tiers sending
# the same pod mix. Each pod goes through `placement.rounding.place_rounded`; per tier we count
# what was placed, the isolation delivered, and the pods refused because only devices with
# weaker isolation than the tier requires had room (the policy at work) vs. because nothing
# had room.

# node name -> modes of its 8 GPUs (H100-SXM5-80GB, two 4-GPU NVLink domains)
MIXED_POOL: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mix-a", ("mig", "mig", "soft", "soft", "timeslice", "timeslice", "exclusive",
               "exclusive")),
    ("mix-b", ("exclusive",) * 4 + ("soft", "soft", "mps", "mps")),
    ("mix-c", ("mig",) * 4 + ("soft",) * 4),
    ("mix-d", ("timeslice",) * 4 + ("soft", "soft", "exclusive", "exclusive")),
)

# (kind, milli or 1000 for whole GPUs, memory GiB, devices, share of pods) — an assumed mix
MIXED_MIX = (
    ("notebook", 100, 6, 1, 0.30),
    ("inference-small", 250, 12, 1, 0.30),
    ("inference-medium", 400, 30, 1, 0.20),
    ("fine-tune", 1000, 0, 1, 0.15),
    ("train-4gpu", 1000, 0, 4, 0.05),
)


@dataclass(frozen=True, slots=True)
class MixedPod:
    """A generated pod: its tenant's trust tier and what it asks for."""

    name: str
    tier: TrustTier
    request: GpuRequest


@dataclass(frozen=True, slots=True)
class TierResult:
    tier: TrustTier
    floor: IsolationLevel
    pods: int
    placed: int
    delivered: dict[IsolationLevel, int]
    refused_isolation: int  # only devices with weaker isolation than required had room
    refused_no_room: int


def mixed_pool(model: str = "H100-SXM5-80GB",
               pool: tuple[tuple[str, tuple[str, ...]], ...] = MIXED_POOL,
               replicas: int = 4) -> list[NodeSpec]:
    """The pool's nodes (MIG devices dynamic: instances are created on demand)."""
    out = []
    for name, modes in pool:
        cfgs = tuple(DeviceConfig(DeviceMode(m), replicas if m in ("timeslice", "mps") else 1)
                     for m in modes)
        out.append(NodeSpec(name, NODE_CPU_MILLI, NODE_MEMORY_MIB, len(modes), model,
                            devices=cfgs, topology=hgx_topology(len(modes), domains=2)))
    return out


def mixed_workload(pods_per_tier: int, seed: int = 0) -> list[MixedPod]:
    """The same seeded MIXED_MIX for each tier, all tiers interleaved in one seeded order."""
    rng = np.random.default_rng(seed)
    shares = np.array([m[4] for m in MIXED_MIX])
    pods: list[MixedPod] = []
    for tier in TrustTier:
        kinds = rng.choice(len(MIXED_MIX), size=pods_per_tier, p=shares / shares.sum())
        for i, k in enumerate(kinds):
            kind, milli, gib, count, _ = MIXED_MIX[k]
            name = f"{tier}-{kind}-{i}"
            if milli >= MILLI_PER_GPU:
                pods.append(MixedPod(name, tier, GpuRequest(count, DeviceMode.EXCLUSIVE)))
            else:
                pods.append(MixedPod(name, tier,
                                    GpuRequest(1, DeviceMode.SOFT, milli, gib * GIB)))
    order = rng.permutation(len(pods))
    return [pods[i] for i in order]


def mixed_scenario(pods_per_tier: int = 40, seed: int = 0, model: str = "H100-SXM5-80GB",
                   replicas: int = 4, policy: str = "bestfit",
                   tick: Callable[[int], None] | None = None) -> list[TierResult]:
    """Place the interleaved tiers' pods on the mixed pool, in order; results per tier. Each
    tier is one tenant (named after the tier). `tick(done)` now and then: pods tried so far
    (of 3 × pods_per_tier), for a progress display."""
    state = ClusterState(mixed_pool(model, replicas=replicas))
    placer = _placer(state, policy, seed)
    pods = mixed_workload(pods_per_tier, seed)
    stats = {t: {"pods": 0, "placed": 0, "iso": 0, "full": 0,
                 "delivered": dict.fromkeys(IsolationLevel, 0)} for t in TrustTier}
    for i, pod in enumerate(pods):
        if tick is not None and i % 256 == 0:
            tick(i)
        s = stats[pod.tier]
        s["pods"] += 1  # type: ignore[operator]
        got = place_rounded(placer, pod.request, pod.name, pod.tier, tenant=str(pod.tier))
        if not got.placed:
            s["iso" if got.weaker_had_room else "full"] += 1  # type: ignore[operator]
            continue
        assert got.request is not None and got.allocation is not None
        state.allocate(got.request, got.allocation)
        s["placed"] += 1  # type: ignore[operator]
        s["delivered"][got.isolation] += 1  # type: ignore[index]
    if tick is not None:
        tick(len(pods))
    return [TierResult(t, MIN_ISOLATION[t], s["pods"], s["placed"],  # type: ignore[arg-type]
                       s["delivered"], s["iso"], s["full"])  # type: ignore[arg-type]
            for t, s in stats.items()]


def print_mixed(results: list[TierResult], title: str) -> None:
    """The per-tier table of `gpugov modes --mixed`."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="refused, weaker: only devices with weaker isolation than the tier "
                  "requires had room")
    for col in ("tier", "required", "pods", "placed", "hard", "soft", "none",
                "refused, weaker", "refused, no room"):
        table.add_column(col, justify="left" if col in ("tier", "required") else "right",
                         no_wrap=col in ("tier", "required"),
                         min_width=max(map(len, col.split())))
    for r in results:
        table.add_row(str(r.tier), str(r.floor), str(r.pods), str(r.placed),
                      *(str(r.delivered[lvl]) for lvl in (IsolationLevel.HARD,
                                                          IsolationLevel.SOFT,
                                                          IsolationLevel.NONE)),
                      str(r.refused_isolation), str(r.refused_no_room))
    Console().print(table)  # as wide as the terminal
