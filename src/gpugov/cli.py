"""The `gpugov` command: thin wrappers that parse arguments and delegate to the rooms below."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="gpugov",
    help="Govern GPUs on Kubernetes: placement, quotas, enforcement, verification.",
    no_args_is_help=True,
    add_completion=False,
)
experiment_app = typer.Typer(help="Reproduce published experiments.", no_args_is_help=True)
app.add_typer(experiment_app, name="experiment")


# --- MIG geometry and planning (issue 4) ------------------------------------------------------
mig_app = typer.Typer(help="MIG geometry: check profile combinations, list layouts.",
                      no_args_is_help=True)
app.add_typer(mig_app, name="mig")
plan_app = typer.Typer(help="Plan device layouts from observed demand.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")


@mig_app.command("check")
def mig_check(
    profiles: list[str] = typer.Argument(..., help="profiles as nvidia-smi names them"),
    model: str = typer.Option(..., "--model", help="e.g. A100-SXM4-40GB, H100-SXM5-80GB"),
) -> None:
    """Exit 0 and print a placement if PROFILES fit on one GPU together, 1 if not, 2 if unknown."""
    from gpugov.model.mig import find_placement, get_geometry, why_not

    try:
        geometry = get_geometry(model)
        for p in profiles:
            geometry.profile(p)
    except KeyError as e:
        typer.echo(f"error: {e.args[0]}", err=True)
        raise typer.Exit(2) from None
    placement = find_placement(geometry, profiles)
    if placement is None:
        typer.echo(f"does not fit: {why_not(geometry, profiles)}")
        raise typer.Exit(1)
    typer.echo(" ".join(f"{i.profile}@{i.start}" for i in placement))


@mig_app.command("layouts")
def mig_layouts(
    model: str = typer.Option(..., "--model"),
    maximal: bool = typer.Option(True, "--maximal/--all",
                                 help="only layouts nothing more can be added to"),
    include_media: bool = typer.Option(False, "--include-me", help="also +me profiles"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List the profile combinations that fit on one GPU, each with one concrete placement."""
    import json

    from gpugov.model.mig import (
        feasible_layouts,
        find_placement,
        get_geometry,
        layout_label,
        maximal_layouts,
    )

    try:
        geometry = get_geometry(model)
    except KeyError as e:
        typer.echo(f"error: {e.args[0]}", err=True)
        raise typer.Exit(2) from None
    layouts = (maximal_layouts(model, include_media) if maximal
               else sorted(feasible_layouts(model, include_media)))
    rows = [{"profiles": list(lay),
             "placement": [[i.profile, i.start] for i in find_placement(geometry, lay) or ()]}
            for lay in layouts]
    if as_json:
        typer.echo(json.dumps({"model": model, "maximal": maximal, "count": len(rows),
                               "layouts": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{model}: {len(rows)} {'maximal ' if maximal else ''}layouts")
    table.add_column("#", justify="right")
    table.add_column("layout")
    table.add_column("placement (profile@start)")
    for n, (lay, row) in enumerate(zip(layouts, rows, strict=True), 1):
        table.add_row(str(n), layout_label(lay),
                      " ".join(f"{p}@{s}" for p, s in row["placement"]))
    Console().print(table)


def main() -> None:  # pragma: no cover - console entry point
    app()
