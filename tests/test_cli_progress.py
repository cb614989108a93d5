"""`gpugov modes --mixed` shows progress like plain `modes` (issue 23: every command that can
run longer than 2 s; at --pod-count 1,000,000 per tier it runs for many minutes)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.sim import progress
from gpugov.sim.modes import mixed_scenario


def test_mixed_scenario_ticks_over_every_pod_of_every_tier() -> None:
    seen: list[int] = []
    mixed_scenario(300, 0, tick=seen.append)
    assert seen == sorted(seen) and seen[0] == 0 and seen[-1] == 3 * 300
    assert len(seen) >= 3  # now and then, not only at the ends


def test_modes_mixed_in_a_pipe_prints_plain_progress_lines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In a pipe (no terminal) the lines go to stderr; stdout keeps only the table."""
    real = progress.Ticker

    def eager(*args, **kwargs):  # type: ignore[no-untyped-def]
        return real(*args, **{**kwargs, "first_after": 0, "every": 0})

    monkeypatch.setattr(progress, "Ticker", eager)
    res = CliRunner().invoke(app, ["modes", "--mixed", "--pod-count", "300"])
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert lines and all(line.startswith("modes --mixed: ") for line in lines), res.stderr
    assert "(900/900 pods)" in lines[-1]
    assert "modes --mixed:" not in res.stdout


def test_the_fgd_study_in_a_pipe_prints_plain_progress_lines(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`experiment fgd` (6 policies × 10 seeds by default: minutes) into a pipe: rich's bar
    printed only its final state there; now a line per step once the study has run 2 s."""
    real = progress.Ticker
    monkeypatch.setattr(progress, "Ticker", lambda *a, **k: real(
        *a, **{**k, "first_after": 0, "every": 0}))
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
            f"node-{i},32000,131072,4,T4\n" for i in range(3)))
    (trace / "openb_pod_list_tiny.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
            f"pod-{i},1000,2048,1,{(250, 500, 1000)[i % 3]}\n" for i in range(12)))
    res = CliRunner().invoke(app, ["experiment", "fgd", "--trace-dir", str(trace),
                                   "--workload", "tiny", "--policy", "fgd,bestfit",
                                   "--seeds", "1-2", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.stderr.splitlines() if "experiments)" in line]
    assert [line.split(", ")[0] for line in lines] == [
        f"openb_pod_list_tiny: 2 policies x 2 seeds: {p}% ({n}/4 experiments)"
        for p, n in ((25, 1), (50, 2), (75, 3), (100, 4))], res.stderr


def _eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Ticker prints at each update, as a run past 2 s does in a pipe."""
    real = progress.Ticker
    monkeypatch.setattr(progress, "Ticker", lambda *a, **k: real(
        *a, **{**k, "first_after": 0, "every": 0}))


def test_openb_jobs_in_a_pipe_prints_plain_progress_lines(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A 10x openb trace takes seconds: its three passes show on stderr; stdout and the job
    file are what a quiet run gives."""
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,creation_time,"
                    "deletion_time\n" + "".join(
                        f"pod-{i},1000,2048,1,500,LS,{i},{i + 100}\n" for i in range(5000)))
    quiet = CliRunner().invoke(app, ["openb-jobs", str(pods), "--out", str(tmp_path / "q")])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.output
    _eager(monkeypatch)
    res = CliRunner().invoke(app, ["openb-jobs", str(pods), "--out", str(tmp_path / "e")])
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert len(lines) >= 3 and all(line.startswith("openb-jobs: ") for line in lines)
    assert "(15000/15000 rows, 3 passes)" in lines[-1], res.stderr
    assert res.stdout == quiet.stdout.replace(str(tmp_path / "q"), str(tmp_path / "e"))
    assert (tmp_path / "e").read_bytes() == (tmp_path / "q").read_bytes()


def test_plan_mig_in_a_pipe_prints_its_steps_as_plain_lines(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`plan mig` on the openb cluster (6,212 GPUs) takes seconds: its steps show on stderr,
    stdout keeps the table unchanged."""
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"node-{i},32000,131072,8,A100\n" for i in range(4)))
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
        f"pod-{i},1000,2048,1,{(100, 250, 500, 1000)[i % 4]}\n" for i in range(40)))
    args = ["plan", "mig", "--nodes", str(nodes), "--pods", str(pods)]
    quiet = CliRunner().invoke(app, args)
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.output
    real = progress.Steps
    monkeypatch.setattr(progress, "Steps", lambda *a, **k: real(
        *a, **{**k, "first_after": 0, "every": 3600}))
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert [line.split(", ")[0] for line in res.stderr.splitlines()] == [
        "plan mig: starting", "plan mig: reading the nodes and pods",
        "plan mig: planning layouts of 32 GPUs for 40 pods"], res.stderr
    assert res.stdout == quiet.stdout


def test_crd_convert_in_a_pipe_prints_its_steps_as_plain_lines(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Thousands of queues and tenants take seconds to convert (YAML in and out): each
    step shows on stderr, both ways; stdout is the YAML a quiet run gives."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[1] / "docs" / "openb-queues.yaml"
    quiet = CliRunner().invoke(app, ["crd", "convert", str(config)])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.output
    (tmp_path / "objects.yaml").write_text(quiet.stdout)
    back = CliRunner().invoke(app, ["crd", "convert", "--to", "config",
                                    str(tmp_path / "objects.yaml")])
    assert back.exit_code == 0, back.output
    real = progress.Steps
    monkeypatch.setattr(progress, "Steps", lambda *a, **k: real(
        *a, **{**k, "first_after": 0, "every": 3600}))
    res = CliRunner().invoke(app, ["crd", "convert", str(config)])
    assert res.exit_code == 0, res.output
    n = quiet.stdout.count("\nkind: ") + quiet.stdout.startswith("kind: ")
    assert [line.split(", ")[0] for line in res.stderr.splitlines()] == [
        "crd convert: starting", f"crd convert: reading {config}",
        f"crd convert: checking the config {config}",
        f"crd convert: writing {n} objects as YAML"], res.stderr
    assert res.stdout == quiet.stdout
    res = CliRunner().invoke(app, ["crd", "convert", "--to", "config",
                                   str(tmp_path / "objects.yaml")])
    assert res.exit_code == 0, res.output
    assert [line.split(", ")[0] for line in res.stderr.splitlines()][-2:] == [
        f"crd convert: converting {n} objects", "crd convert: writing the config"]
    assert res.stdout == back.stdout
