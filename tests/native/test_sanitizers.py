"""The library, fake driver and client built with AddressSanitizer + UBSan, run through
the main scenarios; any sanitizer report fails the run (non-zero exit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from native_build import drv

SCENARIOS = {
    "memory-paths": ["ctx:0", "alloc:2Mi", "pitch:1000:100", "managed:1Mi", "async:1Mi",
                     "poolalloc:1Mi", "array:64:64", "array3d:16:16:4", "mipmap:64:64:3",
                     "vmm:1Mi", "ipc:0", "alloc:64Mi", "meminfo", "totalmem", "nvml",
                     "free:0", "free:1", "free:2", "freeasync:3", "freeasync:4", "free:5",
                     "free:6", "free:7", "free:8", "free:9", "trim:0"],
    "scrub": ["ctx:0", "alloc:1Mi", "fill:0:171", "free:0", "alloc:1Mi", "check:1"],
    "sharing": ["ctx:0", "alloc:1Mi", "ipcput:0:{tmp}/h", "ipcopen:{tmp}/h", "vmm:1Mi", "vmap:2",
                "vretain:3", "vexport:2:{tmp}/v", "vimport:{tmp}/v", "vmap:5", "fill:3:7",
                "free:6", "free:5", "free:4", "free:3", "free:2", "free:1", "free:0",
                "array:64:64", "afill:7:9", "free:7", "mipmap:64:64:3", "afill:8:9", "free:8",
                "async:1Mi", "pexport:9:{tmp}/p", "pimport:{tmp}/p", "free:10", "freeasync:9"],
    "throttle": ["ctx:0", "launch:200:100", "launchex:50:100", "coop:50:100", "graph:20:4:50"],
}


@pytest.mark.parametrize("mode", ["direct", "procaddr"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_under_asan_and_ubsan(san_build, tmp_path: Path, scenario, mode):
    env = {"GPUGOV_MEMORY_LIMIT": "32Mi", "GPUGOV_CORE_LIMIT": "50",
           "GPUGOV_SHARED_REGION": str(tmp_path / "region")}
    cmds = [c.format(tmp=tmp_path) for c in SCENARIOS[scenario]]
    r = drv(san_build, mode, *cmds, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr, r.stderr
    assert len(r.lines) == len(SCENARIOS[scenario]) + 1, r.stderr
    if scenario == "sharing":
        assert all(x["rc"] == "0" for x in r.lines), r.lines


def test_malformed_config_under_sanitizers(san_build):
    r = drv(san_build, "dlsym", "ctx:0", env={"GPUGOV_MEMORY_LIMIT": "x"})
    assert r.returncode == 0 and r.rcs("init") == [800], r.stderr
