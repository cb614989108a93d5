"""Properties of the one cluster state over random mixed fleets and random requests.

Random nodes mix every device mode (soft, exclusive, MIG with dynamic and fixed valid
layouts, time-slice and MPS replicas) with labels, taints and power budgets; random requests
are of every kind (whole and multi-GPU, soft slices with GPU memory, MIG profiles, time-slice
with and without memory or oversubscription, MPS clients, isolation floors, sealed tenants,
selectors and tolerations). Random sequences of place / release / hand-made allocations /
snapshot-restore run through `placement.engine.Placer` with several policies, and after
every step the state's arrays are checked against what `state_oracle` recomputes from the
node specs and the list of live allocations alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from state_oracle import (
    DEVICE_STEPS,
    allocation_valid,
    busy,
    expected_charge,
    feasible,
    first_reason,
    fitting_devices,
    host_use,
    tdp,
    usage,
)

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import REASONS, ClusterState, NodeSpec, pod_kind
from gpugov.model.constraints import Taint, Toleration, selects, tolerates
from gpugov.model.devices import DeviceConfig, DeviceMode, hgx_topology
from gpugov.model.isolation import IsolationLevel
from gpugov.model.mig import (
    MigInstance,
    find_placement,
    get_geometry,
    layout_errors,
    maximal_layouts,
)
from gpugov.model.mig_table import has_mig, mig_table
from gpugov.model.request import Allocation, PodRequest
from gpugov.placement.base import PolicyContext
from gpugov.placement.engine import Placer
from gpugov.placement.fragmentation import FragmentationModel, TypicalPods
from gpugov.placement.registry import get_policy

MIG_MODELS = ("A100-SXM4-80GB", "A100-SXM4-40GB", "A30", "H100-SXM5-80GB")
OTHER_MODELS = ("T4", "V100M32")
PROFILES = tuple(sorted({p for m in MIG_MODELS
                         for p in get_geometry(m).profile_names(include_media=False)}))
TAINTS = (Taint("dedicated", "infer"), Taint("gpu", "big", "NoExecute"),
          Taint("spot", "yes", "PreferNoSchedule"))
TOLERATIONS = (Toleration("dedicated", "Equal", "infer"), Toleration("gpu", "Exists"),
               Toleration("dedicated", "Equal", "train"), Toleration(operator="Exists"))
TENANTS = ("", "t1", "t2", "t3")
POLICIES = ("gpugov", "fgd", "bestfit")

#: arrays `allocate`/`release` change (ClusterState._MUTABLE less `version`)
ARRAYS = tuple(k for k in ClusterState._MUTABLE if k != "version")


# -- strategies ------------------------------------------------------------------------------
@st.composite
def mig_layouts(draw, model: str) -> tuple[MigInstance, ...]:
    """A valid fixed layout: part of a maximal profile set, placed by `find_placement`."""
    profiles = draw(st.sampled_from(maximal_layouts(model)))
    keep = draw(st.lists(st.booleans(), min_size=len(profiles), max_size=len(profiles)))
    chosen = [p for p, k in zip(profiles, keep, strict=True) if k] or [profiles[0]]
    layout = find_placement(get_geometry(model), chosen)
    assert layout is not None
    return layout


@st.composite
def device_configs(draw, model: str) -> DeviceConfig:
    modes = [DeviceMode.SOFT, DeviceMode.EXCLUSIVE, DeviceMode.TIMESLICE, DeviceMode.MPS]
    if has_mig(model):
        modes += [DeviceMode.MIG, DeviceMode.MIG]
    mode = draw(st.sampled_from(modes))
    if mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
        return DeviceConfig(mode, replicas=draw(st.integers(2, 4)))
    if mode is DeviceMode.MIG and draw(st.booleans()):
        return DeviceConfig(mode, mig_layout=draw(mig_layouts(model)))
    return DeviceConfig(mode)


@st.composite
def node_specs(draw, i: int, plain: bool = False) -> NodeSpec:
    gpus = draw(st.sampled_from([0, 1, 2, 2, 3, 4]))
    model = draw(st.sampled_from(MIG_MODELS + OTHER_MODELS)) if gpus else ""
    cpu = draw(st.sampled_from([4000, 16000, 64000]))
    mem = draw(st.sampled_from([16384, 65536, 262144]))
    if plain:
        return NodeSpec(f"n{i}", cpu, mem, gpus, model)
    devices = ()
    if gpus and draw(st.booleans()):
        devices = tuple(draw(device_configs(model)) for _ in range(gpus))
    labels = (("zone", draw(st.sampled_from("ab"))),) if draw(st.booleans()) else ()
    taints = tuple(t for t in TAINTS if draw(st.integers(0, 3)) == 0)
    budget = None
    if gpus and draw(st.integers(0, 2)) == 0:
        watts = float(get_model_tdp(model))
        budget = draw(st.integers(0, gpus)) * watts + draw(st.sampled_from([0.0, watts / 2]))
    topology = ()
    if gpus > 1 and draw(st.booleans()):  # one NVLink domain, or two islands
        topology = hgx_topology(gpus, domains=draw(st.sampled_from([1, 2])))
    return NodeSpec(f"n{i}", cpu, mem, gpus, model, devices=devices, labels=labels,
                    taints=taints, power_budget_w=budget, topology=topology)


def get_model_tdp(model: str) -> float:
    return tdp(NodeSpec("x", 0, 0, 1, model))


@st.composite
def fleets(draw, plain: bool = False) -> list[NodeSpec]:
    count = draw(st.integers(1, 4))
    nodes = [draw(node_specs(i, plain)) for i in range(count)]
    if not any(n.gpu_count for n in nodes):
        nodes.append(NodeSpec(f"n{count}", 16000, 65536, 2, draw(st.sampled_from(MIG_MODELS))))
    return nodes


@st.composite
def requests(draw, i: int = 0) -> PodRequest:
    kind = draw(st.sampled_from(["cpu", "whole", "whole", "soft", "soft", "mig", "mig",
                                 "timeslice", "mps"]))
    name = f"r{i}-{kind}"
    cpu = draw(st.sampled_from([0, 1000, 4000, 12000]))
    mem = draw(st.sampled_from([0, 1024, 16384, 65536]))
    more = dict(
        min_isolation=draw(st.sampled_from([IsolationLevel.NONE, IsolationLevel.NONE,
                                            IsolationLevel.SOFT, IsolationLevel.HARD])),
        tenant=draw(st.sampled_from(TENANTS)),
        sealed=draw(st.integers(0, 3)) == 0,
        node_selector=(("zone", draw(st.sampled_from("ab"))),) if draw(st.booleans()) else (),
        tolerations=tuple(t for t in TOLERATIONS if draw(st.integers(0, 2)) == 0),
    )
    if kind == "cpu":
        return PodRequest(name, cpu, mem, **more)
    models = draw(st.sampled_from([(), (), (), ("A100-SXM4-80GB",),
                                   ("H100-SXM5-80GB", "T4"), ("A30",)]))
    gpu_mem = draw(st.sampled_from([0, 0, 4096, 20480, 40960, 81920, 100000]))
    milli = draw(st.sampled_from([1, 100, 142, 250, 500, 999]))
    if kind == "whole":
        mode = draw(st.sampled_from([None, DeviceMode.EXCLUSIVE]))
        return PodRequest(name, cpu, mem, draw(st.integers(1, 3)), MILLI_PER_GPU, models,
                          gpu_mem, mode=mode, nvlink=draw(st.booleans()), **more)
    if kind == "soft":
        mode = draw(st.sampled_from([None, DeviceMode.SOFT]))
        return PodRequest(name, cpu, mem, 1, milli, models, gpu_mem, mode=mode, **more)
    if kind == "mig":
        return PodRequest(name, cpu, mem, 1, milli, models, mode=DeviceMode.MIG,
                          mig_profile=draw(st.sampled_from(PROFILES)), **more)
    if kind == "timeslice":
        return PodRequest(name, cpu, mem, 1, milli, models, gpu_mem, mode=DeviceMode.TIMESLICE,
                          oversubscribe=draw(st.booleans()), **more)
    return PodRequest(name, cpu, mem, 1, milli, models, gpu_mem, mode=DeviceMode.MPS, **more)


def make_placer(state: ClusterState, policy: str, reqs: list[PodRequest], seed: int) -> Placer:
    rng = np.random.default_rng(seed)
    ctx = PolicyContext(FragmentationModel(TypicalPods.from_requests(reqs), state), rng)
    return Placer(state, get_policy(policy)(ctx), rng.permutation(len(state)))


# -- checks ----------------------------------------------------------------------------------
def same_arrays(a: dict, b: dict, versions: bool = True) -> bool:
    keys = [k for k in a if versions or k != "version"]
    return all(np.array_equal(a[k], b[k]) for k in keys)


def check_state(state: ClusterState, specs: list[NodeSpec], live: list) -> None:
    """The state's arrays agree with the oracle, and no invariant is broken."""
    use = usage(specs, live)
    hosts = host_use(specs, live)
    any_budget = any(s.power_budget_w is not None for s in specs)
    for req, a in live:
        assert len(set(a.devices)) == len(a.devices) == req.gpu_count
        for d in a.devices:
            assert (a.milli, a.memory_mib) == expected_charge(specs[a.node], d, req)
    for n, spec in enumerate(specs):
        width = state.gpu_free.shape[1]
        on_node = [(r, a) for r, a in live if a.node == n]
        # host resources and node constraints of every pod on the node
        assert 0 <= hosts[n][0] <= spec.cpu_milli and 0 <= hosts[n][1] <= spec.memory_mib
        assert state.cpu_free[n] == spec.cpu_milli - hosts[n][0]
        assert state.mem_free[n] == spec.memory_mib - hosts[n][1]
        assert state.pod_count[n] == len(on_node)
        for r, _ in on_node:
            assert selects(r.node_selector, dict(spec.labels)), (r, spec)
            assert tolerates(r.tolerations, spec.taints), (r, spec)
            if r.is_gpu and r.models:
                assert spec.model in r.models
        kinds = np.zeros(width + 1, dtype=np.int64)
        for r, _ in on_node:
            if r.is_gpu:
                kinds[pod_kind(r)] += 1
        assert np.array_equal(state.kind_count[n], kinds)
        # power: every busy device counts at its model's TDP
        b = busy(specs, use, n)
        if spec.power_budget_w is not None:
            assert b * tdp(spec) <= spec.power_budget_w
        if any_budget:
            assert state.busy_gpus[n] == b
        for d in range(width):
            if d >= spec.gpu_count:  # padding: nothing free, nothing held
                assert state.gpu_free[n, d] == 0 and state.gpu_mem_free[n, d] == 0
                assert state.dev_pods[n, d] == 0 and state.rep_free[n, d] == 0
                continue
            check_device(state, spec, n, d, use[n, d])
    assert np.array_equal(state.gpu_free_total, state.gpu_free.sum(axis=1))
    assert np.array_equal(state.full_gpus, (state.gpu_free == MILLI_PER_GPU).sum(axis=1))
    assert np.array_equal(state.max_gpu_free, state.gpu_free.max(axis=1))


def check_device(state: ClusterState, spec: NodeSpec, n: int, d: int, u) -> None:
    cfg = spec.device_config(d)
    cap = spec.device_memory_mib
    # compute, memory and replicas never overcommitted; the arrays say the same
    assert 0 <= u.milli <= MILLI_PER_GPU and 0 <= u.memory <= cap, (spec, d, u)
    assert state.gpu_free[n, d] == MILLI_PER_GPU - u.milli
    assert state.gpu_mem_free[n, d] == cap - u.memory
    assert state.dev_pods[n, d] == len(u.pods)
    assert state.dev_sealed[n, d] == len(u.sealed)
    replicas = cfg.replicas if cfg.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS) else 0
    assert u.replicas <= replicas and state.rep_free[n, d] == replicas - u.replicas
    # every pod got the slice kind it asked for and at least its isolation floor
    for r in u.pods:
        mode = r.slice_mode
        if mode is DeviceMode.EXCLUSIVE:
            assert cfg.mode in (DeviceMode.EXCLUSIVE, DeviceMode.SOFT) and len(u.pods) == 1
            delivered = IsolationLevel.HARD
        else:
            assert cfg.mode is mode
            delivered = cfg.mode.isolation
        assert delivered >= r.min_isolation
    # a sealed pod shares its device with its own tenant's pods only
    for s in (p for p in u.pods if p.sealed):
        assert all(r is s or (s.tenant and r.tenant == s.tenant) for r in u.pods), u.pods
    # MIG instances at valid starts, never overlapping; fixed layouts: only their instances
    if cfg.mode is DeviceMode.MIG:
        g = get_geometry(spec.model)
        assert layout_errors(g, u.instances) == []
        table = mig_table(spec.model)
        bits = compute = 0
        for inst in u.instances:
            k = table.number(inst.profile, inst.start)
            bits |= table.placements[k].bits
            compute += table.placements[k].compute_slices
        assert state.mig_occ[n, d] == bits
        assert state.mig_compute_free[n, d] == g.compute_slices - compute
        if cfg.mig_layout is not None:
            assert len(set(u.instances)) == len(u.instances)
            assert set(u.instances) <= set(cfg.mig_layout)
            free = {i for i in cfg.mig_layout if i not in u.instances}
            state_free = {MigInstance(p.start, p.profile)
                          for k, p in enumerate(table.placements)
                          if int(state.mig_layout_free[n, d]) >> k & 1}
            assert state_free == free
    else:
        assert not u.instances and state.mig_occ[n, d] == 0


def outcome(state: ClusterState, specs: list[NodeSpec], live: list, req: PodRequest) -> str:
    """"" when `req` fits somewhere, else the refusal reason; state and oracle must agree."""
    want = feasible(specs, live, req)
    assert state.feasible(req).tolist() == want, req
    if any(want):
        return ""
    reason = state.failure_reason(req)
    assert reason in REASONS
    assert reason == first_reason(specs, live, req), req
    return reason


def relaxed(req: PodRequest, reason: str) -> PodRequest | None:
    """`req` with the dimension `reason` names removed (None where that is not a field)."""
    r = dataclasses.replace
    if reason == "cpu":
        return r(req, cpu_milli=0)
    if reason == "memory":
        return r(req, memory_mib=0)
    if reason == "gpu-model":
        return r(req, models=())
    if reason == "node-selector":
        return r(req, node_selector=())
    if reason == "taint":
        return r(req, tolerations=(Toleration(operator="Exists"),))
    if reason == "topology":
        return r(req, nvlink=False)
    if reason == "isolation":  # an uncapped replica is kept off replicas that need soft
        return r(req, min_isolation=IsolationLevel.NONE, oversubscribe=False)
    if reason == "gpu-memory":
        if req.slice_mode is DeviceMode.TIMESLICE:
            # uncapping a replica also changes its isolation (an earlier step): no relaxation
            # of memory alone exists; the reason itself is checked against the oracle
            return None
        return r(req, gpu_memory_mib=0)
    return None


def check_refusal(state: ClusterState, specs: list[NodeSpec], live: list, req: PodRequest,
                  reason: str) -> None:
    """Relaxing the dimension a refusal names is needed: without it the refusal moves on to
    a later test, or the request fits."""
    easier = relaxed(req, reason)
    if easier is None:
        return
    after = outcome(state, specs, live, easier)
    assert after == "" or REASONS.index(after) > REASONS.index(reason), (req, reason, after)


# -- the properties --------------------------------------------------------------------------
OPS = ["place"] * 5 + ["release", "release", "forge", "forge", "snapshot", "restore"]


def run_sequence(data, specs: list[NodeSpec], policy: str) -> None:
    reqs = data.draw(st.lists(requests(), min_size=1, max_size=10), label="requests")
    reqs = [dataclasses.replace(r, name=f"{r.name}-{i}") for i, r in enumerate(reqs)]
    state = ClusterState(specs)
    placer = make_placer(state, policy, reqs, data.draw(st.integers(0, 3), label="seed"))
    initial = state.snapshot()
    live: list[tuple[PodRequest, Allocation]] = []
    saved: tuple[dict, list] | None = None
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        op = data.draw(st.sampled_from(OPS), label="op")
        if op == "place":
            req = data.draw(st.sampled_from(reqs), label="request")
            if req.is_gpu:
                want = [fitting_devices(specs, live, req, n) for n in range(len(specs))]
                got = state.device_fits(req, np.arange(len(specs)))
                for n, w in enumerate(want):
                    assert got[n, :len(w)].tolist() == w, (req, n)
            before = state.snapshot()
            reason = outcome(state, specs, live, req)
            decision = placer.decide(req)
            assert same_arrays(state.snapshot(), before), "decide changed the state"
            if reason:
                assert decision.allocation is None and decision.reason == reason
                check_refusal(state, specs, live, req, reason)
                continue
            a = decision.allocation
            assert a is not None and allocation_valid(specs, live, req, a), (req, a)
            state.allocate(req, a)
            live.append((req, a))
        elif op == "release" and live:
            req, a = live.pop(data.draw(st.integers(0, len(live) - 1), label="which"))
            state.release(req, a)
        elif op == "forge":
            forge(data, state, specs, live, reqs)
        elif op == "snapshot":
            saved = (state.snapshot(), list(live))
        elif op == "restore" and saved is not None:
            versions = state.version.copy()
            state.restore(saved[0])
            live = list(saved[1])
            assert same_arrays(state.snapshot(), saved[0], versions=False)
            assert (state.version >= versions).all()
        check_state(state, specs, live)
    # releasing every live allocation, in any order, gives the initial arrays back
    order = data.draw(st.permutations(range(len(live))), label="release order")
    for i in order:
        state.release(*live[i])
    assert same_arrays(state.snapshot(), initial, versions=False)
    assert (state.dev_owner == -1).all()


def forge(data, state: ClusterState, specs: list[NodeSpec], live: list,
          reqs: list[PodRequest]) -> None:
    """A hand-made allocation (as a driver might replay one): committed when the oracle finds
    it valid; otherwise `allocate` raises ValueError and leaves the state as it was."""
    req = data.draw(st.sampled_from(reqs), label="forged request")
    n = data.draw(st.integers(0, len(specs) - 1), label="forged node")
    spec = specs[n]
    if req.gpu_count > spec.gpu_count or state.fast_path(req):
        return  # (the trace engine's fast path trusts its own allocations; not forged)
    devs = tuple(data.draw(st.permutations(range(spec.gpu_count)),
                           label="forged devices")[:req.gpu_count])
    milli, memory, start = req.gpu_milli, req.gpu_memory_mib, -1
    if devs:
        mig_ok = not req.mig_profile or (has_mig(spec.model) and req.mig_profile in
                                         get_geometry(spec.model).profile_names())
        if mig_ok:
            milli, memory = expected_charge(spec, devs[0], req)
        if req.mig_profile and mig_ok:
            starts = get_geometry(spec.model).profile(req.mig_profile).starts
            start = data.draw(st.sampled_from(starts), label="forged start")
    a = Allocation(n, devs, milli, memory, start)
    valid = allocation_valid(specs, live, req, a)
    before = state.snapshot()
    if valid:
        state.allocate(req, a)
        live.append((req, a))
        return
    with pytest.raises(ValueError):
        state.allocate(req, a)
    assert same_arrays(state.snapshot(), before), "a refused allocation changed the state"


HYPOTHESIS = settings(max_examples=40, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("policy", POLICIES)
@HYPOTHESIS
@given(data=st.data())
def test_mixed_fleet_keeps_every_invariant(policy: str, data) -> None:
    run_sequence(data, data.draw(fleets(), label="fleet"), policy)


@HYPOTHESIS
@given(data=st.data())
def test_plain_fleet_keeps_every_invariant(data) -> None:
    """All-soft nodes without taints or budgets: plain requests take the fast path, the
    others (modes, floors, seals, selectors) the general one, on the same arrays."""
    run_sequence(data, data.draw(fleets(plain=True), label="fleet"), "fgd")


def test_device_steps_follow_reasons_order() -> None:
    assert [r for r in REASONS if r in DEVICE_STEPS] == list(DEVICE_STEPS)
