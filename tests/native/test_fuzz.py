"""The libFuzzer targets (tests/native/fuzz) run in CI for a bounded time each: the
configuration parser and the region loader must not crash, leak out of bounds or trip UBSan
on any input. Needs clang with its libFuzzer runtime (.ci/setup.d/40-clang.sh installs it);
skips with the reason otherwise. The bound is a time budget for the fuzzer, not an assertion
on speed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).parent / "fuzz"
SECONDS_PER_TARGET = 10


def _libfuzzer() -> bool:
    sys.path.insert(0, str(FUZZ))
    from run_fuzz import find_clang

    clang = find_clang()
    if not clang:
        return False
    probe = "int LLVMFuzzerTestOneInput(const char *d, long n) { (void)d; (void)n; return 0; }"
    p = subprocess.run([clang, "-x", "c", "-fsanitize=fuzzer", "-o", "/dev/null", "-"],
                       input=probe, capture_output=True, text=True)
    return p.returncode == 0


@pytest.mark.skipif(not _libfuzzer(), reason="no clang with libFuzzer (.ci/setup.d/40-clang.sh)")
def test_fuzz_targets_find_nothing():
    p = subprocess.run([sys.executable, str(FUZZ / "run_fuzz.py"), str(SECONDS_PER_TARGET)],
                       capture_output=True, text=True, timeout=SECONDS_PER_TARGET * 2 * 10 + 300)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [ln.split() for ln in p.stdout.splitlines()[1:]
            if ln.split()[:1] in (["config"], ["region"])]
    assert [r[0] for r in rows] == ["config", "region"] and all(r[3] == "0" for r in rows), p.stdout
