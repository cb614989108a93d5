"""The `gpugov` command: thin wrappers that parse arguments and delegate to the rooms below."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(
    name="gpugov",
    help="Govern GPUs on Kubernetes: placement, quotas, enforcement, verification.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _plain_help_types() -> None:
    """--help shows the names we chose (FILE, N, …), never Python types such as <list[str]>
    or <bool>: arguments whose name is given and on/off flags show no type at all."""
    try:
        from typer.core import TyperArgument, TyperOption
    except ImportError:  # pragma: no cover - another typer layout: its default help stays
        return
    arg_type, opt_type = TyperArgument.display_type_rich, TyperOption.display_type_rich

    def argument_type(self, ctx):  # type: ignore[no-untyped-def]
        return None if self.metavar else arg_type(self, ctx)

    def option_type(self, ctx):  # type: ignore[no-untyped-def]
        return None if getattr(self, "is_flag", False) else opt_type(self, ctx)

    TyperArgument.display_type_rich = argument_type  # type: ignore[method-assign]
    TyperOption.display_type_rich = option_type  # type: ignore[method-assign]


_plain_help_types()


def _show_version(value: bool) -> None:
    if value:
        from gpugov import __version__

        typer.echo(f"gpugov {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    """Govern GPUs on Kubernetes: placement, quotas, enforcement, verification."""


experiment_app = typer.Typer(help="Reproduce published experiments.", no_args_is_help=True)
app.add_typer(experiment_app, name="experiment")


# --- placement study ---
DEFAULT_NODE_LIST = "openb_node_list_gpu_node.csv"


def _positive_seconds(value: float) -> float:
    """Option callback: a finite number > 0 (NaN and ±inf pass click's float parsing)."""
    import math

    if value is not None and (not math.isfinite(value) or value <= 0):
        raise typer.BadParameter(f"must be a finite number > 0 (got {value!r})")
    return value


def _finite_nonnegative(value: float) -> float:
    """Option callback: a finite number >= 0."""
    import math

    if value is not None and (not math.isfinite(value) or value < 0):
        raise typer.BadParameter(f"must be a finite number >= 0 (got {value!r})")
    return value


def _fail(message: str) -> typer.Exit:
    """Print an input error and return the exit for `raise` (code 2 = bad input)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)


def _renamed(new_value, old_value, old: str, new: str, default=None):  # type: ignore[no-untyped-def]
    """A deprecated option spelling still works (hidden from --help) and says what to use."""
    if old_value is None:
        return new_value
    _warn(f"{old} is deprecated; use {new}")
    if new_value is not None and new_value != default and new_value != old_value:
        raise _fail(f"give {new} or {old}, not both")
    return old_value


def _console():  # type: ignore[no-untyped-def]
    """A console as wide as the terminal (tables wrap their cells instead of the screen)."""
    from rich.console import Console

    return Console()


def _check_out_folder(out: Path, inputs: list[Path | None], names=()) -> None:  # type: ignore[no-untyped-def]
    from gpugov.sim.output_files import OutputError, check_folder

    try:
        check_folder(out, inputs, names)
    except OutputError as e:
        raise _fail(str(e)) from None


def _check_out_file(out: Path, inputs: list[Path | None]) -> None:
    from gpugov.sim.output_files import OutputError, check_file

    try:
        check_file(out, inputs)
    except OutputError as e:
        raise _fail(str(e)) from None


def _run_and_report(nodes, pods, workload: str, policies: list[str], seeds: str, tune: float,
                    out: Path, workers: int, targets: Path | None,
                    inputs: list[Path | None]) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

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
    from rich.console import Console

    console = Console(stderr=True)
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(f"{workload}: {len(names)} policies x {len(seed_list)} seeds",
                            total=len(names) * len(seed_list))
        try:
            result = run_study(nodes, pods, workload, names, seed_list, tune, workers,
                               on_done=lambda r: bar.advance(task))
        except ValueError as e:  # e.g. a tune that would need too many arrivals
            raise _fail(str(e)) from None
    try:
        files = write_study(result, out, published)
    except OutputError as e:
        raise _fail(str(e)) from None
    _print_summary(result, summarise(result), published)
    for f in files:
        typer.echo(f"wrote {f}")


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
            why.add_row(r.label, *(f"{r.failed_by_reason.get(k, 0):.0f}" for k in reasons))
        console.print(why)


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
                    [node_file, pod_file, targets])


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


# --- MIG geometry and planning ---
mig_app = typer.Typer(help="MIG geometry: check profile combinations, list layouts.",
                      no_args_is_help=True)
app.add_typer(mig_app, name="mig")
plan_app = typer.Typer(help="Plan device layouts from observed demand.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")

MODEL_HELP = ("GPU model, e.g. A100-SXM4-40GB, H100-SXM5-80GB (NVML names such as "
              "'NVIDIA H100 80GB HBM3' and any letter case work too)")


def _mig_geometry(model: str):  # type: ignore[no-untyped-def]
    """(catalog name, MIG geometry) of a model as the user spelled it; exit 2 if unknown."""
    from gpugov.model.catalog import canonical_model
    from gpugov.model.mig import get_geometry

    name = canonical_model(model)
    try:
        return name, get_geometry(name)
    except KeyError as e:
        raise _fail(f"--model: {e.args[0]}") from None


@mig_app.command("check")
def mig_check(
    profiles: list[str] = typer.Argument(..., metavar="PROFILE",
                                         help="profiles as nvidia-smi names them "
                                         "(1g.10gb; MIG-1g.10gb and any case work too)"),
    model: str = typer.Option(..., "--model", metavar="MODEL", help=MODEL_HELP),
) -> None:
    """Exit 0 and print a placement if PROFILES fit on one GPU together, 1 if not, 2 if unknown."""
    from gpugov.model.catalog import canonical_mig_profile
    from gpugov.model.mig import find_placement, why_not

    model, geometry = _mig_geometry(model)
    profiles = [canonical_mig_profile(p) for p in profiles]
    try:
        for p in profiles:
            geometry.profile(p)
    except KeyError as e:
        raise _fail(str(e.args[0])) from None
    placement = find_placement(geometry, profiles)
    if placement is None:
        typer.echo(f"does not fit: {why_not(geometry, profiles)}")
        raise typer.Exit(1)
    typer.echo(" ".join(f"{i.profile}@{i.start}" for i in placement))


@mig_app.command("layouts")
def mig_layouts(
    model: str = typer.Option(..., "--model", metavar="MODEL", help=MODEL_HELP),
    maximal: bool = typer.Option(True, "--maximal/--all", metavar=" ",
                                 help="only layouts nothing more can be added to"),
    include_media: bool = typer.Option(False, "--include-me", metavar=" ",
                                       help="also +me profiles"),
    as_json: bool = typer.Option(False, "--json", metavar=" ",
                                 help="print JSON instead of a table"),
) -> None:
    """List the profile combinations that fit on one GPU, each with one concrete placement."""
    import json

    from gpugov.model.mig import feasible_layouts, find_placement, layout_label, maximal_layouts

    model, geometry = _mig_geometry(model)
    layouts = (maximal_layouts(model, include_media) if maximal
               else sorted(feasible_layouts(model, include_media)))
    rows = [{"profiles": list(lay),
             "placement": [[i.profile, i.start] for i in find_placement(geometry, lay) or ()]}
            for lay in layouts]
    if as_json:
        typer.echo(json.dumps({"model": model, "maximal": maximal, "count": len(rows),
                               "layouts": rows}, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"{model}: {len(rows)} {'maximal ' if maximal else ''}layouts")
    table.add_column("#", justify="right")
    table.add_column("layout")
    table.add_column("placement (profile@start)")
    for n, (lay, row) in enumerate(zip(layouts, rows, strict=True), 1):
        table.add_row(str(n), layout_label(lay),
                      " ".join(f"{p}@{s}" for p, s in row["placement"]))
    _console().print(table)


PLAN_STARTS = ("disabled", "balanced", "1g")


@plan_app.command("mig")
def plan_mig(
    nodes_file: Path | None = typer.Option(None, "--nodes", metavar="FILE",
                                           help="node CSV (openb format: "
                                           "sn,cpu_milli,memory_mib,gpu,model) "
                                           "\\[required]"),
    pods: Path = typer.Option(..., "--pods", metavar="FILE",
                              help="pod CSV (openb format: name,cpu_milli,"
                              "memory_mib,num_gpu,gpu_milli)"),
    model: str = typer.Option("H100-SXM5-80GB", "--model", metavar="MODEL",
                              help="MIG model the GPUs become; " + MODEL_HELP),
    start: str = typer.Option("disabled", "--from", metavar="LAYOUT",
                              help="current layout: disabled|balanced|1g"),
    out: Path | None = typer.Option(None, "--out", metavar="FILE",
                                    help="file for the mig-parted config (the "
                                    "node labels go beside it as NAME.node-labels.yaml)"),
    cluster_old: Path | None = typer.Option(None, "--cluster", metavar="FILE", hidden=True,
                                            help="deprecated spelling of --nodes"),
) -> None:
    """Plan MIG layouts for the demand in a trace; compare with static layouts."""
    import yaml
    from rich.table import Table

    from gpugov.model.mig import layout_label
    from gpugov.placement.mig_planner import mig_parted_config
    from gpugov.sim import mig_plan
    from gpugov.sim.output_files import OutputError, write_files

    cluster = _renamed(nodes_file, cluster_old, "--cluster", "--nodes")
    if cluster is None:
        raise _fail("missing option --nodes (the node CSV)")
    model, _ = _mig_geometry(model)
    if start not in PLAN_STARTS:
        raise _fail(f"--from {start!r}: choose one of {', '.join(PLAN_STARTS)}")
    labels_path = out.with_suffix(".node-labels.yaml") if out is not None else None
    if out is not None and labels_path is not None:
        if labels_path == out:
            raise _fail(f"--out {out}: use a name ending in .yaml (the labels go beside it)")
        _check_out_file(out, [cluster, pods])
        _check_out_file(labels_path, [cluster, pods])
    try:
        report = mig_plan.run(cluster, pods, model, start)
    except (KeyError, ValueError) as e:
        raise _fail(str(e.args[0] if isinstance(e, KeyError) else e)) from None
    demand = ", ".join(f"{p}×{n}" for p, n in report.demand.most_common())
    table = Table(title=f"MIG plan on {report.gpus} × {model}; demand: {demand}")
    for col in ("layout policy", "instances served", "compute slices served", "% of demand",
                "GPUs re-laid out"):
        table.add_column(col, justify="left" if col == "layout policy" else "right")
    for r in report.rows:
        table.add_row(r.name, f"{r.served_instances}/{r.demand_instances}",
                      f"{r.served_slices}/{r.demand_slices}",
                      f"{100 * r.served_slices / max(1, r.demand_slices):.1f}",
                      str(r.gpus_changed))
    console = _console()
    console.print(table)
    from collections import Counter

    for lay, n in Counter(report.plan.layouts).most_common():
        console.print(f"  {n:6d} GPUs: {layout_label(lay) if lay else 'MIG disabled'}")
    if out is not None and labels_path is not None:
        config, labels = mig_parted_config(report.plan)
        try:
            write_files({
                out: yaml.safe_dump({**config}, sort_keys=False).encode(),
                labels_path: yaml.safe_dump({n: {"nvidia.com/mig.config": c}
                                             for n, c in labels.items()},
                                            sort_keys=False).encode()})
        except OutputError as e:
            raise _fail(str(e)) from None
        console.print(f"wrote {out} ({len(config['mig-configs'])} configs) and {labels_path}")


@app.command("modes")
def modes(
    pod_count: int | None = typer.Option(None, "--pod-count", metavar="N",
                                         help="pods in the generated "
                                         "workload, 1..1,000,000 (default 100)"),
    seed: int = typer.Option(0, "--seed", metavar="N", help="workload seed, 0..4294967295"),
    node_count: int | None = typer.Option(None, "--node-count", metavar="N",
                                          help="nodes of 8 GPUs, "
                                          "1..100,000 (default 16)"),
    model: str = typer.Option("H100-SXM5-80GB", "--model", metavar="MODEL",
                              help="MIG-capable GPU model; " + MODEL_HELP),
    replicas: int = typer.Option(4, "--replicas", metavar="N",
                                 help="time-slice replicas / MPS clients "
                                 "per GPU, 2..64"),
    mixed: bool = typer.Option(False, "--mixed", metavar=" ",
                               help="mixed-mode nodes, tenants of 3 trust "
                               "tiers (--pod-count per tier; --node-count unused): isolation "
                               "per tier"),
    policy: str = typer.Option("bestfit", "--policy", metavar="NAME",
                               help="placement policy that picks nodes (as `gpugov replay`; "
                               "gpugov too)"),
    pods_old: int | None = typer.Option(None, "--pods", metavar="N", hidden=True,
                                        help="deprecated spelling of --pod-count"),
    nodes_old: int | None = typer.Option(None, "--nodes", metavar="N", hidden=True,
                                         help="deprecated spelling of --node-count"),
) -> None:
    """Same workload as whole GPUs, MIG, soft slices, time-slices and MPS: what each delivers."""
    from rich import box
    from rich.table import Table

    from gpugov.sim.modes import LIMITS, compare

    pods = _renamed(pod_count, pods_old, "--pods", "--pod-count")
    pods = 100 if pods is None else pods
    nodes = _renamed(node_count, nodes_old, "--nodes", "--node-count")
    nodes = 16 if nodes is None else nodes
    for flag, value in (("--pod-count", pods), ("--node-count", nodes), ("--seed", seed),
                        ("--replicas", replicas)):
        lo, hi = LIMITS[flag.lstrip("-")]
        if not lo <= value <= hi:
            raise _fail(f"{flag} must be within {lo:,}..{hi:,}, got {value}")
    model, _ = _mig_geometry(model)
    policy = _policy_name(policy)
    if mixed:
        from gpugov.sim.modes import MIXED_POOL, mixed_scenario, print_mixed

        print_mixed(mixed_scenario(pods, seed, model, replicas, policy),
                    f"{pods} pods per trust tier (seed {seed}) on {len(MIXED_POOL)} mixed-mode "
                    f"nodes × 8 {model}, policy {policy}")
        return

    from gpugov.sim.progress import Ticker

    ticker = Ticker("modes", 6 * pods, "placements")
    try:
        rows = compare(pods, seed, nodes, 8, model, replicas, policy, tick=ticker.update)
    finally:
        ticker.close()
    table = Table(title=f"{pods} pods (seed {seed}) on {nodes}×8 {model}, policy {policy}",
                  box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="compute placed: share of the cluster's GPU compute; stranded: "
                  "memory of occupied GPUs no pod claims; TS risk: memory time-sliced pods "
                  "may touch / card memory, worst GPU / share of GPUs above 1 (timeslice: "
                  "memory oversubscribed, as the NVIDIA plugin; timeslice-capped: gpugov's "
                  "memory cap)")
    for col in ("mode", "isolation", "pods placed", "compute placed", "stranded",
                "MIG idle slices", "TS risk"):
        table.add_column(col, justify="left" if col in ("mode", "isolation") else "right",
                         no_wrap=col in ("mode", "isolation", "pods placed"),
                         min_width=max(map(len, col.split())))
    for r in rows:
        risk = ("-" if r.ts_max_risk is None
                else f"{r.ts_max_risk:.2f} / {100 * (r.ts_overcommitted or 0):.0f}%")
        table.add_row(r.mode.replace("-", "\n"), str(r.isolation),
                      f"{r.pods_placed}/{r.pods_total}",
                      f"{100 * r.compute_placed:.1f}%", f"{100 * r.stranded_memory:.1f}%",
                      "-" if r.mig_idle_slices is None else str(r.mig_idle_slices), risk)
    console = _console()
    console.print(table)
    refused = "; ".join(f"{r.mode}: " + ", ".join(f"{k} {v}" for k, v in r.refused.items())
                        for r in rows if r.refused)
    if refused:
        console.print(f"refused pods by the engine's reason (gpu-mode: multi-GPU pods, which "
                      f"only soft and exclusive GPUs serve whole) — {refused}", highlight=False)


# --- control plane: replay and explain ---
REPLAY_PLOTS = ("usage_vs_fair_share.png", "allocation_and_waits.png")
REPLAY_FILES = ("jobs.csv", "allocations.csv", "queues.csv", "summary.json", "snapshot.json",
                *REPLAY_PLOTS)


def _write_replay(res, out: Path, plots: bool) -> dict:  # type: ignore[no-untyped-def]
    """Render the replay's files in a scratch folder beside `out`, then move them in together
    (plots a previous run left there are removed under --no-plots)."""
    import shutil
    import tempfile

    from gpugov.sim.output_files import OutputError, write_folder
    from gpugov.sim.replay_report import write_outputs

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.render-", dir=out.parent))
    except OSError as e:
        raise _fail(f"cannot write {out}: {e.strerror or e}") from None
    try:
        summ = write_outputs(res, scratch / "r", plots)
        files = {p.name: p.read_bytes() for p in sorted((scratch / "r").iterdir())}
        write_folder(out, files, stale=REPLAY_PLOTS)
    except OSError as e:
        raise _fail(f"cannot write {out}: {e.strerror or e}") from None
    except OutputError as e:
        raise _fail(str(e)) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return summ


@app.command("replay")
def replay_cmd(
    nodes_file: Path | None = typer.Option(None, "--nodes", metavar="FILE",
                                           help="cluster.yaml (nodePools) or node CSV (openb: "
                                           "sn,cpu_milli,memory_mib,gpu,model); by extension "
                                           "or content"),
    cluster_old: Path | None = typer.Option(None, "--cluster", metavar="FILE", hidden=True,
                                            help="deprecated spelling of --nodes"),
    jobs: Path | None = typer.Option(None, "--jobs", metavar="FILE",
                                     help="job file, or an openb pod CSV"),
    queues: Path | None = typer.Option(None, "--queues", metavar="FILE",
                                       help="queues/tenants YAML"),
    policy: str = typer.Option("gpugov", "--policy", metavar="NAME",
                               help="placement policy: gpugov (the scheduler's default), or "
                               "one of the study's random, dotprod, gpuclustering, "
                               "gpupacking, bestfit, fgd"),
    out: Path | None = typer.Option(None, "--out", metavar="DIR",
                                    help="output folder (default: none)"),
    seed: int = typer.Option(0, "--seed", metavar="N", help="seed of the policy's random "
                             "choices"),
    period: float = typer.Option(0.0, "--period", metavar="SECONDS",
                                 help="extra cycle every N s while pending"),
    until: float | None = typer.Option(None, "--until", metavar="SECONDS",
                                       help="stop the clock at N s"),
    plots: bool = typer.Option(True, "--plots/--no-plots", metavar=" ",
                               help="also write the PNG plots "
                               "(--no-plots removes plots an earlier run left in --out)"),
    scenario: str | None = typer.Option(None, "--scenario", metavar="NAME",
                                        help="built-in scenario: tenants (the default with no "
                                        "files) or mixed (MIG, memory slices, time-slice, "
                                        "gangs, taints, power, untrusted)"),
) -> None:
    """Replay jobs through queues over time; no arguments runs the built-in scenario."""
    nodes_file = _renamed(nodes_file, cluster_old, "--cluster", "--nodes")
    from gpugov.sim.replay import ReplayOptions
    from gpugov.sim.replay_report import InputError, print_summary, run_from_files

    cluster = nodes_file
    if out is not None:
        _check_out_folder(out, [cluster, jobs, queues], REPLAY_FILES)
    try:
        res = run_from_files(cluster, jobs, queues,
                             ReplayOptions(policy=policy, seed=seed, period=period, until=until),
                             scenario)
    except InputError as e:
        raise _fail(str(e)) from None
    if not res.jobs:
        raise _fail(f"{jobs}: no jobs (only a header?)")
    summ = _write_replay(res, out, plots) if out is not None else None
    print_summary(res, summ)
    if out is not None:
        typer.echo(f"wrote {out}/jobs.csv, allocations.csv, queues.csv, summary.json, "
                   "snapshot.json"
                   + (", usage_vs_fair_share.png, allocation_and_waits.png" if plots else ""))


@app.command("openb-jobs")
def openb_jobs_cmd(
    pods: Path = typer.Argument(..., metavar="PODS_CSV",
                                help="openb pod CSV (has creation_time/deletion_time)"),
    out: Path = typer.Option(..., "--out", metavar="FILE",
                             help="job file to write (never one of the inputs)"),
) -> None:
    """Turn an openb pod trace into a replay job file (tenants by QoS and a stable name hash)."""
    from gpugov.sim.jobs import openb_jobs, render_job_file
    from gpugov.sim.output_files import OutputError, write_file
    from gpugov.sim.trace import TraceError

    _check_out_file(out, [pods])
    try:
        specs = openb_jobs(pods)
    except TraceError as e:
        raise _fail(str(e)) from None
    if not specs:
        raise _fail(f"{pods}: no pods (only a header?)")
    try:
        write_file(out, render_job_file(specs))
    except OutputError as e:
        raise _fail(str(e)) from None
    typer.echo(f"wrote {len(specs)} jobs to {out}")


@app.command("explain")
def explain_cmd(
    job: str = typer.Argument(..., help="job name, or `pod` followed by NS/NAME"),
    pod: str | None = typer.Argument(None, help="with `pod`: NAMESPACE/NAME"),
    run: Path | None = typer.Option(None, "--run",
                                    help="a replay output folder (has snapshot.json)"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="with `pod`: the cluster to ask"),
    scheduler_name: str = typer.Option("", "--scheduler-name",
                                       help="with `pod`: the scheduler's --scheduler-name"),
) -> None:
    """Why is JOB pending (from a replay's --run), or `explain pod NS/NAME --kubeconfig K`
    (live): reason, position in its queue, its queue's share."""
    import json

    from gpugov.control.explain import explain

    if job == "pod" and pod is not None:
        _explain_pod(pod, kubeconfig, scheduler_name)
        return
    if run is None:
        raise _fail("give --run DIR (a replay's output), or `explain pod NS/NAME --kubeconfig K`")
    try:
        snap = json.loads((run / "snapshot.json").read_text(encoding="utf-8"))
        lines = explain(snap, job)
    except (OSError, ValueError) as e:
        raise _fail(f"cannot read {run / 'snapshot.json'}: {e}") from None
    except KeyError as e:
        raise _fail(str(e.args[0])) from None
    typer.echo("\n".join(lines))


def _explain_pod(target: str, kubeconfig: Path | None, scheduler_name: str = "") -> None:
    import asyncio

    from gpugov.k8s.scheduler.explain import ExplainError, explain_pod

    ns, _, name = target.partition("/")
    if not ns or not name:
        raise _fail(f"pod {target!r}: expected NAMESPACE/NAME")
    if kubeconfig is None:
        raise _fail("explain pod needs --kubeconfig")
    extra = {"scheduler_name": scheduler_name} if scheduler_name else {}
    try:
        lines = asyncio.run(explain_pod(_kubeconfig_file(kubeconfig), ns, name, **extra))
    except ExplainError as e:
        raise _fail(str(e)) from None
    except (OSError, TimeoutError) as e:  # aiohttp's connection errors are OSErrors
        raise _fail(f"--kubeconfig {kubeconfig}: the API server cannot be reached "
                    f"({e or type(e).__name__})") from None
    typer.echo("\n".join(lines))


# --- enforcement library ---
native_app = typer.Typer(help="The in-container enforcement library (libgpugov.so).",
                         no_args_is_help=True)
app.add_typer(native_app, name="native")


@native_app.command("path")
def native_path() -> None:
    """Print the absolute path of the installed libgpugov.so (for LD_PRELOAD)."""
    from gpugov.node.native import NativeLibraryMissing, library_path

    try:
        typer.echo(str(library_path()))
    except NativeLibraryMissing as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


# --- observation: reconcile, top, rightsize, report, verify ---
def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise _fail(f"--listen {value!r}: expected HOST:PORT, e.g. 0.0.0.0:9402")
    return host.strip("[]"), int(port)


@app.command("reconcile")
def reconcile_cmd(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="kubeconfig file (default: in-cluster)"),
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus URL"),
    listen: str = typer.Option("0.0.0.0:9402", "--listen", help="HOST:PORT for /metrics"),
    interval: float = typer.Option(15.0, "--interval", callback=_positive_seconds,
                                   help="seconds between cycles"),
    window: str = typer.Option("2m", "--window", help="rate window for device time"),
    idle_threshold: float = typer.Option(0.05, "--idle-threshold", callback=_finite_nonnegative,
                                         help="busy fraction below which a GPU is idle"),
    queues: Path | None = typer.Option(None, "--queues",
                                       help="control-plane config (queue quotas)"),
    max_pods: int = typer.Option(5000, "--max-pods", help="pods with their own series"),
) -> None:
    """Join declared, allocated and used GPU views per pod/queue/tenant; serve /metrics."""
    import logging
    import re

    from gpugov.control.config import ConfigError
    from gpugov.observe.cluster import ClusterError
    from gpugov.observe.reconciler import Options, load_tree, run

    host, port = _listen(listen)
    if not interval > 0:
        raise _fail(f"--interval must be > 0, got {interval}")
    if not re.fullmatch(r"\d+(ms|s|m|h)", window):
        raise _fail(f"--window {window!r}: expected a Prometheus duration such as 30s or 2m")
    if not 0 <= idle_threshold <= 1:
        raise _fail(f"--idle-threshold must be within 0..1, got {idle_threshold}")
    if max_pods < 1:
        raise _fail(f"--max-pods must be >= 1, got {max_pods}")
    if not prometheus.startswith(("http://", "https://")):
        raise _fail(f"--prometheus {prometheus!r}: expected an http:// or https:// URL")
    _kubeconfig_file(kubeconfig)
    if queues is not None:
        try:
            load_tree(queues)
        except (ConfigError, OSError) as e:
            raise _fail(str(e)) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        run(Options(kubeconfig, prometheus, host, port, interval, window, idle_threshold,
                    queues, max_pods))
    except ClusterError as e:
        raise _fail(str(e)) from None
    except OSError as e:  # the listen address is taken or not ours
        raise _fail(f"--listen {listen}: {e.strerror or e}") from None


# --- Kubernetes scheduler and extender ---
@app.command("tenants")
def tenants_cmd(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="kubeconfig file (default: in-cluster)"),
    system_namespace: str = typer.Option("gpugov-system", "--system-namespace",
                                         help="gpugov's own namespace (never fenced)"),
    resync: float = typer.Option(30.0, "--resync", callback=_positive_seconds,
                                 help="seconds between full passes (watch events trigger "
                                 "one at once)"),
    tenant_selector: str = typer.Option("", "--tenant-selector",
                                        help="only Tenants with these labels, k=v[,k=v]"),
) -> None:
    """Keep every Tenant's fences (Pod Security labels, quota, limit range, network policies,
    RoleBindings) in its namespaces; report them in the Tenant's status."""
    import asyncio
    import contextlib
    import logging

    from gpugov.k8s.tenants.controller import run

    kc = _kubeconfig_file(kubeconfig)
    selector = dict(_label_pairs(tenant_selector)) if tenant_selector else None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(kc, system_namespace, resync, selector))


def _kubeconfig_file(kubeconfig: Path | None) -> Path | None:
    """The kubeconfig, checked (`k8s/kubeconfig.py`): a broken, empty or missing one exits 2
    with one line, never a traceback. None (in-cluster credentials) passes through."""
    from gpugov.k8s.kubeconfig import KubeconfigError, check_kubeconfig

    if kubeconfig is None:
        return None
    try:
        return check_kubeconfig(kubeconfig)
    except KubeconfigError as e:
        raise _fail(str(e)) from None


def _policy_name(policy: str) -> str:
    from gpugov.placement.registry import get_policy

    try:
        return get_policy(policy).name
    except KeyError as e:
        raise _fail(str(e.args[0])) from None


@app.command("scheduler")
def scheduler_cmd(
    kubeconfig: Path = typer.Option(..., "--kubeconfig", help="kubeconfig file"),
    leader_elect: bool = typer.Option(False, "--leader-elect",
                                      help="run as one of several replicas (Lease)"),
    lease_name: str = typer.Option("gpugov-scheduler", "--lease-name"),
    lease_namespace: str = typer.Option("kube-system", "--lease-namespace"),
    identity: str = typer.Option("", "--identity", help="default: HOSTNAME_PID"),
    lease_duration: float = typer.Option(15.0, "--lease-duration", callback=_positive_seconds,
                                         help="seconds"),
    renew_deadline: float = typer.Option(10.0, "--renew-deadline", callback=_positive_seconds,
                                         help="seconds"),
    retry_period: float = typer.Option(2.0, "--retry-period", callback=_positive_seconds,
                                       help="seconds"),
    policy: str = typer.Option("gpugov", "--policy", help="placement policy"),
    concurrency: int = typer.Option(64, "--concurrency", help="API writes in flight"),
    events: bool = typer.Option(True, "--events/--no-events",
                                help="post Events for unschedulable and preempted pods"),
    scheduler_name: str = typer.Option("", "--scheduler-name",
                                       help="schedule pods with this schedulerName "
                                            "(default: the one gpugov's webhook sets)"),
    node_selector: str = typer.Option("", "--node-selector",
                                      help="use only nodes with these labels: k=v[,k=v]"),
    metrics_listen: str = typer.Option("", "--metrics-listen",
                                       help="HOST:PORT to serve /metrics on (default: none)"),
) -> None:
    """Schedule pods whose schedulerName is gpugov's: queues, quotas, gangs, preemption."""
    from gpugov.k8s.leader import LeaseTiming
    from gpugov.k8s.scheduler.main import SchedulerOptions, run

    try:
        timing = LeaseTiming(lease_duration, renew_deadline, retry_period)
    except ValueError as e:
        raise _fail(str(e)) from None
    if concurrency < 1:
        raise _fail(f"--concurrency must be >= 1, got {concurrency}")
    code = run(SchedulerOptions(_kubeconfig_file(kubeconfig), _policy_name(policy), leader_elect,
                                lease_name, lease_namespace, identity, timing, concurrency,
                                events=events, scheduler_name=scheduler_name,
                                node_selector=_label_pairs(node_selector),
                                metrics=_listen(metrics_listen) if metrics_listen else None))
    raise typer.Exit(code)


def _label_pairs(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise _fail(f"--node-selector {text!r}: expected key=value[,key=value]")
        pairs.append((key, value))
    return tuple(pairs)


@app.command("extender")
def extender_cmd(
    kubeconfig: Path = typer.Option(..., "--kubeconfig", help="kubeconfig file"),
    listen: str = typer.Option("127.0.0.1:8888", "--listen", help="HOST:PORT"),
    policy: str = typer.Option("gpugov", "--policy", help="placement policy"),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="serving certificate (PEM)"),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="serving key (PEM)"),
    client_ca: Path | None = typer.Option(
        None, "--client-ca", help="CA (PEM) that signs the client certificate kube-scheduler "
                                  "presents (its extender tlsConfig certFile); others are refused"),
    scheduler_name: str = typer.Option(
        "gpugov", "--scheduler-name",
        help="bind only pods with this schedulerName (the kube-scheduler profile using it)"),
    health_listen: str = typer.Option(
        "", "--health-listen", help="HOST:PORT serving only /healthz over plain HTTP (probes)"),
    insecure_http: bool = typer.Option(
        False, "--insecure-http",
        help="serve plain HTTP without authentication: local debugging only"),
) -> None:
    """kube-scheduler extender (filter/prioritize/bind) placing GPUs with gpugov's engine.

    HTTPS with a client certificate signed by --client-ca is required; it binds only pods of
    --scheduler-name that it filtered, onto a node it accepted, within their queue's limits."""
    import asyncio
    import contextlib
    import logging

    from gpugov.k8s.extender import TlsFiles, serve

    host, port = _listen(listen)
    health = _listen(health_listen) if health_listen else None
    path = _kubeconfig_file(kubeconfig)
    name = _policy_name(policy)
    tls = None
    given = {"--tls-cert": tls_cert, "--tls-key": tls_key, "--client-ca": client_ca}
    if insecure_http:
        if any(given.values()):
            raise _fail("--insecure-http cannot be combined with --tls-cert/--tls-key/"
                        "--client-ca")
    else:
        missing = [k for k, v in given.items() if v is None]
        if missing:
            raise _fail(f"the extender serves HTTPS and authenticates its caller: give "
                        f"{', '.join(missing)} (or --insecure-http for local debugging only)")
        for option, file in given.items():
            if not file.is_file():  # type: ignore[union-attr]
                raise _fail(f"{option} {file}: no such file")
        tls = TlsFiles(tls_cert, tls_key, client_ca)  # type: ignore[arg-type]
        try:
            tls.context()
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            raise _fail(f"--tls-cert/--tls-key/--client-ca: {e}") from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(path, host, port, name, tls=tls, insecure_http=insecure_http,
                          scheduler_name=scheduler_name, health=health))


# --- Kubernetes: local dev cluster, CRDs, admission webhook (gpugov.k8s) ---
dev_app = typer.Typer(help="A local Kubernetes cluster with gpugov (real apiserver, kwok nodes).",
                      no_args_is_help=True)
app.add_typer(dev_app, name="dev")
crd_app = typer.Typer(help="gpugov's CRDs: generate them, convert the config to objects.",
                      no_args_is_help=True)
app.add_typer(crd_app, name="crd")


@dev_app.command("build")
def dev_build_cmd(
    helm: bool = typer.Option(False, "--helm", help="also build helm"),
) -> None:
    """Build (once) kube-apiserver, controller-manager, scheduler, kubectl, etcd and kwok."""
    import json

    from rich.console import Console

    from gpugov.k8s.devcluster import build

    console = Console(stderr=True)
    try:
        with console.status("checking the binary cache") as status:
            report = build.ensure_binaries(progress=status.update, include_helm=helm)
    except build.BuildError as e:
        raise _fail(str(e)) from None
    typer.echo(json.dumps({"bin": str(build.bin_dir()), **report.as_dict()}, indent=1))


@dev_app.command("up")
def dev_up_cmd(
    nodes: Path | None = typer.Option(None, "--nodes", help="cluster.yaml or nodes CSV "
                                      "(default: the built-in mixed fleet)"),
    directory: Path | None = typer.Option(None, "--dir", help="work dir (state, logs, certs)"),
) -> None:
    """Start a local cluster with gpugov; the last line printed is `export KUBECONFIG=...`."""
    from rich.console import Console

    from gpugov.k8s.devcluster import build, dev
    from gpugov.k8s.devcluster.cluster_file import ClusterFileError
    from gpugov.k8s.devcluster.plane import StartError

    workdir = directory or dev.default_dir()
    console = Console(stderr=True)
    try:
        build.ensure_cache_root()  # a bad XDG_CACHE_HOME: one line naming it, exit 2
        with console.status("starting") as status:
            plane = dev.up(workdir, nodes, say=status.update)
    except (ClusterFileError, StartError, build.BuildError) as e:
        raise _fail(str(e)) from None
    except OSError as e:  # a folder it cannot create or write: name it, no traceback
        raise _fail(f"{e.filename or workdir}: {e.strerror or e}") from None
    console.print(f"gpugov dev cluster up in {plane.procs.extra.get('up_seconds')} s "
                  f"({plane.server}, nodes: {plane.procs.extra.get('nodes')}); stop it with: "
                  f"gpugov dev down --dir {plane.workdir}", soft_wrap=True)
    for line in dev.next_steps(plane.workdir):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    typer.echo(f"export KUBECONFIG={plane.kubeconfig}")


@dev_app.command("kubectl", context_settings={"allow_extra_args": True,
                                               "ignore_unknown_options": True})
def dev_kubectl_cmd(
    ctx: typer.Context,
    directory: Path | None = typer.Option(None, "--dir", help="work dir given to `dev up`"),
) -> None:
    """Run the kubectl built for the dev cluster against it (`gpugov dev kubectl get pods -A`)."""
    import os

    from gpugov.k8s.devcluster import build, dev

    workdir = (directory or dev.default_dir()).resolve()
    kubectl = build.bin_dir() / "kubectl"
    if not kubectl.exists():
        raise _fail(f"{kubectl}: not built; run `gpugov dev build`")
    if not dev.is_up(workdir):
        raise _fail(f"no dev cluster running in {workdir}; run `gpugov dev up`")
    os.execv(kubectl, [str(kubectl), f"--kubeconfig={workdir / 'kubeconfig'}", *ctx.args])


@dev_app.command("demo")
def dev_demo_cmd(
    directory: Path | None = typer.Option(None, "--dir", help="work dir given to `dev up`"),
    timeout: float = typer.Option(120.0, "--timeout", callback=_positive_seconds,
                                  help="seconds to wait for each step"),
) -> None:
    """Three teams on the dev cluster: borrowing, reclaim, a gang, preemption; then `top`
    and a summary of what the scheduler decided and why (read back from the API)."""
    from rich.console import Console

    from gpugov.k8s.devcluster import demo, dev

    workdir = (directory or dev.default_dir()).resolve()
    if not dev.is_up(workdir):
        raise _fail(f"no dev cluster running in {workdir}; run `gpugov dev up` first")
    console = Console()
    try:
        result = demo.run(workdir / "kubeconfig", timeout=timeout,
                          say=lambda m: console.print(m, markup=False, highlight=False))
    except demo.DemoError as e:
        raise _fail(str(e)) from None
    import asyncio

    from gpugov.observe import top

    console.print(top.render(asyncio.run(demo.top_snapshot(workdir / "kubeconfig")),
                             width=console.width))
    for line in demo.summary(result):
        console.print(line, highlight=False, markup=False)


@dev_app.command("down")
def dev_down_cmd(
    directory: Path | None = typer.Option(None, "--dir", help="work dir given to `dev up`"),
) -> None:
    """Stop every process `gpugov dev up` started in that work dir."""
    from gpugov.k8s.devcluster import dev
    from gpugov.k8s.devcluster.processes import StateFileError

    workdir = directory or dev.default_dir()
    try:
        stopped = dev.down(workdir)
    except StateFileError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else
               f"stopped: nothing (no dev cluster in {workdir})")


@crd_app.command("generate")
def crd_generate_cmd(
    out: Path | None = typer.Option(None, "--out", metavar="DIR",
                                    help="output folder (default: print the manifests, for "
                                    "`| kubectl apply -f -`; in a gpugov source checkout, "
                                    "its chart's crds/ folder)"),
) -> None:
    """Write the CRD YAML generated from the config models."""
    from gpugov.k8s.crds import generate, render, write_crds

    chart = Path("deploy/helm/gpugov")
    if out is None and (chart / "Chart.yaml").is_file():
        out = chart / "crds"  # the checkout's own chart: regenerate it in place
    if out is None:
        typer.echo("---\n".join(render(crd) for crd in generate().values()), nl=False)
        return
    if out.exists() and not out.is_dir():
        raise _fail(f"--out {out} exists and is not a folder")
    try:
        paths = write_crds(out)
    except OSError as e:
        raise _fail(f"--out {out}: cannot write there ({e.strerror or e})") from None
    for path in paths:
        typer.echo(str(path))


@crd_app.command("convert")
def crd_convert_cmd(
    sources: list[Path] = typer.Argument(..., help="a config YAML, or YAML streams of "
                                         "objects: gpugov's, KAI Queues, Volcano Queues, "
                                         "Kueue ClusterQueues/LocalQueues/Cohorts"),
    to: str = typer.Option("objects", "--to", help="objects | config"),
    namespace: str = typer.Option("default", "--namespace", "-n", help="namespace of "
                                  "namespaced objects (Kueue LocalQueues) that name none, as "
                                  "kubectl apply -n would give them"),
) -> None:
    """Convert the replay's config YAML to Queue/Tenant/PriorityPolicy objects or back, and
    other schedulers' queue objects (by apiVersion) to gpugov's. What has no gpugov
    equivalent is listed on stderr; an object that cannot be converted fails the command."""
    import yaml

    from gpugov.control.config import ConfigError, load_config
    from gpugov.k8s.convert import convert_objects, is_foreign
    from gpugov.k8s.crds import (
        ConversionError,
        config_sections,
        config_to_objects,
        objects_to_config,
    )

    if to not in ("objects", "config"):
        raise _fail(f"--to {to!r}: allowed: objects, config")
    docs: list = []
    for source in sources:
        try:
            docs += [d for d in yaml.safe_load_all(source.read_text()) if d is not None]
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise _fail(f"{source}: cannot read YAML: {e}") from None
    source = sources[0]
    docs = [i for d in docs for i in (d.get("items") or [] if isinstance(d, dict)
                                      and d.get("kind") == "List" else [d])]
    try:
        if not any(is_foreign(d) for d in docs):  # the replay's config file
            if len(sources) > 1:
                raise _fail("a config file converts alone; give one file")
            if to == "config":
                raise _fail(f"{source}: no objects (apiVersion/kind) to convert to a config")
            typer.echo(yaml.safe_dump_all(config_to_objects(load_config(source)),
                                          sort_keys=False), nl=False)
            return
        conv = convert_objects(docs, namespace)
        for note in conv.notes:
            typer.echo(f"# not carried over / changed: {note.line()}", err=True)
        if conv.errors:
            raise _fail("cannot convert:\n  " + "\n  ".join(conv.errors))
        # validates the result as a whole
        cfg = objects_to_config(conv.objects, ", ".join(map(str, sources)))
        if to == "config":
            typer.echo(yaml.safe_dump(config_sections(cfg), sort_keys=False), nl=False)
        else:
            typer.echo(yaml.safe_dump_all(conv.objects, sort_keys=False), nl=False)
    except (ConfigError, ConversionError) as e:
        raise _fail(str(e)) from None


@app.command("webhook")
def webhook_cmd(
    cert: Path = typer.Option(..., "--cert", help="serving certificate (PEM)"),
    key: Path = typer.Option(..., "--key", help="serving key (PEM)"),
    listen: str = typer.Option("127.0.0.1:8443", "--listen",
                               help="HOST:PORT (in a pod: 0.0.0.0:8443, as the chart sets)"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="kubeconfig file (default: in-cluster)"),
    scheduler_name: str = typer.Option("gpugov", "--scheduler-name",
                                       help="schedulerName set on GPU pods ('' = leave it)"),
    client_ca: Path | None = typer.Option(None, "--client-ca", help="require TLS client "
                                          "certificates signed by this CA (the apiserver's)"),
    system_namespace: str = typer.Option("gpugov-system", "--system-namespace",
                                         help="namespace of gpugov's component "
                                         "ServiceAccounts (they may write what gpugov owns)"),
) -> None:
    """The admission webhook: translate GPU requests, resolve tenancy, refuse clearly."""
    import asyncio
    import contextlib
    import logging
    import os

    from gpugov.k8s.webhook.server import serve, ssl_context

    host, port = _listen(listen)
    for name, path in (("--cert", cert), ("--key", key), ("--client-ca", client_ca)):
        if path is not None and not path.is_file():
            raise _fail(f"{name} {path}: no such file")
    _kubeconfig_file(kubeconfig)
    try:  # the certificate, key and CA are read before anything starts
        ssl_context(cert, key, client_ca)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        raise _fail(f"--cert {cert} / --key {key}"
                    + (f" / --client-ca {client_ca}" if client_ca else "")
                    + f": not a usable PEM certificate, key and CA ({e})") from None
    if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise _fail("no --kubeconfig, and not running in a pod (KUBERNETES_SERVICE_HOST is "
                    "unset): give --kubeconfig FILE")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(cert, key, host, port, kubeconfig, scheduler_name,
                              client_ca=client_ca, system_namespace=system_namespace))
    except OSError as e:  # the address is in use or cannot be bound
        raise _fail(f"--listen {listen}: cannot listen there ({e.strerror or e})") from None


node_app = typer.Typer(help="Node-side components: device plugin, node agent, exporter.",
                       no_args_is_help=True)
app.add_typer(node_app, name="node")


@node_app.command("exporter")
def node_exporter_cmd(
    listen: str = typer.Option("0.0.0.0:9400", "--listen", help="HOST:PORT to serve /metrics"),
    regions: Path | None = typer.Option(None, "--regions", help="the device plugin's regions "
                                        "folder (<state>/regions); omit: no per-pod metrics"),
    hostname: str = typer.Option("", "--hostname", help="Hostname label (default: $NODE_NAME, "
                                 "else this host)"),
    recovery_s: float = typer.Option(300.0, "--recovery-seconds", callback=_finite_nonnegative,
                                     help="a GPU is healthy again this long after its last XID"),
    nvml_library: Path | None = typer.Option(None, "--nvml-library", help="libnvidia-ml.so.1 "
                                             "to load (default: the loader path)"),
) -> None:
    """GPU, pod and bypass/zombie metrics from NVML and the pod regions, read at scrape time."""
    import logging

    from gpugov.node.exporter import ExporterConfig, parse_listen, run
    from gpugov.node.nvml.library import NvmlUnavailable

    try:
        parse_listen(listen)
    except ValueError as e:
        raise _fail(str(e)) from None
    if regions is not None and not regions.is_dir():
        raise _fail(f"--regions {regions}: not a folder")
    if recovery_s < 0:
        raise _fail(f"--recovery-seconds {recovery_s}: must be >= 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        run(listen, ExporterConfig(hostname, regions, recovery_s),
            str(nvml_library) if nvml_library else None)
    except NvmlUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


@node_app.command("device-plugin")
def node_device_plugin_cmd(
    devices: Path | None = typer.Option(None, "--devices", help="inventory JSON of this node "
                                        "(the gpugov.io/inventory format); default: NVML"),
    node_name: str | None = typer.Option(None, "--node-name",
                                         help="Kubernetes node name (default: $NODE_NAME)"),
    plugin_dir: Path = typer.Option(Path("/var/lib/kubelet/device-plugins"), "--plugin-dir",
                                    help="the kubelet's device plugin folder"),
    state_dir: Path = typer.Option(Path("/var/lib/gpugov"), "--state-dir",
                                   help="host folder for pod regions and ld.so.preload"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="default: the in-cluster service account"),
    device_specs: bool = typer.Option(True, "--device-specs/--no-device-specs",
                                      help="pass /dev/nvidia* nodes in Allocate"),
    cdi: bool = typer.Option(False, "--cdi", help="also name CDI devices (nvidia.com/gpu=UUID)"),
    mode: str = typer.Option("exclusive", "--mode", help="NVML: how non-MIG GPUs are offered "
                             "(exclusive, soft, timeslice; as `gpugov node agent --mode`)"),
    replicas: int = typer.Option(1, "--replicas", help="NVML: replicas per GPU (timeslice)"),
    soft_replicas: int = typer.Option(10, "--soft-replicas",
                                      help="soft-slice pods the kubelet admits per GPU"),
    refresh_s: float = typer.Option(5.0, "--refresh-seconds", callback=_positive_seconds,
                                    help="NVML: seconds between discovery/health rounds"),
    nvml_library: Path | None = typer.Option(None, "--nvml-library", help="libnvidia-ml.so.1 "
                                             "to load (default: the loader path)"),
    metrics_listen: str | None = typer.Option(None, "--metrics-listen", help="HOST:PORT to "
                                              "serve /metrics (allocation counters)"),
) -> None:
    """Serve the kubelet device plugins (whole GPUs, MIG, soft and time-sliced replicas)."""
    from gpugov.node.deviceplugin.run import NodeConfigError, NodeOptions, check, run
    from gpugov.node.nvml.library import NvmlUnavailable

    _kubeconfig_file(kubeconfig)
    opts = NodeOptions(node_name, devices, plugin_dir, state_dir, kubeconfig, device_specs, cdi,
                       nvml_library, mode, replicas, soft_replicas, refresh_s, metrics_listen)
    try:
        node, source = check(opts)
    except NodeConfigError as e:
        raise _fail(str(e)) from None
    except NvmlUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    run(opts, node, source)


@node_app.command("run")
def node_run_cmd(
    config: Path = typer.Option(..., "--config", help="node.yaml: defaultMode, "
                                "timesliceReplicas, softSplit, migStrategy, devices"),
    node_name: str = typer.Option(..., "--node-name", envvar="NODE_NAME",
                                  help="this node's name (env NODE_NAME)"),
    listen: str = typer.Option("0.0.0.0:9400", "--listen", help="HOST:PORT of the exporter"),
    state_dir: Path = typer.Option(Path("/var/lib/gpugov"), "--state-dir",
                                   help="host folder for pod regions and the library"),
    plugin_dir: Path = typer.Option(Path("/var/lib/kubelet/device-plugins"), "--plugin-dir",
                                    help="the kubelet's device plugin folder"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="default: the in-cluster service account"),
    mig_config: Path | None = typer.Option(None, "--mig-config", help="mig-parted config file "
                                           "for the agent (`gpugov plan mig --out`)"),
    interval: float = typer.Option(10.0, "--interval", callback=_positive_seconds,
                                   help="seconds between agent rounds"),
    nvml_library: Path | None = typer.Option(None, "--nvml-library", help="libnvidia-ml.so.1 "
                                             "to load (default: the loader path)"),
) -> None:
    """Device plugin, node agent and exporter in one process (the chart's node DaemonSet)."""
    from gpugov.node.deviceplugin.all_in_one import RunOptions, load_node_file, run
    from gpugov.node.deviceplugin.run import NodeConfigError, listen_address
    from gpugov.node.nvml.library import NvmlUnavailable

    try:
        cfg = load_node_file(config)
        listen_address(listen, "--listen")
    except NodeConfigError as e:
        raise _fail(str(e)) from None
    _kubeconfig_file(kubeconfig)
    if mig_config is not None and not mig_config.is_file():
        raise _fail(f"--mig-config {mig_config}: no such file")
    if interval <= 0:
        raise _fail(f"--interval {interval}: must be > 0")
    try:
        run(RunOptions(node_name, cfg, listen, state_dir, plugin_dir, kubeconfig, nvml_library,
                       mig_config, interval))
    except NvmlUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


@app.command("verify")
def verify_cmd(
    cuda_lib: Path | None = typer.Option(None, "--cuda-lib",
                                         help="folder with libcuda.so.1 (+ libnvidia-ml.so.1)"),
    library: str | None = typer.Option(None, "--library",
                                       help="libgpugov.so to test, or none (default: installed)"),
    json_out: Path | None = typer.Option(None, "--json", help="also write the report here"),
) -> None:
    """Node acceptance: run probes through the CUDA driver and check each isolation claim.

    Exit 0 when no claim fails, 1 when one fails, 2 on bad input.
    """
    from gpugov.observe import verify

    try:
        setup = verify.resolve(cuda_lib, library)
        if json_out is not None:
            verify.check_output(setup, json_out)
        claims = verify.run(setup)
    except verify.VerifyInputError as e:
        raise _fail(str(e)) from None
    for c in claims:
        typer.echo(f"{c.status.upper():8} {c.name:17} {c.evidence}")
    if json_out is not None:
        try:
            verify.write_json(claims, json_out)
        except OSError as e:
            raise _fail(f"cannot write {json_out}: {e.strerror or e}") from None
    raise typer.Exit(verify.exit_code(claims))


def _prom_duration(option: str, value: str) -> str:
    import re

    if not re.fullmatch(r"\d+(ms|s|m|h|d|w)", value):
        raise _fail(f"{option} {value!r}: expected a duration such as 30s, 5m, 2h or 7d")
    return value


@app.command("top")
def top_cmd(
    prometheus: str | None = typer.Option(None, "--prometheus", help="Prometheus URL"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="read the cluster directly (kubeconfig)"),
    queues: Path | None = typer.Option(None, "--queues", help="control-plane config "
                                       "(quotas) when reading the cluster directly"),
    interval: float = typer.Option(2.0, "--interval", callback=_positive_seconds,
                                   help="seconds between refreshes"),
    window: str = typer.Option("5m", "--window", help="rate window"),
    once: bool = typer.Option(False, "--once", help="print one frame and exit"),
) -> None:
    """Live view of queues, devices (allocated vs used) and top offenders; q quits."""
    import asyncio

    from rich.console import Console

    from gpugov.control.config import ConfigError
    from gpugov.observe import top
    from gpugov.observe.cluster import ClusterError, api_client
    from gpugov.observe.promapi import Prometheus, PrometheusError
    from gpugov.observe.reconciler import load_tree
    from gpugov.observe.snapshot import Snapshot, from_cluster, from_prometheus

    window = _prom_duration("--window", window)
    if prometheus is None and kubeconfig is None:
        raise _fail("give --prometheus URL (the reconciler's series) or --kubeconfig FILE "
                    "(read the cluster directly), or both")
    _kubeconfig_file(kubeconfig)
    if prometheus is not None and not prometheus.startswith(("http://", "https://")):
        raise _fail(f"--prometheus {prometheus!r}: expected an http:// or https:// URL")
    if not interval > 0:
        raise _fail(f"--interval must be > 0, got {interval}")
    try:
        tree = load_tree(queues) if queues else None
    except (ConfigError, OSError) as e:
        raise _fail(str(e)) from None

    async def main() -> int:
        api = await api_client(kubeconfig) if kubeconfig is not None else None
        prom = Prometheus(prometheus) if prometheus else None
        try:
            if prom is not None:
                await prom.__aenter__()

            async def fetch() -> Snapshot:
                if api is not None:
                    return await from_cluster(api, prom, tree, window)
                assert prom is not None
                return await from_prometheus(prom, window)

            if once:
                snap = await fetch()
                if api is None and not (snap.queues or snap.devices or snap.pods):
                    # Prometheus answered with nothing: no data is not an error (exit 0),
                    # one line as `rightsize` and `report` say it, not an empty frame
                    typer.echo(f"no data: no gpugov reconciler series at {prometheus}; "
                               "is `gpugov reconcile` running and scraped?")
                    return 0
                console = Console(width=max(80, Console().width))  # the terminal's, >= 80
                console.print(top.render(snap, width=console.width))
                return 0

            async def fetch_or_say() -> Snapshot:
                try:
                    return await fetch()
                except (PrometheusError, ClusterError) as e:
                    return Snapshot("(no data)", problems=[str(e)])

            await top.live(fetch_or_say, interval)
            return 0
        finally:
            if prom is not None:
                await prom.__aexit__()
            if api is not None:
                await api.close()

    try:
        code = asyncio.run(main())
    except (PrometheusError, ClusterError) as e:
        raise _fail(str(e)) from None
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)


def _with_prometheus(url: str, work):  # type: ignore[no-untyped-def]
    """Run `work(prom)` against Prometheus; unreachable = a clear error, exit 2."""
    import asyncio

    from gpugov.observe.promapi import Prometheus, PrometheusError

    if not url.startswith(("http://", "https://")):
        raise _fail(f"--prometheus {url!r}: expected an http:// or https:// URL")

    async def main():  # type: ignore[no-untyped-def]
        async with Prometheus(url) as prom:
            return await work(prom)

    try:
        return asyncio.run(main())
    except PrometheusError as e:
        raise _fail(str(e)) from None


@app.command("rightsize")
def rightsize_cmd(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus URL"),
    period: str = typer.Option("7d", "--period", help="history to learn from"),
    step: str = typer.Option("1m", "--step", help="sampling step within the period"),
    rate_window: str = typer.Option("2m", "--rate-window", help="rate window for compute"),
    headroom: float = typer.Option(0.2, "--headroom", callback=_finite_nonnegative,
                                   help="added to p95 (0.2 = 20 %)"),
) -> None:
    """GPU requests per workload from observed p95 memory and compute (never below peak)."""
    from rich.console import Console
    from rich.table import Table

    from gpugov.observe import rightsize

    for opt, val in (("--period", period), ("--step", step), ("--rate-window", rate_window)):
        _prom_duration(opt, val)
    if not 0 <= headroom <= 10:
        raise _fail(f"--headroom must be within 0..10, got {headroom}")
    observed = _with_prometheus(prometheus, lambda prom: rightsize.observe(
        prom, period, step, rate_window))
    gib = 1024 ** 3
    if not observed:
        typer.echo(f"no data: no pod memory series in the last {period} at {prometheus}; "
                   "is the gpugov exporter scraped by this Prometheus?")
        return

    def fmt(x, scale=1.0, f="{:.2f}"):  # type: ignore[no-untyped-def]
        return "—" if x is None else f.format(x / scale)

    # two tables that each fit 80 columns (one had 10 columns and needed 150)
    memory = Table(title=f"GPU memory (GiB), last {period}, headroom {headroom:.0%}")
    compute = Table(title=f"GPU compute (GPUs), last {period}")
    for table in (memory, compute):
        table.add_column("workload", overflow="fold")
        if table is memory:
            table.add_column("pods", justify="right", no_wrap=True)
        for col in ("p95 / peak", "declared", "advise", "frees"):
            table.add_column(col, justify="right", no_wrap=True)
    total_mem = total_comp = 0.0
    for obs in observed:
        a = rightsize.recommend(obs, headroom)
        total_mem += a.frees_memory
        total_comp += a.frees_compute
        name = f"{obs.namespace}/{obs.workload}"
        memory.add_row(name, str(obs.pods),
                       f"{obs.p95_memory / gib:.2f} / {obs.peak_memory / gib:.2f}",
                       fmt(obs.declared_memory, gib), f"{a.memory / gib:.2f}",
                       f"{a.frees_memory / gib:.2f}")
        compute.add_row(name, f"{obs.p95_compute:.2f} / {obs.peak_compute:.2f}",
                        fmt(obs.declared_compute), f"{a.compute:.2f}", f"{a.frees_compute:.2f}")
    memory.caption = f"would free {total_mem / gib:.2f} GiB of GPU memory"
    compute.caption = f"would free {total_comp:.2f} GPUs of compute"
    console = Console()
    console.print(memory)
    console.print(compute)


@app.command("report")
def report_cmd(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus URL"),
    period: str = typer.Option("7d", "--period", help="period to charge, e.g. 7d"),
    step: str = typer.Option("1m", "--step", help="integration step"),
    price: float = typer.Option(1.0, "--gpu-hour-price", callback=_finite_nonnegative,
                                help="cost of one GPU-hour"),
    out: Path = typer.Option(Path("."), "--out", help="folder for chargeback.csv/.png"),
) -> None:
    """Per-tenant chargeback: GPU-hours allocated vs used and idle cost (CSV + PNG)."""
    from gpugov.observe import chargeback

    for opt, val in (("--period", period), ("--step", step)):
        _prom_duration(opt, val)
    if not price >= 0:
        raise _fail(f"--gpu-hour-price must be >= 0, got {price}")
    if out.exists() and not out.is_dir():
        raise _fail(f"--out {out} exists and is not a folder")
    rows = _with_prometheus(prometheus, lambda prom: chargeback.chargeback(
        prom, period, step, price))
    if not rows:  # Prometheus answered with nothing: no data is not an error (exit 0)
        typer.echo(f"no data: no gpugov reconciler series in the last {period} at "
                   f"{prometheus}; is `gpugov reconcile` running and scraped? (nothing written)")
        return
    try:
        files = chargeback.write_outputs(rows, out, period)
    except OSError as e:
        raise _fail(f"cannot write to {out}: {e.strerror or e}") from None
    typer.echo(chargeback.csv_text(rows), nl=False)
    for f in files:
        typer.echo(f"wrote {f}")


@node_app.command("agent")
def node_agent_cmd(
    node_name: str = typer.Option(..., "--node-name", envvar="NODE_NAME",
                                  help="this node's name (env NODE_NAME)"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="kubeconfig file (default: in-cluster)"),
    mig_config: Path | None = typer.Option(None, "--mig-config", help="mig-parted config file "
                                           "(`gpugov plan mig --out`); the node label "
                                           "nvidia.com/mig.config picks the config"),
    regions: Path | None = typer.Option(None, "--regions", help="the device plugin's regions "
                                        "folder, for bypass/zombie events"),
    mode: str = typer.Option("exclusive", "--mode", help="how non-MIG GPUs are offered: "
                             "exclusive, soft, timeslice or mps"),
    replicas: int = typer.Option(1, "--replicas", help="replicas per GPU (timeslice / mps)"),
    interval: float = typer.Option(10.0, "--interval", callback=_positive_seconds,
                                   help="seconds between rounds"),
    drain_grace: float = typer.Option(30.0, "--drain-grace", callback=_finite_nonnegative,
                                      help="seconds between marking GPUs "
                                      "unschedulable and changing their MIG layout"),
    recovery_s: float = typer.Option(300.0, "--recovery-seconds", callback=_finite_nonnegative,
                                     help="a GPU is healthy again this long after its last XID"),
    nvml_library: Path | None = typer.Option(None, "--nvml-library", help="libnvidia-ml.so.1 "
                                             "to load (default: the loader path)"),
    listen: str = typer.Option("0.0.0.0:9403", "--listen", help="HOST:PORT for the agent's "
                               "/metrics (gpugov_node_agent_errors_total); '' = off"),
) -> None:
    """Publish GFD labels and the gpugov.io/inventory annotation, apply MIG layouts to idle
    GPUs, report health and bypass/zombie memory as Events."""
    import asyncio
    import contextlib
    import logging

    from gpugov.model.devices import DeviceMode
    from gpugov.node.agent import AgentConfig, run_agent
    from gpugov.node.mig_config import MigConfigError, load
    from gpugov.node.nvml.library import NvmlUnavailable
    from gpugov.node.nvml.source import SharingPolicy

    try:
        sharing_mode = DeviceMode(mode)
    except ValueError:
        raise _fail(f"--mode {mode!r}; allowed: exclusive, soft, timeslice, mps") from None
    if sharing_mode == DeviceMode.MIG:
        raise _fail("--mode mig: MIG GPUs are found by discovery; allowed: exclusive, soft, "
                    "timeslice, mps")
    if replicas < 1 or (replicas > 1 and sharing_mode not in (DeviceMode.TIMESLICE,
                                                              DeviceMode.MPS)):
        raise _fail(f"--replicas {replicas}: must be 1, or >= 2 with --mode timeslice/mps")
    _kubeconfig_file(kubeconfig)
    if regions is not None and not regions.is_dir():
        raise _fail(f"--regions {regions}: not a folder")
    metrics = _listen(listen) if listen else None
    if mig_config is not None:
        try:
            load(mig_config)
        except MigConfigError as e:
            raise _fail(str(e)) from None
    for name, value in (("--interval", interval), ("--drain-grace", drain_grace),
                        ("--recovery-seconds", recovery_s)):
        if value < 0:
            raise _fail(f"{name} {value}: must be >= 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = AgentConfig(node_name, mig_config, regions, interval, drain_grace)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run_agent(cfg, str(nvml_library) if nvml_library else None, kubeconfig,
                                  SharingPolicy(sharing_mode, replicas), recovery_s, metrics))
    except NvmlUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


def main() -> None:  # pragma: no cover - console entry point
    app()
