"""The pod reader's fast path gives exactly the careful reader's pods, or steps aside.

`_plain_pods` reads plain files in one pass; on anything unusual it returns None and
`careful_pods` reads the file (naming what it refuses). Whenever the fast path answers, the
answer must be the careful reader's; whenever the careful reader refuses, the fast path must
not answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.sim.trace import TraceError, _plain_pods, careful_pods, load_pods

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"


def _careful(text: str) -> list | str:
    try:
        return careful_pods(Path("pods.csv"), text)
    except (TraceError, ValueError) as exc:
        return f"refused: {exc}"


def test_every_public_trace_takes_the_fast_path_with_the_same_pods(trace_dir: Path) -> None:
    files = sorted(trace_dir.glob("openb_pod_list_*.csv"))
    assert files
    for f in files:
        text = f.read_text(encoding="utf-8-sig")
        fast = _plain_pods(text)
        assert fast is not None, f.name
        assert fast == careful_pods(f, text), f.name


@pytest.mark.parametrize("rows", [
    ["p1,1000,2048,1,500,T4|P100", "p2,8000,1024,0,0,", "p3,1000,1,2,1000,"],
    ["p1, 1000,2048,1,500,"],          # a space before a number
    ["p1,+1000,2048,1,500,"],          # a sign
    ["p1,1000,2048,1,500, T4 | V100M16 "],  # spaces around models
    ["p1,1000,2048,0,abc,"],           # milli of a CPU-only pod is never read
    ["p1,1000,2048,2,500,"],           # a fractional multi-GPU pod: refused
    ["p1,1000,2048,2,0,"],             # milli 0: a CPU-only pod
    ["p1,1000,2048,1,1001,"],          # above a whole GPU: refused
    ["p1,1000,2048,1,500,", "p1,1,1,0,0,"],  # duplicate name: refused
    ["p1,1000,2048,1,500,", "", "p2,1,1,0,0,"],  # a blank line
    ["p1,1000,2048,1,500,,,"],         # trailing separators
    ["p1,1000,2048,1,500"],            # a short row: refused
    ["\"p,1\",1000,2048,1,500,"],      # a quoted name
    ["p1,1000,,1,500,"],               # an empty number: 0
    ["p1,١٠٠٠,2048,1,500,"],           # non-ASCII digits
    ["p1,99999999999999999999,2048,1,500,"],  # out of range: refused
])
def test_edge_rows_give_the_careful_answer(tmp_path: Path, rows: list[str]) -> None:
    text = "\n".join([HEADER, *rows]) + "\n"
    fast = _plain_pods(text)
    careful = _careful(text)
    if fast is not None:
        assert fast == careful
    path = tmp_path / "pods.csv"
    path.write_text(text, encoding="utf-8")
    try:
        assert load_pods(path) == careful
    except TraceError as exc:
        assert isinstance(careful, str) and str(exc).split(": ", 1)[1] in careful


@pytest.mark.parametrize("header", [
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec ",  # a spaced column name
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli",           # no gpu_spec column
    "gpu_spec,gpu_milli,num_gpu,memory_mib,cpu_milli,name",  # another column order
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,qos",   # a repeated extra column
])
def test_headers_give_the_careful_answer(header: str) -> None:
    cells = {"name": "p1", "cpu_milli": "1000", "memory_mib": "2048", "num_gpu": "1",
             "gpu_milli": "500", "gpu_spec": "T4", "qos": "LS"}
    row = ",".join(cells[h.strip()] for h in header.split(","))
    text = f"{header}\n{row}\n"
    fast = _plain_pods(text)
    assert fast is None or fast == _careful(text)


cell = st.sampled_from(["0", "1", "500", "1000", "1001", "8", "", " 5", "+3", "x", "2", "007"])
name = st.sampled_from(["a", "b", "c", " a", ""])
spec = st.sampled_from(["", "T4", "T4|P100", " V100M16 |", "||"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(name, cell, cell, cell, cell, spec), max_size=6))
def test_random_files_fast_path_never_disagrees(rows) -> None:  # type: ignore[no-untyped-def]
    text = HEADER + "\n" + "".join(",".join(r) + "\n" for r in rows)
    fast = _plain_pods(text)
    if fast is not None:
        assert fast == _careful(text)
