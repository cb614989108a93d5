"""The root `gpugov` Typer app; each command group's module adds its commands to it."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup


class _OneLineErrors(TyperGroup):
    """A usage error (a bad option value, an unknown option or command) is one `error:` line
    naming the option and the help to read, exit 2: the shape of every other input error.
    typer's boxed panel wrapped at 80 columns and put the cause on the fourth line."""

    def main(self, args: Any = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort:
            typer.echo("aborted", err=True)
            sys.exit(1)
        except typer.TyperException as e:  # click's usage errors (typer vendors click)
            if not hasattr(e, "format_message"):
                raise
            if type(e).__name__ != "NoArgsIsHelpError":  # that one has printed the help
                ctx = getattr(e, "ctx", None)
                hint = f" (see `{ctx.command_path} -h`)" if ctx is not None else ""
                message = " ".join(e.format_message().split())
                typer.echo(f"error: {message}{hint}", err=True)
            sys.exit(getattr(e, "exit_code", 2))
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
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
