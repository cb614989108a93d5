"""`gpugov simulate` and `gpugov experiment fgd`: the placement study."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from gpugov.cli._app import app
from gpugov.cli._common import _check_out_folder, _console, _fail, _renamed, _warn

experiment_app = typer.Typer(help="Reproduce published experiments.", no_args_is_help=True)
app.add_typer(experiment_app, name="experiment")

DEFAULT_NODE_LIST = "openb_node_list_gpu_node.csv"


def _run_and_report(nodes, pods, workload: str, policies: list[str], seeds: str, tune: float,
                    out: Path, workers: int, targets: Path | None,
                    inputs: list[Path | None]) -> None:
    from gpugov.sim.experiment import MAX_ARRIVALS, MAX_TUNE, expected_arrivals
    from gpugov.sim.output_files import OutputError
    from gpugov.sim.report import OUTPUT_FILES, load_targets, summarise, write_study
    from gpugov.sim.study import parse_seeds, resolve_policies, run_study
    from gpugov.sim.text_input import InputFileError

    if not 0 < tune <= MAX_TUNE:  # also refuses nan and inf
        raise _fail(f"--tune must be within 0 (exclusive) and {MAX_TUNE:g}, got {tune}")
    if not 1 <= workers <= 256:
        raise _fail(f"--workers must be within 1..256, got {workers}")
    try:
        seed_list = parse_seeds(seeds)
        names = resolve_policies(policies)
        published = load_targets(targets, workload) if targets else {}
    except InputFileError as e:
        raise _fail(str(e)) from None
    except (ValueError, KeyError) as e:
        raise _fail(str(e.args[0] if isinstance(e, KeyError) else e)) from None
    if targets and not published:
        _warn(f"{targets}: no published numbers for workload {workload!r}")
    capacity = sum(n.gpu_count for n in nodes) * 1000
    if expected_arrivals(pods, capacity, tune) > MAX_ARRIVALS:
        raise _fail(f"--tune {tune:g} needs more than {MAX_ARRIVALS:,} arrivals on this "
                    "cluster; use a smaller --tune")
    _check_out_folder(out, inputs, OUTPUT_FILES)
    with _progress(f"{workload}: {len(names)} policies x {len(seed_list)} seeds",
                   len(names) * len(seed_list)) as advance:
        try:
            result = run_study(nodes, pods, workload, names, seed_list, tune, workers,
                               on_done=lambda r: advance())
        except ValueError as e:  # e.g. a tune that would need too many arrivals
            raise _fail(str(e)) from None
    try:
        files = write_study(result, out, published)
    except OutputError as e:
        raise _fail(str(e)) from None
    _print_summary(result, summarise(result), published)
    for f in files:
        typer.echo(f"wrote {f}")


@contextmanager
def _progress(label: str, total: int) -> Iterator[Callable[[], None]]:
    """`advance()` after each experiment. On a terminal rich's bar (kept when done); anywhere
    else plain stderr lines once the study has taken 2 s, then every 10 s (sim.progress):
    rich's bar printed only its final state into a pipe, after minutes of silence."""
    import sys

    if not sys.stderr.isatty():
        from gpugov.sim.progress import Ticker

        ticker, done = Ticker(label, total, "experiments", tty=False), [0]

        def advance() -> None:
            done[0] += 1
            ticker.update(done[0])
        try:
            yield advance
        finally:
            ticker.close()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True)) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


def _stat_cell(s, total: int) -> str:  # type: ignore[no-untyped-def]
    """'mean ±half-spread' of a column over the seeds (the spread is max - min); '—' where no
    seed got there; '(n/N)' when only n of the N seeds reached the column."""
    if s.seeds == 0:
        return f"— (0/{total})"
    part = "" if s.seeds == total else f" ({s.seeds}/{total})"
    spread = f" ±{(s.max - s.min) / 2:.2f}" if s.seeds > 1 else ""
    return f"{s.mean:.2f}{spread}{part}"


def _print_summary(result, rows, published: dict[str, tuple[float, float]]) -> None:
    """The study's tables, each narrow enough for an 80-column terminal with every number
    whole: allocation and fragmentation; the published numbers beside this run's (with
    --targets); the failed pods by the first constraint no node met."""
    from rich import box
    from rich.table import Table

    last = int(100 * result.tune + 0.999999)
    same_seeds = len({r.seeds for r in rows}) == 1
    table = Table(title=f"GPU allocation — {result.workload}, tune {result.tune}"
                  + (f", seeds: {rows[0].seeds}" if same_seeds and rows else ""),
                  box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("policy", no_wrap=True)
    if not same_seeds:
        table.add_column("seeds", justify="right", no_wrap=True)
    table.add_column("@100", justify="right", no_wrap=True)
    table.add_column(f"@{last}", justify="right", no_wrap=True)
    table.add_column(f"frag @{last}", justify="right", no_wrap=True)
    table.add_column("failed", justify="right", no_wrap=True)
    for r in rows:
        frag = "—" if r.frag_end != r.frag_end else f"{r.frag_end:.2f}"
        table.add_row(r.label, *([] if same_seeds else [str(r.seeds)]),
                      _stat_cell(r.at_100, r.seeds), _stat_cell(r.at_end, r.seeds), frag,
                      f"{r.failed_pods:.0f}")
    notes = []
    if any(min(r.at_100.seeds, r.at_end.seeds) < r.seeds for r in rows):
        notes.append("(n/N) = only n of N seeds reached that column (their arrivals stopped "
                     "short of it); the mean is over those n, so columns may not be comparable")
    table.caption = ("allocated GPU as % of capacity when the arrived GPU request reaches 100 % "
                     f"and {last} % of capacity (mean ±half the min–max spread over seeds); "
                     "frag = fragmented GPU (FGD measure), % of capacity; failed = pods that "
                     "fit nowhere, mean per seed" + "".join(f". {n}" for n in notes))
    console = _console()
    console.print(table)
    if published:
        pub = Table(title="published (FGD, ATC'23) beside this run", box=box.SIMPLE_HEAD,
                    pad_edge=False)
        pub.add_column("policy", no_wrap=True)
        for col in ("pub @100", "Δ @100", "pub @130", "Δ @130"):
            pub.add_column(col, justify="right", no_wrap=True)
        for r in rows:
            pub.add_row(r.label, *_published_cells(published.get(r.label), r))
        if last != 130:
            pub.caption = ("published @130 is compared with this run's @130 only when --tune "
                           ">= 1.3")
        console.print(pub)
    reasons = sorted({k for r in rows for k in r.failed_by_reason})
    if reasons:
        why = Table(title="failed pods, by the first constraint no node met",
                    box=box.SIMPLE_HEAD, pad_edge=False)
        why.add_column("policy", no_wrap=True)
        for k in reasons:
            why.add_column(k, justify="right", no_wrap=True)
        for r in rows:
            parts = _whole_parts([r.failed_by_reason.get(k, 0.0) for k in reasons],
                                 r.failed_pods)
            why.add_row(r.label, *(str(n) for n in parts))
        console.print(why)


def _whole_parts(means: list[float], total: float) -> list[int]:
    """Means per seed as whole numbers that add up to the `failed` column (largest
    remainders): rounding each part on its own showed e.g. 190 + 14 + 100 beside 305."""
    import math

    if abs(sum(means) - total) > 1e-6 * max(1.0, total):
        return [round(m) for m in means]  # the parts do not cover the total: no forcing
    target = round(total)
    floors = [math.floor(m) for m in means]
    order = sorted(range(len(means)), key=lambda i: means[i] - floors[i], reverse=True)
    for i in order[:max(0, target - sum(floors))]:
        floors[i] += 1
    return floors


def _published_cells(p: tuple[float, float] | None, r) -> list[str]:  # type: ignore[no-untyped-def]
    """Published @100 and @130 and this run's difference on the same columns (never another
    column): `not reached` where this run's arrivals stopped short."""
    if p is None:
        return ["—"] * 4

    def delta(pub: float, s) -> str:  # type: ignore[no-untyped-def]
        return f"{s.mean - pub:+.2f}" if s is not None and s.seeds else "not reached"
    return [f"{p[0]:.2f}", delta(p[0], r.at_100), f"{p[1]:.2f}", delta(p[1], r.at_130)]


def _load_study_inputs(nodes_path: Path, pods_path: Path):  # type: ignore[no-untyped-def]
    """Nodes and pods, refused when they could only produce an empty or `nan` table; pods no
    node could ever hold are reported on stderr."""
    from gpugov.sim.input_checks import never_fit_warning, require_gpu_pods, require_gpus
    from gpugov.sim.trace import TraceError, load_nodes, load_pods

    try:
        nodes = load_nodes(nodes_path)
        pods = load_pods(pods_path)
        require_gpus(nodes, nodes_path)
        require_gpu_pods(pods, pods_path)
    except TraceError as e:
        raise _fail(str(e)) from None
    warning = never_fit_warning(nodes, pods, pods_path)
    if warning:
        _warn(warning)
    return nodes, pods


POLICY_HELP = ("placement policy: random, dotprod, gpuclustering, gpupacking, bestfit, fgd, "
               "gpugov (the production policy) or all (the study's six); repeat the option or "
               "separate with commas (best-fit, 06-FGD … work too)")
WORKERS_HELP = "parallel worker processes"


def _workload_file(trace_dir: Path, workload: str) -> tuple[Path, str]:
    """`NAME`, `NAME.csv` or the suffix after `openb_pod_list_` -> (pod file, workload name)."""
    name = workload[:-4] if workload.lower().endswith(".csv") else workload
    for candidate in (name, f"openb_pod_list_{name}"):
        if (trace_dir / f"{candidate}.csv").is_file():
            return trace_dir / f"{candidate}.csv", candidate
    return trace_dir / f"{name}.csv", name


@experiment_app.command("fgd")
def experiment_fgd(
    trace_dir: Path = typer.Option(..., "--trace-dir", metavar="DIR",
                                   help="folder with the openb CSV files"),
    workload: str = typer.Option("openb_pod_list_default", "--workload", metavar="NAME",
                                 help="pod CSV in the trace folder: its name with or without "
                                 ".csv, or the part after openb_pod_list_ (e.g. default)"),
    policy: list[str] = typer.Option(["all"], "--policy", metavar="NAME", help=POLICY_HELP),
    seeds: str = typer.Option("42-51", "--seeds", metavar="SEEDS",
                              help="seeds: a range 42-51 or a list 42,43"),
    tune: float = typer.Option(1.3, "--tune", metavar="X", help="total GPU request / GPU capacity, "
                               "0 < tune <= 10 (the study: 1.3)"),
    out: Path = typer.Option(..., "--out", metavar="DIR",
                             help="output folder (created; files appear all "
                             "together)"),
    workers: int | None = typer.Option(None, "--workers", metavar="N",
                                       help=WORKERS_HELP + " (default 1)"),
    nodes: str | None = typer.Option(None, "--nodes", metavar="FILE",
                                     help="node CSV: a file name in the trace "
                                     f"folder or a path (default {DEFAULT_NODE_LIST})"),
    targets: Path | None = typer.Option(None, "--targets", metavar="FILE",
                                        help="published numbers to compare "
                                        "(CSV: workload,policy,alloc_at_100_mean,"
                                        "alloc_at_130_mean)"),
    jobs_old: int | None = typer.Option(None, "--jobs", metavar="N", hidden=True,
                                        help="deprecated spelling of --workers"),
    node_list_old: str | None = typer.Option(None, "--node-list", metavar="FILE", hidden=True,
                                             help="deprecated spelling of --nodes"),
) -> None:
    """Reproduce the FGD (USENIX ATC'23) placement study on one trace.

    Arrivals only; pods that fit nowhere are dropped. Writes the study's *_discrete.csv files,
    a PNG of the curves and summary.json, and prints a table.
    """
    workers = _renamed(workers, jobs_old, "--jobs", "--workers")
    workers = 1 if workers is None else workers  # 0 is refused below, not run as 1
    node_name = _renamed(nodes, node_list_old, "--node-list", "--nodes") or DEFAULT_NODE_LIST
    if not trace_dir.is_dir():
        raise _fail(f"--trace-dir {trace_dir}: not a folder")
    node_file = trace_dir / node_name if not Path(node_name).is_absolute() else Path(node_name)
    if not node_file.exists() and Path(node_name).exists():
        node_file = Path(node_name)
    pod_file, workload = _workload_file(trace_dir, workload)
    node_specs, pods = _load_study_inputs(node_file, pod_file)
    _run_and_report(node_specs, pods, workload, policy, seeds, tune, out, workers, targets,
                    [node_file, pod_file, targets, trace_dir])  # never into the trace folder


@app.command("simulate")
def simulate(
    nodes_file: Path | None = typer.Option(None, "--nodes", metavar="FILE",
                                           help="node CSV (openb format: "
                                           "sn,cpu_milli,memory_mib,gpu,model)"),
    pods_file: Path | None = typer.Option(None, "--pods", metavar="FILE",
                                          help="pod CSV (openb format: name,cpu_milli,"
                                          "memory_mib,num_gpu,gpu_milli and optional "
                                          "gpu_spec)"),
    policy: list[str] = typer.Option(["all", "gpugov"], "--policy", metavar="NAME",
                                     help=POLICY_HELP + " [default: all and gpugov]",
                                     show_default=False),
    seeds: str = typer.Option("1-3", "--seeds", metavar="SEEDS",
                              help="seeds: a range 1-3 or a list 1,2,5"),
    tune: float = typer.Option(1.3, "--tune", metavar="X", help="total GPU request / GPU capacity, "
                               "0 < tune <= 10"),
    out: Path = typer.Option(Path("gpugov-report"), "--out", metavar="DIR",
                             help="output folder (created; "
                             "files appear all together)"),
    workers: int | None = typer.Option(None, "--workers", metavar="N",
                                       help=WORKERS_HELP + " (default 1)"),
    jobs_old: int | None = typer.Option(None, "--jobs", metavar="N", hidden=True,
                                        help="deprecated spelling of --workers"),
) -> None:
    """Compare placement policies on the built-in cluster and workload, or on your trace.

    With no arguments: a generated mixed fleet and workload, all policies, 3 seeds. With
    --nodes and --pods: your own files in the openb CSV format.
    """
    from gpugov.sim.workload import default_nodes, default_pods

    workers = _renamed(workers, jobs_old, "--jobs", "--workers")
    workers = 1 if workers is None else workers  # 0 is refused below, not run as 1
    if (nodes_file is None) != (pods_file is None):
        raise _fail("give both --nodes and --pods, or neither for the built-in workload")
    if nodes_file is None or pods_file is None:
        nodes, pods, workload = default_nodes(), default_pods(), "builtin"
    else:
        nodes, pods = _load_study_inputs(nodes_file, pods_file)
        workload = pods_file.stem
    _run_and_report(nodes, pods, workload, policy, seeds, tune, out, workers, None,
                    [nodes_file, pods_file])
