"""NVIDIA time-slicing with `renameByDefault: false`, from NVIDIA's own files kept unedited
(tests/compat/upstream/SOURCES.md): the GPU Operator's e2e config (`plugin-config.yaml`,
10 replicas, not renamed) and the Deployment it runs on the shared node (`plugin-test.yaml`,
`nvidia.com/gpu: 1` with the `nvidia.com/gpu.product: Tesla-T4-SHARED` selector), and the
config blocks of the device plugin's README.

gpugov's choice (docs/migration.md): `nvidia.com/gpu` with GFD's `-SHARED` product selector
is one time-slice replica; without it, whole GPUs. The node configured by NVIDIA's file
serves the replicas under `nvidia.com/gpu` too and writes the `-SHARED` product label."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.compat.upstream_pods import UPSTREAM, upstream_pods

from gpugov.k8s.annotations import (
    ALLOCATION,
    AllocatedDevice,
    Allocation,
    Inventory,
    InventoryDevice,
    encode_allocation,
)
from gpugov.k8s.resources import RequestError, translate
from gpugov.k8s.webhook import admission
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.node.deviceplugin.all_in_one import load_node_file
from gpugov.node.deviceplugin.handshake import candidates
from gpugov.node.deviceplugin.resources import GPU, SHARED, plugin_devices
from gpugov.node.deviceplugin.run import NodeConfigError
from gpugov.node.labels import gfd_labels
from gpugov.node.nvidia_config import NvidiaConfigError, load, parse
from gpugov.node.nvml.discovery import GpuInfo, NodeGpus
from gpugov.node.nvml.source import SharingPolicy

OPERATOR = UPSTREAM / "gpu-operator" / "tests"
README = UPSTREAM / "device-plugin" / "README.md"
T4 = "T4"
SEL = {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}


def _operator_pod() -> dict:
    (p,) = [p for p in upstream_pods() if p.source == "gpu-operator/tests/plugin-test.yaml"]
    return p.pod


def test_the_operators_config_is_time_slicing_served_as_nvidia_gpu() -> None:
    nv = load(OPERATOR / "plugin-config.yaml")
    assert (nv.mode, nv.replicas, nv.rename_by_default) == (DeviceMode.TIMESLICE, 10, False)
    assert nv.serves_gpu_replicas
    assert not nv.fail_requests_greater_than_one  # NVIDIA's default for time-slicing
    assert any("failRequestsGreaterThanOne" in n for n in nv.notes)


def _readme_configs() -> list[dict]:
    blocks = re.findall(r"```yaml\n(version: v1\n.*?)```", README.read_text(), re.S)
    out = []
    for b in blocks:
        if "<" in b or "..." in b:  # the README's templates (`<bool>`) and elided ones
            continue
        out.append(yaml.safe_load(b))
    return out


def test_the_readmes_concrete_sharing_configs_mean_what_nvidia_says() -> None:
    """Each concrete `sharing` block of the README: NVIDIA's plugin advertises `nvidia.com/gpu`
    × replicas unless renameByDefault, then `nvidia.com/gpu.shared` × replicas."""
    seen = 0
    for cfg in _readme_configs():
        if "sharing" not in cfg:
            continue
        nv = parse(cfg, "README")
        rr = cfg["sharing"].get("timeSlicing") or cfg["sharing"].get("mps")
        want_rename = bool(rr.get("renameByDefault", False))
        assert nv.replicas == rr["resources"][0]["replicas"]
        assert nv.rename_by_default is want_rename
        assert nv.serves_gpu_replicas is (not want_rename)
        seen += 1
    assert seen >= 2


def _inventory(mode: DeviceMode = DeviceMode.TIMESLICE, replicas: int = 10) -> Inventory:
    return Inventory((InventoryDevice(0, "GPU-t4", T4, 15360, mode, replicas),))


def test_a_node_with_the_operators_config_advertises_its_replicas_as_nvidia_gpu() -> None:
    nv = load(OPERATOR / "plugin-config.yaml")
    served = plugin_devices(_inventory(), gpu_replicas=nv.serves_gpu_replicas)
    assert len(served[GPU]) == 10 and len(served[SHARED]) == 10  # NVIDIA: 10 × 1 GPU
    assert {d.id for d in served[GPU]} == {d.id for d in served[SHARED]}
    assert all(d.mode is DeviceMode.TIMESLICE for d in served[GPU])
    renamed = plugin_devices(_inventory(), gpu_replicas=False)
    assert GPU not in renamed and len(renamed[SHARED]) == 10


def test_the_agent_writes_gfds_shared_product_label_only_when_not_renamed() -> None:
    node = NodeGpus((GpuInfo(0, "GPU-t4", "Tesla T4", T4, 15360, compute_capability=(7, 5)),))
    sliced = SharingPolicy(DeviceMode.TIMESLICE, 10)
    got = gfd_labels(node, sliced, shared_suffix=True)
    assert got["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"  # what plugin-test.yaml selects
    assert got["nvidia.com/gpu.replicas"] == "10"
    assert got["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert gfd_labels(node, sliced)["nvidia.com/gpu.product"] == "Tesla-T4"
    assert gfd_labels(node, shared_suffix=True)["nvidia.com/gpu.product"] == "Tesla-T4"


def test_the_operators_pod_is_one_replica_and_whole_gpus_without_its_selector() -> None:
    pod = _operator_pod()
    req = admission.pod_request(pod)
    assert req is not None and req.mode is DeviceMode.TIMESLICE and req.count == 1
    assert req.models == (T4,) and req.memory_mib is None  # capped at card/replicas
    bare = {**pod, "spec": {k: v for k, v in pod["spec"].items() if k != "nodeSelector"}}
    whole = admission.pod_request(bare)
    assert whole is not None and whole.mode is DeviceMode.EXCLUSIVE and whole.count == 1


def test_a_replica_may_name_its_memory_and_a_time_sliced_mig_instance_reads_the_same() -> None:
    req = translate({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "3000"}, {}, SEL)
    assert req is not None and (req.mode, req.memory_mib) == (DeviceMode.TIMESLICE, 3000)
    mig = translate({"nvidia.com/gpu": 1}, {}, {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"})
    assert mig is not None and (mig.mode, mig.mig_profile) == (DeviceMode.TIMESLICE, "1g.5gb")
    mps = translate({"nvidia.com/gpu": 1}, {}, {
        **SEL, "nvidia.com/gpu.sharing-strategy": "mps"})
    assert mps is not None and mps.mode is DeviceMode.MPS


@pytest.mark.parametrize("limits, sel, words", [
    ({"nvidia.com/gpu": 2}, SEL, ["2 time-slice replicas", "failRequestsGreaterThanOne",
                                  "instead,"]),
    ({"nvidia.com/gpu": 1}, {"nvidia.com/gpu.sharing-strategy": "time-slicing"},
     ["whole GPUs", "nvidia.com/gpu.shared: 1", "-SHARED"]),
    ({"nvidia.com/gpu": 1}, {"nvidia.com/gpu.sharing-strategy": "mps"},
     ["nvidia.com/gpu.mps: 1"]),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30}, SEL, ["compute share"]),
])
def test_what_cannot_be_a_replica_is_refused_with_what_to_write(limits, sel, words) -> None:
    with pytest.raises(RequestError) as info:
        translate(limits, {}, sel)
    for w in words:
        assert w in str(info.value)


def _pod(name: str, limits: dict[str, str], alloc: Allocation) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": "1",
                         "annotations": {ALLOCATION: encode_allocation(alloc)}},
            "spec": {"nodeName": "n", "containers": [{"name": "c",
                                                       "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"}}


def test_the_device_plugin_hands_a_replica_to_the_spelling_the_pod_used() -> None:
    """Allocate for `nvidia.com/gpu` finds NVIDIA's pod; `nvidia.com/gpu.shared` finds
    gpugov's; the same replica IDs back both."""
    rec = Allocation("n", IsolationLevel.SOFT, (AllocatedDevice(
        0, DeviceMode.TIMESLICE, 100, 1536, uuid="GPU-t4"),))
    nvidia = _pod("nvidia", {"nvidia.com/gpu": "1"}, rec)
    ours = _pod("ours", {"nvidia.com/gpu.shared": "1"}, rec)
    served = plugin_devices(_inventory(), gpu_replicas=True)
    for res, want in ((GPU, "nvidia"), (SHARED, "ours")):
        found, rejected = candidates([nvidia, ours], "n", res, _inventory(),
                                     {d.id for d in served[res]})
        assert [c.name for c in found] == [want] and not rejected


@pytest.mark.parametrize("cfg, field", [
    ({"version": "v2"}, "version"),
    ({"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/mig-1g.5gb", "replicas": 2}]}}}, "resources[0].rename"),
    ({"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/mig-1g.5gb", "replicas": 99,
         "rename": "nvidia.com/mig-1g.5gb.shared"}]}}}, "resources[0].replicas"),
    ({"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 0}, {"name": "nvidia.com/gpu",
                                                    "replicas": 4}]}}}, "replicas"),
    ({"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 4, "devices": [0]}]}}}, "devices"),
    ({"version": "v1", "sharing": {"timeSlicing": {"renameByDefault": "no", "resources": [
        {"name": "nvidia.com/gpu", "replicas": 4}]}}}, "renameByDefault"),
    ({"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 4}]}, "mps": {"resources": [
            {"name": "nvidia.com/gpu", "replicas": 4}]}}}, "mutually exclusive"),
    ({"version": "v1", "flags": {"migStrategy": "uniform"}}, "flags.migStrategy"),
    ({"version": "v1", "flags": {"noSuchFlag": 1}}, "flags.noSuchFlag"),
    ({"version": "v1", "sharing": {"mps": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 64}]}}}, "48"),
    ("text", "top level"),
])
def test_a_config_gpugov_cannot_serve_is_refused_naming_the_field(cfg, field) -> None:
    with pytest.raises(NvidiaConfigError) as info:
        parse(cfg, "cm")
    assert field in str(info.value)


def test_the_node_file_takes_the_nvidia_config_and_refuses_a_contradiction(tmp_path) -> None:
    cfg = yaml.safe_load((OPERATOR / "plugin-config.yaml").read_text())
    f = tmp_path / "node.yaml"
    f.write_text(yaml.safe_dump({"nvidiaConfig": cfg}))
    assert load_node_file(f).sharing() == ("timeslice", 10, True)
    f.write_text(yaml.safe_dump({"nvidiaConfig": cfg, "defaultMode": "mps"}))
    with pytest.raises(NodeConfigError, match="contradicts nvidiaConfig"):
        load_node_file(f)
    f.write_text(yaml.safe_dump({"nvidiaConfig": {"version": "v1", "resources": {"gpus": []}}}))
    with pytest.raises(NodeConfigError, match="resources"):
        load_node_file(f)


_LABELS = st.sampled_from(["nvidia.com/gpu.product", "nvidia.com/gpu.sharing-strategy",
                           "nvidia.com/gpu.replicas", "zone"])
_VALUES = st.sampled_from(["Tesla-T4", "Tesla-T4-SHARED", "NVIDIA-A100-SXM4-80GB-SHARED",
                           "time-slicing", "mps", "none", "4", "a", "x-SHARED"])


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 8), sel=st.dictionaries(_LABELS, _VALUES, max_size=3))
def test_nvidia_gpu_is_never_silently_a_different_size(n, sel):
    """Property: `nvidia.com/gpu: N` is N whole GPUs, or (only with a `-SHARED` product
    selector, and only for N = 1) one replica or MPS client; anything else is refused."""
    try:
        req = translate({"nvidia.com/gpu": n}, {}, sel)
    except RequestError as exc:
        assert "instead," in str(exc)
        return
    assert req is not None
    shared = sel.get("nvidia.com/gpu.product", "").endswith("-SHARED")
    if req.mode is DeviceMode.EXCLUSIVE:
        assert req.count == n and not shared
    else:
        assert shared and n == 1 and req.count == 1
        assert req.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS)
