"""Loaders for the Alibaba GPU trace's "openb" CSV files (and files in the same format).

Nodes: `sn,cpu_milli,memory_mib,gpu,model`. Pods: `name,cpu_milli,memory_mib,num_gpu,
gpu_milli[,gpu_spec,...]` — the multigpu files stop after gpu_milli; extra columns (qos,
times) are ignored here. Every error names the file, the line and the field.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import NodeSpec
from gpugov.model.request import PodRequest

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A trace file that cannot be used, with the place of the problem."""

    def __init__(self, path: Path | str, line: int | None, field: str | None, message: str):
        where = f"{path}" + (f", line {line}" if line is not None else "")
        where += f", field '{field}'" if field else ""
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.field = str(path), line, field


def read_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row by column name) of a CSV whose header must hold `required`."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(path, None, None, f"cannot read: {exc.strerror or exc}") from exc
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise TraceError(path, 1, None, f"empty file; expected header {','.join(required)}")
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(path, 1, missing[0],
                             f"missing column(s) {', '.join(missing)}; "
                             f"header must contain {','.join(required)}")
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < len(header):
                raise TraceError(path, line, header[len(row)],
                                 f"row has {len(row)} fields, header has {len(header)}")
            yield line, dict(zip(header, (c.strip() for c in row), strict=False))


def _int(path: Path, line: int, row: dict[str, str], field: str) -> int:
    raw = row[field]
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        raise TraceError(path, line, field, f"not a number: {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise TraceError(path, line, field, f"not a finite number: {raw!r}")
    if value < 0:
        raise TraceError(path, line, field, f"must be >= 0, got {raw}")
    if value != int(value):
        raise TraceError(path, line, field, f"must be a whole number, got {raw}")
    return int(value)


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
        gpus = _int(path, line, row, "gpu")
        model = row["model"]
        if gpus > 0 and not model:
            raise TraceError(path, line, "model", f"node {name} has {gpus} GPUs but no model")
        nodes.append(NodeSpec(name, _int(path, line, row, "cpu_milli"),
                              _int(path, line, row, "memory_mib"), gpus, model))
    return nodes


def load_pods(path: Path | str) -> list[PodRequest]:
    """Read a pod list with the study's reduction: per-GPU milli clamped to 1000, GPU fields
    only for pods with GPUs, `gpu_spec` split on '|' into allowed models."""
    path = Path(path)
    pods: list[PodRequest] = []
    seen: set[str] = set()
    for line, row in read_rows(path, POD_COLUMNS):
        name = unique_name(path, line, row, "name", seen, "pod")
        cpu = _int(path, line, row, "cpu_milli")
        mem = _int(path, line, row, "memory_mib")
        count = _int(path, line, row, "num_gpu")
        milli = min(_int(path, line, row, "gpu_milli"), MILLI_PER_GPU) if count else 0
        if milli == 0:
            count = 0
        if count > 1 and milli != MILLI_PER_GPU:
            raise TraceError(path, line, "gpu_milli",
                             f"a {count}-GPU pod must ask for whole GPUs (1000), got {milli}")
        spec = row.get("gpu_spec", "") if count else ""
        # keep the study's spelling (order, duplicates): it is part of the typical-pod key
        models = tuple(m.strip() for m in spec.split("|") if m.strip())
        pods.append(PodRequest(name, cpu, mem, count, milli, models))
    return pods
