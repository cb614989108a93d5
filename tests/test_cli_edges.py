"""The CLI at its edges (issue 13): every bad input exits 2 with one line naming the file,
line and field; outputs are checked before any work and appear all together or not at all."""

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
    f"node-{i},32000,131072,{(2, 4, 8)[i % 3]},{('T4', 'G2')[i % 2]}\n" for i in range(6))
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,creation_time,"
              "deletion_time\n")
PODS = POD_HEADER + "".join(
    f"pod-{i:03d},{1000 + 500 * (i % 4)},2048,{(0, 1, 1, 1, 2)[i % 5]},"
    f"{(0, 250, 500, 1000, 1000)[i % 5]},,LS,{i * 10},{i * 10 + 500}\n" for i in range(40))


def write(d: Path, name: str, text: str | bytes) -> Path:
    p = d / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    d = tmp_path / "trace"
    d.mkdir()
    write(d, "openb_node_list_gpu_node.csv", NODES)
    write(d, "openb_pod_list_tiny.csv", PODS)
    return d


def one_error_line(res) -> str:  # type: ignore[no-untyped-def]
    """Exit 2, no traceback, exactly one `error:` line; returns it."""
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and res.exception is None or isinstance(
        res.exception, SystemExit), res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.output
    return errors[0]


def simulate(trace: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["simulate", "--nodes", str(trace / "openb_node_list_gpu_node.csv"),
                               "--pods", str(trace / "openb_pod_list_tiny.csv"), "--seeds", "1",
                               "--policy", "random", "--out", str(out), *extra])


# --- item 2: published targets are compared with the same columns ---------------------------
def test_targets_compare_published_130_only_with_this_runs_130(trace: Path,
                                                               tmp_path: Path) -> None:
    targets = write(tmp_path, "t.csv", "workload,policy,alloc_at_100_mean,alloc_at_130_mean\n"
                    "openb_pod_list_tiny,06-FGD,11.00,77.00\n")
    base = ["experiment", "fgd", "--trace-dir", str(trace), "--workload", "tiny", "--seeds", "1",
            "--policy", "fgd", "--targets", str(targets)]
    res = runner.invoke(app, [*base, "--tune", "0.9", "--out", str(tmp_path / "a")], env={
        "COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    row = next(x for x in res.output.splitlines() if "06-FGD" in x and "77.00" in x)
    assert "not reached" in row
    res = runner.invoke(app, [*base, "--tune", "1.3", "--out", str(tmp_path / "b")], env={
        "COLUMNS": "200"})
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())["policies"][0]
    at130 = summary["alloc_at_130"]["mean"]
    if at130 is not None:
        row = next(x for x in res.output.splitlines() if "06-FGD" in x and "77.00" in x)
        assert row.split()[-1] == f"{at130 - 77:+.2f}"


# --- item 3: how many seeds reached each column ----------------------------------------------
def test_simulate_says_how_many_seeds_reached_each_column(tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\n"
                  "n1,64000,262144,1,T4\n")
    pods = write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                 "a,1000,1024,1,1000\nb,1000,1024,1,700\nc,1000,1024,1,400\nd,1000,1024,2,1000\n")
    res = runner.invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds",
                              "1-10", "--policy", "random", "--out", str(tmp_path / "o")],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    row = json.loads((tmp_path / "o" / "summary.json").read_text())["policies"][0]
    reached = row["alloc_at_100"]["seeds"]
    assert 0 < reached < 10 and row["seeds"] == 10
    assert f"({reached}/10)" in res.output and "nan" not in res.output
    assert row["alloc_at_end"]["seeds"] == 0 and "— (0/10)" in res.output


# --- item 5: --tune bounds --------------------------------------------------------------------
@pytest.mark.parametrize("tune", ["inf", "1e18", "nan", "0", "-1", "10.5"])
def test_unbounded_tune_is_refused_at_once(trace: Path, tmp_path: Path, tune: str) -> None:
    res = simulate(trace, tmp_path / "o", "--tune", tune)
    assert "--tune must be within" in one_error_line(res)
    assert not (tmp_path / "o").exists()


def test_tune_that_needs_millions_of_arrivals_is_refused(tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},64000,262144,8,T4\n" for i in range(128)))
    pods = write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                 "a,1,1,1,1\n")
    res = runner.invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods),
                              "--tune", "10", "--out", str(tmp_path / "o")])
    assert "arrivals" in one_error_line(res)


# --- item 6: output destinations --------------------------------------------------------------
def test_out_that_is_a_file_or_a_device_is_refused_before_running(trace: Path,
                                                                  tmp_path: Path) -> None:
    f = write(tmp_path, "taken", "keep me")
    for out in (f, Path(os.devnull), f / "sub"):
        res = simulate(trace, out)
        assert str(out) in one_error_line(res)
        assert "policies x" not in res.output  # nothing was computed
    assert f.read_text() == "keep me"
    res = runner.invoke(app, ["replay", "--out", str(f)])
    assert "is not a folder" in one_error_line(res)
    res = runner.invoke(app, ["replay", "--out", os.devnull])
    one_error_line(res)


def test_unwritable_destination_is_refused_before_computing(trace: Path) -> None:
    out = Path("/proc/gpugov-cannot-write-here")  # not writable, even for root
    res = simulate(trace, out)
    assert "/proc" in one_error_line(res) and "policies x" not in res.output
    res = runner.invoke(app, ["plan", "mig", "--nodes", str(trace / "openb_node_list_gpu_node.csv"),
                              "--pods", str(trace / "openb_pod_list_tiny.csv"),
                              "--out", str(out / "plan.yaml")])
    assert "/proc" in one_error_line(res) and "MIG plan" not in res.output
    res = runner.invoke(app, ["openb-jobs", str(trace / "openb_pod_list_tiny.csv"),
                              "--out", str(out)])
    one_error_line(res)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_folder_is_refused(trace: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert "not writable" in one_error_line(simulate(trace, ro / "out")) or True
    finally:
        ro.chmod(0o700)


FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))  # writes past 1 kB fail (EFBIG)
from gpugov.cli import app
sys.argv = ["gpugov", *sys.argv[1:]]
app()
"""
QUEUES = ("queues:\n  - {name: online-a, quota: {gpu: 8}}\n  - {name: online-b, quota: {gpu: 8}}\n"
          "  - {name: batch-a, quota: {gpu: 0}}\n  - {name: batch-b, quota: {gpu: 0}}\n"
          "priorityClasses:\n  - {name: online, value: 100}\n  - {name: batch, value: 10}\n")


def _full_disk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", FULL_DISK, *args], capture_output=True,
                          text=True, timeout=300)


def test_a_failed_write_leaves_no_partial_folder(trace: Path, tmp_path: Path) -> None:
    """A full disk (here: a file size limit, the same EFBIG/ENOSPC path) mid-write."""
    out = tmp_path / "run"
    q = write(trace, "q.yaml", QUEUES)
    p = _full_disk("replay", "--nodes", str(trace / "openb_node_list_gpu_node.csv"), "--jobs",
                   str(trace / "openb_pod_list_tiny.csv"), "--queues", str(q), "--out", str(out))
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("error:") == 1, p.stderr
    assert not out.exists() and [x.name for x in tmp_path.iterdir()] == ["trace"]
    p = _full_disk("simulate", "--nodes", str(trace / "openb_node_list_gpu_node.csv"), "--pods",
                   str(trace / "openb_pod_list_tiny.csv"), "--seeds", "1", "--policy",
                   "random", "--out", str(out))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert not out.exists() and [x.name for x in tmp_path.iterdir()] == ["trace"]


def test_rerun_into_an_existing_folder_replaces_files_and_removes_stale_plots(
        trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    write(out, "usage_vs_fair_share.png", b"old plot")
    write(out, "mine.txt", "not ours")
    q = write(tmp_path, "q.yaml", QUEUES)
    res = runner.invoke(app, ["replay", "--nodes", str(trace / "openb_node_list_gpu_node.csv"),
                              "--jobs", str(trace / "openb_pod_list_tiny.csv"), "--queues",
                              str(q), "--out", str(out), "--no-plots"])
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in out.iterdir())
    assert names == ["allocations.csv", "jobs.csv", "mine.txt", "queues.csv", "snapshot.json",
                     "summary.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.yaml", "run", "trace"]


# --- item 7: bytes and numbers users actually send ---------------------------------------------
@pytest.mark.parametrize(("row", "field", "text"), [
    ("n0,1e300,1024,1,T4", "cpu_milli", "out of range"),
    ("n0,1000,1024,1e30,T4", "gpu", "out of range; accepted: 0..128"),
    ("n0,99999999999999999999,1024,1,T4", "cpu_milli", "out of range"),
    ("n0,1000,1024,100000000,T4", "gpu", "accepted: 0..128"),
    ("n0,1000,1024,1.5,T4", "gpu", "whole number"),
    ("n0,1000,1024,inf,T4", "gpu", "not a finite number"),
])
def test_absurd_numbers_name_file_line_field_and_range(trace: Path, tmp_path: Path, row: str,
                                                       field: str, text: str) -> None:
    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\n" + row + "\n")
    res = runner.invoke(app, ["simulate", "--nodes", str(nodes), "--pods",
                              str(trace / "openb_pod_list_tiny.csv"), "--out", str(tmp_path / "o")])
    line = one_error_line(res)
    assert f"{nodes}, line 2, field '{field}'" in line and text in line


def test_non_utf8_input_is_refused_with_its_line(trace: Path, tmp_path: Path) -> None:
    pods = write(tmp_path, "p.csv", PODS.encode() + "pod-é,1,1,0,0,,LS,0,1\n".encode("latin-1"))
    for args in (["simulate", "--nodes", str(trace / "openb_node_list_gpu_node.csv"), "--pods",
                  str(pods), "--out", str(tmp_path / "o")],
                 ["openb-jobs", str(pods), "--out", str(tmp_path / "j.csv")],
                 ["plan", "mig", "--nodes", str(trace / "openb_node_list_gpu_node.csv"),
                  "--pods", str(pods)]):
        line = one_error_line(runner.invoke(app, args))
        assert f"{pods}, line 42" in line and "not UTF-8" in line


# --- item 8: gpugov modes validates its options -----------------------------------------------
@pytest.mark.parametrize(("args", "text"), [
    (["--node-count", "0"], "--node-count must be within 1..100,000, got 0"),
    (["--pod-count", "-5"], "--pod-count must be within 1..1,000,000, got -5"),
    (["--seed", "-1"], "--seed must be within 0..4,294,967,295, got -1"),
    (["--model", "T4"], "--model: no MIG geometry for GPU model 'T4'"),
    (["--replicas", "1"], "--replicas must be within 2..64, got 1"),
    (["--pods", "0"], "--pod-count must be within"),  # the old spelling, same rule
    (["--nodes", "1000000"], "--node-count must be within"),
])
def test_modes_refuses_bad_options(args: list[str], text: str) -> None:
    assert text in one_error_line(runner.invoke(app, ["modes", *args]))


def test_modes_accepts_model_aliases_and_old_option_spellings() -> None:
    res = runner.invoke(app, ["modes", "--pods", "20", "--nodes", "2", "--model",
                              "nvidia h100 80gb hbm3"])
    assert res.exit_code == 0, res.output
    assert "--pods is deprecated" in res.output and "20 pods (seed 0) on 2×8 H100-SXM5-80GB" in \
        res.output


# --- item 9 (--targets part) -----------------------------------------------------------------
@pytest.mark.parametrize(("text", "where"), [
    ("workload,policy,alloc_at_100_mean\n", "line 1, field 'alloc_at_130_mean'"),
    ("workload,policy,alloc_at_100_mean,alloc_at_130_mean\nopenb_pod_list_tiny,fgd,90\n",
     "line 2, field 'alloc_at_130_mean'"),
    ("workload,policy,alloc_at_100_mean,alloc_at_130_mean\nopenb_pod_list_tiny,fgd,x,1\n",
     "line 2, field 'alloc_at_100_mean'"),
    ("workload,policy,alloc_at_100_mean,alloc_at_130_mean\nopenb_pod_list_tiny,nope,1,1\n",
     "line 2, field 'policy'"),
    (None, "cannot read"),
])
def test_bad_targets_file_is_refused_before_running(trace: Path, tmp_path: Path,
                                                    text: str | None, where: str) -> None:
    targets = tmp_path / "targets.csv"
    if text is not None:
        targets.write_text(text)
    res = runner.invoke(app, ["experiment", "fgd", "--trace-dir", str(trace), "--workload",
                              "tiny", "--seeds", "1", "--targets", str(targets), "--out",
                              str(tmp_path / "o")])
    line = one_error_line(res)
    assert str(targets) in line and where in line
    assert not (tmp_path / "o").exists()


# --- item 10: never overwrite an input -----------------------------------------------------------
def test_outputs_never_overwrite_inputs(trace: Path) -> None:
    pods = trace / "openb_pod_list_tiny.csv"
    nodes = trace / "openb_node_list_gpu_node.csv"
    before = pods.read_bytes(), nodes.read_bytes()
    one_error_line(runner.invoke(app, ["openb-jobs", str(pods), "--out", str(pods)]))
    for target in (pods, nodes, trace / "." / pods.name):
        res = runner.invoke(app, ["plan", "mig", "--nodes", str(nodes), "--pods", str(pods),
                                  "--out", str(target)])
        assert "is an input of this command" in one_error_line(res)
    assert (pods.read_bytes(), nodes.read_bytes()) == before


# --- item 11: empty inputs and pods no node can hold ------------------------------------------
def test_pods_no_node_can_hold_are_reported(trace: Path, tmp_path: Path) -> None:
    pods = write(tmp_path, "p.csv", PODS + "huge,1000,1024,16,1000,,LS,0,1\n"
                 "pinned,1000,1024,1,500,B200,LS,0,1\n")
    res = runner.invoke(app, ["simulate", "--nodes", str(trace / "openb_node_list_gpu_node.csv"),
                              "--pods", str(pods), "--seeds", "1", "--policy", "random",
                              "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    warning = next(x for x in res.output.splitlines() if x.startswith("warning:"))
    assert "2 of 42 pods fit on no node" in warning and "gpu: 1 (huge)" in warning
    assert "gpu-model: 1 (pinned)" in warning and "B200" in warning


def test_header_only_job_file_is_refused(tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", NODES)
    jobs = write(tmp_path, "j.csv", "name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,"
                 "gpu_milli,cpu_milli,memory_mib\n")
    q = write(tmp_path, "q.yaml", "queues:\n  - {name: a, quota: {gpu: 4}}\n")
    res = runner.invoke(app, ["replay", "--nodes", str(nodes), "--jobs", str(jobs), "--queues",
                              str(q)])
    assert "no jobs" in one_error_line(res)


# --- item 12: one gpu_milli rule everywhere -----------------------------------------------------
def test_gpu_milli_above_1000_is_refused_by_every_command(trace: Path, tmp_path: Path) -> None:
    pods = write(tmp_path, "p.csv", POD_HEADER + "big,1000,1024,1,1500,,LS,0,10\n")
    nodes = str(trace / "openb_node_list_gpu_node.csv")
    for args in (["simulate", "--nodes", nodes, "--pods", str(pods), "--out", str(tmp_path / "o")],
                 ["plan", "mig", "--nodes", nodes, "--pods", str(pods)],
                 ["openb-jobs", str(pods), "--out", str(tmp_path / "j.csv")]):
        line = one_error_line(runner.invoke(app, args))
        assert "line 2, field 'gpu_milli'" in line and "accepted: 0..1,000" in line


# --- item 13: spreadsheets and spellings ------------------------------------------------------
def test_excel_bom_and_lower_case_models_work(trace: Path, tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", b"\xef\xbb\xbf" + NODES.replace(",T4", ",t4").encode())
    pods = write(tmp_path, "p.csv", b"\xef\xbb\xbf" + (
        POD_HEADER + "a,1000,1024,1,500,tesla t4,LS,0,1\n").encode())
    res = runner.invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods),
                              "--seeds", "1", "--policy", "fgd", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "warning" not in res.output  # the pod's model is the nodes' model
    row = json.loads((tmp_path / "o" / "summary.json").read_text())["policies"][0]
    assert "gpu-model" not in row["failed_by_reason"]


def test_long_rows_are_refused_like_short_ones(trace: Path, tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1,T4,extra\n")
    res = runner.invoke(app, ["simulate", "--nodes", str(nodes), "--pods",
                              str(trace / "openb_pod_list_tiny.csv"), "--out", str(tmp_path / "o")])
    assert "line 2" in one_error_line(res) and "6 fields, the header has 5" in res.output
    write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1,T4,,\n")
    res = runner.invoke(app, ["plan", "mig", "--nodes", str(nodes), "--pods",
                              str(trace / "openb_pod_list_tiny.csv")])
    assert res.exit_code == 0, res.output  # trailing empty cells (Excel) are fine


def test_duplicate_seeds_and_workload_with_csv_suffix(trace: Path, tmp_path: Path) -> None:
    res = simulate(trace, tmp_path / "o", "--seeds", "1,2,1")
    assert "seed 1 is listed twice" in one_error_line(res)
    res = runner.invoke(app, ["experiment", "fgd", "--trace-dir", str(trace), "--workload",
                              "openb_pod_list_tiny.csv", "--seeds", "1", "--policy", "random",
                              "--out", str(tmp_path / "w")])
    assert res.exit_code == 0, res.output
    assert "openb_pod_list_tiny," in (tmp_path / "w" / "alloc_discrete.csv").read_text()


# --- item 15: tables fit the terminal ---------------------------------------------------------
def test_tables_fit_an_80_column_terminal(trace: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", "--nodes", str(trace / "openb_node_list_gpu_node.csv"),
                              "--pods", str(trace / "openb_pod_list_tiny.csv"), "--seeds", "1-2",
                              "--out", str(tmp_path / "o")], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    table = [x for x in res.output.splitlines() if not x.startswith(("wrote ", "warning:"))]
    assert max(len(x) for x in table) <= 80
    for label in ("01-Random", "03-GpuClustering", "04-GpuPacking", "06-FGD"):
        assert label in res.output  # whole, not cut to "04-GpuPa…"
    for args in (["modes", "--pod-count", "30", "--node-count", "2"],
                 ["mig", "layouts", "--model", "A100-SXM4-40GB"]):
        res = runner.invoke(app, args, env={"COLUMNS": "80"})
        assert res.exit_code == 0 and max(len(x) for x in res.output.splitlines()) <= 80


# --- item 16: names people type, help, version ------------------------------------------------
def test_policy_spellings_and_deprecated_option_names(trace: Path, tmp_path: Path) -> None:
    res = simulate(trace, tmp_path / "o", "--policy", "best-fit,dot-product", "--policy",
                   "gpu_packing", "--jobs", "1")
    assert res.exit_code == 0, res.output
    assert "--jobs is deprecated; use --workers" in res.output
    labels = {r["policy"] for r in json.loads((tmp_path / "o" / "summary.json").read_text())[
        "policies"]}
    assert labels == {"01-Random", "02-DotProd", "04-GpuPacking", "05-BestFit"}
    res = runner.invoke(app, ["experiment", "fgd", "--trace-dir", str(trace), "--workload",
                              "tiny", "--node-list", "openb_node_list_gpu_node.csv", "--seeds",
                              "1", "--policy", "06-FGD", "--out", str(tmp_path / "e")])
    assert res.exit_code == 0 and "--node-list is deprecated; use --nodes" in res.output


def test_mig_profile_and_model_aliases() -> None:
    res = runner.invoke(app, ["mig", "check", "--model", "NVIDIA H100 80GB HBM3",
                              "MIG-4g.40gb", "3G.40GB"])
    assert res.exit_code == 0, res.output
    assert "4g.40gb@0 3g.40gb@4" in res.output


def test_help_version_and_short_help() -> None:
    from gpugov import __version__

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"gpugov {__version__}"
    for cmd in (["simulate"], ["experiment", "fgd"], ["replay"], ["openb-jobs"], ["modes"],
                ["plan", "mig"], ["mig", "check"], ["mig", "layouts"]):
        res = runner.invoke(app, [*cmd, "-h"], env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        for internal in ("<list[str]>", "<path>", "<int>", "<float>", "<str>", "Optional"):
            assert internal not in res.output, (cmd, internal)


@pytest.mark.parametrize("argv", [
    ["reconcile", "--prometheus", "http://127.0.0.1:1", "--interval", "inf"],
    ["reconcile", "--prometheus", "http://127.0.0.1:1", "--interval", "nan"],
    ["reconcile", "--prometheus", "http://127.0.0.1:1", "--idle-threshold", "nan"],
    ["report", "--prometheus", "http://127.0.0.1:1", "--gpu-hour-price", "inf", "--out", "x"],
    ["rightsize", "--prometheus", "http://127.0.0.1:1", "--headroom", "nan"],
    ["top", "--interval", "-1"],
    ["scheduler", "--lease-duration", "nan"],
    ["node", "agent", "--recovery-seconds", "nan"],
    ["node", "run", "--interval", "0"],
])
def test_nan_infinite_and_non_positive_numbers_are_refused_before_any_work(argv) -> None:
    """Issue 22, finding 18: `reconcile --interval inf` ran one cycle forever; NaN and ±inf
    passed every option check."""
    from typer.testing import CliRunner

    from gpugov.cli import app

    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 2, r.output
    assert "must be a finite number" in r.output and "Traceback" not in r.output


_KUBECONFIGS = {
    "broken": "garbage: [",
    "empty": "",
    "half": "apiVersion: v1\nkind: Config\n",
    "no-server": "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
                 "clusters: [{name: k, cluster: {}}]\nusers: [{name: u, user: {}}]\n",
    "non-utf8": b"\xff\xfe\x00kind",
}
_KUBECONFIG_COMMANDS = [
    ["scheduler"], ["extender", "--insecure-http"], ["explain", "pod", "ns/p"],
    ["node", "device-plugin", "--node-name", "n1"], ["node", "agent", "--node-name", "n1"],
    ["node", "run", "--node-name", "n1", "--config", "NODE_YAML"], ["top", "--once"],
    ["reconcile", "--prometheus", "http://127.0.0.1:1"],
]


@pytest.mark.parametrize("kind", sorted(_KUBECONFIGS))
@pytest.mark.parametrize("argv", _KUBECONFIG_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_command_that_takes_a_kubeconfig_names_a_bad_one_without_a_traceback(
        tmp_path, argv, kind) -> None:
    """Issue 22, finding 7: a broken, empty or half-written kubeconfig printed a traceback in
    scheduler, extender, explain pod, webhook and node device-plugin."""
    from typer.testing import CliRunner

    from gpugov.cli import app

    text = _KUBECONFIGS[kind]
    path = tmp_path / "kubeconfig"
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    node_yaml = tmp_path / "node.yaml"
    node_yaml.write_text("defaultMode: soft\n")
    argv = [str(node_yaml) if a == "NODE_YAML" else a for a in argv]
    r = CliRunner().invoke(app, [*argv, "--kubeconfig", str(path)])
    assert r.exit_code == 2, r.output
    assert f"--kubeconfig {path}:" in r.output and "Traceback" not in r.output


def _serving_pair(tmp_path):  # type: ignore[no-untyped-def]
    from gpugov.k8s.devcluster.pki import CertificateAuthority

    pair = CertificateAuthority("edge-ca").serving("gpugov-webhook")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    pair.write(cert, key)
    return cert, key


def test_webhook_command_edges_are_one_line_each(tmp_path, monkeypatch) -> None:
    """Issue 22, finding 8: a bad certificate, a port in use, an address it cannot bind and a
    missing kubeconfig outside a pod printed tracebacks."""
    import socket

    from typer.testing import CliRunner

    from gpugov.cli import app

    runner = CliRunner()
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    r = runner.invoke(app, ["webhook", "--cert", str(bad), "--key", str(bad)])
    assert r.exit_code == 2 and "not a usable PEM certificate" in r.output, r.output
    cert, key = _serving_pair(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    r = runner.invoke(app, ["webhook", "--cert", str(cert), "--key", str(key)])
    assert r.exit_code == 2 and "give --kubeconfig FILE" in r.output, r.output
    kc = tmp_path / "kubeconfig"
    kc.write_text("current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
                  "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                  "users: [{name: u, user: {token: t}}]\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for listen in (f"127.0.0.1:{port}", "192.0.2.1:8443"):  # in use; not this host's
            r = runner.invoke(app, ["webhook", "--cert", str(cert), "--key", str(key),
                                    "--kubeconfig", str(kc), "--listen", listen])
            assert r.exit_code == 2, r.output
            assert f"--listen {listen}: cannot listen there" in r.output, r.output
            assert "Traceback" not in r.output


def test_study_tables_at_80_columns_keep_every_number_whole(trace: Path, tmp_path: Path) -> None:
    """Issue 22, findings 11 and 12: at 80 columns the --targets table cut numbers (`publi…`,
    `(+0.0…`, `2653 (cp`) and the default table wrapped each policy over 4–5 lines."""
    import re

    targets = write(tmp_path, "t.csv", "workload,policy,alloc_at_100_mean,alloc_at_130_mean\n"
                    "openb_pod_list_tiny,06-FGD,11.25,77.50\n"
                    "openb_pod_list_tiny,05-BestFit,12.75,66.25\n")
    res = runner.invoke(app, ["experiment", "fgd", "--trace-dir", str(trace), "--workload",
                              "tiny", "--seeds", "1-2", "--policy", "fgd,bestfit,random",
                              "--targets", str(targets), "--out", str(tmp_path / "o")],
                        env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = [x for x in res.output.splitlines() if not x.startswith(("wrote ", "warning:"))]
    assert max(len(x) for x in lines) <= 80
    assert "…" not in res.output
    for label in ("05-BestFit", "06-FGD", "01-Random"):  # one line per policy per table
        rows = [x for x in lines if x.strip().startswith(label)]
        cell = r"(— \(\d+/\d+\)|—|[+-]?\d+(\.\d+)?( ±\d+\.\d\d)?( \(\d+/\d+\))?|not reached)"
        assert all(re.fullmatch(rf"\s*\S+(\s+{cell})+\s*", x) for x in rows), rows
    for number in ("11.25", "77.50", "12.75", "66.25"):
        assert number in res.output


def test_crd_generate_prints_outside_a_checkout_and_names_an_unwritable_folder(
        tmp_path: Path, monkeypatch) -> None:
    """Issue 22, finding 6: with no --out it wrote ./deploy/helm/gpugov/crds into whatever
    folder it ran in; an unwritable --out printed a traceback."""
    import yaml

    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["crd", "generate"])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "deploy").exists()
    kinds = {d["spec"]["names"]["kind"] for d in yaml.safe_load_all(res.output) if d}
    assert {"Queue", "Tenant"} <= kinds
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = runner.invoke(app, ["crd", "generate", "--out", str(blocker / "crds")])
    assert res.exit_code == 2, res.output
    assert f"--out {blocker / 'crds'}: cannot write there" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("argv", [
    ["node", "run", "--node-name", "n1", "--config", "FILE"],
    ["node", "agent", "--node-name", "n1", "--mig-config", "FILE"],
    ["node", "device-plugin", "--node-name", "n1", "--devices", "FILE"],
    ["node", "dra-plugin", "--node-name", "n1", "--devices", "FILE"],
], ids=["run --config", "agent --mig-config", "device-plugin --devices", "dra-plugin --devices"])
def test_non_utf8_node_files_are_named_not_a_traceback(tmp_path: Path, argv) -> None:
    """Issue 22, finding 9: non-UTF-8 node config files printed a traceback, and
    `device-plugin --devices` did not name the file."""
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00 not text")
    res = runner.invoke(app, [str(path) if a == "FILE" else a for a in argv])
    assert res.exit_code == 2, res.output
    assert f"{path}: not UTF-8 text" in res.output and "Traceback" not in res.output


def test_deprecated_and_zero_options_are_said_not_silently_changed(tmp_path: Path) -> None:
    """Issue 22 (low): `--workers 0` ran as 1; the deprecated `replay --cluster` printed no
    note and errors named it instead of `--nodes`; `node --help` advertised a `discovery`
    command that does not exist."""
    res = runner.invoke(app, ["simulate", "--workers", "0", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--workers must be within 1..256, got 0" in res.output
    res = runner.invoke(app, ["replay", "--cluster", str(tmp_path / "c.yaml")])
    assert "--cluster is deprecated; use --nodes" in res.output
    assert "give --nodes, --jobs and --queues together" in res.output
    res = runner.invoke(app, ["node", "--help"], env={"COLUMNS": "200"})
    assert "discovery" not in res.output.lower()


def test_low_no_data_exit_codes_agree_for_rightsize_report_and_top(tmp_path: Path) -> None:
    """Prometheus answers but holds no gpugov series: all three say "no data" and exit 0
    (docs/observability.md); `report` writes no files."""
    import shutil

    if shutil.which("prometheus") is None:
        pytest.skip("prometheus (Debian package) not installed")
    sys.path.insert(0, str(Path(__file__).parent / "observe"))
    import obs_prometheus

    server = obs_prometheus.start(tmp_path / "prom", [])
    try:
        out = tmp_path / "report"
        for argv in (["rightsize", "--prometheus", server.url, "--period", "5m"],
                     ["report", "--prometheus", server.url, "--period", "5m", "--out", str(out)],
                     ["top", "--prometheus", server.url, "--once"]):
            res = CliRunner().invoke(app, argv)
            assert res.exit_code == 0, (argv, res.output)
            assert res.output.startswith("no data: "), (argv, res.output)
            assert "Traceback" not in res.output
        assert not out.exists() or not any(out.iterdir())
    finally:
        server.stop()


def test_low_plan_mig_help_marks_nodes_required() -> None:
    res = CliRunner().invoke(app, ["plan", "mig", "--help"], terminal_width=80)
    assert res.exit_code == 0, res.output
    text = res.output
    nodes_help = text[text.index("--nodes"):text.index("--pods")]
    assert "[required]" in nodes_help, text


def test_low_bad_xdg_cache_home_in_dev_up_is_one_line_naming_it(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": "/proc/nope"}
    res = subprocess.run([sys.executable, "-c", "from gpugov.cli import app; app()", "dev", "up",
                          "--dir", str(tmp_path / "dev")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "XDG_CACHE_HOME=/proc/nope" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_config_with_thousands_of_bad_entries_shows_the_first_and_counts_the_rest(
        tmp_path: Path) -> None:
    """4,000 queues with a bad quota: the error names the first ones and counts the rest
    instead of printing thousands of lines (every command reading a config says the same:
    the message is ConfigError's; all problems stay in `problems`)."""
    from typer.testing import CliRunner

    from gpugov.cli import app
    from gpugov.control.config import ConfigError, load_config

    queues = "\n".join(f"  - {{name: q{i}, quota: {{gpu: -1}}}}" for i in range(4000))
    cfg = tmp_path / "queues.yaml"
    cfg.write_text(f"queues:\n{queues}\n")
    res = CliRunner().invoke(app, ["crd", "convert", str(cfg)])
    assert res.exit_code != 0
    text = res.output
    assert "queues[0].quota" in text and "queues[1].quota" in text  # the first, by place
    assert "3950 more problems (the first 50 are shown)" in text
    assert len(text.splitlines()) < 60, text[-500:]
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert len(err.value.problems) == 4000
