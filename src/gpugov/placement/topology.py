"""Topology: pick the device set with the best interconnect, and score nodes on topology,
NUMA affinity and energy.

Pair distance between two GPUs (lower is better), after NVML's topology levels
(data-plane-facts §7: NVLink/P2P is checked separately from the PCIe common ancestor):
0 = same NVLink/NVSwitch domain, 1 = same PCIe switch, 2 = same NUMA node, 3 = across NUMA.
A set's cost is (worst pair, sum of pairs, leftover penalty): first never cross a boundary you
don't have to, then keep the set tight, then leave the *other* domains whole for later big
requests (best fit: take from the domain with the fewest free devices that still fits).
The same function answers kubelet's GetPreferredAllocation (device-plugin API v1beta1 §3.3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from gpugov.model.catalog import get_model
from gpugov.model.devices import DeviceTopology

SAME_NVLINK, SAME_PCIE, SAME_NUMA, CROSS_NUMA = 0, 1, 2, 3
MAX_COMBINATIONS = 20_000  # above this, fall back to a greedy grow (very large nodes only)


def pair_distance(a: DeviceTopology, b: DeviceTopology) -> int:
    if a.nvlink_domain is not None and a.nvlink_domain == b.nvlink_domain:
        return SAME_NVLINK
    if a.pcie_switch is not None and a.pcie_switch == b.pcie_switch:
        return SAME_PCIE
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return SAME_NUMA
    return CROSS_NUMA


def _domain_free(topology: Sequence[DeviceTopology], free: Sequence[int], i: int) -> int:
    """How many free devices share device i's tightest domain (for best-fit tie-breaking)."""
    return sum(pair_distance(topology[i], topology[j]) == SAME_NVLINK for j in free)


def set_cost(topology: Sequence[DeviceTopology], chosen: Sequence[int],
             free: Sequence[int]) -> tuple[int, int, int]:
    pairs = [pair_distance(topology[a], topology[b]) for a, b in combinations(chosen, 2)]
    worst = max(pairs, default=0)
    # best fit: prefer sets in domains that have few free devices left over
    leftover = sum(_domain_free(topology, free, i) for i in chosen)
    return worst, sum(pairs), leftover


def best_device_set(topology: Sequence[DeviceTopology], free: Sequence[int], count: int,
                    must_include: Sequence[int] = ()) -> tuple[int, ...] | None:
    """The `count` free devices (indexes into `topology`) with the best interconnect.

    Deterministic: ties go to the lowest indexes. None when fewer than `count` are free.
    """
    free = sorted(set(free) | set(must_include))
    if count > len(free) or count < len(must_include):
        return None
    rest = [i for i in free if i not in must_include]
    need = count - len(must_include)
    best: tuple[tuple[int, int, int], tuple[int, ...]] | None = None
    n_combos = _n_choose_k(len(rest), need)
    if n_combos <= MAX_COMBINATIONS:
        for extra in combinations(rest, need):
            chosen = tuple(sorted((*must_include, *extra)))
            cost = set_cost(topology, chosen, free)
            if best is None or cost < best[0]:
                best = (cost, chosen)
        return best[1] if best else None
    chosen_list = list(must_include) or [rest.pop(0)]  # greedy grow: cheapest next device
    while len(chosen_list) < count:
        nxt = min((i for i in free if i not in chosen_list),
                  key=lambda j: sum(pair_distance(topology[j], topology[c]) for c in chosen_list))
        chosen_list.append(nxt)
    return tuple(sorted(chosen_list))


def _n_choose_k(n: int, k: int) -> int:
    from math import comb

    return comb(n, k) if 0 <= k <= n else 0


def preferred_allocation(topology: Mapping[str, DeviceTopology], available: Sequence[str],
                         must_include: Sequence[str], size: int) -> list[str]:
    """GetPreferredAllocation: device IDs kubelet should allocate (may be fewer if impossible).

    `topology` maps device ID (UUID, or `<uuid>::<n>` replica ID stripped by the caller) to
    its topology.
    """
    ids = sorted(set(available) | set(must_include))
    topo = [topology[i] for i in ids]
    pos = {d: k for k, d in enumerate(ids)}
    chosen = best_device_set(topo, range(len(ids)), size, [pos[d] for d in must_include])
    return [ids[k] for k in chosen] if chosen else list(must_include)


def topology_fit(topology: Sequence[DeviceTopology], chosen: Sequence[int]) -> float:
    """1.0 when all chosen devices share an NVLink domain, falling to 0.0 across NUMA nodes."""
    if len(chosen) < 2:
        return 1.0
    worst = max(pair_distance(topology[a], topology[b]) for a, b in combinations(chosen, 2))
    return 1.0 - worst / CROSS_NUMA


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """Node-score weights (sum to 1). Defaults: topology dominates for multi-GPU jobs because a
    split NVLink set slows every all-reduce; NUMA affinity next (host-to-device copies cross the
    socket link otherwise); energy last, as a tie-breaker between otherwise equal nodes."""

    topology: float = 0.5
    numa: float = 0.3
    energy: float = 0.2


def numa_affinity(topology: Sequence[DeviceTopology], chosen: Sequence[int],
                  cpu_numa: int | None = None) -> float:
    """Share of chosen GPUs on the NUMA node the pod's CPUs are on (or on the majority node)."""
    nodes = [topology[i].numa_node for i in chosen]
    if not nodes or all(n is None for n in nodes):
        return 1.0
    target = cpu_numa if cpu_numa is not None else max(set(nodes), key=nodes.count)
    return sum(n == target for n in nodes) / len(nodes)


def energy_score(model: str, best_perf_per_watt: float) -> float:
    """Perf-per-watt of the model relative to the best in the candidate set (unknown = 0.5)."""
    ppw = get_model(model).perf_per_watt
    if ppw is None or best_perf_per_watt <= 0:
        return 0.5
    return min(1.0, ppw / best_perf_per_watt)


def estimated_power_w(model: str, busy_milli: int) -> float:
    """Estimated draw of a node's GPUs: TDP × busy share, summed (`busy_milli` over all
    devices). Idle draw is taken as 0 — a linear model; real draw depends on the kernel mix."""
    tdp = get_model(model).tdp_w
    return 0.0 if tdp is None else tdp * busy_milli / 1000


def power_headroom_ok(model: str, busy_milli: int, new_milli: int,
                      power_cap_w: float | None) -> bool:
    """Would the node stay under its per-node power cap after adding `new_milli`?"""
    if power_cap_w is None:
        return True
    return estimated_power_w(model, busy_milli + new_milli) <= power_cap_w


def node_score(topology: Sequence[DeviceTopology], chosen: Sequence[int], model: str,
               best_perf_per_watt: float, weights: ScoreWeights = ScoreWeights(),
               cpu_numa: int | None = None) -> float:
    """0..100 score of placing on these devices of this node (higher is better)."""
    s = (weights.topology * topology_fit(topology, chosen)
         + weights.numa * numa_affinity(topology, chosen, cpu_numa)
         + weights.energy * energy_score(model, best_perf_per_watt))
    return 100.0 * s


def nvlink_set(domains: Sequence[int], candidates: Sequence[int], count: int
               ) -> tuple[int, ...] | None:
    """`count` of the `candidates` (device indexes, in the caller's order of preference) that
    share one NVLink domain (`domains[i]`, -1 = unknown: never a domain), or None when no
    domain holds `count` of them. Best fit: the domain with the fewest candidates that still
    holds `count` (ties: the lowest domain number), so bigger domains stay whole for bigger
    requests — the rule `best_device_set` applies, on the cluster state's arrays."""
    by_domain: dict[int, list[int]] = {}
    for i in candidates:
        d = int(domains[i])
        if d >= 0:
            by_domain.setdefault(d, []).append(int(i))
    fitting = [(len(devs), d) for d, devs in by_domain.items() if len(devs) >= count]
    if not fitting:
        return None
    return tuple(by_domain[min(fitting)[1]][:count])
