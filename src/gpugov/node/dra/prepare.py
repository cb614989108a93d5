"""What a prepared claim gives its containers: devices for the kubelet, a CDI spec for the
runtime. Pure: inputs are the ResourceClaim object, the node's inventory and paths.

One CDI device per claim, `gpugov.io/claim=<claim UID>`, carries everything the claim's
containers need (the container runtime applies it): the device nodes, `NVIDIA_VISIBLE_DEVICES`
/ `CUDA_VISIBLE_DEVICES` by UUID (MIG instances by their MIG UUID), and for a soft slice or a
time-slice replica the enforcement library, preloaded by a mounted `/etc/ld.so.preload`,
with `GPUGOV_MEMORY_LIMIT_<i>` / `GPUGOV_CORE_LIMIT_<i>` from the allocation's consumed
capacity — the same contract as the device plugin (docs/device-plugin.md), so a claim for a
slice is a slice on the node. The id is attached to the claim's first device only: the
kubelet collects every device's ids, and applying one CDI device twice would create its device
nodes twice.

QoS (the library's in-GPU priority and QoS floor, docs/enforcement.md): a slice or capped
replica gets the device plugin's boards — each device's `<state>/qos/<device key>/` read-only
at `/var/run/gpugov-qos/<ordinal>/`, with the claim's own board file (`claim_<ns>_<claim>_<uid>`,
a name the device plugin's sweep of gone pods never takes) writable over it — and its
priority (`GPUGOV_TASK_PRIORITY`, `CUDA_TASK_PRIORITY`), decided as gpugov's scheduler decides
a pod's QoS class (`translate.qos_priority`): from the pods' priority class (non-preemptible:
0, Guaranteed; else 1), and a `GpuConfig` priority 0 (`claim_config`) is honoured when the
DeviceClass (an admin) sets it or the pods' class is non-preemptible, else recorded as 1.
Refused, with the field named (the kubelet
shows it on the pod): a claim not allocated, a device of another pool (node), a device the
node does not have, several requests for this driver in one claim, a config field or value
`GpuConfig` does not have, an MPS client while no MPS control daemon runs. An MPS client gets
the device plugin's MPS contract: the daemon's pipe and shm folders and its caps
(`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`), no library.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpugov.k8s.annotations import Inventory, InventoryDevice, MigInstance
from gpugov.k8s.dra.slices import COMPUTE_FULL, DRIVER, Features, node_devices
from gpugov.k8s.quantity import parse_quantity
from gpugov.k8s.scheduler.translate import qos_priority
from gpugov.model.isolation import TrustTier

CDI_VERSION = "0.6.0"
CDI_KIND = "gpugov.io/claim"
CONTAINER_LIBRARY = "/usr/local/gpugov/lib/libgpugov.so"
CONTAINER_REGION_DIR = "/var/run/gpugov"
PRELOAD = "/etc/ld.so.preload"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
CONTAINER_MPS_PIPE = "/mps/pipe"
CONTAINER_QOS_DIR = "/var/run/gpugov-qos"
#: a claim's board file name starts so: never `<ns>_<pod>_<uid>`, which the device plugin's
#: sweep removes once no live pod has that UID (`deviceplugin/cleanup.py`)
BOARD_PREFIX = "claim_"
#: the most GPU memory one device can have (bounds a tenant-written quantity), MiB
MAX_MEMORY_MIB = 1 << 24


class PrepareError(ValueError):
    """Why a claim cannot be prepared on this node (what the kubelet shows on the pod)."""


@dataclass(frozen=True, slots=True)
class NodePaths:
    """Host paths the CDI spec points at."""

    cdi_dir: Path  # where the runtime reads CDI specs (/var/run/cdi)
    state_dir: Path  # <state>/claim-regions/<ns>_<claim>_<uid>, <state>/ld.so.preload
    library: Path | None  # host path of libgpugov.so; None = slices are refused

    @property
    def preload_file(self) -> Path:
        return self.state_dir / "ld.so.preload"

    def region_dir(self, namespace: str, name: str, claim_uid: str) -> Path:
        """The claim's accounting region folder: `<ns>_<claim>_<uid>` (the pod regions'
        pattern, names cannot hold `_`) beside, not inside, the device plugin's `regions/`,
        which the exporter reads as pods."""
        return self.state_dir / "claim-regions" / _safe(f"{namespace}_{name}_{claim_uid}")

    def qos_dir(self, key: str) -> Path:
        """One device's QoS board folder (GPU or MIG UUID), the device plugin's
        (`ResponseConfig.qos_dir`): pods of both paths on one device meet there."""
        return self.state_dir / "qos" / re.sub(r"[^A-Za-z0-9_.-]", "-", key)

    def spec_file(self, claim_uid: str) -> Path:
        return self.cdi_dir / f"gpugov.io-claim_{_safe(claim_uid)}.json"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:128]


@dataclass(frozen=True, slots=True)
class Target:
    """One allocated device resolved against the inventory."""

    request: str
    pool: str
    name: str
    gpu: InventoryDevice
    kind: str  # gpu | mig | timeslice | mps
    mig: MigInstance | None = None
    memory_mib: int | None = None  # a limit (None: the whole device)
    compute: int | None = None  # percent 1..99 (None: not limited)


@dataclass(slots=True)
class Prepared:
    """A prepared claim: the devices the kubelet is told, the CDI spec written for it."""

    uid: str
    namespace: str
    name: str
    devices: list[dict[str, Any]] = field(default_factory=list)  # request/pool/device/cdi
    spec: dict[str, Any] = field(default_factory=dict)
    #: the devices' UUIDs in CUDA ordinal order (the region's `devices` file, as for pods)
    uuids: list[str] = field(default_factory=list)
    #: host paths of the claim's QoS board files (created at prepare, removed at unprepare)
    boards: list[str] = field(default_factory=list)
    #: the pods the claim is reserved for, `[name, uid]` (the exporter's attribution)
    pods: list[list[str]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"uid": self.uid, "namespace": self.namespace, "name": self.name,
                           "devices": self.devices, "spec": self.spec, "uuids": self.uuids,
                           "boards": self.boards, "pods": self.pods}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Prepared:
        """The record written by `to_json`; ValueError naming the field when it is not one
        (a truncated or edited file fails alone, never as a KeyError deep in a caller)."""
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError(f"a record is a JSON object, not {type(d).__name__}")

        def strs(key: str, value: Any) -> list[str]:
            if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
                raise ValueError(f"{key}: not a list of strings")
            return list(value)

        for key in ("uid", "namespace", "name"):
            if not isinstance(d.get(key), str):
                raise ValueError(f"{key}: {type(d.get(key)).__name__}, not a string")
        devices, spec = d.get("devices"), d.get("spec")
        if not isinstance(devices, list) or not all(isinstance(x, dict) for x in devices):
            raise ValueError("devices: not a list of objects")
        if not isinstance(spec, dict):
            raise ValueError("spec: not an object")
        pods = d.get("pods") or []
        if not isinstance(pods, list):
            raise ValueError("pods: not a list")
        return cls(d["uid"], d["namespace"], d["name"], devices, spec,
                   strs("uuids", d.get("uuids") or []), strs("boards", d.get("boards") or []),
                   [strs(f"pods[{i}]", p) for i, p in enumerate(pods)])


def cdi_id(claim_uid: str) -> str:
    return f"{CDI_KIND}={_safe(claim_uid)}"


def _quantity(where: str, value: Any, unit: str) -> int:
    try:
        q = parse_quantity(value)
    except ValueError as e:
        raise PrepareError(f"{where}: {e}") from None
    if unit == "MiB":
        mib = int(q / (1 << 20))
        if not 0 < mib <= MAX_MEMORY_MIB:
            raise PrepareError(f"{where}: {value!r}; allowed: 1Mi..{MAX_MEMORY_MIB}Mi")
        return mib
    n = int(q)
    if not 0 < n <= COMPUTE_FULL:
        raise PrepareError(f"{where}: {value!r}; allowed: 1..{COMPUTE_FULL}")
    return n


def resolve(claim: dict[str, Any], node: str, inv: Inventory, features: Features
            ) -> list[Target]:
    """The claim's devices for this driver on this node, or PrepareError naming the field."""
    meta = claim.get("metadata") or {}
    ref = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    alloc = (claim.get("status") or {}).get("allocation")
    if not isinstance(alloc, dict):
        raise PrepareError(f"{ref}: status.allocation: not allocated")
    results = [r for r in ((alloc.get("devices") or {}).get("results") or [])
               if isinstance(r, dict) and r.get("driver") == DRIVER]
    if not results:
        raise PrepareError(f"{ref}: status.allocation.devices.results: no {DRIVER} device")
    requests = sorted({str(r.get("request")) for r in results})
    if len(requests) > 1:
        raise PrepareError(f"{ref}: spec.devices.requests: {requests} — one {DRIVER} request "
                           "per claim is supported (its devices get one CUDA device list); "
                           "use one claim per request")
    published = {d["name"]: d for d in node_devices(inv, features)}
    by_index = {d.index: d for d in inv.devices}
    out = []
    for i, r in enumerate(results):
        where = f"{ref}: status.allocation.devices.results[{i}]"
        pool, name = str(r.get("pool")), str(r.get("device"))
        if pool != node:
            raise PrepareError(f"{where}.pool: {pool!r} is not this node ({node!r})")
        dev = published.get(name)
        if dev is None:
            raise PrepareError(f"{where}.device: {name!r} is not on node {node} (its devices: "
                               f"{', '.join(sorted(published)) or 'none'})")
        attrs = dev["attributes"]
        kind = attrs["type"]["string"]
        gpu = by_index[attrs["index"]["int"]]
        mig = None
        if kind == "mig":
            start = attrs["migStart"]["int"]
            mig = next(m for m in gpu.mig if m.start == start)
        memory = compute = None
        consumed = r.get("consumedCapacity") or {}
        if kind == "gpu" and attrs.get("sharing", {}).get("bool") and consumed:
            if "memory" in consumed:
                memory = _quantity(f"{where}.consumedCapacity.memory", consumed["memory"],
                                   "MiB")
                if memory >= gpu.memory_mib:
                    memory = None  # the whole card: nothing to cap
            if "compute" in consumed:
                compute = _quantity(f"{where}.consumedCapacity.compute",
                                    consumed["compute"], "percent")
                if compute >= COMPUTE_FULL:
                    compute = None
        elif kind == "timeslice":
            memory = gpu.memory_mib // max(1, gpu.replicas)
        elif kind == "mps":  # the client's caps: card / clients, 100 % / clients
            memory = gpu.memory_mib // max(1, gpu.replicas)
            compute = max(1, COMPUTE_FULL // max(1, gpu.replicas))
        out.append(Target(str(r.get("request")), pool, name, gpu, kind, mig, memory, compute))
    return sorted(out, key=lambda t: (t.gpu.index, t.mig.start if t.mig else 0, t.name))


CONFIG_API = "gpu.gpugov.io/v1alpha1"
CONFIG_KIND = "GpuConfig"


def claim_config(claim: dict[str, Any]) -> dict[str, Any]:
    """The driver's opaque config of the allocation (from the class and the claim, the
    claim's last): `{"apiVersion": "gpu.gpugov.io/v1alpha1", "kind": "GpuConfig",
    "priority": 0|1}` — HAMi's task priority (0 high, 1 low). PrepareError names any other
    field or value. `priority_from_class`: the priority is the DeviceClass's (an admin's),
    not the claim's (a tenant's)."""
    meta = claim.get("metadata") or {}
    ref = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    alloc = (claim.get("status") or {}).get("allocation") or {}
    out: dict[str, Any] = {}
    for i, c in enumerate((alloc.get("devices") or {}).get("config") or []):
        opaque = c.get("opaque") if isinstance(c, dict) else None
        if not isinstance(opaque, dict) or opaque.get("driver") != DRIVER:
            continue
        where = f"{ref}: status.allocation.devices.config[{i}].opaque.parameters"
        params = opaque.get("parameters")
        if not isinstance(params, dict):
            raise PrepareError(f"{where}: expected an object")
        if (params.get("apiVersion"), params.get("kind")) != (CONFIG_API, CONFIG_KIND):
            raise PrepareError(f"{where}: apiVersion/kind {params.get('apiVersion')!r}/"
                               f"{params.get('kind')!r}; allowed: {CONFIG_API}/{CONFIG_KIND}")
        for key, value in params.items():
            if key in ("apiVersion", "kind"):
                continue
            if key != "priority":
                raise PrepareError(f"{where}.{key}: not a {CONFIG_KIND} field; allowed: "
                                   "priority")
            if isinstance(value, bool) or value not in (0, 1):
                raise PrepareError(f"{where}.priority: {value!r}; allowed: 0 (high), 1 (low)")
            out["priority"] = value
            out["priority_from_class"] = c.get("source") == "FromClass"
    return out


def reserved_pods(claim: dict[str, Any]) -> list[list[str]]:
    """`[name, uid]` of each pod the claim is reserved for (`status.reservedFor`)."""
    out = []
    for r in (claim.get("status") or {}).get("reservedFor") or []:
        if isinstance(r, dict) and r.get("resource") == "pods" and not r.get("apiGroup"):
            out.append([str(r.get("name") or ""), str(r.get("uid") or "")])
    return out


def board_name(namespace: str, name: str, claim_uid: str) -> str:
    """The claim's board file name in each device's QoS folder (`BOARD_PREFIX`)."""
    return BOARD_PREFIX + _safe(f"{namespace}_{name}_{claim_uid}")


def claim_priority(config: dict[str, Any], shared: bool, preemptible: bool | None
                   ) -> tuple[int | None, str]:
    """The claim's in-GPU priority and a warning, as gpugov's scheduler decides a pod's QoS
    class (`translate.qos_priority`): derived from the pods' priority class where the library
    shares a device (`shared`), else only an explicit priority; an explicit 0 needs a
    non-preemptible class, unless the DeviceClass (an admin) set it. A trusted Tenant's own
    0 is recorded as 1 here: the node does not read Tenants (docs/dra.md, QoS)."""
    explicit = config.get("priority")
    if explicit is None and not shared:
        return None, ""
    if explicit is not None and config.get("priority_from_class"):
        return int(explicit), ""
    prio, warning = qos_priority(explicit, preemptible, TrustTier.INTERNAL)
    return prio, warning.replace("nvidia.com/priority", "GpuConfig priority").replace(
        " or a trusted Tenant", " or a DeviceClass that sets it")


def build(claim: dict[str, Any], node: str, inv: Inventory, features: Features,
          paths: NodePaths, preemptible: bool | None = None) -> Prepared:
    """The prepared claim (devices and CDI spec); PrepareError when it cannot be served.
    `preemptible`: whether the claim's pods' priority class is preemptible (None: unknown,
    which counts as preemptible)."""
    meta = claim.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    targets = resolve(claim, node, inv, features)
    config = claim_config(claim)
    limited = [(i, t) for i, t in enumerate(targets)
               if t.kind != "mps" and (t.memory_mib or t.compute)]
    priority, _warning = claim_priority(config, bool(limited), preemptible)
    env: list[str] = []
    if priority is not None:  # read by images built for HAMi too (docs/device-plugin.md)
        env += [f"GPUGOV_TASK_PRIORITY={priority}", f"CUDA_TASK_PRIORITY={priority}"]
    uuids = [t.mig.uuid if t.mig is not None else t.gpu.uuid for t in targets]
    if any(not u for u in uuids):
        raise PrepareError(f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}: a "
                           "device has no UUID in the node's inventory (MIG instances need "
                           "theirs)")
    visible = ",".join(dict.fromkeys(uuids))
    env += [f"NVIDIA_VISIBLE_DEVICES={visible}", f"CUDA_VISIBLE_DEVICES={visible}",
            "CUDA_DEVICE_ORDER=PCI_BUS_ID", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
            f"GPUGOV_CLAIM={meta.get('namespace')}/{meta.get('name')}"]
    nodes = [{"path": p} for p in CONTROL_DEVICES]
    nodes += [{"path": f"/dev/nvidia{i}"} for i in sorted({t.gpu.index for t in targets})]
    mounts: list[dict[str, Any]] = []
    mps = [(i, t) for i, t in enumerate(targets) if t.kind == "mps"]
    if mps:
        pipe = paths.state_dir / "mps" / "pipe"
        if not (pipe / "control").exists():
            raise PrepareError(f"MPS clients need the MPS control daemon, and none runs on "
                               f"this node ({pipe / 'control'} is missing); the node agent "
                               "starts it while a GPU is in mps mode (see its log)")
        env += [f"CUDA_MPS_PIPE_DIRECTORY={CONTAINER_MPS_PIPE}",
                f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={min(t.compute or 100 for _, t in mps)}",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="
                + ",".join(f"{i}={t.memory_mib}M" for i, t in mps)]
        rw = ["rw", "nosuid", "nodev", "bind"]
        mounts += [{"hostPath": str(pipe), "containerPath": CONTAINER_MPS_PIPE, "options": rw},
                   {"hostPath": str(paths.state_dir / "mps" / "shm"),
                    "containerPath": "/dev/shm", "options": rw}]
    boards: list[str] = []
    if limited:
        if paths.library is None:
            raise PrepareError("soft slices and time-slice replicas need the enforcement "
                               "library, and this plugin runs without libgpugov.so")
        # limits by CUDA ordinal: the position of the device's UUID in the visible list
        ordinals = {u: k for k, u in enumerate(dict.fromkeys(uuids))}
        for i, t in limited:
            if t.memory_mib:
                env.append(f"GPUGOV_MEMORY_LIMIT_{ordinals[uuids[i]]}={t.memory_mib}Mi")
            if t.compute:
                env.append(f"GPUGOV_CORE_LIMIT_{ordinals[uuids[i]]}={t.compute}")
        env.append(f"GPUGOV_SHARED_REGION={CONTAINER_REGION_DIR}/region")
        # the library charges by UUID (docs/enforcement.md), as on the device plugin's path
        env.append(f"GPUGOV_DEVICE_UUIDS={visible}")
        ro = ["ro", "nosuid", "nodev", "bind"]
        rw = ["rw", "nosuid", "nodev", "bind"]
        mounts += [
            {"hostPath": str(paths.library), "containerPath": CONTAINER_LIBRARY,
             "options": ro},
            {"hostPath": str(paths.preload_file), "containerPath": PRELOAD, "options": ro},
            {"hostPath": str(paths.region_dir(str(meta.get("namespace")), str(meta.get("name")),
                                              uid)), "containerPath": CONTAINER_REGION_DIR,
             "options": rw},
        ]
        # QoS boards: each shared device's folder read-only, the claim's own file writable
        # over it (the device plugin's contract, `deviceplugin/response._qos_boards`)
        own = board_name(str(meta.get("namespace")), str(meta.get("name")), uid)
        for key in dict.fromkeys(uuids[i] for i, _ in limited):
            folder = paths.qos_dir(key)
            inside = f"{CONTAINER_QOS_DIR}/{ordinals[key]}"
            boards.append(str(folder / own))
            mounts += [{"hostPath": str(folder), "containerPath": inside, "options": ro},
                       {"hostPath": str(folder / own), "containerPath": f"{inside}/{own}",
                        "options": rw}]
        env += [f"GPUGOV_QOS_DIR={CONTAINER_QOS_DIR}", f"GPUGOV_QOS_SELF={own}"]
    edits: dict[str, Any] = {"env": env, "deviceNodes": nodes}
    if mounts:
        edits["mounts"] = mounts
    spec = {"cdiVersion": CDI_VERSION, "kind": CDI_KIND,
            "devices": [{"name": _safe(uid), "containerEdits": edits}]}
    devices = [{"request": t.request, "pool": t.pool, "device": t.name,
                "cdi": [cdi_id(uid)] if i == 0 else []} for i, t in enumerate(targets)]
    return Prepared(uid, str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                    devices, spec, list(dict.fromkeys(uuids)), boards, reserved_pods(claim))
