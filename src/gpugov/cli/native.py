"""`gpugov native path`: where the in-container enforcement library is."""

from __future__ import annotations

import typer

from gpugov.cli._app import app

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
