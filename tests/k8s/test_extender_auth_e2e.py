"""Who may make `gpugov extender` bind, on the real apiserver: only a caller presenting a client
certificate signed by its CA reaches a verb (plain HTTP, no certificate, or another CA's are
refused in the TLS handshake), and even that caller gets only what gpugov decided: a pod the
extender never filtered, a node it did not accept, a pod of another scheduler, or a bind over
the queue's limit is refused with an error in ExtenderBindingResult and the pod stays pending.
The pods are created by a tenant holding only `edit`; the extender runs as the chart's
scheduler ServiceAccount. (The real kube-scheduler scheduling through the extender with its
`tlsConfig`: test_extender_e2e.py.)"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from gpugov.k8s.devcluster.dev import gpugov_argv, install_crds
from gpugov.k8s.devcluster.pki import CertificateAuthority
from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import create_all, gpu_node, gpu_pod, wait_until
from gpugov.k8s.scheduler.kube import Kube

TIMEOUT = 60.0


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:  # noqa: S310 - loopback only
            return r.status == 200
    except OSError:
        return False


def _client_ctx(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


async def _post(url: str, body: dict[str, Any], ctx: ssl.SSLContext | None) -> Any:
    async with aiohttp.ClientSession() as http, http.post(
            url, json=body, ssl=ctx if ctx is not None else False,
            timeout=aiohttp.ClientTimeout(total=10)) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def _refused_at_tls(url: str, ctx: ssl.SSLContext | None) -> str:
    """The exception a POST /bind gets (it must never be answered)."""
    try:
        out = await _post(url, {"PodName": "x", "PodNamespace": "x", "PodUID": "x",
                                "Node": "x"}, ctx)
    except (aiohttp.ClientError, ssl.SSLError, ConnectionError) as e:
        return type(e).__name__
    raise AssertionError(f"answered without a valid client certificate: {out}")


def test_extender_binds_only_for_authenticated_callers_what_gpugov_decided(
        k8s_control_plane, tmp_path) -> None:
    cluster = k8s_control_plane
    plane = cluster.plane
    tag = f"xa{free_port() % 10000}"
    sched = f"gpugov-ext-{tag}"
    ca, other = CertificateAuthority("extender-ca"), CertificateAuthority("someone-else")
    f = {n: tmp_path / f"{n}.pem" for n in ("ca", "crt", "key", "ccrt", "ckey", "ocrt", "okey")}
    f["ca"].write_bytes(ca.pair.cert)
    ca.serving("gpugov-extender").write(f["crt"], f["key"])
    ca.client("kube-scheduler").write(f["ccrt"], f["ckey"])
    other.client("kube-scheduler").write(f["ocrt"], f["okey"])
    asyncio.run(install_crds(cluster.kubeconfig))
    ns = asyncio.run(cluster.unique_namespace("xauth"))
    queue = f"{tag}-q"
    node_a, node_b = f"{tag}-a", f"{tag}-b"
    label = {"gpugov-test": tag}

    async def setup() -> None:
        kube = await Kube.from_kubeconfig(cluster.kubeconfig)
        try:
            await create_all(kube, f"/apis/{names.GROUP}/{names.VERSION}/{names.QUEUES}", [{
                "apiVersion": "gpugov.io/v1alpha1", "kind": "Queue",
                "metadata": {"name": queue}, "spec": {"limit": {"gpu": 1}}}])
            await create_all(kube, f"/apis/{names.GROUP}/{names.VERSION}/{names.TENANTS}", [{
                "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": f"{tag}-t"},
                "spec": {"namespaces": [ns], "queue": queue, "trust": "internal"}}])
            await create_all(kube, "/api/v1/nodes",
                             [gpu_node(node_a, 4, label), gpu_node(node_b, 4, label)])
        finally:
            await kube.close()

    asyncio.run(setup())
    sa = asyncio.run(cluster.component_kubeconfig("scheduler"))
    port, health = free_port(), free_port()
    plane.start_process(f"extender-{tag}", gpugov_argv(
        "extender", "--kubeconfig", str(sa), "--scheduler-name", sched,
        "--listen", f"127.0.0.1:{port}", "--health-listen", f"127.0.0.1:{health}",
        "--tls-cert", str(f["crt"]), "--tls-key", str(f["key"]), "--client-ca", str(f["ca"])),
        ready=lambda: _healthy(f"http://127.0.0.1:{health}/healthz"), timeout=120)
    url = f"https://127.0.0.1:{port}"
    good = _client_ctx(f["ca"], f["ccrt"], f["ckey"])

    async def main() -> None:
        kube = await Kube.from_kubeconfig(cluster.kubeconfig)
        tenant = await cluster.tenant_kubeconfig(ns)
        try:
            # 1. no way in without a client certificate signed by the extender's CA
            refused = {
                "plain http": await _refused_at_tls(f"http://127.0.0.1:{port}/bind", None),
                "no client cert": await _refused_at_tls(f"{url}/bind", _client_ctx(f["ca"])),
                "another CA's cert": await _refused_at_tls(
                    f"{url}/bind", _client_ctx(f["ca"], f["ocrt"], f["okey"])),
            }
            assert len(refused) == 3, refused

            # the tenant (edit only) creates its GPU pods
            async with cluster.api(tenant) as api:
                core = client.CoreV1Api(api)
                for name, sched_name in (("p1", sched), ("p2", sched), ("never", sched),
                                         ("p3", sched), ("other", "default-scheduler")):
                    await core.create_namespaced_pod(ns, gpu_pod(name, ns, sched_name,
                                                                 node_selector=label))

            async def pod(name: str) -> dict:
                status, obj = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
                assert status == 200, obj
                return obj

            async def filter_(name: str, nodes: list[str]) -> dict:
                return await _post(f"{url}/filter", {"Pod": await pod(name), "NodeNames": nodes},
                                   good)

            async def bind(name: str, node: str) -> str:
                p = await pod(name)
                out = await _post(f"{url}/bind", {
                    "PodName": name, "PodNamespace": ns, "PodUID": p["metadata"]["uid"],
                    "Node": node}, good)
                return out["Error"]

            async def both_accepted():  # the extender has seen the nodes Ready and the Tenant
                res = await filter_("p1", [node_a, node_b])
                return res if res["NodeNames"] == [node_a, node_b] else None

            await wait_until(both_accepted, TIMEOUT, "the extender to accept both nodes")

            # 2. a pod the extender never filtered is not bound, though it would fit
            err = await bind("never", node_a)
            assert "was not filtered by this extender" in err, err
            # 3. a node the filter did not accept (the call named only node_a)
            assert (await filter_("p3", [node_a]))["NodeNames"] == [node_a]
            err = await bind("p3", node_b)
            assert f"node {node_b} was not accepted" in err, err
            # 4. a pod of another scheduler: refused at filter and at bind
            res = await filter_("other", [node_a])
            assert res["NodeNames"] == [] and "is not" in res["FailedAndUnresolvableNodes"][
                node_a]
            err = await bind("other", node_a)
            assert "schedulerName 'default-scheduler'" in err, err
            # 5. the queue's limit is 1 GPU: both pass filter while it is empty, only one binds
            assert (await filter_("p2", [node_a]))["NodeNames"] == [node_a]
            assert await bind("p1", node_a) == ""
            err = await bind("p2", node_a)
            assert "quota" in err and "above its cap 1" in err, err
            res = await filter_("p2", [node_a, node_b])
            assert res["NodeNames"] == [] and "above its cap 1" in \
                res["FailedAndUnresolvableNodes"][node_a]

            bound = {n: (await pod(n))["spec"].get("nodeName")
                     for n in ("p1", "p2", "never", "p3", "other")}
            assert bound == {"p1": node_a, "p2": None, "never": None, "p3": None,
                             "other": None}
            ann = (await pod("p1"))["metadata"]["annotations"]
            assert names.ANN_ALLOCATION in ann
        finally:
            for n in (node_a, node_b):
                await kube.request("DELETE", f"/api/v1/nodes/{n}")
            await kube.request("DELETE", f"/apis/{names.GROUP}/{names.VERSION}/"
                                         f"{names.TENANTS}/{tag}-t")
            await kube.request("DELETE", f"/apis/{names.GROUP}/{names.VERSION}/"
                                         f"{names.QUEUES}/{queue}")
            await kube.close()
            plane.procs.stop(f"extender-{tag}", grace=5)

    asyncio.run(main())
