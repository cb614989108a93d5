"""The root `gpugov` Typer app; each command group's module adds its commands to it."""

from __future__ import annotations

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
