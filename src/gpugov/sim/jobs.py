"""Job files for replay, and the adapter from an openb pod trace.

Job file columns: `name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,
cpu_milli,memory_mib` (`queue` is a leaf queue or a tenant namespace; `priority` names a
priority class, empty = the lowest class; `pods` > 1 is a gang; `gpu_milli` is per GPU and
only < 1000 for a single-GPU pod). Optional columns:
- `namespace`: a tenant namespace of the config: it sets queue and trust tier (`queue` may
  then be empty);
- `resources`: the container's limits in Kubernetes spelling, `;`-separated, e.g.
  `nvidia.com/gpu=1;nvidia.com/gpumem=20000;nvidia.com/gpucores=30` or
  `nvidia.com/mig-1g.10gb=1`, translated by `model.resource_spellings.translate` like the
  webhook does; it replaces `gpu_per_pod` and `gpu_milli`, which must then be empty;
- `tolerations`: `;`-separated `key=value`, `key=value:Effect`, `key:Exists`,
  `key:Exists:Effect` or `Exists` (tolerate every taint);
- `node_selector`: `;`-separated `key=value` labels the node must carry;
- `annotations`: `;`-separated `key=value` pod annotations the translation reads with
  `resources` (`gpugov.io/topology=required` keeps a multi-GPU pod in one NVLink domain or
  leaves it pending with reason `topology`; `gpugov.io/model`, `gpugov.io/isolation`, HAMi's
  and KAI's); any other annotation is refused, never ignored.
A tenant's `timeSlicing: {oversubscribe: true}` (trusted tenants; the Tenant CRD's field)
uncaps its time-slice replicas as the scheduler does.
Every row's request, whichever columns spell it, is compiled by one function,
`GpuRequest.to_pod_request(modes=True)`, with the tenant's trust tier (`to_jobs`). An openb
pod file (it has `creation_time`) is converted on the fly by `openb_jobs`. Every error names
the file, the line, the field and the value.
"""

from __future__ import annotations

import csv
import io
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpugov.control.config import ControlConfig
from gpugov.control.tree import QueueTree
from gpugov.control.workload import Job
from gpugov.model.catalog import MILLI_PER_GPU
from gpugov.model.cluster import NodeSpec
from gpugov.model.constraints import TAINT_EFFECTS, Toleration
from gpugov.model.devices import DeviceMode
from gpugov.model.gpu_request import GpuRequest
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
#: the columns a job file may add (anything else is refused, with the closest name)
JOB_OPTIONAL_COLUMNS = ("namespace", "resources", "node_selector", "tolerations",
                        "annotations")

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
    #: the `resources` column translated (None: the request is gpu_per_pod/gpu_milli)
    gpu_request: GpuRequest | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()


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
    for line, row in read_table(path, JOB_COLUMNS, text, JOB_OPTIONAL_COLUMNS):
        name = unique_name(path, line, row, "name", seen, "job")
        namespace = row.get("namespace", "").strip()
        if not row["queue"] and not namespace:
            raise TraceError(path, line, "queue", "empty queue (and no namespace)")
        resources = row.get("resources", "").strip()
        annotations = parse_annotations(path, line, row.get("annotations", ""))
        selector = parse_node_selector(path, line, row.get("node_selector", ""))
        if annotations and not resources:
            raise TraceError(path, line, "annotations", "they qualify a `resources` request; "
                             "give resources too (e.g. nvidia.com/gpu=4)")
        models: tuple[str, ...] = ()
        gpu_memory = 0
        req: GpuRequest | None = None
        if resources:
            for col in ("gpu_per_pod", "gpu_milli"):
                if row[col].strip():
                    raise TraceError(path, line, col, f"{row[col]!r}: leave it empty when "
                                     "resources is given (resources replaces it)")
            req = gpu_request(path, line, resources, annotations, dict(selector))
            gpus, milli, gpu_memory, models = legacy_fields(req)
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
            gpu_memory_mib=gpu_memory, namespace=namespace, gpu_request=req,
            node_selector=selector,
            tolerations=parse_tolerations(path, line, row.get("tolerations", ""))))
    return specs


TOLERATION_FORMS = ("key=value", "key=value:Effect", "key:Exists", "key:Exists:Effect",
                    "Exists")
_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"


def parse_node_selector(path: Path | str, line: int, text: str
                        ) -> tuple[tuple[str, str], ...]:
    """`zone=a;tier=x` into sorted (key, value) pairs (each key once)."""
    out: dict[str, str] = {}
    for part in (text or "").split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = (x.strip() for x in part.partition("="))
        if not sep or not re.fullmatch(_LABEL, key) or \
                (value and not re.fullmatch(_LABEL, value)):
            raise TraceError(path, line, "node_selector", f"{part!r} is not a label key=value; "
                             "write e.g. zone=a;tier=x")
        if key in out:
            raise TraceError(path, line, "node_selector", f"{key} is given twice")
        out[key] = value
    return tuple(sorted(out.items()))


def parse_tolerations(path: Path | str, line: int, text: str) -> tuple[Toleration, ...]:
    """`dedicated=infer:NoSchedule;gpu:Exists` into tolerations (Kubernetes semantics)."""
    out = []
    for part in (text or "").split(";"):
        part = part.strip()
        if not part:
            continue
        out.append(_toleration(path, line, part))
    return tuple(out)


def _toleration(path: Path | str, line: int, part: str) -> Toleration:
    def bad(why: str) -> TraceError:
        return TraceError(path, line, "tolerations", f"{part!r}: {why}; write one of "
                          f"{', '.join(TOLERATION_FORMS)} (Effect: {', '.join(TAINT_EFFECTS)}), "
                          "';'-separated, e.g. dedicated=infer:NoSchedule;gpu:Exists")
    if part == "Exists":
        return Toleration("", "Exists")
    head, _, effect = part.partition(":")
    if "=" in head:
        key, _, value = (x.strip() for x in head.partition("="))
        operator = "Equal"
        if ":" in effect:
            raise bad("too many ':'")
    else:
        key, value, operator = head.strip(), "", "Exists"
        if effect.split(":", 1)[0] != "Exists":
            raise bad("a key without =value needs :Exists")
        effect = effect.partition(":")[2]
    if not re.fullmatch(_LABEL, key) or (value and not re.fullmatch(_LABEL, value)):
        raise bad("not a taint key (letters, digits, '-', '_', '.', '/')")
    if effect and effect not in TAINT_EFFECTS:
        raise bad(f"unknown effect {effect!r}")
    return Toleration(key, operator, value, effect.strip())


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


def parse_annotations(path: Path | str, line: int, text: str) -> dict[str, str]:
    """The `annotations` cell: `key=value;…` of the annotations the translation reads."""
    from gpugov.model.resource_spellings import (
        HAMI_ANNOTATIONS,
        KAI_ANNOTATIONS,
        OUR_ANNOTATIONS,
    )

    known = (*OUR_ANNOTATIONS, *HAMI_ANNOTATIONS, *KAI_ANNOTATIONS)
    out: dict[str, str] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = (x.strip() for x in part.partition("="))
        if not sep or not key:
            raise TraceError(path, line, "annotations", f"{part[:64]!r} is not key=value; "
                             "write e.g. gpugov.io/topology=required")
        if key not in known:
            raise TraceError(path, line, "annotations", f"{key[:64]!r} is not read by the "
                             f"translation; allowed: {', '.join(known)}")
        if key in out:
            raise TraceError(path, line, "annotations", f"{key} is given twice")
        out[key] = value
    return out


def gpu_request(path: Path | str, line: int, text: str,
                annotations: dict[str, str] | None = None,
                node_selector: dict[str, str] | None = None) -> GpuRequest | None:
    """The `resources` cell (with the row's annotations and node selector, which the
    translation reads as the webhook does: GFD's `-SHARED` / `-MIG-` product labels) through
    the webhook's translation (None: no GPU asked)."""
    limits = parse_limits(Path(path), line, text)
    unknown = [k for k in limits if not k.startswith("nvidia.com/")]
    if unknown:
        raise TraceError(path, line, "resources", f"{unknown[0]} is not a GPU resource; put "
                         "CPU and memory in cpu_milli and memory_mib")
    try:
        req = translate(limits, annotations, node_selector)
    except RequestError as exc:
        field = "annotations" if annotations and exc.spelling in annotations else "resources"
        raise TraceError(path, line, field, str(exc)) from None
    if req is not None:
        try:  # what the state cannot hold
            req.to_pod_request("x", modes=True)
        except ValueError as exc:
            raise TraceError(path, line, "resources", str(exc)) from None
        if req.mode is DeviceMode.MIG and req.count > 1:  # the job columns hold one per pod
            raise TraceError(path, line, "resources", f"{req.count} MIG instances in one pod: "
                             "the replay's job file places one instance per pod (gpugov's "
                             "Kubernetes scheduler places several); write one per pod")
    return req


def legacy_fields(req: GpuRequest | None) -> tuple[int, int, int, tuple[str, ...]]:
    """(GPUs per pod, milli per GPU, GPU memory MiB per GPU, models) of a request, as the
    milli-only columns would say it (for display; placement uses the compiled request)."""
    if req is None:
        return 0, 0, 0, ()
    pod = req.to_pod_request("x")
    memory = pod.gpu_memory_mib if pod.gpu_milli < MILLI_PER_GPU else 0
    return pod.gpu_count, pod.gpu_milli, memory, req.models


def resource_limits(path: Path | str, line: int, text: str
                    ) -> tuple[int, int, int, tuple[str, ...]]:
    """`legacy_fields` of a `resources` cell."""
    return legacy_fields(gpu_request(path, line, text))


def openb_queue(name: str, qos: str) -> tuple[str, str]:
    """(leaf queue, priority class) of an openb pod: by QoS, split by a stable name hash."""
    prefix, pclass = OPENB_QOS.get(qos, ("batch", "batch"))
    half = OPENB_SPLIT[zlib.crc32(name.encode()) % len(OPENB_SPLIT)]
    return f"{prefix}-{half}", pclass


def openb_jobs(path: Path | str,
               tick: Callable[[int, int], None] | None = None) -> list[JobSpec]:
    """One single-pod job per openb pod: submit = creation_time, duration = deletion -
    creation (at least 1 s), tenant by `openb_queue`. A pod with no deletion_time was still
    running when the trace ended: it runs until the trace's last timestamp (never a silent
    1 s). A deletion before the creation is refused with the line.

    `tick(done, total)` now and then for progress (three passes over the pods: parse, times,
    jobs; `total` is known once the first pass is done)."""
    path = Path(path)
    pods = {p.name: p for p in load_pods(path)}
    n = len(pods)
    say = tick or (lambda _done, _total: None)
    say(n, 3 * n)
    rows = []
    for i, (line, r) in enumerate(read_table(path, ("name", "creation_time"))):
        if not i % 4096:
            say(n + min(i, n), 3 * n)
        if r["name"] not in pods:
            continue
        created = _num(path, line, r, "creation_time", False)
        deleted = _num(path, line, r, "deletion_time", False) if r.get(
            "deletion_time", "").strip() else None
        if deleted is not None and deleted < created:
            raise TraceError(path, line, "deletion_time", f"{deleted:g} is before "
                             f"creation_time {created:g}; a pod cannot end before it starts")
        rows.append((line, r, created, deleted))
    end = max((t for _, _, c, d in rows for t in (c, d) if t is not None), default=0.0)
    specs = []
    for i, (line, r, created, deleted) in enumerate(rows):
        if not i % 4096:
            say(2 * n + i, 3 * n)
        name = r["name"]
        queue, pclass = openb_queue(name, r.get("qos", ""))
        p = pods[name]
        duration = (end if deleted is None else deleted) - created
        specs.append(JobSpec(name, queue, pclass, created, max(1.0, duration), 1,
                             p.gpu_count, p.gpu_milli, p.cpu_milli, p.memory_mib,
                             p.models, line))
    say(3 * n, 3 * n)
    return specs


def to_jobs(specs: Sequence[JobSpec], cfg: ControlConfig, tree: QueueTree,
            source: str = "<jobs>", nodes: Sequence[NodeSpec] = ()) -> list[Job]:
    """Resolve queues/tenants and priority classes and compile each row's request with its
    tenant's trust tier; errors name the line and the field. With `nodes`, a `resources`
    request no card of the cluster can ever serve is refused (`sim.fleet.FleetCards`)."""
    from gpugov.sim.fleet import FleetCards

    cards = FleetCards(nodes) if nodes else None
    oversubscribe = {t.namespace for t in cfg.tenants if t.oversubscribe}
    jobs = []
    for s in specs:
        if s.namespace and not s.queue and s.namespace not in tree.tenants:
            raise TraceError(source, s.line or None, "namespace",  # not `queue`: it is empty
                             f"{s.namespace!r} is not a tenant namespace of the config; "
                             f"allowed: {', '.join(tree.tenants) or '(no tenants)'}")
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
        req = spec_request(s)
        card = None
        if cards is not None and s.gpu_request is not None:
            # only `resources` rows: a trace row naming a model no node has stays a job the
            # control plane rejects (counted), as the openb study counts it
            try:
                card = cards.card_for(s.gpu_request)
            except ValueError as exc:
                raise TraceError(source, s.line or None, "resources", str(exc)) from None
        tenant = s.namespace or tree.names[leaf]
        if req is None:
            pod = PodRequest(s.name, s.cpu_milli, s.memory_mib,
                             node_selector=s.node_selector, tolerations=s.tolerations,
                             tenant=tenant)
        else:
            pod = req.to_pod_request(s.name, s.cpu_milli, s.memory_mib, card, modes=True,
                                     tier=trust, tenant=tenant, node_selector=s.node_selector,
                                     tolerations=s.tolerations,
                                     oversubscribe=s.namespace in oversubscribe)
        jobs.append(Job(s.name, leaf, pclass, s.submit, s.pods, pod, trust, s.duration))
    return jobs


def spec_request(s: JobSpec) -> GpuRequest | None:
    """A row's GPU request: its `resources`, or the milli columns as a whole-GPU or soft
    request (None for a CPU-only row)."""
    if s.gpu_request is not None:
        return s.gpu_request
    if not s.gpu_per_pod or not s.gpu_milli:
        return None
    whole = s.gpu_milli >= MILLI_PER_GPU
    return GpuRequest(s.gpu_per_pod, DeviceMode.EXCLUSIVE if whole else DeviceMode.SOFT,
                      milli=s.gpu_milli, memory_mib=s.gpu_memory_mib or None, models=s.models)


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
