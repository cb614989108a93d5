"""HAMi's metric names on gpugov's exporter (opt-in): HAMi's own Grafana dashboard
(tests/node/upstream/hami, unedited) pointed at `gpugov node exporter` through a real
Prometheus has data in every panel and variable; values come from the node's pod regions
(allocations the library enforces) and NVML. Off by default: no `hami_*` series."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from nvml_fake import A100_80
from region_files import SlotSpec, start_ticks, write_region
from test_exporter_dcgm import scrape
from test_exporter_prometheus import PROMETHEUS, serve_exporter, serve_prometheus, wait_for

from gpugov.node.exporter import ExporterConfig, NodeCollector
from gpugov.node.hami_metrics import ENV

DASHBOARD = Path(__file__).parent / "upstream" / "hami" / "hami-vgpu-dashboard.json"
GIB = 1 << 30
UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def _panels(d: dict) -> list[dict]:
    out = []
    for p in d.get("panels", []):
        out += _panels(p) + [p]
    return out


@pytest.fixture
def shared_node(node, sleepers, tmp_path: Path):
    """GPU 0 holds one pod's slice (20 GiB / 30 %, 6 GiB charged); GPU 1 is idle."""
    pid = sleepers.start()
    node.gpu(A100_80, f"proc {pid} {6 * GIB}", "util 40 12")
    node.gpu(A100_80, "util 0 0")
    write_region(tmp_path / "regions" / f"team-a_trainer-0_{UID}" / "region", [20 * GIB], [30],
                 [SlotSpec(pid, start_ticks(pid), [6 * GIB])])
    return node


def test_hami_names_are_opt_in(shared_node, open_nvml, tmp_path: Path) -> None:
    off = scrape(NodeCollector(open_nvml(shared_node), ExporterConfig("n1", tmp_path / "regions")))
    assert not [n for n in off if n.startswith("hami_")]
    c = NodeCollector(open_nvml(shared_node), ExporterConfig("n1", tmp_path / "regions",
                                                             hami_metrics=True))
    scrape(c)
    m = scrape(c)
    dev = {s[0]["device_index"]: s[1] for s in m["hami_gpu_memory_allocated_bytes"]}
    assert dev == {"0": 20 * GIB, "1": 0}
    assert {s[0]["device_index"]: s[1] for s in m["hami_gpu_core_allocated_ratio"]} == {
        "0": 0.3, "1": 0.0}
    [(labels, used)] = m["hami_vgpu_memory_used_bytes"]
    assert (labels["namespace"], labels["pod"], labels["vdevice_index"], used) == (
        "team-a", "trainer-0", "0", 6 * GIB)
    assert m["hami_container_device_utilization_ratio"][0][1] == 0.0  # no device time charged


@pytest.mark.skipif(PROMETHEUS is None or not Path(PROMETHEUS).exists(),
                    reason="needs Prometheus (Debian package `prometheus`)")
def test_hamis_own_dashboard_has_data(shared_node, fakes, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "1")
    dash = json.loads(DASHBOARD.read_text())
    with serve_exporter(shared_node, fakes, tmp_path) as port, \
            serve_prometheus(port, tmp_path) as query:
        wait_for("a utilization ratio (two scrapes)",
                 lambda: query("hami_container_device_utilization_ratio"))
        for v in dash["templating"]["list"]:
            if v["type"] != "query":
                continue
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((\w+), (\w+)\)", q)
            assert m and query(f"group by ({m.group(2)}) ({m.group(1)})"), v["name"]
        empty = []
        for p in _panels(dash):
            for t in p.get("targets", []):
                expr = re.sub(r"\$(node|namespace)\b", ".*", t["expr"])
                if not query(expr):
                    empty.append(f"{p.get('title')}: {expr}")
        assert not empty, "panels without data:\n" + "\n".join(empty)


def test_a_pods_containers_on_one_device_count_once(node, open_nvml, tmp_path: Path) -> None:
    """An init container's device is handed on to an app container (containers running
    together never share one), so both regions name GPU 0: the pod holds it once, with the
    larger of their limits; GPU 1 holds the app container's second device and another pod."""
    node.gpu(A100_80, "util 0 0")
    node.gpu(A100_80, "util 0 0")
    u0, u1 = (f"GPU-{i:08d}-1111-2222-3333-{i:012d}" for i in (0, 1))
    pod = tmp_path / "regions" / f"team-a_trainer-0_{UID}"
    write_region(pod / "containers" / "init" / "region", [10 * GIB], [20], [])
    (pod / "containers" / "init" / "devices").write_text(f"{u0}\n")
    write_region(pod / "containers" / "train" / "region", [20 * GIB, 20 * GIB], [30, 30], [])
    (pod / "containers" / "train" / "devices").write_text(f"{u0}\n{u1}\n")
    other = tmp_path / "regions" / "team-b_infer-0_1f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    write_region(other / "region", [8 * GIB], [10], [])
    (other / "devices").write_text(f"{u1}\n")
    c = NodeCollector(open_nvml(node), ExporterConfig("n1", tmp_path / "regions",
                                                      hami_metrics=True))
    m = scrape(c)
    alloc = {s[0]["device_index"]: s[1] for s in m["hami_gpu_memory_allocated_bytes"]}
    assert alloc == {"0": 20 * GIB, "1": 28 * GIB}
    cores = {s[0]["device_index"]: s[1] for s in m["hami_gpu_core_allocated_ratio"]}
    assert cores == {"0": 0.3, "1": 0.4}
    shared = {s[0]["device_index"]: s[1] for s in m["hami_gpu_shared_count"]}
    assert shared == {"0": 1, "1": 2}
    # per container, each region keeps its own series
    per = sorted((s[0]["container"], s[0]["vdevice_index"]) for s in
                 m["hami_vgpu_memory_limit_bytes"])
    assert per == [("", "0"), ("init", "0"), ("train", "0"), ("train", "1")]
