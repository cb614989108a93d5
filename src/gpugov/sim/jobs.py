"""Job files for replay, and the adapter from an openb pod trace.

Job file columns: `name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,
cpu_milli,memory_mib` (`queue` is a leaf queue or a tenant namespace; `priority` names a
priority class, empty = the lowest class; `pods` > 1 is a gang; `gpu_milli` is per GPU and
only < 1000 for a single-GPU pod). An openb pod file (it has `creation_time`) is converted
on the fly by `openb_jobs`. Every error names the file, the line, the field and the value.
"""

from __future__ import annotations

import csv
import io
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpugov.control.config import ControlConfig
from gpugov.control.tree import QueueTree
from gpugov.control.workload import Job
from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.request import PodRequest
from gpugov.sim.numbers import csv_number
from gpugov.sim.text_input import csv_rows, number, read_table, read_text
from gpugov.sim.trace import (
    MAX_CPU_MILLI,
    MAX_GPUS_PER_NODE,
    MAX_MEMORY_MIB,
    TraceError,
    load_pods,
    unique_name,
)

JOB_COLUMNS = ("name", "queue", "priority", "submit_s", "duration_s", "pods", "gpu_per_pod",
               "gpu_milli", "cpu_milli", "memory_mib")

#: the openb adapter's tenants: QoS class -> (queue prefix, priority class)
OPENB_QOS = {
    "LS": ("online", "online"),
    "Guaranteed": ("online", "online"),
    "BE": ("batch", "batch"),
    "Burstable": ("batch", "batch"),
}
OPENB_SPLIT = ("a", "b")

#: accepted ranges of job-file fields (times in seconds: up to ~300 years)
MAX_TIME_S = 1e10
MAX_PODS_PER_JOB = 100_000
RANGES: dict[str, tuple[float, float]] = {
    "submit_s": (0, MAX_TIME_S), "duration_s": (0, MAX_TIME_S),
    "creation_time": (0, MAX_TIME_S), "deletion_time": (0, MAX_TIME_S),
    "pods": (1, MAX_PODS_PER_JOB), "gpu_per_pod": (0, MAX_GPUS_PER_NODE),
    "gpu_milli": (0, MILLI_PER_GPU), "cpu_milli": (0, MAX_CPU_MILLI),
    "memory_mib": (0, MAX_MEMORY_MIB),
}


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One row of a job file, already type-checked (queue/priority resolved later)."""

    name: str
    queue: str
    priority: str
    submit: float
    duration: float
    pods: int
    gpu_per_pod: int
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    models: tuple[str, ...] = ()
    line: int = 0


def _num(path: Path, line: int, row: dict[str, str], field: str, whole: bool) -> float:
    lo, hi = RANGES[field]
    return number(path, line, row, field, lo=lo, hi=hi, whole=whole)


def load_job_file(path: Path | str) -> list[JobSpec]:
    """Read a job file, or convert an openb pod trace if the header says it is one."""
    path = Path(path)
    text = read_text(path)
    header = next(csv_rows(path, text), (0, []))[1]
    if "creation_time" in header:
        return openb_jobs(path)
    specs: list[JobSpec] = []
    seen: set[str] = set()
    for line, row in read_table(path, JOB_COLUMNS, text):
        name = unique_name(path, line, row, "name", seen, "job")
        if not row["queue"]:
            raise TraceError(path, line, "queue", "empty queue")
        gpus = int(_num(path, line, row, "gpu_per_pod", True))
        milli = int(_num(path, line, row, "gpu_milli", True))
        if gpus > 1 and milli != MILLI_PER_GPU:
            raise TraceError(path, line, "gpu_milli", f"{milli}: a {gpus}-GPU pod must "
                             f"ask for whole GPUs ({MILLI_PER_GPU})")
        if (gpus == 0) != (milli == 0):
            raise TraceError(path, line, "gpu_milli", f"{milli} with gpu_per_pod={gpus}: "
                             "both must be 0, or both positive")
        specs.append(JobSpec(
            name, row["queue"], row["priority"], _num(path, line, row, "submit_s", False),
            _num(path, line, row, "duration_s", False),
            int(_num(path, line, row, "pods", True)), gpus, milli,
            int(_num(path, line, row, "cpu_milli", True)),
            int(_num(path, line, row, "memory_mib", True)), line=line))
    return specs


def openb_queue(name: str, qos: str) -> tuple[str, str]:
    """(leaf queue, priority class) of an openb pod: by QoS, split by a stable name hash."""
    prefix, pclass = OPENB_QOS.get(qos, ("batch", "batch"))
    half = OPENB_SPLIT[zlib.crc32(name.encode()) % len(OPENB_SPLIT)]
    return f"{prefix}-{half}", pclass


def openb_jobs(path: Path | str) -> list[JobSpec]:
    """One single-pod job per openb pod: submit = creation_time, duration = deletion -
    creation (at least 1 s), tenant by `openb_queue`."""
    path = Path(path)
    pods = {p.name: p for p in load_pods(path)}
    specs = []
    for line, r in read_table(path, ("name", "creation_time")):
        name = r["name"]
        if name not in pods:
            continue
        created = _num(path, line, r, "creation_time", False)
        deleted = _num(path, line, r, "deletion_time", False) if r.get(
            "deletion_time") else created + 1
        queue, pclass = openb_queue(name, r.get("qos", ""))
        p = pods[name]
        specs.append(JobSpec(name, queue, pclass, created, max(1.0, deleted - created), 1,
                             p.gpu_count, p.gpu_milli, p.cpu_milli, p.memory_mib,
                             p.models, line))
    return specs


def to_jobs(specs: Sequence[JobSpec], cfg: ControlConfig, tree: QueueTree,
            source: str = "<jobs>") -> list[Job]:
    """Resolve queues/tenants and priority classes; errors name the line and the field."""
    jobs = []
    for s in specs:
        try:
            leaf, trust = tree.resolve(s.queue)
        except KeyError as exc:
            raise TraceError(source, s.line or None, "queue", exc.args[0]) from None
        try:
            pclass = cfg.priority_class(s.priority)
        except KeyError as exc:
            raise TraceError(source, s.line or None, "priority", exc.args[0]) from None
        count = s.gpu_per_pod if s.gpu_milli else 0
        pod = PodRequest(s.name, s.cpu_milli, s.memory_mib, count, s.gpu_milli if count else 0,
                         s.models)
        jobs.append(Job(s.name, leaf, pclass, s.submit, s.pods, pod, trust, s.duration))
    return jobs


def render_job_file(specs: Sequence[JobSpec]) -> bytes:
    """A job file's bytes (the CLI writes them through `sim.output_files`)."""
    fh = io.StringIO()
    w = csv.writer(fh, lineterminator="\r\n")
    w.writerow(JOB_COLUMNS)
    for s in specs:
        w.writerow([s.name, s.queue, s.priority, csv_number(s.submit),
                    csv_number(s.duration), s.pods, s.gpu_per_pod, s.gpu_milli, s.cpu_milli,
                    s.memory_mib])
    return fh.getvalue().encode("utf-8")


def write_job_file(specs: Sequence[JobSpec], path: Path | str) -> None:
    from gpugov.sim.output_files import write_file

    write_file(Path(path), render_job_file(specs))
