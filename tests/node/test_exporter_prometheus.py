"""`gpugov node exporter` on the fake NVML, scraped by a real Prometheus: one PromQL query per
metric family returns the expected series, and the pod counters show what a probe under the
enforcement library (on the fake driver) did."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from nvml_fake import A100_80, H100_80
from region_files import SlotSpec, start_ticks, write_region

from gpugov.node.region import read_region

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
from native_build import build_all, drv  # noqa: E402

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
GiB = 1 << 30
MiB = 1 << 20
UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

pytestmark = pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK),
                                reason="needs Prometheus (Debian package `prometheus`)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def wait_for(what: str, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@contextmanager
def serve_exporter(node, fakes, tmp_path):
    """`gpugov node exporter` on the fake node and tmp_path/regions; yields its port."""
    env = {**os.environ, **node.write(), "LD_LIBRARY_PATH": str(fakes.current)}
    port = free_port()
    log = (tmp_path / "exporter.log").open("w")
    p = subprocess.Popen(
        [sys.executable, "-c", "from gpugov.cli import app; app()", "node", "exporter",
         "--listen", f"127.0.0.1:{port}", "--regions", str(tmp_path / "regions"),
         "--hostname", "gpu-node-1", "--recovery-seconds", "3600"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for("the exporter", lambda: get(f"http://127.0.0.1:{port}/healthz"))
        yield port
    finally:
        stop(p)
        log.close()


@contextmanager
def serve_prometheus(target_port: int, tmp_path):
    """A real Prometheus scraping the exporter every second; yields query(promql)."""
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: gpugov-node
    static_configs:
      - targets: ["127.0.0.1:{target_port}"]
""")
    log = (tmp_path / "prometheus.log").open("w")
    p = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}",
                          f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{port}"],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def query(q: str) -> list[dict]:
        body = json.loads(get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": q})))
        assert body["status"] == "success", body
        return body["data"]["result"]

    try:
        wait_for("Prometheus to scrape the exporter",
                 lambda: query('up{job="gpugov-node"} == 1'))
        yield query
    finally:
        stop(p)
        log.close()


@pytest.fixture
def exporter_node(node, fakes, sleepers, tmp_path):
    """A node with a shared A100 (one pod region, one bypassing process) and an H100 in MIG
    mode holding memory of a process that is gone; the exporter serving it."""
    accounted, bypass = sleepers.start(), sleepers.start()
    gone = sleepers.dead_pid()
    node.gpu(A100_80, f"proc {accounted} {GiB + 256 * MiB}", f"proc {bypass} {3 * GiB}",
             "util 40 12", "power 250000 400000", "temp 61", "clocks 1410 1593",
             "throttle 0x4")
    node.gpu(H100_80, "mig-mode 1", "gi 9 0", "gi 14 4", f"proc {gone} {2 * GiB} 1")
    write_region(tmp_path / "regions" / f"team-a_trainer-0_{UID}" / "region", [20 * GiB], [30],
                 [SlotSpec(accounted, start_ticks(accounted), [GiB])])
    with serve_exporter(node, fakes, tmp_path) as port:
        yield {"port": port, "bypass": bypass, "gone": gone, "node": node}


@pytest.fixture
def prometheus(exporter_node, tmp_path):
    with serve_prometheus(exporter_node["port"], tmp_path) as query:
        yield query


def series(result: list[dict], *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(r["metric"].get(k, "") for k in labels): float(r["value"][1]) for r in result}


def test_every_metric_family_reaches_prometheus(exporter_node, prometheus):
    q = prometheus
    gpu = ("gpu", "UUID", "modelName", "Hostname")
    util = series(q("DCGM_FI_DEV_GPU_UTIL"), *gpu)
    # GPU 1 is in MIG mode: no utilization (NVML refuses it there)
    assert list(util.values()) == [40.0] and next(iter(util))[0] == "0"
    assert next(iter(util))[2:] == ("NVIDIA A100-SXM4-80GB", "gpu-node-1")
    assert series(q("DCGM_FI_DEV_MEM_COPY_UTIL"), "gpu") == {("0",): 12.0}
    assert series(q("DCGM_FI_DEV_POWER_USAGE"), "gpu")[("0",)] == 250.0
    assert series(q("DCGM_FI_DEV_GPU_TEMP"), "gpu")[("0",)] == 61.0
    assert series(q("DCGM_FI_DEV_SM_CLOCK"), "gpu")[("0",)] == 1410.0
    assert series(q("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), "gpu")[("0",)] == 4.0
    fb = series(q("DCGM_FI_DEV_FB_USED"), "gpu", "GPU_I_PROFILE", "GPU_I_ID", "pod")
    assert fb[("0", "", "", "trainer-0")] == (4 * GiB + 256 * MiB) / MiB
    # MIG rows: the 3g.40gb instance holds the gone process's 2 GiB, the 2g.20gb nothing
    assert fb[("1", "3g.40gb", "1", "")] == 2048.0 and fb[("1", "2g.20gb", "2", "")] == 0.0
    assert series(q("DCGM_FI_DEV_FB_FREE"), "gpu", "GPU_I_ID")[("1", "2")] > 0
    assert set(series(q("DCGM_FI_DEV_XID_ERRORS"), "gpu").values()) == {0.0}
    assert series(q("gpugov_device_healthy"), "gpu") == {("0",): 1.0, ("1",): 1.0}
    assert series(q("gpugov_node_gpus"), "modelName") == {("A100-SXM4-80GB",): 1.0,
                                                          ("H100-SXM5-80GB",): 1.0}
    pod = ("namespace", "pod", "gpu")
    assert series(q("gpugov_pod_memory_used_bytes"), *pod) == {("team-a", "trainer-0", "0"): GiB}
    assert series(q("gpugov_pod_memory_limit_bytes"), *pod) == {
        ("team-a", "trainer-0", "0"): 20 * GiB}
    assert series(q("gpugov_pod_compute_limit_ratio"), *pod) == {
        ("team-a", "trainer-0", "0"): 0.3}
    # the region's counters exist from the start, at 0, so the first change is a rate
    for counter in ("gpugov_pod_device_time_seconds_total", "gpugov_pod_throttled_seconds_total",
                    "gpugov_pod_refused_allocations_total"):
        assert series(q(counter), *pod) == {("team-a", "trainer-0", "0"): 0.0}, counter
    assert series(q("gpugov_device_memory_unaccounted_bytes"), "gpu", "pid") == {
        ("0", str(exporter_node["bypass"])): 3 * GiB}
    assert series(q("gpugov_device_memory_zombie_bytes"), "gpu", "pid") == {
        ("1", str(exporter_node["gone"])): 2 * GiB}
    assert series(q("gpugov_device_memory_driver_overhead_bytes"), "gpu") == {("0",): 256 * MiB}
    assert q("gpugov_exporter_errors_total") == [] or all(
        float(r["value"][1]) == 0 for r in q("gpugov_exporter_errors_total"))

    # an XID 79 (fallen off the bus) arrives: the next scrapes show it and the GPU unhealthy
    exporter_node["node"].event("xid 0 79")
    wait_for("XID 79 in Prometheus", lambda: series(q("DCGM_FI_DEV_XID_ERRORS == 79"), "gpu"))
    wait_for("GPU 0 unhealthy", lambda: series(q("gpugov_device_healthy == 0"), "gpu")
             == {("0",): 0.0})


PROBE_UID = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d"
PROBE_UUID = "GPU-0000000a-1111-2222-3333-00000000000a"
MEMONLY_UUID = "GPU-0000000b-1111-2222-3333-00000000000b"


def test_pod_counters_show_what_the_probe_did(node, fakes, tmp_path):
    """A probe under the library charges throttled launches and is refused twice at its memory
    cap; the three pod counters in Prometheus are the region's, labelled with its GPU."""
    build = build_all(tmp_path / "native")
    folder = tmp_path / "regions" / f"team-b_probe-0_{PROBE_UID}"
    folder.mkdir(parents=True)
    (folder / "devices").write_text(PROBE_UUID + "\n")
    # an unreadable neighbour (a region of layout v2's size) must not hide the probe's series
    stale = tmp_path / "regions" / f"team-c_old-0_{PROBE_UID}"
    stale.mkdir()
    (stale / "region").write_bytes(b"\0" * 4096)
    # a pod with a memory cap and no compute limit: the library meters no device time for it
    memonly = tmp_path / "regions" / f"team-d_memonly-0_{PROBE_UID}"
    write_region(memonly / "region", [8 * GiB], [0], [])
    (memonly / "devices").write_text(MEMONLY_UUID + "\n")
    launches, kernel_us = 50, 2000
    r = drv(build, "direct", "ctx:0", f"launch:{launches}:{kernel_us}", "alloc:6Mi", "alloc:4Mi",
            "alloc:4Mi", "alloc:1Mi",
            env={"GPUGOV_SHARED_REGION": str(folder / "region"), "GPUGOV_CORE_LIMIT": "30",
                 "GPUGOV_MEMORY_LIMIT": "8Mi"})
    assert r.rcs("alloc") == [0, 2, 2, 0], r.stderr
    reg = read_region(folder / "region")
    device_s = launches * kernel_us / 1e6
    assert reg.device_ns[0] / 1e9 == pytest.approx(device_s, rel=0.1)
    assert reg.throttled_ns[0] / 1e9 > device_s  # at 30 % it waited longer than it ran
    node.gpu(A100_80, "util 30 5", uuid=PROBE_UUID)
    node.gpu(A100_80, "util 70 5", uuid=MEMONLY_UUID)
    with serve_exporter(node, fakes, tmp_path) as port, serve_prometheus(port, tmp_path) as q:
        labels = ("namespace", "pod", "gpu", "UUID")
        want = ("team-b", "probe-0", "0", PROBE_UUID)
        assert series(q("gpugov_pod_device_time_seconds_total"), *labels) == {
            want: reg.device_ns[0] / 1e9}
        assert series(q("gpugov_pod_throttled_seconds_total"), *labels) == {
            want: reg.throttled_ns[0] / 1e9}
        assert series(q("gpugov_pod_refused_allocations_total"), *labels) == {
            want: 2.0, ("team-d", "memonly-0", "1", MEMONLY_UUID): 0.0}
        # no compute limit, no device-time series (unknown, not 0: readers fall back to DCGM)
        assert q('gpugov_pod_device_time_seconds_total{pod="memonly-0"}') == []
        assert q('gpugov_pod_throttled_seconds_total{pod="memonly-0"}') == []
        errors = series(q("gpugov_exporter_errors_total"), "reason")
        assert errors.get(("region_corrupt",), 0) >= 1
