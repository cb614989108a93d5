"""What a user reads from `gpugov replay`: the table fits an 80-column terminal without cutting
a number, every plot axis says what it measures, and the queue file reads numbers as YAML 1.2
does (`1e1` is ten, not a string)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.control.config import load_config
from gpugov.sim.replay import replay
from gpugov.sim.replay_report import figures, plots
from gpugov.sim.scenario import scenario_config, scenario_jobs, scenario_nodes

runner = CliRunner()


def test_replay_table_fits_80_columns_and_cuts_no_number(tmp_path: Path) -> None:
    res = runner.invoke(app, ["replay", "--out", str(tmp_path / "r"), "--no-plots"],
                        env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = [x for x in res.output.splitlines() if not x.startswith(("wrote ", "warning:"))]
    assert max(len(x) for x in lines) <= 80, "\n".join(lines)
    assert "…" not in res.output
    summ = json.loads((tmp_path / "r" / "summary.json").read_text())
    for q in summ["queues"]:
        row = next(x for x in lines if x.split() and x.split()[0] == q["queue"])
        cells = row.split()
        assert cells[4:7] == [f"{q[k]:.0f}" for k in ("wait_p50_s", "wait_p95_s", "wait_p99_s")]
        assert cells[-1] == str(q["preempted"])


def test_every_replay_plot_axis_is_labelled(tmp_path: Path) -> None:
    res = replay(scenario_config(), scenario_nodes(), scenario_jobs()[:60])
    figs = figures(res)
    assert set(figs) == {"usage_vs_fair_share.png", "allocation_and_waits.png"}
    for name, fig in figs.items():
        for ax in fig.axes:
            if ax.axison:
                assert ax.get_xlabel() and ax.get_ylabel(), f"{name}: {ax.get_title()!r}"
    assert all(png.startswith(b"\x89PNG") for png in plots(res).values())


def test_queue_file_reads_exponent_numbers_and_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_bytes("\ufeffqueues:\n  - {name: a, quota: {gpu: 1e1}}\n".encode())
    cfg = load_config(path)
    assert cfg.queues[0].quota["gpu"] == 10
