"""MIG layout planner: choose per-GPU layouts that serve the demand we see.

Input: the GPUs (node, index, current layout, busy or idle) of one MIG model and a demand mix
(instances wanted per profile, from a trace or a forecast). Output: a layout per GPU, in NVIDIA
mig-parted's `version: v1` config format (data-plane-facts §1.4), with the served demand before
and after. Only idle GPUs are re-laid out: changing a GPU's instances needs them unused.

Serving rule: a request for profile p may use any instance that has at least p's memory slices
and compute slices (a 1g job runs in a 2g instance, wasting the difference). On the NVIDIA
geometries the base profiles form a chain under this order (1g < 1g/2-slice < 2g < 3g < 4g < 7g),
so matching requests largest-first to the smallest fitting free instance is optimal.

Search: greedy by marginal gain — each idle GPU, in order, gets the maximal layout that adds
the most served compute slices given what earlier GPUs already serve (ties: keep the current
layout, then the larger layout). Maximal layouts are few (28 on 8-slice GPUs), so this is
O(GPUs × 28 × profiles).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpugov.model.catalog import MILLI_PER_GPU, get_model
from gpugov.model.mig import MigGeometry, get_geometry, maximal_layouts

Layout = tuple[str, ...]  # a multiset of profile names, largest first


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One MIG GPU as the planner sees it. `layout` () = MIG disabled (served as one whole)."""

    node: str
    index: int
    layout: Layout = ()
    busy: bool = False


def profile_for_milli(geometry: MigGeometry, milli: int) -> str:
    """Smallest base profile whose compute share (compute slices / GPU's) covers `milli`.

    The openb trace states compute only, so memory never picks the profile: the 2-slice 1g
    (e.g. 1g.20gb) is never chosen. 1000 (and any multi-GPU pod, per device) maps to 7g.
    """
    fitting = [p for p in geometry.base_profiles()
               if p.compute_slices * MILLI_PER_GPU >= milli * geometry.compute_slices]
    return min(fitting, key=lambda p: (p.compute_slices, p.memory_slices)).name


def _order(geometry: MigGeometry) -> list[str]:
    return [p.name for p in sorted(geometry.base_profiles(),
                                   key=lambda p: (p.compute_slices, p.memory_slices))]


def _fits_in(geometry: MigGeometry, want: str, have: str) -> bool:
    a, b = geometry.profile(want), geometry.profile(have)
    return b.memory_slices >= a.memory_slices and b.compute_slices >= a.compute_slices


def supply_of(geometry: MigGeometry, layouts: Iterable[Layout]) -> Counter[str]:
    """Instances per profile; a MIG-disabled GPU counts as one whole-GPU instance."""
    c: Counter[str] = Counter()
    for lay in layouts:
        c.update(lay or (geometry.whole.name,))
    return c


def serve(geometry: MigGeometry, demand: Mapping[str, int],
          supply: Mapping[str, int]) -> Counter[str]:
    """Requests served per profile: largest requests first, each to the smallest fitting
    free instance."""
    order = _order(geometry)
    free = Counter(supply)
    served: Counter[str] = Counter()
    for want in reversed(order):
        need = demand.get(want, 0)
        for have in order:
            if need == 0:
                break
            if free[have] and _fits_in(geometry, want, have):
                take = min(need, free[have])
                free[have] -= take
                need -= take
                served[want] += take
    return served


def served_slices(geometry: MigGeometry, served: Mapping[str, int]) -> int:
    """Served demand in compute slices (what the requests asked for, not what they got)."""
    return sum(geometry.profile(p).compute_slices * n for p, n in served.items())


@dataclass(slots=True)
class Plan:
    model: str
    layouts: list[Layout]  # per GPU, same order as the input slots
    slots: list[GpuSlot]
    demand: Counter[str]
    served_before: Counter[str] = field(default_factory=Counter)
    served_after: Counter[str] = field(default_factory=Counter)

    @property
    def changed(self) -> int:
        return sum(a != s.layout for a, s in zip(self.layouts, self.slots, strict=True))


def plan_layouts(model: str, slots: Sequence[GpuSlot], demand: Mapping[str, int]) -> Plan:
    """Greedy marginal-gain plan (see module doc). Busy GPUs keep their layout."""
    g = get_geometry(model)
    # MIG off serves a whole-GPU request as well as a 7g instance and, on A100, with more SMs
    # (108 vs 98), so "disabled" () replaces the single-7g layout among the candidates.
    candidates = [() if lay == (g.whole.name,) else lay for lay in maximal_layouts(model)]
    supply = supply_of(g, (s.layout for s in slots if s.busy))
    base = served_slices(g, serve(g, demand, supply))
    layouts: list[Layout] = []
    size = {lay: sum(g.profile(p).compute_slices for p in lay or (g.whole.name,))
            for lay in candidates}
    for s in slots:
        if s.busy:
            layouts.append(s.layout)
            continue
        best, best_key = s.layout, None
        for lay in candidates:
            trial = supply + Counter(lay or (g.whole.name,))
            gain = served_slices(g, serve(g, demand, trial)) - base
            key = (gain, lay == s.layout, size[lay])
            if best_key is None or key > best_key:
                best, best_key = lay, key
        if best_key is not None and best_key[0] == 0:
            best = s.layout  # nothing more to serve: leave the GPU alone
        layouts.append(best)
        supply.update(best or (g.whole.name,))
        base = served_slices(g, serve(g, demand, supply))
    plan = Plan(model, layouts, list(slots), Counter(demand))
    plan.served_before = serve(g, demand, supply_of(g, (s.layout for s in slots)))
    plan.served_after = serve(g, demand, supply_of(g, layouts))
    return plan


def static_plan(model: str, slots: Sequence[GpuSlot], demand: Mapping[str, int],
                layout: Layout) -> Plan:
    """Every idle GPU gets the same layout (the baselines: 7×1g, mig-parted's all-balanced)."""
    g = get_geometry(model)
    layouts = [s.layout if s.busy else layout for s in slots]
    plan = Plan(model, layouts, list(slots), Counter(demand))
    plan.served_before = serve(g, demand, supply_of(g, (s.layout for s in slots)))
    plan.served_after = serve(g, demand, supply_of(g, layouts))
    return plan


def balanced_layout(model: str) -> Layout:
    """mig-parted's `all-balanced`: 2×1g + 1×2g + 1×3g on 7-slice GPUs, 2×1g + 1×2g on the
    4-slice A30 (data-plane-facts §1.4)."""
    g = get_geometry(model)
    by_id = {p.profile_id: p.name for p in g.base_profiles()}
    if g.memory_slices == 4:
        one, two = by_id[14], by_id[5]  # A30 IDs differ from A100/H100
        return (two, one, one)
    return (by_id[9], by_id[14], by_id[19], by_id[19])


def mig_parted_config(plan: Plan) -> tuple[dict, dict[str, str]]:
    """(mig-parted `version: v1` config, node → config name for `nvidia.com/mig.config`).

    One config per distinct per-node layout set; each entry lists the GPU indices with one
    layout. MIG-disabled GPUs get `mig-enabled: false`. `device-filter` pins the config to
    the model's PCI id when the catalog knows it.
    """
    per_node: dict[str, list[tuple[int, Layout]]] = {}
    for s, lay in zip(plan.slots, plan.layouts, strict=True):
        per_node.setdefault(s.node, []).append((s.index, lay))
    pci = get_model(plan.model).pci_device_id
    configs: dict[str, list[dict]] = {}
    by_content: dict[str, str] = {}
    node_config: dict[str, str] = {}
    for node, devs in per_node.items():
        groups: dict[Layout, list[int]] = {}
        for idx, lay in sorted(devs):
            groups.setdefault(lay, []).append(idx)
        entries: list[dict] = []
        for lay, idxs in groups.items():
            e: dict = {}
            if pci:
                e["device-filter"] = [pci]
            e["devices"] = idxs
            e["mig-enabled"] = bool(lay)
            if lay:
                e["mig-devices"] = dict(Counter(lay))
            entries.append(e)
        key = repr(entries)
        if key not in by_content:
            by_content[key] = f"gpugov-plan-{len(configs)}"
            configs[by_content[key]] = entries
        node_config[node] = by_content[key]
    return {"version": "v1", "mig-configs": configs}, node_config
