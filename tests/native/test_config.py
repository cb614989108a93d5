"""Malformed configuration refuses GPU use with a message naming the variable (fail closed)."""

from __future__ import annotations

import pytest
from native_build import drv

BAD = [
    ("GPUGOV_MEMORY_LIMIT", "12X"),
    ("GPUGOV_MEMORY_LIMIT", "0"),
    ("GPUGOV_MEMORY_LIMIT", "-5Mi"),
    ("GPUGOV_MEMORY_LIMIT", "1.5Gi"),
    ("GPUGOV_MEMORY_LIMIT", "99999999999999999999"),
    ("GPUGOV_MEMORY_LIMIT", "3M"),
    ("GPUGOV_MEMORY_LIMIT_x", "1Gi"),
    ("GPUGOV_MEMORY_LIMIT_99", "1Gi"),
    ("GPUGOV_CORE_LIMIT", "0"),
    ("GPUGOV_CORE_LIMIT", "101"),
    ("GPUGOV_CORE_LIMIT", "30%"),
    ("GPUGOV_CORE_LIMIT_1", ""),
    ("GPUGOV_SCRUB", "yes"),
    ("GPUGOV_LOG_LEVEL", "loud"),
    ("GPUGOV_SHARED_REGION", "relative/path"),
]


@pytest.mark.parametrize("name,value", BAD)
def test_malformed_value_refuses_gpu_use(build, name, value):
    r = drv(build, "procaddr", "ctx:0", "alloc:1Mi", env={name: value})
    assert r.rcs("init") == [800]  # CUDA_ERROR_NOT_PERMITTED, before any GPU work
    assert f"refusing GPU use: invalid configuration: {name}" in r.stderr


def test_every_intercepted_call_is_refused(build):
    r = drv(build, "direct", "ctx:0", env={"GPUGOV_MEMORY_LIMIT": "lots"}, preload=True)
    assert r.rcs("init") == [800]
    r = drv(build, "dlsym", "nvml", env={"GPUGOV_MEMORY_LIMIT": "lots"})
    assert r.rcs("init") == [800]


@pytest.mark.parametrize("value,limit", [("1048576", 1 << 20), ("4Ki", 4 << 10),
                                         ("3Mi", 3 << 20), ("2Gi", 2 << 30)])
def test_valid_sizes(build, value, limit):
    env = {"GPUGOV_MEMORY_LIMIT": value, "FAKECUDA_MEM_BYTES": str(4 << 30)}
    r = drv(build, "direct", "ctx:0", "totalmem", env=env)
    assert int(r.find("totalmem")["total"]) == limit


def test_unrelated_gpugov_variables_are_ignored(build):
    r = drv(build, "direct", "ctx:0", "alloc:1Mi", env={"GPUGOV_CONFIG": "whatever"})
    assert r.rcs("alloc") == [0]
