"""One request model, many spellings: translate how users ask for GPUs into one `GpuRequest`.

Pure code (no Kubernetes client): the webhook and scheduler (`k8s.resources` re-exports it) and
the replay's `resources` column (`sim.jobs`) translate with this one function.

Spellings (sources in ../shared/notes/data-plane-facts.md §1.5, §2 and hami-study.md §1.1, and
control-plane-anchors.md §1.8 for KAI):

- `nvidia.com/gpu: N` (device plugin): N whole GPUs, hard isolation;
- `nvidia.com/gpumem: MiB`, `nvidia.com/gpumem-percentage: P`, `nvidia.com/gpucores: P` (HAMi):
  a soft slice of memory and/or SM share (`gpucores: 100` = a whole card);
- `nvidia.com/mig-<profile>: N` (mixed strategy), or `nvidia.com/gpu` with the node selector
  `nvidia.com/gpu.product: <PRODUCT>-MIG-<profile>` (single strategy): N MIG instances;
- `nvidia.com/gpu.shared: 1`, `nvidia.com/mig-<p>.shared: 1` (time-slicing, renameByDefault):
  one replica, no isolation;
- annotations `gpu-fraction`, `gpu-memory` (KAI): a soft slice by memory fraction or MiB;
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
MIG_PREFIX = "nvidia.com/mig-"
PRODUCT_LABEL = "nvidia.com/gpu.product"
KAI_FRACTION = "gpu-fraction"
KAI_MEMORY = "gpu-memory"
KAI_NUM_DEVICES = "gpu-fraction-num-devices"
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
_KNOWN_NVIDIA = (GPU, GPUMEM, GPUMEM_PCT, GPUCORES, SHARED, f"{MIG_PREFIX}<profile>",
                 f"{MIG_PREFIX}<profile>.shared")


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


def translate(limits: Mapping[str, object], annotations: Mapping[str, str] | None = None,
              node_selector: Mapping[str, str] | None = None) -> GpuRequest | None:
    """Translate one container's resource limits plus pod annotations/node selector.

    Returns None for a container that asks for no GPU at all.
    """
    ann = dict(annotations or {})
    sel = dict(node_selector or {})
    gpu_keys = {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}
    if gpu_keys and all(is_zero(v) for v in gpu_keys.values()):
        gpu_keys = {}  # `nvidia.com/gpu: 0`: no GPU (the kubelet reads it the same way)
    for k in gpu_keys:
        if not (k in (GPU, GPUMEM, GPUMEM_PCT, GPUCORES, SHARED) or k.startswith(MIG_PREFIX)):
            raise RequestError(k, "is not a GPU resource gpugov knows",
                               f"use one of {', '.join(_KNOWN_NVIDIA)}")
    for k in ann:
        if k.startswith("gpugov.io/") and k not in OUR_ANNOTATIONS:
            raise RequestError(k, "is not a gpugov.io annotation",
                               f"use one of {', '.join(OUR_ANNOTATIONS)}")

    models = _parse_models(ann[ANN_MODEL]) if ANN_MODEL in ann else ()
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
    common = {"models": models, "isolation": isolation, "topology": topology}

    if not gpu_keys and not kai:
        if models or isolation is not None:
            raise RequestError(ANN_MODEL if models else ANN_ISOLATION,
                               "the container asks for no GPU",
                               f"add {GPU}: 1 (or another GPU resource) or drop the annotation")
        return None
    if kai:
        return _kai(ann, kai, gpu_keys, common)
    if mig_keys or (GPU in gpu_keys and "-MIG-" in sel.get(PRODUCT_LABEL, "")):
        return _mig(gpu_keys, mig_keys, soft_keys, sel, common)
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


def _one_gpu(spelling: str, gpu_keys: Mapping[str, object]) -> None:
    if GPU in gpu_keys:
        n = _int(GPU, gpu_keys[GPU], "GPUs", f"{GPU}: 1")
        if n != 1:
            raise RequestError(
                spelling, f"a fraction of a GPU cannot be combined with {GPU}: {n}",
                f"ask for {GPU}: {n} whole GPUs without fractions, or {GPU}: 1 with the fraction")


def _soft(gpu_keys: Mapping[str, object], common: dict) -> GpuRequest:
    models = common["models"]
    if GPUMEM in gpu_keys and GPUMEM_PCT in gpu_keys:
        raise RequestError(GPUMEM_PCT, f"contradicts {GPUMEM} (two memory sizes)",
                           f"keep only {GPUMEM} (MiB) or only {GPUMEM_PCT} (%)")
    _one_gpu(next(k for k in (GPUMEM, GPUMEM_PCT, GPUCORES) if k in gpu_keys), gpu_keys)
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
    whole = milli == MILLI_PER_GPU
    mode = DeviceMode.EXCLUSIVE if whole else DeviceMode.SOFT
    _check_isolation(", ".join(spellings), mode, common["isolation"],
                     "ask for a MIG profile (nvidia.com/mig-<profile>) or a whole "
                     f"{GPU} for hard isolation")
    return GpuRequest(1, mode, milli=milli, memory_mib=memory_mib, memory_percent=memory_pct,
                      spellings=tuple(spellings), **common)


def _mig(gpu_keys: Mapping[str, object], mig_keys: list[str], soft_keys: list[str],
         sel: Mapping[str, str], common: dict) -> GpuRequest:
    models: tuple[str, ...] = common["models"]
    if soft_keys:
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
        shared = False
        count = _int(GPU, gpu_keys[GPU], "instances", f"{GPU}: 1")
        spelling = f"{GPU} + {PRODUCT_LABEL}={sel[PRODUCT_LABEL]}"
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
    return GpuRequest(count, mode, milli=mig_milli(profile, models), mig_profile=profile,
                      spellings=(spelling,), **out)


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


def _kai(ann: Mapping[str, str], kai: list[str], gpu_keys: Mapping[str, object],
         common: dict) -> GpuRequest:
    if gpu_keys:
        other = next(iter(gpu_keys))
        raise RequestError(kai[0], f"KAI annotations cannot be combined with {other}",
                           "use either the KAI annotations or nvidia.com resources")
    if KAI_FRACTION in ann and KAI_MEMORY in ann:
        raise RequestError(KAI_MEMORY, f"contradicts {KAI_FRACTION} (two sizes)",
                           f"keep only {KAI_FRACTION} or only {KAI_MEMORY}")
    if KAI_NUM_DEVICES in ann:
        n = _int(KAI_NUM_DEVICES, ann[KAI_NUM_DEVICES], "devices", f"{KAI_NUM_DEVICES}: '1'")
        if n != 1:
            raise RequestError(KAI_NUM_DEVICES, f"a fraction on {n} devices is not supported",
                               f"ask for {GPU}: {n} whole GPUs, or one fraction of one GPU")
    spellings = tuple(kai)
    if KAI_FRACTION in ann:
        frac = _float(KAI_FRACTION, ann[KAI_FRACTION], f"{KAI_FRACTION}: '0.5'")
        if frac > 1:
            raise RequestError(KAI_FRACTION, f"{frac} is more than one GPU",
                               f"write {GPU}: {math.ceil(frac)} for whole GPUs")
        if frac <= 0:
            raise RequestError(KAI_FRACTION, f"{frac} is not a positive fraction",
                               f"write a value in (0, 1], e.g. {KAI_FRACTION}: '0.5'")
        milli = max(1, round(frac * MILLI_PER_GPU))
        mode = DeviceMode.EXCLUSIVE if milli == MILLI_PER_GPU else DeviceMode.SOFT
        _check_isolation(KAI_FRACTION, mode, common["isolation"],
                         f"ask for a MIG profile or {GPU}: 1 for hard isolation")
        return GpuRequest(1, mode, milli=milli, memory_percent=frac * 100,
                          spellings=spellings, **common)
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
    return GpuRequest(1, DeviceMode.SOFT, milli=None, memory_mib=mib, spellings=spellings,
                      **common)
