"""Memory shared between processes (IPC, VMM shareable handles, pool pointers) is charged
once per container; VMM memory is credited only when neither a handle nor a mapping holds
it; scrub reaches arrays and VMM memory without touching memory another process owns."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from native_build import drv, parse

from gpugov.node.region import read_region

MiB = 1 << 20
LIMIT = {"GPUGOV_MEMORY_LIMIT": "8Mi"}


class Proc:
    """A drvtest client in the background whose output lines are read one command at a time."""

    def __init__(self, build, env: dict[str, str], *cmds: str) -> None:
        self.p = subprocess.Popen([str(build.drvtest), "direct", *cmds], env=build.env(env),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def until(self, cmd: str) -> dict[str, str]:
        assert self.p.stdout is not None
        while True:
            line = self.p.stdout.readline()
            err = self.p.stderr.read() if not line and self.p.stderr else ""
            assert line, f"client exited before {cmd}: {err}"
            if line.startswith(cmd + " "):
                return parse(line)[0]

    def finish(self) -> None:
        self.p.wait(timeout=30)


def region_env(tmp_path: Path, name: str, limit: str = "8Mi") -> dict[str, str]:
    return {"GPUGOV_SHARED_REGION": str(tmp_path / name), "GPUGOV_MEMORY_LIMIT": limit}


def wait_file(path: Path) -> None:
    for _ in range(3000):
        if path.exists():
            return
        time.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


@pytest.mark.parametrize("export,open_", [("ipcput", "ipcopen"), ("pexport", "pimport")])
def test_import_from_another_container_is_charged(build, tmp_path: Path, export, open_):
    handle, done = tmp_path / "handle", tmp_path / "done"
    alloc = "alloc:3Mi" if export == "ipcput" else "async:3Mi"
    owner = Proc(build, region_env(tmp_path, "a"), "ctx:0", alloc, f"{export}:0:{handle}",
                 f"barrier:{done}")
    assert owner.until(export)["rc"] == "0"
    r = drv(build, "direct", "ctx:0", f"{open_}:{handle}", "alloc:6Mi", "free:0", "alloc:6Mi",
            env=region_env(tmp_path, "b"))
    done.touch()
    owner.finish()
    assert r.rcs(open_) == [0], r.stderr
    assert r.rcs("alloc") == [2, 0], r.stderr  # 3 MiB import + 6 MiB > 8 MiB until closed


@pytest.mark.parametrize("export,open_", [("ipcput", "ipcopen"), ("pexport", "pimport")])
def test_import_within_one_container_is_charged_once(build, tmp_path: Path, export, open_):
    handle, done = tmp_path / "handle", tmp_path / "done"
    env = region_env(tmp_path, "region")
    alloc = "alloc:3Mi" if export == "ipcput" else "async:3Mi"
    owner = Proc(build, env, "ctx:0", alloc, f"{export}:0:{handle}", f"barrier:{done}")
    owner.until(export)
    r = drv(build, "direct", "ctx:0", f"{open_}:{handle}", "alloc:5Mi", "alloc:1Mi", env=env)
    snap_used = read_region(tmp_path / "region").used[0]
    done.touch()
    owner.finish()
    assert r.rcs(open_) == [0], r.stderr
    assert r.rcs("alloc") == [0, 2], r.stderr  # 3 (owner) + 5 = 8: the import costs nothing
    assert snap_used == 3 * MiB  # the importer exited; only the owner's charge is left


def test_exporter_freeing_first_leaves_the_import_charged(build, tmp_path: Path):
    handle, go_free, go_close, done = (tmp_path / n for n in ("handle", "free", "close", "done"))
    env = region_env(tmp_path, "region")
    owner = Proc(build, env, "ctx:0", "alloc:3Mi", f"ipcput:0:{handle}", f"barrier:{go_free}",
                 "free:0", f"barrier:{done}")
    owner.until("ipcput")
    user = Proc(build, env, "ctx:0", f"ipcopen:{handle}", f"barrier:{go_close}", "free:0",
                f"barrier:{done}")
    assert user.until("ipcopen")["rc"] == "0"
    go_free.touch()
    assert owner.until("free")["rc"] == "0"
    held = read_region(tmp_path / "region")
    go_close.touch()
    user.until("free")
    closed = read_region(tmp_path / "region")
    done.touch()
    owner.finish()
    user.finish()
    # The importer keeps the memory alive after the owner's free: it stays charged (to no
    # process: an orphan of the region) until the last import closes.
    assert held.used[0] == 3 * MiB and [s.used[0] for s in held.slots] == [0, 0]
    assert closed.used[0] == 0


def test_importer_killed_releases_the_orphan(build, tmp_path: Path):
    handle, go_free, done = tmp_path / "handle", tmp_path / "free", tmp_path / "done"
    env = region_env(tmp_path, "region")
    owner = Proc(build, env, "ctx:0", "alloc:3Mi", f"ipcput:0:{handle}", f"barrier:{go_free}",
                 "free:0", f"barrier:{done}")
    owner.until("ipcput")
    user = Proc(build, env, "ctx:0", f"ipcopen:{handle}", f"barrier:{done}")
    user.until("ipcopen")
    go_free.touch()
    owner.until("free")
    user.p.kill()
    user.p.wait()
    r = drv(build, "direct", "ctx:0", "alloc:8Mi", env=env)  # reaps the importer, frees the orphan
    done.touch()
    owner.finish()
    assert r.rcs("alloc") == [0], r.stderr


def test_vmm_import_from_another_container_is_charged_when_mapped(build, tmp_path: Path):
    handle, done = tmp_path / "handle", tmp_path / "done"
    owner = Proc(build, region_env(tmp_path, "a"), "ctx:0", "vmm:6Mi", f"vexport:0:{handle}",
                 f"barrier:{done}")
    assert owner.until("vexport")["rc"] == "0"
    r = drv(build, "direct", "ctx:0", f"vimport:{handle}", "alloc:4Mi", "vmap:0", "free:1",
            "vmap:0", "alloc:4Mi", "free:2", "alloc:4Mi", "free:0", "alloc:4Mi",
            env=region_env(tmp_path, "b"))
    done.touch()
    owner.finish()
    assert r.rcs("vimport") == [0], r.stderr
    assert r.rcs("vmap") == [2, 0], r.stderr  # 4 + 6 > 8; after the free it fits
    # mapped import (6) + 4 > 8; unmapped but the import handle is open: still charged;
    # released: fits
    assert r.rcs("alloc") == [0, 2, 2, 0], r.stderr


@pytest.mark.parametrize("mode", ["direct", "procaddr"])
def test_vmm_memory_is_charged_while_mapped_after_release(build, mode):
    # create, map, release the handle (the usual pattern): the mapping still holds the memory
    r = drv(build, mode, "ctx:0", "vmm:6Mi", "vmap:0", "free:0", "alloc:4Mi", "free:1",
            "alloc:4Mi", env=LIMIT)
    assert r.rcs("alloc") == [2, 0], r.stderr


def test_vmm_retained_handle_needs_its_own_release(build):
    r = drv(build, "direct", "ctx:0", "vmm:6Mi", "vmap:0", "vretain:1", "free:2", "free:0",
            "alloc:4Mi", "free:1", "alloc:4Mi", env=LIMIT)
    assert r.rcs("vretain") == [0], r.stderr
    assert r.rcs("alloc") == [2, 0], r.stderr


@pytest.mark.parametrize("order", ["unmap-then-release", "release-then-unmap"])
def test_vmm_scrub(build, order):
    frees = ["free:1", "free:0"] if order == "unmap-then-release" else ["free:0", "free:1"]
    cmds = ["ctx:0", "vmm:1Mi", "vmap:0", "fill:1:171", *frees, "vmm:1Mi", "vmap:2", "check:3"]
    assert drv(build, "direct", *cmds).find("check")["nonzero"] == "0"
    unscrubbed = drv(build, "direct", *cmds, env={"GPUGOV_SCRUB": "0"})
    assert int(unscrubbed.find("check")["nonzero"]) == MiB  # the fake really reuses memory


def test_unmapping_an_import_leaves_the_owners_data(build, tmp_path: Path):
    handle = tmp_path / "handle"
    r = drv(build, "direct", "ctx:0", "vmm:1Mi", "vmap:0", "fill:1:171", f"vexport:0:{handle}",
            f"vimport:{handle}", "vmap:2", "free:3", "free:2", "check:1")
    assert int(r.find("check")["nonzero"]) == MiB, r.stderr


@pytest.mark.parametrize("create", ["array:256:256", "array3d:64:64:4", "mipmap:128:128:3"])
def test_array_scrub(build, create):
    cmds = ["ctx:0", create, "afill:0:171", "free:0", create, "acheck:1"]
    r = drv(build, "direct", *cmds)
    assert r.rcs("afill") == [0] and r.find("acheck")["nonzero"] == "0", r.stderr
    unscrubbed = drv(build, "direct", *cmds, env={"GPUGOV_SCRUB": "0"})
    assert int(unscrubbed.find("acheck")["nonzero"]) > 0  # the fake really reuses memory


def test_private_region_is_a_warning_at_the_default_level(build):
    r = drv(build, "direct", "ctx:0", "alloc:1Mi", "meminfo", env=LIMIT)
    assert r.stderr.count("GPUGOV_SHARED_REGION is unset") == 1, r.stderr
    assert "warn: GPUGOV_SHARED_REGION is unset" in r.stderr
    assert "N times its quota" in r.stderr


def test_limit_mismatch_with_running_processes_is_refused(build, tmp_path: Path):
    done = tmp_path / "done"
    first = Proc(build, region_env(tmp_path, "region", "8Mi"), "ctx:0", "alloc:1Mi",
                 f"barrier:{done}")
    first.until("alloc")
    r = drv(build, "direct", "ctx:0", "alloc:1Mi", env=region_env(tmp_path, "region", "16Mi"))
    done.touch()
    first.finish()
    assert r.rcs("init") == [800], r.stderr
    assert ("memory limit in the environment (16777216 bytes) differs from the shared region"
            in r.stderr), r.stderr
    assert "(8388608 bytes), which 1 running process of this container uses" in r.stderr
    assert "the region's limit stays and this process is refused" in r.stderr


def test_idle_region_takes_the_new_limits(build, tmp_path: Path):
    drv(build, "direct", "ctx:0", "alloc:1Mi", env=region_env(tmp_path, "region", "8Mi"))
    r = drv(build, "direct", "ctx:0", "totalmem", env=region_env(tmp_path, "region", "16Mi"))
    assert int(r.find("totalmem")["total"]) == 16 * MiB, r.stderr
    assert "was 8388608 bytes, the environment says 16777216 bytes" in r.stderr
    assert "the environment's limit applies" in r.stderr
    assert read_region(tmp_path / "region").mem_limit[0] == 16 * MiB
