"""The in-GPU QoS class on the allocation record (issue 20, QoS floor): the device plugin
passes the record's `priority` to the enforcement library, which makes best-effort (1)
launches yield to Guaranteed (0) ones. The class comes from the pod's priority class as the
queue config knows it; a tenant's own `nvidia.com/priority: 0` counts only where its queue
allows Guaranteed work (docs/scheduler.md, QoS class)."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.translate import qos_priority
from gpugov.model.isolation import TrustTier

sys.path.insert(0, str(Path(__file__).parent))
from test_scheduler_modes import T0, nodes, pod, pool, state, tenant  # noqa: E402

SOFT = {names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"}
SHARED = {"nvidia.com/gpu.shared": "1"}


def classes(st_) -> None:
    """`serving` is non-preemptible (gpugov's PriorityPolicy), `batch` preemptible; queue qa
    gets a quota (non-preemptible work runs only within it)."""
    st_.set_object("queue", {"metadata": {"name": "qa"}, "spec": {"quota": {"gpu": 8}}})
    st_.set_object("priorityclass", {"metadata": {"name": "serving"}, "value": 1000})
    st_.set_object("prioritypolicy", {"metadata": {"name": "serving"},
                                      "spec": {"preemptible": False}})
    st_.set_object("priorityclass", {"metadata": {"name": "batch"}, "value": 10})


def records(st_, *pods: dict) -> dict[str, tuple[list[int | None], str]]:
    for p in pods:
        st_.set_pod(p)
    return {b.name: ([d.priority for d in b.record.devices], b.warning)
            for b in st_.cycle(T0).binds}


def test_priority_class_decides_the_qos_class_of_soft_slices_and_replicas() -> None:
    st_ = state(nodes(pool("h", 2, [{"index": "0", "mode": "soft"},
                                    {"index": "1", "mode": "timeslice", "replicas": 4}])))
    classes(st_)
    got = records(st_, pod("infer", limits=SOFT, priorityClassName="serving"),
                  pod("train", limits=SOFT, priorityClassName="batch"),
                  pod("plain", limits=SOFT),
                  pod("ts-infer", limits=SHARED, priorityClassName="serving"),
                  pod("ts-batch", limits=SHARED))
    assert got == {"infer": ([0], ""), "train": ([1], ""), "plain": ([1], ""),
                   "ts-infer": ([0], ""), "ts-batch": ([1], "")}


def test_an_untrusted_priority_0_is_recorded_as_1_with_a_warning() -> None:
    st_ = state(nodes(pool("h", 2, [{"index": "0-1", "mode": "soft"}])),
                [tenant("vip", "team-t", "trusted")])
    classes(st_)
    hami0 = {**SOFT, "nvidia.com/priority": "0"}
    got = records(st_, pod("claims", limits=hami0),
                  pod("claims-batch", limits=hami0, priorityClassName="batch"),
                  pod("serving", limits=hami0, priorityClassName="serving"),
                  pod("trusted", ns="team-t", limits=hami0),
                  pod("asks-low", limits={**SOFT, "nvidia.com/priority": "1"},
                      priorityClassName="serving"))
    assert [got[n][0] for n in ("claims", "claims-batch", "serving", "trusted", "asks-low")] \
        == [[1], [1], [0], [0], [1]]
    assert "nvidia.com/priority: 0 recorded as 1" in got["claims"][1]
    assert "non-preemptible" in got["claims-batch"][1]
    assert not got["serving"][1] and not got["trusted"][1] and not got["asks-low"][1]


def test_whole_gpus_record_no_derived_class() -> None:
    """A whole GPU shares its device with nobody: no board, nothing derived (an explicit
    priority still rides along, lowered like any other)."""
    st_ = state(nodes(pool("h", 2)))
    classes(st_)
    got = records(st_, pod("whole", priorityClassName="serving"),
                  pod("named", limits={names.GPU_RESOURCE: "1", "nvidia.com/priority": "0"}))
    assert got["whole"] == ([None], "")
    assert got["named"][0] == [1] and got["named"][1]


@given(st.sampled_from([None, 0, 1]), st.sampled_from([None, True, False]),
       st.sampled_from(list(TrustTier)))
def test_priority_0_only_where_the_queue_or_trust_allows(explicit, preemptible, trust) -> None:
    prio, warning = qos_priority(explicit, preemptible, trust)
    assert prio in (0, 1)
    if prio == 0:
        assert explicit != 1
        assert preemptible is False or (explicit == 0 and trust is TrustTier.TRUSTED)
    if explicit == 1:
        assert prio == 1
    assert bool(warning) == (explicit == 0 and prio == 1)
