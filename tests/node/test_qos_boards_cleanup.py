"""A gone pod's QoS board files and region folder are removed from the node (the library
reads at most 64 board files per device: dead ones must not pile up and hide live ones)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.scenario import mixed_node, short_dir, soft, timeslice, uuid  # noqa: E402

from gpugov.model.devices import DeviceMode, DeviceTopology  # noqa: E402
from gpugov.node.deviceplugin import cleanup  # noqa: E402
from gpugov.node.deviceplugin.manager import DevicePluginManager  # noqa: E402
from gpugov.node.deviceplugin.pods import MemoryPodSource  # noqa: E402
from gpugov.node.deviceplugin.resources import PluginDevice  # noqa: E402
from gpugov.node.deviceplugin.response import ResponseConfig, container_response  # noqa: E402
from gpugov.node.deviceplugin.source import StaticDeviceSource  # noqa: E402

NODE = "node-a"
LATER = 3600.0  # a sweep an hour on: every file is past the grace


def device(i: int, mode: DeviceMode) -> PluginDevice:
    return PluginDevice(id=f"{uuid(i)}::0", resource="nvidia.com/gpu", uuid=uuid(i), index=i,
                        mode=mode, healthy=True, numa=0, topology=DeviceTopology(None, None, 0))


def uid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-000000000000"


def pod(name: str, n: int, phase: str = "Running", **meta) -> dict:
    return {"metadata": {"name": name, "namespace": "team-a", "uid": uid(n), **meta},
            "spec": {"nodeName": NODE}, "status": {"phase": phase}}


def allocate(cfg: ResponseConfig, name: str, n: int) -> str:
    """What Allocate leaves for a pod on soft device 1 and time-slice device 3."""
    container_response([device(1, DeviceMode.SOFT), device(3, DeviceMode.TIMESLICE)],
                       {uuid(1): soft(1, 250, 8000), uuid(3): timeslice(3, 4000)}, cfg,
                       ("team-a", name, uid(n)), None)
    return f"team-a_{name}_{uid(n)}"


def on_node(cfg: ResponseConfig) -> dict[str, list[str]]:
    st = cfg.state_dir
    out = {"regions": sorted(p.name for p in (st / "regions").iterdir())}
    for i in (1, 3):
        out[f"qos{i}"] = sorted(p.name for p in cfg.qos_dir(uuid(i)).iterdir())
    return out


def test_gone_and_finished_pods_lose_their_boards_and_regions(tmp_path: Path) -> None:
    cfg = ResponseConfig(state_dir=tmp_path / "state", library=tmp_path / "libgpugov.so")
    pods = MemoryPodSource()
    names = {}
    for n, (name, phase, meta) in enumerate((
            ("live", "Running", {}), ("deleted", "Running", {}), ("done", "Succeeded", {}),
            ("failed", "Failed", {}),
            ("stopping", "Running", {"deletionTimestamp": "2026-12-02T00:00:00Z"}))):
        pods.put(pod(name, n, phase, **meta))
        names[name] = allocate(cfg, name, n)
    pods.delete("team-a", "deleted")
    gone = asyncio.run(cleanup.sweep(cfg.state_dir, pods, NODE, now=time.time() + LATER))
    kept = sorted(names[n] for n in ("live", "stopping"))
    assert on_node(cfg) == {"regions": kept, "qos1": kept, "qos3": kept}
    assert len(gone) == 3 * 3  # a region and two boards for each of the three gone pods


def test_a_pod_allocated_after_the_list_keeps_its_files(tmp_path: Path) -> None:
    """The grace: files younger than it stay even when the list does not name their pod."""
    cfg = ResponseConfig(state_dir=tmp_path / "state", library=tmp_path / "libgpugov.so")
    fresh = allocate(cfg, "fresh", 7)
    assert not asyncio.run(cleanup.sweep(cfg.state_dir, MemoryPodSource(), NODE))
    assert on_node(cfg) == {"regions": [fresh], "qos1": [fresh], "qos3": [fresh]}


def test_only_pod_files_go_and_no_link_is_followed(tmp_path: Path) -> None:
    cfg = ResponseConfig(state_dir=tmp_path / "state", library=tmp_path / "libgpugov.so")
    name = allocate(cfg, "gone", 1)
    outside = tmp_path / "precious"
    outside.write_text("keep")
    region = cfg.state_dir / "regions" / name
    (region / "link").symlink_to(outside)  # the pod writes in its own region folder
    board_dir = cfg.qos_dir(uuid(1))
    linked = f"team-a_other_{uid(9)}"
    (board_dir / linked).symlink_to(outside)
    (board_dir / "notes.txt").write_text("not a pod's")
    cleanup.remove(cleanup.leftovers(cfg.state_dir, set(), time.time() + LATER))
    assert outside.read_text() == "keep"
    assert not region.exists()
    assert sorted(p.name for p in board_dir.iterdir()) == ["notes.txt", linked]


def test_the_plugin_sweeps_on_its_own(tmp_path: Path) -> None:
    async def main() -> None:
        with short_dir() as plugin_dir:
            state = tmp_path / "state"
            cfg = ResponseConfig(state_dir=state, library=None)
            pods = MemoryPodSource()
            pods.put(pod("live", 1))
            keep = allocate(ResponseConfig(state, tmp_path / "lib.so"), "live", 1)
            old = allocate(ResponseConfig(state, tmp_path / "lib.so"), "old", 2)
            past = time.time() - 2 * cleanup.GRACE_S
            for p in [state / "regions" / old, *(cfg.qos_dir(uuid(i)) / old for i in (1, 3))]:
                os.utime(p, (past, past))
            mgr = DevicePluginManager(NODE, StaticDeviceSource(mixed_node()), pods,
                                      plugin_dir, cfg, poll_s=0.05, sweep_s=0.05)
            await mgr.start()
            try:
                for _ in range(200):
                    if not (state / "regions" / old).exists():
                        break
                    await asyncio.sleep(0.05)
                assert on_node(cfg) == {"regions": [keep], "qos1": [keep], "qos3": [keep]}
            finally:
                await mgr.stop()

    asyncio.run(main())
