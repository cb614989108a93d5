"""The scheduler reads other projects' spellings through the shared translation: Volcano
PodGroups form gangs like scheduler-plugins' ones, KAI's priorityClassName label is the
priority class, HAMi's N-device slices and memory percentages are placed per device."""

from __future__ import annotations

from tests.k8s.test_scheduler_state import T0, make, pod, queue

from gpugov.k8s.annotations import decode_allocation
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.translate import pod_info


def volcano_pod(name: str, group: str) -> dict:
    obj = pod(name, gpus=4)
    obj["metadata"]["annotations"][names.VOLCANO_GROUP_ANNOTATION] = group
    return obj


def test_volcano_podgroup_is_a_gang_all_or_nothing() -> None:
    st = make(nodes=3, gpus=4)
    st.set_object("vcpodgroup", {"apiVersion": "scheduling.volcano.sh/v1beta1",
                                 "kind": "PodGroup",
                                 "metadata": {"name": "vg", "namespace": "team-a"},
                                 "spec": {"minMember": 3}})
    st.set_pod(volcano_pod("v0", "vg"))
    st.set_pod(volcano_pod("v1", "vg"))
    plan = st.cycle(T0)
    assert not plan.binds and {c.code for c in plan.conditions} == {"gang-incomplete"}
    assert "2 of PodGroup team-a/vg's minMember 3" in plan.conditions[0].message
    st.set_pod(volcano_pod("v2", "vg"))
    plan = st.cycle(T0 + 1)
    assert sorted(b.name for b in plan.binds) == ["v0", "v1", "v2"]
    st.delete_object("vcpodgroup", {"metadata": {"name": "vg", "namespace": "team-a"}})
    st.set_pod(volcano_pod("w0", "vg"))
    plan = st.cycle(T0 + 2)
    assert any("does not exist" in c.message for c in plan.conditions)


def test_kai_priority_class_label_counts_as_the_priority_class() -> None:
    obj = pod("train-pod")
    obj["metadata"]["labels"][names.KAI_PRIORITY_LABEL] = "train"
    assert pod_info(obj).priority_class == "train"
    obj["spec"]["priorityClassName"] = "build"  # the spec wins where both are set
    assert pod_info(obj).priority_class == "build"


def test_hami_n_device_slices_are_bound_to_n_devices_with_a_per_card_share() -> None:
    st = make(nodes=1, gpus=4, queues=[queue("qa"), queue("qb")])
    limits = {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "30",
              "nvidia.com/gpucores": "30"}
    for i in range(4):
        st.set_pod(pod(f"v{i}", limits=limits))
    plan = st.cycle(T0)
    assert len(plan.binds) == 4, [c.message for c in plan.conditions]
    per_device: dict[int, int] = {}
    for b in plan.binds:
        record = decode_allocation(b.record) if isinstance(b.record, str) else b.record
        assert len({d.index for d in record.devices}) == 2
        for d in record.devices:
            assert (d.milli, d.memory_mib) == (300, -(-81920 * 30 // 100))
            per_device[d.index] = per_device.get(d.index, 0) + d.milli
    assert max(per_device.values()) <= 1000  # 4 pods x 2 slices x 300 spread on 4 cards
