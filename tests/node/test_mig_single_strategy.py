"""NVIDIA's MIG `single` strategy on the node (fake NVML): on a uniform node every instance is
`nvidia.com/gpu` and GFD's labels describe one instance (`<product>-MIG-<profile>`); on a
node that is not uniform nothing MIG is served and the product says `-MIG-INVALID` (count 0),
with NVIDIA's reason; a pod written for single (`nvidia.com/gpu: 1`) is matched to its
recorded instance."""

from __future__ import annotations

from nvml_fake import A100_80

from gpugov.k8s.annotations import AllocatedDevice
from gpugov.model.devices import DeviceMode
from gpugov.node.deviceplugin.all_in_one import NodeFile
from gpugov.node.deviceplugin.handshake import candidates, matching
from gpugov.node.deviceplugin.resources import plugin_devices
from gpugov.node.labels import gfd_labels
from gpugov.node.mig_strategy import single_problem
from gpugov.node.nvidia_config import parse
from gpugov.node.nvml.discovery import discover
from gpugov.node.nvml.source import SharingPolicy, inventory_from

SINGLE = SharingPolicy(mig_strategy="single")


def _pod(dev) -> dict:
    from gpugov.k8s.annotations import Allocation, encode_allocation
    from gpugov.model.isolation import IsolationLevel
    rec = AllocatedDevice(dev.index, DeviceMode.MIG, 142, 9856, dev.uuid, dev.mig_profile,
                          dev.mig_start, dev.mig_uuid)
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": {
        "gpugov.io/allocation": encode_allocation(Allocation("n", IsolationLevel.HARD, (rec,)))}},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {
                "limits": {"nvidia.com/gpu": "1"}}}]}, "status": {"phase": "Pending"}}


def test_a_uniform_node_serves_every_instance_as_a_gpu(node, open_nvml) -> None:
    for _ in range(2):  # two A100-80s, four 1g.10gb each
        node.gpu(A100_80, "cc 8 0", "mig-mode 1", *(f"gi 19 {s}" for s in (0, 1, 2, 3)))
    nv = open_nvml(node)
    gpus = discover(nv)
    labels = gfd_labels(gpus, SINGLE)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert labels["nvidia.com/gpu.count"] == "8" and labels["nvidia.com/mig.strategy"] == "single"
    inv = inventory_from(gpus, sharing=SINGLE)
    assert single_problem(inv) is None
    res = plugin_devices(inv, mig_single=True)
    assert set(res) == {"nvidia.com/gpu"} and len(res["nvidia.com/gpu"]) == 8
    assert all(d.id.startswith("MIG-") for d in res["nvidia.com/gpu"])
    # a pod written for single asks nvidia.com/gpu: 1 and gets the instance recorded for it
    dev = res["nvidia.com/gpu"][5]
    cands, rejected = candidates([_pod(dev)], "n", "nvidia.com/gpu", inv,
                                 {d.id for d in res["nvidia.com/gpu"]})
    assert not rejected and [c.name for c in matching(cands, [dev])] == ["p"]
    # mixed (the default) keeps per-profile names
    assert set(plugin_devices(inv)) == {"nvidia.com/mig-1g.10gb"}


def test_a_node_that_is_not_uniform_serves_nothing_mig_and_says_invalid(node, open_nvml) -> None:
    node.gpu(A100_80, "cc 8 0", "mig-mode 1", "gi 15 0", "gi 14 2")  # 1g.20gb + 2g.20gb
    node.gpu(A100_80, "cc 8 0")  # MIG off
    nv = open_nvml(node)
    gpus = discover(nv)
    inv = inventory_from(gpus, sharing=SINGLE)
    assert "same migEnabled value" in single_problem(inv)
    labels = gfd_labels(gpus, SINGLE)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-INVALID"
    assert labels["nvidia.com/gpu.count"] == "0"
    assert not any(k.startswith("nvidia.com/mig-") for k in plugin_devices(inv, mig_single=True))
    only_mig = type(inv)(inv.devices[:1])
    assert single_problem(only_mig) == "more than one MIG device type present on node"


def test_single_comes_from_node_yaml_or_the_nvidia_config() -> None:
    assert NodeFile.model_validate({"migStrategy": "single"}).mig_strategy() == "single"
    nvidia = {"version": "v1", "flags": {"migStrategy": "single"}}
    assert parse(nvidia).mig_strategy == "single"
    assert NodeFile.model_validate({"nvidiaConfig": nvidia}).mig_strategy() == "single"
    assert NodeFile.model_validate({}).mig_strategy() == "mixed"
