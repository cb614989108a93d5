"""Nanoseconds libgpugov adds per cuMemAlloc, per unthrottled and per throttled cuLaunchKernel.

Builds the library and the fake driver (tests/native/native_build.py), then times a
tight loop of the same calls with and without LD_PRELOAD. The fake driver's own cost
is in both runs, so the difference is the interception. Runs are interleaved for a number
of rounds and the fastest of each is kept, so a loaded host (other work competing for the
cores) inflates them less. The throttled row runs under a 99 % core limit with kernels of no
duration, so the throttle never waits: it is the cost of its bookkeeping (timing each launch
with two driver events on the fake) per launch. With a second library (e.g. an older build)
it is measured in the same rounds. Prints numbers, asserts nothing.
Run: python bench/native_overhead.py [iterations=200000] [rounds=5] [other libgpugov.so]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "native"))
from native_build import build_all, compiler  # noqa: E402

LOOP = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef int (*alloc_t)(unsigned long long *, size_t);
typedef int (*free_t)(unsigned long long);
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec * 1e9 + t.tv_nsec; }
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    void *cu = dlopen("libcuda.so.1", RTLD_NOW);
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cu, "cuInit");
    int (*retain)(void **, int) = (int (*)(void **, int))dlsym(cu, "cuDevicePrimaryCtxRetain");
    int (*setcur)(void *) = (int (*)(void *))dlsym(cu, "cuCtxSetCurrent");
    alloc_t alloc = (alloc_t)dlsym(cu, "cuMemAlloc_v2");
    free_t fr = (free_t)dlsym(cu, "cuMemFree_v2");
    launch_t launch = (launch_t)dlsym(cu, "cuLaunchKernel");
    void *(*mk)(unsigned long long) =
        (void *(*)(unsigned long long))dlsym(cu, "fakegpu_make_function");
    void *ctx; init(0); retain(&ctx, 0); setcur(ctx);
    void *f = mk(0);
    unsigned long long p;
    double best_a = 1e30, best_l = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (long i = 0; i < n; i++) { alloc(&p, 4096); fr(p); }
        double t1 = now();
        for (long i = 0; i < n; i++) launch(f, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
        double t2 = now();
        if ((t1 - t0) / n < best_a) best_a = (t1 - t0) / n;
        if ((t2 - t1) / n < best_l) best_l = (t2 - t1) / n;
    }
    printf("%.1f %.1f\n", best_a, best_l);
    return 0;
}
"""


def main(iterations: int = 200_000, rounds: int = 5, other: str | None = None) -> None:
    """Print a small table: direct vs intercepted, ns per call (fastest of the rounds)."""
    if compiler() is None:
        sys.exit("needs a C compiler (cc)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        build = build_all(out, test_hooks=False)
        src = out / "loop.c"
        src.write_text(LOOP)
        subprocess.run([compiler(), "-O2", "-o", str(out / "loop"), str(src), "-ldl"], check=True)

        def run(preload: str | None) -> tuple[float, float, float]:
            res = []
            for extra in ({}, {"GPUGOV_CORE_LIMIT": "99"}):
                env = build.env({"GPUGOV_SCRUB": "0", "GPUGOV_LOG_LEVEL": "error", **extra},
                                preload=preload is not None)
                if preload:
                    env["LD_PRELOAD"] = preload
                p = subprocess.run([str(out / "loop"), str(iterations)], env=env, check=True,
                                   capture_output=True, text=True)
                res.append(p.stdout.split())
            return float(res[0][0]), float(res[0][1]), float(res[1][1])

        libs: dict[str, str | None] = {"direct": None, "gpugov": build.preload}
        if other:
            libs["other"] = other
        best: dict[str, list[float]] = {k: [float("inf")] * 3 for k in libs}
        for _ in range(rounds):
            for name, lib in libs.items():
                best[name] = [min(a, b) for a, b in zip(best[name], run(lib), strict=True)]
    cols = [k for k in libs if k != "direct"]
    head = "".join(f"{k + ' ns':>12}{'added ns':>10}" for k in cols)
    print(f"{'call':<32}{'direct ns':>12}{head}")
    names = ["cuMemAlloc+cuMemFree (pair)", "cuLaunchKernel (unthrottled)",
             "cuLaunchKernel (throttled, 99 %)"]
    for i, name in enumerate(names):
        d = best["direct"][i]
        row = "".join(f"{best[k][i]:>12.1f}{best[k][i] - d:>10.1f}" for k in cols)
        print(f"{name:<32}{d:>12.1f}{row}")
    print(f"fastest of {rounds} interleaved rounds x best of 5 loops x {iterations} calls; "
          "scrub off; fake driver on host memory")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000,
         int(sys.argv[2]) if len(sys.argv) > 2 else 5,
         sys.argv[3] if len(sys.argv) > 3 else None)
