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
