"""`gpugov mig` and `gpugov plan mig`: the exit-code contract scripts rely on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpugov.cli import app

runner = CliRunner()
TRACES = Path(__file__).resolve().parents[1] / "../shared/traces/alibaba-gpu-v2023"


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["--model", "A100-SXM4-40GB", "4g.20gb", "3g.20gb"], 0, "4g.20gb@0 3g.20gb@4"),
        (["--model", "H100-SXM5-80GB", "3g.40gb", "3g.40gb", "1g.10gb"], 1, "memory slices"),
        (["--model", "H100-SXM5-80GB", "4g.40gb", "2g.20gb", "2g.20gb"], 1, "does not fit"),
        (["--model", "H100-SXM5-80GB", "1g.5gb"], 2, "valid: 1g.10gb"),
        (["--model", "L40S", "1g.10gb"], 2, "no MIG geometry"),
    ],
)
def test_mig_check_exit_codes(args: list[str], code: int, text: str) -> None:
    result = runner.invoke(app, ["mig", "check", *args])
    assert result.exit_code == code
    assert text in result.output


def test_mig_layouts_json_lists_every_maximal_layout() -> None:
    result = runner.invoke(app, ["mig", "layouts", "--model", "H100-NVL", "--maximal", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["count"] == 28 == len(data["layouts"])
    assert all(row["placement"] for row in data["layouts"])


def test_plan_mig_on_a_small_trace(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1000,2,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                    "a,1,1,1,400\nb,1,1,1,300\nc,1,1,1,100\n")
    out = tmp_path / "plan.yaml"
    result = runner.invoke(app, ["plan", "mig", "--cluster", str(nodes), "--pods", str(pods),
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "planner" in result.output and "version: v1" in out.read_text()


@pytest.mark.skipif(not TRACES.exists(), reason="openb traces not found at ../shared/traces")
def test_plan_mig_on_openb_serves_more_than_static_layouts() -> None:
    from gpugov.sim.mig_plan import run

    report = run(TRACES / "openb_node_list_gpu_node.csv", TRACES / "openb_pod_list_default.csv",
                 "H100-SXM5-80GB")
    served = {r.name: r.served_slices for r in report.rows}
    assert report.gpus == 6212
    assert served["gpugov planner"] > served["static mixed (mig-parted all-balanced)"]
    assert served["gpugov planner"] > served["static 7×1g.10gb"]
    assert served["gpugov planner"] >= served["static whole GPUs (MIG off)"]
