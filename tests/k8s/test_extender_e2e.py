"""Extender mode with the real kube-scheduler: it calls `gpugov extender` (filter, prioritize,
bind) over HTTPS with a client certificate (its extender `tlsConfig`) for pods requesting
managed GPU resources, and the pods end up bound with allocation records on distinct devices,
by the same engine as `gpugov scheduler`, within their queue's limit. The extender runs as the
chart's scheduler ServiceAccount."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import yaml

from gpugov.k8s.devcluster.dev import gpugov_argv, install_crds
from gpugov.k8s.devcluster.pki import CertificateAuthority
from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import (
    bound,
    create_all,
    gpu_node,
    gpu_pod,
    invariant_problems,
    pods,
    wait_until,
)
from gpugov.k8s.scheduler.kube import Kube

TIMEOUT = 90.0


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:  # noqa: S310 - loopback only
            return r.status == 200
    except OSError:
        return False


def tls_files(folder: Path) -> dict[str, Path]:
    """A CA, the extender's serving pair (127.0.0.1) and kube-scheduler's client pair."""
    ca = CertificateAuthority("gpugov-extender-ca")
    out = {name: folder / f"{name}.pem" for name in (
        "ca", "server-cert", "server-key", "client-cert", "client-key")}
    out["ca"].write_bytes(ca.pair.cert)
    ca.serving("gpugov-extender").write(out["server-cert"], out["server-key"])
    ca.client("kube-scheduler").write(out["client-cert"], out["client-key"])
    return out


def extender_args(tls: dict[str, Path], port: int, health: int) -> list[str]:
    return ["--listen", f"127.0.0.1:{port}", "--health-listen", f"127.0.0.1:{health}",
            "--tls-cert", str(tls["server-cert"]), "--tls-key", str(tls["server-key"]),
            "--client-ca", str(tls["ca"])]


def test_kube_scheduler_places_gpus_through_the_extender(k8s_control_plane, tmp_path) -> None:
    cluster = k8s_control_plane
    plane = cluster.plane
    tag = f"ext{free_port() % 10000}"
    profile = f"gpugov-extender-{tag}"
    ext_port, health = free_port(), free_port()
    tls = tls_files(tmp_path)
    asyncio.run(install_crds(cluster.kubeconfig))
    queue = f"{tag}-q"
    ns = asyncio.run(cluster.unique_namespace("ext"))

    async def config() -> None:
        kube = await Kube.from_kubeconfig(cluster.kubeconfig)
        try:
            await create_all(kube, f"/apis/{names.GROUP}/{names.VERSION}/{names.QUEUES}", [{
                "apiVersion": "gpugov.io/v1alpha1", "kind": "Queue",
                "metadata": {"name": queue}, "spec": {"weight": 1}}])
            await create_all(kube, f"/apis/{names.GROUP}/{names.VERSION}/{names.TENANTS}", [{
                "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": f"{tag}-t"},
                "spec": {"namespaces": [ns], "queue": queue, "trust": "internal"}}])
        finally:
            await kube.close()

    asyncio.run(config())
    sa = asyncio.run(cluster.component_kubeconfig("scheduler"))
    plane.start_process(f"extender-{tag}", gpugov_argv(
        "extender", "--kubeconfig", str(sa), "--scheduler-name", profile,
        *extender_args(tls, ext_port, health)),
        ready=lambda: _healthy(f"http://127.0.0.1:{health}/healthz"), timeout=120)
    cfg = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(cluster.kubeconfig), "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": profile}],
        "extenders": [{
            "urlPrefix": f"https://127.0.0.1:{ext_port}", "filterVerb": "filter",
            "tlsConfig": {"certFile": str(tls["client-cert"]), "keyFile": str(tls["client-key"]),
                          "caFile": str(tls["ca"])},
            "prioritizeVerb": "prioritize", "bindVerb": "bind", "weight": 1,
            "nodeCacheCapable": True, "ignorable": False, "httpTimeout": "30s",
            "managedResources": [
                {"name": names.GPU_RESOURCE, "ignoredByScheduler": True},
                {"name": "nvidia.com/gpumem", "ignoredByScheduler": True}]}]}
    path = Path(plane.workdir) / f"kube-scheduler-{tag}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    kc = str(cluster.kubeconfig)
    port = free_port()
    plane.start_process(f"kube-scheduler-{tag}", [
        str(plane.bin / "kube-scheduler"), f"--config={path}", "--bind-address=127.0.0.1",
        f"--secure-port={port}", f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}", f"--cert-dir={plane.workdir / ('certs-' + tag)}"])

    async def main() -> None:
        kube = await Kube.from_kubeconfig(cluster.kubeconfig)
        label = {"gpugov-test": tag}
        node_names = [f"{tag}-a", f"{tag}-b"]
        try:
            await create_all(kube, "/api/v1/nodes",
                             [gpu_node(node_names[0], 2, label), gpu_node(node_names[1], 4, label)])
            whole = [gpu_pod(f"w{i}", ns, profile, node_selector=label) for i in range(5)]
            slices = [gpu_pod(f"s{i}", ns, profile, node_selector=label,
                              limits={names.GPU_RESOURCE: "1", "nvidia.com/gpumem": "40960"})
                      for i in range(2)]
            await create_all(kube, "/api/v1/namespaces/{ns}/pods", whole)

            async def all_bound(n: int = 7):
                items = await pods(kube, ns)
                return items if len(bound(items)) == n else None

            await wait_until(lambda: all_bound(5), TIMEOUT, "5 pods bound by kube-scheduler")
            await create_all(kube, "/api/v1/namespaces/{ns}/pods", slices)

            items = await wait_until(all_bound, TIMEOUT, "7 pods bound by kube-scheduler")
            assert not invariant_problems(items, {node_names[0]: 2, node_names[1]: 4})
            recs = [p["metadata"]["annotations"][names.ANN_ALLOCATION] for p in items
                    if p["metadata"]["name"].startswith("w")]
            assert len(recs) == 5 and all('"mode":"exclusive"' in r for r in recs)
            soft = [p for p in items if p["metadata"]["name"].startswith("s")]
            assert all('"memoryMiB":40960' in p["metadata"]["annotations"][names.ANN_ALLOCATION]
                       for p in soft)
            # 5 whole + 2 half-card slices fill the 6 GPUs exactly: the slices share a device
            assert len({(p["spec"]["nodeName"],
                         p["metadata"]["annotations"][names.ANN_ALLOCATION].split('"index":')[1]
                         .split(",")[0]) for p in soft}) == 1
            # one more whole GPU cannot fit: kube-scheduler keeps it pending (the extender said no)
            await create_all(kube, "/api/v1/namespaces/{ns}/pods",
                             [gpu_pod("extra", ns, profile, node_selector=label)])

            async def unschedulable():
                _, p = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/extra")
                return any(c.get("reason") == "Unschedulable"
                           for c in (p.get("status") or {}).get("conditions") or [])

            await wait_until(unschedulable, TIMEOUT, "the extra pod to be Unschedulable")
        finally:
            for n in node_names:
                await kube.request("DELETE", f"/api/v1/nodes/{n}")
            await kube.close()
            plane.procs.stop(f"kube-scheduler-{tag}", grace=5)
            plane.procs.stop(f"extender-{tag}", grace=5)

    asyncio.run(main())
