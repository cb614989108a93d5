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
