"""Loaders for the Alibaba GPU trace's "openb" CSV files (and files in the same format).

Nodes: `sn,cpu_milli,memory_mib,gpu,model`. Pods: `name,cpu_milli,memory_mib,num_gpu,
gpu_milli[,gpu_spec,...]` — the multigpu files stop after gpu_milli; extra columns (qos,
times) are ignored here. Every error names the file, the line and the field.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gpugov.model.catalog import MILLI_PER_GPU, canonical_model
from gpugov.model.cluster import NodeSpec
from gpugov.model.request import PodRequest
from gpugov.sim.text_input import InputFileError, number, read_table

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
    pods: list[PodRequest] = []
    seen: set[str] = set()
    for line, row in read_rows(path, POD_COLUMNS):
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
