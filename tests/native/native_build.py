"""Compile the enforcement library, the fake driver and the test clients for tests/bench."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NATIVE = REPO / "native"
FAKE = REPO / "tests" / "fake_cuda"
WARN = ["-Wall", "-Wextra", "-Werror"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]


@dataclass(frozen=True)
class Build:
    """Paths of one build; `preload` is the LD_PRELOAD value to use."""

    dir: Path
    lib: Path
    drvtest: Path
    preload: str
    sanitized: bool

    def env(self, extra: dict[str, str] | None = None, preload: bool = True) -> dict[str, str]:
        """Environment for running a client against the fake driver (and the library)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUGOV_", "FAKECUDA_"))}
        env["LD_LIBRARY_PATH"] = str(self.dir)
        if preload:
            env["LD_PRELOAD"] = self.preload
        if self.sanitized:
            env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0:exitcode=66"
            env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1:exitcode=67"
        env.update(extra or {})
        return env


def compiler() -> str | None:
    """The C compiler to use, or None when there is none (tests then skip)."""
    return shutil.which(os.environ.get("CC", "cc"))


def build_all(out: Path, sanitized: bool = False, test_hooks: bool = True) -> Build:
    """Build everything into out/ in parallel; raise CalledProcessError with cc's output."""
    cc = compiler()
    assert cc, "no C compiler"
    out.mkdir(parents=True, exist_ok=True)
    opt = ["-O1", "-g", *SANITIZE] if sanitized else ["-O2"]
    shared = ["-fPIC", "-shared", "-fvisibility=hidden"]
    lib_defs = ["-DGPUGOV_TEST_HOOKS"] if test_hooks else []
    jobs = [
        [cc, *WARN, *opt, *shared, *lib_defs, "-o", str(out / "libgpugov.so"),
         *sorted(map(str, NATIVE.glob("*.c"))), "-ldl", "-lpthread"],
        [cc, *WARN, *opt, *shared, "-o", str(out / "libcuda.so.1"), str(FAKE / "fake_cuda.c"),
         "-lpthread"],
        [cc, *WARN, *opt, *shared, "-o", str(out / "libnvidia-ml.so.1"), str(FAKE / "fake_nvml.c"),
         "-ldl"],
    ]

    def run(cmd: list[str]) -> None:
        subprocess.run(cmd, check=True, capture_output=True, text=True)

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(run, jobs))
    run([cc, *WARN, *opt, "-o", str(out / "drvtest"), str(FAKE / "drvtest.c"), f"-L{out}",
         "-l:libcuda.so.1", f"-Wl,-rpath,{out}", "-ldl"])
    # GPUGOV_TEST_LIBRARY runs the tests against another build of the library (e.g. an older
    # commit's, to see a regression test fail before its fix); the fake driver stays current.
    preload = os.environ.get("GPUGOV_TEST_LIBRARY") or str(out / "libgpugov.so")
    if sanitized:  # the ASan runtime must come first in the initial library list
        asan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                              text=True, check=True).stdout.strip()
        preload = f"{asan} {preload}"
    return Build(out, out / "libgpugov.so", out / "drvtest", preload, sanitized)


@dataclass
class Result:
    """Parsed output of one drvtest run: one dict per command line, plus stderr."""

    lines: list[dict[str, str]]
    stderr: str
    returncode: int

    def find(self, cmd: str, n: int = 0) -> dict[str, str]:
        return [x for x in self.lines if x["cmd"] == cmd][n]

    def rcs(self, cmd: str) -> list[int]:
        return [int(x["rc"]) for x in self.lines if x["cmd"] == cmd]


def parse(stdout: str) -> list[dict[str, str]]:
    out = []
    for line in stdout.splitlines():
        cmd, _, rest = line.partition(" ")
        fields = dict(re.findall(r"(\w+)=(-?[\w.]+)", rest))
        out.append({"cmd": cmd, **fields})
    return out


def drv(build: Build, mode: str, *cmds: str, env: dict[str, str] | None = None,
        preload: bool = True, timeout: float = 60) -> Result:
    """Run drvtest with the library preloaded; commands as in tests/fake_cuda/drvtest.c."""
    p = subprocess.run([str(build.drvtest), mode, *cmds], env=build.env(env, preload),
                       capture_output=True, text=True, timeout=timeout)
    return Result(parse(p.stdout), p.stderr, p.returncode)
