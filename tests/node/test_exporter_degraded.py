"""The exporter on drivers that lack or refuse queries: fewer series, never an error; bad
regions and lost GPUs are counted in gpugov_exporter_errors_total."""

from __future__ import annotations

from nvml_fake import A100_80
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpugov.node.exporter import ExporterConfig, NodeCollector, make_registry, parse_listen

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def scrape(collector: NodeCollector) -> dict[str, list]:
    text = generate_latest(make_registry(collector)).decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_older_driver_gives_fewer_series_not_errors(node, open_nvml, tmp_path):
    node.gpu(A100_80, "unsupported utilization", "unsupported power", "unsupported temperature",
             "throttle 0x44", "util 10 10")
    node.gpu(A100_80, "util 55 5")
    m = scrape(NodeCollector(open_nvml(node, legacy=True), ExporterConfig("n1")))
    assert [(s[0]["gpu"], s[1]) for s in m["DCGM_FI_DEV_GPU_UTIL"]] == [("1", 55.0)]
    assert {s[0]["gpu"] for s in m["DCGM_FI_DEV_POWER_USAGE"]} == {"1"}
    # memory and throttle reasons come from the older calls (v1 memory, the deprecated name)
    assert {s[0]["gpu"] for s in m["DCGM_FI_DEV_FB_USED"]} == {"0", "1"}
    assert ({"gpu": "0"}.items() <= m["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"][0][0].items()
            and m["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"][0][1] == 0x44)
    assert "gpugov_exporter_errors_total" not in m  # degraded is not an error


def test_lost_gpu_and_garbage_region_are_counted(node, open_nvml, tmp_path):
    node.gpu(A100_80)
    node.gpu(A100_80)
    bad = tmp_path / "regions" / f"team-b_web-1_{UID}" / "region"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"garbage")
    c = NodeCollector(open_nvml(node), ExporterConfig("n1", tmp_path / "regions"))
    m = scrape(c)
    assert [s[1] for s in m["gpugov_device_healthy"]] == [1.0, 1.0]
    assert dict((s[0]["reason"], s[1]) for s in m["gpugov_exporter_errors_total"]) == {
        "region_corrupt": 1.0}
    node.event("lost 1 1")
    m = scrape(c)
    assert [(s[0]["gpu"], s[1]) for s in m["gpugov_device_healthy"]] == [("0", 1.0), ("1", 0.0)]
    assert {s[0]["gpu"] for s in m["DCGM_FI_DEV_FB_USED"]} == {"0"}
    errors = dict((s[0]["reason"], s[1]) for s in m["gpugov_exporter_errors_total"])
    assert errors["region_corrupt"] == 2.0 and errors["gpu_lost"] == 1.0


def test_listen_address_is_checked():
    assert parse_listen("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_listen("[::1]:9400") == ("::1", 9400)
    for bad in ("9400", "host:", "host:99999", "host:http"):
        try:
            parse_listen(bad)
        except ValueError as e:
            assert "expected HOST:PORT" in str(e)
        else:
            raise AssertionError(bad)


def test_hostname_label_defaults_to_the_node_name(node, open_nvml, monkeypatch):
    node.gpu(A100_80)
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    m = scrape(NodeCollector(open_nvml(node), ExporterConfig()))
    assert {s[0]["Hostname"] for s in m["gpugov_device_healthy"]} == {"gpu-node-7"}
