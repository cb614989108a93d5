"""Whole-command time of the one-shot commands at 1x and 4x input (issue 23: every command
that can run past 2 s shows progress, and its cost is linear in its input).

Builds the inputs in a temporary folder from the openb trace (pods and nodes repeated with
new names) and a generated config of N queues and N tenants, then runs each command as a
user does (`python -m gpugov ...`, stdout to /dev/null, stderr a pipe), the sizes
alternating `--runs` times, and prints the median wall time per size and the ratio. A ratio
near 4 (start-up of ~0.5 s makes it smaller) is linear; near 16 would be quadratic.

    python bench/cli_scaling.py [--trace DIR] [--runs 3] [--only openb-jobs,plan-mig]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / ".." / "shared" / "traces" / "alibaba-gpu-v2023"


def repeat_csv(src: Path, dst: Path, times: int) -> None:
    """`src` `times` over, every row after the first copy renamed NAME-rK (names unique)."""
    header, *rows = src.read_text().splitlines()
    with dst.open("w") as f:
        f.write(header + "\n")
        for r in range(times):
            for row in rows:
                name, rest = row.split(",", 1)
                f.write(f"{name}-r{r}," if r else f"{name},")
                f.write(rest + "\n")


def config(dst: Path, queues: int) -> None:
    lines = ["queues:", f"  - {{name: root, quota: {{gpu: {2 * queues}}}}}"]
    lines += [f"  - {{name: q{i}, parent: root, quota: {{gpu: 2}}}}" for i in range(queues)]
    lines += ["tenants:"] + [f"  - {{namespace: ns{i}, queue: q{i}}}" for i in range(queues)]
    dst.write_text("\n".join(lines) + "\n")


def snapshot(src: Path, dst: Path, times: int) -> None:
    """A replay's snapshot.json with its jobs repeated (what `explain --run` reads)."""
    doc = json.loads(src.read_text())
    jobs = {f"{n}-r{r}" if r else n: v for r in range(times) for n, v in doc["jobs"].items()}
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps({**doc, "jobs": jobs}))


def timed(args: list[str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpugov", *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"gpugov {' '.join(args)} failed: {proc.stderr[-2000:]}")
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated case names")
    a = ap.parse_args()
    pods_csv = a.trace / "openb_pod_list_default.csv"
    nodes_csv = a.trace / "openb_node_list_gpu_node.csv"
    with tempfile.TemporaryDirectory(prefix="gpugov-cli-scaling-") as tmp:
        d = Path(tmp)
        for k in (1, 4):
            repeat_csv(pods_csv, d / f"pods{k}.csv", k)
            repeat_csv(nodes_csv, d / f"nodes{k}.csv", k)
            config(d / f"config{k}.yaml", 1000 * k)
        # a real replay's snapshot: the 1x trace through docs/openb-queues.yaml
        subprocess.run([sys.executable, "-m", "gpugov", "openb-jobs", str(d / "pods1.csv"),
                        "--out", str(d / "jobs1.csv")], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, "-m", "gpugov", "replay", "--nodes",
                        str(d / "nodes1.csv"), "--jobs", str(d / "jobs1.csv"), "--queues",
                        str(REPO / "docs" / "openb-queues.yaml"), "--out", str(d / "run1"),
                        "--no-plots"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        snapshot(d / "run1" / "snapshot.json", d / "run4" / "snapshot.json", 4)
        for k in (1, 4):
            subprocess.run([sys.executable, "-m", "gpugov", "crd", "convert",
                            str(d / f"config{k}.yaml")], check=True,
                           stdout=(d / f"objects{k}.yaml").open("w"),
                           stderr=subprocess.DEVNULL)
        cases: dict[str, tuple[str, Callable[[int], list[str]]]] = {
            "openb-jobs": ("pods", lambda k: ["openb-jobs", str(d / f"pods{k}.csv"), "--out",
                                              str(d / f"out-jobs{k}.csv")]),
            "plan-mig": ("GPUs", lambda k: ["plan", "mig", "--nodes", str(d / f"nodes{k}.csv"),
                                            "--pods", str(d / "pods1.csv")]),
            "plan-mig-pods": ("pods", lambda k: ["plan", "mig", "--nodes",
                                                 str(d / "nodes1.csv"), "--pods",
                                                 str(d / f"pods{k}.csv")]),
            "crd-convert": ("queues+tenants", lambda k: ["crd", "convert",
                                                         str(d / f"config{k}.yaml")]),
            "crd-convert-back": ("objects", lambda k: ["crd", "convert", "--to", "config",
                                                       str(d / f"objects{k}.yaml")]),
            "explain-run": ("jobs", lambda k: ["explain", "openb-pod-0000", "--run",
                                               str(d / f"run{k}")]),
        }
        only = set(filter(None, a.only.split(",")))
        print(f"{'command':18} {'input':15} {'1x s':>7} {'4x s':>7} {'4x/1x':>6}")
        for name, (unit, args) in cases.items():
            if only and name not in only:
                continue
            times: dict[int, list[float]] = {1: [], 4: []}
            for _ in range(a.runs):
                for k in (1, 4):
                    times[k].append(timed(args(k)))
            one, four = statistics.median(times[1]), statistics.median(times[4])
            print(f"{name:18} {unit:15} {one:7.2f} {four:7.2f} {four / one:6.2f}", flush=True)


if __name__ == "__main__":
    main()
