"""Contention on one shared GPU: does a Guaranteed pod get its compute share S?

On the fake driver with a shared timeline (tests/fake_cuda/fake_cuda.c,
FAKECUDA_SHARED_TIMELINE: the device time-slices between the processes that have work
queued, as the driver does), one Guaranteed pod launches 1 ms kernels flat out (it wants more
than S) next to 1, 3 or 7 best-effort pods launching 2 ms kernels flat out. Three setups:
- plain: time-slicing, no library (the driver shares the device's time between processes);
- soft: soft slices without priority: the library caps the Guaranteed pod at S and each
  neighbour at (100 - S) / n percent;
- priority: gpugov's QoS floor: the Guaranteed pod has priority 0 and its cap S, the
  neighbours priority 1 and no compute cap (time-slice replicas / memory-only slices); each
  pod has its board file in the device's QoS folder, as the device plugin mounts it
  (native/qos.c).
Measured by the fake driver's own accounting of each process's device time, sampled every
WINDOW seconds: the Guaranteed pod's share per window as a fraction of S (p50, and p99 = the
share 99 % of windows reach), the device's utilisation (all pods, mean over windows) while
everyone has work, and the utilisation while the Guaranteed pod is idle (registered, 1 % busy:
work conservation), and "G waits": how long other pods' work ran while the Guaranteed pod had
work queued, as a fraction of the device time it got (what it lost to time-slicing, and was
charged for). Asserts nothing; prints a table.

Run: python bench/contention.py [--seconds 4] [--window 0.25] [--share 50]
     [--neighbours 1,3,7] [--setups plain,soft,priority]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "native"))
from native_build import Build, build_all  # noqa: E402
from timeline import Timeline  # noqa: E402

G_US, BE_US = 1000, 2000
WARMUP = 0.6


def pod_env(setup: str, tmp: Path, client: int, share: int, neighbours: int,
            ) -> tuple[dict[str, str], bool]:
    """Environment of pod `client` (0 = the Guaranteed one) and whether it gets the library."""
    env = {"GPUGOV_SHARED_REGION": str(tmp / f"region-{client}")}
    if setup == "plain":
        return env, False
    if setup == "soft":
        limit = share if client == 0 else max(1, (100 - share) // neighbours)
        env["GPUGOV_CORE_LIMIT"] = str(limit)
        return env, True
    # the device plugin's layout: qos/<device index>/<pod>, one file per pod
    (tmp / "qos" / "0" / f"pod-{client}").touch()
    env.update(GPUGOV_QOS_DIR=str(tmp / "qos"), GPUGOV_QOS_SELF=f"pod-{client}")
    env["GPUGOV_MEMORY_LIMIT"] = "256Mi"
    if client == 0:
        env.update(GPUGOV_TASK_PRIORITY="0", GPUGOV_CORE_LIMIT=str(share))
    else:
        env["GPUGOV_TASK_PRIORITY"] = "1"
    return env, True


def run(build: Build, setup: str, neighbours: int, share: int, seconds: float, window: float,
        g_idle: bool) -> tuple[list[float], list[float], float]:
    """One run: per-window Guaranteed share (fraction of the device) and utilisation, and
    the Guaranteed pod's waited time over its device time."""
    with tempfile.TemporaryDirectory(prefix="gg-contention-") as d:
        tmp = Path(d)
        (tmp / "qos" / "0").mkdir(parents=True)
        tl = Timeline(build, tmp / "timeline")
        total = WARMUP + seconds + 0.3
        procs = []
        for client in range(neighbours + 1):
            env, lib = pod_env(setup, tmp, client, share, neighbours)
            if client == 0:
                load = f"load:{G_US}:{total}:10:990" if g_idle else f"load:{G_US}:{total}"
            else:
                load = f"load:{BE_US}:{total}"
            procs.append(tl.pod(build, client, load, env, library=lib))
        time.sleep(WARMUP)
        waited0, (_, done0) = tl.waited(), tl.sample()
        windows = tl.windows(seconds, window)
        waited1, (_, done1) = tl.waited(), tl.sample()
        for p in procs:
            _, err = p.communicate(timeout=60)
            if p.returncode:
                raise RuntimeError(f"a pod exited {p.returncode}: {err[-500:]}")
        got = done1.get(0, 0) - done0.get(0, 0)
        waited = (waited1.get(0, 0) - waited0.get(0, 0)) / got if got else 0.0
        return [w[1].get(0, 0.0) for w in windows], [w[0] for w in windows], waited


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--window", type=float, default=0.25)
    ap.add_argument("--share", type=int, default=50, help="the Guaranteed pod's share S, percent")
    ap.add_argument("--neighbours", default="1,3,7")
    ap.add_argument("--setups", default="plain,soft,priority")
    args = ap.parse_args()
    build = build_all(Path(tempfile.mkdtemp(prefix="gg-contention-build-")), test_hooks=False)
    s = args.share / 100
    print(f"Guaranteed pod: S = {args.share} %, {G_US} us kernels flat out; best-effort pods: "
          f"{BE_US} us kernels flat out; {args.seconds} s in {args.window} s windows")
    print(f"{'setup':<9} {'BE pods':>7} {'G p50/S':>8} {'G p99/S':>8} {'util':>6} "
          f"{'util, G idle':>12} {'G waits':>7}")
    for n in [int(x) for x in args.neighbours.split(",")]:
        for setup in args.setups.split(","):
            shares, utils, waited = run(build, setup, n, args.share, args.seconds, args.window,
                                        False)
            _, idle, _ = run(build, setup, n, args.share, args.seconds / 2, args.window, True)
            print(f"{setup:<9} {n:>7} {pct(shares, 0.5) / s:>8.3f} {pct(shares, 0.01) / s:>8.3f} "
                  f"{statistics.mean(utils):>6.1%} {statistics.mean(idle):>12.1%} "
                  f"{waited:>7.1%}", flush=True)


if __name__ == "__main__":
    main()
