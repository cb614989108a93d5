"""Issue 22's remaining low findings, one test each, named after the finding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpugov.cli import app

runner = CliRunner()
NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},64000,262144,4,A100\n" for i in range(2))
QUEUES = ("queues:\n  - {name: a, quota: {gpu: 4}}\n  - {name: b, quota: {gpu: 4}}\n"
          "tenants:\n  - {namespace: ns-a, queue: a}\n"
          "priorityClasses:\n  - {name: low, value: 10}\n")
HEADER = "name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,cpu_milli,memory_mib"


def _replay_files(d: Path, jobs: str) -> list[str]:
    for name, text in (("nodes.csv", NODES), ("q.yaml", QUEUES), ("jobs.csv", jobs)):
        (d / name).write_text(text)
    return ["replay", "--nodes", str(d / "nodes.csv"), "--jobs", str(d / "jobs.csv"),
            "--queues", str(d / "q.yaml")]


def test_low_an_unknown_namespace_names_the_namespace_field(tmp_path: Path) -> None:
    """A job whose `namespace` names no tenant (queue empty) was blamed on field `queue`."""
    argv = _replay_files(tmp_path, f"{HEADER},namespace\nj0,,low,0,100,1,1,1000,1000,1024,"
                                   "ns-x\n")
    res = runner.invoke(app, argv)
    assert res.exit_code == 2, res.output
    assert "line 2, field 'namespace': 'ns-x' is not a tenant namespace" in res.output
    assert "field 'queue'" not in res.output and "allowed: ns-a" in res.output


def test_low_use_over_fair_never_shows_nan(tmp_path: Path) -> None:
    """A queue with no demand has no fair share: its use/fair was `nan` in the table and
    `NaN` (not JSON) in summary.json; now `—` and null."""
    argv = _replay_files(tmp_path, HEADER + "\n" + "".join(
        f"b{i},b,low,0,100,1,1,1000,1000,1024\n" for i in range(3)))
    res = runner.invoke(app, [*argv, "--out", str(tmp_path / "out"), "--no-plots"],
                        env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "nan" not in res.output.lower(), res.output
    row = next(line for line in res.output.splitlines() if line.lstrip().startswith("a "))
    assert "—" in row, res.output

    def refuse(constant: str) -> None:
        raise AssertionError(f"summary.json holds {constant}")

    summary = json.loads((tmp_path / "out" / "summary.json").read_text(),
                         parse_constant=refuse)
    by_queue = {q["queue"]: q for q in summary["queues"]}
    assert by_queue["a"]["usage_over_fair"] is None
    assert by_queue["b"]["usage_over_fair"] == pytest.approx(1.0)


@pytest.mark.parametrize("argv", [["dev", "kubectl", "get", "pods"], ["dev", "build"]],
                         ids=["dev kubectl", "dev build"])
def test_low_bad_xdg_cache_home_in_dev_kubectl_and_dev_build_is_one_line_naming_it(
        tmp_path: Path, argv: list[str]) -> None:
    """`dev build` printed a traceback, `dev kubectl` blamed a missing build (and `dev build`
    would then fail too) when XDG_CACHE_HOME cannot hold the cache."""
    env = {**os.environ, "XDG_CACHE_HOME": "/proc/nope"}
    res = subprocess.run([sys.executable, "-m", "gpugov", *argv], env=env, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "XDG_CACHE_HOME=/proc/nope" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_low_device_plugin_says_what_it_waits_for_on_an_empty_inventory_and_dead_api(
        tmp_path: Path) -> None:
    """With an inventory offering no GPU, no kubelet yet and an API server that does not
    answer, `node device-plugin` sat silent (15 s and more); it now says it serves nothing and
    waits for the kubelet, naming the socket."""
    import selectors
    import signal
    import time

    (tmp_path / "inventory.json").write_text('{"v": 1, "devices": []}')
    (tmp_path / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n")
    (tmp_path / "plugins").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpugov", "node", "device-plugin", "--node-name", "n1",
         "--devices", str(tmp_path / "inventory.json"), "--kubeconfig",
         str(tmp_path / "kubeconfig"), "--plugin-dir", str(tmp_path / "plugins"),
         "--state-dir", str(tmp_path / "state")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    said = ""
    try:
        sel = selectors.DefaultSelector()
        assert proc.stderr is not None
        sel.register(proc.stderr, selectors.EVENT_READ)
        give_up = time.monotonic() + 120  # a bound against a hang, not a speed assertion
        while "waiting for the kubelet" not in said and time.monotonic() < give_up:
            if sel.select(timeout=1) and (line := proc.stderr.readline()):
                said += line
            elif proc.poll() is not None:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert "offers no GPU: serving no resource" in said, said
    assert f"waiting for the kubelet: no {tmp_path / 'plugins' / 'kubelet.sock'} yet" in said


def test_low_usage_errors_are_one_line_and_never_suggest_a_deprecated_spelling() -> None:
    """A mistyped option was a boxed panel four lines down, suggesting hidden deprecated
    spellings (`--jobs` for simulate's `--workers`)."""
    res = runner.invoke(app, ["simulate", "--bogus"])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: No such option: --bogus"), lines
    assert "--jobs" not in lines[0] and "see `gpugov simulate -h`" in lines[0]


def test_low_failed_why_parts_add_up_to_the_failed_column() -> None:
    """The failed-by-reason table rounded each mean on its own: 190 + 14 + 100 beside a
    `failed` of 305. The parts now add up to the rounded total (largest remainders)."""
    from hypothesis import given
    from hypothesis import strategies as st

    from gpugov.cli.study import _whole_parts

    assert _whole_parts([190.4, 14.3, 100.3], 305.0) == [191, 14, 100]

    @given(st.lists(st.integers(0, 3000), min_size=1, max_size=5), st.integers(1, 10))
    def parts_add_up(counts: list[int], seeds: int) -> None:
        means = [c / seeds for c in counts]
        total = sum(counts) / seeds
        parts = _whole_parts(means, total)
        assert sum(parts) == round(total)
        assert all(abs(p - m) < 1 for p, m in zip(parts, means, strict=True))

    parts_add_up()


def test_low_top_cells_never_show_nan_or_inf() -> None:
    """`top` formatted whatever number it got: a NaN fair share printed `nan`."""
    from gpugov.observe import top

    assert top._num(float("nan")) == "—" and top._num(float("inf")) == "—"
    assert top._num(None) == "—" and top._num(1.5) == "1.50"
