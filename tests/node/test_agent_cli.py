"""`gpugov node agent` / `gpugov node exporter`: bad input is refused with exit code 2 and a
message naming the option, the value and what is allowed."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpugov.cli import app


@pytest.mark.parametrize("args, message", [
    (["node", "exporter", "--listen", "localhost"], "--listen 'localhost': expected HOST:PORT"),
    (["node", "exporter", "--regions", "/nonexistent/regions"], "not a folder"),
    (["node", "exporter", "--recovery-seconds", "-1"], "must be a finite number >= 0"),
    (["node", "agent", "--node-name", "n", "--mode", "shared"],
     "--mode 'shared'; allowed: exclusive, soft, timeslice, mps"),
    (["node", "agent", "--node-name", "n", "--replicas", "4"], "--replicas 4: must be 1"),
    (["node", "agent", "--node-name", "n", "--kubeconfig", "/nonexistent"], "no such file"),
])
def test_bad_options_exit_2(args, message):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_bad_mig_config_file_exit_2(tmp_path):
    cfg = tmp_path / "plan.yaml"
    cfg.write_text("version: v1\nmig-configs:\n  a:\n    - devices: [0]\n"
                   "      mig-enabled: maybe\n")
    r = CliRunner().invoke(app, ["node", "agent", "--node-name", "n", "--mig-config", str(cfg)])
    assert r.exit_code == 2
    assert "mig-configs.a[0].mig-enabled: 'maybe'; allowed: true or false" in r.output


def test_nvidia_config_errors_name_the_field_and_it_replaces_mode(tmp_path):
    cfg = tmp_path / "plugin-config.yaml"
    cfg.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                   "    - name: example.com/gpu\n      replicas: 2\n")
    r = CliRunner().invoke(app, ["node", "agent", "--node-name", "n", "--nvidia-config",
                                 str(cfg)])
    assert r.exit_code == 2 and "sharing.timeSlicing.resources[0].name" in r.output
    r = CliRunner().invoke(app, ["node", "agent", "--node-name", "n", "--nvidia-config",
                                 str(cfg), "--mode", "mps"])
    assert r.exit_code == 2 and "drop --mode/--replicas" in r.output
