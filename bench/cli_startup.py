"""How long `gpugov` takes to start: wall and CPU time (medians of fresh processes) of
`gpugov --version`, `gpugov --help`, `gpugov experiment fgd --help` and the FGD study's whole
command, and which heavy packages each one imported.

Usage: python bench/cli_startup.py [--repeat 11] [--whole-repeat 3] [--tree DIR ...]
                                   [--trace-dir DIR] [--no-pin] [--no-whole]

Each command runs in a fresh process exactly as the `gpugov` console script runs it (the
entry point named in the tree's pyproject.toml, with the tree's src/ first on the path), pinned
to one core with `taskset -c 0` when taskset exists. Python's bytecode is kept in a temporary
folder warmed by one uncounted run, as an installed package has it. Several `--tree` folders
(e.g. a `git archive` of an older commit) are measured command by command, their runs
alternating, so their ratios come from the same minutes. Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / ".." / "shared" / "traces" / "alibaba-gpu-v2023"
#: top-level packages whose import is worth naming (each costs tens of milliseconds or more)
HEAVY = ("typer", "rich", "pydantic", "numpy", "PIL", "matplotlib", "yaml", "kubernetes_asyncio")


def console_script(tree: Path) -> str:
    """What the `gpugov` console script of `tree` runs, as a `python -c` program."""
    meta = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    module, _, func = meta["project"]["scripts"]["gpugov"].partition(":")
    return (f"import sys; from {module} import {func}; sys.argv[0] = 'gpugov'; "
            f"sys.exit({func}())")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh process."""
    c0, t0 = _cpu(), time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    return time.perf_counter() - t0, _cpu() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=11, help="runs per start-up command")
    ap.add_argument("--whole-repeat", type=int, default=3, help="runs of the whole command")
    ap.add_argument("--tree", type=Path, action="append",
                    help="a source tree (pyproject.toml and src/); repeatable; default: this one")
    ap.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--no-pin", action="store_true", help="do not pin to one core")
    ap.add_argument("--no-whole", action="store_true", help="skip the FGD whole command")
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [REPO])]
    taskset = None if args.no_pin else shutil.which("taskset")
    pin = [taskset, "-c", "0"] if taskset else []
    commands: list[tuple[str, list[str], int]] = [
        ("gpugov --version", ["--version"], args.repeat),
        ("gpugov --help", ["--help"], args.repeat),
        ("gpugov experiment fgd --help", ["experiment", "fgd", "--help"], args.repeat),
    ]
    whole = ["experiment", "fgd", "--trace-dir", str(args.trace_dir), "--workload",
             "openb_pod_list_default", "--policy", "fgd", "--seeds", "42"]
    if not args.no_whole:
        if not (args.trace_dir / "openb_node_list_gpu_node.csv").exists():
            sys.exit(f"no trace at {args.trace_dir} (give --trace-dir, or --no-whole)")
        commands.append(("FGD whole command (fgd, seed 42)", whole, args.whole_repeat))
    with tempfile.TemporaryDirectory() as tmp:
        envs = {}
        for i, tree in enumerate(trees):
            env = dict(os.environ, PYTHONPATH=str(tree / "src"), COLUMNS="80")
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / f"pycache{i}")
            envs[tree] = env
        print(f"fresh processes, {'pinned to core 0' if pin else 'not pinned'}, bytecode "
              f"cached; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"{'command':<36}{'tree':<14}{'wall (median)':>14}{'CPU (median)':>14}  runs")
        runs = 0
        for label, argv, repeat in commands:
            walls: dict[Path, list[float]] = {tree: [] for tree in trees}
            cpus: dict[Path, list[float]] = {tree: [] for tree in trees}
            for r in range(-1, repeat):  # -1: warm the bytecode cache, not counted
                for tree in trees:  # the trees alternate: a load change hits them alike
                    runs += 1
                    out = ["--out", str(Path(tmp) / f"out{runs}")] if argv is whole else []
                    wall, cpu = _run([*pin, sys.executable, "-c", console_script(tree), *argv,
                                      *out], envs[tree])
                    if r >= 0:
                        walls[tree].append(wall)
                        cpus[tree].append(cpu)
            for tree in trees:
                name = tree.name if len(trees) > 1 else "this"
                print(f"{label:<36}{name[:13]:<14}{statistics.median(walls[tree]):>12.3f} s"
                      f"{statistics.median(cpus[tree]):>12.3f} s  {repeat}")
        print("heavy packages imported (their modules' own import time, one run each):")
        for label, argv, _ in commands:
            for tree in trees:
                out = ["--out", str(Path(tmp) / f"imports{runs}")] if argv is whole else []
                runs += 1
                cmd = [*pin, sys.executable, "-X", "importtime", "-c", console_script(tree),
                       *argv, *out]
                proc = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, env=envs[tree])
                name = tree.name if len(trees) > 1 else "this"
                print(f"  {label:<34}{name[:13]:<14}{_heavy(proc.stderr)}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def _heavy(stderr: str) -> str:
    """Milliseconds spent importing each heavy package, from `-X importtime` output: the sum
    of its modules' own times, wherever they were imported from (typer imports rich inside
    its help formatter, so a cumulative number would name typer)."""
    found: dict[str, float] = {}
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            own, _, name = line.removeprefix("import time:").split("|")
            package = name.strip().split(".")[0]
            if own.strip().isdigit() and package in HEAVY:
                found[package] = found.get(package, 0.0) + int(own) / 1000
    return ", ".join(f"{n} {ms:.0f} ms" for n, ms in found.items()) or "none of them"


if __name__ == "__main__":
    main()
