"""The extender's HTTP wire format (Go field names, no JSON tags) and its placement answers,
served by the real aiohttp server; the nodes and bound pods come from watch-shaped objects."""

from __future__ import annotations

import asyncio
import json

from aiohttp import ClientSession, web
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.k8s.annotations import ALLOCATION
from gpugov.k8s.extender import Extender
from gpugov.k8s.scheduler.harness import gpu_node, gpu_pod


def _ready(node: dict) -> dict:
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return node


def _queue(view, name: str = "q", **spec) -> None:
    """A Queue and a Tenant sending namespace `ns` to it (the extender applies queues)."""
    view.set_object("queue", {"metadata": {"name": name}, "spec": spec})
    view.set_object("tenant", {"metadata": {"name": "t"}, "spec": {
        "namespaces": ["ns"], "queue": name, "trust": "internal"}})


def _record(node: str, index: int) -> str:
    return json.dumps({"v": 1, "node": node, "isolation": "hard", "devices": [
        {"index": index, "uuid": "", "mode": "exclusive", "milli": 1000, "memoryMiB": 81920}]})


async def _serve(ext: Extender):
    runner = web.AppRunner(ext.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def test_filter_and_prioritize_speak_go_field_names() -> None:
    async def main() -> None:
        ext = Extender(kube=None, scheduler_name="default-scheduler")  # type: ignore[arg-type]
        # filter/prioritize read no API
        view = ext.st.view
        _queue(view)
        view.set_node(_ready(gpu_node("small", 1)))
        view.set_node(_ready(gpu_node("big", 4)))
        busy = gpu_pod("busy", "ns", "default-scheduler")
        busy["spec"]["nodeName"] = "small"
        busy["metadata"]["annotations"][ALLOCATION] = _record("small", 0)
        view.set_pod(busy)
        runner, url = await _serve(ext)
        try:
            async with ClientSession() as http:
                want = gpu_pod("w", "ns", "default-scheduler")
                args = {"Pod": want, "NodeNames": ["small", "big", "ghost"], "Nodes": None}
                async with http.post(f"{url}/filter", json=args) as r:
                    assert r.status == 200
                    res = await r.json()
                assert res["NodeNames"] == ["big"]
                assert set(res["FailedNodes"]) == {"small", "ghost"}
                assert "gpu: no device of the node can take it" in res["FailedNodes"]["small"]
                assert res["Error"] == ""
                # nodeCacheCapable: false sends whole Node objects and wants them back
                nodes = {"items": [gpu_node("small", 1), gpu_node("big", 4)]}
                async with http.post(f"{url}/filter", json={"Pod": want, "Nodes": nodes}) as r:
                    res = await r.json()
                assert [n["metadata"]["name"] for n in res["Nodes"]["items"]] == ["big"]
                async with http.post(f"{url}/prioritize",
                                     json={"Pod": want, "NodeNames": ["small", "big"]}) as r:
                    prio = await r.json()
                assert [p["Host"] for p in prio] == ["small", "big"]
                assert all(0 <= p["Score"] <= 10 for p in prio) and prio[0]["Score"] == 0
                bad = gpu_pod("bad", "ns", "default-scheduler", limits={"nvidia.com/gpumem": "-5"})
                async with http.post(f"{url}/filter",
                                     json={"Pod": bad, "NodeNames": ["big"]}) as r:
                    res = await r.json()
                assert res["NodeNames"] == []  # a bad request: no node, and preemption cannot help
                assert "nvidia.com/gpumem" in res["FailedAndUnresolvableNodes"]["big"]
                async with http.post(f"{url}/filter", data=b"{garbage") as r:
                    assert r.status == 400
                    assert "bad request body" in (await r.json())["Error"]
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_extender_counts_recorded_gpu_memory_and_allocates_memory() -> None:
    from gpugov.k8s.extender import ExtenderState

    st = ExtenderState(scheduler_name="default-scheduler")
    _queue(st.view)
    st.view.set_node(_ready(gpu_node("one", 1)))  # one 80 GiB card
    slice_limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(60 * 1024),
                    "nvidia.com/gpucores": "10"}
    busy = gpu_pod("busy", "ns", "default-scheduler", limits=slice_limits)
    busy["spec"]["nodeName"] = "one"
    busy["metadata"]["annotations"][ALLOCATION] = json.dumps(
        {"v": 1, "node": "one", "isolation": "soft", "devices": [
            {"index": 0, "uuid": "", "mode": "soft", "milli": 100, "memoryMiB": 60 * 1024}]})
    st.view.set_pod(busy)

    def want(gib: int):
        limits = dict(slice_limits, **{"nvidia.com/gpumem": str(gib * 1024)})
        req, why = st.request_of(gpu_pod(f"w{gib}", "ns", "default-scheduler", limits=limits))
        assert req is not None, why
        return req

    big = want(30)  # 10 % compute is free, but only 20 GiB of memory
    keep, failed = st.filter(big, ["one"])
    assert keep == [] and "one" in failed and st.choose(big, "one") is None
    small = want(16)
    assert st.filter(small, ["one"])[0] == ["one"]
    alloc = st.choose(small, "one")
    assert alloc is not None and (alloc.devices, alloc.memory_mib) == ((0,), 16 * 1024)


def test_filter_refuses_other_schedulers_pods_and_pods_over_their_queue_cap() -> None:
    from gpugov.k8s.extender import ExtenderState

    st = ExtenderState(scheduler_name="gpugov")
    _queue(st.view, limit={"gpu": 1})
    st.view.set_node(_ready(gpu_node("n", 4)))
    other = gpu_pod("o", "ns", "default-scheduler")
    adm, why = st.admit(other)
    assert adm is None and "schedulerName 'default-scheduler' is not 'gpugov'" in why
    two = gpu_pod("two", "ns", "gpugov", limits={"nvidia.com/gpu": "2"})
    adm, why = st.admit(two)
    assert adm is None and "above its cap 1" in why
    one = gpu_pod("one", "ns", "gpugov")
    adm, why = st.admit(one)
    assert adm is not None, why
    # a bound pod of the queue holds its cap: the next one is refused
    busy = gpu_pod("busy", "ns", "gpugov")
    busy["spec"]["nodeName"] = "n"
    busy["metadata"]["uid"] = "busy-uid"
    busy["metadata"]["annotations"][ALLOCATION] = _record("n", 0)
    st.view.set_pod(busy)
    adm, why = st.admit(one)
    assert adm is None and "quota: queue q would hold 2" in why


def test_no_queue_config_no_placement() -> None:
    from gpugov.k8s.extender import ExtenderState

    st = ExtenderState(scheduler_name="gpugov")
    st.view.set_node(_ready(gpu_node("n", 4)))
    adm, why = st.admit(gpu_pod("p", "ns", "gpugov"))
    assert adm is None and why.startswith("no-queue-objects: no Queue objects: create a Queue")


def test_decisions_remember_only_what_filter_accepted_bounded() -> None:
    from gpugov.k8s.extender import Decisions

    d = Decisions(limit=3, ttl=10.0)
    d.remember("u1", "ns/a", ["n1", "n2"], now=0.0)
    assert d.problem("u1", "ns/a", "n1", now=1.0) == ""
    assert "was not accepted" in d.problem("u1", "ns/a", "n3", now=1.0)
    assert "not filtered" in d.problem("u2", "ns/b", "n1", now=1.0)
    assert "not filtered" in d.problem("u1", "ns/other", "n1", now=1.0)  # another pod's UID
    assert "not filtered" in d.problem("u1", "ns/a", "n1", now=11.0)  # too old
    assert "not filtered" in d.problem("", "ns/a", "n1", now=1.0)
    for i in range(10):
        d.remember(f"x{i}", f"ns/x{i}", ["n1"], now=2.0)
    assert len(d) == 3 and "not filtered" in d.problem("u1", "ns/a", "n1", now=3.0)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20)
_field = st.sampled_from(["metadata", "spec", "containers", "resources", "limits", "name",
                          "namespace", "uid", "schedulerName", "annotations", "nvidia.com/gpu",
                          "items", "NodeNames", "Nodes", "Pod"])
_shaped = st.recursive(_json, lambda inner: st.dictionaries(_field, inner, max_size=5),
                       max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(args=st.dictionaries(st.sampled_from(["Pod", "Nodes", "NodeNames"]), _shaped, max_size=3))
def test_hostile_filter_bodies_are_a_clear_answer_never_a_crash(args) -> None:
    """Whatever the body, filter's pieces answer (nodes, or ValueError -> HTTP 400) and a pod
    gpugov cannot read is refused with a reason."""
    from gpugov.k8s.extender import _nodes_of, _pod_of

    st_ = _STATE
    try:
        _, _, names = _nodes_of(args)
        pod = _pod_of(args)
    except ValueError:
        return
    assert all(isinstance(n, str) for n in names)
    adm, why = st_.admit(pod)
    assert adm is not None or why


def _state():
    from gpugov.k8s.extender import ExtenderState

    s = ExtenderState(scheduler_name="gpugov")
    _queue(s.view)
    s.view.set_node(_ready(gpu_node("n", 4)))
    return s


_STATE = _state()


def test_extender_command_refuses_to_serve_unauthenticated_unless_told(tmp_path) -> None:
    from typer.testing import CliRunner

    from gpugov.cli import app

    kc = tmp_path / "kubeconfig"
    kc.write_text("current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
                  "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                  "users: [{name: u, user: {token: t}}]\n")
    out = CliRunner().invoke(app, ["extender", "--kubeconfig", str(kc)])
    assert out.exit_code == 2
    assert "give --tls-cert, --tls-key, --client-ca (or --insecure-http" in out.output
    pem = tmp_path / "x.pem"
    pem.write_text("x")
    out = CliRunner().invoke(app, ["extender", "--kubeconfig", str(kc), "--insecure-http",
                                   "--client-ca", str(pem)])
    assert out.exit_code == 2 and "cannot be combined" in out.output
    out = CliRunner().invoke(app, ["extender", "--kubeconfig", str(kc), "--tls-cert", str(pem),
                                   "--tls-key", str(pem), "--client-ca", str(pem)])
    assert out.exit_code == 2 and "--tls-cert/--tls-key/--client-ca:" in out.output
