"""`gpugov reconcile` and `gpugov top` against a real kube-apiserver (the session's local
control plane): pods with and without gpugov annotations, Prometheus unreachable — the
process keeps serving what it can read, says what it cannot, and stops cleanly."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request

import obs_prometheus as promserver
from kubernetes_asyncio import client
from observe_data import device, node, pod
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from gpugov.cli import app

NODE = "obs-gpu-node"


def _metrics(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _setup(cluster) -> str:  # noqa: ANN001
    manifest = node(NODE, ["GPU-obs-0", "GPU-obs-1"])
    manifest["metadata"]["annotations"]["kwok.x-k8s.io/node"] = "fake"
    manifest["status"] = {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "10",
                                       "nvidia.com/gpu": "2"},
                          "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "10",
                                          "nvidia.com/gpu": "2"}}
    cluster.create_nodes([manifest])

    async def run() -> str:
        from gpugov.k8s.devcluster.dev import install_crds

        ns = await cluster.unique_namespace("obs")
        await install_crds(cluster.kubeconfig)
        async with cluster.api() as api:  # a Queue object: its quota is the declared view
            custom = client.CustomObjectsApi(api)
            for name, spec in ((f"{ns}-q", {"quota": {"gpu": 2}}),
                               # another team's broken Queue must not hide ours
                               (f"{ns}-orphan", {"parent": f"{ns}-gone",
                                                 "quota": {"gpu": 1}})):
                await custom.create_cluster_custom_object(
                    "gpugov.io", "v1alpha1", "queues",
                    {"apiVersion": "gpugov.io/v1alpha1", "kind": "Queue",
                     "metadata": {"name": name}, "spec": spec})
            # the Tenant decides whom the namespace's pods are charged to (not annotations)
            await custom.create_cluster_custom_object(
                "gpugov.io", "v1alpha1", "tenants",
                {"apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                 "metadata": {"name": f"t-{ns}"},
                 "spec": {"namespaces": [ns], "queue": f"{ns}-q"}})
        objs = [pod("annotated", ns=ns, node=NODE, queue=f"{ns}-q", tenant=f"t-{ns}",
                    request={"count": 1, "milli": 500, "memoryMiB": 40960},
                    devices=[device("GPU-obs-0", 0, "soft", 500, 40960)]),
                pod("plain", ns=ns, node=NODE, queue=None, tenant=None, gpu_limit=1)]
        async with cluster.api() as api:
            core = client.CoreV1Api(api)
            for o in objs:
                o["metadata"].pop("namespace")
                o.pop("status")
                o["spec"]["containers"][0]["image"] = "busybox"
                await core.create_namespaced_pod(ns, o)
            for _ in range(100):
                pods = (await core.list_namespaced_pod(ns)).items
                if all(p.status.phase == "Running" for p in pods):
                    break
                await asyncio.sleep(0.1)
        return ns

    return asyncio.run(run())


def test_reconcile_serves_cluster_views_while_prometheus_is_down(k8s_control_plane, tmp_path):
    ns = _setup(k8s_control_plane)
    port, dead = promserver.free_port(), promserver.free_port()
    log = (tmp_path / "reconcile.log").open("w")
    p = subprocess.Popen(
        [sys.executable, "-c", "from gpugov.cli import app; app()", "reconcile",
         "--kubeconfig", str(k8s_control_plane.kubeconfig),
         "--prometheus", f"http://127.0.0.1:{dead}", "--listen", f"127.0.0.1:{port}",
         "--interval", "0.3"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90  # a bound, not a speed claim: CI hosts are shared
        got: dict[str, list] = {}
        while time.monotonic() < deadline:
            try:
                got = _metrics(f"http://127.0.0.1:{port}/metrics")
                if any(s.labels.get("namespace") == ns
                       for s in got.get("gpugov_allocated_gpus", [])) and \
                        got.get("gpugov_reconciler_errors_total") and \
                        any(s.labels["queue"] == f"{ns}-q"
                            for s in got.get("gpugov_queue_quota_gpus", [])):
                    break
            except OSError:
                pass
            time.sleep(0.3)
        mine = {s.labels["pod"]: s for s in got["gpugov_declared_memory_bytes"]
                if s.labels["namespace"] == ns}
        assert mine["annotated"].value == 40960 * 2 ** 20
        assert mine["annotated"].labels["tenant"] == f"t-{ns}"
        alloc = {s.labels["pod"]: s.value for s in got["gpugov_allocated_compute_ratio"]
                 if s.labels["namespace"] == ns}
        assert alloc == {"annotated": 0.5}
        declared = {s.labels["pod"]: s.value for s in got["gpugov_declared_gpus"]
                    if s.labels["namespace"] == ns}
        assert declared == {"annotated": 1, "plain": 1}  # plain: from its nvidia.com/gpu limit
        quota = {s.labels["queue"]: s.value for s in got.get("gpugov_queue_quota_gpus", [])}
        assert f"{ns}-q" in quota, (tmp_path / "reconcile.log").read_text()
        usage = {s.labels["queue"]: s.value for s in got["gpugov_queue_usage_gpus"]}
        assert quota[f"{ns}-q"] == 2 and usage[f"{ns}-q"] == 0.5  # from the Queue object
        # used is unknown, not zero, while Prometheus is down
        assert not [s for s in got.get("gpugov_used_memory_bytes", [])
                    if s.labels["namespace"] == ns]
        errors = {s.labels["reason"]: s.value for s in got["gpugov_reconciler_errors_total"]}
        assert errors["prometheus-unreachable"] >= 1
        assert p.poll() is None, (tmp_path / "reconcile.log").read_text()  # still running
    finally:
        p.send_signal(signal.SIGTERM)
        code = p.wait(20)
        log.close()
    text = (tmp_path / "reconcile.log").read_text()
    assert code == 0, text
    assert f"Prometheus at http://127.0.0.1:{dead} is unreachable" in text
    assert f"pod {ns}/plain has no gpugov.io/request annotation" in text
    assert text.count(f"pod {ns}/plain has no") == 1  # said once, not every cycle
    assert f"queue tree '{ns}-orphan' left out" in text


def test_top_once_reads_the_cluster_directly(k8s_control_plane, tmp_path):
    ns = _setup(k8s_control_plane)
    for _ in range(20):  # the pods' phase settles through kwok; the quota is there at once
        r = CliRunner().invoke(app, ["top", "--once", "--kubeconfig",
                                     str(k8s_control_plane.kubeconfig)])
        assert r.exit_code == 0, r.output
        row = next((line for line in r.output.splitlines() if f"{ns}-q" in line), "")
        if row and row.split("│")[4].strip() == "0.50":
            break
        time.sleep(0.5)
    assert row.split("│")[2].strip() == "2.00", r.output  # the Queue object's quota
    assert row.split("│")[4].strip() == "0.50", r.output  # the annotated pod's share
    assert NODE in r.output and "soft" in r.output


def test_bad_kubeconfig_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text(json.dumps({"apiVersion": "v1", "kind": "Config"}))
    r = CliRunner().invoke(app, ["top", "--once", "--kubeconfig", str(bad)])
    assert r.exit_code == 2 and f"--kubeconfig {bad}: no current-context" in r.output, \
        r.output
    r = CliRunner().invoke(app, ["reconcile", "--kubeconfig", str(tmp_path / "nope"),
                                 "--prometheus", "http://127.0.0.1:9"])
    assert r.exit_code == 2 and "no such file" in r.output
