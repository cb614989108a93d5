"""Bad input to the observation commands: exit 2 with a message naming option and value."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpugov.cli import app

P = ["--prometheus", "http://127.0.0.1:9"]


@pytest.mark.parametrize("args, words", [
    (["reconcile", *P, "--listen", "nowhere"], "--listen 'nowhere': expected HOST:PORT"),
    (["reconcile", *P, "--window", "2 minutes"], "--window '2 minutes'"),
    (["reconcile", *P, "--idle-threshold", "5"], "--idle-threshold must be within 0..1"),
    (["reconcile", *P, "--interval", "0"], "must be a finite number > 0"),
    (["reconcile", "--prometheus", "prometheus:9090"], "expected an http:// or https:// URL"),
    (["top", "--once", *P, "--window", "5 m"], "--window '5 m'"),
    (["rightsize", *P, "--headroom", "-1"], "must be a finite number >= 0"),
    (["rightsize", *P, "--headroom", "11"], "--headroom must be within 0..10"),
    (["report", *P, "--gpu-hour-price", "-2"], "must be a finite number >= 0"),
])
def test_bad_options_exit_2(args, words) -> None:
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and words in r.output, r.output


def test_bad_queue_config_names_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "queues.yaml"
    cfg.write_text("queues:\n  - name: a\n    quota: {gpux: 1}\n")
    r = CliRunner().invoke(app, ["reconcile", *P, "--queues", str(cfg)])
    assert r.exit_code == 2 and "gpux" in r.output and str(cfg) in r.output, r.output
