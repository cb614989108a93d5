"""The node's scrub between tenants (issue 21 class 13), on the fake driver whose device memory
outlives its processes (FAKECUDA_DEVICE_FILE): what an exited process left is readable by the
next one until the node scrubs the device; the scrub's cost is reported."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fake_device import MiB, leave_secret, visible  # noqa: E402

from gpugov.node.scrub import Handover, scrub_device  # noqa: E402


def test_class13_memory_left_at_exit_is_zeroed_by_the_node_scrub(scrub_fake, device_file):
    leave_secret(scrub_fake, device_file)
    assert visible(scrub_fake, device_file) == 16 * MiB  # the fake keeps it, as a GPU may
    leave_secret(scrub_fake, device_file)
    result = scrub_device(0, cuda_lib=scrub_fake.dir)
    assert result.ok, result.error
    assert result.bytes == 64 * MiB and result.free_before == 64 * MiB
    assert result.seconds > 0 and result.gib_per_second > 0
    assert visible(scrub_fake, device_file) == 0


def test_class13_handover_scrubs_only_for_another_tenant(scrub_fake, device_file, tmp_path: Path):
    state = tmp_path / "handover.json"
    h = Handover.load(state)
    assert h.needs_scrub("GPU-x", "team-a")  # unknown previous tenant: scrub
    first = h.before_handover("0", "team-a", cuda_lib=scrub_fake.dir)
    assert first is not None and first.ok
    leave_secret(scrub_fake, device_file)
    assert h.before_handover("0", "team-a", cuda_lib=scrub_fake.dir) is None  # same tenant
    assert visible(scrub_fake, device_file) == 16 * MiB
    again = Handover.load(state)  # survives an agent restart
    result = again.before_handover("0", "team-b", cuda_lib=scrub_fake.dir)
    assert result is not None and result.ok
    assert visible(scrub_fake, device_file) == 0


def test_class13_scrub_of_a_missing_device_reports_the_error(scrub_fake, device_file):
    result = scrub_device(5, cuda_lib=scrub_fake.dir)
    assert not result.ok and "CUDA error" in result.error
