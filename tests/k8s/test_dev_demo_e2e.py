"""`gpugov dev up` (the built-in fleet) then `gpugov dev demo`, as a user runs them; the
outcome the demo claims — who borrowed, who was reclaimed, who preempted whom — checked from
the API alone. And the pending reasons a new cluster shows before it has nodes or Queues."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from gpugov.k8s import annotations as ann
from gpugov.k8s.devcluster.processes import alive
from gpugov.k8s.devcluster.pytest_plugin import ensure_binaries_or_skip
from gpugov.k8s.scheduler.kube import Kube
from gpugov.k8s.scheduler.state import NO_NODES, NO_QUEUES, SchedulerState

sys.path.insert(0, str(Path(__file__).parent))
from cli_run import gpugov  # noqa: E402

T0 = 1_800_000_000.0


async def _read(kubeconfig: str) -> dict:
    """Pods, Preempted events and Queues of the demo's namespaces, from the API."""
    kube = await Kube.from_kubeconfig(kubeconfig)
    try:
        out: dict = {"pods": {}, "events": [], "queues": {}, "nodes": []}
        for ns in ("vision", "research", "inference"):
            _, doc = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods")
            for p in doc["items"]:
                if not p["metadata"].get("deletionTimestamp"):
                    out["pods"][f"{ns}/{p['metadata']['name']}"] = p
            _, doc = await kube.request("GET", f"/api/v1/namespaces/{ns}/events",
                                        query=[("fieldSelector", "reason=Preempted")])
            out["events"] += [(f"{ns}/{e['involvedObject']['name']}", e["message"])
                              for e in doc["items"]]
        _, doc = await kube.request("GET", "/apis/gpugov.io/v1alpha1/queues")
        out["queues"] = {q["metadata"]["name"]: q for q in doc["items"]}
        _, doc = await kube.request("GET", "/api/v1/nodes")
        out["nodes"] = sorted(n["metadata"]["name"] for n in doc["items"])
        return out
    finally:
        await kube.close()


def _message(pod: dict) -> str:
    for c in pod["status"].get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return c.get("message", "")
    return ""


def test_dev_demo_borrows_reclaims_and_preempts_as_its_summary_says(tmp_path: Path) -> None:
    ensure_binaries_or_skip()
    work = tmp_path / "dev"
    up = gpugov("dev", "up", "--dir", str(work))  # no --nodes: the built-in fleet
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = str(work.resolve() / "kubeconfig")
        assert up.stdout.strip().splitlines()[-1] == f"export KUBECONFIG={kubeconfig}"
        kubectl = work.resolve() / "bin" / "kubectl"
        assert "kubectl (v" in up.stderr and str(kubectl) in up.stderr
        assert kubectl.resolve().is_file()
        for step in ("kubectl get nodes", "gpugov dev demo", "gpugov top --kubeconfig"):
            assert step in up.stderr, up.stderr
        version = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", "version"],
                                 capture_output=True, text=True, timeout=60, check=False)
        assert version.returncode == 0 and "Server Version" in version.stdout, version
        nodes = gpugov("dev", "kubectl", "--dir", str(work), "get", "nodes", "-o", "name")
        assert nodes.returncode == 0 and sorted(nodes.stdout.split()) == [
            "node/a100-0", "node/a100-1", "node/h100-0"], nodes

        demo = gpugov("dev", "demo", "--dir", str(work), timeout=600)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        got = asyncio.run(_read(kubeconfig))
    finally:
        state = json.loads((work / "state.json").read_text()) \
            if (work / "state.json").exists() else {"processes": []}
        prometheus = state.get("prometheus_url")
        pids = [(p["pid"], p["ticks"]) for p in state["processes"]]
        gpugov("dev", "down", "--dir", str(work))
    assert [p for p in pids if alive(*p)] == []

    assert got["nodes"] == ["a100-0", "a100-1", "h100-0"]
    pods, queues = got["pods"], got["queues"]

    def bound(key: str) -> bool:
        return key in pods and bool(pods[key]["spec"].get("nodeName"))

    def allocation(key: str) -> ann.Allocation:
        return ann.decode_allocation(pods[key]["metadata"]["annotations"][ann.ALLOCATION])

    # each spelling became the request it means
    hami = allocation("vision/infer-0")
    assert hami.devices[0].memory_mib == 20000 and str(hami.devices[0].mode) == "soft"
    assert allocation("research/notebook").devices[0].milli == 500  # KAI gpu-fraction 0.5
    assert str(allocation("research/dev-0").devices[0].mode) == "timeslice"
    assert str(allocation("research/mps-0").devices[0].mode) == "mps"
    assert str(allocation("inference/serve-3g").devices[0].mode) == "mig"
    # the untrusted team only ever got hard isolation
    assert {str(allocation(k).isolation) for k in pods
            if k.startswith("inference/") and bound(k)} == {"hard"}
    # the gang runs whole
    assert bound("research/train-0") and bound("research/train-1")

    # research borrowed: it still holds more than its quota (on GPUs no one else wants)
    research = queues["research"]
    assert research["status"]["usage"]["gpu"] > research["spec"]["quota"]["gpu"]

    evictions = []
    for victim, msg in got["events"]:
        assert msg.startswith("gpugov: evicted ("), msg
        kind = msg.split("(", 1)[1].split(")", 1)[0]
        evictions.append((victim, kind, msg.rsplit(" ", 1)[-1]))
    reclaims = [e for e in evictions if e[1] == "reclaim"]
    preempts = [e for e in evictions if e[1] == "preempt"]
    # reclaimed: only research's borrowed pods, each for one of vision's finetune pods,
    # and those pods are gone; vision got 4 of its 5, the 5th waits at fair share
    assert len(reclaims) == 4
    assert all(v.startswith("research/") and p.startswith("vision/finetune-")
               for v, _, p in reclaims)
    assert not any(v in pods for v, _, _ in reclaims)
    assert all(bound(f"vision/finetune-{i}") for i in range(4))
    assert not bound("vision/finetune-4")
    assert "waiting-for-fair-share" in _message(pods["vision/finetune-4"])
    assert research["status"]["usage"]["gpu"] >= research["status"]["fairShare"]["gpu"]
    # preempted: the urgent pod took one batch pod of its own team at the team's cap
    assert len(preempts) == 1
    ((victim, _, preemptor),) = preempts
    assert victim in ("inference/batch-0", "inference/batch-1") and victim not in pods
    assert preemptor == "inference/urgent" and bound("inference/urgent")
    assert queues["inference"]["status"]["usage"]["gpu"] <= 3.0

    # the summary says the same
    out = demo.stdout
    assert "research borrowed" in out
    for v, _, p in reclaims:
        assert f"{v} was evicted for {p} (reclaim" in out
    assert f"{victim} was evicted for inference/urgent (preempt" in out
    assert "vision/finetune-4 waits: gpugov: waiting-for-fair-share" in out
    if prometheus:  # `dev up` ran Prometheus and the simulated exporter: top shows used
        assert "Devices (used: SIMULATED)" in out and "busy and memory are SIMULATED" in out
    else:  # no Prometheus binary: no used view, and top says so
        assert "not measured" in out


def _pod(name: str, gpus: int = 1) -> dict:
    return {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}",
                         "creationTimestamp": "2027-01-15T08:00:00Z"},
            "spec": {"schedulerName": "gpugov", "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Pending"}}


def test_pending_reasons_name_the_real_cause_and_what_to_do() -> None:
    """No nodes, no Queue objects, no GPU nodes: each said as such, with the fix — never
    blamed on the queue config."""
    st = SchedulerState(policy="bestfit")
    st.set_object("tenant", {"metadata": {"name": "t"},
                             "spec": {"queue": "q", "namespaces": ["team"],
                                      "trust": "internal"}})
    st.set_pod(_pod("p"))
    (cond,) = st.cycle(T0).conditions
    assert cond.code == NO_NODES and "gpugov dev up" in cond.message
    assert "queue" not in cond.message.split("no nodes", 1)[0]
    st.set_node({"metadata": {"name": "cpu-0"},
                 "status": {"allocatable": {"cpu": "8", "memory": "32Gi"},
                            "conditions": [{"type": "Ready", "status": "True"}]}})
    (cond,) = st.cycle(T0 + 1).conditions
    assert cond.code == NO_QUEUES and "create a Queue" in cond.message
    st.set_object("queue", {"metadata": {"name": "q"}, "spec": {}})
    (cond,) = st.cycle(T0 + 2).conditions
    assert "no GPU nodes" in cond.message and "add GPU nodes" in cond.message
