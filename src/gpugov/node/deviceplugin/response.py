"""What a container gets back from Allocate: its devices, and the enforcement library and
limits for soft slices and capped time-slice replicas.

Device list strategy: environment variables by UUID (`NVIDIA_VISIBLE_DEVICES`, read by the
NVIDIA container toolkit; `CUDA_VISIBLE_DEVICES`, read by CUDA), plus, when enabled, the device
nodes as DeviceSpecs and/or CDI device names (`nvidia.com/gpu=<UUID>`, needs a CDI spec on the
host from `nvidia-ctk cdi generate` and the kubelet's DevicePluginCDIDevices feature).

Soft slices: the library is mounted read-only and preloaded by mounting a one-line
`/etc/ld.so.preload` (an image's `ENV LD_PRELOAD` cannot override it), the per-device limits
are `GPUGOV_MEMORY_LIMIT_<i>` / `GPUGOV_CORE_LIMIT_<i>` with `i` the container's CUDA ordinal
(`CUDA_DEVICE_ORDER=PCI_BUS_ID`, so ordinals follow NVML index order), and the pod's accounting
region lives in a host folder the exporter reads (docs/enforcement.md); each of a pod's several
GPU containers has its own region in `containers/<name>/` of that folder.

Time-slice replicas (of a GPU, or of a time-sliced MIG instance: record `mig.replicas`): the
record's `memoryMiB` is the replica's memory cap (what it named, else card (instance) ÷
replicas), passed as `GPUGOV_MEMORY_LIMIT_<i>` with the library as for a soft slice, but
no compute limit (the driver's time-slicing shares the device's time). A record with 0 MiB is
an oversubscribing Tenant's replica: no library, no limit (as the NVIDIA plugin does).

A memory-only soft slice (record `computeLimited: false`) gets its memory limit and no
`GPUGOV_CORE_LIMIT_<i>`: it shares the device's time (HAMi's `defaultCores: 0`). A record's
`priority` (HAMi's `nvidia.com/priority`) is passed as `GPUGOV_TASK_PRIORITY` and HAMi's own
`CUDA_TASK_PRIORITY` (the library's priority, below). Every container gets
`NVIDIA_DRIVER_CAPABILITIES`: `compute,utility` plus what the pod's GPU container asks in its
own env (e.g. `video`), or `all` (`k8s.driver_capabilities`; the webhook refused anything
else at admission).

QoS boards (the library's priority between pods sharing a device, native/qos.c): for each
device a soft slice or capped replica gets, the host folder `<state dir>/qos/<device key>/`
holds one board file per pod on that device; it is mounted read-only at
`/var/run/gpugov-qos/<ordinal>/` and the pod's own file (named like its region folder) is
mounted writable over it, so a container writes only its own pod's file
(`GPUGOV_QOS_DIR`, `GPUGOV_QOS_SELF`).

MPS clients: `CUDA_MPS_PIPE_DIRECTORY` names the node's control daemon's pipe folder (mounted
from `<state dir>/mps/pipe`), its shm folder is the container's `/dev/shm`, and the client's
caps are the record's: `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (its compute share) and
`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` (`<ordinal>=<MiB>M`). Refused while no daemon runs (the
node agent starts it, `gpugov.node.mps`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpugov.k8s.annotations import AllocatedDevice
from gpugov.model.devices import DeviceMode
from gpugov.node.deviceplugin.resources import PluginDevice
from gpugov.node.proto import deviceplugin_pb2 as pb

CONTAINER_LIBRARY = "/usr/local/gpugov/lib/libgpugov.so"
CONTAINER_REGION_DIR = "/var/run/gpugov"
CONTAINER_REGION = CONTAINER_REGION_DIR + "/region"
CONTAINER_QOS_DIR = "/var/run/gpugov-qos"
PRELOAD = "/etc/ld.so.preload"
CONTAINER_MPS_PIPE = "/mps/pipe"
CONTAINER_SHM = "/dev/shm"
DRIVER_CAPABILITIES = "compute,utility"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@dataclass(frozen=True, slots=True)
class ResponseConfig:
    """Host paths and strategies of the Allocate answer."""

    state_dir: Path  # host folder: regions/<ns>_<pod>_<uid>/ and ld.so.preload live here
    library: Path | None  # host path of libgpugov.so; None = soft slices are refused
    device_specs: bool = True  # pass /dev/nvidia* nodes (off when the runtime injects them)
    cdi: bool = False  # also name CDI devices
    dev_root: str = "/dev"
    #: scrub whole GPUs and MIG instances between tenants before handing them over
    #: (`node.scrub.Handover`); None = off
    handover: Any = None
    scrub_cuda_lib: Path | None = None  # folder of the libcuda.so.1 the scrub loads
    #: where the driver's /proc lives (the MIG capability files); a fake tree in tests
    proc_root: str = "/proc"
    #: MIG device UUID -> (GPU instance ID, compute instance ID), from NVML
    #: (`nvml_mig_ids`); None = MIG capability device nodes are not passed
    mig_ids: Callable[[str], tuple[int, int] | None] | None = None

    @property
    def preload_file(self) -> Path:
        return self.state_dir / "ld.so.preload"

    @property
    def mps_dir(self) -> Path:
        """The MPS control daemon's folders (`gpugov.node.mps.MpsDaemon.root`)."""
        return self.state_dir / "mps"

    def region_dir(self, namespace: str, name: str, uid: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{namespace}_{name}_{uid}")
        return self.state_dir / "regions" / safe

    def container_region_dir(self, namespace: str, name: str, uid: str,
                             container: str | None) -> Path:
        """The region folder one container mounts: the pod's, or (one of a pod's several GPU
        containers) `containers/<name>/` inside it. Containers on different devices must
        not share a region: its device slots are their own ordinals."""
        pod = self.region_dir(namespace, name, uid)
        if container is None:
            return pod
        return pod / "containers" / re.sub(r"[^A-Za-z0-9_.-]", "-", container)[:253]

    def qos_dir(self, key: str) -> Path:
        """The folder of one device's QoS boards (one file per pod on the device)."""
        return self.state_dir / "qos" / re.sub(r"[^A-Za-z0-9_.-]", "-", key)


def core_percent(milli: int) -> int:
    """The library's compute limit (integer percent 1..100) for a compute share in milli."""
    return max(1, min(100, math.ceil(milli / 10)))


def container_response(request: list[PluginDevice],
                       slices: dict[str, AllocatedDevice], cfg: ResponseConfig,
                       pod: tuple[str, str, str], trust_tier: str | None,
                       capabilities: str = DRIVER_CAPABILITIES,
                       container: str | None = None,
                       ) -> pb.ContainerAllocateResponse:
    """The answer for one container: `request` are the kubelet's devices, `slices` the
    scheduler's slice per device key (GPU or MIG UUID); `capabilities` what the pod's GPU
    container asks in NVIDIA_DRIVER_CAPABILITIES (`k8s.driver_capabilities`); `container`:
    which of the pod's several GPU containers it is (its own region), None for the one."""
    keys: list[str] = []
    for d in sorted(request, key=lambda d: (d.index, d.mig_start or 0)):
        if d.key not in keys:
            keys.append(d.key)
    resp = pb.ContainerAllocateResponse()
    visible = ",".join(keys)
    resp.envs["NVIDIA_VISIBLE_DEVICES"] = visible
    resp.envs["CUDA_VISIBLE_DEVICES"] = visible
    resp.envs["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    # the toolkit's default ("utility" only) mounts no CUDA library: always set, to what the
    # pod's GPU container asks plus compute,utility (docs/device-plugin.md)
    resp.envs["NVIDIA_DRIVER_CAPABILITIES"] = capabilities
    priorities = {slices[k].priority for k in keys} - {None}
    if priorities:  # HAMi's task priority: the lowest number (highest priority) wins
        resp.envs["GPUGOV_TASK_PRIORITY"] = resp.envs["CUDA_TASK_PRIORITY"] = \
            str(min(p for p in priorities if p is not None))
    soft = [(i, slices[k]) for i, k in enumerate(keys) if slices[k].mode == DeviceMode.SOFT]
    capped = [(i, slices[k]) for i, k in enumerate(keys)  # time-slice replicas, of MIG too
              if (slices[k].mode == DeviceMode.TIMESLICE or slices[k].mig_replicas > 1)
              and slices[k].memory_mib > 0]
    if soft or capped:
        if cfg.library is None:
            what = "soft slices" if soft else "capped time-slice replicas"
            raise ValueError(f"{what} need the enforcement library, and this plugin runs "
                             "without one (libgpugov.so was not found)")
        for i, s in soft:
            resp.envs[f"GPUGOV_MEMORY_LIMIT_{i}"] = f"{s.memory_mib}Mi"
            if s.compute_limited:  # a memory-only slice shares the device's time
                resp.envs[f"GPUGOV_CORE_LIMIT_{i}"] = str(core_percent(s.milli))
        for i, s in capped:  # memory only: compute is the driver's time-slicing
            resp.envs[f"GPUGOV_MEMORY_LIMIT_{i}"] = f"{s.memory_mib}Mi"
        region = cfg.container_region_dir(*pod, container)
        region.mkdir(parents=True, exist_ok=True)
        # ordinal -> UUID for the exporter (docs/contracts.md, pod regions)
        (region / "devices").write_text("".join(k + "\n" for k in keys))
        resp.envs["GPUGOV_SHARED_REGION"] = CONTAINER_REGION
        # the library charges by UUID, so a process narrowing CUDA_VISIBLE_DEVICES itself
        # still charges the device that owns the memory (docs/enforcement.md)
        resp.envs["GPUGOV_DEVICE_UUIDS"] = visible
        if trust_tier == "trusted":
            resp.envs["GPUGOV_SCRUB"] = "0"
        resp.mounts.append(pb.Mount(container_path=CONTAINER_LIBRARY,
                                    host_path=str(cfg.library), read_only=True))
        resp.mounts.append(pb.Mount(container_path=PRELOAD, host_path=str(cfg.preload_file),
                                    read_only=True))
        resp.mounts.append(pb.Mount(container_path=CONTAINER_REGION_DIR, host_path=str(region),
                                    read_only=False))
        _qos_boards(resp, cfg, sorted((i, keys[i]) for i, _ in soft + capped),
                    cfg.region_dir(*pod).name)  # one board per pod and device
    mps = [(i, slices[k]) for i, k in enumerate(keys) if slices[k].mode == DeviceMode.MPS]
    if mps:
        _mps_client(resp, mps, cfg)
    if cfg.device_specs:
        paths = list(CONTROL_DEVICES)
        for index in sorted({d.index for d in request}):
            paths.append(f"/dev/nvidia{index}")
        if cfg.mig_ids is not None:
            for d in sorted(request, key=lambda d: (d.index, d.mig_start or 0)):
                if d.mig_uuid:
                    paths += [p for p in mig_cap_devices(cfg, d.index, d.mig_uuid)
                              if p not in paths]
        for p in paths:
            host = cfg.dev_root.rstrip("/") + p.removeprefix("/dev")
            resp.devices.append(pb.DeviceSpec(container_path=p, host_path=host, permissions="rw"))
    if cfg.cdi:
        for k in keys:
            resp.cdi_devices.append(pb.CDIDevice(name=f"nvidia.com/gpu={k}"))
    return resp


MIG_CAPS = "driver/nvidia/capabilities"
CAPS_DEVICE = "/dev/nvidia-caps/nvidia-cap"


def mig_cap_devices(cfg: ResponseConfig, index: int, mig_uuid: str) -> list[str]:
    """The `/dev/nvidia-caps/nvidia-cap<N>` nodes a container needs to open a MIG instance:
    its GPU instance's and compute instance's access capabilities, as the NVIDIA plugin
    passes them. The minors come from the driver's `/proc/driver/nvidia/capabilities/
    gpu<index>/mig/gi<g>/access` and `.../gi<g>/ci<c>/access` files (`DeviceFileMinor: N`).
    ValueError (the Allocate is refused) when NVML does not know the instance or a file is
    missing or unreadable: without the capabilities CUDA sees no device in the container."""
    assert cfg.mig_ids is not None
    ids = cfg.mig_ids(mig_uuid)
    if ids is None:
        raise ValueError(f"NVML does not know MIG instance {mig_uuid} (its GPU and compute "
                         "instance IDs are needed for its capability device nodes); was the "
                         "GPU re-partitioned?")
    gi, ci = ids
    gi_dir = Path(cfg.proc_root) / MIG_CAPS / f"gpu{index}" / "mig" / f"gi{gi}"
    return [CAPS_DEVICE + str(_cap_minor(f)) for f in (gi_dir / "access",
                                                        gi_dir / f"ci{ci}" / "access")]


def _cap_minor(access: Path) -> int:
    try:
        text = access.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read the MIG capability file {access} ({exc.strerror}); "
                         "is the GPU instance still there?") from None
    m = re.search(r"^DeviceFileMinor:\s*(\d+)\s*$", text, re.MULTILINE)
    if m is None:
        raise ValueError(f"the MIG capability file {access} names no DeviceFileMinor")
    return int(m.group(1))


def nvml_mig_ids(nv: Any) -> Callable[[str], tuple[int, int] | None]:
    """`ResponseConfig.mig_ids` from an open `gpugov.node.nvml.library.Nvml`."""
    def ids(mig_uuid: str) -> tuple[int, int] | None:
        h = nv.query("nvmlDeviceGetHandleByUUID", mig_uuid)
        if h is None:
            return None
        gi = nv.query("nvmlDeviceGetGpuInstanceId", h)
        ci = nv.query("nvmlDeviceGetComputeInstanceId", h)
        return None if gi is None or ci is None else (int(gi), int(ci))
    return ids


def _mps_client(resp: pb.ContainerAllocateResponse, mps: list[tuple[int, AllocatedDevice]],
                cfg: ResponseConfig) -> None:
    pipe = cfg.mps_dir / "pipe"
    if not (pipe / "control").exists():
        raise ValueError(f"MPS clients need the MPS control daemon, and none runs on this node "
                         f"({pipe / 'control'} is missing); the node agent starts it while a "
                         "GPU is in mps mode (see its log)")
    resp.envs["CUDA_MPS_PIPE_DIRECTORY"] = CONTAINER_MPS_PIPE
    resp.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(min(core_percent(s.milli)
                                                             for _, s in mps))
    resp.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
        f"{i}={s.memory_mib}M" for i, s in mps)
    resp.mounts.append(pb.Mount(container_path=CONTAINER_MPS_PIPE, host_path=str(pipe),
                                read_only=False))
    resp.mounts.append(pb.Mount(container_path=CONTAINER_SHM,
                                host_path=str(cfg.mps_dir / "shm"), read_only=False))


def _qos_boards(resp: pb.ContainerAllocateResponse, cfg: ResponseConfig,
                devices: list[tuple[int, str]], pod_file: str) -> None:
    """Each shared device's QoS folder read-only at /var/run/gpugov-qos/<ordinal>/, with the
    pod's own board file in it writable: the pod reads every pod's file, writes only its own
    (docs/enforcement.md, QoS floor)."""
    for i, key in devices:
        folder = cfg.qos_dir(key)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / pod_file).touch()
        inside = f"{CONTAINER_QOS_DIR}/{i}"
        resp.mounts.append(pb.Mount(container_path=inside, host_path=str(folder), read_only=True))
        resp.mounts.append(pb.Mount(container_path=f"{inside}/{pod_file}",
                                    host_path=str(folder / pod_file), read_only=False))
    resp.envs["GPUGOV_QOS_DIR"] = CONTAINER_QOS_DIR
    resp.envs["GPUGOV_QOS_SELF"] = pod_file


def write_preload(cfg: ResponseConfig) -> None:
    """The one-line ld.so.preload file soft-slice containers mount."""
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    cfg.preload_file.write_text(CONTAINER_LIBRARY + "\n")
