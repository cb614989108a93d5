"""Loaders for the Alibaba GPU trace's "openb" CSV files (and files in the same format).

Nodes: `sn,cpu_milli,memory_mib,gpu,model`. Pods: `name,cpu_milli,memory_mib,num_gpu,
gpu_milli[,gpu_spec,...]` — the multigpu files stop after gpu_milli; extra columns (qos,
times) are ignored here. Every error names the file, the line and the field.

Pod files take a fast path first (`_plain_pods`: one pass of `csv.reader`, plain ASCII digits
only); at the first cell that is anything else it gives up and the careful reader below reads
the file again, accepting what it accepts and naming what it refuses. Both give the same pods
(tests/sim/test_trace_fast_path.py).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from gpugov.model.catalog import MILLI_PER_GPU, canonical_model
from gpugov.model.cluster import NodeSpec
from gpugov.model.request import PodRequest
from gpugov.sim.text_input import InputFileError, number, read_table, read_text

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")

#: accepted ranges (inclusive). GPUs per node: the largest servers hold 16; 128 leaves room
#: without letting a typo allocate a [nodes x 100,000,000] matrix.
MAX_GPUS_PER_NODE = 128
MAX_CPU_MILLI = 10**9  # a million cores
MAX_MEMORY_MIB = 2**40  # an exbibyte

#: The one error type of every loader (kept under its historical name).
TraceError = InputFileError


def read_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row by column name) of a CSV whose header must hold `required`."""
    return read_table(path, required)


def _int(path: Path, line: int, row: dict[str, str], field: str, hi: int) -> int:
    return int(number(path, line, row, field, lo=0, hi=hi, whole=True, default=0))


def unique_name(path: Path, line: int, row: dict[str, str], field: str, seen: set[str],
                what: str) -> str:
    """The row's non-empty `field`, refused if an earlier row used it."""
    name = row[field]
    if not name:
        raise TraceError(path, line, field, f"empty {what} name")
    if name in seen:
        raise TraceError(path, line, field, f"duplicate {what} name {name!r}")
    seen.add(name)
    return name


def load_nodes(path: Path | str) -> list[NodeSpec]:
    """Read a node list; node names must be unique, nodes with GPUs need a model."""
    path = Path(path)
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for line, row in read_rows(path, NODE_COLUMNS):
        name = unique_name(path, line, row, "sn", seen, "node")
        gpus = _int(path, line, row, "gpu", MAX_GPUS_PER_NODE)
        model = canonical_model(row["model"]) if row["model"] else ""
        if gpus > 0 and not model:
            raise TraceError(path, line, "model", f"node {name} has {gpus} GPUs but no model")
        nodes.append(NodeSpec(name, _int(path, line, row, "cpu_milli", MAX_CPU_MILLI),
                              _int(path, line, row, "memory_mib", MAX_MEMORY_MIB), gpus, model))
    return nodes


def load_pods(path: Path | str) -> list[PodRequest]:
    """Read a pod list with the study's reduction: GPU fields only for pods with GPUs,
    `gpu_spec` split on '|' into allowed models (catalog spellings: `t4` -> `T4`).

    `gpu_milli` is per GPU, 0..1000 (the same rule as job files: above 1000 is refused, not
    clamped)."""
    path = Path(path)
    text = read_text(path)
    fast = _plain_pods(text)
    return fast if fast is not None else careful_pods(path, text)


def careful_pods(path: Path, text: str) -> list[PodRequest]:
    """`load_pods` cell by cell through `text_input`'s checks (every refusal names the line
    and the field)."""
    pods: list[PodRequest] = []
    seen: set[str] = set()
    for line, row in read_table(path, POD_COLUMNS, text):
        name = unique_name(path, line, row, "name", seen, "pod")
        cpu = _int(path, line, row, "cpu_milli", MAX_CPU_MILLI)
        mem = _int(path, line, row, "memory_mib", MAX_MEMORY_MIB)
        count = _int(path, line, row, "num_gpu", MAX_GPUS_PER_NODE)
        milli = _int(path, line, row, "gpu_milli", MILLI_PER_GPU) if count else 0
        if milli == 0:
            count = 0
        if count > 1 and milli != MILLI_PER_GPU:
            raise TraceError(path, line, "gpu_milli",
                             f"a {count}-GPU pod must ask for whole GPUs (1000), got {milli}")
        spec = row.get("gpu_spec", "") if count else ""
        # keep the study's spelling (order, duplicates): it is part of the typical-pod key
        models = tuple(canonical_model(m.strip()) for m in spec.split("|") if m.strip())
        pods.append(PodRequest(name, cpu, mem, count, milli, models))
    return pods


def _plain_pods(text: str) -> list[PodRequest] | None:
    """`load_pods` of a file whose cells are all plain (no spaces, quotes needing care, blank
    or ragged rows, empty or non-ASCII-digit numbers, values out of range, duplicate names,
    fractional multi-GPU pods); None at the first cell that is not: the careful reader then
    reads the file and names the problem, if there is one."""
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        header = next(reader)
    except (StopIteration, csv.Error):
        return None
    if (len(set(header)) != len(header) or any(h != h.strip() for h in header)
            or any(c not in header for c in POD_COLUMNS)):
        return None
    name_i, cpu_i, mem_i, count_i, milli_i = (header.index(c) for c in POD_COLUMNS)
    spec_i = header.index("gpu_spec") if "gpu_spec" in header else None
    width = len(header)
    seen: set[str] = set()
    models_of: dict[str, tuple[str, ...]] = {"": ()}
    pods: list[PodRequest] = []
    try:
        for row in reader:
            if len(row) != width:
                return None
            name, cpu, mem, count = row[name_i], row[cpu_i], row[mem_i], row[count_i]
            if not (name and name == name.strip() and name not in seen and cpu.isdigit()
                    and cpu.isascii() and mem.isdigit() and mem.isascii() and count.isdigit()
                    and count.isascii()):
                return None
            seen.add(name)
            cpu_n, mem_n, count_n, milli_n = int(cpu), int(mem), int(count), 0
            if cpu_n > MAX_CPU_MILLI or mem_n > MAX_MEMORY_MIB or count_n > MAX_GPUS_PER_NODE:
                return None
            spec = ""
            if count_n:
                milli = row[milli_i]
                if not (milli.isdigit() and milli.isascii()):
                    return None
                milli_n = int(milli)
                if milli_n > MILLI_PER_GPU or (count_n > 1 and milli_n not in (0, MILLI_PER_GPU)):
                    return None
                if milli_n == 0:
                    count_n = 0
                elif spec_i is not None:
                    spec = row[spec_i]
            models = models_of.get(spec)
            if models is None:
                models = tuple(canonical_model(m.strip()) for m in spec.split("|") if m.strip())
                models_of[spec] = models
            pods.append(PodRequest(name, cpu_n, mem_n, count_n, milli_n, models))
    except (csv.Error, ValueError):
        return None
    return pods
