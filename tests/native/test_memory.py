"""Memory quota on every allocation path, reached directly, via dlsym and cuGetProcAddress."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from native_build import FAKE, drv

MiB = 1 << 20
LIMIT = {"GPUGOV_MEMORY_LIMIT": "8Mi"}
MODES = ["direct", "dlsym", "procaddr", "procaddr-ptsz"]

# path -> (first allocation ~6 MiB, second allocation ~4 MiB that must not fit)
PATHS = {
    "alloc": ("alloc:6Mi", "alloc:4Mi"),
    "managed": ("managed:6Mi", "managed:4Mi"),
    "pitch": ("pitch:2048:3072", "pitch:2048:2048"),
    "async": ("async:6Mi", "async:4Mi"),
    "poolalloc": ("poolalloc:6Mi", "poolalloc:4Mi"),
    "array": ("array:1536:1024", "array:1024:1024"),
    "array3d": ("array3d:1024:768:2", "array3d:1024:512:2"),
    "mipmap": ("mipmap:1024:1024:2", "mipmap:1024:1024:1"),
    "vmm": ("vmm:6Mi", "vmm:4Mi"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", sorted(PATHS))
def test_limit_enforced_on_path(build, path, mode):
    first, second = PATHS[path]
    cmd = second.split(":")[0]
    r = drv(build, mode, "ctx:0", first, second, "free:0", second, env=LIMIT)
    assert r.rcs(cmd) == [0, 2, 0], r.stderr
    assert "out of memory on device 0: limit 8388608 bytes, in use" in r.stderr
    assert r.stderr.count("out of memory") == 1  # one line per refusal


@pytest.mark.parametrize("mode", MODES)
def test_ipc_import_of_own_export_is_not_charged_twice(build, mode):
    # Exporter and importer share one region (here: one process): one charge per container.
    r = drv(build, mode, "ctx:0", "alloc:3Mi", "ipc:0", "ipc:0", "alloc:5Mi", "alloc:1Mi",
            "free:1", "free:2", "free:0", "alloc:3Mi", env=LIMIT)
    assert r.rcs("ipc") == [0, 0], r.stderr
    assert r.rcs("alloc") == [0, 0, 2, 0], r.stderr


def test_pool_keeps_freed_memory_charged_until_trim(build):
    r = drv(build, "procaddr", "ctx:0", "async:6Mi", "freeasync:0", "alloc:4Mi", "trim:0",
            "alloc:4Mi", env=LIMIT)
    assert r.rcs("freeasync") == [0]
    assert r.rcs("alloc") == [2, 0], r.stderr  # the pool still holds 6 MiB until trimmed


def test_pool_reuses_its_reservation(build):
    r = drv(build, "procaddr", "ctx:0", "async:6Mi", "freeasync:0", "async:6Mi", env=LIMIT)
    assert r.rcs("async") == [0, 0], r.stderr


def test_driver_failure_rolls_back_the_charge(build):
    r = drv(build, "direct", "ctx:0", "alloc:6Mi", "meminfo",
            env={**LIMIT, "FAKECUDA_FAIL": "cuMemAlloc_v2"})
    assert r.rcs("alloc") == [999]
    assert int(r.find("meminfo")["free"]) == 8 * MiB


def test_views_show_the_quota(build):
    r = drv(build, "dlsym", "ctx:0", "alloc:3Mi", "meminfo", "totalmem", "nvml", env=LIMIT)
    mi, nv = r.find("meminfo"), r.find("nvml")
    assert (int(mi["total"]), int(mi["free"])) == (8 * MiB, 5 * MiB)
    assert int(r.find("totalmem")["total"]) == 8 * MiB
    assert (int(nv["total"]), int(nv["used"]), int(nv["free"])) == (8 * MiB, 3 * MiB, 5 * MiB)
    assert (int(nv["v2total"]), int(nv["v2used"]), int(nv["v2free"])) == (8 * MiB, 3 * MiB, 5 * MiB)


def test_views_without_limit_show_the_card(build):
    r = drv(build, "direct", "ctx:0", "meminfo", "totalmem", "nvml")
    assert int(r.find("meminfo")["total"]) == 1 << 30
    assert int(r.find("totalmem")["total"]) == 1 << 30
    assert int(r.find("nvml")["total"]) == 1 << 30


def test_per_device_limit_overrides_global(build):
    env = {"GPUGOV_MEMORY_LIMIT": "8Mi", "GPUGOV_MEMORY_LIMIT_1": "2Mi", "FAKECUDA_DEVICES": "2"}
    r = drv(build, "direct", "ctx:1", "alloc:3Mi", "ctx:0", "alloc:3Mi", env=env)
    assert r.rcs("alloc") == [2, 0], r.stderr


@pytest.mark.parametrize("free_cmd,alloc_cmd", [("free", "alloc"), ("freeasync", "async")])
def test_scrub_zeroes_freed_memory(build, free_cmd, alloc_cmd):
    cmds = ["ctx:0", f"{alloc_cmd}:1Mi", "fill:0:171", f"{free_cmd}:0", f"{alloc_cmd}:1Mi",
            "check:1"]
    scrubbed = drv(build, "direct", *cmds)
    assert scrubbed.find("check")["nonzero"] == "0"
    unscrubbed = drv(build, "direct", *cmds, env={"GPUGOV_SCRUB": "0"})
    assert int(unscrubbed.find("check")["nonzero"]) == MiB  # the fake really reuses memory


def test_python_ctypes_client(build):
    env = build.env({"GPUGOV_MEMORY_LIMIT": "10Mi"})
    p = subprocess.run([sys.executable, str(FAKE / "ctypes_client.py"), str(MiB)], env=env,
                       capture_output=True, text=True, timeout=60, check=True)
    out = json.loads(p.stdout)
    assert out["allocated"] == 10 * MiB
    assert out["meminfo"] == [0, 10 * MiB]
    assert out["nvml_rc"] == 0 and out["nvml"][0] == 10 * MiB


def test_legacy_entry_point_is_refused(build, tmp_path: Path):
    # Asking cuGetProcAddress for a pre-3.2 (32-bit) cuMemAlloc would hand out an unenforced
    # function; the library answers NOT_FOUND instead.
    prog = tmp_path / "legacy.py"
    prog.write_text(
        "import ctypes\n"
        "c = ctypes.CDLL('libcuda.so.1')\n"
        "p = ctypes.c_void_p()\n"
        "print(c.cuGetProcAddress(b'cuMemAlloc', ctypes.byref(p), 3000, 0),"
        " c.cuGetProcAddress(b'cuMemAlloc', ctypes.byref(p), 12000, 0))\n")
    p = subprocess.run([sys.executable, str(prog)], env=build.env(), capture_output=True,
                       text=True, timeout=60)
    assert p.stdout.split() == ["500", "0"], p.stderr
