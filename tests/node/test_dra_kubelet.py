"""gpugov's DRA kubelet plugin against the kubelet's own DRA manager and plugin watcher
(k8s.io/kubernetes/pkg/kubelet/cm/dra and pkg/kubelet/pluginmanager v1.34.2, in
tests/node/kubelet_dra_driver), with claims allocated by the real kube-scheduler from the
driver's published ResourceSlices on a v1.34 API server (DRAConsumableCapacity on):
registration, prepare / unprepare, the CDI spec with the library and the claim's limits,
idempotence across a kubelet restart, several GPU containers and a GPU init container, and
a claim for a device the node does not have refused with its reason."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpugov.k8s.dra.publisher import SlicePublisher, probe_features
from gpugov.k8s.dra.slices import SLICE_CLASS
from gpugov.k8s.scheduler.kube import Kube
from gpugov.model.devices import DeviceMode
from gpugov.node.dra.plugin import DraPlugin
from gpugov.node.dra.prepare import NodePaths, Prepared
from gpugov.node.dra.source import KubeClaimSource

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "k8s"))
from dra_plugin_support import KubeClaims, Loop, wait  # noqa: E402
from dra_plugin_support import api_client as _api_client  # noqa: E402
from dra_support import (  # noqa: E402
    MigInstance,
    claim,
    claim_pod,
    gpu,
    inventory,
    kwok_node,
    request,
)
from kubelet_dra_driver.driver import KubeletDraPeer  # noqa: E402

NODE = "dra-kubelet-node"
INV = inventory(gpu(0), gpu(1, DeviceMode.SOFT),
                gpu(2, DeviceMode.MIG, mig=(MigInstance("3g.40gb", 4, "MIG-aaaa"),)),
                gpu(3, DeviceMode.TIMESLICE, replicas=2))


@pytest.fixture(scope="module")
def node(dra_plane, peer_binary) -> Iterator[dict]:
    loop = Loop()
    short = Path(tempfile.mkdtemp(prefix="dra", dir="/tmp"))
    kube = loop.run(Kube.from_kubeconfig(dra_plane.kubeconfig))
    api = loop.run(_api_client(dra_plane.kubeconfig))
    try:
        features = loop.run(probe_features(kube))
        pub = SlicePublisher(kube, features)
        loop.run(pub.ensure_classes())
        node_obj = kwok_node(NODE, INV)
        loop.run(kube.request("POST", "/api/v1/nodes", node_obj))
        stop = asyncio.Event()
        publishing = asyncio.run_coroutine_threadsafe(pub.run(stop), loop.loop)
        lib = short / "libgpugov.so"
        lib.write_bytes(b"\x7fELF fake")
        paths = NodePaths(cdi_dir=short / "cdi", state_dir=short / "state", library=lib)
        plugin = DraPlugin(NODE, lambda: INV, features, paths,
                           KubeClaims(kube, KubeClaimSource(api)),
                           plugin_dir=short / "plugins" / "gpu.gpugov.io",
                           registry_dir=short / "registry")
        loop.run(plugin.start())
        peer = KubeletDraPeer(peer_binary, short / "registry", short / "kstate",
                              dra_plane.kubeconfig, NODE, short / "peer.log")
        (short / "kstate").mkdir()
        peer.start()
        yield {"loop": loop, "kube": kube, "peer": peer, "paths": paths, "short": short,
               "plugin": plugin, "binary": peer_binary, "plane": dra_plane}
        peer.stop()
        loop.run(plugin.stop())
        loop.loop.call_soon_threadsafe(stop.set)
        publishing.result(10)
    finally:
        loop.run(kube.close())
        loop.run(api.close())
        loop.close()
        shutil.rmtree(short, ignore_errors=True)


def _ns(node: dict, name: str) -> str:
    node["loop"].run(node["kube"].request("POST", "/api/v1/namespaces",
                                          {"metadata": {"name": name}}))
    return name


def _claim_uid(node: dict, ns: str, name: str) -> str:
    _, c = node["loop"].run(node["kube"].request(
        "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}"))
    return c["metadata"]["uid"]


def _schedule(node: dict, ns: str, claims: list[dict], pod: dict) -> None:
    """Create claims and pod; kube-scheduler allocates and reserves them and binds the pod."""
    loop, kube = node["loop"], node["kube"]
    for c in claims:
        status, doc = loop.run(kube.request(
            "POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", c))
        assert status == 201, doc
    status, doc = loop.run(kube.request("POST", f"/api/v1/namespaces/{ns}/pods", pod))
    assert status == 201, doc

    def bound() -> bool:
        _, p = loop.run(kube.request("GET", f"/api/v1/namespaces/{ns}/pods/"
                                            f"{pod['metadata']['name']}"))
        return p["spec"].get("nodeName") == NODE
    wait(bound, f"{pod['metadata']['name']} bound to {NODE}")


def _spec(node: dict, uid: str) -> dict:
    return json.loads(node["paths"].spec_file(uid).read_text())


def _env(spec: dict) -> dict[str, str]:
    (dev,) = spec["devices"]
    return dict(e.split("=", 1) for e in dev["containerEdits"]["env"])


def test_the_kubelet_registers_the_plugin_through_its_watcher(node) -> None:
    assert wait(lambda: node["peer"].registered("gpu.gpugov.io"), "registration")
    assert node["plugin"].registration.status == (True, "")


def test_a_slice_claim_is_prepared_as_a_slice_and_survives_a_kubelet_restart(node) -> None:
    ns = _ns(node, "dra-slice")
    wait(lambda: node["peer"].registered("gpu.gpugov.io"), "registration")
    _schedule(node, ns, [claim("s", ns, [request(
        "gpu", SLICE_CLASS, capacity={"memory": "20Gi", "compute": "30"})])],
        claim_pod("p", ns, {"gpu": "s"}))
    uid = _claim_uid(node, ns, "s")
    got = node["peer"].prepare(ns, "p")
    assert got["ok"], got
    assert got["containers"] == [{"name": "main", "cdiDevices": [f"gpugov.io/claim={uid}"]}]
    spec = _spec(node, uid)
    assert spec["kind"] == "gpugov.io/claim" and spec["devices"][0]["name"] == uid
    env = _env(spec)
    assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == "GPU-a100-0001"
    assert env["GPUGOV_MEMORY_LIMIT_0"] == "20480Mi"
    assert env["GPUGOV_CORE_LIMIT_0"] == "30"
    edits = spec["devices"][0]["containerEdits"]
    assert {"path": "/dev/nvidia1"} in edits["deviceNodes"]
    mounts = {m["containerPath"]: m for m in edits["mounts"]}
    assert mounts["/usr/local/gpugov/lib/libgpugov.so"]["hostPath"] == \
        str(node["paths"].library)
    assert "ro" in mounts["/etc/ld.so.preload"]["options"]
    region = Path(mounts["/var/run/gpugov"]["hostPath"])
    assert region.parent.name == "claim-regions" and region.name == f"{ns}_s_{uid}"
    assert (region / "devices").read_text() == "GPU-a100-0001\n"  # ordinal -> UUID
    # the kubelet restarts and lost its checkpoint: it prepares again, the plugin answers
    # the same devices and the same spec (idempotent), and it re-registers on its own
    peer, short = node["peer"], node["short"]
    peer.stop()
    shutil.rmtree(short / "kstate")
    (short / "kstate").mkdir()
    peer.start()
    wait(lambda: peer.registered("gpu.gpugov.io"), "registration after restart")
    again = peer.prepare(ns, "p")
    assert again == got
    assert _spec(node, uid) == spec
    assert peer.unprepare(ns, "p") == {"ok": True}
    assert not node["paths"].spec_file(uid).exists()
    assert not Path(mounts["/var/run/gpugov"]["hostPath"]).exists()
    assert peer.unprepare(ns, "p") == {"ok": True}  # again: nothing left, no error


def test_slice_claims_get_the_qos_boards_and_their_pods_class_sets_the_priority(node) -> None:
    """The QoS boards of docs/enforcement.md on the DRA path: each claim on a shared GPU
    mounts the device's board folder read-only and its own board file writable; a pod of a
    non-preemptible class (PriorityPolicy) is Guaranteed (priority 0), a claim's own
    GpuConfig priority 0 on a preemptible pod is recorded as 1; unprepare removes the board."""
    from gpugov.k8s.devcluster.dev import install_crds

    loop, kube = node["loop"], node["kube"]
    ns = _ns(node, "dra-qos")
    loop.run(install_crds(node["plane"].kubeconfig))
    for path, body in (
        ("/apis/scheduling.k8s.io/v1/priorityclasses",
         {"metadata": {"name": "dra-serving"}, "value": 1000}),
        ("/apis/gpugov.io/v1alpha1/prioritypolicies",
         {"apiVersion": "gpugov.io/v1alpha1", "kind": "PriorityPolicy",
          "metadata": {"name": "dra-serving"}, "spec": {"preemptible": False}})):
        status, doc = loop.run(kube.request("POST", path, body))
        assert status in (201, 409), doc
    wait(lambda: node["peer"].registered("gpu.gpugov.io"), "registration")
    slice_ = {"memory": "10Gi", "compute": "20"}
    serving = claim_pod("serve", ns, {"gpu": "hi"})
    serving["spec"]["priorityClassName"] = "dra-serving"
    _schedule(node, ns, [claim("hi", ns, [request("gpu", SLICE_CLASS, capacity=slice_)])],
              serving)
    tenant_says_0 = claim("lo", ns, [request("gpu", SLICE_CLASS, capacity=slice_)])
    tenant_says_0["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": {
        "driver": "gpu.gpugov.io", "parameters": {
            "apiVersion": "gpu.gpugov.io/v1alpha1", "kind": "GpuConfig", "priority": 0}}}]
    _schedule(node, ns, [tenant_says_0], claim_pod("batch", ns, {"gpu": "lo"}))
    assert node["peer"].prepare(ns, "serve")["ok"] and node["peer"].prepare(ns, "batch")["ok"]
    hi, lo = (_spec(node, _claim_uid(node, ns, n)) for n in ("hi", "lo"))
    assert _env(hi)["GPUGOV_TASK_PRIORITY"] == _env(hi)["CUDA_TASK_PRIORITY"] == "0"
    assert _env(lo)["GPUGOV_TASK_PRIORITY"] == "1"  # a tenant's own 0 on a preemptible pod
    folder = node["paths"].qos_dir("GPU-a100-0001")  # the soft GPU's board folder
    for spec, name in ((hi, "hi"), (lo, "lo")):
        env = _env(spec)
        own = env["GPUGOV_QOS_SELF"]
        assert env["GPUGOV_QOS_DIR"] == "/var/run/gpugov-qos"
        assert own == f"claim_{ns}_{name}_{_claim_uid(node, ns, name)}"
        mounts = {m["containerPath"]: m for m in spec["devices"][0]["containerEdits"]["mounts"]}
        board_dir = mounts["/var/run/gpugov-qos/0"]
        assert board_dir["hostPath"] == str(folder) and "ro" in board_dir["options"]
        mine = mounts[f"/var/run/gpugov-qos/0/{own}"]
        assert mine["hostPath"] == str(folder / own) and "rw" in mine["options"]
        assert (folder / own).is_file()
        assert env["GPUGOV_DEVICE_UUIDS"] == "GPU-a100-0001"
    # the claim region names the pod that uses it (the exporter's claim attribution)
    region = node["paths"].region_dir(ns, "hi", _claim_uid(node, ns, "hi"))
    _, pod = loop.run(kube.request("GET", f"/api/v1/namespaces/{ns}/pods/serve"))
    assert (region / "pods").read_text() == f"serve {pod['metadata']['uid']}\n"
    own_hi = _env(hi)["GPUGOV_QOS_SELF"]
    assert node["peer"].unprepare(ns, "serve") == {"ok": True}
    assert not (folder / own_hi).exists() and (folder / _env(lo)["GPUGOV_QOS_SELF"]).exists()
    assert node["peer"].unprepare(ns, "batch") == {"ok": True}


def test_two_gpu_containers_and_a_gpu_init_container_each_get_their_own_claim(node) -> None:
    ns = _ns(node, "dra-multi")
    wait(lambda: node["peer"].registered("gpu.gpugov.io"), "registration")
    claims = [claim("init", ns, [request("gpu", "mig.gpugov.io")]),
              claim("a", ns, [request("gpu", "gpu.gpugov.io", selector=(
                  '!device.attributes["gpu.gpugov.io"].sharing'))]),
              claim("b", ns, [request("gpu", "timeslice.gpugov.io")])]
    pod = claim_pod("p", ns, {"init": "init", "a": "a", "b": "b"}, containers=[
        {"name": "a", "image": "fake", "resources": {"claims": [{"name": "a"}]}},
        {"name": "b", "image": "fake", "resources": {"claims": [{"name": "b"}]}}])
    pod["spec"]["initContainers"] = [{"name": "prep", "image": "fake",
                                      "resources": {"claims": [{"name": "init"}]}}]
    _schedule(node, ns, claims, pod)
    got = node["peer"].prepare(ns, "p")
    assert got["ok"], got
    ids = {c["name"]: c["cdiDevices"] for c in got["containers"]}
    uids = {n: _claim_uid(node, ns, n) for n in ("init", "a", "b")}
    assert ids == {"prep": [f"gpugov.io/claim={uids['init']}"],
                   "a": [f"gpugov.io/claim={uids['a']}"],
                   "b": [f"gpugov.io/claim={uids['b']}"]}
    init, a, b = (_env(_spec(node, uids[n])) for n in ("init", "a", "b"))
    assert init["NVIDIA_VISIBLE_DEVICES"] == "MIG-aaaa"  # the MIG instance, by its UUID
    assert a["NVIDIA_VISIBLE_DEVICES"] == "GPU-a100-0000"
    assert not any(k.startswith("GPUGOV_") and "LIMIT" in k for k in {**init, **a})
    assert b["NVIDIA_VISIBLE_DEVICES"] == "GPU-a100-0003"
    assert b["GPUGOV_MEMORY_LIMIT_0"] == "40960Mi"  # a time-slice replica: card / 2
    assert "GPUGOV_CORE_LIMIT_0" not in b
    assert node["peer"].unprepare(ns, "p") == {"ok": True}


def test_a_claim_for_a_device_the_node_does_not_have_is_refused(node) -> None:
    loop, kube = node["loop"], node["kube"]
    ns = _ns(node, "dra-bad")
    wait(lambda: node["peer"].registered("gpu.gpugov.io"), "registration")
    base = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
    status, c = loop.run(kube.request("POST", base, claim("ghost", ns, [
        request("gpu", "gpu.gpugov.io")])))
    assert status == 201, c
    pod = claim_pod("p", ns, {"gpu": "ghost"}, scheduler="nobody")
    status, p = loop.run(kube.request("POST", f"/api/v1/namespaces/{ns}/pods", pod))
    assert status == 201, p
    # what a scheduler that trusted stale slices would write: gpu-9 does not exist here
    c["status"] = {"allocation": {"devices": {"results": [{
        "request": "gpu", "driver": "gpu.gpugov.io", "pool": NODE, "device": "gpu-9"}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": p["metadata"]["uid"]}]}
    status, doc = loop.run(kube.request("PUT", f"{base}/ghost/status", c))
    assert status == 200, doc
    status, doc = loop.run(kube.request("POST", f"/api/v1/namespaces/{ns}/pods/p/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}}))
    assert status == 201, doc
    got = node["peer"].prepare(ns, "p")
    assert not got["ok"]
    assert "'gpu-9' is not on node dra-kubelet-node" in got["error"], got
    assert "gpu-0" in got["error"]  # names what the node has
    assert not any(node["paths"].cdi_dir.iterdir())  # nothing half-written


def test_the_command_publishes_its_nodes_slices_and_serves_the_kubelet_with_node_rbac(
        node) -> None:
    """`gpugov node dra-plugin` as a process, with the chart's node RBAC and a token bound to
    its node under the node-scoped slice policy: it publishes its node's slices (again after
    the kubelet wipes them at start), registers, and the kubelet prepares a
    kube-scheduler-allocated slice claim through it; it cannot write another node's."""
    import signal
    import subprocess

    from gpugov.k8s.devcluster.dev import gpugov_argv
    from gpugov.k8s.devcluster.rbac import node_token_kubeconfig
    from gpugov.k8s.dra.slice_policy import policies as slice_policies
    from gpugov.k8s.webhook.policy import apply_policies

    loop, kube, plane = node["loop"], node["kube"], node["plane"]
    name = "dra-cli-node"
    short = Path(tempfile.mkdtemp(prefix="dracli", dir="/tmp"))
    loop.run(kube.request("POST", "/api/v1/nodes", kwok_node(name, inventory(
        gpu(0, DeviceMode.SOFT, model="H100-SXM5-80GB")))))
    # the node identity as the DaemonSet has it: a token bound to its node, under the
    # node-scoped slice policy
    loop.run(apply_policies(plane.kubeconfig, slice_policies("gpugov-system")))
    kc = loop.run(node_token_kubeconfig(plane.kubeconfig, name, "gpugov-system",
                                        short / "node.kubeconfig"))
    # what an earlier install prepared for a claim since deleted while the node was down:
    # the command's sweep (as the node identity: a 404, not a 403) removes it
    stale = NodePaths(short / "cdi", short / "state", None)
    ghost = Prepared("0000-ghost", "dra-cli-gone", "ghost", [], {"devices": []})
    (short / "state" / "dra").mkdir(parents=True)
    (short / "state" / "dra" / "0000-ghost.json").write_text(ghost.to_json())
    stale.region_dir("dra-cli-gone", "ghost", "0000-ghost").mkdir(parents=True)
    (short / "cdi").mkdir()
    stale.spec_file("0000-ghost").write_text("{}")
    log = open(short / "plugin.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(gpugov_argv(
        "node", "dra-plugin", "--node-name", name, "--kubeconfig", str(kc),
        "--plugins-dir", str(short / "plugins"), "--registry-dir", str(short / "reg"),
        "--cdi-dir", str(short / "cdi"), "--state-dir", str(short / "state"),
        "--interval", "0.5", "--sweep-interval", "0.5"), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    peer = KubeletDraPeer(node["binary"], short / "reg", short / "kstate", plane.kubeconfig,
                          name, short / "peer.log")
    try:
        def slices() -> list:
            _, doc = loop.run(kube.request("GET", "/apis/resource.k8s.io/v1/resourceslices"))
            return [s for s in doc["items"] if s["spec"]["nodeName"] == name]
        wait(slices, "the command's slices", 60)
        wait(lambda: not (short / "state" / "dra" / "0000-ghost.json").exists(),
             "the stale claim swept", 60)
        assert not stale.region_dir("dra-cli-gone", "ghost", "0000-ghost").exists()
        assert not stale.spec_file("0000-ghost").exists()
        assert "sweep: claim dra-cli-gone/ghost (uid 0000-ghost) is gone (the API answers " \
            "404)" in (short / "plugin.log").read_text()
        (short / "kstate").mkdir()
        peer.start()  # the kubelet wipes the node's slices at start: they come back
        wait(lambda: peer.registered("gpu.gpugov.io"), "registration", 60)
        ns = _ns(node, "dra-cli")
        c = claim("s", ns, [request(
            "gpu", SLICE_CLASS, selector='device.attributes["gpu.gpugov.io"].model == '
            '"H100-SXM5-80GB"', capacity={"memory": "10Gi", "compute": "25"})])
        status, doc = loop.run(kube.request(
            "POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", c))
        assert status == 201, doc
        loop.run(kube.request("POST", f"/api/v1/namespaces/{ns}/pods",
                              claim_pod("p", ns, {"gpu": "s"})))

        def bound() -> bool:
            _, p = loop.run(kube.request("GET", f"/api/v1/namespaces/{ns}/pods/p"))
            return p["spec"].get("nodeName") == name
        wait(bound, "p bound to the command's node")
        got = peer.prepare(ns, "p")
        assert got["ok"], (got, (short / "plugin.log").read_text()[-2000:])
        uid = _claim_uid(node, ns, "s")
        spec = json.loads((short / "cdi" / f"gpugov.io-claim_{uid}.json").read_text())
        env = _env(spec)
        assert env["GPUGOV_MEMORY_LIMIT_0"] == "10240Mi" and env["GPUGOV_CORE_LIMIT_0"] == "25"
        lib = next(m for m in spec["devices"][0]["containerEdits"]["mounts"]
                   if m["containerPath"] == "/usr/local/gpugov/lib/libgpugov.so")
        assert lib["hostPath"] == str(short / "state" / "lib" / "libgpugov.so")
        # the same identity cannot write another node's slices
        other = loop.run(Kube.from_kubeconfig(kc))
        try:
            forged = slices()[0]
            forged["metadata"] = {"name": "forged"}
            forged["spec"]["nodeName"] = forged["spec"]["pool"]["name"] = NODE
            status, doc = loop.run(other.request(
                "POST", "/apis/resource.k8s.io/v1/resourceslices", forged))
            assert status == 403 and "only its own node's" in doc["message"], (status, doc)
            theirs = next(s for s in loop.run(kube.request(
                "GET", "/apis/resource.k8s.io/v1/resourceslices"))[1]["items"]
                if s["spec"]["nodeName"] == NODE)
            status, doc = loop.run(other.request(
                "DELETE", f"/apis/resource.k8s.io/v1/resourceslices/"
                          f"{theirs['metadata']['name']}"))
            assert status == 403 and "only its own node's" in doc["message"], (status, doc)
        finally:
            loop.run(other.close())
    finally:
        peer.stop()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
        shutil.rmtree(short, ignore_errors=True)
    assert proc.returncode == 0
