"""Regression tests for the quota escapes of issue 12, one group per class (testclassNN_…).

Each test drives the fake driver the way a tenant (or a buggy program) would and asserts
what a user relies on: the container's charge stays exact, the limit holds, freed memory is
zeroed, and a corrupt region or odd process life cycle never crashes or frees quota early."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from native_build import drv, parse

from gpugov.node.region import layout, read_region

MiB = 1 << 20
LIMIT = {"GPUGOV_MEMORY_LIMIT": "8Mi"}
MODES = ["direct", "dlsym", "procaddr"]
HUGE = str((1 << 64) - 1)
HUGE_MINUS_USED = str((1 << 64) - 6 * MiB)


def free_bytes(r, n: int = 0) -> int:
    return int(r.find("meminfo", n)["free"])


# ---- class 1: a huge request neither wraps the comparison nor erases the charge ----

HUGE_PATHS = {
    "alloc": [f"alloc:{HUGE}", f"alloc:{HUGE_MINUS_USED}"],
    "managed": [f"managed:{HUGE}", f"managed:{HUGE_MINUS_USED}"],
    "pitch": [f"pitch:{1 << 63}:2", f"pitch:{HUGE}:1"],
    "async": [f"async:{HUGE}", f"async:{HUGE_MINUS_USED}"],
    "poolalloc": [f"poolalloc:{HUGE}", f"poolalloc:{HUGE_MINUS_USED}"],
    "array": [f"array:{1 << 62}:{1 << 3}", f"array:{HUGE}:1"],
    "vmm": [f"vmm:{HUGE}", f"vmm:{HUGE_MINUS_USED}"],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", sorted(HUGE_PATHS))
def test_class01_charge_overflow_keeps_accounting(build, path, mode):
    huge = HUGE_PATHS[path]
    r = drv(build, mode, "ctx:0", "alloc:6Mi", "meminfo", *huge, "meminfo", "alloc:4Mi",
            env=LIMIT)
    assert len(r.lines) == 8, r.stderr
    assert all(x["rc"] != "0" for x in r.lines[4:6]), r.lines  # the huge requests are refused
    assert free_bytes(r, 0) == free_bytes(r, 1) == 2 * MiB, r.stderr
    assert r.lines[7]["rc"] == "2", r.stderr  # the 6 MiB are still charged


def test_class01_fake_driver_refuses_sizes_that_cannot_fit(build):
    r = drv(build, "direct", "ctx:0", "alloc:6Mi", f"alloc:{HUGE_MINUS_USED}", f"vmm:{HUGE}",
            f"async:{HUGE}", preload=False)
    assert r.rcs("alloc") == [0, 2] and r.rcs("vmm") == [2] and r.rcs("async") == [2]


# ---- class 2: a destroyed pool keeps its charge while allocations from it live ----

@pytest.mark.parametrize("mode", MODES)
def test_class02_pool_destroyed_with_live_allocations_stays_charged(build, mode):
    r = drv(build, mode, "ctx:0", "poolalloc:6Mi", "pooldestroy", "alloc:4Mi", "freeasync:0",
            "alloc:4Mi", "meminfo", env=LIMIT)
    assert r.rcs("pooldestroy") == [0]
    assert r.rcs("alloc") == [2, 0], r.stderr  # the driver defers the release to the last free
    assert free_bytes(r) == 4 * MiB


def test_class02_fake_driver_defers_pool_release(build):
    r = drv(build, "direct", "ctx:0", "poolalloc:6Mi", "pooldestroy", "meminfo", "freeasync:0",
            "meminfo", preload=False)
    assert free_bytes(r, 0) == (1 << 30) - 6 * MiB and free_bytes(r, 1) == 1 << 30


# ---- class 3: one cuMemUnmap over many mappings credits and scrubs all of them ----

@pytest.mark.parametrize("count", [65, 200])
def test_class03_unmap_over_many_mappings_credits_and_scrubs_all(build, count):
    r = drv(build, "procaddr", "ctx:0", f"vmany:{count}:16Ki:171", "meminfo", "free:0",
            "meminfo", f"vmany:{count}:16Ki", "check:1", env=LIMIT)
    assert r.rcs("vmany") == [0, 0], r.stderr
    assert free_bytes(r, 0) == 8 * MiB - count * 16 * 1024
    assert free_bytes(r, 1) == 8 * MiB  # every mapping credited
    assert r.find("check")["nonzero"] == "0"  # every mapping scrubbed


# ---- class 6: paths that took memory or launched work without the library ----

def test_class06_graph_memory_node_is_charged(build):
    r = drv(build, "procaddr", "ctx:0", "alloc:6Mi", "graphmem:4Mi", "graphmem:1Mi", "meminfo",
            "free:1", "meminfo", env=LIMIT)
    assert r.rcs("graphmem") == [2, 0], r.stderr
    assert free_bytes(r, 0) == 1 * MiB and free_bytes(r, 1) == 2 * MiB


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cmd", ["graphnode", "graphnode1"])
def test_class06_generic_graph_node_of_memory_is_charged(build, mode, cmd):
    # cuGraphAddNode_v2 / cuGraphAddNode with a memory-allocation node: the same memory
    r = drv(build, mode, "ctx:0", "alloc:6Mi", f"{cmd}:4Mi", f"{cmd}:1Mi", "meminfo", "free:1",
            "meminfo", env=LIMIT)
    assert r.rcs(cmd) == [2, 0], r.stderr
    assert free_bytes(r, 0) == 1 * MiB and free_bytes(r, 1) == 2 * MiB


def test_class06_graph_clone_declares_its_own_memory(build):
    r = drv(build, "procaddr", "ctx:0", "graphmem:3Mi", "graphclone:0", "meminfo", "graphclone:0",
            "free:1", "meminfo", "free:0", "graphtrim", "meminfo", env=LIMIT)
    assert r.rcs("graphclone") == [0, 2], r.stderr  # 3 + 3 fit in 8 MiB, a third 3 does not
    assert [free_bytes(r, i) for i in range(3)] == [2 * MiB, 5 * MiB, 8 * MiB]


def test_class06_graph_memory_held_by_an_executable_graph_stays_charged(build):
    # The graph is destroyed while an executable graph made from it lives: the device's graph
    # memory pool still holds the node's memory, so it stays charged until trimmed.
    # (Since issue 21 the executable graph declares that memory until it is destroyed too.)
    r = drv(build, "procaddr", "ctx:0", "graphmem:4Mi", "graphexec:0", "free:0", "meminfo",
            "alloc:6Mi", "free:1", "graphtrim", "meminfo", "alloc:6Mi", env=LIMIT)
    assert r.rcs("graphexec") == [0], r.stderr
    assert free_bytes(r, 0) == 4 * MiB and r.rcs("alloc") == [2, 0], r.stderr
    assert free_bytes(r, 1) == 8 * MiB


@pytest.mark.parametrize("mode", MODES)
def test_class06_stream_captured_async_allocation_is_charged(build, mode):
    r = drv(build, mode, "ctx:0", "alloc:6Mi", "capture:4Mi", "capture:1Mi", "meminfo",
            "free:1", "meminfo", env=LIMIT)
    assert r.rcs("capture") == [2, 0], r.stderr
    assert free_bytes(r, 0) == 1 * MiB and free_bytes(r, 1) == 2 * MiB


@pytest.mark.parametrize("which,size,charged", [(2, "1Mi", MiB), (1, "1Mi", MiB),
                                                (0, "2", 2 * 132 * 2048)])
def test_class06_ctx_set_limit_is_charged(build, which, size, charged):
    # malloc heap (2), printf FIFO (1) and stack (0: bytes per thread x resident threads)
    r = drv(build, "procaddr", "ctx:0", "alloc:6Mi", f"setlimit:{which}:64Mi", "meminfo",
            f"setlimit:{which}:{size}", "meminfo", env=LIMIT)
    assert r.rcs("setlimit") == [2, 0], r.stderr
    assert free_bytes(r, 0) == 2 * MiB and free_bytes(r, 1) == 2 * MiB - charged


def test_class06_ctx_set_limit_lowered_is_credited(build):
    r = drv(build, "direct", "ctx:0", "setlimit:2:4Mi", "setlimit:2:1Mi", "meminfo", env=LIMIT)
    assert r.rcs("setlimit") == [0, 0] and free_bytes(r) == 7 * MiB, r.stderr


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("what", ["array", "alloc", "ipc"])
def test_class06_legacy_exports_are_refused(build, mode, what):
    r = drv(build, mode, "ctx:0", "alloc:1Mi", "meminfo", f"legacy:{what}", "meminfo", env=LIMIT)
    assert r.rcs("legacy") != [0], r.stderr
    assert free_bytes(r, 0) == free_bytes(r, 1) == 7 * MiB


def test_class06_dlmopen_of_the_driver_is_refused(build, tmp_path: Path):
    prog = tmp_path / "dlm.py"
    prog.write_text(
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.dlmopen.restype = ctypes.c_void_p\n"
        "libc.dlmopen.argtypes = [ctypes.c_long, ctypes.c_char_p, ctypes.c_int]\n"
        "print(bool(libc.dlmopen(-1, b'libcuda.so.1', 2)),"
        " bool(libc.dlmopen(-1, b'libm.so.6', 2)))\n")
    p = subprocess.run([sys.executable, str(prog)], env=build.env(), capture_output=True,
                       text=True, timeout=60)
    assert p.stdout.split() == ["False", "True"], p.stderr
    assert "dlmopen" in p.stderr


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["launch", "grid", "gridasync", "multi"])
def test_class06_legacy_launches_are_throttled(build, mode, kind):
    r = drv(build, mode, "ctx:0", f"launchv:{kind}:60:2000", env={"GPUGOV_CORE_LIMIT": "20"})
    assert r.rcs("launchv") == [0], r.stderr
    assert float(r.find("launchv")["util"]) < 0.35


# ---- class 7: a forged region is refused cleanly, never written out of bounds ----

def _forge(region: Path, export_fields: dict[str, int], dead_slot: int = 3) -> None:
    lay = layout()
    reg, exp, slot = lay.structs["gg_region"], lay.structs["gg_export"], lay.structs["gg_slot"]
    data = bytearray(region.read_bytes())
    base = reg.fields["exports"].offset
    for name, value in export_fields.items():
        struct.pack_into("<I", data, base + exp.fields[name].offset, value)
    s = reg.fields["slots"].offset + dead_slot * slot.size  # a slot whose process is gone
    struct.pack_into("<I", data, s + slot.fields["state"].offset, 1)
    struct.pack_into("<I", data, s + slot.fields["pid"].offset, 4_000_000)
    region.write_bytes(bytes(data))


@pytest.mark.parametrize("fields", [
    {"state": 2, "dev": 0x7FFFFFF0, "slot": 1, "kind": 1},
    {"state": 1, "dev": 0, "slot": 0x7FFFFFF0, "kind": 1},
    {"state": 9, "dev": 0, "slot": 0, "kind": 1},
])
def test_class07_forged_region_indexes_are_refused_cleanly(build, tmp_path: Path, fields):
    region = tmp_path / "region"
    env = {"GPUGOV_SHARED_REGION": str(region), "GPUGOV_MEMORY_LIMIT": "32Mi"}
    assert drv(build, "direct", "ctx:0", "alloc:1Mi", env=env).rcs("alloc") == [0]
    _forge(region, fields)
    for _ in range(2):  # and the next process too: nobody died holding the lock
        r = drv(build, "direct", "ctx:0", "alloc:1Mi", env=env)
        assert r.returncode == 0, r.stderr
        assert r.rcs("init") == [800], r.stderr
        assert r.stderr.count("corrupt") == 1, r.stderr


# ---- class 8: frees through the other API are credited and scrubbed ----

@pytest.mark.parametrize("mode", MODES)
def test_class08_async_pointer_freed_with_cuMemFree(build, mode):
    r = drv(build, mode, "ctx:0", "async:6Mi", "fill:0:171", "xfree:0", "trim:0", "alloc:6Mi",
            "check:1", env=LIMIT)
    assert r.rcs("xfree") == [0] and r.rcs("alloc") == [0], r.stderr
    assert r.find("check")["nonzero"] == "0"


@pytest.mark.parametrize("mode", MODES)
def test_class08_linear_pointer_freed_with_cuMemFreeAsync(build, mode):
    r = drv(build, mode, "ctx:0", "alloc:6Mi", "fill:0:171", "xfreeasync:0", "alloc:6Mi",
            "check:1", env=LIMIT)
    assert r.rcs("xfreeasync") == [0] and r.rcs("alloc") == [0, 0], r.stderr
    assert r.find("check")["nonzero"] == "0"


# ---- class 9: arrays of a format the library cannot size are refused, not freed dirty ----

@pytest.mark.parametrize("fmt", ["0x99", "0xb0", "0x7f"])
def test_class09_unknown_array_format_is_refused(build, fmt):
    r = drv(build, "procaddr", "ctx:0", f"arrayfmt:64:64:{fmt}", "meminfo", env=LIMIT)
    assert r.rcs("arrayfmt") == [801], r.stderr
    assert "array format" in r.stderr and free_bytes(r) == 8 * MiB


@pytest.mark.parametrize("fmt,size", [("0x01", 1), ("0x08", 1), ("0x02", 2), ("0x09", 2),
                                      ("0x10", 2), ("0x03", 4), ("0x0a", 4), ("0x20", 4)])
def test_class09_known_array_formats_are_charged_their_size(build, fmt, size):
    r = drv(build, "direct", "ctx:0", f"arrayfmt:256:256:{fmt}", "meminfo", env=LIMIT)
    assert r.rcs("arrayfmt") == [0] and free_bytes(r) == 8 * MiB - 256 * 256 * size


# ---- class 10: memory is charged to the device that owns it, identified by UUID ----

def test_class10_pool_of_another_device_is_charged_to_it(build):
    env = {"GPUGOV_MEMORY_LIMIT": "8Mi", "GPUGOV_MEMORY_LIMIT_1": "2Mi", "FAKECUDA_DEVICES": "2"}
    r = drv(build, "procaddr", "ctx:0", "poolalloc:3Mi:1", "poolalloc:1Mi:1", env=env)
    assert r.rcs("poolalloc") == [2, 0], r.stderr


UUIDS = ",".join(f"GPU-face0000-0000-0000-0000-0000000000{i:02x}" for i in range(2))


@pytest.mark.parametrize("mode", MODES)
def test_class10_own_cuda_visible_devices_charges_the_right_device(build, mode):
    env = {"GPUGOV_MEMORY_LIMIT": "8Mi", "GPUGOV_MEMORY_LIMIT_1": "2Mi", "FAKECUDA_DEVICES": "2",
           "GPUGOV_DEVICE_UUIDS": UUIDS, "CUDA_VISIBLE_DEVICES": "1"}
    r = drv(build, mode, "ctx:0", "alloc:3Mi", "alloc:1Mi", "vmm:3Mi", "meminfo", env=env)
    assert r.rcs("alloc") == [2, 0] and r.rcs("vmm") == [2], r.stderr
    assert int(r.find("meminfo")["total"]) == 2 * MiB


def test_class10_device_outside_the_container_list_is_refused(build):
    env = {"FAKECUDA_DEVICES": "2", "GPUGOV_DEVICE_UUIDS": UUIDS.split(",")[0],
           "GPUGOV_MEMORY_LIMIT": "8Mi"}
    r = drv(build, "direct", "ctx:1", "alloc:1Mi", env=env)
    assert r.rcs("alloc") != [0]
    assert "not one of this container's devices" in r.stderr


# ---- class 11: liveness survives PID namespaces, execve and unreaped children ----

def _holder(build, env: dict[str, str], *tail: str, prefix: tuple[str, ...] = ()):
    p = subprocess.Popen([*prefix, str(build.drvtest), "direct", "ctx:0", "alloc:24Mi", *tail],
                         env=build.env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None
    while "alloc" not in (line := p.stdout.readline()):
        assert line, p.stderr.read() if p.stderr else ""
    assert parse(line)[0]["rc"] == "0"
    return p


def test_class11_unreaped_killed_child_releases_its_charge(build, tmp_path: Path):
    env = {"GPUGOV_SHARED_REGION": str(tmp_path / "region"), "GPUGOV_MEMORY_LIMIT": "32Mi"}
    p = _holder(build, env, f"barrier:{tmp_path / 'never'}")
    os.kill(p.pid, signal.SIGKILL)
    try:
        import time
        time.sleep(0.2)  # dead but not waited for: a zombie whose pid still exists
        r = drv(build, "direct", "ctx:0", "alloc:24Mi", env=env)
        assert r.rcs("alloc") == [0], r.stderr
    finally:
        p.wait()


def test_class11_exec_releases_the_old_image_charge(build, tmp_path: Path):
    env = {"GPUGOV_SHARED_REGION": str(tmp_path / "region"), "GPUGOV_MEMORY_LIMIT": "32Mi"}
    sleep = shutil.which("sleep")
    assert sleep
    p = _holder(build, env, f"exec:{sleep}:30")
    try:
        r = drv(build, "direct", "ctx:0", "alloc:24Mi", env=env)
        assert r.rcs("alloc") == [0], r.stderr  # same pid, same start time, new image
    finally:
        p.kill()
        p.wait()


def test_class11_forked_child_does_not_keep_its_parent_alive(build, tmp_path: Path):
    # The child inherits the parent's descriptor of the region; it must not hold the parent's
    # liveness lock, or a killed parent's charge would live as long as any child.
    env = {"GPUGOV_SHARED_REGION": str(tmp_path / "region"), "GPUGOV_MEMORY_LIMIT": "32Mi"}
    p = _holder(build, env, "fork:20000", f"barrier:{tmp_path / 'never'}")
    assert p.stdout is not None
    child = int(parse(p.stdout.readline())[0]["pid"])
    try:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        os.kill(child, 0)  # the child still runs
        r = drv(build, "direct", "ctx:0", "alloc:24Mi", env=env)
        assert r.rcs("alloc") == [0], r.stderr
    finally:
        os.kill(child, signal.SIGKILL)


def _can_unshare_pid() -> bool:
    unshare = shutil.which("unshare")
    return bool(unshare) and subprocess.run([unshare, "--pid", "--fork", "true"],
                                            capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare_pid(), reason="needs unshare(1) and CLONE_NEWPID")
def test_class11_process_in_another_pid_namespace_is_not_reaped(build, tmp_path: Path):
    env = {"GPUGOV_SHARED_REGION": str(tmp_path / "region"), "GPUGOV_MEMORY_LIMIT": "32Mi"}
    unshare = shutil.which("unshare")
    assert unshare
    p = _holder(build, env, f"barrier:{tmp_path / 'go'}",
                prefix=(unshare, "--pid", "--fork", "--kill-child"))
    try:
        r = drv(build, "direct", "ctx:0", "alloc:24Mi", env=env)
        assert r.rcs("alloc") == [2], r.stderr  # its 24 MiB are live, whatever its pid reads
        assert read_region(tmp_path / "region").reaped == 0
    finally:
        (tmp_path / "go").touch()
        p.wait(timeout=30)


# ---- class 12: stream-ordered allocation without a current context ----

@pytest.mark.parametrize("mode", MODES)
def test_class12_pool_allocation_without_context_is_charged(build, mode):
    r = drv(build, mode, "poolalloc:6Mi", "poolalloc:4Mi", env=LIMIT)
    assert r.rcs("poolalloc") == [0, 2], r.stderr


def test_class12_default_pool_allocation_without_context_is_refused(build):
    r = drv(build, "procaddr", "async:1Mi", env=LIMIT)
    assert r.rcs("async") == [201]


# ---- class 14: configuration names of any length, duplicates refused ----

def test_class14_long_variable_name_is_not_ignored(build):
    name = "GPUGOV_MEMORY_LIMIT_" + "0" * 130 + "1"
    r = drv(build, "direct", "ctx:1", "alloc:2Mi", env={name: "1Mi", "FAKECUDA_DEVICES": "2"})
    assert r.rcs("alloc") == [2], r.stderr


def test_class14_long_unknown_name_fails_closed(build):
    name = "GPUGOV_MEMORY_LIMIT_" + "x" * 200
    r = drv(build, "direct", "ctx:0", env={name: "1Mi"})
    assert r.rcs("init") == [800] and "unknown variable" in r.stderr


def _run_with_envp(build, extra: list[str], *cmds: str):
    """Run drvtest through execve with a hand-made environment (os.environ cannot hold
    duplicate names)."""
    envp = [f"{k}={v}" for k, v in build.env().items()] + extra
    code = (
        "import ctypes, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "args = [a.encode() for a in sys.argv[1:]]\n"
        "envp = [e.encode() for e in " + repr(envp) + "]\n"
        "A = (ctypes.c_char_p * (len(args) + 1))(*args, None)\n"
        "E = (ctypes.c_char_p * (len(envp) + 1))(*envp, None)\n"
        "libc.execve(args[0], A, E)\n"
        "sys.exit(99)\n")
    p = subprocess.run([sys.executable, "-c", code, str(build.drvtest), "direct", *cmds],
                       capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    return parse(p.stdout), p.stderr


def test_class14_duplicate_entries_are_refused(build):
    lines, err = _run_with_envp(build, ["GPUGOV_MEMORY_LIMIT=1Mi", "GPUGOV_MEMORY_LIMIT=64Mi"],
                                "ctx:0", "alloc:2Mi")
    assert [x["rc"] for x in lines if x["cmd"] == "init"] == ["800"], err
    assert "GPUGOV_MEMORY_LIMIT appears more than once" in err


def test_class14_identical_duplicates_are_accepted(build):
    lines, err = _run_with_envp(build, ["GPUGOV_MEMORY_LIMIT=1Mi", "GPUGOV_MEMORY_LIMIT=1Mi"],
                                "ctx:0", "alloc:2Mi", "alloc:1Mi")
    assert [x["rc"] for x in lines if x["cmd"] == "alloc"] == ["2", "0"], err
