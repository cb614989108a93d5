#!/usr/bin/env bash
# clang with its libFuzzer runtime, for the enforcement library's fuzz targets
# (tests/native/fuzz: tests/native/test_fuzz.py runs each for a bounded time). Without clang
# that test skips with the reason, so a failed install only warns.
set -euo pipefail
if command -v clang >/dev/null && echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { (void)d; (void)n; return 0; }' \
        | clang -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends clang libclang-rt-dev >/dev/null; }; then
    echo "warning: could not install clang and libclang-rt-dev; the fuzz test will skip" >&2
fi
