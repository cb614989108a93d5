"""The real `gpugov node exporter` (fake NVML, a pod region as the enforcement library writes
it) scraped by a real Prometheus, joined by the reconciler: the used view of a pod is the
memory its region charges, idle allocations are seen, and the node dashboard has data."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import obs_prometheus as promserver
import pytest
from obs_stacks import run_reconciler
from observe_data import device, node, pod

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "node"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
from native_build import build_all, compiler  # noqa: E402

GIB, MIB = 1 << 30, 1 << 20
UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
HOST = "gpu-node-1"
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy/helm/gpugov/files/dashboards"


def _wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.fixture
def real_node(tmp_path: Path):
    """The exporter on a fake node: GPU 0 shared by a governed pod (6 GiB charged in its
    region) and a process outside the library (3 GiB); GPU 1 allocated to a pod, unused."""
    if compiler() is None:
        pytest.skip("no C compiler (cc): the fake NVML needs one")
    if promserver.PROMETHEUS is None:
        pytest.skip("needs prometheus (Debian package)")
    from nvml_fake import A100_80, FakeNode
    from region_files import SlotSpec, start_ticks, write_region

    libs = build_all(tmp_path / "build")
    procs = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(2)]
    governed, bypass = (p.pid for p in procs)
    fake = FakeNode(tmp_path / "nvml")
    u0 = "GPU-00000000-1111-2222-3333-000000000000"
    u1 = "GPU-00000001-1111-2222-3333-000000000001"
    fake.gpu(A100_80, f"proc {governed} {6 * GIB + 256 * MIB}", f"proc {bypass} {3 * GIB}",
             "util 40 12", uuid=u0)
    fake.gpu(A100_80, "util 0 0", uuid=u1)
    write_region(tmp_path / "regions" / f"team-a_trainer-0_{UID}" / "region", [20 * GIB],
                 [30], [SlotSpec(governed, start_ticks(governed), [6 * GIB])])
    env = {**os.environ, **fake.write(), "LD_LIBRARY_PATH": str(libs.dir)}
    port = promserver.free_port()
    log = (tmp_path / "exporter.log").open("w")
    exporter = subprocess.Popen(
        [sys.executable, "-c", "from gpugov.cli import app; app()", "node", "exporter",
         "--listen", f"127.0.0.1:{port}", "--regions", str(tmp_path / "regions"),
         "--hostname", HOST], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz")
        yield {"port": port, "uuids": (u0, u1), "bypass": bypass}
    finally:
        _stop(exporter)
        log.close()
        for p in procs:
            p.kill()
            p.wait()


def test_real_exporter_feeds_the_used_view(real_node, tmp_path: Path) -> None:
    u0, u1 = real_node["uuids"]
    pods = [pod("trainer-0", node=HOST, request={"count": 1, "milli": 300, "memoryMiB": 20480},
                devices=[device(u0, 0, "soft", 300, 20480)]),
            pod("idle-1", ns="team-b", queue="team-b", tenant="team-b", node=HOST,
                request={"count": 1, "memoryMiB": 81920}, devices=[device(u1, 1)])]
    nodes = [node(HOST, [u0, u1])]

    async def source() -> tuple[list[dict], list[dict]]:
        return pods, nodes

    rec_port = promserver.free_port()
    prom = promserver.start(tmp_path / "prom", [f"127.0.0.1:{real_node['port']}",
                                                f"127.0.0.1:{rec_port}"], interval="250ms")
    try:
        with run_reconciler(prom.url, rec_port, source):
            used = prom.wait_for('gpugov_used_memory_bytes{pod="trainer-0"}')
            assert float(used[0]["value"][1]) == 6 * GIB  # what the region charges
            eff = prom.wait_for('gpugov_efficiency_ratio{pod="trainer-0",resource="memory"}')
            assert float(eff[0]["value"][1]) == pytest.approx(6 / 20)
            # the pod's region meters compute (a 30 % limit) and charged no device time: its
            # used compute is the region's 0, not the 40 % DCGM sees on the shared GPU 0
            # (where a process outside the library runs too)
            # (until rate() has two scrapes of the counter, DCGM is the fallback)
            prom.wait_for('gpugov_used_compute_ratio{pod="trainer-0"} == 0')
            assert float(prom.wait_for('gpugov_used_gpus{pod="idle-1"}')[0]["value"][1]) == 0
            prom.wait_for('rate(gpugov_idle_allocated_gpu_seconds_total{pod="idle-1"}[2s]) > 0.5')
            assert prom.query("gpugov_node_agent_missing") == []  # the exporter's Hostname
            bypass = prom.wait_for("gpugov_device_memory_unaccounted_bytes")
            assert {(b["metric"]["pid"], float(b["value"][1])) for b in bypass} == {
                (str(real_node["bypass"]), 3 * GIB)}
            # the node/device dashboard, with its node variable set to this node
            dash = json.loads((DASHBOARD / "node-device.json").read_text())
            empty = []
            for p in dash["panels"]:
                for t in p["targets"]:
                    expr = t["expr"].replace("$node", HOST).replace("$__rate_interval", "3s")
                    if "zombie" in expr and "unaccounted" not in expr:
                        continue  # no dead process holds memory on this node
                    if "overcommit" in expr:
                        continue  # no time-sliced device here
                    if not prom.query(expr):
                        empty.append(f"{p['title']}: {expr}")
            assert not empty, "\n".join(empty)
    finally:
        prom.stop()


UPSTREAM = Path(__file__).resolve().parents[1] / "node" / "upstream" / "dcgm-exporter"


def test_dcgm_exporters_own_dashboard_has_data(tmp_path: Path) -> None:
    """dcgm-exporter's Grafana dashboard (unedited, tests/node/upstream/dcgm-exporter) pointed
    at gpugov's exporter through a real Prometheus: every panel's query and both variables
    return series — the tensor-core panel from GPM on a Hopper GPU and on its MIG instances."""
    if compiler() is None:
        pytest.skip("no C compiler (cc): the fake NVML needs one")
    if promserver.PROMETHEUS is None:
        pytest.skip("needs prometheus (Debian package)")
    from nvml_fake import A100_80, H100_80, FakeNode, build_fakes

    libs = build_fakes(tmp_path / "build")
    fake = FakeNode(tmp_path / "nvml")
    fake.gpu(H100_80, "cc 9 0", "gpm 61 55 30 42 37 3 20 9", "util 70 30")
    fake.gpu(H100_80, "cc 9 0", "mig-mode 1", "gi 9 0", "gi 14 4", "gpm-gi 1 80 70 50 66 20 0 10 5")
    fake.gpu(A100_80, "util 40 12")  # no GPM: no tensor series, the other panels still
    env = {**os.environ, **fake.write(), "LD_LIBRARY_PATH": str(libs.current)}
    port = promserver.free_port()
    log = (tmp_path / "exporter.log").open("w")
    exporter = subprocess.Popen(
        [sys.executable, "-c", "from gpugov.cli import app; app()", "node", "exporter",
         "--listen", f"127.0.0.1:{port}", "--hostname", HOST], env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    prom = None
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz")
        prom = promserver.start(tmp_path / "prom", [f"127.0.0.1:{port}"], interval="250ms")
        prom.wait_for("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")  # GPM: from the second scrape
        dash = json.loads((UPSTREAM / "dcgm-exporter-dashboard.json").read_text())
        variables = {v["name"]: v["query"] for v in dash["templating"]["list"]
                     if v["type"] == "query"}
        for name, query in variables.items():
            m = re.fullmatch(r"label_values\((\w+), (\w+)\)", query)
            assert m and prom.query(f"group by ({m.group(2)}) ({m.group(1)})"), name
        empty, tensor = [], []
        for p in dash["panels"]:
            for t in p.get("targets", []):
                # Grafana's "All" for $instance and $gpu (includeAll, no allValue)
                expr = t["expr"].replace("$instance", ".*").replace("$gpu", ".*")
                got = prom.query(expr)
                if not got:
                    empty.append(f"{p['title']}: {expr}")
                if "TENSOR" in expr:
                    tensor = got
        assert not empty, "panels without data:\n" + "\n".join(empty)
        rows = {(s["metric"]["gpu"], s["metric"].get("GPU_I_ID", "")): float(s["value"][1])
                for s in tensor}
        assert rows[("0", "")] == pytest.approx(0.42)  # the whole Hopper GPU
        assert rows[("1", "1")] == pytest.approx(0.66)  # a MIG instance of the second one
        assert not any(g == "2" for g, _ in rows)  # Ampere: NVML has no GPM there
    finally:
        if prom is not None:
            prom.stop()
        _stop(exporter)
        log.close()
