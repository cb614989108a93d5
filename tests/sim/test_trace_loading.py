"""Trace loaders: the openb formats, and errors that say file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpugov.sim.trace import TraceError, load_nodes, load_pods

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_pods_follow_the_study_reduction(tmp_path: Path) -> None:
    p = write(tmp_path, "pods.csv", POD_HEADER + "\n"
              "a,1000,512,1,1000,,LS,Running,0\n"
              "b,2000,512,0,500,T4,BE,Running,0\n"     # no GPU: GPU fields ignored
              "c,3000,512,1,250,V100M16|V100M32|,LS,Running,0\n"
              "d,4000,512,2,0,,LS,Running,0\n")        # zero milli: no GPU request
    a, b, c, d = load_pods(p)
    assert (a.gpu_count, a.gpu_milli) == (1, 1000)
    assert (b.gpu_count, b.gpu_milli, b.models) == (0, 0, ())
    assert c.models == ("V100M16", "V100M32") and c.is_sharing
    assert d.gpu_count == 0


def test_multigpu_files_have_five_columns(tmp_path: Path) -> None:
    p = write(tmp_path, "m.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1,2,8,1000\n")
    (x,) = load_pods(p)
    assert x.gpu_count == 8 and x.models == ()


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("name,cpu_milli,memory_mib,num_gpu\nx,1,2,1\n", 1, "gpu_milli"),
        (POD_HEADER + "\nx,abc,2,1,100,,LS,R,0\n", 2, "cpu_milli"),
        (POD_HEADER + "\nok,1,2,1,100,,LS,R,0\nx,1,-5,1,100,,LS,R,0\n", 3, "memory_mib"),
        (POD_HEADER + "\nx,1,2\n", 2, "num_gpu"),
        (POD_HEADER + "\nx,1,2,2,500,,LS,R,0\n", 2, "gpu_milli"),
        (POD_HEADER + "\nx,1,2,1,1.5,,LS,R,0\n", 2, "gpu_milli"),
        (POD_HEADER + "\nx,1,2,1,10,,LS,R,0\nx,1,2,1,10,,LS,R,0\n", 3, "name"),
    ],
)
def test_bad_pod_rows_name_file_line_and_field(tmp_path: Path, text: str, line: int,
                                                field: str) -> None:
    p = write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceError) as e:
        load_pods(p)
    assert (e.value.line, e.value.field) == (line, field)
    assert "bad.csv" in str(e.value) and f"line {line}" in str(e.value) and field in str(e.value)


def test_bad_nodes_and_missing_files(tmp_path: Path) -> None:
    p = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\na,1,1,2,\n")
    with pytest.raises(TraceError, match="line 2, field 'model'"):
        load_nodes(p)
    with pytest.raises(TraceError, match="cannot read"):
        load_nodes(tmp_path / "missing.csv")
    with pytest.raises(TraceError, match="empty file"):
        load_nodes(write(tmp_path, "e.csv", ""))


def test_header_only_files_are_empty_traces(tmp_path: Path) -> None:
    assert load_pods(write(tmp_path, "p.csv", POD_HEADER + "\n")) == []
    assert load_nodes(write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\n")) == []


def test_the_public_trace_loads(trace_dir: Path) -> None:
    nodes = load_nodes(trace_dir / "openb_node_list_gpu_node.csv")
    pods = load_pods(trace_dir / "openb_pod_list_default.csv")
    assert (len(nodes), sum(n.gpu_count for n in nodes)) == (1213, 6212)
    assert len(pods) == 8152 and sum(p.total_gpu_milli for p in pods) == 6_086_800
    assert sum(not p.is_gpu for p in pods) == 1088
