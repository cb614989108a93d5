"""The same workload on the same cluster, cut four (five) ways: whole GPUs, MIG, soft slices,
time-slices, MPS. What each mode allocates, what isolation it delivers, and what it wastes.

Workload: a seeded mix of notebook, inference, fine-tune and multi-GPU training pods, each with a
compute share (milli) *and* the GPU memory it will touch (the openb trace has no GPU memory, so
the mix is generated; see docs/gpus-and-modes.md). Pods arrive in a seeded random order and
are placed first-fit over nodes; inside a node each mode uses its own placement rule from
`placement/`. Multi-GPU pods always take whole, empty devices in the best-connected set.

Metrics, per mode:
- pods placed and requested compute placed (share of the cluster's GPUs);
- isolation delivered (`hard`, `soft`, `none`);
- stranded memory: memory of GPUs that host at least one pod, claimed by no pod (a whole GPU
  given to a 6 GiB notebook strands the rest);
- MIG idle compute slices on GPUs in MIG mode;
- time-slice memory risk: per GPU, memory the co-located pods may touch / card memory; the
  worst GPU and the share of GPUs above 1.0 (they can OOM each other: nothing enforces it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpugov.model.catalog import MILLI_PER_GPU, get_model
from gpugov.model.devices import (
    Device,
    DeviceMode,
    ExclusiveState,
    MigState,
    MpsState,
    SoftState,
    TimesliceState,
    hgx_topology,
)
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import MIN_ISOLATION, IsolationLevel, TrustTier
from gpugov.model.mig import get_geometry
from gpugov.placement.mig import place_on_gpus
from gpugov.placement.mixed import Refused, choose_node
from gpugov.placement.soft import PodType, place_mps, place_soft, place_timeslice
from gpugov.placement.topology import best_device_set

GIB = 1024


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
    """Seeded pods from WORKLOAD_MIX; memory jittered ±25 %, capped at the kind's card share."""
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


def _whole_take(node_free: list[int], topo, pod: Pod) -> tuple[int, ...] | None:
    return best_device_set(topo, node_free, pod.count)


#: accepted ranges of `gpugov modes` options (inclusive)
LIMITS = {"pod-count": (1, 1_000_000), "node-count": (1, 100_000), "seed": (0, 2**32 - 1),
          "replicas": (1, 64)}


def simulate(mode: DeviceMode, pods: list[Pod], nodes: int = 16, gpus_per_node: int = 8,
             model: str = "H100-SXM5-80GB", replicas: int = 4, prune: bool = True
             ) -> ModeResult:
    """Place `pods` in order on a fresh cluster where every GPU is in `mode`.

    First fit over nodes. With `prune` (the default) nodes that provably cannot take the pod
    are skipped with numpy instead of being tried one by one: the cluster only fills up, so a
    node that refused a pod refuses every pod at least as large (same MIG profile; compute
    and memory both >= for soft slices and MPS; any pod for time-slices), and whole-GPU pods
    need as many untouched devices. Decisions are identical to `prune=False`.
    """
    card = get_model(model).memory_mib or 0
    topo = hgx_topology(gpus_per_node)
    states: list[list] = []
    for _ in range(nodes):
        if mode is DeviceMode.MIG:
            states.append([MigState(model) for _ in range(gpus_per_node)])
        elif mode is DeviceMode.SOFT:
            states.append([SoftState(card) for _ in range(gpus_per_node)])
        elif mode is DeviceMode.TIMESLICE:
            states.append([TimesliceState(card, replicas) for _ in range(gpus_per_node)])
        elif mode is DeviceMode.MPS:
            states.append([MpsState(card, replicas) for _ in range(gpus_per_node)])
        else:
            states.append([None] * gpus_per_node)
    whole_owner: list[list[bool]] = [[False] * gpus_per_node for _ in range(nodes)]
    claimed = np.zeros((nodes, gpus_per_node))  # memory claimed by pods per GPU
    touched = np.zeros((nodes, gpus_per_node))  # for timeslice risk
    occupied = np.zeros((nodes, gpus_per_node), dtype=bool)
    untouched = np.full(nodes, gpus_per_node)  # devices neither occupied nor whole-owned
    # refused[key][n]: smallest memory a pod of class `key` was refused with on node n
    refused: dict[object, np.ndarray] = {}
    workload = [PodType(m, int(gib * GIB), w) for _, m, gib, c, w in WORKLOAD_MIX if c == 1]
    g = get_geometry(model) if mode is DeviceMode.MIG else None

    def whole(pod: Pod) -> bool:
        return pod.count > 1 or mode is DeviceMode.EXCLUSIVE

    def shape(pod: Pod) -> tuple[object, int]:
        """(refusal class, memory that counts) of a sharing pod."""
        if mode is DeviceMode.MIG:
            return _mig_profile(g, pod), 0
        if mode is DeviceMode.TIMESLICE:
            return 0, 0
        return pod.milli, pod.memory_mib

    def candidates(pod: Pod) -> np.ndarray:
        if whole(pod):
            return np.flatnonzero(untouched >= pod.count)
        key, mem = shape(pod)
        ok = np.ones(nodes, dtype=bool)
        for k, smallest in refused.items():
            if k == key or (mode is not DeviceMode.MIG and k <= key):  # type: ignore[operator]
                ok &= smallest > mem
        return np.flatnonzero(ok)

    def try_node(n: int, pod: Pod) -> bool:
        st = states[n]
        if whole(pod):
            free = [i for i in range(gpus_per_node)
                    if not occupied[n, i] and not whole_owner[n][i]]
            chosen = _whole_take(free, topo, pod)
            if chosen is None:
                return False
            for i in chosen:
                whole_owner[n][i] = True
                occupied[n, i] = True
                claimed[n, i] += pod.memory_mib
                touched[n, i] += pod.memory_mib
                if mode is DeviceMode.MIG:
                    st[i] = place_on_gpus([st[i]], g.whole.name, pod.name)[1]  # type: ignore
            untouched[n] -= len(chosen)
            return True
        free_idx = [i for i in range(gpus_per_node) if not whole_owner[n][i]]
        sub = [st[i] for i in free_idx]
        got = None
        if mode is DeviceMode.MIG:
            profile = _mig_profile(g, pod)  # type: ignore[arg-type]
            got = place_on_gpus(sub, profile, pod.name)
        elif mode is DeviceMode.SOFT:
            got = place_soft(sub, pod.name, pod.milli, pod.memory_mib, workload)
        elif mode is DeviceMode.TIMESLICE:
            got = place_timeslice(sub, pod.name, pod.memory_mib)
        elif mode is DeviceMode.MPS:
            got = place_mps(sub, pod.name, pod.milli, pod.memory_mib)
        if got is None:
            if prune:
                key, mem = shape(pod)
                row = refused.setdefault(key, np.full(nodes, np.inf))
                row[n] = min(row[n], mem)
            return False
        k, new = got
        i = free_idx[k]
        st[i] = new
        if not occupied[n, i]:
            untouched[n] -= 1
        occupied[n, i] = True
        claimed[n, i] += pod.memory_mib
        touched[n, i] += pod.memory_mib
        return True

    placed = 0
    compute = 0
    for pod in pods:
        order = candidates(pod) if prune else range(nodes)
        if any(try_node(int(n), pod) for n in order):
            placed += 1
            compute += pod.count * pod.milli
    total_gpus = nodes * gpus_per_node
    occ_mem = occupied.sum() * card
    stranded = float(np.clip(card - claimed, 0, None)[occupied].sum() / occ_mem) if occ_mem else 0
    mig_idle = None
    if mode is DeviceMode.MIG:
        mig_idle = sum(s.idle_compute_slices() for row in states for s in row
                       if s.instances)
    ts_max = ts_over = None
    if mode is DeviceMode.TIMESLICE:
        risk = touched / card
        ts_max = float(risk.max())
        ts_over = float((risk > 1.0).sum() / total_gpus)
    return ModeResult(mode.value, mode.isolation, placed, len(pods),
                      compute / (total_gpus * MILLI_PER_GPU), stranded, mig_idle, ts_max,
                      ts_over)


def _mig_profile(geometry, pod: Pod) -> str:
    """Smallest base profile with enough compute share and memory for the pod."""
    fitting = [p for p in geometry.base_profiles()
               if p.compute_slices * MILLI_PER_GPU >= pod.milli * geometry.compute_slices
               and p.memory_mib >= pod.memory_mib]
    if not fitting:
        return geometry.whole.name
    return min(fitting, key=lambda p: (p.compute_slices, p.memory_slices)).name


def compare(n_pods: int = 100, seed: int = 0, nodes: int = 16, gpus_per_node: int = 8,
            model: str = "H100-SXM5-80GB", replicas: int = 4, prune: bool = True
            ) -> list[ModeResult]:
    """Run every mode on the same seeded workload (same order)."""
    pods = generate_workload(n_pods, seed)
    return [simulate(m, pods, nodes, gpus_per_node, model, replicas, prune)
            for m in (DeviceMode.EXCLUSIVE, DeviceMode.MIG, DeviceMode.SOFT,
                      DeviceMode.TIMESLICE, DeviceMode.MPS)]




# --- isolation on mixed nodes: `gpugov modes --mixed` -------------------------------------
#
# A node pool whose GPUs are in different modes, and tenants of the three trust tiers sending
# the same pod mix. Each pod goes through `placement.mixed.choose_node`; per tier we count what
# was placed, the isolation delivered, and the pods refused because only devices with weaker
# isolation than the tier requires had room (the policy at work) vs. because nothing had room.

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
               replicas: int = 4) -> list[tuple[str, list[Device]]]:
    """Fresh devices for each node of the pool (empty MIG layouts: created on demand)."""
    card = get_model(model).memory_mib or 0
    make = {
        "mig": lambda: MigState(model), "soft": lambda: SoftState(card),
        "timeslice": lambda: TimesliceState(card, replicas),
        "mps": lambda: MpsState(card, replicas), "exclusive": ExclusiveState,
    }
    out = []
    for name, modes in pool:
        topo = hgx_topology(len(modes), domains=2)
        out.append((name, [Device(i, model, make[m](), topo[i])  # type: ignore[operator]
                           for i, m in enumerate(modes)]))
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
                   replicas: int = 4) -> list[TierResult]:
    """Place the interleaved tiers' pods on the mixed pool, in order; results per tier."""
    nodes = mixed_pool(model, replicas=replicas)
    pods = mixed_workload(pods_per_tier, seed)
    stats = {t: {"pods": 0, "placed": 0, "iso": 0, "full": 0,
                 "delivered": dict.fromkeys(IsolationLevel, 0)} for t in TrustTier}
    at = {name: k for k, (name, _) in enumerate(nodes)}
    for pod in pods:
        s = stats[pod.tier]
        s["pods"] += 1  # type: ignore[operator]
        got = choose_node(nodes, pod.request, pod.tier, pod.name)
        if isinstance(got, Refused):
            s["iso" if got.weaker_had_room else "full"] += 1  # type: ignore[operator]
            continue
        nodes[at[got.node]] = (got.node, list(got.placed.devices))
        s["placed"] += 1  # type: ignore[operator]
        s["delivered"][got.placed.isolation] += 1  # type: ignore[index]
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
