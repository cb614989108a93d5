"""A tenant's process that leaves data behind on the fake driver whose device memory outlives
its processes (FAKECUDA_DEVICE_FILE; fixtures `scrub_fake` and `device_file` in conftest):
shared by the node scrub's tests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
from native_build import drv  # noqa: E402

MiB = 1 << 20


def leave_secret(fake, env) -> None:  # type: ignore[no-untyped-def]
    """A tenant process (no library: a whole-GPU pod) fills 16 MiB and exits without freeing."""
    r = drv(fake, "direct", "ctx:0", "alloc:16Mi", "fill:0:171", env=env, preload=False)
    assert r.rcs("fill") == [0], r.stderr


def visible(fake, env) -> int:  # type: ignore[no-untyped-def]
    """Bytes of what an earlier process left that a new process can read."""
    r = drv(fake, "direct", "ctx:0", "alloc:16Mi", "check:0", env=env, preload=False)
    return int(r.find("check")["nonzero"])
