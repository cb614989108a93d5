"""The region's per-device counters (layout v3) move as the library charges device time,
makes launches wait for tokens and refuses allocations at the memory cap — and only then."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from native_build import drv
from test_memory import PATHS

from gpugov.node.native import layout_header_path
from gpugov.node.region import RegionError, layout, parse_layout, read_region

KERNEL_US = 2000
LAUNCHES = 100


def run(build, tmp_path: Path, *cmds: str, env: dict[str, str]):
    region = tmp_path / "region"
    r = drv(build, "direct", "ctx:0", *cmds, env={"GPUGOV_SHARED_REGION": str(region), **env})
    return r, read_region(region)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_refusal_at_the_cap_is_counted_once(build, tmp_path, path):
    first, second = PATHS[path]
    r, reg = run(build, tmp_path, first, second, second, "free:0", second,
                 env={"GPUGOV_MEMORY_LIMIT": "8Mi"})
    assert r.rcs(second.split(":")[0])[1:] == [2, 2, 0], r.stderr
    assert reg.refused[0] == 2
    assert reg.device_ns[0] == 0 and reg.throttled_ns[0] == 0  # no compute limit: not metered


def test_refusals_are_per_device(build, tmp_path):
    env = {"GPUGOV_MEMORY_LIMIT": "8Mi", "GPUGOV_MEMORY_LIMIT_1": "2Mi", "FAKECUDA_DEVICES": "2"}
    r, reg = run(build, tmp_path, "alloc:6Mi", "alloc:3Mi", "ctx:1", "alloc:3Mi", "alloc:1Mi",
                 "alloc:3Mi", env=env)
    assert r.rcs("alloc") == [0, 2, 2, 0, 2], r.stderr
    assert reg.refused[:2] == (1, 2)


def test_driver_errors_are_not_refusals(build, tmp_path):
    r, reg = run(build, tmp_path, "alloc:1Mi", env={"GPUGOV_MEMORY_LIMIT": "8Mi",
                                                    "FAKECUDA_FAIL": "cuMemAlloc_v2"})
    assert r.rcs("alloc") != [0], r.stderr  # the driver failed it, not the cap
    assert reg.refused[0] == 0


def test_throttled_launches_charge_device_time_and_count_the_wait(build, tmp_path):
    r, reg = run(build, tmp_path, f"launch:{LAUNCHES}:{KERNEL_US}",
                 env={"GPUGOV_CORE_LIMIT": "30"})
    assert r.rcs("launch") == [0], r.stderr
    device_s = LAUNCHES * KERNEL_US / 1e6  # what the fake device ran: 0.2 s
    assert reg.device_ns[0] / 1e9 == pytest.approx(device_s, rel=0.1)
    # at 30 % the launches span device_s / 0.3; the launcher waits nearly all of it, less
    # the 10 ms burst it starts with
    assert device_s / 0.3 * 0.7 <= reg.throttled_ns[0] / 1e9 <= device_s / 0.3 * 1.5
    assert reg.refused[0] == 0


def test_counters_add_up_across_processes(build, tmp_path):
    env = {"GPUGOV_CORE_LIMIT": "50", "GPUGOV_MEMORY_LIMIT": "4Mi"}
    run(build, tmp_path, "launch:20:2000", "alloc:5Mi", env=env)
    _, reg = run(build, tmp_path, "launch:20:2000", "alloc:5Mi", env=env)
    assert reg.refused[0] == 2
    assert reg.device_ns[0] / 1e9 == pytest.approx(2 * 20 * 2000 / 1e6, rel=0.1)


def test_unthrottled_launches_charge_nothing(build, tmp_path):
    _, reg = run(build, tmp_path, f"launch:{LAUNCHES}:{KERNEL_US}", env={})
    assert reg.device_ns[0] == 0 and reg.throttled_ns[0] == 0


def v2_region(path: Path) -> Path:
    """A region as layout v2 laid it out (the v3 header without its counters), initialised."""
    text = layout_header_path().read_text(encoding="utf-8")
    text = re.sub(r"^\s*uint64_t (device_ns|throttled_ns|refused)\[.*$", "", text, flags=re.M)
    text = text.replace("#define GG_REGION_VERSION 3", "#define GG_REGION_VERSION 2")
    old = parse_layout(text)
    hdr = old.structs["gg_header"]
    buf = bytearray(old.structs["gg_region"].size)
    for name, value in (("magic", old.constants["GG_REGION_MAGIC"]), ("version", 2),
                        ("initialized", 1)):
        f = hdr.fields[name]
        struct.pack_into("<Q" if f.size == 8 else "<I", buf, f.offset, value)
    path.write_bytes(bytes(buf))
    return path


def test_a_v2_region_is_refused_by_library_and_reader(build, tmp_path):
    region = v2_region(tmp_path / "region")
    assert len(region.read_bytes()) != layout().structs["gg_region"].size
    before = region.read_bytes()
    r = drv(build, "direct", "ctx:0", "alloc:1Mi", env={"GPUGOV_SHARED_REGION": str(region)})
    assert r.rcs("init") == [800]  # CUDA_ERROR_NOT_PERMITTED: fail closed
    assert r.stderr.count("another gpugov version") == 1, r.stderr
    assert region.read_bytes() == before  # left as it was
    with pytest.raises(RegionError, match=r"bytes, layout v3 needs"):
        read_region(region)


def test_a_region_naming_another_version_is_refused(build, tmp_path):
    region = tmp_path / "region"
    drv(build, "direct", "ctx:0", env={"GPUGOV_SHARED_REGION": str(region)})
    data = bytearray(region.read_bytes())
    struct.pack_into("<I", data, layout().structs["gg_header"].fields["version"].offset, 2)
    region.write_bytes(bytes(data))
    r = drv(build, "direct", "ctx:0", "alloc:1Mi", env={"GPUGOV_SHARED_REGION": str(region)})
    assert r.rcs("init") == [800]
    assert "has layout v2, this library speaks v3" in r.stderr
    with pytest.raises(RegionError, match="layout v2, this reader speaks v3"):
        read_region(region)
