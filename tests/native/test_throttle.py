"""Compute quota: device busy fraction of the fake GPU while a client launches flat out.

The measure is the fake device's own busy time over the interval, so a slow or loaded
host only matters if the launcher cannot keep up with 30 % of one simulated device."""

from __future__ import annotations

import pytest
from native_build import drv


def util(build, kind: str, seconds: float, env: dict[str, str], mode: str = "procaddr") -> float:
    r = drv(build, mode, "ctx:0", f"util:{kind}:500:{seconds}", env=env, timeout=60)
    return float(r.find("util")["util"])


def test_thirty_percent_limit_gives_thirty_percent(build):
    u = util(build, "kernel", 2.0, {"GPUGOV_CORE_LIMIT": "30"})
    assert 0.25 <= u <= 0.35, u


@pytest.mark.parametrize("kind", ["graph", "coop", "ex"])
def test_graph_cooperative_and_ex_launches_are_throttled(build, kind):
    u = util(build, kind, 0.7, {"GPUGOV_CORE_LIMIT": "30"}, mode="procaddr-ptsz")
    assert 0.2 <= u <= 0.4, u


def test_per_device_core_limit(build):
    assert util(build, "kernel", 0.7, {"GPUGOV_CORE_LIMIT_0": "50"}) == pytest.approx(0.5, abs=0.1)


@pytest.mark.parametrize("env", [{}, {"GPUGOV_CORE_LIMIT": "100"}])
def test_not_throttled_when_unset_or_100(build, env):
    # Unthrottled, the fake keeps its launch queue full: anything far above 30 % shows that no
    # throttle ran (a loaded host may starve the launcher a little, hence the loose bound).
    assert util(build, "kernel", 0.7, env) > 0.6


def share(build, pattern: str, pct: int, seconds: float) -> float:
    r = drv(build, "procaddr", "ctx:0", f"pattern:{pattern}:{seconds}",
            env={"GPUGOV_CORE_LIMIT": str(pct)}, timeout=60)
    return float(r.find("pattern")["util"])


def test_class04_periodic_short_kernel_cannot_alias_the_estimate(build):
    # The same function, 1 ms kernels and a 10 us one every 16th launch: a sampler that times
    # every 16th launch only ever sees the short one and lets the rest run free.
    assert share(build, "periodic16", 20, 1.5) == pytest.approx(0.20, abs=0.05)


def test_class04_four_kernel_training_loop_gets_its_quota(build):
    assert share(build, "loop4", 20, 1.5) == pytest.approx(0.20, abs=0.05)


def test_class04_random_kernel_durations_get_their_quota(build):
    assert share(build, "random", 20, 1.5) == pytest.approx(0.20, abs=0.05)


def test_class05_no_free_ride_before_the_first_measurement(build):
    # 100 ms kernels from the first launch of the process: the first is timed and paid for
    # before the second may start (a bounded wait used to let the first ones run free).
    assert share(build, "first", 10, 2.0) == pytest.approx(0.10, abs=0.05)
