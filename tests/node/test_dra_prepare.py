"""The DRA plugin's prepare step without a kubelet: what each refusal says, hostile
allocation values, and the committed stubs of the kubelet's DRA and registration protos."""

from __future__ import annotations

import asyncio
import copy
import filecmp
import sys
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.k8s.dra.slices import Features
from gpugov.model.devices import DeviceMode
from gpugov.node.dra.plugin import DraPlugin
from gpugov.node.dra.prepare import NodePaths, PrepareError, build
from gpugov.node.proto import dra_v1_pb2 as pb
from gpugov.node.proto import dra_v1_pb2_grpc as pb_grpc
from gpugov.node.proto import pluginregistration_pb2 as reg_pb
from gpugov.node.proto import pluginregistration_pb2_grpc as reg_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "k8s"))
from dra_support import gpu, inventory  # noqa: E402

ON = Features(consumable_capacity=True)
INV = inventory(gpu(0), gpu(1, DeviceMode.SOFT), gpu(2, DeviceMode.MPS, replicas=2))


def _claim(results: list[dict], config: list | None = None) -> dict:
    alloc: dict = {"devices": {"results": results}}
    if config:
        alloc["devices"]["config"] = config
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u-1"},
            "status": {"allocation": alloc}}


def _r(device: str, request: str = "gpu", pool: str = "n", **extra) -> dict:
    return {"request": request, "driver": "gpu.gpugov.io", "pool": pool, "device": device,
            **extra}


def _paths(tmp_path: Path, library: bool = True) -> NodePaths:
    return NodePaths(tmp_path / "cdi", tmp_path / "state",
                     tmp_path / "lib.so" if library else None)


@pytest.mark.parametrize(("claim", "says"), [
    ({"metadata": {"name": "c", "namespace": "ns"}}, "status.allocation: not allocated"),
    (_claim([_r("gpu-0", pool="other")]), "pool: 'other' is not this node ('n')"),
    (_claim([_r("gpu-7")]), "device: 'gpu-7' is not on node n"),
    (_claim([_r("gpu-0", "a"), _r("gpu-1", "b")]), "one gpu.gpugov.io request per claim"),
    (_claim([_r("gpu-2-mps-0")]), "MPS clients need the MPS control daemon"),
    (_claim([_r("gpu-0")], [{"opaque": {"driver": "gpu.gpugov.io", "parameters": {}}}]),
     "config[0].opaque.parameters: apiVersion/kind None/None; allowed: "
     "gpu.gpugov.io/v1alpha1/GpuConfig"),
    (_claim([_r("gpu-0")], [{"opaque": {"driver": "gpu.gpugov.io", "parameters": {
        "apiVersion": "gpu.gpugov.io/v1alpha1", "kind": "GpuConfig", "qos": "gold"}}}]),
     "parameters.qos: not a GpuConfig field; allowed: priority"),
    (_claim([_r("gpu-0")], [{"opaque": {"driver": "gpu.gpugov.io", "parameters": {
        "apiVersion": "gpu.gpugov.io/v1alpha1", "kind": "GpuConfig", "priority": 7}}}]),
     "parameters.priority: 7; allowed: 0 (high), 1 (low)"),
    (_claim([_r("gpu-1", consumedCapacity={"memory": "1e400"})]),
     "consumedCapacity.memory"),
    (_claim([_r("gpu-1", consumedCapacity={"compute": "250"})]),
     "consumedCapacity.compute: '250'; allowed: 1..100"),
])
def test_what_cannot_be_served_is_refused_naming_the_field(tmp_path, claim, says) -> None:
    with pytest.raises(PrepareError, match=None) as e:
        build(claim, "n", INV, ON, _paths(tmp_path))
    assert says in str(e.value), str(e.value)


def test_an_mps_client_gets_the_daemon_and_its_caps(tmp_path) -> None:
    paths = _paths(tmp_path)
    (paths.state_dir / "mps" / "pipe").mkdir(parents=True)
    (paths.state_dir / "mps" / "pipe" / "control").touch()  # the running daemon's pipe
    got = build(_claim([_r("gpu-2-mps-1")]), "n", INV, ON, paths)
    edits = got.spec["devices"][0]["containerEdits"]
    env = dict(e.split("=", 1) for e in edits["env"])
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/pipe"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"  # 2 clients per GPU
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40960M"
    assert not any(k.startswith("GPUGOV_") and k != "GPUGOV_CLAIM" for k in env)  # no library
    assert {m["containerPath"]: m["hostPath"] for m in edits["mounts"]} == {
        "/mps/pipe": str(paths.state_dir / "mps" / "pipe"),
        "/dev/shm": str(paths.state_dir / "mps" / "shm")}


def test_a_claims_gpuconfig_priority_reaches_the_container(tmp_path) -> None:
    cfg = {"opaque": {"driver": "gpu.gpugov.io", "parameters": {
        "apiVersion": "gpu.gpugov.io/v1alpha1", "kind": "GpuConfig", "priority": 1}},
        "source": "FromClaim"}
    other = {"opaque": {"driver": "other.example.com", "parameters": {"anything": 1}},
             "source": "FromClass"}  # another driver's config is not ours to judge
    got = build(_claim([_r("gpu-0")], [other, cfg]), "n", INV, ON, _paths(tmp_path))
    env = got.spec["devices"][0]["containerEdits"]["env"]
    assert "GPUGOV_TASK_PRIORITY=1" in env and "CUDA_TASK_PRIORITY=1" in env


def test_a_slice_without_the_library_is_refused_and_a_whole_gpu_is_not(tmp_path) -> None:
    slice_ = _claim([_r("gpu-1", consumedCapacity={"memory": "10Gi", "compute": "50"})])
    with pytest.raises(PrepareError, match="need the enforcement library"):
        build(slice_, "n", INV, ON, _paths(tmp_path, library=False))
    whole = build(_claim([_r("gpu-0")]), "n", INV, ON, _paths(tmp_path, library=False))
    assert "mounts" not in whole.spec["devices"][0]["containerEdits"]
    # a slice allocated the whole card (the capacity default) is a whole GPU: no limits
    full = build(_claim([_r("gpu-1", consumedCapacity={"memory": "81920Mi",
                                                        "compute": "100"})]),
                 "n", INV, ON, _paths(tmp_path, library=False))
    assert not any("LIMIT" in e for e in full.spec["devices"][0]["containerEdits"]["env"])


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.text(max_size=80), st.integers(), st.floats(), st.none(),
                 st.lists(st.integers(), max_size=3)))
def test_any_consumed_capacity_value_is_a_limit_or_a_named_refusal(value) -> None:
    claim = _claim([_r("gpu-1", consumedCapacity={"memory": value, "compute": value})])
    paths = NodePaths(Path("/nonexistent/cdi"), Path("/nonexistent/state"), Path("/lib.so"))
    try:
        got = build(copy.deepcopy(claim), "n", INV, ON, paths)
    except PrepareError as e:
        assert "consumedCapacity" in str(e)
        return
    env = dict(e.split("=", 1) for e in got.spec["devices"][0]["containerEdits"]["env"])
    assert 0 < int(env.get("GPUGOV_CORE_LIMIT_0", "1")) <= 100


def test_each_claim_fails_alone_over_grpc(tmp_path) -> None:
    """A direct gRPC client (what the kubelet sends): one good and one unknown claim in one
    call — the good one is prepared, the other carries its error; GetInfo names the socket."""
    good = {"metadata": {"name": "good", "namespace": "ns", "uid": "u-good"},
            "status": {"allocation": {"devices": {"results": [_r("gpu-0")]}}}}

    class Claims:
        async def get_claim(self, namespace: str, name: str) -> dict | None:
            return good if name == "good" else None

    async def main() -> None:
        short = Path(tmp_path)
        plugin = DraPlugin("n", lambda: INV, ON, _paths(short), Claims(), short / "p",
                           short / "r")
        await plugin.start()
        try:
            async with grpc.aio.insecure_channel(f"unix://{plugin.reg_socket}") as ch:
                info = await reg_grpc.RegistrationStub(ch).GetInfo(reg_pb.InfoRequest())
            assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
                "DRAPlugin", "gpu.gpugov.io", str(plugin.socket), ["v1.DRAPlugin"])
            async with grpc.aio.insecure_channel(f"unix://{plugin.socket}") as ch:
                stub = pb_grpc.DRAPluginStub(ch)
                got = await stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[
                    pb.Claim(namespace="ns", name="good", uid="u-good"),
                    pb.Claim(namespace="ns", name="gone", uid="u-gone")]))
                assert got.claims["u-good"].devices[0].cdi_device_ids == \
                    ["gpugov.io/claim=u-good"]
                assert "ResourceClaim ns/gone not found" in got.claims["u-gone"].error
                # the claim was deleted and created again under the same name: refused
                again = await stub.NodePrepareResources(pb.NodePrepareResourcesRequest(
                    claims=[pb.Claim(namespace="ns", name="good", uid="u-other")]))
                assert "has UID u-good, not u-other" in again.claims["u-other"].error
        finally:
            await plugin.stop()

    asyncio.run(main())


def test_generated_dra_stubs_match_the_protos(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    from gpugov.node.proto import generate_dra

    generate_dra.generate(tmp_path)
    here = Path(generate_dra.__file__).parent
    for stem in ("dra_v1", "pluginregistration"):
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            fresh = tmp_path / "gpugov" / "node" / "proto" / (stem + suffix)
            assert filecmp.cmp(fresh, here / (stem + suffix), shallow=False), (
                f"{stem}{suffix} is stale: run `python -m gpugov.node.proto.generate_dra`")


def test_protos_keep_the_kubelet_field_numbers() -> None:
    f = {m: {fd.name: fd.number for fd in getattr(pb, m).DESCRIPTOR.fields}
         for m in ("Device", "Claim", "NodePrepareResourceResponse")}
    assert f["Device"] == {"request_names": 1, "pool_name": 2, "device_name": 3,
                           "cdi_device_ids": 4}
    assert f["Claim"] == {"namespace": 1, "uid": 2, "name": 3}
    assert f["NodePrepareResourceResponse"] == {"devices": 1, "error": 2}
    assert pb.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert reg_pb.DESCRIPTOR.package == "pluginregistration"


def _shape(text: str) -> dict[str, object]:
    """package, services' methods and messages' (field name, number) pairs of a proto file
    (comments and options dropped; enough for the kubelet's flat protos)."""
    import re

    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"\[[^\]]*\]", "", text)  # gogoproto field options
    text = re.sub(r"\)\s*\{\s*\}", ")", text)  # an rpc's empty option block
    out: dict[str, object] = {"package": re.search(r"package\s+([\w.]+);", text).group(1)}
    for kind, name, body in re.findall(r"(service|message)\s+(\w+)\s*\{([^{}]*)\}", text):
        if kind == "service":
            out[f"service {name}"] = sorted(re.findall(
                r"rpc\s+(\w+)\s*\((\w+)\)\s*returns\s*\((\w+)\)", body))
        else:
            out[f"message {name}"] = sorted(re.findall(
                r"(?:repeated\s+)?(?:map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*(\d+)", body))
    return out


@pytest.mark.parametrize(("ours", "upstream"), [
    ("dra_v1.proto", "dra_v1_api.proto"),
    ("pluginregistration.proto", "pluginregistration_v1_api.proto")])
def test_our_protos_keep_the_upstream_wire_shape(ours: str, upstream: str) -> None:
    from gpugov.node.proto import generate_dra

    mine = _shape((Path(generate_dra.__file__).parent / ours).read_text())
    theirs = _shape((Path(__file__).parent / "upstream" / "kubelet-dra" / upstream).read_text())
    assert mine == theirs
    assert len(theirs) > 4  # the parser found the services and messages
    methods = [v for k, v in theirs.items() if k.startswith("service")]
    assert [len(m) for m in methods] == [2]  # both rpcs of the one service


def test_a_restarted_plugin_answers_from_its_records_and_unprepares(tmp_path) -> None:
    """Prepared claims survive the plugin's restart: the same answer comes back without
    reading the claim again (it may be gone from the API), and unprepare cleans up."""
    claim = {"metadata": {"name": "s", "namespace": "ns", "uid": "u-s"},
             "status": {"allocation": {"devices": {"results": [
                 _r("gpu-1", consumedCapacity={"memory": "8Gi", "compute": "20"})]}}}}

    class Once:
        def __init__(self) -> None:
            self.left = 1

        async def get_claim(self, namespace: str, name: str) -> dict | None:
            self.left -= 1
            return claim if self.left >= 0 else None

    async def main() -> None:
        source = Once()
        paths = _paths(tmp_path)
        answers = []
        for _ in range(2):  # the plugin, then the plugin started again on the same folders
            # no sweep: this source says the claim is gone after one read (the sweep of
            # gone claims' files is tests/node/test_dra_sweep.py's)
            plugin = DraPlugin("n", lambda: INV, ON, paths, source, tmp_path / "p",
                               tmp_path / "r", sweep_s=None)
            await plugin.start()
            try:
                async with grpc.aio.insecure_channel(f"unix://{plugin.socket}") as ch:
                    got = await pb_grpc.DRAPluginStub(ch).NodePrepareResources(
                        pb.NodePrepareResourcesRequest(claims=[
                            pb.Claim(namespace="ns", name="s", uid="u-s")]))
                    answers.append(got.claims["u-s"])
            finally:
                await plugin.stop()
        assert answers[0] == answers[1] and not answers[1].error
        assert source.left == 0  # the claim was read once
        spec = paths.spec_file("u-s")
        assert spec.exists()
        plugin = DraPlugin("n", lambda: INV, ON, paths, source, tmp_path / "p", tmp_path / "r",
                           sweep_s=None)
        await plugin.start()
        try:
            async with grpc.aio.insecure_channel(f"unix://{plugin.socket}") as ch:
                got = await pb_grpc.DRAPluginStub(ch).NodeUnprepareResources(
                    pb.NodeUnprepareResourcesRequest(claims=[
                        pb.Claim(namespace="ns", name="s", uid="u-s")]))
            assert not got.claims["u-s"].error
        finally:
            await plugin.stop()
        assert not spec.exists() and not paths.region_dir("ns", "s", "u-s").exists()
        assert not list((paths.state_dir / "dra").iterdir())

    asyncio.run(main())


def _cfg(priority: int, source: str) -> dict:
    return {"source": source, "opaque": {"driver": "gpu.gpugov.io", "parameters": {
        "apiVersion": "gpu.gpugov.io/v1alpha1", "kind": "GpuConfig", "priority": priority}}}


@pytest.mark.parametrize(("device", "config", "preemptible", "want"), [
    # a slice shares its GPU: the QoS class comes from the pods' priority class
    ("gpu-1", None, False, "0"), ("gpu-1", None, True, "1"), ("gpu-1", None, None, "1"),
    # a tenant's own 0 needs a non-preemptible class (else 1, as gpugov's scheduler records)
    ("gpu-1", _cfg(0, "FromClaim"), True, "1"), ("gpu-1", _cfg(0, "FromClaim"), None, "1"),
    ("gpu-1", _cfg(0, "FromClaim"), False, "0"), ("gpu-1", _cfg(1, "FromClaim"), False, "1"),
    # a DeviceClass's config is an admin's word
    ("gpu-1", _cfg(0, "FromClass"), True, "0"),
    # a whole GPU shares nothing: only an explicit priority, judged the same way
    ("gpu-0", None, False, None), ("gpu-0", _cfg(0, "FromClaim"), True, "1"),
])
def test_the_qos_priority_is_decided_as_the_scheduler_decides_a_pods(
        tmp_path, device, config, preemptible, want) -> None:
    extra = {"consumedCapacity": {"memory": "10Gi", "compute": "50"}} if device == "gpu-1" \
        else {}
    got = build(_claim([_r(device, **extra)], [config] if config else None), "n", INV, ON,
                _paths(tmp_path), preemptible)
    env = dict(e.split("=", 1) for e in got.spec["devices"][0]["containerEdits"]["env"])
    assert env.get("GPUGOV_TASK_PRIORITY") == want and env.get("CUDA_TASK_PRIORITY") == want


def test_a_claims_board_file_is_never_taken_by_the_device_plugins_sweep(tmp_path) -> None:
    """The device plugin removes board files named like a gone pod's region
    (`<ns>_<pod>_<uid>`, no live pod with that UID): a claim's board must not look like one."""
    from gpugov.node.deviceplugin.cleanup import leftovers

    paths = _paths(tmp_path)
    got = build(_claim([_r("gpu-1", consumedCapacity={"memory": "10Gi"})]), "n", INV, ON,
                paths)
    (board,) = got.boards
    Path(board).parent.mkdir(parents=True)
    Path(board).touch()
    pod_board = Path(board).parent / "ns_p_0123456789ab"
    pod_board.touch()
    assert Path(board).name == "claim_ns_c_u-1"
    assert leftovers(paths.state_dir, set(), now=1e12, grace_s=0) == [pod_board]
