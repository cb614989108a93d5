"""The `gpugov` command: thin wrappers that parse arguments and delegate to the rooms below.

One module per command group (as kubectl keeps one package per verb); importing a module adds
its commands to `app`. Every module imports only typer at start-up; the work is imported
inside each command, so `gpugov --help` stays fast.

`gpugov.cli.app` is the whole app (every module is imported on first use of the name). The
console script asks `app_for(argv)` instead: `gpugov experiment fgd …` imports study.py alone
and builds only its commands, so start-up does not pay for every other group.
"""

from __future__ import annotations

from typing import Any

#: every command-group module; importing one adds its commands to `app`
MODULES = ("crd", "dev", "dra", "explain", "k8s_control", "mig", "native", "node", "observe",
           "replay", "study")
#: the module that adds each top-level command or group (tests/test_cli_startup.py checks
#: it); a command line starting with anything else (an option, a typo) loads every module
WHERE = {"simulate": "study", "experiment": "study",
         "modes": "replay", "replay": "replay", "openb-jobs": "replay",
         "explain": "explain",
         "reconcile": "k8s_control", "tenants": "k8s_control", "scheduler": "k8s_control",
         "extender": "k8s_control", "webhook": "k8s_control",
         "verify": "observe", "top": "observe", "rightsize": "observe", "report": "observe",
         "mig": "mig", "plan": "mig", "native": "native", "dev": "dev", "crd": "crd",
         "node": "node", "dra": "dra"}

# the order `gpugov --help` lists them in: a new user's first commands first
COMMANDS = ("simulate", "modes", "replay", "openb-jobs", "explain", "reconcile", "tenants",
            "scheduler", "extender", "webhook", "verify", "top", "rightsize", "report")
GROUPS = ("experiment", "mig", "plan", "native", "dev", "crd", "node", "dra")

__all__ = ["DEFAULT_NODE_LIST", "_load_study_inputs", "_workload_file", "app", "app_for",
           "main"]


def load(modules: tuple[str, ...] = MODULES):  # type: ignore[no-untyped-def]
    """The typer app with (at least) `modules` imported, commands in --help order."""
    import importlib

    from gpugov.cli._app import app, tidy_help

    for module in modules:
        importlib.import_module(f"gpugov.cli.{module}")
    app.registered_commands.sort(key=lambda c: (COMMANDS + (c.name,)).index(c.name))  # new: last
    app.registered_groups.sort(key=lambda g: (GROUPS + (g.name,)).index(g.name))
    tidy_help(app)  # idempotent: loading more modules later tidies the new ones too
    return app


def app_for(argv: list[str]):  # type: ignore[no-untyped-def]
    """The app for one command line: only the module its first word names, when it names
    one; the whole app otherwise (options first, a typo: every command is needed)."""
    module = WHERE.get(argv[0]) if argv else None
    return load((module,) if module else MODULES)


def __getattr__(name: str) -> Any:
    """`app` (the whole app) and the study helpers, imported on first use."""
    if name == "app":
        value = load()
    elif name in ("DEFAULT_NODE_LIST", "_load_study_inputs", "_workload_file"):
        from gpugov.cli import study

        value = getattr(study, name)
    elif name == "tidy_help":
        from gpugov.cli._app import tidy_help as value
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def main() -> None:  # pragma: no cover - the console entry point is gpugov.__main__:main
    from gpugov.__main__ import main as run

    run()
