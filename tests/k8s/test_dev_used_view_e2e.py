"""The used view of a dev cluster (issue 27): kwok nodes have no GPU, so `gpugov node exporter
--simulate` serves SIMULATED exporter series from the pods' allocation records, a real
Prometheus (Debian's) scrapes them, and `gpugov top --once` shows busy and memory numbers
for a bound pod's device, saying they are simulated. Pieces as `gpugov dev up` starts them
(`k8s.devcluster.used_view`), on the pytest cluster fixture."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpugov.k8s.annotations import (
    ALLOCATION,
    INVENTORY,
    AllocatedDevice,
    Allocation,
    Inventory,
    InventoryDevice,
    encode_allocation,
    encode_inventory,
)
from gpugov.k8s.devcluster.plane import probe
from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import env, gpugov_argv
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.node.synthetic import KWOK, Simulation, devices

sys.path.insert(0, str(Path(__file__).parents[1] / "observe"))
import obs_prometheus  # noqa: E402


def _node(name: str, kwok: bool = True) -> dict:
    inv = Inventory((InventoryDevice(0, f"GPU-{name}-0", "A100-SXM4-80GB", 81920),
                     InventoryDevice(1, f"GPU-{name}-1", "A100-SXM4-80GB", 81920,
                                     DeviceMode.SOFT)))
    ann = {INVENTORY: encode_inventory(inv), **({KWOK: "fake"} if kwok else {})}
    return {"metadata": {"name": name, "annotations": ann}}


def _pod(name: str, node: str, *devs: AllocatedDevice) -> dict:
    rec = Allocation(node, IsolationLevel.HARD, devs)
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "annotations": {ALLOCATION: encode_allocation(rec)}},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_simulated_series_follow_allocations_and_say_so():
    """Pure: a whole GPU's pod uses 55-95 % of it, a soft slice's pods their shares; every
    series is labelled simulated; a real (non-kwok) node is never simulated."""
    nodes = [_node("k0"), _node("real", kwok=False)]
    pods = [_pod("whole", "k0", AllocatedDevice(0, DeviceMode.EXCLUSIVE, 1000, 0)),
            _pod("s1", "k0", AllocatedDevice(1, DeviceMode.SOFT, 300, 10000)),
            _pod("s2", "k0", AllocatedDevice(1, DeviceMode.SOFT, 200, 5000)),
            _pod("elsewhere", "real", AllocatedDevice(0, DeviceMode.EXCLUSIVE, 1000, 0))]
    devs = devices(nodes, pods)
    assert [(d.node, d.index, len(d.uses)) for d in devs] == [("k0", 0, 1), ("k0", 1, 2)]
    assert 55 <= devs[0].busy_percent() <= 95
    assert 0.6 * 81920 <= devs[0].fb_used_mib() <= 0.9 * 81920
    assert 0.55 * 50 <= devs[1].busy_percent() <= 0.95 * 50
    assert devs[1].fb_used_mib() <= 15000
    text = Simulation().render(devs, now=0.0).decode()
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert series and all('simulated="true"' in line or line.startswith(
        "gpugov_exporter_simulated") for line in series)
    assert 'pod="whole"' in text and "real" not in text
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(text)}  # valid exposition
    assert {"DCGM_FI_DEV_GPU_UTIL", "gpugov_exporter_simulated",
            "gpugov_pod_device_time_seconds"} <= set(fams)


@pytest.mark.skipif(obs_prometheus.PROMETHEUS is None, reason="Debian's prometheus missing")
def test_top_shows_simulated_numbers_for_a_bound_pod(k8s_control_plane, tmp_path):
    cluster = k8s_control_plane
    port = free_port()
    name = f"sim-exporter-{os.getpid()}-{tmp_path.name[-8:]}"

    async def main() -> tuple[str, str]:
        async with env(cluster) as e:
            (node,) = await e.add_pools({
                "name": "sim", "count": 1, "model": "A100-SXM4-80GB", "gpus": 2,
                "cpuMilli": 32000, "memoryMiB": 262144,
                "devices": [{"index": "0-1", "mode": "exclusive"}]})
            q = await e.queue("q", quota={"gpu": 2})
            e.start_scheduler()
            await e.pods([e.pod("trainer", q, limits={"nvidia.com/gpu": "1"})])
            (pod,) = [p for p in await e.wait_bound(1)]
            assert pod["spec"]["nodeName"] == node
            assert names.ANN_ALLOCATION in pod["metadata"]["annotations"]
            cluster.plane.start_process(name, gpugov_argv(
                "node", "exporter", "--simulate", "--kubeconfig", str(cluster.kubeconfig),
                "--listen", f"127.0.0.1:{port}"),
                ready=lambda: probe(f"http://127.0.0.1:{port}/healthz", None) == b"ok",
                timeout=60)
            e.procs.append(name)
            prom = obs_prometheus.start(tmp_path / "prom", [f"127.0.0.1:{port}"])
            try:
                prom.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}",pod="trainer"}}',
                              timeout=60)
                # a rate window the series fills (rate() divides by the whole window)
                prom.wait_for('count_over_time(gpugov_pod_device_time_seconds_total'
                              '{pod="trainer"}[10s]) >= 8', timeout=60)
                out = subprocess.run(gpugov_argv(
                    "top", "--once", "--kubeconfig", str(cluster.kubeconfig),
                    "--prometheus", prom.url, "--window", "10s"),
                    capture_output=True, text=True, timeout=120,
                    env={**os.environ, "COLUMNS": "200"})
            finally:
                prom.stop()
            assert out.returncode == 0, out.stderr
            return node, out.stdout

    node, screen = asyncio.run(main())
    rows = [line for line in screen.splitlines() if node in line]
    assert rows, screen
    # busy and memory numbers, not dashes
    assert any(re.search(r"\d+ %", r) and re.search(r"\d+\.\d /", r) for r in rows), screen
    assert "idle" not in screen  # the simulated pod uses what it holds
    assert "SIMULATED" in screen, screen
    assert "not measured" in screen  # the label says what they are
