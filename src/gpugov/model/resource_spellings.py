"""One request model, many spellings: translate how users ask for GPUs into one `GpuRequest`.

Pure code (no Kubernetes client): the webhook and scheduler (`k8s.resources` re-exports it) and
the replay's `resources` column (`sim.jobs`) translate with this one function.

Spellings (sources in ../shared/notes/data-plane-facts.md §1.5, §2 and hami-study.md §1.1, and
control-plane-anchors.md §1.8 for KAI):

- `nvidia.com/gpu: N` (device plugin): N whole GPUs, hard isolation;
- `nvidia.com/gpumem: MiB`, `nvidia.com/gpumem-percentage: P`, `nvidia.com/gpucores: P` (HAMi):
  a soft slice of memory and/or SM share (`gpucores: 100` = a whole card); with
  `nvidia.com/gpu: N` it is N devices each with that slice; without `gpucores` the slice has no
  compute limit (HAMi's `defaultCores: 0`); `nvidia.com/priority: 0|1` is HAMi's task
  priority. The names can be renamed as HAMi's chart does (`ResourceNames`), and Volcano's
  `volcano.sh/vgpu-number|vgpu-memory|vgpu-cores` are the same three roles (`ALIASES`);
- annotations `nvidia.com/use-gputype|nouse-gputype` (HAMi: comma lists, case-insensitive
  substrings of the card name) narrow the allowed models; `use-gpuuuid|nouse-gpuuuid`,
  `nvidia.com/vgpu-mode` other than `hami-core`, and scheduler policies gpugov cannot honour
  are refused (`HAMI_ANNOTATIONS`); `annotation_warnings` names unknown `hami.io/*`,
  `kai.scheduler/*` and `volcano.sh/*` annotations;
- `nvidia.com/mig-<profile>: N` (mixed strategy), or `nvidia.com/gpu` with the node selector
  `nvidia.com/gpu.product: <PRODUCT>-MIG-<profile>` (single strategy): N MIG instances;
- `nvidia.com/gpu.shared: 1`, `nvidia.com/mig-<p>.shared: 1` (time-slicing, renameByDefault):
  one replica, capped at the memory `nvidia.com/gpumem` / `gpumem-percentage` name (else
  card/replicas): soft isolation, unless its Tenant oversubscribes (none); NVIDIA's
  `renameByDefault: false` spelling, `nvidia.com/gpu: 1` with the node selector
  `nvidia.com/gpu.product: <PRODUCT>[-MIG-<p>]-SHARED`, is the same replica
  (`_nvidia_time_sliced`);
- `nvidia.com/gpu.mps: 1`: one MPS client, capped at card/clients and 100/clients % of the SMs
  (`gpumem` / `gpucores` say what it needs under those caps); isolation none;
- annotations `gpu-fraction`, `gpu-memory` (KAI): a soft slice by memory fraction or MiB, no
  compute limit (KAI shares the device's time), on `gpu-fraction-num-devices` devices;
- annotations `gpugov.io/model`, `gpugov.io/isolation`, `gpugov.io/topology` (ours): allowed
  models, minimum isolation level, topology policy (none | preferred | required).

Anything contradictory or impossible raises `RequestError`, whose message says what to write
instead. Like HAMi (`defaultGPUNum`), a soft-slice request without `nvidia.com/gpu` means 1 GPU.
A container whose GPU resources are all zero (`nvidia.com/gpu: 0`) asks for no GPU, as it
does for the kubelet. Values are tenant input: numbers are bounded (`MAX_INT`, `MAX_TEXT`) and
must be finite before any arithmetic, so a hostile value is a RequestError, never a crash.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpugov.model.catalog import CATALOG, MILLI_PER_GPU
from gpugov.model.devices import DeviceMode
from gpugov.model.gpu_request import GpuRequest, mig_milli
from gpugov.model.isolation import IsolationLevel
from gpugov.model.mig import MIG_GEOMETRIES, get_geometry, models_with_profile

GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PCT = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"
SHARED = "nvidia.com/gpu.shared"
MPS = "nvidia.com/gpu.mps"
MIG_PREFIX = "nvidia.com/mig-"
PRODUCT_LABEL = "nvidia.com/gpu.product"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
#: GFD's product suffix for GPUs time-sliced under the unrenamed `nvidia.com/gpu`
SHARED_SUFFIX = "-SHARED"
KAI_FRACTION = "gpu-fraction"
KAI_MEMORY = "gpu-memory"
KAI_NUM_DEVICES = "gpu-fraction-num-devices"
KAI_CONTAINER = "gpu-fraction-container-name"
PRIORITY = "nvidia.com/priority"
USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
USE_GPUUUID = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"
VGPU_MODE = "nvidia.com/vgpu-mode"
NODE_POLICY = "hami.io/node-scheduler-policy"
GPU_POLICY = "hami.io/gpu-scheduler-policy"
#: Volcano's vGPU device plugin: the same roles as HAMi's names (volcano-vgpu-device-plugin)
ALIASES = {"volcano.sh/vgpu-number": GPU, "volcano.sh/vgpu-memory": GPUMEM,
           "volcano.sh/vgpu-cores": GPUCORES}
#: Volcano's vGPU annotations: the same meaning as HAMi's (volcano how_to_use_volcano_vgpu.md)
ANNOTATION_ALIASES = {"volcano.sh/vgpu-mode": VGPU_MODE,
                      "volcano.sh/vgpu-use-gpuuuid": USE_GPUUUID,
                      "volcano.sh/vgpu-nouse-gpuuuid": NOUSE_GPUUUID}
#: policy values gpugov's placement honours per pod: gpugov packs nodes and devices
#: (fragmentation-aware best fit, which is a binpack) and keeps multi-GPU pods close
#: (`topology-aware` = gpugov.io/topology: preferred, its default)
POLICIES_HONOURED = {NODE_POLICY: ("binpack",), GPU_POLICY: ("binpack", "topology-aware")}
#: annotations the translation reads besides ours (the rest of `WATCHED_PREFIXES` warn)
HAMI_ANNOTATIONS = (USE_GPUTYPE, NOUSE_GPUTYPE, USE_GPUUUID, NOUSE_GPUUUID, VGPU_MODE,
                    NODE_POLICY, GPU_POLICY)
KAI_ANNOTATIONS = ("gpu-fraction", "gpu-memory", "gpu-fraction-num-devices",
                   "gpu-fraction-container-name")
#: annotation namespaces of the schedulers gpugov replaces: an annotation there that gpugov
#: does not read gets a warning naming it (it would otherwise be silently without effect)
WATCHED_PREFIXES = ("hami.io/", "kai.scheduler/", "volcano.sh/", "scheduling.volcano.sh/")
ANN_MODEL = "gpugov.io/model"
ANN_ISOLATION = "gpugov.io/isolation"
ANN_TOPOLOGY = "gpugov.io/topology"
OUR_ANNOTATIONS = (ANN_MODEL, ANN_ISOLATION, ANN_TOPOLOGY)
TOPOLOGY_VALUES = ("none", "preferred", "required")
#: largest integer a spelling accepts (GPU counts, MiB, %): far beyond any real request
MAX_INT = 2**31 - 1
#: longest number text read
MAX_TEXT = 64
_ZERO = re.compile(r"[+-]?(0+\.?0*|\.0+)([eE][+-]?\d{1,4}|[numkMGTPE]i?)?")
_KNOWN_NVIDIA = (GPU, GPUMEM, GPUMEM_PCT, GPUCORES, PRIORITY, SHARED, MPS,
                 f"{MIG_PREFIX}<profile>",
                 f"{MIG_PREFIX}<profile>.shared", *ALIASES)


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """The resource names of HAMi's roles, renamable as HAMi's chart allows (`resourceName`,
    `resourceMem`, `resourceMemPercentage`, `resourceCores`, `resourcePriority`): a cluster
    that renamed them keeps its pod specs. The default names are always understood too."""

    gpu: str = GPU
    gpumem: str = GPUMEM
    gpumem_percentage: str = GPUMEM_PCT
    gpucores: str = GPUCORES
    priority: str = PRIORITY

    def table(self) -> dict[str, str]:
        """Spelling -> canonical name, for every name this cluster's pods may use."""
        out = {GPU: GPU, GPUMEM: GPUMEM, GPUMEM_PCT: GPUMEM_PCT, GPUCORES: GPUCORES,
               PRIORITY: PRIORITY, **ALIASES}
        out.update({self.gpu: GPU, self.gpumem: GPUMEM, self.gpumem_percentage: GPUMEM_PCT,
                    self.gpucores: GPUCORES, self.priority: PRIORITY})
        return out

    def renamed(self) -> tuple[str, ...]:
        """Names outside `nvidia.com/` a pod may ask with (they must reach the webhook)."""
        return tuple(sorted(k for k in self.table() if not k.startswith("nvidia.com/")))


DEFAULT_NAMES = ResourceNames()


class RequestError(ValueError):
    """A request gpugov will not translate; `instead` is what the user should write."""

    def __init__(self, spelling: str, problem: str, instead: str) -> None:
        self.spelling = spelling
        self.problem = problem
        self.instead = instead
        super().__init__(f"{spelling}: {problem}; instead, {instead}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _int(spelling: str, value: object, unit: str, example: str) -> int:
    if isinstance(value, bool):
        raise RequestError(spelling, f"{value!r} is not a number", f"write {example}")
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip()
        if len(text) > MAX_TEXT or not re.fullmatch(r"\d+", text):
            raise RequestError(spelling, f"{_short(value)} is not a plain integer ({unit})",
                               f"write {example}")
        number = int(text)
    if abs(number) > MAX_INT:
        raise RequestError(spelling, f"{_short(value)} is out of range (at most {MAX_INT})",
                           f"write {example}")
    return number


def _float(spelling: str, value: object, example: str) -> float:
    text = str(value).strip()
    try:
        if len(text) > MAX_TEXT:
            raise ValueError
        number = float(text)
    except ValueError:
        raise RequestError(spelling, f"{_short(value)} is not a number",
                           f"write {example}") from None
    if not math.isfinite(number):
        raise RequestError(spelling, f"{_short(value)} is not a finite number", f"write {example}")
    return number


def is_zero(value: object) -> bool:
    """A quantity that is exactly zero (`0`, `"0"`, `"0k"`, `"0e3"`): asks for nothing."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value == 0
    text = str(value).strip()
    return len(text) <= MAX_TEXT and _ZERO.fullmatch(text) is not None


def model_from_product_label(label: str) -> tuple[str | None, str | None]:
    """(catalog model, MIG profile) from a GFD `nvidia.com/gpu.product` value.

    GFD writes the NVML name with spaces turned into `-`, plus `-MIG-<profile>` under the
    single strategy and `-SHARED` for renamed replicas (data-plane-facts §1.5).
    """
    label = label.removesuffix("-SHARED")
    profile = None
    if "-MIG-" in label:
        label, profile = label.split("-MIG-", 1)
    for m in CATALOG.values():
        if m.nvml_name and m.nvml_name.replace(" ", "-") == label:
            return m.name, profile
    return None, profile


def _suggest_profiles(profile: str) -> str:
    g_part = profile.split(".", 1)[0]
    similar = sorted({p.name for g in MIG_GEOMETRIES.values() for p in g.base_profiles()
                      if p.name.startswith(g_part + ".")})
    return ", ".join(similar) if similar else "a profile such as 1g.10gb or 3g.40gb"


def _parse_models(value: str) -> tuple[str, ...]:
    models = tuple(m.strip() for m in value.split(",") if m.strip())
    unknown = [m for m in models if m not in CATALOG]
    if unknown or not models:
        raise RequestError(ANN_MODEL, f"unknown GPU model(s) {', '.join(unknown) or '(empty)'}",
                           f"write a comma list of catalog names, e.g. "
                           f"'H100-SXM5-80GB,A100-SXM4-80GB' (known: {', '.join(CATALOG)})")
    return models


def _max_memory(models: tuple[str, ...]) -> tuple[int, str]:
    pool = [CATALOG[m] for m in models] if models else list(CATALOG.values())
    best = max(pool, key=lambda m: m.memory_mib or 0)
    return best.memory_mib or 0, best.name


def canonical_limits(limits: Mapping[str, object], names: ResourceNames = DEFAULT_NAMES
                     ) -> tuple[dict[str, object], dict[str, str]]:
    """GPU limits under their canonical names, and canonical -> the name the pod used.
    RequestError when two spellings name the same role (`nvidia.com/gpumem` and
    `volcano.sh/vgpu-memory`)."""
    table = names.table()
    out: dict[str, object] = {}
    used: dict[str, str] = {}
    for k, v in limits.items():
        canon = table.get(k)
        if canon is None:
            if not k.startswith("nvidia.com/"):
                continue  # cpu, memory, other vendors: not a GPU gpugov governs
            canon = k
        if canon in out:
            raise RequestError(k, f"asks for the same thing as {used[canon]}",
                               f"keep only one of {used[canon]} and {k}")
        out[canon] = v
        used[canon] = k
    return out, used


def _spoken(exc: RequestError, used: Mapping[str, str]) -> RequestError:
    """`exc` in the names the pod used (a renamed or Volcano spelling)."""
    renames = {c: u for c, u in used.items() if c != u}
    if any(u in ALIASES for u in used.values()):  # the pod speaks Volcano: answer in it
        renames.update({c: a for a, c in ALIASES.items() if c not in renames})
    if not renames:
        return exc

    def say(text: str) -> str:
        for c in sorted(renames, key=len, reverse=True):
            text = re.sub(re.escape(c) + r"(?![\w.-])", renames[c], text)
        return text
    return RequestError(say(exc.spelling), say(exc.problem), say(exc.instead))


def translate(limits: Mapping[str, object], annotations: Mapping[str, str] | None = None,
              node_selector: Mapping[str, str] | None = None,
              names: ResourceNames = DEFAULT_NAMES) -> GpuRequest | None:
    """Translate one container's resource limits plus pod annotations/node selector.

    Returns None for a container that asks for no GPU at all. `names`: this cluster's
    resource names (HAMi's chart renames); messages use the names the pod used.
    """
    canon, used = canonical_limits(limits, names)
    ann = dict(annotations or {})
    for alias, key in ANNOTATION_ALIASES.items():
        if alias in ann:
            if key in ann and ann[key] != ann[alias]:
                raise RequestError(alias, f"contradicts {key} ({_short(ann[key])})",
                                   f"keep only one of {alias} and {key}")
            ann[key] = ann.pop(alias)
            used[key] = alias
    try:
        return _translate(canon, ann, dict(node_selector or {}))
    except RequestError as exc:
        raise _spoken(exc, used) from None


def _translate(gpu_keys: dict[str, object], ann: dict[str, str], sel: dict[str, str]
               ) -> GpuRequest | None:
    if gpu_keys and all(is_zero(v) for v in gpu_keys.values()):
        gpu_keys = {}  # `nvidia.com/gpu: 0`: no GPU (the kubelet reads it the same way)
    for k in gpu_keys:
        if not (k in (GPU, GPUMEM, GPUMEM_PCT, GPUCORES, SHARED, MPS, PRIORITY)
                or k.startswith(MIG_PREFIX)):
            raise RequestError(k, "is not a GPU resource gpugov knows",
                               f"use one of {', '.join(_KNOWN_NVIDIA)}")
    priority = None
    if PRIORITY in gpu_keys:
        priority = _int(PRIORITY, gpu_keys.pop(PRIORITY), "priority", f"{PRIORITY}: 1")
        if priority not in (0, 1):
            raise RequestError(PRIORITY, f"{priority} is not a HAMi task priority",
                               f"write {PRIORITY}: 0 (high) or 1 (low, the default)")
        if not gpu_keys:
            raise RequestError(PRIORITY, "the container asks for no GPU",
                               f"add {GPU}: 1 (or another GPU resource) or drop it")
    for k in ann:
        if k.startswith("gpugov.io/") and k not in OUR_ANNOTATIONS:
            raise RequestError(k, "is not a gpugov.io annotation",
                               f"use one of {', '.join(OUR_ANNOTATIONS)}")

    models = _parse_models(ann[ANN_MODEL]) if ANN_MODEL in ann else ()
    models = _hami_annotations(ann, models)
    isolation = None
    if ANN_ISOLATION in ann:
        try:
            isolation = IsolationLevel.parse(ann[ANN_ISOLATION])
        except ValueError as e:
            raise RequestError(ANN_ISOLATION, str(e), "write none, soft or hard") from None
    topology = ann.get(ANN_TOPOLOGY, "preferred").strip().lower()
    if topology not in TOPOLOGY_VALUES:
        raise RequestError(ANN_TOPOLOGY, f"{topology!r} is not a topology policy",
                           f"write one of {', '.join(TOPOLOGY_VALUES)}")

    kai = [k for k in (KAI_FRACTION, KAI_MEMORY, KAI_NUM_DEVICES) if k in ann]
    mig_keys = [k for k in gpu_keys if k.startswith(MIG_PREFIX)]
    soft_keys = [k for k in (GPUMEM, GPUMEM_PCT, GPUCORES) if k in gpu_keys]
    common = {"models": models, "isolation": isolation, "topology": topology,
              "priority": priority}

    if not gpu_keys and not kai:
        hami = [k for k in HAMI_ANNOTATIONS if k in ann]
        if hami:
            raise RequestError(hami[0], "the container asks for no GPU",
                               f"add {GPU}: 1 (or another GPU resource) or drop the annotation")
        if ANN_MODEL in ann or isolation is not None:
            raise RequestError(ANN_MODEL if ANN_MODEL in ann else ANN_ISOLATION,
                               "the container asks for no GPU",
                               f"add {GPU}: 1 (or another GPU resource) or drop the annotation")
        return None
    if kai:
        return _kai(ann, kai, gpu_keys, common)
    if mig_keys or (GPU in gpu_keys and "-MIG-" in sel.get(PRODUCT_LABEL, "")):
        return _mig(gpu_keys, mig_keys, soft_keys, sel, common)
    if MPS in gpu_keys:
        return _mps(gpu_keys, common)
    if GPU in gpu_keys and SHARED not in gpu_keys:
        replica = _nvidia_time_sliced(gpu_keys, sel)
        if replica is not None:
            pm, _ = model_from_product_label(sel[PRODUCT_LABEL])
            if pm is not None and common["models"] and pm not in common["models"]:
                raise RequestError(ANN_MODEL, f"excludes {pm}, the node selector's GPU",
                                   "make the model annotations and the node selector agree")
            if pm is not None:
                common = dict(common, models=(pm,))
            req = _mps(replica, common) if MPS in replica else _shared(replica, soft_keys, common)
            said = f"{GPU} + {PRODUCT_LABEL}={sel[PRODUCT_LABEL]}"
            return replace(req, spellings=(said, *req.spellings[1:]))
    if SHARED in gpu_keys:
        return _shared(gpu_keys, soft_keys, common)
    if soft_keys:
        return _soft(gpu_keys, common)
    count = _int(GPU, gpu_keys[GPU], "GPUs", f"{GPU}: 1")
    if count < 1:
        raise RequestError(GPU, f"asks for {count} GPUs", f"write {GPU}: 1 or more, or omit it")
    return GpuRequest(count, DeviceMode.EXCLUSIVE, spellings=(GPU,), **common)


def _check_isolation(spelling: str, mode: DeviceMode, isolation: IsolationLevel | None,
                     instead: str) -> None:
    if isolation is not None and mode.isolation < isolation:
        raise RequestError(
            ANN_ISOLATION,
            f"{isolation} isolation asked, but {spelling} delivers only {mode.isolation}",
            instead)


def _gpu_count(gpu_keys: Mapping[str, object]) -> int:
    """`nvidia.com/gpu` of a slice request: how many devices each get the slice (HAMi:
    `defaultGPUNum` 1 when absent)."""
    if GPU not in gpu_keys:
        return 1
    n = _int(GPU, gpu_keys[GPU], "GPUs", f"{GPU}: 1")
    if n < 1:
        raise RequestError(GPU, f"asks for {n} GPUs", f"write {GPU}: 1 or more")
    return n


def _matches(card: str, entries: list[str]) -> bool:
    card = card.upper()
    return any(e.upper() in card for e in entries)


def _card_names(model: str) -> str:
    """The text HAMi's type filter matches: the NVML name (HAMi registers it) and ours."""
    m = CATALOG[model]
    return f"{m.nvml_name or ''} {m.name}"


def _list(ann: Mapping[str, str], key: str) -> list[str]:
    value = ann.get(key, "")
    if len(value) > 4096:
        raise RequestError(key, "is longer than 4096 characters", "list fewer entries")
    return [e.strip() for e in value.split(",") if e.strip()]


def _hami_annotations(ann: Mapping[str, str], models: tuple[str, ...]) -> tuple[str, ...]:
    """HAMi's pod annotations as gpugov's allowed models; refuses what gpugov cannot honour.

    `use-gputype` / `nouse-gputype` are comma lists matched as HAMi does (a case-insensitive
    substring of the card's name: `A100` matches every A100): the catalog models they allow
    (intersected with `gpugov.io/model`). An empty value is no constraint, as in HAMi."""
    use, nouse = _list(ann, USE_GPUTYPE), _list(ann, NOUSE_GPUTYPE)
    both = sorted({e.upper() for e in use} & {e.upper() for e in nouse})
    if both:
        raise RequestError(f"{USE_GPUTYPE}, {NOUSE_GPUTYPE}",
                           f"both name {', '.join(both)}: a card cannot be wanted and refused",
                           f"name {both[0]} in only one of them")
    if use or nouse:
        pool = models or tuple(CATALOG)
        allowed = tuple(m for m in pool if (not use or _matches(_card_names(m), use))
                        and not _matches(_card_names(m), nouse))
        if not allowed:
            known = ", ".join(f"{m} ({CATALOG[m].nvml_name})" if CATALOG[m].nvml_name else m
                              for m in CATALOG)
            raise RequestError(USE_GPUTYPE if use else NOUSE_GPUTYPE,
                               f"no GPU model gpugov knows matches (use: {use or '-'}, nouse: "
                               f"{nouse or '-'}{', within ' + ','.join(models) if models else ''})",
                               f"name a part of a card name, e.g. A100 or H100; known: {known}")
        if models or allowed != pool:  # nothing excluded from "any model": stays any
            models = allowed
    for key in (USE_GPUUUID, NOUSE_GPUUUID):
        if _list(ann, key):
            raise RequestError(key, "pins GPUs by UUID, which gpugov's scheduler does not "
                               "place by (it places by model and node)",
                               f"select the GPUs' model with {USE_GPUTYPE} or {ANN_MODEL}, or "
                               "their node with a nodeSelector (kubernetes.io/hostname), and "
                               "drop the UUID list")
    mode = ann.get(VGPU_MODE)
    if mode is not None and mode.strip() not in ("", "hami-core"):
        raise RequestError(VGPU_MODE, f"{_short(mode)} is not served through this annotation",
                           "drop it (hami-core is gpugov's soft slice); for MIG ask for "
                           f"nvidia.com/mig-<profile>: 1, for an MPS client {MPS}: 1")
    for key, ok in POLICIES_HONOURED.items():
        if key in ann:
            values = _list(ann, key)
            bad = [v for v in values if v.lower() not in ok]
            if bad:
                raise RequestError(key, f"{', '.join(bad)} is not a policy gpugov applies per "
                                   "pod (gpugov packs nodes and devices, fragmentation-aware)",
                                   f"drop {key} or write {' or '.join(ok)}")
    return models


def annotation_warnings(annotations: Mapping[str, str] | None) -> list[str]:
    """A warning per annotation in another scheduler's namespace (`WATCHED_PREFIXES`), or one
    of HAMi's `nvidia.com/` annotations (`HAMI_UNREAD`), that gpugov does not read, so a
    migrated pod never relies on one silently."""
    out = []
    for k in sorted(annotations or {}):
        if (k.startswith(WATCHED_PREFIXES) or k in HAMI_UNREAD) and \
                k not in HAMI_ANNOTATIONS and k not in IGNORED_KNOWN and \
                k not in ANNOTATION_ALIASES:
            out.append(f"annotation {k[:120]} has no effect under gpugov (it is not read); "
                       "see docs/migration.md for what carries over")
    return out


#: HAMi's pod annotations under nvidia.com/ that gpugov does not read (NUMA binding: gpugov
#: keeps a multi-GPU pod's devices close by NVLink domain, gpugov.io/topology)
HAMI_UNREAD = ("nvidia.com/numa-bind",)
#: annotations in the watched namespaces that gpugov reads elsewhere (the Volcano gang name)
IGNORED_KNOWN = ("scheduling.volcano.sh/group-name", "scheduling.k8s.io/group-name",
                 "scheduling.volcano.sh/queue-name")


def _soft(gpu_keys: Mapping[str, object], common: dict) -> GpuRequest:
    models = common["models"]
    if GPUMEM in gpu_keys and GPUMEM_PCT in gpu_keys:
        raise RequestError(GPUMEM_PCT, f"contradicts {GPUMEM} (two memory sizes)",
                           f"keep only {GPUMEM} (MiB) or only {GPUMEM_PCT} (%)")
    count = _gpu_count(gpu_keys)
    milli: int | None = None
    memory_mib = memory_pct = None
    spellings = [k for k in (GPU, GPUMEM, GPUMEM_PCT, GPUCORES) if k in gpu_keys]
    if GPUCORES in gpu_keys:
        cores = _int(GPUCORES, gpu_keys[GPUCORES], "% of SMs", f"{GPUCORES}: 50")
        if cores > 100:
            raise RequestError(GPUCORES, f"{cores} % is more than one GPU",
                               f"write {GPUCORES}: 100 for a whole GPU, or {GPU}: N for N GPUs")
        if cores < 1:
            raise RequestError(GPUCORES, "0 % gives no compute share",
                               f"write {GPUCORES}: 1..100, or omit it for a memory-only slice")
        milli = cores * MILLI_PER_GPU // 100
    if GPUMEM in gpu_keys:
        memory_mib = _int(GPUMEM, gpu_keys[GPUMEM], "MiB", f"{GPUMEM}: 10240")
        if memory_mib < 1:
            raise RequestError(GPUMEM, "0 MiB means no limit in HAMi-core",
                               f"write a positive MiB value, or omit {GPUMEM}")
        biggest, name = _max_memory(models)
        if memory_mib > biggest:
            raise RequestError(
                GPUMEM, f"{memory_mib} MiB is more than any allowed card ({name}: {biggest} MiB)",
                f"ask for at most {biggest} MiB, or {GPU}: N whole GPUs and shard the model")
    if GPUMEM_PCT in gpu_keys:
        pct = _int(GPUMEM_PCT, gpu_keys[GPUMEM_PCT], "%", f"{GPUMEM_PCT}: 50")
        if not 1 <= pct <= 100:
            raise RequestError(GPUMEM_PCT, f"{pct} is outside 1..100",
                               f"write {GPUMEM_PCT}: 1..100 (100 = the whole card's memory)")
        memory_pct = float(pct)
    # HAMi (defaultExclusiveCoreIfNeeded): gpucores 100, or all of the memory without
    # gpucores, is an exclusive card
    whole = milli == MILLI_PER_GPU or (milli is None and memory_pct == 100.0)
    if whole:
        milli, memory_mib, memory_pct = MILLI_PER_GPU, None, None
    mode = DeviceMode.EXCLUSIVE if whole else DeviceMode.SOFT
    _check_isolation(", ".join(spellings), mode, common["isolation"],
                     "ask for a MIG profile (nvidia.com/mig-<profile>) or a whole "
                     f"{GPU} for hard isolation")
    return GpuRequest(count, mode, milli=milli, memory_mib=memory_mib,
                      memory_percent=memory_pct, spellings=tuple(spellings), **common)


def _mig(gpu_keys: Mapping[str, object], mig_keys: list[str], soft_keys: list[str],
         sel: Mapping[str, str], common: dict) -> GpuRequest:
    models: tuple[str, ...] = common["models"]
    # a time-sliced instance's replica may name its memory (MiB), as a gpu.shared replica does
    named = any(k.endswith(".shared") for k in mig_keys) and soft_keys == [GPUMEM]
    if soft_keys and not named:
        raise RequestError(soft_keys[0], "a MIG instance has fixed memory and compute",
                           "drop it and pick the MIG profile that is big enough, or ask for a "
                           "soft slice without the MIG resource")
    if mig_keys:
        if GPU in gpu_keys or SHARED in gpu_keys:
            raise RequestError(mig_keys[0], f"mixes a MIG instance with {GPU}",
                               "ask for either MIG instances or whole GPUs in one container")
        if len(mig_keys) > 1:
            raise RequestError(", ".join(mig_keys), "asks for several MIG profiles",
                               "use one profile per container (split into containers)")
        key = mig_keys[0]
        shared = key.endswith(".shared")
        profile = key.removeprefix(MIG_PREFIX).removesuffix(".shared")
        count = _int(key, gpu_keys[key], "instances", f"{key}: 1")
        spelling = key
    else:  # single strategy: nvidia.com/gpu + product label with -MIG-<profile>
        product_model, profile_opt = model_from_product_label(sel[PRODUCT_LABEL])
        profile = profile_opt or ""
        # `-MIG-<p>-SHARED`: the instance time-sliced under nvidia.com/gpu (NVIDIA's README)
        shared = sel[PRODUCT_LABEL].endswith(SHARED_SUFFIX)
        count = _int(GPU, gpu_keys[GPU], "instances", f"{GPU}: 1")
        spelling = key = f"{GPU} + {PRODUCT_LABEL}={sel[PRODUCT_LABEL]}"
        if product_model is not None:
            if models and product_model not in models:
                raise RequestError(ANN_MODEL, f"excludes {product_model}, the node selector's GPU",
                                   "make gpugov.io/model and the node selector agree")
            models = (product_model,)
    if count < 1:
        raise RequestError(spelling, f"asks for {count} instances", "ask for 1 or more")
    having = models_with_profile(profile)
    if not having:
        raise RequestError(spelling, f"no GPU in the catalog has a MIG profile {profile!r}",
                           f"use a profile nvidia-smi lists, e.g. {_suggest_profiles(profile)}")
    if models:
        allowed = [m for m in models if m in having]
        if not allowed:
            raise RequestError(spelling, f"{profile} does not exist on {', '.join(models)}",
                               f"use a model that has it ({', '.join(having)}) or a profile of "
                               f"{models[0]}: "
                               f"{', '.join(_profiles_of(models[0]))}")
        models = tuple(allowed)
    else:
        models = tuple(having)  # the profile only exists on these models
    if shared:
        if count != 1:
            raise RequestError(key, f"asks for {count} time-slice replicas",
                               f"ask for {key}: 1 (extra replicas add no compute)")
        _check_isolation(key, DeviceMode.TIMESLICE, common["isolation"],
                         f"ask for {MIG_PREFIX}{profile} (not .shared) for a MIG instance")
        mode = DeviceMode.TIMESLICE
    else:
        mode = DeviceMode.MIG
    out = dict(common, models=models)
    memory_mib = None
    if named:  # the replica's memory cap, at most its instance's
        memory_mib = _int(GPUMEM, gpu_keys[GPUMEM], "MiB", f"{GPUMEM}: 2048")
        biggest = max(get_geometry(m).profile(profile).memory_mib for m in models)
        if not 1 <= memory_mib <= biggest:
            raise RequestError(GPUMEM, f"{memory_mib} MiB is outside 1..{biggest} (a "
                               f"{profile} instance)", f"ask for 1..{biggest} MiB, or omit "
                               "it for the instance's memory ÷ replicas")
    return GpuRequest(count, mode, milli=mig_milli(profile, models), mig_profile=profile,
                      memory_mib=memory_mib, spellings=(spelling,), **out)


def _profiles_of(model: str) -> list[str]:
    return get_geometry(model).profile_names() if model in MIG_GEOMETRIES else ["(no MIG)"]


def _shared(gpu_keys: Mapping[str, object], soft_keys: list[str], common: dict) -> GpuRequest:
    """One time-slice replica; `gpumem` / `gpumem-percentage` name the memory it is charged
    and capped at (else card/replicas of the device it lands on); its compute is the driver's
    time-slicing, so `gpucores` is refused."""
    if GPUCORES in soft_keys:
        raise RequestError(GPUCORES, f"time-slicing ({SHARED}) does not enforce a compute share",
                           f"for a soft slice write {GPU}: 1 with {GPUCORES}")
    if GPUMEM in gpu_keys and GPUMEM_PCT in gpu_keys:
        raise RequestError(GPUMEM_PCT, f"contradicts {GPUMEM} (two memory sizes)",
                           f"keep only {GPUMEM} (MiB) or only {GPUMEM_PCT} (%)")
    memory_mib = memory_pct = None
    if GPUMEM in gpu_keys:
        memory_mib = _int(GPUMEM, gpu_keys[GPUMEM], "MiB", f"{GPUMEM}: 10240")
        biggest, name = _max_memory(common["models"])
        if not 1 <= memory_mib <= biggest:
            raise RequestError(GPUMEM, f"{memory_mib} MiB is outside 1..{biggest} ({name})",
                               f"ask for 1..{biggest} MiB, or omit it for card/replicas")
    if GPUMEM_PCT in gpu_keys:
        pct = _int(GPUMEM_PCT, gpu_keys[GPUMEM_PCT], "%", f"{GPUMEM_PCT}: 25")
        if not 1 <= pct <= 100:
            raise RequestError(GPUMEM_PCT, f"{pct} is outside 1..100",
                               f"write {GPUMEM_PCT}: 1..100 (100 = the whole card's memory)")
        memory_pct = float(pct)
    if GPU in gpu_keys:
        raise RequestError(SHARED, f"mixes a time-slice replica with {GPU}",
                           "ask for one of the two")
    n = _int(SHARED, gpu_keys[SHARED], "replicas", f"{SHARED}: 1")
    if n != 1:
        raise RequestError(SHARED, f"asks for {n} replicas; they may land on one GPU and add "
                           "no compute (failRequestsGreaterThanOne)",
                           f"write {SHARED}: 1, or {GPU}: {n} for {n} whole GPUs")
    _check_isolation(SHARED, DeviceMode.TIMESLICE, common["isolation"],
                     f"write {GPU}: 1 with {GPUMEM} for a soft slice, or {GPU}: 1 for hard")
    spellings = tuple(k for k in (SHARED, GPUMEM, GPUMEM_PCT) if k in gpu_keys)
    return GpuRequest(1, DeviceMode.TIMESLICE, milli=None, memory_mib=memory_mib,
                      memory_percent=memory_pct, spellings=spellings, **common)


def _nvidia_time_sliced(gpu_keys: Mapping[str, object], sel: Mapping[str, str]
                        ) -> dict[str, object] | None:
    """`nvidia.com/gpu` on a node the pod selects as time-sliced, as NVIDIA's device plugin
    serves it with `renameByDefault: false`: GFD then writes the product label with
    `-SHARED` (NVIDIA's README: "the SHARED annotation ensures that a nodeSelector can be
    used to attract pods to nodes that have shared GPUs"), and `nvidia.com/gpu: 1` there is
    one replica (one MPS client when the selector also names `sharing-strategy: mps`).
    gpugov reads exactly that selector as `nvidia.com/gpu.shared: 1` (the same replica,
    capped the same way); without it `nvidia.com/gpu` is whole GPUs wherever the pod lands,
    so a pod is never silently given a different size. A selector on the sharing labels
    alone names no size gpugov can serve with `nvidia.com/gpu` and is refused.
    Returns the limits as the replica spelling, or None (not a time-sliced selector)."""
    product = sel.get(PRODUCT_LABEL, "")
    strategy = sel.get(STRATEGY_LABEL)
    if product.endswith(SHARED_SUFFIX):
        n = _int(GPU, gpu_keys[GPU], "replicas", f"{GPU}: 1")
        if n != 1:
            raise RequestError(
                f"{GPU} + {PRODUCT_LABEL}={_short(product)}",
                f"asks for {n} time-slice replicas; they may be one GPU and add no compute "
                "(gpugov serves NVIDIA time-slicing as failRequestsGreaterThanOne: true, "
                "which NVIDIA recommends)",
                f"write {GPU}: 1 for one replica, or drop the -SHARED selector for {n} "
                "whole GPUs")
        out = {k: v for k, v in gpu_keys.items() if k != GPU}
        out[MPS if strategy == "mps" else SHARED] = 1  # GFD marks MPS replicas -SHARED too
        return out
    if strategy in ("time-slicing", "mps"):
        write = SHARED if strategy == "time-slicing" else MPS
        raise RequestError(
            f"{GPU} + {STRATEGY_LABEL}={_short(strategy)}",
            f"{GPU} is whole GPUs, which nodes sharing their GPUs ({strategy}) do not have",
            f"ask for {write}: 1, or select {PRODUCT_LABEL}: <product>{SHARED_SUFFIX} (NVIDIA's "
            "label for time-sliced GPUs served as nvidia.com/gpu)")
    return None


def _mps(gpu_keys: Mapping[str, object], common: dict) -> GpuRequest:
    """One MPS client (`nvidia.com/gpu.mps: 1`); `gpumem` (MiB) and `gpucores` (%) say what it
    needs, which must fit under the per-client caps (card/clients, 100/clients) it gets."""
    for other in (GPU, SHARED, GPUMEM_PCT):
        if other in gpu_keys:
            raise RequestError(MPS, f"cannot be combined with {other}",
                               f"ask for {MPS}: 1, optionally with {GPUMEM} (MiB) and "
                               f"{GPUCORES} (%)")
    n = _int(MPS, gpu_keys[MPS], "clients", f"{MPS}: 1")
    if n != 1:
        raise RequestError(MPS, f"asks for {n} MPS clients; one process gets one client",
                           f"write {MPS}: 1, or {GPU}: {n} for {n} whole GPUs")
    milli = memory_mib = None
    if GPUCORES in gpu_keys:
        cores = _int(GPUCORES, gpu_keys[GPUCORES], "% of SMs", f"{GPUCORES}: 25")
        if not 1 <= cores <= 100:
            raise RequestError(GPUCORES, f"{cores} is outside 1..100",
                               f"write {GPUCORES}: 1..100, or omit it for 100/clients")
        milli = cores * MILLI_PER_GPU // 100
    if GPUMEM in gpu_keys:
        memory_mib = _int(GPUMEM, gpu_keys[GPUMEM], "MiB", f"{GPUMEM}: 10240")
        biggest, name = _max_memory(common["models"])
        if not 1 <= memory_mib <= biggest:
            raise RequestError(GPUMEM, f"{memory_mib} MiB is outside 1..{biggest} ({name})",
                               f"ask for 1..{biggest} MiB, or omit it for card/clients")
    _check_isolation(MPS, DeviceMode.MPS, common["isolation"],
                     f"write {GPU}: 1 with {GPUMEM} for a soft slice, or {GPU}: 1 for hard")
    spellings = tuple(k for k in (MPS, GPUMEM, GPUCORES) if k in gpu_keys)
    return GpuRequest(1, DeviceMode.MPS, milli=milli, memory_mib=memory_mib,
                      spellings=spellings, **common)


def _kai(ann: Mapping[str, str], kai: list[str], gpu_keys: Mapping[str, object],
         common: dict) -> GpuRequest:
    if gpu_keys:
        other = next(iter(gpu_keys))
        raise RequestError(kai[0], f"KAI annotations cannot be combined with {other}",
                           "use either the KAI annotations or nvidia.com resources")
    if KAI_FRACTION in ann and KAI_MEMORY in ann:
        raise RequestError(KAI_MEMORY, f"contradicts {KAI_FRACTION} (two sizes)",
                           f"keep only {KAI_FRACTION} or only {KAI_MEMORY}")
    n = 1
    if KAI_NUM_DEVICES in ann:
        n = _int(KAI_NUM_DEVICES, ann[KAI_NUM_DEVICES], "devices", f"{KAI_NUM_DEVICES}: '1'")
        if n < 1:
            raise RequestError(KAI_NUM_DEVICES, f"{n} devices", f"write {KAI_NUM_DEVICES}: '1' "
                               "or more (each device gets the fraction)")
    spellings = tuple(kai)
    if KAI_FRACTION in ann:
        frac = _float(KAI_FRACTION, ann[KAI_FRACTION], f"{KAI_FRACTION}: '0.5'")
        if frac > 1:
            raise RequestError(KAI_FRACTION, f"{frac} is more than one GPU",
                               f"write {GPU}: {math.ceil(frac)} for whole GPUs")
        if frac <= 0:
            raise RequestError(KAI_FRACTION, f"{frac} is not a positive fraction",
                               f"write a value in (0, 1], e.g. {KAI_FRACTION}: '0.5'")
        # KAI: a share of the device's memory; compute is shared in time (no limit)
        # whole percent, rounded up (never less than asked; below 1 a whole GPU is 100 %),
        # so the webhook can write it as nvidia.com/gpumem-percentage for the device plugin
        pct = 100.0 if frac >= 1 else float(min(99, max(1, math.ceil(frac * 100 - 1e-9))))
        mode = DeviceMode.EXCLUSIVE if pct >= 100 else DeviceMode.SOFT
        _check_isolation(KAI_FRACTION, mode, common["isolation"],
                         f"ask for a MIG profile or {GPU}: 1 for hard isolation")
        if mode is DeviceMode.EXCLUSIVE:
            return GpuRequest(n, mode, spellings=spellings, **common)
        return GpuRequest(n, mode, milli=None, memory_percent=pct, spellings=spellings,
                          **common)
    if KAI_MEMORY not in ann:
        raise RequestError(KAI_NUM_DEVICES, "gives no size",
                           f"add {KAI_FRACTION} or {KAI_MEMORY}")
    mib = _int(KAI_MEMORY, ann[KAI_MEMORY], "MiB", f"{KAI_MEMORY}: '10240'")
    biggest, name = _max_memory(common["models"])
    if not 1 <= mib <= biggest:
        raise RequestError(KAI_MEMORY, f"{mib} MiB is outside 1..{biggest} ({name})",
                           f"ask for 1..{biggest} MiB, or {GPU}: N whole GPUs")
    _check_isolation(KAI_MEMORY, DeviceMode.SOFT, common["isolation"],
                     f"ask for a MIG profile or {GPU}: 1 for hard isolation")
    return GpuRequest(n, DeviceMode.SOFT, milli=None, memory_mib=mib, spellings=spellings,
                      **common)
