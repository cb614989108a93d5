"""The shared region: C and Python agree on the layout, processes share one limit, and
SIGKILL at any point neither deadlocks the others nor leaks the victim's quota."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from native_build import drv, parse

from gpugov.node.region import layout, read_region

MiB = 1 << 20


def test_c_and_python_layouts_agree(build, tmp_path: Path):
    lay = layout()
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "region_layout.h"',
             "int main(void) {"]
    for s in lay.structs.values():
        lines.append(f'printf("{s.name} size %zu\\n", sizeof(struct {s.name}));')
        for f in s.fields.values():
            lines.append(f'printf("{s.name}.{f.name} %zu %zu\\n", offsetof(struct {s.name}, '
                         f'{f.name}), sizeof(((struct {s.name} *)0)->{f.name}));')
    for name in lay.constants:
        lines.append(f'printf("{name} %llu\\n", (unsigned long long){name});')
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    native = Path(__file__).resolve().parents[2] / "native"
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-Wall", "-Werror", f"-I{native}", "-o", str(exe), str(src)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    expected = []
    for s in lay.structs.values():
        expected.append(f"{s.name} size {s.size}")
        expected += [f"{s.name}.{f.name} {f.offset} {f.size * f.count}" for f in s.fields.values()]
    expected += [f"{n} {v}" for n, v in lay.constants.items()]
    assert [x for x in got if x] == expected


def test_reader_sees_a_live_process(build, tmp_path: Path):
    region = tmp_path / "region"
    go = tmp_path / "go"
    env = build.env({"GPUGOV_SHARED_REGION": str(region), "GPUGOV_MEMORY_LIMIT": "64Mi"})
    p = subprocess.Popen([str(build.drvtest), "direct", "ctx:0", "alloc:5Mi", f"barrier:{go}"],
                         env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    while "alloc" not in p.stdout.readline():
        pass
    snap = read_region(region)
    go.touch()
    p.wait(timeout=30)
    assert snap.mem_limit[0] == 64 * MiB and snap.used[0] == 5 * MiB
    assert [(s.pid, s.used[0]) for s in snap.slots] == [(p.pid, 5 * MiB)]
    after = read_region(region)
    assert after.slots == () and after.used[0] == 0  # a clean exit releases the slot


def test_four_processes_share_one_limit(build, tmp_path: Path):
    region, start, done = tmp_path / "region", tmp_path / "start", tmp_path / "done"
    env = build.env({"GPUGOV_SHARED_REGION": str(region), "GPUGOV_MEMORY_LIMIT": "32Mi"})
    cmd = [str(build.drvtest), "procaddr", "ctx:0", f"barrier:{start}", "fillup:1Mi",
           f"barrier:{done}"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) for _ in range(4)]
    start.touch()
    counts = []
    for p in procs:
        assert p.stdout is not None
        line = ""
        while "fillup" not in line:
            line = p.stdout.readline()
        counts.append(int(parse(line)[0]["count"]))
    snap = read_region(region)
    done.touch()
    for p in procs:
        p.wait(timeout=30)
    assert sum(counts) == 32
    assert len(snap.slots) == 4 and snap.used[0] == 32 * MiB
    assert sum(s.used[0] for s in snap.slots) == 32 * MiB


def _start_holding_lock(build, region: Path) -> subprocess.Popen[str]:
    env = build.env({"GPUGOV_SHARED_REGION": str(region), "GPUGOV_MEMORY_LIMIT": "32Mi",
                     "GPUGOV_TEST_HOLD_LOCK_MS": "60000"})
    p = subprocess.Popen([str(build.drvtest), "direct", "ctx:0", "alloc:24Mi"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    while "holding lock" not in p.stderr.readline():
        assert p.poll() is None
    return p


def test_sigkill_while_holding_the_lock(build, tmp_path: Path):
    region = tmp_path / "region"
    victim = _start_holding_lock(build, region)  # killed mid-allocation, lock held
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    r = drv(build, "direct", "ctx:0", "alloc:32Mi", timeout=20,
            env={"GPUGOV_SHARED_REGION": str(region), "GPUGOV_MEMORY_LIMIT": "32Mi",
                 "GPUGOV_LOG_LEVEL": "info"})
    assert r.rcs("alloc") == [0], r.stderr  # no deadlock, and the victim's 24 MiB is free
    assert "lock owner died; recovering" in r.stderr
    assert read_region(region).recoveries == 1


def test_sigkill_holding_memory_releases_it(build, tmp_path: Path):
    region, never = tmp_path / "region", tmp_path / "never"
    env = build.env({"GPUGOV_SHARED_REGION": str(region), "GPUGOV_MEMORY_LIMIT": "32Mi"})
    victim = subprocess.Popen([str(build.drvtest), "direct", "ctx:0", "alloc:24Mi",
                               f"barrier:{never}"], env=env, stdout=subprocess.PIPE, text=True)
    assert victim.stdout is not None
    while "alloc" not in victim.stdout.readline():
        pass
    assert read_region(region).used[0] == 24 * MiB
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    r = drv(build, "direct", "ctx:0", "alloc:24Mi",
            env={"GPUGOV_SHARED_REGION": str(region), "GPUGOV_MEMORY_LIMIT": "32Mi"})
    assert r.rcs("alloc") == [0], r.stderr
    snap = read_region(region)
    assert snap.reaped == 1 and snap.slots == ()


def test_repeated_random_kills_never_deadlock(build, tmp_path: Path):
    region = tmp_path / "region"
    env = {"GPUGOV_SHARED_REGION": str(region), "GPUGOV_MEMORY_LIMIT": "32Mi"}
    for i in range(8):
        p = subprocess.Popen([str(build.drvtest), "direct", "ctx:0"]
                             + ["alloc:1Mi", "free:0"] * 2000, env=build.env(env),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.005 * (i + 1))
        p.kill()
        p.wait()
    r = drv(build, "direct", "ctx:0", "alloc:32Mi", env=env, timeout=20)
    assert r.rcs("alloc") == [0], r.stderr


def test_region_of_another_version_is_refused(build, tmp_path: Path):
    region = tmp_path / "region"
    region.write_bytes(b"\0" * 100)
    r = drv(build, "direct", "ctx:0", env={"GPUGOV_SHARED_REGION": str(region)})
    assert r.rcs("init") == [800]
    assert "another gpugov version" in r.stderr
