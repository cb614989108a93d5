"""Usage by claim: the node exporter reads the DRA kubelet plugin's claim regions
(`<state>/claim-regions/<ns>_<claim>_<uid>/`, with the `pods` file the plugin writes at
prepare) beside the device plugin's pod regions, on the fake NVML, scraped by a real
Prometheus: a claim's charged memory carries its claim and its pod; a device-plugin pod's
carries no claim; a claim's process is not taken for a bypass."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from nvml_fake import A100_80
from region_files import SlotSpec, start_ticks, write_region
from test_exporter_prometheus import PROMETHEUS, series, serve_exporter

from gpugov.node.dra.regions import scan_claims

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "observe"))
import obs_prometheus  # noqa: E402

GiB = 1 << 30
POD_UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
CLAIM_UID = "11111111-2222-3333-4444-555555555555"
INFER_UID = "99999999-8888-7777-6666-555555555555"


def _claim_region(root: Path, ns: str, claim: str, uid: str, pods: str | None,
                  slots: list[SlotSpec], limit: int = 20 * GiB) -> Path:
    folder = root / "claim-regions" / f"{ns}_{claim}_{uid}"
    write_region(folder / "region", [limit], [30], slots)
    (folder / "devices").write_text("GPU-fake-0\n")
    if pods is not None:
        (folder / "pods").write_text(pods)
    return folder


def test_claim_regions_name_their_claim_and_first_pod(tmp_path) -> None:
    """Pure: the `pods` file gives the pod; a missing or garbage one leaves it empty."""
    _claim_region(tmp_path, "team-b", "slice", CLAIM_UID, f"infer {INFER_UID}\n", [])
    _claim_region(tmp_path, "team-b", "unreserved", CLAIM_UID, None, [])
    _claim_region(tmp_path, "team-b", "hostile", CLAIM_UID, "../../etc x\n" * 3 + "\xff", [])
    regions, claims, problems = scan_claims(tmp_path / "claim-regions")
    got = {c: (r.namespace, r.pod, r.uid) for r, c in zip(regions, claims, strict=True)}
    assert got == {"slice": ("team-b", "infer", INFER_UID),
                   "unreserved": ("team-b", "", ""), "hostile": ("team-b", "", "")}
    assert problems == []
    assert scan_claims(tmp_path / "nothing") == ([], [], [])


def test_a_dev_clusters_simulated_series_attribute_claims_to_their_pods() -> None:
    """Pure: on a kwok node (no kubelet plugin), an allocated claim counts as its reserving
    pod's use of the device, with its claim label; a claim of a finished pod, another driver's
    device and a garbage capacity count nothing."""
    from gpugov.k8s.annotations import INVENTORY, Inventory, InventoryDevice, encode_inventory
    from gpugov.model.devices import DeviceMode
    from gpugov.node.synthetic import KWOK, Simulation, devices

    inv = Inventory((InventoryDevice(0, "GPU-k-0", "A100-SXM4-80GB", 81920),
                     InventoryDevice(1, "GPU-k-1", "A100-SXM4-80GB", 81920, DeviceMode.SOFT)))
    nodes = [{"metadata": {"name": "k0", "annotations": {KWOK: "fake",
                                                          INVENTORY: encode_inventory(inv)}}}]

    def pod(name: str, phase: str = "Running") -> dict:
        return {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
                "spec": {"nodeName": "k0"}, "status": {"phase": phase}}

    def claim(name: str, owner: str, device: str, driver: str = "gpu.gpugov.io",
              **consumed: str) -> dict:
        res = {"request": "gpu", "driver": driver, "pool": "k0", "device": device}
        if consumed:
            res["consumedCapacity"] = consumed
        return {"metadata": {"name": name, "namespace": "team"}, "status": {
            "allocation": {"devices": {"results": [res]}},
            "reservedFor": [{"resource": "pods", "name": owner, "uid": f"uid-{owner}"}]}}

    claims = [claim("slice", "infer", "gpu-1", memory="20Gi", compute="30"),
              claim("whole", "train", "gpu-0"),
              claim("done", "old", "gpu-1", memory="20Gi", compute="30"),
              claim("theirs", "infer", "gpu-1", driver="other.example.com"),
              claim("garbage", "infer", "gpu-1", memory="1e999", compute="30")]
    devs = devices(nodes, [pod("infer"), pod("train"), pod("old", "Succeeded")], claims)
    uses = {(u.claim, u.pod, d.index, u.milli, u.memory_mib) for d in devs for u in d.uses}
    assert uses == {("slice", "infer", 1, 300, 20480), ("whole", "train", 0, 1000, 81920)}
    text = Simulation().render(devs).decode()
    assert 'gpugov_pod_memory_used_bytes{namespace="team",pod="infer",container="",gpu="1",' \
        'UUID="GPU-k-1",claim="slice",simulated="true"}' in text


@pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK),
                    reason="needs Prometheus (Debian package `prometheus`)")
def test_the_exporter_attributes_usage_by_claim_and_pod(node, fakes, sleepers, tmp_path):
    by_plugin, by_claim = sleepers.start(), sleepers.start()
    node.gpu(A100_80, f"proc {by_plugin} {GiB}", f"proc {by_claim} {2 * GiB}", "util 50 5")
    write_region(tmp_path / "regions" / f"team-a_trainer-0_{POD_UID}" / "region", [20 * GiB],
                 [30], [SlotSpec(by_plugin, start_ticks(by_plugin), [GiB])])
    _claim_region(tmp_path, "team-b", "slice", CLAIM_UID, f"infer {INFER_UID}\n",
                  [SlotSpec(by_claim, start_ticks(by_claim), [2 * GiB])])
    with serve_exporter(node, fakes, tmp_path) as port:
        prom = obs_prometheus.start(tmp_path / "prom", [f"127.0.0.1:{port}"])
        try:
            _check(prom)
        finally:
            prom.stop()


def _check(prom: obs_prometheus.PromServer) -> None:
    q = prom.query
    prom.wait_for('gpugov_pod_memory_used_bytes{claim="slice"}')
    used = series(q("gpugov_pod_memory_used_bytes"), "namespace", "pod", "claim", "gpu")
    assert used == {("team-a", "trainer-0", "", "0"): GiB,
                    ("team-b", "infer", "slice", "0"): 2 * GiB}
    by = series(q('sum by (namespace, claim) (gpugov_pod_memory_limit_bytes{claim!=""})'),
                "namespace", "claim")
    assert by == {("team-b", "slice"): 20 * GiB}
    assert series(q("gpugov_pod_compute_limit_ratio"), "claim", "pod")[
        ("slice", "infer")] == 0.3
    # the claim's process is accounted: nothing unaccounted on the device
    assert q("gpugov_device_memory_unaccounted_bytes") == []
    # the reconciler, reading the same Prometheus, attributes usage by claim
    got = _reconciled(prom.url)
    assert got["gpugov_claim_used_memory_bytes"] == {("team-b", "slice", "infer"): 2 * GiB}
    assert got["gpugov_claim_used_compute_ratio"] == {("team-b", "slice", "infer"): 0.0}


def _reconciled(url: str) -> dict[str, dict[tuple[str, ...], float]]:
    """One reconcile cycle (no pods in the API) against `url`; the claim series it serves,
    once Prometheus has two samples for the rate."""
    import asyncio
    import time

    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpugov.observe.promapi import Prometheus
    from gpugov.observe.reconciler import Options, Reconciler

    rec = Reconciler(Options(None, url, "127.0.0.1", 0, window="10s"))

    async def source() -> tuple[list[dict], list[dict]]:
        return [], []

    async def cycle() -> None:
        async with Prometheus(url) as prom:
            await rec.cycle(source, prom)

    out: dict[str, dict[tuple[str, ...], float]] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        asyncio.run(cycle())
        out = {}
        for fam in text_string_to_metric_families(generate_latest(rec.registry).decode()):
            for s in fam.samples:
                if s.name.startswith("gpugov_claim_"):
                    out.setdefault(s.name, {})[
                        (s.labels["namespace"], s.labels["claim"], s.labels["pod"])] = s.value
        if len(out) == 2:
            break
        time.sleep(0.5)
    return out
