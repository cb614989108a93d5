"""An independent oracle of the one cluster state: what every device holds, recomputed from
the node specs and the list of live allocations alone, and what fits where by brute force.

It never reads `ClusterState` arrays, so the property tests can compare the state against
it. Semantics follow the module doc of `gpugov.model.cluster` (and docs/contracts.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpugov.model.catalog import MILLI_PER_GPU, get_model
from gpugov.model.cluster import REASONS, NodeSpec
from gpugov.model.constraints import selects, tolerates
from gpugov.model.devices import DeviceMode
from gpugov.model.mig import MigInstance, get_geometry, layout_errors
from gpugov.model.request import Allocation, PodRequest

#: device-level tests in the order the filter applies them (a sub-sequence of REASONS).
DEVICE_STEPS = ("gpu-mode", "isolation", "tenant-isolation", "mig-slice", "replicas", "gpu",
                "gpu-memory", "power")

Live = Sequence[tuple[PodRequest, Allocation]]


@dataclass
class DeviceUse:
    """What the live pods hold on one device."""

    milli: int = 0
    memory: int = 0
    pods: list[PodRequest] = field(default_factory=list)
    replicas: int = 0
    instances: list[MigInstance] = field(default_factory=list)

    @property
    def sealed(self) -> list[PodRequest]:
        """Sealed pods that mark the device: a sealed whole GPU holds all of it, so it
        needs no mark (nobody else fits) and leaves the fast path open."""
        return [p for p in self.pods if marks(p)]


def marks(p: PodRequest) -> bool:
    return p.sealed and p.slice_mode is not DeviceMode.EXCLUSIVE


def tdp(spec: NodeSpec) -> float:
    return float(get_model(spec.model).tdp_w or 0) if spec.model else 0.0


def expected_charge(spec: NodeSpec, device: int, req: PodRequest) -> tuple[int, int]:
    """(milli, GPU memory MiB) a pod of `req` takes from `device` (module doc of cluster)."""
    cap = spec.device_memory_mib
    cfg = spec.device_config(device)
    mode = req.slice_mode
    if mode is DeviceMode.EXCLUSIVE:
        return MILLI_PER_GPU, cap
    if mode is DeviceMode.MIG:
        g = get_geometry(spec.model)
        p = g.profile(req.mig_profile)
        return MILLI_PER_GPU * p.compute_slices // g.compute_slices, p.memory_mib
    if mode is DeviceMode.TIMESLICE:
        mem = 0 if req.oversubscribe else (req.gpu_memory_mib or cap // cfg.replicas)
        return MILLI_PER_GPU // cfg.replicas, mem
    if mode is DeviceMode.MPS:
        return MILLI_PER_GPU // cfg.replicas, cap // cfg.replicas
    return req.gpu_milli, req.gpu_memory_mib


def usage(specs: Sequence[NodeSpec], live: Live) -> dict[tuple[int, int], DeviceUse]:
    """Per (node, device): what the live allocations hold (whole GPUs hold all memory)."""
    use = {(n, d): DeviceUse() for n, s in enumerate(specs) for d in range(s.gpu_count)}
    for req, a in live:
        for d in a.devices:
            u = use[a.node, d]
            u.milli += a.milli
            whole = req.slice_mode is DeviceMode.EXCLUSIVE
            u.memory += specs[a.node].device_memory_mib if whole else a.memory_mib
            u.pods.append(req)
            if req.slice_mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
                u.replicas += 1
            if req.slice_mode is DeviceMode.MIG:
                u.instances.append(MigInstance(a.mig_start, req.mig_profile))
    return use


def host_use(specs: Sequence[NodeSpec], live: Live) -> list[tuple[int, int]]:
    """Per node: (CPU milli, memory MiB) the live pods hold."""
    out = [[0, 0] for _ in specs]
    for req, a in live:
        out[a.node][0] += req.cpu_milli
        out[a.node][1] += req.memory_mib
    return [(c, m) for c, m in out]


def busy(specs: Sequence[NodeSpec], use: dict, n: int) -> int:
    return sum(1 for d in range(specs[n].gpu_count) if use[n, d].pods)


def power_room(spec: NodeSpec, busy_now: int, more: int) -> bool:
    """May `more` idle devices start on a node with `busy_now` busy ones (TDP each)?"""
    if spec.power_budget_w is None or tdp(spec) == 0:
        return True
    return spec.power_budget_w - busy_now * tdp(spec) >= more * tdp(spec)


def mig_room(spec: NodeSpec, device: int, profile: str, u: DeviceUse) -> bool:
    """Is there a free valid start (dynamic) or a free instance (fixed) of `profile`?"""
    if spec.device_config(device).mode is not DeviceMode.MIG:
        return False
    g = get_geometry(spec.model)
    if profile not in g.profile_names(include_media=False):
        return False
    layout = spec.device_config(device).mig_layout
    if layout is not None:
        return any(i.profile == profile and i not in u.instances for i in layout)
    p = g.profile(profile)
    used = {s for i in u.instances for s in i.span(g)}
    compute = sum(g.profile(i.profile).compute_slices for i in u.instances)
    if compute + p.compute_slices > g.compute_slices:
        return False
    return any(not used & set(range(s, s + p.memory_slices)) for s in p.starts)


def device_steps(specs: Sequence[NodeSpec], live: Live, use: dict, req: PodRequest, n: int,
                 d: int) -> dict[str, bool]:
    """Each device-level test of `req` on device `d` of node `n` (absent = not applied)."""
    spec = specs[n]
    cfg = spec.device_config(d)
    u = use[n, d]
    cap = spec.device_memory_mib
    mode = req.slice_mode
    out: dict[str, bool] = {}
    if mode is DeviceMode.EXCLUSIVE:
        out["gpu-mode"] = cfg.mode in (DeviceMode.EXCLUSIVE, DeviceMode.SOFT)
    else:
        out["gpu-mode"] = cfg.mode is mode
        out["isolation"] = cfg.mode.isolation >= req.min_isolation
        if mode is DeviceMode.TIMESLICE and req.oversubscribe:  # uncapped: delivers none
            out["isolation"] = req.min_isolation == 0 and not any(
                p.min_isolation > 0 and not p.oversubscribe for p in u.pods)
        elif mode is DeviceMode.TIMESLICE and req.min_isolation > 0:
            out["isolation"] = out["isolation"] and not any(p.oversubscribe for p in u.pods)
    sealed = u.sealed
    if mode is DeviceMode.EXCLUSIVE:
        pass  # a whole GPU takes only a device nobody holds: `gpu` says it
    elif req.sealed:
        out["tenant-isolation"] = not u.pods or (
            bool(sealed) and req.tenant != "" and sealed[0].tenant == req.tenant)
    elif any(marks(p) for p, _ in live):
        out["tenant-isolation"] = not sealed or (req.tenant != ""
                                                 and sealed[0].tenant == req.tenant)
    if mode is DeviceMode.MIG:
        out["mig-slice"] = mig_room(spec, d, req.mig_profile, u)
    elif mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
        out["replicas"] = u.replicas < cfg.replicas
        if mode is DeviceMode.MPS:
            out["gpu"] = req.gpu_milli <= MILLI_PER_GPU // cfg.replicas
            out["gpu-memory"] = req.gpu_memory_mib <= cap // cfg.replicas
        elif not req.oversubscribe:
            out["gpu-memory"] = cap - u.memory >= (req.gpu_memory_mib or cap // cfg.replicas)
    elif mode is DeviceMode.EXCLUSIVE:
        out["gpu"] = u.milli == 0
        if req.gpu_memory_mib:
            out["gpu-memory"] = cap >= req.gpu_memory_mib
    else:
        out["gpu"] = MILLI_PER_GPU - u.milli >= req.gpu_milli
        if req.gpu_memory_mib:
            out["gpu-memory"] = cap - u.memory >= req.gpu_memory_mib
    if any(s.power_budget_w is not None for s in specs):
        out["power"] = bool(u.pods) or power_room(spec, busy(specs, use, n), 1)
    return out


def node_steps(specs: Sequence[NodeSpec], live: Live, req: PodRequest, n: int
               ) -> dict[str, bool]:
    """Every test of `req` on node `n`, in `REASONS` order; device steps are whether
    `gpu_count` devices pass every device test up to and including that one."""
    spec = specs[n]
    use = usage(specs, live)
    host = host_use(specs, live)[n]
    out: dict[str, bool] = {}
    if req.gpu_milli > 0:
        out["gpu-model"] = spec.gpu_count > 0 and (not req.models or spec.model in req.models)
    if req.node_selector:
        out["node-selector"] = selects(req.node_selector, dict(spec.labels))
    if any(s.taints for s in specs):
        out["taint"] = tolerates(req.tolerations, spec.taints)
    if req.gpu_count:
        out["gpu-count"] = spec.gpu_count >= req.gpu_count
        per_dev = [device_steps(specs, live, use, req, n, d) for d in range(spec.gpu_count)]
        passed = [True] * spec.gpu_count
        for step in DEVICE_STEPS:
            if not any(step in s for s in per_dev):
                continue
            passed = [ok and s.get(step, True) for ok, s in zip(passed, per_dev, strict=True)]
            out[step] = sum(passed) >= req.gpu_count
        if req.gpu_count > 1 and spec.power_budget_w is not None:
            out["power"] = out.get("power", True) and power_room(
                spec, busy(specs, use, n), req.gpu_count)
        if req.nvlink and req.gpu_count > 1:  # one NVLink domain holds them all
            dom = domains(spec)
            out["topology"] = any(
                sum(1 for d, ok in enumerate(passed) if ok and dom[d] == x) >= req.gpu_count
                for x in set(dom) if x is not None)
    out["cpu"] = spec.cpu_milli - host[0] >= req.cpu_milli
    out["memory"] = spec.memory_mib - host[1] >= req.memory_mib
    return out


def fitting_devices(specs: Sequence[NodeSpec], live: Live, req: PodRequest, n: int
                    ) -> list[bool]:
    use = usage(specs, live)
    fits = [all(device_steps(specs, live, use, req, n, d).values())
            for d in range(specs[n].gpu_count)]
    if req.nvlink and req.gpu_count > 1:  # only domains that can hold every device
        dom = domains(specs[n])
        fits = [ok and dom[d] is not None and sum(
            1 for e, f in enumerate(fits) if f and dom[e] == dom[d]) >= req.gpu_count
            for d, ok in enumerate(fits)]
    return fits


def domains(spec: NodeSpec) -> list[int | None]:
    """Each device's NVLink domain (None: unknown, in no domain)."""
    return [spec.topology[d].nvlink_domain if spec.topology else None
            for d in range(spec.gpu_count)]


def feasible(specs: Sequence[NodeSpec], live: Live, req: PodRequest) -> list[bool]:
    return [all(node_steps(specs, live, req, n).values()) for n in range(len(specs))]


#: the order of the tests: `REASONS`, with "a node has too few devices at all" (reported as
#: `gpu`, as the per-node summaries do) before the device tests.
ORDER = (*REASONS[:3], "gpu-count", *REASONS[3:])


def first_reason(specs: Sequence[NodeSpec], live: Live, req: PodRequest) -> str:
    """The first test in `ORDER` after which no node is left."""
    steps = [node_steps(specs, live, req, n) for n in range(len(specs))]
    alive = [True] * len(specs)
    for reason in ORDER:
        alive = [a and s.get(reason, True) for a, s in zip(alive, steps, strict=True)]
        if not any(alive):
            return "gpu" if reason == "gpu-count" else reason
    raise AssertionError("the request fits somewhere")


def allocation_valid(specs: Sequence[NodeSpec], live: Live, req: PodRequest,
                     a: Allocation) -> bool:
    """Could `a` be committed for `req` without breaking anything?"""
    if not 0 <= a.node < len(specs):
        return False
    spec = specs[a.node]
    steps = node_steps(specs, live, req, a.node)
    if not all(v for k, v in steps.items() if k not in DEVICE_STEPS):
        return False
    if len(set(a.devices)) != len(a.devices) or len(a.devices) != req.gpu_count:
        return False
    if any(not 0 <= d < spec.gpu_count for d in a.devices):
        return False
    if not req.gpu_count:
        return True
    if not steps.get("power", True):
        return False
    fits = fitting_devices(specs, live, req, a.node)
    if not all(fits[d] for d in a.devices):
        return False
    if req.nvlink and len({domains(spec)[d] for d in a.devices}) > 1:
        return False  # gpugov.io/topology: required is never split
    if any(expected_charge(spec, d, req) != (a.milli, a.memory_mib) for d in a.devices):
        return False
    if req.slice_mode is DeviceMode.MIG:
        d = a.devices[0]
        inst = MigInstance(a.mig_start, req.mig_profile)
        u = usage(specs, live)[a.node, d]
        layout = spec.device_config(d).mig_layout
        g = get_geometry(spec.model)
        if layout is not None:
            return inst in layout and inst not in u.instances
        return not layout_errors(g, [*u.instances, inst])
    return True
