"""The device plugin fed by NVML discovery (the tests' fake NVML), seen by the kubelet's own
device manager: what discovery finds is advertised, an XID takes a GPU out of allocatable and
recovery brings it back. Plus the command's refusals of bad options."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.driver import KubeletPeer  # noqa: E402
from kubelet_driver.scenario import running_plugin, scheduled_pod, short_dir, soft  # noqa: E402
from nvml_fake import A100_80  # noqa: E402

from gpugov.cli import app  # noqa: E402
from gpugov.model.devices import DeviceMode  # noqa: E402
from gpugov.node.deviceplugin import MemoryPodSource  # noqa: E402
from gpugov.node.nvml.health import HealthTracker  # noqa: E402
from gpugov.node.nvml.source import NvmlDeviceSource, SharingPolicy  # noqa: E402

GPU, MIG3G = "nvidia.com/gpu", "nvidia.com/mig-3g.40gb"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_nvml_discovery_and_xid_health_reach_the_device_manager(
        node, open_nvml, kubelet_driver_binary: Path, tmp_path: Path) -> None:
    node.gpu(A100_80)
    node.gpu(A100_80, "mig-mode 1", "gi 9 0")
    nv = open_nvml(node)
    clock = Clock()
    src = NvmlDeviceSource(nv, HealthTracker(nv, recovery_s=30, clock=clock),
                           SharingPolicy(DeviceMode.SOFT))
    gpu0 = src.inventory().devices[0].uuid

    async def allocatable(peer: KubeletPeer, want: dict[str, int]) -> None:
        deadline = time.monotonic() + 20
        while (cap := await asyncio.to_thread(peer.capacity))["allocatable"] != want:
            assert time.monotonic() < deadline, cap
            await asyncio.sleep(0.05)

    async def main() -> None:
        pods = MemoryPodSource()
        with short_dir() as plugin_dir:
            peer = KubeletPeer(kubelet_driver_binary, plugin_dir, tmp_path / "kubelet.log")
            await asyncio.to_thread(peer.start)
            try:
                async with running_plugin(plugin_dir, tmp_path / "state", src, pods):
                    await allocatable(peer, {GPU: 10, MIG3G: 1})  # soft: 10 replicas
                    node.event("xid 0 79")  # GPU 0 fell off the bus (critical XID)
                    await asyncio.to_thread(src.refresh)
                    await allocatable(peer, {GPU: 0, MIG3G: 1})
                    clock.t += 30  # no XID for the recovery period
                    await asyncio.to_thread(src.refresh)
                    await allocatable(peer, {GPU: 10, MIG3G: 1})
                    pods.put(scheduled_pod("nb", [replace(soft(0, 500, 20000), uuid=gpu0)]))
                    r = await asyncio.to_thread(peer.admit, "uid-nb", "nb", {GPU: 1})
                    assert r["ok"], r
                    assert r["containers"][0]["deviceIDs"][GPU][0].startswith(gpu0 + "::")
            finally:
                await asyncio.to_thread(peer.stop)

    asyncio.run(main())


@pytest.mark.parametrize(("args", "message"), [
    (["--mode", "mig"], "--mode: 'mig'; allowed: exclusive, soft, timeslice"),
    (["--mode", "soft", "--replicas", "4"], "--replicas: 4; allowed: 1, or >= 2 with --mode "
                                             "timeslice"),
    (["--soft-replicas", "0"], "--soft-replicas: 0; allowed: >= 1"),
    (["--metrics-listen", "9401"], "--metrics-listen: '9401'; expected HOST:PORT"),
    (["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig /nonexistent/kubeconfig: "
                                                  "no such file"),
])
def test_bad_options_exit_2_with_the_option_named(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["node", "device-plugin", "--node-name", "n", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_node_run_refuses_a_bad_node_yaml_naming_each_field(tmp_path: Path) -> None:
    cfg = tmp_path / "node.yaml"
    cfg.write_text("defaultMode: vgpu\nsoftSplit: 0\nmigStrategy: odd\nmpsReplicas: 64\n"
                   "devices: [{index: '0', mode: mig}]\nsplit: 3\n")
    result = CliRunner().invoke(app, ["node", "run", "--config", str(cfg), "--node-name", "n"])
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    for part in ("defaultMode: 'vgpu': Input should be 'exclusive', 'soft', 'timeslice', 'mps' "
                 "or 'mig'", "mpsReplicas: 64: Input should be less than or equal to 48",
                 "softSplit: 0: Input should be greater than or equal to 1",
                 "migStrategy: 'odd': allowed: mixed, single",
                 "devices: [{'index': '0', 'mode': 'mig'}]: per-device modes are planned",
                 "split: 3: Extra inputs are not permitted"):
        assert part in out, out
    cfg.write_text("defaultMode: [unclosed\n")
    result = CliRunner().invoke(app, ["node", "run", "--config", str(cfg), "--node-name", "n"])
    assert result.exit_code == 2 and "not YAML" in result.output


def test_node_yaml_accepts_mps_with_its_clients_per_gpu(tmp_path: Path) -> None:
    from gpugov.node.deviceplugin.all_in_one import load_node_file

    cfg = tmp_path / "node.yaml"
    cfg.write_text("defaultMode: mps\nmpsReplicas: 8\n")
    got = load_node_file(cfg)
    assert (got.defaultMode, got.mpsReplicas, got.mpsControl) == (
        "mps", 8, "nvidia-cuda-mps-control")
