"""The root `gpugov` Typer app; each command group's module adds its commands to it."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

from gpugov.cli import _lean_typer


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
                if ctx is not None and getattr(e, "possibilities", None):
                    hidden = {o for p in ctx.command.params if getattr(p, "hidden", False)
                              for o in p.opts}  # never suggest a deprecated spelling
                    e.possibilities = [o for o in e.possibilities if o not in hidden]
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
        if getattr(self, "is_flag", False):
            return None
        return self.metavar or placeholder(self) or opt_type(self, ctx)

    TyperArgument.display_type_rich = argument_type  # type: ignore[method-assign]
    TyperOption.display_type_rich = option_type  # type: ignore[method-assign]


#: what an option without its own metavar shows, by the kind of value it takes: one style
#: (FILE, DIR, SECONDS, N, HOST:PORT ...) across commands, never typer's <path>, <str>, <float>
_STR_PLACEHOLDERS = (("listen", "HOST:PORT"), ("prometheus", "URL"), ("window", "DURATION"),
                     ("period", "DURATION"), ("step", "DURATION"), ("selector", "K=V,..."),
                     ("library", "FILE"), ("mode", "MODE"), ("to", "FORMAT"))
_SECONDS_WORDS = ("seconds", "interval", "timeout", "resync", "duration", "deadline", "period",
                  "grace")


def placeholder(param) -> str | None:  # type: ignore[no-untyped-def]
    """FILE, DIR, SECONDS, N, NAME ... for an option from its value's type and its name."""
    name = (param.opts[0] if param.opts else param.name or "").lstrip("-")
    try:
        kind = param.bare_type()
    except (AttributeError, AssertionError, TypeError):
        return None
    if kind == "Path":
        folder = name.endswith("dir") or name in ("regions", "run", "cuda-lib", "out")
        return "DIR" if folder else "FILE"
    if kind == "float":
        if any(w in name for w in _SECONDS_WORDS):
            return "SECONDS"
        return "PRICE" if name.endswith("price") else "NUMBER"
    if kind == "int":
        return "N"
    if kind == "str":
        return next((shown for word, shown in _STR_PLACEHOLDERS if name.endswith(word)), "NAME")
    return None


_plain_help_types()
_lean_typer.install()  # no pydantic for plain option values, no rich Markdown until used


def _reflow(text: str) -> str:
    """A docstring's paragraphs as single lines (the terminal wraps them): a newline in the
    middle of a sentence showed up in --help as a break mid-sentence. Blank lines still part
    paragraphs; a line starting a list item keeps its break."""
    import re

    paragraphs = re.split(r"\n\s*\n", text.strip())
    out = []
    for para in paragraphs:
        lines: list[str] = []
        for line in para.splitlines():
            line = line.strip()
            if lines and not re.match(r"([-*•]|\d+\.)\s", line):
                lines[-1] += " " + line
            else:
                lines.append(line)
        out.append("\n".join(lines))
    return "\n\n".join(out)


def tidy_help(typer_app: typer.Typer) -> None:
    """Reflow every command's help (see `_reflow`), in this app and its groups."""
    import inspect

    for info in typer_app.registered_commands:
        text = info.help or (inspect.getdoc(info.callback) if info.callback else None)
        if text:
            info.help = _reflow(text)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            tidy_help(group.typer_instance)


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
