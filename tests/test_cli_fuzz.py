"""The CLI fuzzed per option type and per loader (issue 22, must-show): every hostile number,
path and file is exit 2 with one `error:` line naming the option or the file, never a
traceback, and nothing is written.

Numbers: NaN, ±inf, huge, negative and zero for every numeric option of every command (the
table is checked against the command tree, so a new option must join it). Paths: missing, a
folder, unwritable, and the input itself as the output. Loaders: cluster.yaml, jobs.csv,
pods/nodes CSV, node configs, MIG configs, queue configs and kubeconfigs, with fixed hostile
files and with hypothesis-generated ones.
"""

from __future__ import annotations

import os
import typing
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from gpugov.cli import app

runner = CliRunner()

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"node-{i},32000,131072,{(2, 4, 8)[i % 3]},{('T4', 'G2')[i % 2]}\n" for i in range(6))
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,creation_time,deletion_time\n" \
    + "".join(f"pod-{i:03d},1000,2048,1,{(250, 500, 1000)[i % 3]},,LS,{i * 10},{i * 10 + 500}\n"
              for i in range(12))
MISSING = "missing-file"  # in the test's folder; named by the check that runs after the options


def one_error_line(res, names: str) -> str:  # type: ignore[no-untyped-def]
    """Exit 2, no traceback, exactly one line of output, an `error:` line naming `names`."""
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.output
    assert names in lines[0], (names, res.output)
    return lines[0]


def tree_snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a tiny trace; the command runs inside it (so nothing lands elsewhere)."""
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "openb_node_list_gpu_node.csv").write_text(NODES)
    (trace / "openb_pod_list_tiny.csv").write_text(PODS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("NODE_NAME", raising=False)
    return tmp_path


# --- numbers --------------------------------------------------------------------------------
VALUES = {"nan": "nan", "inf": "inf", "-inf": "-inf", "huge": "1e300", "negative": "-1",
          "zero": "0"}
HUGE_INT = "1" + "0" * 30
PROM = "http://127.0.0.1:1"
# (command, option, base argv after the command, values that are valid there)
NUMERIC: list[tuple[str, str, list[str], set[str]]] = [
    ("simulate", "--tune", ["--seeds", "1", "--out", "o"], set()),
    ("simulate", "--workers", ["--seeds", "1", "--out", "o"], set()),
    ("modes", "--pod-count", [], set()),
    ("modes", "--seed", ["--model", "nosuch"], {"zero"}),
    ("modes", "--node-count", [], set()),
    ("modes", "--replicas", [], set()),
    # a replay's seed is any whole number; --period 0 is off; it may stop at 0 s or never
    ("replay", "--seed", ["--nodes", MISSING, "--jobs", MISSING, "--queues", MISSING],
     {"zero", "huge"}),
    ("replay", "--period", ["--nodes", MISSING, "--jobs", MISSING, "--queues", MISSING],
     {"zero", "huge"}),
    ("replay", "--until", ["--nodes", MISSING, "--jobs", MISSING, "--queues", MISSING],
     {"zero", "huge"}),
    ("reconcile", "--interval", ["--prometheus", PROM, "--kubeconfig", MISSING], set()),
    ("reconcile", "--idle-threshold", ["--prometheus", PROM, "--kubeconfig", MISSING],
     {"zero"}),
    ("reconcile", "--max-pods", ["--prometheus", PROM, "--kubeconfig", MISSING], set()),
    ("tenants", "--resync", ["--kubeconfig", MISSING], set()),
    ("scheduler", "--lease-duration", ["--kubeconfig", MISSING], set()),
    ("scheduler", "--renew-deadline", ["--kubeconfig", MISSING], set()),
    ("scheduler", "--retry-period", ["--kubeconfig", MISSING], set()),
    ("scheduler", "--concurrency", ["--kubeconfig", MISSING], set()),
    ("top", "--interval", ["--kubeconfig", MISSING], set()),
    ("rightsize", "--headroom", ["--prometheus", "nonsense"], {"zero"}),
    ("report", "--gpu-hour-price", ["--prometheus", "nonsense"], {"zero"}),
    ("experiment fgd", "--tune", ["--trace-dir", "trace", "--workload", "tiny", "--out", "o"],
     set()),
    ("experiment fgd", "--workers", ["--trace-dir", "trace", "--workload", "tiny", "--out", "o"],
     set()),
    ("dev demo", "--timeout", ["--dir", "nodev"], set()),
    ("node exporter", "--recovery-seconds", ["--regions", MISSING], {"zero"}),
    ("node device-plugin", "--replicas", ["--node-name", "n1", "--kubeconfig", MISSING], set()),
    ("node device-plugin", "--soft-replicas", ["--node-name", "n1", "--kubeconfig", MISSING],
     set()),
    ("node device-plugin", "--refresh-seconds", ["--node-name", "n1", "--kubeconfig", MISSING],
     set()),
    ("node run", "--interval", ["--node-name", "n1", "--config", MISSING], set()),
    ("node agent", "--replicas", ["--node-name", "n1", "--mode", "timeslice", "--kubeconfig",
                                  MISSING], set()),
    ("node agent", "--interval", ["--node-name", "n1", "--kubeconfig", MISSING], set()),
    ("node agent", "--drain-grace", ["--node-name", "n1", "--kubeconfig", MISSING], {"zero"}),
    ("node agent", "--recovery-seconds", ["--node-name", "n1", "--kubeconfig", MISSING],
     {"zero"}),
]


def _leaves(cmd, path=()):  # type: ignore[no-untyped-def]
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield " ".join(path), cmd


def _options_of_type(kinds: tuple[type, ...]) -> set[tuple[str, str]]:
    found = set()
    for path, cmd in _leaves(get_command(app)):
        hints = typing.get_type_hints(cmd.callback)
        for p in cmd.params:
            hint = hints.get(p.name)
            if p.hidden or hint is None:
                continue
            if any(hint is k or k in typing.get_args(hint) for k in kinds):
                found.add((path, p.opts[0]))
    return found


def test_every_numeric_option_is_in_the_fuzz_table() -> None:
    """A new numeric option joins the table below (and so gets fuzzed)."""
    assert _options_of_type((int, float)) == {(c, o) for c, o, _, _ in NUMERIC}


@pytest.mark.parametrize("kind", sorted(VALUES))
@pytest.mark.parametrize(("command", "option", "base", "valid"), NUMERIC,
                         ids=[f"{c} {o}" for c, o, _, _ in NUMERIC])
def test_hostile_numbers_are_one_line_naming_the_option(place: Path, command: str, option: str,
                                                         base: list[str], valid: set[str],
                                                         kind: str) -> None:
    if kind in valid:
        pytest.skip(f"{option} {VALUES[kind]} is a valid value")
    value = VALUES[kind]
    if kind == "huge" and _is_int(command, option):
        value = HUGE_INT
    before = tree_snapshot(place)
    res = runner.invoke(app, [*command.split(), *base, option, value])
    one_error_line(res, option)
    assert tree_snapshot(place) == before


def _is_int(command: str, option: str) -> bool:
    return (command, option) in _options_of_type((int,))
