"""One ledger for both paths: gpugov's scheduler charges the DRA claims kube-scheduler
allocated from gpugov's devices to their Tenant's queue, so a device-plugin pod is not
admitted into quota room a claim holds (pure tests; the real apiserver in
test_dra_scheduler_ledger_e2e.py)."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.control.resources import ResourceSet
from gpugov.k8s.annotations import MigInstance
from gpugov.k8s.dra.ledger import Charge, QueueNode, claim_charge, device_index, pod_usage
from gpugov.k8s.dra.slices import DRIVER, Features, node_slices
from gpugov.k8s.scheduler.dra_claims import ClaimBook, counted, ledger_vector, value

sys.path.insert(0, str(Path(__file__).parent))
from dra_support import gpu, inventory  # noqa: E402
from test_scheduler_state import T0, make, pod, queue  # noqa: E402

from gpugov.model.devices import DeviceMode  # noqa: E402

SLICES = node_slices("dra-n", inventory(
    gpu(0), gpu(1), gpu(2, DeviceMode.SOFT),
    gpu(3, DeviceMode.MIG, mig=(MigInstance("3g.40gb", 0, "MIG-x"),))), Features(), 1)


def allocated(name: str, *devices: str, ns: str = "team-a", consumed: dict | None = None,
              verdict: str | None = None) -> dict:
    results = [{"request": "g", "driver": DRIVER, "pool": "dra-n", "device": d,
                **({"consumedCapacity": consumed} if consumed else {})} for d in devices]
    status: dict = {"allocation": {"devices": {"results": results}}}
    if verdict:
        status["devices"] = [{"driver": DRIVER, "pool": "dra-n", "device": devices[0],
                              "conditions": [{"type": verdict, "status": "True"}]}]
    return {"metadata": {"name": name, "namespace": ns, "uid": f"u-{name}"},
            "status": status}


def test_a_claims_charge_in_the_ledgers_units_is_the_governors() -> None:
    """Whole GPU: its card and 1 GPU; a slice: what it consumed; a MIG instance: its share
    and one of its profile, where the tree counts that profile."""
    devices = device_index(SLICES)
    res = ResourceSet.of(["mig-3g.40gb"])
    whole = value(counted(allocated("w", "gpu-0", "gpu-1")), devices)
    assert whole.charge == claim_charge(allocated("w", "gpu-0", "gpu-1"), devices)
    vec = ledger_vector(res, whole.charge)
    assert (vec[0], vec[3], vec[4]) == (2000.0, 2 * 81920.0, 0.0)  # milli, MiB, instances
    part = value(counted(allocated("s", "gpu-2", consumed={"memory": "20Gi",
                                                            "compute": "30"})), devices)
    vec = ledger_vector(res, part.charge)
    assert (vec[0], vec[3]) == (300.0, 20 * 1024.0)
    mig = value(counted(allocated("m", "gpu-3-mig-3g-40gb-0")), devices)
    assert ledger_vector(res, mig.charge)[4] == 1.0
    assert len(ledger_vector(ResourceSet.of([]), mig.charge)) == 4  # not counted: no column


def test_which_claims_are_counted() -> None:
    assert counted({"metadata": {}, "status": {}}) is None  # not allocated
    other = allocated("o", "gpu-0")
    other["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.nvidia.com"
    assert counted(other) is None  # another driver's device
    assert counted(allocated("r", "gpu-0", verdict="gpugov.io/refused")) is None
    assert counted(allocated("a", "gpu-0", verdict="gpugov.io/admitted")) is not None
    assert counted(allocated("w", "gpu-0")) is not None  # ungoverned, or not decided yet


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=80), st.integers(), st.floats(allow_nan=True),
                 st.sampled_from(["1e400", "-5", "9" * 70, "1Gi", "12 cores", ""])),
       st.integers(0, 40))
def test_a_hostile_allocation_is_refused_by_name_or_charged_what_it_says(mem, n) -> None:
    """Never a crash, never a silent zero: a charge, or an error naming the field."""
    devices = device_index(SLICES)
    c = allocated("h", *(["gpu-2"] * n), consumed={"memory": mem, "compute": "30"})
    got = value(counted(c) or {"metadata": {}, "status": c["status"]}, devices)
    if n == 0:
        assert counted(c) is None
        return
    if got.charge is None:
        assert "status.allocation.devices.results" in got.error
    else:
        assert n <= 32 and got.charge.gpu == Fraction(30 * n, 100)


def _state(limit: float = 2):
    st = make(nodes=1, gpus=4, queues=[queue("qa", quota={"gpu": limit},
                                             limit={"gpu": limit}), queue("qb")])
    for s in SLICES:
        st.set_object("resourceslice", s)
    return st


def test_a_device_plugin_pod_is_held_over_quota_while_a_claim_fills_its_queue() -> None:
    st = _state()
    st.set_object("resourceclaim", allocated("two", "gpu-0", "gpu-1"))
    st.set_pod(pod("dp"))
    plan = st.cycle(T0)
    assert not plan.binds
    (c,) = [c for c in plan.conditions if c.name == "dp"]
    assert c.code == "over-quota" and "queue qa" in c.message, c.message
    assert plan.queue_status["qa"]["usage"]["gpu"] == 2
    assert plan.queue_status["qa"]["draUsage"]["gpu"] == 2
    assert plan.queue_status["qa"]["draUsage"]["gpumem"] == 160
    # another queue is not charged for it
    st.set_pod(pod("other", ns="team-b"))
    assert [b.name for b in st.cycle(T0 + 1).binds] == ["other"]
    # the claim is deallocated (the pod left): the held pod binds, the usage is the pod's
    st.set_object("resourceclaim", {"metadata": {"name": "two", "namespace": "team-a"},
                                    "status": {}})
    plan = st.cycle(T0 + 2)
    assert [b.name for b in plan.binds] == ["dp"]
    assert plan.queue_status["qa"]["draUsage"]["gpu"] == 0


def test_a_refused_claim_or_a_claim_of_no_queue_charges_nothing() -> None:
    st = _state()
    st.set_object("resourceclaim", allocated("no", "gpu-0", "gpu-1",
                                             verdict="gpugov.io/refused"))
    st.set_object("resourceclaim", allocated("stray", "gpu-0", "gpu-1", ns="nobody"))
    st.set_pod(pod("dp"))
    assert [b.name for b in st.cycle(T0).binds] == ["dp"]
    assert st.errors["claim"] == 1  # the stray claim is said once, naming it


def test_a_claim_that_cannot_be_valued_holds_its_queue_naming_the_claim() -> None:
    st = _state(limit=4)
    st.set_object("resourceclaim", allocated("ghost", "gpu-9"))
    st.set_pod(pod("dp"))
    st.set_pod(pod("elsewhere", ns="team-b"))
    plan = st.cycle(T0)
    assert [b.name for b in plan.binds] == ["elsewhere"]
    (c,) = [c for c in plan.conditions if c.name == "dp"]
    assert c.code == "over-quota"
    assert "ResourceClaim team-a/ghost" in c.message
    assert "device dra-n/gpu-9 is not in gpugov's published ResourceSlices" in c.message
    st.delete_object("resourceclaim", {"metadata": {"name": "ghost", "namespace": "team-a"}})
    assert [b.name for b in st.cycle(T0 + 1).binds] == ["dp"]


def test_the_governor_counts_the_schedulers_pods_not_its_claims_twice() -> None:
    """The one rule: status.usage includes the claims the scheduler counted, status.draUsage
    says which part; the governor takes usage - draUsage and counts claims itself."""
    assert pod_usage({"usage": {"gpu": 3, "gpumem": 100},
                      "draUsage": {"gpu": 2, "gpumem": 160}}) == {"gpu": 1.0, "gpumem": 0.0}
    assert pod_usage({"usage": {"gpu": 1.5}}) == {"gpu": 1.5}  # an older scheduler
    assert pod_usage({"usage": {"gpu": True}, "draUsage": "x"}) == {}
    from gpugov.k8s.dra.governor import queues_of

    (q,) = queues_of([{"metadata": {"name": "qa"}, "spec": {"limit": {"gpu": 2}},
                       "status": {"usage": {"gpu": 2}, "draUsage": {"gpu": 2}}}]).values()
    assert isinstance(q, QueueNode) and q.usage["gpu"] == 0.0
    from gpugov.k8s.dra.ledger import Ledger

    led = Ledger({"qa": q})
    assert led.admit("u", "qa", Charge(Fraction(2))) == ""  # the claim itself, once


def test_the_book_recounts_only_when_a_charge_can_change() -> None:
    book = ClaimBook()
    assert not book.set_slice(SLICES[0])  # no claim yet: nothing to count again
    c = allocated("a", "gpu-0")
    assert book.set_claim(c)
    c2 = {**c, "status": {**c["status"], "reservedFor": [{"resource": "pods", "uid": "x"}]}}
    assert book.set_claim(c2)  # a reservation says whose it is (gpugov's own: its pod's)
    assert not book.set_claim(c2)  # the same again: nothing to count again
    assert book.set_claim(allocated("a", "gpu-0", verdict="gpugov.io/refused"))
    assert not book.claims


@pytest.mark.parametrize("kind", ["resourceclaim", "resourceslice"])
def test_the_scheduler_watches_claims_and_slices(kind) -> None:
    from gpugov.k8s.scheduler.runner import PATHS

    assert PATHS[kind].startswith("/apis/resource.k8s.io/v1/")
