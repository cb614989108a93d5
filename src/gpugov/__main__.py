"""The `gpugov` command: the console script's entry point (`main`), and `python -m gpugov …`
(child processes use it: no console script needed, and the same interpreter and package as
the parent).

`gpugov --version` is answered here, before typer and the command groups are imported (that
took most of its time); every other command line goes to the typer app, built with only the
command group it names (`gpugov.cli.app_for`).
"""

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:  # exactly what the app prints for it, and exit 0
        from gpugov import __version__

        if sys.stdout is not None:  # closed stdout: nothing, as typer.echo does
            sys.stdout.write(f"gpugov {__version__}\n")
            sys.stdout.flush()
        return
    from gpugov.cli import app_for

    app_for(sys.argv[1:])(prog_name="gpugov")  # usage lines say `gpugov`, not `python -m gpugov`


if __name__ == "__main__":
    main()
