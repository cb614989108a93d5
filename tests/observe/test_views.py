"""The pure join of declared / allocated / used views (no I/O)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from observe_data import MIB, QUEUES_YAML, device, node, pod

from gpugov.observe.reconciler import load_tree, records
from gpugov.observe.views import DeviceUse, reconcile


def _join(pods, nodes, uses, agents=("node-1",), tree=None):
    recs, node_recs, _ = records(pods, nodes)
    return reconcile(recs, node_recs, uses, set(agents), tree)


def test_idle_pod_counts_its_allocation_as_idle_and_a_busy_one_does_not() -> None:
    pods = [pod("idle", request={"count": 1}, devices=[device("GPU-1")]),
            pod("busy", request={"count": 1}, devices=[device("GPU-2", 1)])]
    uses = [DeviceUse("team-a", "idle", "GPU-1", 2 * 1024 * MIB, 0.0),
            DeviceUse("team-a", "busy", "GPU-2", 4 * 1024 * MIB, 0.8)]
    rows = {r.pod: r for r in _join(pods, [node("node-1", ["GPU-1", "GPU-2"])], uses).pods}
    assert rows["idle"].used.gpus == 0 and rows["idle"].idle_compute == 1.0
    assert rows["busy"].used.gpus == 1 and rows["busy"].idle_compute == 0.0
    assert rows["busy"].used.compute == pytest.approx(0.8)
    assert rows["busy"].efficiency("memory") == pytest.approx(4 / 80)
    assert rows["idle"].allocated.memory_bytes == 81920 * MIB


def test_oversized_request_shows_declared_far_above_used() -> None:
    p = pod("big", request={"count": 1, "milli": 500, "memoryMiB": 40960},
            devices=[device("GPU-1", mode="soft", milli=500, memory_mib=40960)])
    row = _join([p], [node("node-1", ["GPU-1"])],
                [DeviceUse("team-a", "big", "GPU-1", 1024 * MIB, 0.1)]).pods[0]
    assert row.declared.memory_bytes == 40960 * MIB
    assert row.declared.compute == pytest.approx(0.5)
    assert row.efficiency("memory") == pytest.approx(1 / 40)
    assert row.efficiency("compute") == pytest.approx(0.2)


def test_pod_without_annotations_is_read_from_its_limit_and_said() -> None:
    rec = _join([pod("plain", gpu_limit=2, queue=None, tenant=None, devices=None)],
                [node("node-1", ["GPU-1", "GPU-2"])], [])
    row = rec.pods[0]
    assert row.declared.gpus == 2 and row.allocated is None
    assert row.queue == "unknown" and row.tenant == "unknown"
    assert any("no gpugov.io/request annotation" in m and "team-a/plain" in m
               for _, m in rec.problems)


def test_cpu_only_pods_are_ignored() -> None:
    assert _join([pod("web", queue=None, tenant=None)], [], []).pods == []


@pytest.mark.parametrize("raw, words", [
    ({"gpugov.io/allocation": "{not json"}, "not JSON"),
    ({"gpugov.io/allocation": json.dumps({"v": 9, "devices": []})}, "v=9"),
    ({"gpugov.io/allocation": json.dumps({"v": 1, "devices": [{"index": 0}]})}, "'uuid'"),
    ({"gpugov.io/request": json.dumps({"v": 1, "count": -1})}, "'count' = -1"),
])
def test_malformed_annotations_are_reported_not_raised(raw, words) -> None:
    rec = _join([pod("bad", request={"count": 1}, raw=raw)], [node("node-1", ["GPU-1"])], [])
    assert len(rec.pods) == 1
    assert any(words in m and "team-a/bad" in m for _, m in rec.problems), rec.problems


def test_node_without_agent_leaves_used_unknown_and_names_the_node() -> None:
    p = pod("p", node="node-9", request={"count": 1}, devices=[device("GPU-9")])
    rec = _join([p], [node("node-9", ["GPU-9"])], [], agents=())
    assert rec.pods[0].used is None and rec.pods[0].idle_compute == 0.0
    assert rec.nodes_without_agent == ["node-9"]
    assert any("node node-9" in m and "no gpugov exporter" in m for _, m in rec.problems)


def test_queues_get_quota_fair_share_usage_and_pending(tmp_path: Path) -> None:
    cfg = tmp_path / "queues.yaml"
    cfg.write_text(QUEUES_YAML)
    tree = load_tree(cfg)
    pods = [pod("a1", request={"count": 1}, devices=[device("GPU-1")]),
            pod("a2", request={"count": 1}, devices=[device("GPU-2", 1)]),
            pod("a3", request={"count": 1}, devices=[device("GPU-3", 2)]),
            pod("b1", ns="team-b", queue="team-b", tenant="team-b", node=None,
                phase="Pending", request={"count": 2})]
    rec = _join(pods, [node("node-1", ["GPU-1", "GPU-2", "GPU-3", "GPU-4"])], [], tree=tree)
    q = {r.queue: r for r in rec.queues}
    assert q["team-a"].usage_gpus == 3 and q["team-a"].pending_pods == 0
    assert q["team-b"].usage_gpus == 0 and q["team-b"].pending_pods == 1
    assert q["org"].usage_gpus == 3 and q["org"].pending_pods == 1
    assert q["team-a"].quota_gpus == 2 and q["org"].quota_gpus == 4
    # 4 GPUs, team-a wants 3, team-b 2: each gets its guaranteed 2
    assert q["team-b"].fair_share_gpus == pytest.approx(2)
    assert q["team-a"].fair_share_gpus == pytest.approx(2)


def test_timeslice_overcommit_is_sum_of_limits_over_card() -> None:
    pods = [pod(f"ts{i}", request={"count": 1},
                devices=[device("GPU-1", mode="timeslice", milli=250, memory_mib=30720)])
            for i in range(3)]
    rec = _join(pods, [node("node-1", ["GPU-1"], memory_mib=81920)], [])
    assert len(rec.devices) == 1
    assert rec.devices[0].overcommit == pytest.approx(3 * 30720 / 81920)


def test_reads_the_annotations_the_scheduler_and_webhook_write() -> None:
    """The k8s room's encoders are the writers of the contract; the join reads their output
    (and fills a UUID the allocation left empty from the node inventory)."""
    from gpugov.k8s import annotations as a
    from gpugov.model.devices import DeviceMode
    from gpugov.model.gpu_request import GpuRequest
    from gpugov.model.isolation import IsolationLevel

    req = a.encode_request(GpuRequest(count=1, mode=DeviceMode.SOFT, milli=250,
                                      memory_mib=10240))
    alloc = a.encode_allocation(a.Allocation("node-1", IsolationLevel.SOFT, (
        a.AllocatedDevice(index=1, mode=DeviceMode.SOFT, milli=250, memory_mib=10240),)))
    p = pod("enc", raw={a.REQUEST: req, a.ALLOCATION: alloc})
    rec = _join([p], [node("node-1", ["GPU-0", "GPU-1"])],
                [DeviceUse("team-a", "enc", "GPU-1", 5120 * MIB, 0.2)])
    row = rec.pods[0]
    assert not rec.problems
    assert row.declared.compute == 0.25 and row.declared.memory_bytes == 10240 * MIB
    assert row.allocated.memory_bytes == 10240 * MIB
    assert row.used.memory_bytes == 5120 * MIB and row.efficiency("memory") == 0.5


def test_a_device_held_alone_is_measured_by_its_own_fields() -> None:
    """A whole GPU without the enforcement library: the exporter cannot name the pod, the
    reconciler can (it is the device's only holder)."""
    pods = [pod("idle", request={"count": 1}, devices=[device("GPU-1")]),
            pod("busy", request={"count": 1}, devices=[device("GPU-2", 1)])]
    devices = {"GPU-1": (0.0, 512 * MIB), "GPU-2": (0.7, 8192 * MIB)}
    recs, nodes, _ = records(pods, [node("node-1", ["GPU-1", "GPU-2"])])
    rows = {r.pod: r for r in reconcile(recs, nodes, [], {"node-1"}, devices=devices).pods}
    assert rows["idle"].idle_compute == 1.0 and rows["idle"].used.memory_bytes == 512 * MIB
    assert rows["busy"].used.compute == 0.7 and rows["busy"].used.gpus == 1
    assert rows["busy"].idle_compute == 0.0


def test_a_shared_device_without_per_pod_numbers_is_unknown_not_idle() -> None:
    pods = [pod(f"s{i}", request={"count": 1, "milli": 500},
                devices=[device("GPU-1", mode="soft", milli=500, memory_mib=40960)])
            for i in range(2)]
    recs, nodes, _ = records(pods, [node("node-1", ["GPU-1"])])
    # the regions gave memory but no device time; the card is 90 % busy, shared by two pods
    uses = [DeviceUse("team-a", f"s{i}", "GPU-1", 1024 * MIB, None) for i in range(2)]
    rec = reconcile(recs, nodes, uses, {"node-1"}, devices={"GPU-1": (0.9, 4096 * MIB)})
    for row in rec.pods:
        assert row.used.compute is None and row.used.gpus is None
        assert row.used.memory_bytes == 1024 * MIB
        assert row.idle_compute == 0.0  # unknown is never billed as idle
        assert row.efficiency("compute") is None


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_are_in_no_view(phase) -> None:
    p = pod("done", phase=phase, request={"count": 1}, devices=[device("GPU-1")])
    rec = _join([p], [node("node-1", ["GPU-1"])], [])
    assert rec.pods == [] and rec.devices == [] and rec.queues == []


def test_one_bad_queue_object_does_not_hide_the_other_quotas() -> None:
    from gpugov.observe.reconciler import tree_from_queues

    def q(name: str, **spec: object) -> dict:
        return {"kind": "Queue", "metadata": {"name": name}, "spec": spec}

    tree, problems = tree_from_queues([q("org", quota={"gpu": 4}),
                                       q("team", parent="org", quota={"gpu": 2}),
                                       q("orphan", parent="gone", quota={"gpu": 1})])
    assert tree is not None and sorted(tree.names) == ["org", "team"]
    assert len(problems) == 1 and "'orphan' left out" in problems[0]
    assert "gone" in problems[0]
    tree, problems = tree_from_queues([q("a", quota={"gpu": 1})])
    assert tree.names == ["a"] and problems == []


def test_a_pod_is_charged_to_its_namespaces_tenant_not_to_the_queue_its_annotations_claim(
        ) -> None:
    """Chargeback trusts the Tenant objects, never a pod's annotations (issue 18): a pod of
    team-a that claims team-b's queue is still charged to team-a, and the claim is reported."""
    from gpugov.observe.cluster import Tenancy

    forged = pod("sneaky", request={"count": 1}, devices=[device("GPU-1")])
    forged["metadata"]["annotations"].update({"gpugov.io/queue": "team-b",
                                              "gpugov.io/tenant": "team-b"})
    honest = pod("fine", request={"count": 1}, devices=[device("GPU-2")])
    tenancy = Tenancy(
        tenants=[{"metadata": {"name": "a"}, "spec": {"namespaces": ["team-a"], "queue": "qa"}},
                 {"metadata": {"name": "b"}, "spec": {"namespaces": ["team-b"], "queue": "qb"}}],
        queues={"qa": None, "qb": None}, labels={})
    recs, _, _ = records([forged, honest], [node("node-1", ["GPU-1", "GPU-2"])], tenancy.owner)
    by_name = {r.name: r for r in recs}
    assert (by_name["sneaky"].tenant, by_name["sneaky"].queue) == ("a", "qa")
    assert (by_name["fine"].tenant, by_name["fine"].queue) == ("a", "qa")
    assert any("charged to the Tenant's" in p for p in by_name["sneaky"].problems)
    # a namespace no Tenant claims is charged to nobody's queue, whatever it says
    assert Tenancy([], {}, {}).owner("team-c") == ("unknown", "unknown")


def test_a_small_slice_using_part_of_its_share_is_not_called_idle() -> None:
    """The idle threshold is a share of what the pod holds on the device: an absolute 5 %
    of the device flagged a 0.1-GPU client using 60 % of its share (0.06 → rounding, young
    rate windows) as an idle offender while its device was busy."""
    from gpugov.observe.views import AllocatedDevice, DeviceUse, PodRecord, used_amount

    def pod(milli: int) -> PodRecord:
        return PodRecord("t", "p", "Running", "n", "t", "q", None,
                         (AllocatedDevice("GPU-a", 0, "mps", milli, None),))

    def idle(milli: int, busy: float) -> float:
        return used_amount(pod(milli), [DeviceUse("t", "p", "GPU-a", None, busy)], 0.05)[1]

    assert idle(100, 0.03) == 0.0  # 30 % of its 0.1 share: in use
    assert idle(100, 0.001) == 0.1  # 1 % of its share: idle
    assert idle(1000, 0.03) == 1.0  # a whole GPU 3 % busy: idle, as before
    assert idle(1000, 0.06) == 0.0
