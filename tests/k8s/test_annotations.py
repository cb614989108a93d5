"""The shared annotation codecs: round trips, and refusals that name the field."""

from __future__ import annotations

import json

import pytest

from gpugov.k8s import annotations as ann
from gpugov.k8s.resources import translate
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel


@pytest.mark.parametrize("limits,annots", [
    ({"nvidia.com/gpu": 2}, {}),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000, "nvidia.com/gpucores": 30}, {}),
    ({"nvidia.com/mig-1g.10gb": 1}, {"gpugov.io/model": "A100-SXM4-80GB"}),
    ({}, {"gpu-fraction": "0.5"}),
    ({"nvidia.com/gpu.shared": 1}, {"gpugov.io/topology": "none"}),
])
def test_request_round_trip(limits, annots):
    req = translate(limits, annots)
    back = ann.decode_request(ann.encode_request(req))
    assert back == type(req)(**{**{f: getattr(req, f) for f in req.__slots__},
                               "spellings": ()})


def test_request_unknown_version_refused():
    with pytest.raises(ann.AnnotationError, match="version 2 is not known"):
        ann.decode_request('{"v":2,"count":1,"mode":"exclusive"}')


@pytest.mark.parametrize("text,needle", [
    ("not json", "not JSON"),
    ("[1]", "expected a JSON object"),
    ('{"v":1,"count":0,"mode":"exclusive"}', "count: 0"),
    ('{"v":1,"count":1,"mode":"magic"}', "mode: 'magic'"),
    ('{"v":1,"count":1,"mode":"soft","milli":5000}', "milli: 5000"),
    ('{"v":1,"count":1,"mode":"soft","models":["Z80"]}', "unknown ['Z80']"),
])
def test_request_bad_text_names_field(text, needle):
    with pytest.raises(ann.AnnotationError) as info:
        ann.decode_request(text)
    assert needle in str(info.value) and str(info.value).startswith(ann.REQUEST)


def test_inventory_round_trip_and_refusals():
    inv = ann.Inventory((
        ann.InventoryDevice(0, "GPU-a", "A100-SXM4-80GB", 81920, DeviceMode.MIG, numa=0,
                            nvlink_domain=0, mig=(ann.MigInstance("3g.40gb", 0, "MIG-x"),)),
        ann.InventoryDevice(1, "GPU-b", "A100-SXM4-80GB", 81920, DeviceMode.TIMESLICE,
                            replicas=4, healthy=False),
    ), power_budget_w=3000.0)
    assert ann.decode_inventory(ann.encode_inventory(inv)) == inv
    bad = json.loads(ann.encode_inventory(inv))
    bad["devices"][1]["index"] = 0
    with pytest.raises(ann.AnnotationError, match=r"devices\[1\]\.index: duplicate"):
        ann.decode_inventory(json.dumps(bad))
    bad = json.loads(ann.encode_inventory(inv))
    bad["devices"][0]["memoryMiB"] = -1
    with pytest.raises(ann.AnnotationError, match=r"devices\[0\]\.memoryMiB: -1 is negative"):
        ann.decode_inventory(json.dumps(bad))


def test_allocation_round_trip():
    alloc = ann.Allocation("gpu-node-3", IsolationLevel.SOFT, (
        ann.AllocatedDevice(2, DeviceMode.SOFT, 300, 20480, "GPU-5e1c"),
        ann.AllocatedDevice(0, DeviceMode.MIG, 142, 9856, "GPU-a1b2", "1g.10gb", 3),
    ))
    text = ann.encode_allocation(alloc)
    assert json.loads(text)["devices"][1]["mig"] == {"profile": "1g.10gb", "start": 3}
    assert ann.decode_allocation(text) == alloc
    with pytest.raises(ann.AnnotationError, match=r"devices\[0\]\.milli: 2000"):
        ann.decode_allocation(text.replace('"milli":300', '"milli":2000'))
    ids, t = ann.decode_allocated(ann.encode_allocated(["GPU-a::0"], "2026-01-01T00:00:00Z"))
    assert ids == ["GPU-a::0"] and t.startswith("2026")


def test_allocation_carries_compute_not_limited_and_priority_and_old_records_read_limited():
    memonly = ann.AllocatedDevice(1, DeviceMode.SOFT, 250, 20000, "GPU-5e1c",
                                  compute_limited=False, priority=0)
    text = ann.encode_allocation(ann.Allocation("n", IsolationLevel.SOFT, (memonly,)))
    item = json.loads(text)["devices"][0]
    assert (item["computeLimited"], item["priority"]) == (False, 0)
    assert ann.decode_allocation(text).devices[0] == memonly
    # a record written before these fields (same version): limited, no priority
    old = json.dumps({"v": 1, "node": "n", "isolation": "soft", "devices": [
        {"index": 1, "uuid": "GPU-5e1c", "mode": "soft", "milli": 250, "memoryMiB": 20000}]})
    dev = ann.decode_allocation(old).devices[0]
    assert (dev.compute_limited, dev.priority) == (True, None)
    # a limited device without priority writes neither field (older readers see no change)
    plain = json.loads(ann.encode_allocation(ann.Allocation("n", IsolationLevel.SOFT, (
        ann.AllocatedDevice(1, DeviceMode.SOFT, 250, 20000, "GPU-5e1c"),))))["devices"][0]
    assert "computeLimited" not in plain and "priority" not in plain
    with pytest.raises(ann.AnnotationError, match=r"devices\[0\]\.priority: 2; allowed"):
        ann.decode_allocation(text.replace('"priority":0', '"priority":2'))
    with pytest.raises(ann.AnnotationError, match=r"devices\[0\]\.computeLimited"):
        ann.decode_allocation(text.replace('"computeLimited":false', '"computeLimited":"no"'))


def test_gfd_labels_follow_nvidia_names():
    labels = ann.gfd_labels("H100-SXM5-80GB", 8)
    assert labels[ann.GFD_PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    assert labels[ann.GFD_COUNT] == "8" and labels[ann.GFD_MEMORY] == str(80 * 1024)
