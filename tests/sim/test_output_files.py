"""Outputs: destinations checked before work, files all together or not at all — the layer
itself, and a property test of every command's --out over destinations users give."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.sim.output_files import (
    OutputError,
    check_file,
    check_folder,
    write_file,
    write_files,
    write_folder,
)

runner = CliRunner()


def test_write_folder_is_all_or_nothing(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    write_folder(out, {"x.csv": b"1", "y.json": b"{}"})
    assert sorted(p.name for p in out.iterdir()) == ["x.csv", "y.json"]

    with pytest.raises(TypeError):  # a failure half-way: nothing new appears
        write_folder(tmp_path / "c", {"x.csv": b"1", "y.json": None})  # type: ignore[dict-item]
    assert not (tmp_path / "c").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_write_folder_replaces_files_and_removes_stale_ones(tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "plot.png").write_bytes(b"old")
    (out / "x.csv").write_bytes(b"old")
    (out / "user-notes.txt").write_text("mine")
    write_folder(out, {"x.csv": b"new"}, stale=["plot.png", "x.csv"])
    assert sorted(p.name for p in out.iterdir()) == ["user-notes.txt", "x.csv"]
    assert (out / "x.csv").read_bytes() == b"new"


def test_checks_refuse_what_cannot_be_written(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(OutputError, match="is not a folder"):
        check_folder(f)
    with pytest.raises(OutputError, match="not a folder"):
        check_folder(f / "sub")
    with pytest.raises(OutputError, match="not a regular file"):
        check_file(Path(os.devnull))
    with pytest.raises(OutputError, match="is a folder"):
        check_file(tmp_path)
    with pytest.raises(OutputError, match="input"):
        check_file(f, [f])
    with pytest.raises(OutputError, match="overwrite the input"):
        check_folder(tmp_path, [f], ["f"])
    with pytest.raises(OutputError, match="/proc"):
        check_folder(Path("/proc/gpugov-x/y"))
    check_folder(tmp_path / "new" / "deeper")
    check_file(tmp_path / "new" / "file.csv")
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_write_file_and_write_files_keep_the_old_content_on_failure(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    write_files({a: b"a1", b: b"b1"})
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputError):  # the second file cannot be written: neither changes
        write_files({a: b"a2", tmp_path / "f" / "x": b"x"})
    assert a.read_bytes() == b"a1"
    write_file(b, b"b2")
    assert b.read_bytes() == b"b2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml", "f"]


# --- property: every command's --out --------------------------------------------------------
NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},64000,262144,4,A100-SXM4-80GB\n" for i in range(2))
PODS = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,creation_time,deletion_time\n"
        + "".join(f"p{i},1000,1024,1,{(250, 500, 1000)[i % 3]},,LS,{i},{i + 100}\n"
                  for i in range(12)))
QUEUES = "queues:\n  - {name: online-a, quota: {gpu: 4}}\n  - {name: online-b, quota: {gpu: 4}}\n" \
    "  - {name: batch-a, quota: {gpu: 0}}\n  - {name: batch-b, quota: {gpu: 0}}\n" \
    "priorityClasses:\n  - {name: online, value: 100}\n  - {name: batch, value: 10}\n"

#: command -> (arguments before --out, what --out is, names written)
COMMANDS = {
    "simulate": (["simulate", "--nodes", "{d}/nodes.csv", "--pods", "{d}/pods.csv", "--seeds",
                  "1", "--policy", "random"], "folder",
                 ["alloc_discrete.csv", "frag_discrete.csv", "frag_ratio_discrete.csv",
                  "alloc_curves.png", "summary.json"]),
    "experiment": (["experiment", "fgd", "--trace-dir", "{d}", "--nodes", "nodes.csv",
                    "--workload", "pods", "--seeds", "1", "--policy", "bestfit"], "folder",
                   ["alloc_discrete.csv", "summary.json"]),
    "replay": (["replay", "--nodes", "{d}/nodes.csv", "--jobs", "{d}/pods.csv", "--queues",
                "{d}/q.yaml", "--no-plots"], "folder",
               ["jobs.csv", "queues.csv", "summary.json", "snapshot.json"]),
    "openb-jobs": (["openb-jobs", "{d}/pods.csv"], "file", []),
    "plan-mig": (["plan", "mig", "--nodes", "{d}/nodes.csv", "--pods", "{d}/pods.csv",
                  "--model", "A100-SXM4-80GB"], "file", []),
}
DESTINATIONS = ["new", "new/nested", "empty-dir", "dir-with-files", "file", "under-file",
                "devnull", "input", "proc", "trailing-slash"]


def _setup(root: Path, kind: str) -> tuple[str, dict[Path, bytes]]:
    """Make the destination of `kind` under root; return it and what existed before."""
    d = root / "in"
    d.mkdir()
    (d / "nodes.csv").write_text(NODES)
    (d / "pods.csv").write_text(PODS)
    (d / "q.yaml").write_text(QUEUES)
    (root / "empty-dir").mkdir()
    (root / "dir-with-files").mkdir()
    (root / "dir-with-files" / "keep.txt").write_text("user file")
    (root / "dir-with-files" / "summary.json").write_text("old")
    (root / "file").write_text("a file")
    dest = {"devnull": os.devnull, "input": str(d / "pods.csv"), "proc": "/proc/gpugov-x/out",
            "under-file": str(root / "file" / "x"), "trailing-slash": str(root / "slash") + "/",
            }.get(kind, str(root / kind))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    return dest, before


@pytest.mark.parametrize("command", COMMANDS)
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(DESTINATIONS))
def test_every_command_out_is_all_or_nothing(command: str, kind: str) -> None:
    args, what, names = COMMANDS[command]
    root = Path(tempfile.mkdtemp(prefix="gpugov-out-"))
    try:
        dest, before = _setup(root, kind)
        argv = [a.replace("{d}", str(root / "in")) for a in args] + ["--out", dest]
        res = runner.invoke(app, argv)
        assert res.exit_code in (0, 2), (argv, res.output, res.exception)
        assert "Traceback" not in res.output
        leftovers = [p for p in root.rglob(".*")]
        assert not leftovers, leftovers  # no temporary files or folders stay behind
        changed = {p for p, data in before.items() if not p.exists() or p.read_bytes() != data}
        if res.exit_code == 2:
            event(f"{command}: refused")
            assert len([x for x in res.output.splitlines() if x.startswith("error:")]) == 1
            assert not changed, changed  # nothing the user had was touched
            return
        event(f"{command}: written")
        out = Path(dest)
        assert kind not in ("under-file", "devnull", "input", "proc")
        if what == "folder":
            assert kind != "file"
            assert all((out / n).is_file() and (out / n).stat().st_size for n in names)
            assert changed <= {out / n for n in names}
        else:
            assert kind not in ("empty-dir", "dir-with-files")
            assert out.is_file() and out.stat().st_size and changed <= {out}
    finally:
        shutil.rmtree(root, ignore_errors=True)
