"""The node's scrub between tenants (issue 21 class 13), on the fake driver whose device memory
outlives its processes (FAKECUDA_DEVICE_FILE): what an exited process left is readable by the
next one until the node scrubs the device; the scrub's cost is reported."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
from native_build import build_all, compiler, drv  # noqa: E402

from gpugov.node.scrub import Handover, scrub_device  # noqa: E402

MiB = 1 << 20


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory):
    if compiler() is None:
        pytest.skip("no C compiler (cc) on PATH: the fake driver needs one")
    return build_all(tmp_path_factory.mktemp("scrub-native"), test_hooks=False)


@pytest.fixture
def device_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {"FAKECUDA_DEVICE_FILE": str(tmp_path / "gpu0.mem"), "FAKECUDA_MEM_BYTES": str(64 * MiB)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # for the scrub's child process
    return env


def _leave_secret(fake, env) -> None:
    """A tenant process (no library: a whole-GPU pod) fills 16 MiB and exits without freeing."""
    r = drv(fake, "direct", "ctx:0", "alloc:16Mi", "fill:0:171", env=env, preload=False)
    assert r.rcs("fill") == [0], r.stderr


def _visible(fake, env) -> int:
    r = drv(fake, "direct", "ctx:0", "alloc:16Mi", "check:0", env=env, preload=False)
    return int(r.find("check")["nonzero"])


def test_class13_memory_left_at_exit_is_zeroed_by_the_node_scrub(fake, device_file):
    _leave_secret(fake, device_file)
    assert _visible(fake, device_file) == 16 * MiB  # the fake keeps it, as a GPU may
    _leave_secret(fake, device_file)
    result = scrub_device(0, cuda_lib=fake.dir)
    assert result.ok, result.error
    assert result.bytes == 64 * MiB and result.free_before == 64 * MiB
    assert result.seconds > 0 and result.gib_per_second > 0
    assert _visible(fake, device_file) == 0


def test_class13_handover_scrubs_only_for_another_tenant(fake, device_file, tmp_path: Path):
    state = tmp_path / "handover.json"
    h = Handover.load(state)
    assert h.needs_scrub("GPU-x", "team-a")  # unknown previous tenant: scrub
    first = h.before_handover("0", "team-a", cuda_lib=fake.dir)
    assert first is not None and first.ok
    _leave_secret(fake, device_file)
    assert h.before_handover("0", "team-a", cuda_lib=fake.dir) is None  # same tenant
    assert _visible(fake, device_file) == 16 * MiB
    again = Handover.load(state)  # survives an agent restart
    result = again.before_handover("0", "team-b", cuda_lib=fake.dir)
    assert result is not None and result.ok
    assert _visible(fake, device_file) == 0


def test_class13_scrub_of_a_missing_device_reports_the_error(fake, device_file):
    result = scrub_device(5, cuda_lib=fake.dir)
    assert not result.ok and "CUDA error" in result.error
