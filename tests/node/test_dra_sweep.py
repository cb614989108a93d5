"""The DRA kubelet plugin's sweep of gone claims' files, against the kubelet's own DRA manager
(tests/node/kubelet_dra_driver) and claims allocated by the real kube-scheduler on a v1.34 API
server: what prepare wrote for a claim (record, CDI spec, region folder, QoS board files) goes
once the claim is gone from the API without the kubelet ever unpreparing it (404, or its name
holding another claim), and stays when the claim exists (even deallocated), when the API
cannot be read (unreachable, 401, a read that does not answer), and when a record file is
garbage (each skipped alone, nothing of it removed)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.k8s.dra.publisher import SlicePublisher, probe_features
from gpugov.k8s.dra.slices import SLICE_CLASS
from gpugov.k8s.scheduler.kube import Kube
from gpugov.model.devices import DeviceMode
from gpugov.node.dra.plugin import DraPlugin
from gpugov.node.dra.prepare import NodePaths
from gpugov.node.dra.records import RecordError, own_boards, read_record, record_path
from gpugov.node.dra.source import KubeClaimSource

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "k8s"))
from dra_plugin_support import KubeClaims, Loop, api_client, wait  # noqa: E402
from dra_support import (  # noqa: E402
    claim,
    claim_pod,
    gpu,
    inventory,
    kwok_node,
    request,
)
from kubelet_dra_driver.driver import KubeletDraPeer  # noqa: E402

NODE = "dra-sweep-node"
SOFT = "GPU-a100-0001"  # the soft GPU every slice claim here lands on
INV = inventory(gpu(0), gpu(1, DeviceMode.SOFT))
SLICE = {"memory": "4Gi", "compute": "5"}


@pytest.fixture(scope="module")
def node(dra_plane, peer_binary) -> Iterator[dict]:
    """The plugin (no sweeping task: tests call `sweep()` or start one that sweeps at start)
    serving the kubelet's DRA manager for a kwok node with a whole and a soft GPU."""
    loop = Loop()
    short = Path(tempfile.mkdtemp(prefix="drasw", dir="/tmp"))
    kube = loop.run(Kube.from_kubeconfig(dra_plane.kubeconfig))
    api = loop.run(api_client(dra_plane.kubeconfig))
    state: dict = {}
    try:
        features = loop.run(probe_features(kube))
        pub = SlicePublisher(kube, features)
        loop.run(pub.ensure_classes())
        loop.run(kube.request("POST", "/api/v1/nodes", kwok_node(NODE, INV)))
        stop = asyncio.Event()
        publishing = asyncio.run_coroutine_threadsafe(pub.run(stop), loop.loop)
        lib = short / "libgpugov.so"
        lib.write_bytes(b"\x7fELF fake")
        paths = NodePaths(cdi_dir=short / "cdi", state_dir=short / "state", library=lib)
        source = KubeClaims(kube, KubeClaimSource(api))

        def plugin(sweep_s: float | None = None, claims: object = source,
                   timeout: float = 10.0) -> DraPlugin:
            return DraPlugin(NODE, lambda: INV, features, paths, claims,  # type: ignore[arg-type]
                             plugin_dir=short / "plugins" / "gpu.gpugov.io",
                             registry_dir=short / "registry", sweep_s=sweep_s,
                             read_timeout_s=timeout)

        state.update(loop=loop, kube=kube, paths=paths, short=short, plugin=plugin(),
                     make=plugin, plane=dra_plane, api=api)
        loop.run(state["plugin"].start())
        peer = KubeletDraPeer(peer_binary, short / "registry", short / "kstate",
                              dra_plane.kubeconfig, NODE, short / "peer.log")
        (short / "kstate").mkdir()
        peer.start()
        state["peer"] = peer
        yield state
        peer.stop()
        loop.run(state["plugin"].stop())
        loop.loop.call_soon_threadsafe(stop.set)
        publishing.result(10)
    finally:
        loop.run(kube.close())
        loop.run(api.close())
        loop.close()
        shutil.rmtree(short, ignore_errors=True)


def _ns(node: dict, name: str) -> str:
    status, doc = node["loop"].run(node["kube"].request(
        "POST", "/api/v1/namespaces", {"metadata": {"name": name}}))
    assert status == 201, doc
    return name


def _get_claim(node: dict, ns: str, name: str) -> tuple[int, dict]:
    return node["loop"].run(node["kube"].request(
        "GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}"))


def _prepared(node: dict, ns: str, name: str, pod: str) -> tuple[str, str, str]:
    """A slice claim allocated by kube-scheduler for `pod`, bound to the node and prepared by
    the kubelet's DRA manager through the plugin: its (namespace, name, uid)."""
    loop, kube = node["loop"], node["kube"]
    wait(lambda: node["peer"].registered("gpu.gpugov.io"), "registration")
    status, doc = loop.run(kube.request(
        "POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
        claim(name, ns, [request("gpu", SLICE_CLASS, capacity=SLICE)])))
    assert status == 201, doc
    status, doc = loop.run(kube.request("POST", f"/api/v1/namespaces/{ns}/pods",
                                        claim_pod(pod, ns, {"gpu": name})))
    assert status == 201, doc

    def bound() -> bool:
        _, p = loop.run(kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{pod}"))
        return p["spec"].get("nodeName") == NODE
    wait(bound, f"{pod} bound to {NODE}")
    got = node["peer"].prepare(ns, pod)
    assert got["ok"], got
    return ns, name, _get_claim(node, ns, name)[1]["metadata"]["uid"]


def _force_delete(node: dict, ns: str, name: str, pod: str | None) -> None:
    """What a node that was down sees afterwards: the pod and the claim deleted with no
    grace (kube's delete-protection finalizer removed by hand), no unprepare ever called."""
    loop, kube = node["loop"], node["kube"]
    if pod is not None:
        status, doc = loop.run(kube.request(
            "DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}", {"gracePeriodSeconds": 0}))
        assert status in (200, 202), doc
    base = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}"
    status, doc = loop.run(kube.request("DELETE", base, {"gracePeriodSeconds": 0}))
    assert status in (200, 202), doc
    loop.run(kube.request("PATCH", base, {"metadata": {"finalizers": None}},
                          content_type="application/merge-patch+json"))
    wait(lambda: _get_claim(node, ns, name)[0] == 404, f"claim {ns}/{name} gone")


def _files(node: dict, ns: str, name: str, uid: str) -> dict[str, bytes]:
    """What prepare wrote for the claim, path -> content (a folder: its files)."""
    paths: NodePaths = node["paths"]
    out: dict[str, bytes] = {}
    region = paths.region_dir(ns, name, uid)
    board = paths.qos_dir(SOFT) / f"claim_{ns}_{name}_{uid}"
    for p in (record_path(paths.state_dir / "dra", uid), paths.spec_file(uid), board,
              region / "devices", region / "pods"):
        if p.exists():
            out[str(p)] = p.read_bytes()
    if region.exists():
        out[str(region)] = b"<folder>"
    return out


def test_a_claim_gone_without_unprepare_is_swept_at_restart_and_a_live_one_is_not(
        node) -> None:
    """Prepared, then the plugin stops, the pod and the claim are force-deleted (the kubelet
    never unprepares), and the plugin starts again: its sweep at start removes that claim's
    record, CDI spec, region folder and board file; a claim deleted and created again under
    the same name (another UID) is swept too; a live claim and a claim that exists but is
    no longer reserved nor allocated keep every file, byte for byte."""
    loop, kube = node["loop"], node["kube"]
    ns = _ns(node, "dra-sweep-gone")
    gone = _prepared(node, ns, "gone", "p-gone")
    again = _prepared(node, ns, "again", "p-again")
    live = _prepared(node, ns, "live", "p-live")
    idle = _prepared(node, ns, "idle", "p-idle")
    before = {c: _files(node, *c) for c in (gone, again, live, idle)}
    for c in (gone, again, live, idle):  # record, spec, board, region with devices and pods
        assert len(before[c]) == 6, before[c]
    loop.run(node["plugin"].stop())
    _force_delete(node, ns, "gone", "p-gone")
    _force_delete(node, ns, "again", "p-again")
    status, doc = loop.run(kube.request(
        "POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
        claim("again", ns, [request("gpu", SLICE_CLASS, capacity=SLICE)])))
    assert status == 201 and doc["metadata"]["uid"] != again[2], doc
    # the idle claim stays in the API, its pod gone, its allocation removed
    status, doc = loop.run(kube.request(
        "DELETE", f"/api/v1/namespaces/{ns}/pods/p-idle", {"gracePeriodSeconds": 0}))
    assert status in (200, 202), doc
    wait(lambda: not (_get_claim(node, ns, "idle")[1].get("status") or {}).get("reservedFor"),
         "the idle claim's reservation released")
    _, c = _get_claim(node, ns, "idle")
    if (c.get("status") or {}).get("allocation"):
        c["status"] = {}
        status, doc = loop.run(kube.request(
            "PUT", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/idle/status", c))
        assert status == 200, doc
    assert not (_get_claim(node, ns, "idle")[1].get("status") or {}).get("allocation")

    restarted = node["make"](sweep_s=3600)  # the first pass runs at start
    node["plugin"] = restarted
    loop.run(restarted.start())
    wait(lambda: restarted.sweep_stats.passes >= 1, "the sweep at start")
    assert restarted.sweep_stats.swept == 2 and restarted.sweep_stats.unknown == 0
    for c in (gone, again):
        assert _files(node, *c) == {}, c
        assert not node["paths"].region_dir(*c).exists()
    assert _files(node, *live) == before[live]
    assert _files(node, *idle) == before[idle]
    assert restarted.sweep_stats.kept >= 2
    # a second pass finds nothing more to do and still keeps the live ones
    report = loop.run(restarted.sweep())
    assert report.swept == [] and {live, idle} <= set(report.kept)
    wait(lambda: node["peer"].registered("gpu.gpugov.io"), "registration after restart")
    wait(lambda: node["peer"].unprepare(ns, "p-live") == {"ok": True}, "unprepare", 30)
    assert _files(node, *live) == {}
    _force_delete(node, ns, "idle", None)  # and the idle claim goes once deleted
    assert loop.run(restarted.sweep()).swept == [idle]
    assert _files(node, *idle) == {}


class Raising:
    """A claim source whose reads fail as an API down or refusing would."""

    def __init__(self, exc: BaseException | None = None) -> None:
        self.exc, self.calls = exc, 0

    async def get_claim(self, namespace: str, name: str) -> dict | None:
        self.calls += 1
        if self.exc is None:
            await asyncio.Event().wait()  # never answers: the plugin's timeout ends it
        raise self.exc


def test_a_claim_whose_api_read_fails_keeps_its_files(node) -> None:
    """Claims gone from the API keep their files while the plugin cannot read the API:
    unreachable (the real client on a closed port), refused (a bad token), a read that
    never answers; after 3 failed reads in a row a pass stops asking (the rest kept too);
    the plugin's own source then sweeps them all."""
    from kubernetes_asyncio import client

    from gpugov.k8s.devcluster.processes import free_port
    from gpugov.node.dra.sweep import MAX_READ_FAILURES

    loop = node["loop"]
    ns = _ns(node, "dra-sweep-unknown")
    kept = [_prepared(node, ns, f"kept-{i}", f"p-{i}") for i in range(MAX_READ_FAILURES + 1)]
    before = {c: _files(node, *c) for c in kept}
    for c in kept:
        _force_delete(node, ns, c[1], f"p-{c[1].split('-')[1]}")

    unreachable = client.Configuration(host=f"https://127.0.0.1:{free_port()}")
    bad_token = client.Configuration(host=node["api"].configuration.host,
                                     api_key={"authorization": "Bearer not-a-token"})
    bad_token.verify_ssl = False

    async def make(cfg: client.Configuration) -> client.ApiClient:
        return client.ApiClient(cfg)  # in the plugin's loop (aiohttp binds to it)
    clients = [loop.run(make(unreachable)), loop.run(make(bad_token))]
    hanging = Raising()
    try:
        for source in (*(KubeClaimSource(c) for c in clients), hanging):
            plugin = node["make"](claims=source, timeout=0.5)
            report = loop.run(plugin.sweep())
            assert set(kept) <= set(report.unknown) and report.swept == [], (source, report)
            assert {c: _files(node, *c) for c in kept} == before
        assert hanging.calls == MAX_READ_FAILURES  # then it stopped asking
    finally:
        for c in clients:
            loop.run(c.close())
    report = loop.run(node["make"]().sweep())  # the API answers 404 now
    assert set(kept) <= set(report.swept)
    assert all(_files(node, *c) == {} for c in kept)


def test_garbage_record_files_are_skipped_alone_and_the_others_swept(node) -> None:
    """Unparseable, wrongly typed, huge, symlinked, FIFO and misnamed record files are each
    skipped with a reason and left in place; a record naming a board path that is not the
    claim's own gets its claim swept without that path touched; a gone claim beside them is
    swept and a live one kept."""
    loop = node["loop"]
    paths: NodePaths = node["paths"]
    ns = _ns(node, "dra-sweep-garbage")
    gone = _prepared(node, ns, "gone", "p-gone")
    live = _prepared(node, ns, "live", "p-live")
    odd = _prepared(node, ns, "odd", "p-odd")
    dra = paths.state_dir / "dra"
    # the odd claim's record also names a file outside the QoS folders as a "board"
    victim = node["short"] / "not-a-board"
    victim.write_text("keep me\n")
    rec = record_path(dra, odd[2])
    doc = json.loads(rec.read_text())
    doc["boards"].append(str(victim))
    rec.write_text(json.dumps(doc))
    garbage = {
        "truncated.json": b'{"uid": "x", "namesp',
        "wrongtypes.json": json.dumps({"uid": 7, "namespace": [], "name": {}, "devices": 1,
                                       "spec": []}).encode(),
        "notanobject.json": b"[1, 2, 3]",
        "huge.json": b" " * (2 << 20),
        "latin1.json": "{\"uid\": \"\xe9\"}".encode("latin-1"),
        # a valid record under another UID's file name: never taken for that UID
        "someone-else.json": rec.read_bytes(),
        "badns.json": json.dumps({**doc, "uid": "badns", "namespace": "../kube-system"}
                                 ).encode(),
    }
    for name, data in garbage.items():
        (dra / name).write_bytes(data)
    (dra / "link.json").symlink_to(record_path(dra, live[2]))
    os.mkfifo(dra / "fifo.json")
    _force_delete(node, ns, "gone", "p-gone")
    _force_delete(node, ns, "odd", "p-odd")

    report = loop.run(node["make"]().sweep())
    bad = {Path(p).name: why for p, why in report.bad}
    assert set(bad) == {*garbage, "link.json", "fifo.json"}, bad
    assert "bytes; allowed: at most" in bad["huge.json"]
    assert "symbolic link" in bad["link.json"] and "not a regular file" in bad["fifo.json"]
    assert "not UTF-8" in bad["latin1.json"]
    assert "uid: int, not a string" in bad["wrongtypes.json"]
    assert "holds the record of UID" in bad["someone-else.json"]
    for name in (*garbage, "link.json", "fifo.json"):
        assert (dra / name).exists() or (dra / name).is_symlink(), name
    assert set(report.swept) == {gone, odd}
    assert _files(node, *gone) == {} and _files(node, *odd) == {}
    assert victim.read_text() == "keep me\n"
    assert live in report.kept and len(_files(node, *live)) == 6
    assert node["peer"].unprepare(ns, "p-live") == {"ok": True}
    for name in (*garbage, "link.json", "fifo.json"):
        (dra / name).unlink()


def test_a_prepare_that_fails_half_way_leaves_only_what_a_record_names(node) -> None:
    """The record is written before the claim's files: a prepare that fails writing its CDI
    spec (the runtime's folder unusable) leaves its region folder and board file named by a
    record, which the sweep removes once the claim is gone (before, they were orphaned)."""
    paths: NodePaths = node["paths"]
    ns = _ns(node, "dra-sweep-half")
    wait(lambda: node["peer"].registered("gpu.gpugov.io"), "registration")
    loop, kube = node["loop"], node["kube"]
    status, doc = loop.run(kube.request(
        "POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
        claim("half", ns, [request("gpu", SLICE_CLASS, capacity=SLICE)])))
    assert status == 201, doc
    loop.run(kube.request("POST", f"/api/v1/namespaces/{ns}/pods",
                          claim_pod("p", ns, {"gpu": "half"})))
    wait(lambda: loop.run(kube.request("GET", f"/api/v1/namespaces/{ns}/pods/p"))[1]["spec"]
         .get("nodeName") == NODE, "p bound")
    uid = _get_claim(node, ns, "half")[1]["metadata"]["uid"]
    cdi = paths.cdi_dir
    shutil.move(cdi, cdi.with_name("cdi.moved"))
    cdi.write_text("not a folder\n")  # the spec cannot be written
    try:
        got = node["peer"].prepare(ns, "p")
        assert not got["ok"], got
    finally:
        cdi.unlink()
        shutil.move(cdi.with_name("cdi.moved"), cdi)
    left = _files(node, ns, "half", uid)
    assert str(record_path(paths.state_dir / "dra", uid)) in left
    assert str(paths.region_dir(ns, "half", uid)) in left
    _force_delete(node, ns, "half", "p")
    report = loop.run(node["make"]().sweep())
    assert (ns, "half", uid) in report.swept
    assert _files(node, ns, "half", uid) == {}


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
_FIELDS = ("uid", "namespace", "name", "devices", "spec", "uuids", "boards", "pods")


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=200),
    st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=8).map(
        lambda d: json.dumps(d).encode()),
    st.fixed_dictionaries({"uid": st.just("u-1"), "namespace": st.just("ns"),
                           "name": st.just("c"), "devices": st.just([]),
                           "spec": st.just({}), "boards": st.lists(st.text(max_size=60),
                                                                   max_size=3)}).map(
        lambda d: json.dumps(d).encode())))
def test_any_record_file_is_read_or_refused_by_name_and_names_only_its_own_boards(
        data: bytes) -> None:
    """A record file's bytes give a checked record or a RecordError naming the file, never
    another exception; the boards it lets the plugin remove are the claim's own file in a
    QoS folder, whatever paths the record lists."""
    with tempfile.TemporaryDirectory() as d:
        paths = NodePaths(Path(d) / "cdi", Path(d) / "state", None)
        f = Path(d) / "u-1.json"
        f.write_bytes(data)
        try:
            prepared = read_record(f)
        except RecordError as e:
            assert str(f) in str(e)
            return
        own, _other = own_boards(paths, prepared)
        for b in own:
            assert b.parent.parent == paths.state_dir / "qos"
            assert b.name == f"claim_{prepared.namespace}_{prepared.name}_{prepared.uid}"
