"""The table commands at 80 columns (issue 22, must-show): nothing wider than the terminal,
no cell cut (`…`), and no number wrapped away from its row or label."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from gpugov.cli import app

LONE_NUMBER = re.compile(r"[\d.,/%±+\-]+")


@pytest.mark.parametrize("argv", [
    ["modes"], ["modes", "--mixed"], ["replay", "--scenario", "mixed"],
    ["mig", "layouts", "--model", "A100-SXM4-40GB"],
], ids=lambda a: " ".join(a))
def test_table_commands_at_80_columns_keep_every_number_whole(argv: list[str]) -> None:
    """`modes` wrapped `2.32 / 9%` over two lines and left `23` alone on the last line of its
    refused-pods sentence; `modes --mixed` cut its title mid-word."""
    res = CliRunner().invoke(app, argv, env={"COLUMNS": "80"}, terminal_width=80)
    assert res.exit_code == 0, res.output
    for line in res.output.splitlines():
        assert len(line) <= 80, line
        assert "…" not in line, line
        assert not LONE_NUMBER.fullmatch(line.strip()), f"a number wrapped alone: {line!r}"
    if argv == ["modes", "--mixed"]:
        assert "policy bestfit" in " ".join(res.output.split())
