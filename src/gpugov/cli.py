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


def main() -> None:  # pragma: no cover - console entry point
    app()
