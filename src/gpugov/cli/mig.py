"""`gpugov mig …` and `gpugov plan mig`: MIG geometry and layout planning."""

from __future__ import annotations

from pathlib import Path

import typer

from gpugov.cli._app import app
from gpugov.cli._common import (
    MODEL_HELP,
    _check_out_file,
    _console,
    _fail,
    _mig_geometry,
    _renamed,
)

mig_app = typer.Typer(help="MIG geometry: check profile combinations, list layouts.",
                      no_args_is_help=True)
app.add_typer(mig_app, name="mig")
plan_app = typer.Typer(help="Plan device layouts from observed demand.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")


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
    from gpugov.sim.progress import Steps

    try:  # seconds on the openb cluster: its steps show on stderr, in a pipe too
        with Steps("plan mig", "starting") as steps:
            report = mig_plan.run(cluster, pods, model, start, say=steps.say)
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
