"""`gpugov` starts without what it does not need (issue 23: `--version` and `experiment fgd
--help` in 0.2 s): each command line runs in a fresh process exactly as the console script
does, and the modules it imported are read back. Times are in bench/cli_startup.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.main import get_command

from gpugov.cli import _lean_typer

REPO = Path(__file__).resolve().parents[1]
NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"node-{i},32000,131072,{(2, 4, 8)[i % 3]},T4\n" for i in range(4))
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"pod-{i:03d},1000,2048,1,{(250, 500, 1000)[i % 3]}\n" for i in range(20))

#: runs the console script's entry point (from pyproject.toml), then writes the names of the
#: modules it imported to the file in $GPUGOV_MODULES, even when the command exits
ENTRY = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["gpugov"]
PROGRAM = f"""
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["GPUGOV_MODULES"], "w").write(json.dumps(
    sorted(sys.modules))))
sys.argv[0] = "gpugov"
from {ENTRY.partition(':')[0]} import {ENTRY.partition(':')[2]} as main
sys.exit(main())
"""


def run(argv: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    record = tmp_path / "modules.json"
    env = dict(os.environ, GPUGOV_MODULES=str(record), COLUMNS="80")
    proc = subprocess.run([sys.executable, "-c", PROGRAM, *argv], capture_output=True,
                          text=True, env=env, timeout=120)
    return proc, set(json.loads(record.read_text()))


def test_version_imports_neither_typer_nor_the_commands(tmp_path: Path) -> None:
    """`gpugov --version` is answered before typer, rich, pydantic, numpy or any command
    group is imported; it prints what the app prints for it."""
    from gpugov import __version__

    proc, modules = run(["--version"], tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"gpugov {__version__}\n", "")
    assert not {"typer", "click", "rich", "pydantic", "numpy", "gpugov.cli"} & modules


@pytest.mark.parametrize("argv", [["--help"], ["experiment", "fgd", "--help"],
                                  ["experiment", "fgd", "-h"]], ids=" ".join)
def test_help_imports_no_pydantic_numpy_or_rich_markdown(tmp_path: Path, argv: list[str]) -> None:
    """Help screens are drawn by rich's console and tables only: pydantic (typer's value
    coercion), numpy and rich's Markdown/Traceback (markdown-it, pygments) stay unimported."""
    proc, modules = run(argv, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: gpugov" in proc.stdout
    heavy = {m for m in modules if m.split(".")[0] in ("pydantic", "numpy", "markdown_it",
                                                         "pygments")}
    assert not heavy | ({"rich.markdown", "rich.traceback"} & modules)


def test_a_command_line_imports_only_the_group_it_names(tmp_path: Path) -> None:
    """`gpugov experiment fgd --help` builds study.py's commands alone, not every group's."""
    proc, modules = run(["experiment", "fgd", "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    groups = {m for m in modules if m.startswith("gpugov.cli.") and not m.startswith(
        "gpugov.cli._")}
    assert groups == {"gpugov.cli.study"}


def _module_of(group: typer.Typer) -> str:
    for info in group.registered_commands:
        return info.callback.__module__
    return _module_of(group.registered_groups[0].typer_instance)


def test_where_names_the_module_of_every_top_level_command() -> None:
    """The console script imports only WHERE[first word]: that module must be the one adding
    the command, and every command and group must be in WHERE (add a new one there)."""
    import gpugov.cli as cli

    app = cli.app
    found = {info.name: info.callback.__module__ for info in app.registered_commands}
    found |= {g.name: _module_of(g.typer_instance) for g in app.registered_groups}
    assert {name: f"gpugov.cli.{module}" for name, module in cli.WHERE.items()} == found
    assert set(cli.MODULES) == {m.rsplit(".", 1)[1] for m in found.values()}


@pytest.mark.parametrize("argv", [["experiment", "fgd"], ["modes"], ["plan"], ["node"],
                                  ["dra", "publish"], ["tenants"]], ids=" ".join)
def test_help_with_one_group_loaded_equals_the_whole_apps(tmp_path: Path,
                                                           argv: list[str]) -> None:
    """What the console script prints with one module loaded is what the whole app prints."""
    from typer.testing import CliRunner

    from gpugov.cli import app

    proc, _ = run([*argv, "--help"], tmp_path)
    whole = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": "80"},
                               terminal_width=80)
    assert proc.returncode == whole.exit_code == 0, proc.stderr
    assert proc.stdout == whole.output


def test_fgd_experiment_runs_without_pydantic(tmp_path: Path) -> None:
    """The whole FGD command on a small trace: same files, its options read without pydantic
    or matplotlib."""
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "openb_node_list_gpu_node.csv").write_text(NODES)
    (trace / "openb_pod_list_tiny.csv").write_text(PODS)
    proc, modules = run(["experiment", "fgd", "--trace-dir", str(trace), "--workload", "tiny",
                         "--policy", "fgd", "--seeds", "42", "--tune", "1.3",
                         "--out", str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "summary.json").is_file()
    assert not {m for m in modules if m.split(".")[0] in ("pydantic", "matplotlib")}


def test_a_bad_value_still_reads_as_typer_words_it(tmp_path: Path) -> None:
    """A value the fast path does not take goes through typer's own coercion: same error."""
    proc, _ = run(["experiment", "fgd", "--trace-dir", "t", "--out", "o", "--tune", "x"],
                  tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: Invalid value for '--tune'"), proc.stderr


def test_rich_markdown_and_traceback_are_the_real_ones_after_help(tmp_path: Path) -> None:
    """The stand-ins exist only while typer's help module loads: afterwards rich.markdown is
    the real module, and typer's Markdown/Traceback names build real rich objects."""
    code = """
import sys
from typer.testing import CliRunner
from gpugov.cli import app
assert CliRunner().invoke(app, ["experiment", "--help"]).exit_code == 0
import typer.rich_utils as ru
import rich.markdown, rich.traceback
assert "stand-in" not in (rich.markdown.__doc__ or ""), rich.markdown
assert type(ru.Markdown("# x")) is rich.markdown.Markdown
try:
    1 / 0
except ZeroDivisionError as e:
    assert type(ru.Traceback.from_exception(type(e), e, e.__traceback__)) is \
        rich.traceback.Traceback
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip() == "ok", proc.stderr


# -- the fast coercion returns exactly what typer's pydantic coercion returns -----------------

_probe = typer.Typer()


@_probe.command()
def _kinds(s: str = typer.Option("a"), i: int = typer.Option(0), f: float = typer.Option(0.0),
           b: bool = typer.Option(False, "--b/--no-b"), p: Path = typer.Option(Path(".")),
           many: list[str] = typer.Option([]), paths: list[Path] = typer.Option([]),
           ranged: int = typer.Option(1, min=1, max=9)) -> None:
    """Every kind of option gpugov's commands use."""


_COMMAND = get_command(_probe)
_PARAMS = {p.name: p for p in _COMMAND.params}
_TEXT = st.text(alphabet="0123456789-+._ eE/xab\x00", max_size=12)
_VALUES = st.one_of(_TEXT, st.integers(-10**20, 10**20), st.floats(allow_nan=False),
                    st.booleans(), st.builds(Path, st.text(alphabet="ab/.", max_size=5)))


def _typer_value(param, value: object, ctx: typer.Context) -> object:  # type: ignore[no-untyped-def]
    from typer._coercion import build_runtime_param

    try:
        return build_runtime_param(param.type_descriptor)._coerce_value(value, param, ctx)
    except typer.BadParameter:
        return "refused"


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(_PARAMS)),
       value=st.one_of(_VALUES, st.lists(_VALUES, max_size=3).map(tuple)))
def test_fast_values_equal_typers_own(name: str, value: object) -> None:
    param = _PARAMS[name]
    ctx = typer.Context(_COMMAND)
    fast = _lean_typer.fast_value(param.type_descriptor, value, param, ctx)
    if fast is _lean_typer._NOT_FAST:
        return  # typer's coercion runs instead
    expected = _typer_value(param, value, ctx)
    assert fast == expected and type(fast) is type(expected), (value, fast, expected)


def test_plain_values_take_the_fast_path() -> None:
    """The comparison above is not vacuous: command-line spellings of the plain kinds are
    converted without typer's adapter."""
    ctx = typer.Context(_COMMAND)
    for name, value, want in (("i", "42", 42), ("f", "1.3", 1.3), ("f", "2", 2.0),
                              ("s", "x", "x"), ("p", "a/b", Path("a/b")),
                              ("many", ("x", "y"), ["x", "y"]), ("b", True, True)):
        param = _PARAMS[name]
        assert _lean_typer.fast_value(param.type_descriptor, value, param, ctx) == want
    ranged = _PARAMS["ranged"]  # min/max: typer's adapter words the refusal
    assert _lean_typer.fast_value(ranged.type_descriptor, "5", ranged, ctx) is \
        _lean_typer._NOT_FAST
