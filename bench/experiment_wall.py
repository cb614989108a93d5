"""Wall time of the whole `gpugov experiment fgd` command as a user sees it, and where it goes.

Usage: python bench/experiment_wall.py [--trace-dir DIR] [--workload NAME] [--policy fgd]
                                       [--seeds 42] [--repeat 5] [--no-pin] [--no-bytecode]
                                       [--both-paths]

Runs the whole command (process start-up, imports, trace loading, the experiment, the CSVs,
PNG and summary.json, the printed table) `--repeat` times, each in a fresh process pinned to
one core with `taskset -c 0` when taskset exists, and prints the median wall time. Then it
runs the same phases `--repeat` times in fresh processes that time each one (the functions
the command calls, in its order) and prints their medians. Numbers only: nothing is asserted.

Python's compiled bytecode is kept in a temporary folder (PYTHONPYCACHEPREFIX, warmed by one
uncounted run), as an installed package has it; `--no-bytecode` leaves the environment as it
is (with PYTHONDONTWRITEBYTECODE set, every run compiles gpugov's modules from source again).
`--both-paths` also runs the whole command with FGD's C path switched off
(GPUGOV_PLACEMENT_NATIVE=0), alternated with the default runs, and prints both medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / \
    "alibaba-gpu-v2023"

#: what the `gpugov` console script does (independent of which `gpugov` is on PATH)
CLI = "import sys; from gpugov.__main__ import main; sys.argv[0] = 'gpugov'; sys.exit(main())"

#: one fresh process timing the command's phases; prints one JSON line (seconds per phase)
PHASES = r"""
import json, sys, time
from pathlib import Path
t = {}
c = time.perf_counter()
import gpugov.cli as cli
import gpugov.cli.study  # what `gpugov experiment ...` imports of the CLI (typer included)
t["cli import"] = time.perf_counter() - c
trace, workload, policy, seeds, out = sys.argv[1:6]
c = time.perf_counter()
pod_file, workload = cli._workload_file(Path(trace), workload)
nodes, pods = cli._load_study_inputs(Path(trace) / cli.DEFAULT_NODE_LIST, pod_file)
t["trace load (with imports)"] = time.perf_counter() - c
c = time.perf_counter()
from gpugov.sim.study import parse_seeds, resolve_policies, run_study
result = run_study(nodes, pods, workload, resolve_policies([policy]), parse_seeds(seeds))
t["experiment (with imports)"] = time.perf_counter() - c
c = time.perf_counter()
from gpugov.sim import report
t["outputs: imports"] = time.perf_counter() - c
c = time.perf_counter()
files = {name: report._curves_csv(result, kind) for kind, name in report.CURVE_FILES.items()}
files[report.SUMMARY_FILE] = report._summary_json(result)
t["CSV + summary.json"] = time.perf_counter() - c
c = time.perf_counter()
files[report.PLOT_FILE] = report._plot_png(result, {})
t["PNG: draw + encode"] = time.perf_counter() - c
c = time.perf_counter()
report.write_folder(Path(out), files)
t["write files"] = time.perf_counter() - c
print(json.dumps(t))
"""


def _pin(cmd: list[str], pin: bool) -> list[str]:
    taskset = shutil.which("taskset") if pin else None
    return [taskset, "-c", "0", *cmd] if taskset else cmd


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _wall(cmd: list[str], env: dict[str, str], cpu: list[float] | None = None) -> float:
    """Wall seconds of `cmd`; its CPU seconds (user + system) are appended to `cpu`."""
    c0, t0 = _cpu(), time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    wall = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(_cpu() - c0)
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--workload", default="openb_pod_list_default")
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-pin", action="store_true", help="do not pin to one core")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="leave the environment's bytecode setting as it is")
    ap.add_argument("--both-paths", action="store_true",
                    help="also time the command with FGD's C path off, runs alternated")
    args = ap.parse_args()
    if not (args.trace_dir / "openb_node_list_gpu_node.csv").exists():
        sys.exit(f"no trace at {args.trace_dir} (give --trace-dir)")
    pin = not args.no_pin
    pinned = pin and shutil.which("taskset") is not None
    with tempfile.TemporaryDirectory() as tmp:
        command = ["experiment", "fgd", "--trace-dir", str(args.trace_dir), "--workload",
                   args.workload, "--policy", args.policy, "--seeds", args.seeds]
        env = dict(os.environ)
        if not args.no_bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
            _wall(_pin([sys.executable, "-c", CLI, *command, "--out", str(Path(tmp) / "warm")],
                       pin), env)
        walls: list[float] = []
        cpus: list[float] = []
        bare: list[float] = []
        phases: list[dict[str, float]] = []
        python_walls: list[float] = []
        python_env = {**env, "GPUGOV_PLACEMENT_NATIVE": "0"}
        for i in range(args.repeat):
            out = Path(tmp) / f"run{i}"
            walls.append(_wall(_pin([sys.executable, "-c", CLI, *command, "--out", str(out)],
                                    pin), env, cpus))
            if args.both_paths:
                python_walls.append(_wall(_pin([sys.executable, "-c", CLI, *command, "--out",
                                                str(out) + "py"], pin), python_env))
            bare.append(_wall(_pin([sys.executable, "-c", "pass"], pin), env))
            proc = subprocess.run(
                _pin([sys.executable, "-c", PHASES, str(args.trace_dir), args.workload,
                      args.policy, args.seeds, str(Path(tmp) / f"phases{i}")], pin),
                check=True, capture_output=True, text=True, env=env)
            phases.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"gpugov {' '.join(command)} --out DIR")
    print(f"{args.repeat} fresh processes, {'pinned to core 0' if pinned else 'not pinned'}, "
          + ("bytecode as the environment has it" if args.no_bytecode
             else "bytecode cached (as installed)"))
    print(f"{'whole command (median wall)':<34}{statistics.median(walls):>8.3f} s   "
          f"(min {min(walls):.3f}, max {max(walls):.3f})")
    print(f"{'whole command (median CPU time)':<34}{statistics.median(cpus):>8.3f} s   "
          f"(user + system; load average now {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores: wall time above CPU time = waiting for a core)")
    if python_walls:
        print(f"{'  the same, C path off (median)':<34}{statistics.median(python_walls):>8.3f} s"
              f"   (min {min(python_walls):.3f}; GPUGOV_PLACEMENT_NATIVE=0, alternated)")
    print("breakdown (medians, separate fresh processes):")
    print(f"  {'interpreter start-up':<32}{statistics.median(bare):>8.3f} s")
    total = statistics.median(bare)
    for name in phases[0]:
        value = statistics.median(p[name] for p in phases)
        total += value
        print(f"  {name:<32}{value:>8.3f} s")
    print(f"  {'sum of the phases':<32}{total:>8.3f} s   (the rest of the whole command: "
          "argument parsing, progress bar, table)")


if __name__ == "__main__":
    main()
