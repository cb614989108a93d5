"""The library, fake driver and client built with AddressSanitizer + UBSan, run through
the main scenarios; any sanitizer report fails the run (non-zero exit)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from native_build import drv, parse

from gpugov.node.region import read_region

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
    "escapes": ["ctx:0", "alloc:1Mi", f"alloc:{(1 << 64) - 1}", "poolalloc:2Mi", "pooldestroy",
                "freeasync:1", "vmany:80:16Ki:7", "free:2", "async:1Mi", "xfree:3", "alloc:1Mi",
                "xfreeasync:4", "graphmem:1Mi", "capture:1Mi", "free:5", "free:6",
                "setlimit:2:1Mi", "setlimit:2:0", "legacy:array", "arrayfmt:8:8:0x99",
                "launchv:grid:20:50", "launchv:multi:20:50", "pattern:loop4:0.3",
                "pattern:random:0.3", "graphnode:1Mi", "graphclone:7", "graphexec:7", "free:7",
                "free:8", "graphtrim", "graphnode1:1Mi", "free:9"],
    # the paths of issue 21: stream devices, VMM export, managed moves, graph free nodes and
    # executable graphs, per-context limits, lookups around dlsym, NVML process lists, the
    # measured-time throttle, exit-time charges and credits
    "round3": ["ctx:0", "stream", "asyncon:1Mi:0", "vmm:1Mi", "vexport:1:{tmp}/v", "free:1",
               "managed:1Mi", "prefetch:2:0", "advise:2:0", "graphmem:1Mi", "gfill:3:5",
               "gfree:3", "graphmem:1Mi", "graphexec:4", "graphrun:5", "free:5", "free:4",
               "newctx:0", "setlimit:2:1Mi", "ctxdestroy", "ctx:0", "vsym:dlvsym:1Mi",
               "vsym:libc:1Mi", "nvmlx:0", "pattern:rotating:0.3", "pattern:multistream:0.3",
               "pattern:argdep:0.3", "burst:5:100", "freeasync:0", "exitalloc:1Mi",
               "exitfree:2"],
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


def test_four_processes_of_eight_threads_under_sanitizers(san_build, tmp_path: Path):
    # 4 processes x 8 threads allocate, free (linear and stream-ordered) and launch under a
    # shared memory and compute limit; the sanitizers see every access, and the region must
    # come back to zero when they are done.
    region = tmp_path / "region"
    env = san_build.env({"GPUGOV_SHARED_REGION": str(region), "GPUGOV_MEMORY_LIMIT": "32Mi",
                         "GPUGOV_CORE_LIMIT": "50"})
    procs = [subprocess.Popen([str(san_build.drvtest), mode, "ctx:0", "threads:8:300"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for mode in ["direct", "dlsym", "procaddr", "procaddr-ptsz"]]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert "runtime error" not in err and "AddressSanitizer" not in err, err
        assert [x["fails"] for x in parse(out) if x["cmd"] == "threads"] == ["0"], out + err
    snap = read_region(region)
    assert snap.slots == () and snap.used[0] == 0


def test_qos_high_and_low_priority_processes_under_sanitizers(san_build, tmp_path: Path):
    # the QoS boards: a high-priority process (watcher thread, quantum sleeps) and two
    # low-priority ones (board reads, announcements) on one shared device, next to a pod file
    # full of garbage; the sanitizers see every access to what was read
    qos = tmp_path / "qos" / "0"
    qos.mkdir(parents=True)
    (qos / "garbage").write_bytes(bytes(range(256)) * 70)
    procs = []
    for name, prio, load in (("high", "0", "load:500:1.5"), ("low1", "1", "load:1000:1.5"),
                             ("low2", "1", "load:1000:1.5:100:50")):
        (qos / name).touch()
        env = san_build.env({"GPUGOV_SHARED_REGION": str(tmp_path / f"region-{name}"),
                             "GPUGOV_TASK_PRIORITY": prio, "GPUGOV_QOS_DIR": str(qos.parent),
                             "GPUGOV_QOS_SELF": name, "FAKECUDA_SHARED_TIMELINE":
                             str(tmp_path / "timeline"), "GPUGOV_CORE_LIMIT":
                             "50" if prio == "0" else "100"})
        procs.append(subprocess.Popen([str(san_build.drvtest), "procaddr", "ctx:0", load],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "runtime error" not in err and "AddressSanitizer" not in err, err
        assert parse(out)[-1]["rc"] == "0", out + err
