"""The local control plane: real etcd + kube-apiserver + kube-controller-manager + kwok."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from gpugov.k8s import annotations as ann
from gpugov.k8s.devcluster.cluster_file import ClusterFileError, load_cluster_file
from gpugov.k8s.devcluster.plane import LocalControlPlane, StartError
from gpugov.k8s.devcluster.processes import ProcessSet, alive
from gpugov.k8s.devcluster.pytest_plugin import ensure_binaries_or_skip

MIXED = textwrap.dedent("""\
    nodePools:
      - name: dc-h100
        count: 2
        model: H100-SXM5-80GB
        gpus: 8
        cpuMilli: 192000
        memoryMiB: 2097152
        topology: nvswitch
        powerBudgetW: 6000
        labels: {zone: a}
        taints: [{key: dedicated, value: infer, effect: NoSchedule}]
        devices:
          - {index: "0-1", mode: mig, layout: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}
          - {index: "2-3", mode: soft}
          - {index: "4", mode: timeslice, replicas: 4}
      - name: dc-t4
        count: 1
        model: T4
        gpus: 4
        cpuMilli: 64000
        memoryMiB: 262144
    """)


def test_nodes_from_cluster_yaml_carry_capacity_labels_and_inventory(k8s_control_plane,
                                                                      tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(MIXED)
    names = k8s_control_plane.create_nodes(path)
    assert sorted(names) == ["dc-h100-0", "dc-h100-1", "dc-t4-0"]

    async def read():
        async with k8s_control_plane.api() as api:
            return await client.CoreV1Api(api).read_node("dc-h100-1")
    node = asyncio.run(read())
    alloc = node.status.allocatable
    assert alloc["nvidia.com/mig-1g.10gb"] == "4" and alloc["nvidia.com/mig-3g.40gb"] == "2"
    assert alloc["nvidia.com/gpu"] == str(3 + 2 * 10)  # 3 exclusive + 2 soft x split 10
    assert alloc["nvidia.com/gpu.shared"] == "4" and alloc["cpu"] == "192"
    labels = node.metadata.labels
    assert labels[ann.GFD_PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    assert labels[ann.GFD_MIG_STRATEGY] == "mixed" and labels["zone"] == "a"
    assert node.spec.taints[0].key == "dedicated"
    inv = ann.decode_inventory(node.metadata.annotations[ann.INVENTORY])
    assert [d.mode.value for d in inv.devices[:5]] == ["mig", "mig", "soft", "soft",
                                                      "timeslice"]
    mig = inv.devices[0].mig
    assert sorted(m.profile for m in mig) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert len({m.start for m in mig}) == 4  # at distinct valid starts
    assert inv.power_budget_w == 6000
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready and ready[0].status == "True"  # kwok manages it


def test_kwok_runs_a_pod_bound_to_a_fake_node(k8s_control_plane):
    k8s_control_plane.create_nodes([{
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "dc-plain", "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "10"},
                   "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "10"}}}])

    async def run() -> str:
        ns = await k8s_control_plane.unique_namespace("dc")
        async with k8s_control_plane.api() as api:
            core = client.CoreV1Api(api)
            await core.create_namespaced_pod(ns, {
                "metadata": {"name": "p"},
                "spec": {"nodeName": "dc-plain",
                         "containers": [{"name": "c", "image": "busybox"}]}})
            for _ in range(100):
                pod = await core.read_namespaced_pod("p", ns)
                if pod.status.phase == "Running":
                    return "Running"
                await asyncio.sleep(0.1)
            return pod.status.phase
    assert asyncio.run(run()) == "Running"


def test_controller_manager_runs_deployments(k8s_control_plane):
    async def run() -> int:
        ns = await k8s_control_plane.unique_namespace("dc")
        async with k8s_control_plane.api() as api:
            await client.AppsV1Api(api).create_namespaced_deployment(ns, {
                "metadata": {"name": "d"},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
                         "template": {"metadata": {"labels": {"app": "d"}},
                                      "spec": {"containers": [{"name": "c",
                                                               "image": "busybox"}]}}}})
            core = client.CoreV1Api(api)
            for _ in range(150):
                pods = await core.list_namespaced_pod(ns)
                if len(pods.items) == 2:
                    return 2
                await asyncio.sleep(0.1)
            return len(pods.items)
    assert asyncio.run(run()) == 2  # the ReplicaSet controller created the pods


def test_stop_leaves_no_process_of_the_state_file(tmp_path):
    bins = ensure_binaries_or_skip()
    plane = LocalControlPlane(tmp_path / "p", binaries=bins, controller_manager=False, kwok=True)
    plane.start()
    pids = [p.pid for p in ProcessSet.load(plane.workdir).procs.values()]
    assert len(pids) == 3 and all(alive(pid) for pid in pids)
    plane.stop()
    assert not any(alive(pid) for pid in pids)
    assert ProcessSet.load(plane.workdir).procs == {}


def test_start_failure_shows_the_log_tail_and_stops_the_rest(tmp_path):
    bins = ensure_binaries_or_skip()
    plane = LocalControlPlane(tmp_path / "bad", binaries=bins, controller_manager=False,
                              kwok=False,
                              extra_args={"kube-apiserver": ["--no-such-flag=1"]})
    with pytest.raises(StartError) as info:
        plane.start(timeout=30)
    assert "kube-apiserver exited" in str(info.value)
    assert "unknown flag: --no-such-flag" in str(info.value)
    state = json.loads((tmp_path / "bad" / "state.json").read_text())
    assert state["processes"] == []  # etcd was stopped too


@pytest.mark.parametrize("text,needle", [
    ("nodePools: []", "nodePools: List should have at least 1 item"),
    ("nodePools:\n  - {name: a, count: 1, model: Z80, gpus: 1, cpuMilli: 1, memoryMiB: 1}",
     "nodePools[0].model: unknown GPU model 'Z80'"),
    ("nodePools:\n  - {name: a, count: 1, model: T4, gpus: 2, cpuMilli: -1, memoryMiB: 1}",
     "nodePools[0].cpuMilli: Input should be greater than or equal to 0"),
    ("nodePools:\n  - {name: a, count: 1, model: A100-SXM4-80GB, gpus: 4, cpuMilli: 1,"
     " memoryMiB: 1, devices: [{index: '0-2', mode: soft}, {index: 2, mode: mig,"
     " layout: [7g.80gb]}]}", "nodePools[0].devices[1].index: device 2 is already in devices[0]"),
    ("nodePools:\n  - {name: a, count: 1, model: A100-SXM4-80GB, gpus: 1, cpuMilli: 1,"
     " memoryMiB: 1, devices: [{index: 0, mode: mig, layout: [7g.80gb, 1g.10gb]}]}",
     "nodePools[0].devices[0].layout: 7g.80gb, 1g.10gb does not fit"),
    ("nodePools:\n  - {name: a, count: 1, model: T4, gpus: 1, cpuMilli: 1, memoryMiB: 1,"
     " devices: [{index: 0, mode: mig, layout: [1g.10gb]}]}", "T4 has no MIG"),
    ("nodePools:\n  - {name: a, count: 1, gpus: 0, cpuMilli: 1, memoryMiB: 1, colour: red}",
     "nodePools[0].colour: unknown field"),
])
def test_bad_cluster_yaml_names_path_and_field(tmp_path, text, needle):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(ClusterFileError) as info:
        load_cluster_file(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_bad_nodes_csv_names_line_and_column(tmp_path: Path):
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,1024,2,T4\n"
                    "n-1,lots,1024,2,T4\nn-0,1,1,0,\n")
    with pytest.raises(ClusterFileError) as info:
        load_cluster_file(path)
    assert "line 3: cpu_milli: 'lots' is not a whole number" in str(info.value)
    assert "line 4: sn: duplicate node name 'n-0'" in str(info.value)


STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(120)")


def test_stop_kills_a_process_that_ignores_sigterm_after_the_grace(tmp_path):
    procs = ProcessSet(tmp_path)
    proc = procs.start("stubborn", [sys.executable, "-c", STUBBORN])
    for _ in range(100):
        if "ready" in proc.log.read_text():
            break
        time.sleep(0.05)
    procs.stop("stubborn", grace=0.5)
    assert not alive(proc.pid)
    assert proc.popen.returncode == -9  # SIGKILL, after SIGTERM was ignored


def test_a_recycled_pid_is_never_signalled(tmp_path):
    procs = ProcessSet(tmp_path)
    proc = procs.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
    state = json.loads(procs.state_path.read_text())
    state["processes"][0]["ticks"] += 1  # as if the pid now belonged to another process
    procs.state_path.write_text(json.dumps(state))
    loaded = ProcessSet.load(tmp_path)
    assert not loaded.procs["sleeper"].running()
    loaded.stop_all(grace=0.5)
    assert proc.popen.poll() is None  # untouched
    procs.stop("sleeper", grace=2)
    assert proc.popen.poll() is not None


def test_the_documented_example_cluster_file_loads():
    from gpugov.k8s.devcluster.cluster_file import node_objects

    path = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "cluster.yaml"
    names = [n["metadata"]["name"] for n in node_objects(load_cluster_file(path))]
    assert names == ["h100-0", "a100-0", "a100-1"]


def test_the_built_in_fleet_is_package_data_with_every_mode_in_two_pools(tmp_path,
                                                                        monkeypatch):
    """`gpugov dev up` without --nodes: the fleet comes from the installed package (read
    from another working directory), the example file is a copy of it, and it has every
    device mode."""
    from gpugov.k8s.devcluster.cluster_file import builtin_fleet, builtin_fleet_text, node_objects

    monkeypatch.chdir(tmp_path)
    fleet = builtin_fleet()
    example = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "cluster.yaml"
    assert builtin_fleet_text() == example.read_text()
    assert [p.name for p in fleet.node_pools] == ["h100", "a100"]
    inventories = [ann.decode_inventory(n["metadata"]["annotations"][ann.INVENTORY])
                   for n in node_objects(fleet)]
    modes = {str(d.mode) for inv in inventories for d in inv.devices}
    assert modes == {"mig", "soft", "timeslice", "mps", "exclusive"}


def test_a_killed_test_run_leaves_no_control_plane_behind(tmp_path):
    """With die_with_parent (the fixture's setting), SIGKILL of the Python process that
    started the plane still takes etcd and kube-apiserver down."""
    import signal
    import subprocess

    bins = ensure_binaries_or_skip()
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from gpugov.k8s.devcluster.plane import LocalControlPlane\n"
        f"p = LocalControlPlane(Path({str(tmp_path / 'p')!r}), binaries=Path({str(bins)!r}),"
        " controller_manager=False, kwok=False, die_with_parent=True)\n"
        "p.start()\n"
        "print('up', flush=True)\n"
        "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "up"
        state = json.loads((tmp_path / "p" / "state.json").read_text())
        pids = [(p["pid"], p["ticks"]) for p in state["processes"]]
        assert len(pids) == 2 and all(alive(pid, ticks) for pid, ticks in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid, ticks) for pid, ticks in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid, ticks in pids if alive(pid, ticks)] == []


def test_dev_down_never_signals_a_process_whose_identity_is_not_proven(tmp_path):
    """Issue 22, finding 10: an entry without a start time (or with another executable) is a
    pid gpugov cannot prove it started; it is never signalled."""
    procs = ProcessSet(tmp_path)
    proc = procs.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for change in ({"ticks": None}, {"exe": "/usr/bin/not-what-we-started"}):
            state = json.loads(procs.state_path.read_text())
            state["processes"][0].update(change)
            (tmp_path / "damaged").mkdir(exist_ok=True)
            (tmp_path / "damaged" / "state.json").write_text(json.dumps(state))
            loaded = ProcessSet.load(tmp_path / "damaged")
            assert not loaded.procs["sleeper"].running()
            loaded.stop_all(grace=0.5)
            assert proc.popen.poll() is None, change  # untouched
    finally:
        procs.stop("sleeper", grace=2)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"processes": 5}',
                                  '{"processes": [{"name": "x", "pid": "1"}]}',
                                  '{"processes": [{"name": "x", "pid": 1}]}', "\udcff"])
def test_dev_down_on_a_damaged_state_file_names_it_and_signals_nothing(tmp_path, text):
    from typer.testing import CliRunner

    from gpugov.cli import app
    from gpugov.k8s.devcluster.processes import StateFileError

    (tmp_path / "state.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(StateFileError, match="state.json"):
        ProcessSet.load(tmp_path)
    result = CliRunner().invoke(app, ["dev", "down", "--dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "no process was signalled" in result.output
    assert "Traceback" not in result.output
