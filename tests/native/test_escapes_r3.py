"""Regression tests for the escapes of the second adversarial review (issue 21), one group per
class (test_classNN_…, numbered as in the issue). Each fails on the library as it was before
the fix (`GPUGOV_TEST_LIBRARY=<old libgpugov.so> pytest tests/native/test_escapes_r3.py`)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from native_build import drv

from gpugov.node.region import layout, read_region

MiB = 1 << 20
MODES = ["direct", "dlsym", "procaddr"]


def free_bytes(r, n: int = 0) -> int:
    return int(r.find("meminfo", n)["free"])


def _header_offset(name: str) -> int:
    lay = layout()
    return lay.structs["gg_header"].fields[name].offset


# ---- class 4: nothing is charged or credited through a slot released at exit ----

def test_class04_charge_after_exit_release_leaves_no_stale_charge(build, tmp_path: Path):
    env = {"GPUGOV_SHARED_REGION": str(tmp_path / "region"), "GPUGOV_MEMORY_LIMIT": "8Mi"}
    r = drv(build, "direct", "ctx:0", "alloc:2Mi", "exitalloc:4Mi", env=env)
    assert r.rcs("alloc") == [0], r.stderr
    snap = read_region(tmp_path / "region")
    assert snap.used[0] == 0 and snap.slots == ()  # no process alive, nothing charged
    r = drv(build, "direct", "ctx:0", "meminfo", "alloc:8Mi", env=env)
    assert free_bytes(r) == 8 * MiB and r.rcs("alloc") == [0], r.stderr


def test_class04_free_after_exit_release_is_not_credited_twice(build, tmp_path: Path):
    # Another process of the container holds 4 MiB. The exiting one frees its 4 MiB after its
    # slot was released (which already credited them): the holder's 4 MiB must stay charged,
    # and the header counters a released slot overlaps must not move.
    path = tmp_path / "region"
    env = {"GPUGOV_SHARED_REGION": str(path), "GPUGOV_MEMORY_LIMIT": "8Mi"}
    import subprocess

    holder = subprocess.Popen([str(build.drvtest), "direct", "ctx:0", "alloc:4Mi",
                               f"barrier:{tmp_path / 'go'}"], env=build.env(env),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        while "alloc" not in (line := holder.stdout.readline()):
            assert line, holder.stderr.read() if holder.stderr else ""
        # a large value where slots[-1].used[0] would be (the throttled-time counters)
        off = _header_offset("throttled_ns")
        with open(path, "r+b") as fh:
            fh.seek(off)
            fh.write(struct.pack("<Q", 1 << 40))
        r = drv(build, "direct", "ctx:0", "alloc:4Mi", "exitfree:0", env=env)
        assert r.rcs("alloc") == [0], r.stderr
        snap = read_region(path)
        assert snap.used[0] == 4 * MiB, snap.used[0]  # the holder's bytes
        assert snap.throttled_ns[0] == 1 << 40
    finally:
        (tmp_path / "go").touch()
        holder.wait(timeout=30)


# ---- class 1: exported VMM memory stays charged while its shareable handle keeps it alive ----

@pytest.mark.parametrize("mode", MODES)
def test_class01_exported_vmm_memory_stays_charged_after_release(build, mode, tmp_path: Path):
    env = {"GPUGOV_MEMORY_LIMIT": "64Mi"}
    cmds = []
    for i in range(3):
        cmds += ["vmm:32Mi", f"vexport:{i}:{tmp_path / f'h{i}'}", f"free:{i}"]
    r = drv(build, mode, "ctx:0", *cmds, "meminfo", f"vimport:{tmp_path / 'h0'}", env=env)
    # two exported 32 MiB allocations are still alive (their handles keep them): no third
    assert r.rcs("vmm") == [0, 0, 2], r.stderr
    assert free_bytes(r) == 0


# ---- class 2: stream-ordered memory is charged to the stream's device ----

@pytest.mark.parametrize("mode", MODES)
def test_class02_async_allocation_on_another_devices_stream(build, mode):
    env = {"FAKECUDA_DEVICES": "2", "GPUGOV_MEMORY_LIMIT_0": "512Mi",
           "GPUGOV_MEMORY_LIMIT_1": "64Mi"}
    r = drv(build, mode, "ctx:1", "stream", "ctx:0", "asyncon:48Mi:0", "asyncon:48Mi:0",
            "ctx:1", "meminfo", env=env)
    assert r.rcs("asyncon") == [0, 2], r.stderr  # 96 MiB on device 1 under its 64 MiB
    assert free_bytes(r) == 16 * MiB


# ---- class 3: an executable graph declares its memory nodes until it is destroyed ----

@pytest.mark.parametrize("mode", MODES)
def test_class03_executable_graph_outliving_its_graph_stays_charged(build, mode):
    # graph destroyed, graph pool trimmed: the executable graph takes its 4 MiB again at its
    # next launch, so they stay charged and 6 MiB more do not fit under 8 MiB
    r = drv(build, mode, "ctx:0", "graphmem:4Mi", "graphexec:0", "free:0", "graphtrim",
            "meminfo", "alloc:6Mi", "graphrun:1", "free:1", "graphtrim", "meminfo", "alloc:6Mi",
            env={"GPUGOV_MEMORY_LIMIT": "8Mi"})
    assert r.rcs("graphexec") == [0] and r.rcs("graphrun") == [0], r.stderr
    assert free_bytes(r, 0) == 4 * MiB and r.rcs("alloc") == [2, 0], r.stderr
    assert free_bytes(r, 1) == 8 * MiB  # released with the executable graph


def test_class03_instantiation_moves_the_declaration_and_a_second_one_is_charged(build):
    r = drv(build, "procaddr", "ctx:0", "graphmem:4Mi", "alloc:2Mi", "graphexec:0",
            "meminfo", "graphexec:0", env={"GPUGOV_MEMORY_LIMIT": "8Mi"})
    # the executable graph takes over the graph's 4 MiB (not charged twice); a second
    # executable graph of it allocates its own 4 MiB, over the limit
    assert r.rcs("graphexec") == [0, 2], r.stderr
    assert free_bytes(r) == 2 * MiB


# ---- classes 5 and 6: the compute quota is paid in measured device time, on every device ----
# (shares are the fake GPU's own busy time, as in test_throttle.py; tolerance ±5 points)

def _share(build, pattern: str, env: dict[str, str], seconds: float = 1.5) -> float:
    r = drv(build, "procaddr", "ctx:0", f"pattern:{pattern}:{seconds}",
            env={"FAKECUDA_DEVICES": "2", **env}, timeout=60)
    return float(r.find("pattern")["util"])


def test_class05_rotating_launch_shapes_cannot_beat_the_throttle(build):
    # a new launch shape every launch, cheap at its first launch and 2 ms afterwards
    assert _share(build, "rotating", {"GPUGOV_CORE_LIMIT": "20"}) == pytest.approx(0.20, abs=0.05)


def test_class05_argument_dependent_kernels_get_their_quota(build):
    assert _share(build, "argdep", {"GPUGOV_CORE_LIMIT": "20"}) == pytest.approx(0.20, abs=0.05)


def test_class05_short_lived_processes_pay_for_their_launches(build, tmp_path: Path):
    # processes that launch 20 kernels of 2 ms and exit at once, one after another, sharing
    # the container's region: the device time they submit over the run stays at the quota
    import time

    env = {"GPUGOV_CORE_LIMIT": "20", "GPUGOV_SHARED_REGION": str(tmp_path / "region")}
    t0, submitted = time.monotonic(), 0
    while time.monotonic() - t0 < 1.5:
        r = drv(build, "procaddr", "ctx:0", "burst:20:2000", env=env)
        submitted += int(r.find("burst")["submitted"])
    share = submitted / ((time.monotonic() - t0) * 1e9)
    assert share == pytest.approx(0.20, abs=0.05)


def test_class06_multi_device_cooperative_launch_is_throttled_on_every_device(build):
    # device 1 limited to 20 %, the launch made from device 0's context (unlimited)
    share = _share(build, "multidevice", {"GPUGOV_CORE_LIMIT_1": "20"})
    assert share == pytest.approx(0.20, abs=0.05)


# ---- class 10: NVML shows the container its own devices' quota and its own processes ----

def test_class10_nvml_view_follows_the_uuid_map_and_hides_other_containers(build, tmp_path):
    u0 = "GPU-face0000-0000-0000-0000-000000000000"
    u1 = "GPU-face0000-0000-0000-0000-000000000001"
    events = tmp_path / "nvml-events"
    events.write_text("")
    cfg = tmp_path / "nvml.conf"
    cfg.write_text(f"device {u0} 20B2 00000000:01:00.0 1024 Fake GPU\n"
                   f"device {u1} 20B2 00000000:02:00.0 1024 Fake GPU\n"
                   f"proc 1 4242 {512 * MiB}\n"  # another container's process on device 1
                   f"events {events}\n")
    env = {"FAKECUDA_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "1", "GPUGOV_DEVICE_UUIDS": u1,
           "GPUGOV_MEMORY_LIMIT": "64Mi", "FAKE_NVML_CONFIG": str(cfg),
           "FAKE_NVML_EVENTS": str(events)}
    r = drv(build, "dlsym", "ctx:0", "alloc:4Mi", "nvmlproc:1:4Mi", "meminfo", "nvmlx:1", env=env)
    nv = r.find("nvmlx")
    assert int(r.find("meminfo")["total"]) == 64 * MiB, r.stderr
    assert int(nv["total"]) == 64 * MiB, (nv, r.stderr)  # NVML index 1 is the container's device
    assert nv["procs"] == "1" and int(nv["mine"]) == 4 * MiB and nv["others"] == "0", nv


# ---- class 7: managed memory is charged to the device its pages are moved to ----

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["prefetch", "advise"])
def test_class07_managed_memory_moved_to_another_device_is_charged_there(build, mode, how):
    env = {"FAKECUDA_DEVICES": "2", "GPUGOV_MEMORY_LIMIT_0": "512Mi",
           "GPUGOV_MEMORY_LIMIT_1": "64Mi"}
    r = drv(build, mode, "ctx:0", "managed:48Mi", f"{how}:0:1", "managed:48Mi", f"{how}:1:1",
            "meminfo", "ctx:1", "meminfo", env=env)
    assert r.rcs(how) == [0, 2], r.stderr  # 96 MiB on device 1 under its 64 MiB
    assert free_bytes(r, 0) == 512 * MiB - 48 * MiB and free_bytes(r, 1) == 16 * MiB


# ---- class 12: no symbol lookup reaches the unwrapped driver ----

@pytest.mark.parametrize("how", ["dlvsym", "libc"])
def test_class12_lookups_around_dlsym_get_the_wrappers(build, how):
    r = drv(build, "direct", "ctx:0", "alloc:6Mi", f"vsym:{how}:4Mi", "meminfo",
            env={"GPUGOV_MEMORY_LIMIT": "8Mi"})
    assert r.rcs("vsym") != [0], r.stderr  # refused: over the limit (or no lookup at all)
    assert free_bytes(r) == 2 * MiB


# ---- class 8: freed graph memory is zeroed before the pool hands it out again ----

@pytest.mark.parametrize("mode", MODES)
def test_class08_graph_memory_freed_by_a_free_node_is_scrubbed(build, mode):
    r = drv(build, mode, "ctx:0", "graphmem:1Mi", "gfill:0:171", "gfree:0", "alloc:1Mi",
            "check:1", env={"GPUGOV_MEMORY_LIMIT": "8Mi"})
    assert r.rcs("gfree") == [0] and r.rcs("alloc") == [0], r.stderr
    assert r.find("check")["nonzero"] == "0"


# ---- class 9: each context's malloc heap (cuCtxSetLimit) is charged ----

@pytest.mark.parametrize("mode", MODES)
def test_class09_several_contexts_raising_the_heap_are_each_charged(build, mode):
    r = drv(build, mode, "ctx:0", "setlimit:2:6Mi", "newctx:0", "setlimit:2:6Mi", "meminfo",
            "setlimit:2:1Mi", "ctxdestroy", "ctx:0", "meminfo", env={"GPUGOV_MEMORY_LIMIT": "8Mi"})
    assert r.rcs("setlimit") == [0, 2, 0], r.stderr  # 2 x 6 MiB of heap do not fit in 8 MiB
    assert free_bytes(r, 0) == 2 * MiB
    assert free_bytes(r, 1) == 2 * MiB  # the second context's heap went with it
