"""Build the libFuzzer targets in fuzz_targets.c and run each briefly; print executions and
findings. Needs clang with libFuzzer (Debian: clang + libclang-rt-dev); says so and exits 0
otherwise. The corpus and any crash inputs go to a temporary folder (printed), never into
the repository; the folder is removed when nothing was found.
Run: python tests/native/fuzz/run_fuzz.py [seconds per target=30]
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
NATIVE = HERE.parents[2] / "native"
FLAGS = ["-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all",
         "-DGPUGOV_TEST_HOOKS", f"-I{NATIVE}"]
TARGETS = {"config": ["-max_len=4096"], "region": ["-max_len=120000"]}


def find_clang() -> str | None:
    for name in ("clang", "clang-16", "clang-15", "clang-14"):
        if shutil.which(name):
            return name
    return None


def main(seconds: int = 30) -> int:
    clang = find_clang()
    if not clang:
        print("no clang on PATH: cannot build the libFuzzer targets (install clang and its "
              "libFuzzer runtime, e.g. Debian's clang and libclang-rt-14-dev)")
        return 0
    work = Path(tempfile.mkdtemp(prefix="gpugov-fuzz-"))
    print(f"{'target':<8}{'executions':>12}{'seconds':>9}{'findings':>10}   work folder {work}")
    found = 0
    for name, extra in TARGETS.items():
        exe = work / f"fuzz_{name}"
        p = subprocess.run([clang, *FLAGS, f"-DFUZZ_{name.upper()}", "-o", str(exe),
                            str(HERE / "fuzz_targets.c"), "-lpthread"], capture_output=True,
                           text=True)
        if p.returncode:
            print(f"{name:<8} build failed (libFuzzer runtime missing?):\n{p.stderr[-2000:]}")
            return 1
        corpus = work / f"corpus_{name}"
        corpus.mkdir()
        run = subprocess.run([str(exe), f"-max_total_time={seconds}", *extra,
                              f"-artifact_prefix={work}/{name}-", str(corpus)],
                             capture_output=True, text=True, cwd=work)
        m = re.search(r"Done (\d+) runs in (\d+) second", run.stderr)
        crashes = list(work.glob(f"{name}-*"))
        found += len(crashes) + (0 if m else 1)
        runs, secs = (m.group(1), m.group(2)) if m else ("?", "?")
        print(f"{name:<8}{runs:>12}{secs:>9}{len(crashes) if m else 'crash':>10}")
        if not m:
            print(run.stderr[-3000:])
    if not found:
        shutil.rmtree(work)  # nothing to inspect
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 30))
