"""`gpugov experiment fgd` and `gpugov simulate` as users and scripts call them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpugov.cli import app

runner = CliRunner()
NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"node-{i},32000,131072,{(2, 4, 8)[i % 3]},{('T4', 'G2')[i % 2]}\n" for i in range(6))
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
    f"pod-{i:03d},{1000 + 500 * (i % 4)},2048,{(0, 1, 1, 1, 2)[i % 5]},"
    f"{(0, 250, 500, 1000, 1000)[i % 5]},{'T4' if i % 7 == 0 else ''}\n" for i in range(40))


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    d = tmp_path / "trace"
    d.mkdir()
    (d / "openb_node_list_gpu_node.csv").write_text(NODES)
    (d / "openb_pod_list_tiny.csv").write_text(PODS)
    return d


def fgd(trace: Path, out: Path, *extra: str):
    return runner.invoke(app, ["experiment", "fgd", "--trace-dir", str(trace), "--workload",
                               "openb_pod_list_tiny", "--seeds", "1-2", "--out", str(out),
                               *extra])


def test_writes_the_artifact_layout_and_a_plot(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = fgd(trace, out, "--policy", "all")
    assert res.exit_code == 0, res.output
    header = (out / "alloc_discrete.csv").read_text().splitlines()[0].split(",")
    assert header[:5] == ["workload", "sc_policy", "tune", "seed", "total_gpus"]
    assert header[5:] == [str(k) for k in range(131)]
    rows = (out / "frag_ratio_discrete.csv").read_text().splitlines()[1:]
    labels = {r.split(",")[1] for r in rows}
    assert labels == {"01-Random", "02-DotProd", "03-GpuClustering", "04-GpuPacking",
                      "05-BestFit", "06-FGD"}
    assert all(r.startswith("openb_pod_list_tiny,") and ",1.3," in r for r in rows)
    assert (out / "alloc_curves.png").stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    fgd_row = next(r for r in summary["policies"] if r["policy"] == "06-FGD")
    assert summary["end_column"] == 130 and fgd_row["seeds"] == 2
    at_end = fgd_row["alloc_at_end"]["mean"]  # None when no arrival rounded to 130 %
    assert at_end is None or 0 < at_end <= 100
    assert fgd_row["failed_pods"] == sum(fgd_row["failed_by_reason"].values())
    assert "06-FGD" in res.output


def test_output_is_byte_identical_for_the_same_inputs(trace: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert fgd(trace, a, "--policy", "fgd", "--policy", "random").exit_code == 0
    assert fgd(trace, b, "--policy", "random", "--policy", "fgd", "--jobs", "2").exit_code == 0
    for name in ("alloc_discrete.csv", "frag_discrete.csv", "frag_ratio_discrete.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes()


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (lambda d: None, ["--policy", "tetris"], "unknown policy 'tetris'"),
        (lambda d: None, ["--seeds", "x-y"], "bad seed list"),
        (lambda d: (d / "openb_pod_list_tiny.csv").write_text(PODS + "bad,1,-2,1,100,\n"),
         [], "line 42, field 'memory_mib'"),
        (lambda d: (d / "openb_node_list_gpu_node.csv").write_text("sn,cpu_milli,gpu\n"),
         [], "missing column"),
        (lambda d: (d / "openb_pod_list_tiny.csv").unlink(), [], "cannot read"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message_and_writes_nothing(
        trace: Path, tmp_path: Path, setup, args, message) -> None:
    setup(trace)
    out = tmp_path / "out"
    res = fgd(trace, out, *args)
    assert res.exit_code == 2
    assert message in res.output
    assert not out.exists() or not any(out.iterdir())


def test_simulate_runs_a_user_trace(trace: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", "--nodes", str(trace / "openb_node_list_gpu_node.csv"),
                              "--pods", str(trace / "openb_pod_list_tiny.csv"), "--seeds", "1",
                              "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "alloc_discrete.csv").exists()
    bad = runner.invoke(app, ["simulate", "--nodes", str(trace / "x.csv")])
    assert bad.exit_code == 2 and "both --nodes and --pods" in bad.output


def test_simulate_builtin_default_compares_all_policies(tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", "--seeds", "1", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    for label in ("01-Random", "02-DotProd", "05-BestFit", "06-FGD"):
        assert label in res.output


def test_empty_trace_and_gpu_less_cluster_are_refused_not_run(tmp_path: Path) -> None:
    """Issue 13 item 11: header-only or GPU-less inputs used to print nan tables, exit 0."""
    d = tmp_path / "t"
    d.mkdir()
    nodes = d / "openb_node_list_gpu_node.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nc0,4000,4096,0,\n")
    (d / "openb_pod_list_empty.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n")
    (d / "openb_pod_list_cpu.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                              "a,1000,100,0,0\nb,1000,100,1,500\n")
    for workload in ("empty", "cpu"):
        res = runner.invoke(app, ["experiment", "fgd", "--trace-dir", str(d), "--workload",
                                  workload, "--seeds", "1", "--out", str(tmp_path / workload)])
        assert res.exit_code == 2, res.output
        assert str(nodes) in res.output and "none of the 1 nodes has a GPU" in res.output
        assert not (tmp_path / workload).exists()
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\ng0,4000,4096,1,T4\n")
    res = runner.invoke(app, ["experiment", "fgd", "--trace-dir", str(d), "--workload",
                              "empty", "--seeds", "1", "--out", str(tmp_path / "e")])
    assert res.exit_code == 2 and "openb_pod_list_empty.csv: no pods" in res.output


def test_simulate_with_the_gpugov_policy_places_pods_and_reports_it(tmp_path) -> None:
    """Issue 22, finding 2: `--policy gpugov` printed an empty table and wrote empty files
    (with another policy, gpugov was silently dropped)."""
    import json as _json

    from typer.testing import CliRunner

    from gpugov.cli import app

    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["simulate", "--policy", "gpugov", "--policy", "fgd",
                                 "--seeds", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    summary = _json.loads((out / "summary.json").read_text())
    text = _json.dumps(summary)
    assert "gpugov" in text and "fgd" in text.lower()
    rows = (out / "alloc_discrete.csv").read_text().splitlines()
    assert any(",07-gpugov," in row for row in rows[1:]), rows[:3]
    r = CliRunner().invoke(app, ["simulate", "--policy", "", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--policy: no policy named" in r.output, r.output


@pytest.mark.parametrize("tune", ["0.5", "0.05"])
def test_a_small_tune_writes_its_chart_instead_of_crashing_after_the_work(tmp_path, tune):
    """Issue 22, finding 3: below ~0.85 the PNG's zoom had zero width (NaN) and the run died
    after all its work."""
    from typer.testing import CliRunner

    from gpugov.cli import app

    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["simulate", "--tune", tune, "--policy", "fgd", "--seeds", "1",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "alloc_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_trace_of_identical_pods_writes_every_file(tmp_path: Path) -> None:
    """12 pods of one shape on 3 x 4 T4 pack without any fragmentation: the PNG's flat
    fragmentation panel once crashed the command after the work was done."""
    d = tmp_path / "trace"
    d.mkdir()
    (d / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
            f"node-{i},32000,131072,4,T4\n" for i in range(3)))
    (d / "openb_pod_list_same.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
            f"pod-{i:02d},1000,2048,1,500\n" for i in range(12)))
    out = tmp_path / "out"
    res = runner.invoke(app, ["experiment", "fgd", "--trace-dir", str(d), "--workload",
                              "openb_pod_list_same", "--seeds", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "alloc_curves.png").stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert {r["policy"] for r in summary["policies"]} >= {"06-FGD"}
    frag = (out / "frag_discrete.csv").read_text().splitlines()[1].split(",")[5:]
    assert {float(v) for v in frag if v} == {0.0}
