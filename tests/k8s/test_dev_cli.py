"""`gpugov dev up/down` as a user runs them: a working cluster, then no process left behind."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path

from kubernetes_asyncio import client

from gpugov.k8s import annotations as ann
from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.devcluster.processes import alive
from gpugov.k8s.devcluster.pytest_plugin import ensure_binaries_or_skip

sys.path.insert(0, str(Path(__file__).parent))
from cli_run import gpugov  # noqa: E402

CLUSTER = textwrap.dedent("""\
    nodePools:
      - name: a100
        count: 2
        model: A100-SXM4-80GB
        gpus: 8
        cpuMilli: 96000
        memoryMiB: 1048576
        topology: nvswitch
        devices:
          - {index: "0-3", mode: soft}
    """)


def test_dev_up_serves_gpu_pods_and_down_leaves_nothing(tmp_path, monkeypatch):
    ensure_binaries_or_skip()
    nodes = tmp_path / "cluster.yaml"
    nodes.write_text(CLUSTER)
    work = tmp_path / "dev"
    up = gpugov("dev", "up", "--nodes", str(nodes), "--dir", str(work))
    try:
        assert up.returncode == 0, up.stderr
        last = up.stdout.strip().splitlines()[-1]
        assert last == f"export KUBECONFIG={work.resolve() / 'kubeconfig'}"
        # in a pipe (issue 23) the steps of a start that takes well over 2 s show on stderr
        # as plain lines; stdout keeps only the export line
        assert "dev up: " in up.stderr and "dev up: " not in up.stdout
        kubeconfig = last.split("=", 1)[1]
        again = gpugov("dev", "up", "--dir", str(work))
        assert again.returncode == 2 and "already running" in again.stderr

        def gpu_pod(name: str, limits: dict) -> dict:
            return {"metadata": {"name": name}, "spec": {"containers": [
                {"name": "c", "image": "x", "resources": {"limits": limits}}]}}

        async def use():
            async with api_client(kubeconfig) as api:
                core = client.CoreV1Api(api)
                nodes = [n.metadata.name for n in (await core.list_node()).items]
                await core.create_namespace({"metadata": {"name": "team"}})
                pod = await core.create_namespaced_pod("team", gpu_pod(
                    "infer", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"}))
                await core.create_namespaced_pod("team", gpu_pod("huge",
                                                                 {"nvidia.com/gpu": "64"}))
                queues = await client.CustomObjectsApi(api).list_cluster_custom_object(
                    "gpugov.io", "v1alpha1", "queues")
                reg = client.AdmissionregistrationV1Api(api)
                vaps = {v.metadata.name for v in
                        (await reg.list_validating_admission_policy()).items}
                assert {"gpugov-pod-ownership", "gpugov-node-scope-nodes",
                        "gpugov-node-scope-pods"} <= vaps
                # gpugov's scheduler, running under the chart's RBAC, binds one and explains
                # the other on its status (bind, status patch: allowed verbs)
                for _ in range(300):
                    bound = await core.read_namespaced_pod("infer", "team")
                    huge = await core.read_namespaced_pod("huge", "team")
                    conds = {c.type: c for c in huge.status.conditions or []}
                    if bound.spec.node_name and "PodScheduled" in conds:
                        break
                    await asyncio.sleep(0.2)
                return nodes, pod, [q["metadata"]["name"] for q in queues["items"]], bound, \
                    conds.get("PodScheduled")
        names, pod, queues, bound, unschedulable = asyncio.run(use())
        assert sorted(names) == ["a100-0", "a100-1"]
        assert queues == ["default"]
        assert pod.spec.scheduler_name == ann.SCHEDULER_NAME
        assert ann.decode_request(pod.metadata.annotations[ann.REQUEST]).memory_mib == 20000
        assert pod.metadata.annotations[ann.TENANT] == "default"
        alloc = ann.decode_allocation(bound.metadata.annotations[ann.ALLOCATION])
        assert alloc.node == bound.spec.node_name and alloc.devices[0].memory_mib == 20000
        assert unschedulable is not None and unschedulable.status == "False"
        assert "forbidden" not in (work / "logs" / "gpugov-scheduler.log").read_text().lower()
    finally:
        state = json.loads((work / "state.json").read_text()) if (work / "state.json").exists() \
            else {"processes": []}
        pids = [(p["name"], p["pid"], p["ticks"]) for p in state["processes"]]
        # in a pipe each process's stop is a plain stderr line (shown at once here, as past
        # 2 s; a process slow to stop holds `down` for seconds); stdout keeps the summary
        from typer.testing import CliRunner

        from gpugov.cli import app
        from gpugov.sim import progress

        real = progress.Steps
        monkeypatch.setattr(progress, "Steps", lambda *a, **k: real(
            *a, **{**k, "first_after": 0, "every": 3600}))
        down = CliRunner().invoke(app, ["dev", "down", "--dir", str(work)])
    assert down.exit_code == 0, down.output
    assert [line.split(", ")[0] for line in down.stderr.splitlines()] == [
        "dev down: reading the state",
        *(f"dev down: stopping {name}" for name, _, _ in reversed(pids))], down.stderr
    started = {name for name, _, _ in pids}
    assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
            "gpugov-webhook", "gpugov-scheduler"} <= started
    assert [name for name, pid, ticks in pids if alive(pid, ticks)] == []
    assert "stopped: " in down.stdout and "kube-apiserver" in down.stdout


def test_dev_up_refuses_a_bad_cluster_file_before_starting_anything(tmp_path):
    nodes = tmp_path / "cluster.yaml"
    nodes.write_text("nodePools:\n  - {name: x, count: 1, model: Z80, gpus: 1, cpuMilli: 1,"
                     " memoryMiB: 1}\n")
    out = gpugov("dev", "up", "--nodes", str(nodes), "--dir", str(tmp_path / "dev"))
    assert out.returncode == 2
    assert f"{nodes}: invalid cluster file" in out.stderr
    assert "nodePools[0].model: unknown GPU model 'Z80'" in out.stderr
    assert not (tmp_path / "dev" / "state.json").exists()


def test_dev_up_refuses_to_start_without_the_rbac_rules(tmp_path, monkeypatch):
    """No silent admin fallback: without loadable rules nothing starts, and the error says
    why."""
    from typer.testing import CliRunner

    from gpugov.cli import app
    from gpugov.k8s.devcluster import rbac

    monkeypatch.setattr(rbac, "rules_file", lambda: tmp_path / "gone" / "rbac.yaml")
    out = CliRunner().invoke(app, ["dev", "up", "--dir", str(tmp_path / "dev")])
    assert out.exit_code == 2, out.output
    assert "cannot load gpugov's RBAC rules from" in out.output
    assert "does not run them as the admin" in out.output
    assert not (tmp_path / "dev" / "state.json").exists()


def test_dev_build_reports_the_cache_and_refuses_clearly_without_go(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from gpugov.cli import app
    from gpugov.k8s.devcluster import build

    ensure_binaries_or_skip()
    cached = CliRunner().invoke(app, ["dev", "build"])
    assert cached.exit_code == 0, cached.output
    report = json.loads(cached.stdout)
    assert report["steps_s"] == {} and report["sizes_bytes"]["kube-apiserver"] > 10_000_000

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # an empty binary cache
    monkeypatch.setattr(build, "go_binary", lambda: None)
    missing = CliRunner().invoke(app, ["dev", "build"])
    assert missing.exit_code == 2
    assert "Go is not installed: gpugov builds kube-apiserver, etcd and kwok from their Go " \
        "modules" in missing.output


def test_dev_build_in_a_pipe_prints_its_steps_as_plain_lines(monkeypatch):
    """Issue 23: rich's spinner printed nothing in a pipe, so a 15-minute first build was
    silent there; now each step is a plain stderr line (stdout stays the JSON report)."""
    from typer.testing import CliRunner

    from gpugov.cli import app
    from gpugov.sim import progress

    ensure_binaries_or_skip()
    real = progress.Steps
    monkeypatch.setattr(progress, "Steps", lambda *a, **k: real(
        *a, **{**k, "first_after": 0, "every": 3600}))
    res = CliRunner().invoke(app, ["dev", "build"])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0].startswith("dev build: checking the binary cache, ")
    assert json.loads(res.stdout)["steps_s"] == {}
