"""Job files for replay, and the adapter from an openb pod trace.

Job file columns: `name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,
cpu_milli,memory_mib` (`queue` is a leaf queue or a tenant namespace; `priority` names a
priority class, empty = the lowest class; `pods` > 1 is a gang; `gpu_milli` is per GPU and
only < 1000 for a single-GPU pod). Two optional columns: `namespace` (a tenant namespace of the
config: it sets queue and trust tier; `queue` may then be empty) and `resources` (the
container's limits in Kubernetes spelling, `;`-separated, e.g.
`nvidia.com/gpu=1;nvidia.com/gpumem=20000;nvidia.com/gpucores=30`, translated by
`model.resource_spellings.translate` like the webhook does; it replaces `gpu_per_pod` and
`gpu_milli`, which must then be empty). An openb pod file (it has `creation_time`) is converted
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
from gpugov.model.devices import DeviceMode
from gpugov.model.request import PodRequest
from gpugov.model.resource_spellings import RequestError, translate
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
    gpu_memory_mib: int = 0  # per device, from `resources` (0 = not asked)
    namespace: str = ""  # the tenant namespace column (empty = not given)


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
        namespace = row.get("namespace", "").strip()
        if not row["queue"] and not namespace:
            raise TraceError(path, line, "queue", "empty queue (and no namespace)")
        resources = row.get("resources", "").strip()
        models: tuple[str, ...] = ()
        gpu_memory = 0
        if resources:
            for col in ("gpu_per_pod", "gpu_milli"):
                if row[col].strip():
                    raise TraceError(path, line, col, f"{row[col]!r}: leave it empty when "
                                     "resources is given (resources replaces it)")
            gpus, milli, gpu_memory, models = resource_limits(path, line, resources)
        else:
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
            int(_num(path, line, row, "memory_mib", True)), models, line=line,
            gpu_memory_mib=gpu_memory, namespace=namespace))
    return specs


def parse_limits(path: Path, line: int, text: str) -> dict[str, str]:
    """`name=value;name=value` into a limits mapping (names once each)."""
    limits: dict[str, str] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise TraceError(path, line, "resources", f"{part!r} is not name=value; write e.g. "
                             "nvidia.com/gpu=1;nvidia.com/gpumem=20000")
        if key in limits:
            raise TraceError(path, line, "resources", f"{key} is given twice")
        limits[key] = value
    return limits


def resource_limits(path: Path, line: int, text: str
                    ) -> tuple[int, int, int, tuple[str, ...]]:
    """(GPUs per pod, milli per GPU, GPU memory MiB per GPU, models) of a `resources` cell,
    through the webhook's translation; what the replay cannot run yet is refused as planned."""
    limits = parse_limits(path, line, text)
    unknown = [k for k in limits if not k.startswith("nvidia.com/")]
    if unknown:
        raise TraceError(path, line, "resources", f"{unknown[0]} is not a GPU resource; put "
                         "CPU and memory in cpu_milli and memory_mib")
    try:
        req = translate(limits)
    except RequestError as exc:
        raise TraceError(path, line, "resources", str(exc)) from None
    if req is None:
        return 0, 0, 0, ()
    if req.mode not in (DeviceMode.EXCLUSIVE, DeviceMode.SOFT):
        raise TraceError(path, line, "resources", f"{', '.join(req.spellings)}: "
                         f"{req.mode.value} requests are planned for the replay (its engine "
                         "does not model MIG instances or time-slice replicas yet); ask for "
                         "nvidia.com/gpu, nvidia.com/gpumem or nvidia.com/gpucores")
    if req.memory_percent is not None:
        raise TraceError(path, line, "resources", "nvidia.com/gpumem-percentage is planned "
                         "for the replay (the card is not known when the job is read); "
                         "write nvidia.com/gpumem in MiB")
    pod = req.to_pod_request("x")
    memory = req.memory_mib or 0 if pod.gpu_milli < MILLI_PER_GPU else 0
    return pod.gpu_count, pod.gpu_milli, memory, req.models


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
            leaf, trust = tree.resolve(s.queue or s.namespace)
        except KeyError as exc:
            raise TraceError(source, s.line or None, "queue", exc.args[0]) from None
        if s.namespace:
            if s.namespace not in tree.tenants:
                raise TraceError(source, s.line or None, "namespace",
                                 f"{s.namespace!r} is not a tenant namespace of the config; "
                                 f"allowed: {', '.join(tree.tenants) or '(no tenants)'}")
            leaf_ns, trust = tree.tenants[s.namespace]
            if s.queue and leaf_ns != leaf:
                raise TraceError(source, s.line or None, "namespace",
                                 f"{s.namespace!r} maps to queue {tree.names[leaf_ns]!r}, but "
                                 f"queue says {s.queue!r}; leave queue empty or make them agree")
            leaf = leaf_ns
        try:
            pclass = cfg.priority_class(s.priority)
        except KeyError as exc:
            raise TraceError(source, s.line or None, "priority", exc.args[0]) from None
        count = s.gpu_per_pod if s.gpu_milli else 0
        pod = PodRequest(s.name, s.cpu_milli, s.memory_mib, count, s.gpu_milli if count else 0,
                         s.models, s.gpu_memory_mib if count else 0)
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
