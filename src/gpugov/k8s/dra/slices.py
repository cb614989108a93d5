"""ResourceSlices and DeviceClasses of the `gpu.gpugov.io` DRA driver, from node inventories.

Pure: `node_slices` turns one node's `gpugov.io/inventory` (what the node agent publishes)
into the ResourceSlice objects of that node's pool; `device_classes` gives one DeviceClass per
mode. Nothing here talks to the API (publisher.py does).

Device names (DNS labels, stable across restarts, so allocations keep meaning the same GPU):
`gpu-<index>` a whole GPU (exclusive, or soft); `gpu-<index>-mig-<profile>-<start>` a MIG
instance (`1g.10gb` -> `1g-10gb`); `gpu-<index>-ts-<k>` / `gpu-<index>-mps-<k>` a time-slice
replica / MPS client. Attributes are in the driver's domain (`gpu.gpugov.io/model`, ...), so
a CEL selector reads `device.attributes["gpu.gpugov.io"].model`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from gpugov.k8s.annotations import Inventory, InventoryDevice, MigInstance
from gpugov.model.devices import DeviceMode
from gpugov.model.mig import get_geometry

DRIVER = "gpu.gpugov.io"
API = "resource.k8s.io/v1"
#: ResourceSliceMaxDevices in resource.k8s.io/v1
MAX_DEVICES_PER_SLICE = 128
#: DeviceAttributeMaxValueLength
MAX_STRING = 64
#: compute capacity of a whole GPU: a percentage, like HAMi's `gpucores`
COMPUTE_FULL = 100

#: device type (the `type` attribute) -> DeviceClass name
CLASSES = {
    "gpu": "gpu.gpugov.io",
    "mig": "mig.gpugov.io",
    "timeslice": "timeslice.gpugov.io",
    "mps": "mps.gpugov.io",
}
#: the DeviceClass of soft slices: GPUs in `soft` mode, shared by consumable capacity
SLICE_CLASS = "gpu-slice.gpugov.io"
#: node label: the node's GPUs are served by DRA (this driver), not by the device plugin.
#: gpugov publishes slices only for such nodes and its own scheduler places no
#: extended-resource pod on their GPUs, so no GPU is ever offered on both paths.
DRA_LABEL = "gpugov.io/dra"
#: the claim device condition gpugov's governor sets when the claim is charged to its queue
ADMITTED = "gpugov.io/admitted"
#: ... and when it is refused (over quota, no queue): kube-scheduler gives up that node
REFUSED = "gpugov.io/refused"


@dataclass(frozen=True, slots=True)
class Features:
    """What the API server accepts beyond resource.k8s.io/v1's GA fields.

    `consumable_capacity`: the DRAConsumableCapacity gate (alpha in 1.34, off by default):
    soft GPUs are published with `allowMultipleAllocations` and a request policy for `memory`
    and `compute`, so several claims share one GPU by capacity. Without it a soft GPU is
    published as a whole GPU only (`sharing: false` attribute) and slice claims are refused.
    `partitionable`: DRAPartitionableDevices (alpha in 1.33 and 1.34): not used yet — MIG is
    published as the node's fixed instances (planned: dynamic MIG as counter-sharing devices).
    """

    consumable_capacity: bool = False
    partitionable: bool = False
    #: devices carry gpugov's binding conditions: kube-scheduler waits, before binding a pod,
    #: until gpugov's governor has admitted (or refused) the claim against its queue. Needs
    #: DRADeviceBindingConditions (alpha in 1.34, off by default; apiserver and scheduler)
    #: and DRAResourceClaimDeviceStatus (beta, on). Set by the operator (`--govern`).
    governed: bool = False


def _label(text: str) -> str:
    """A DNS-label-safe fragment: lowercase, [a-z0-9-], no leading/trailing dash."""
    out = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return out or "x"


def _str(value: str) -> dict[str, str]:
    return {"string": value[:MAX_STRING]}


def _common(dev: InventoryDevice) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "model": _str(dev.model), "uuid": _str(dev.uuid), "index": {"int": dev.index},
        "numaNode": {"int": dev.numa}, "mode": _str(str(dev.mode)),
    }
    if dev.nvlink_domain is not None:
        attrs["nvlinkDomain"] = {"int": dev.nvlink_domain}
    if dev.pcie_switch is not None:
        attrs["pcieRoot"] = _str(f"pcie-{dev.pcie_switch}")
    return attrs


def _mib(mib: int) -> str:
    return f"{mib}Mi"


def gpu_device(dev: InventoryDevice, features: Features) -> dict[str, Any]:
    """A whole GPU; a `soft` GPU shares it by capacity when the API server can."""
    attrs = _common(dev)
    attrs["type"] = _str("gpu")
    share = dev.mode is DeviceMode.SOFT and features.consumable_capacity
    attrs["sharing"] = {"bool": share}
    out: dict[str, Any] = {"name": f"gpu-{dev.index}", "attributes": attrs}
    if share:
        out["allowMultipleAllocations"] = True
        out["capacity"] = {
            # a claim that states no capacity takes the whole GPU (the default)
            "memory": {"value": _mib(dev.memory_mib), "requestPolicy": {
                "default": _mib(dev.memory_mib),
                "validRange": {"min": "1Mi", "max": _mib(dev.memory_mib), "step": "1Mi"}}},
            "compute": {"value": str(COMPUTE_FULL), "requestPolicy": {
                "default": str(COMPUTE_FULL),
                "validRange": {"min": "1", "max": str(COMPUTE_FULL), "step": "1"}}},
        }
    else:
        out["capacity"] = {"memory": {"value": _mib(dev.memory_mib)},
                           "compute": {"value": str(COMPUTE_FULL)}}
    return out


def mig_device(dev: InventoryDevice, inst: MigInstance) -> dict[str, Any]:
    """One fixed MIG instance of the node's layout."""
    attrs = _common(dev)
    attrs["type"] = _str("mig")
    attrs["parentUUID"] = attrs.pop("uuid")
    if inst.uuid:
        attrs["uuid"] = _str(inst.uuid)
    attrs["migProfile"] = _str(inst.profile)
    attrs["migStart"] = {"int": inst.start}
    capacity: dict[str, Any] = {}
    try:
        prof = get_geometry(dev.model).profile(inst.profile)
        geo = get_geometry(dev.model)
        capacity = {"memory": {"value": _mib(prof.memory_mib)},
                    "compute": {"value": str(COMPUTE_FULL * prof.compute_slices
                                             // geo.compute_slices)}}
    except KeyError:
        pass  # a model or profile gpugov has no geometry for: attributes only
    name = f"gpu-{dev.index}-mig-{_label(inst.profile)}-{inst.start}"
    return {"name": name, "attributes": attrs, "capacity": capacity}


def replica_devices(dev: InventoryDevice) -> list[dict[str, Any]]:
    """A time-slice GPU's replicas or an MPS GPU's clients, one device each."""
    kind = "ts" if dev.mode is DeviceMode.TIMESLICE else "mps"
    out = []
    for k in range(dev.replicas):
        attrs = _common(dev)
        attrs["type"] = _str("timeslice" if kind == "ts" else "mps")
        attrs["replica"] = {"int": k}
        out.append({"name": f"gpu-{dev.index}-{kind}-{k}", "attributes": attrs,
                    "capacity": {"memory": {"value": _mib(dev.memory_mib // dev.replicas)},
                                 "compute": {"value": str(max(1, COMPUTE_FULL
                                                              // dev.replicas))}}})
    return out


def node_devices(inv: Inventory, features: Features) -> list[dict[str, Any]]:
    """Every healthy device of a node's inventory, in index order."""
    out = _devices(inv, features)
    if features.governed:
        for d in out:
            d["bindingConditions"] = [ADMITTED]
            d["bindingFailureConditions"] = [REFUSED]
    return out


def _devices(inv: Inventory, features: Features) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for dev in sorted(inv.devices, key=lambda d: d.index):
        if not dev.healthy:
            continue  # an unhealthy GPU is not offered (it returns when healthy again)
        if dev.mode is DeviceMode.MIG:
            out.extend(mig_device(dev, m) for m in sorted(dev.mig, key=lambda m: m.start))
        elif dev.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
            out.extend(replica_devices(dev))
        else:
            out.append(gpu_device(dev, features))
    return out


def slice_name(node: str, i: int) -> str:
    """`<node>-gpugov-<i>`; a hash keeps long node names within 253 characters."""
    base = node if len(node) <= 200 else \
        node[:180] + "-" + hashlib.sha256(node.encode()).hexdigest()[:12]
    return f"{base}-gpugov-{i}"


def node_slices(node: str, inv: Inventory, features: Features, generation: int
                ) -> list[dict[str, Any]]:
    """The ResourceSlices of `node`'s pool (named after the node), 128 devices each."""
    devices = node_devices(inv, features)
    chunks = [devices[i:i + MAX_DEVICES_PER_SLICE]
              for i in range(0, len(devices), MAX_DEVICES_PER_SLICE)] or [[]]
    return [{
        "apiVersion": API, "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node, i),
                     "labels": {"gpugov.io/dra-node": _label(node)[:63]}},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": generation,
                          "resourceSliceCount": len(chunks)},
                 "devices": chunk},
    } for i, chunk in enumerate(chunks)]


def device_classes(features: Features) -> list[dict[str, Any]]:
    """One DeviceClass per device type, and the soft-slice class when it can be served."""
    def cls(name: str, expression: str) -> dict[str, Any]:
        return {"apiVersion": API, "kind": "DeviceClass",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "gpugov"}},
                "spec": {"selectors": [{"cel": {"expression": expression}}]}}

    base = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == '
    out = [cls(name, f'{base}"{kind}"') for kind, name in CLASSES.items()]
    if features.consumable_capacity:
        out.append(cls(SLICE_CLASS, f'{base}"gpu" && device.attributes["{DRIVER}"].sharing'))
    return out
