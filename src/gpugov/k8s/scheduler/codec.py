"""JSON codecs of the pod annotations the scheduler reads and writes (docs/contracts.md).

Every document carries `"v"`; a version this code does not know is refused with a clear
error (never guessed). Errors are `AnnotationError`, naming the annotation and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpugov.k8s.scheduler.names import ANN_ALLOCATION, ANN_REQUEST
from gpugov.model.devices import DeviceMode
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.isolation import IsolationLevel

VERSION = 1


class AnnotationError(ValueError):
    """An annotation gpugov cannot read; the message names it, the field and the value."""


def _load(name: str, text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as e:
        raise AnnotationError(f"{name}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise AnnotationError(f"{name}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("v") != VERSION:
        raise AnnotationError(f"{name}: version {doc.get('v')!r} is not known; "
                              f"this gpugov reads v={VERSION}")
    return doc


def _int(name: str, field: str, value: Any, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise AnnotationError(f"{name}: {field} must be an integer >= {low}, got {value!r}")
    return value


# -- gpugov.io/request ---------------------------------------------------------------------

def decode_request(text: str) -> GpuRequest:
    """The canonical request the webhook wrote, as the model's `GpuRequest`."""
    doc = _load(ANN_REQUEST, text)
    try:
        mode = DeviceMode(doc.get("mode", "exclusive"))
    except ValueError:
        raise AnnotationError(f"{ANN_REQUEST}: mode {doc.get('mode')!r} is not one of "
                              f"{', '.join(m.value for m in DeviceMode)}") from None
    count = _int(ANN_REQUEST, "count", doc.get("count", 1), 1)
    milli = doc.get("milli")
    if milli is not None:
        milli = _int(ANN_REQUEST, "milli", milli, 1)
        if milli > 1000:
            raise AnnotationError(f"{ANN_REQUEST}: milli must be <= 1000, got {milli}")
    mem = doc.get("memoryMiB")
    if mem is not None:
        mem = _int(ANN_REQUEST, "memoryMiB", mem, 1)
    pct = doc.get("memoryPercent")
    if pct is not None and (isinstance(pct, bool) or not isinstance(pct, int | float)
                            or not 0 < pct <= 100):
        raise AnnotationError(f"{ANN_REQUEST}: memoryPercent must be in (0, 100], got {pct!r}")
    models = doc.get("models") or []
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise AnnotationError(f"{ANN_REQUEST}: models must be a list of names, got {models!r}")
    iso = doc.get("isolation")
    try:
        isolation = IsolationLevel.parse(iso) if iso else None
    except ValueError as e:
        raise AnnotationError(f"{ANN_REQUEST}: {e}") from None
    if count > 1 and milli not in (None, 1000):
        raise AnnotationError(f"{ANN_REQUEST}: a {count}-GPU request must take whole GPUs, "
                              f"got milli={milli}")
    return GpuRequest(count, mode, milli=milli, memory_mib=mem,
                      memory_percent=float(pct) if pct is not None else None,
                      mig_profile=doc.get("migProfile") or None, models=tuple(models),
                      isolation=isolation, topology=doc.get("topology") or "preferred")


def encode_request(req: GpuRequest) -> str:
    """The canonical request JSON (what the webhook writes; used by tests and tools)."""
    doc: dict[str, Any] = {"v": VERSION, "count": req.count, "mode": req.mode.value}
    if req.milli is not None:
        doc["milli"] = req.milli
    if req.memory_mib is not None:
        doc["memoryMiB"] = req.memory_mib
    if req.memory_percent is not None:
        doc["memoryPercent"] = req.memory_percent
    if req.mig_profile:
        doc["migProfile"] = req.mig_profile
    doc["models"] = list(req.models)
    if req.isolation is not None:
        doc["isolation"] = str(req.isolation)
    doc["topology"] = req.topology
    return json.dumps(doc, separators=(",", ":"))


# -- gpugov.io/allocation ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DeviceSlice:
    """One device of an allocation: index on the node, compute share, memory limit."""

    index: int
    mode: str
    milli: int
    memory_mib: int
    uuid: str = ""
    mig: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AllocationRecord:
    """The durable record of a placement, as written on the pod."""

    node: str
    isolation: str
    devices: tuple[DeviceSlice, ...]

    def encode(self) -> str:
        devs = []
        for d in self.devices:
            item: dict[str, Any] = {"index": d.index}
            if d.uuid:
                item["uuid"] = d.uuid
            item.update(mode=d.mode, milli=d.milli, memoryMiB=d.memory_mib)
            if d.mig:
                item["mig"] = d.mig
            devs.append(item)
        return json.dumps({"v": VERSION, "node": self.node, "isolation": self.isolation,
                           "devices": devs}, separators=(",", ":"))


def decode_allocation(text: str) -> AllocationRecord:
    doc = _load(ANN_ALLOCATION, text)
    node = doc.get("node")
    if not isinstance(node, str) or not node:
        raise AnnotationError(f"{ANN_ALLOCATION}: node must be a node name, got {node!r}")
    devs = doc.get("devices")
    if not isinstance(devs, list):
        raise AnnotationError(f"{ANN_ALLOCATION}: devices must be a list, got {devs!r}")
    out = []
    for i, d in enumerate(devs):
        if not isinstance(d, dict):
            raise AnnotationError(f"{ANN_ALLOCATION}: devices[{i}] must be an object")
        out.append(DeviceSlice(
            index=_int(ANN_ALLOCATION, f"devices[{i}].index", d.get("index")),
            mode=str(d.get("mode", "exclusive")),
            milli=_int(ANN_ALLOCATION, f"devices[{i}].milli", d.get("milli", 1000), 1),
            memory_mib=_int(ANN_ALLOCATION, f"devices[{i}].memoryMiB", d.get("memoryMiB", 0)),
            uuid=str(d.get("uuid", "")), mig=d.get("mig")))
    indexes = [d.index for d in out]
    if len(set(indexes)) != len(indexes):
        raise AnnotationError(f"{ANN_ALLOCATION}: device index repeated in {indexes}")
    return AllocationRecord(node, str(doc.get("isolation", "hard")), tuple(out))
