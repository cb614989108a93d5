"""Which extended resources the plugin serves, and the device IDs it advertises for each.

- `nvidia.com/gpu`: every GPU in `exclusive` mode as `GPU-<uuid>` (its NVML UUID), and every GPU
  in `soft` mode as `<uuid>::<n>` replica IDs (the inventory's `replicas` when above 1, else
  `soft_replicas`, 10 by default like HAMi's deviceSplitCount). This is HAMi's way: a soft
  slice asks for `nvidia.com/gpu: 1` plus `nvidia.com/gpumem` / `nvidia.com/gpucores`, which
  only the scheduler counts; the kubelet counts one replica per pod and device, so it caps how
  many pods share a GPU while gpugov's scheduler decides memory and compute.
- `nvidia.com/gpu.shared`: GPUs in `timeslice` mode as `replicas` IDs `<uuid>::<n>` (the NVIDIA
  plugin's `renameByDefault` name, so time-slicing is never mistaken for a whole GPU); each
  replica is capped at the memory its allocation record names (`response`). A node whose
  NVIDIA config says `renameByDefault: false` advertises the same IDs as `nvidia.com/gpu`
  too (`gpu_replicas`), for NVIDIA's own pods.
- `nvidia.com/mig-<profile>`: each MIG instance by its `MIG-<uuid>` (`+` in a profile becomes
  `.`, as the NVIDIA plugin's mixed strategy does). A time-sliced instance (the inventory's
  `replicas` > 1) is advertised only as `nvidia.com/mig-<profile>.shared` replica IDs
  `MIG-<uuid>::<n>`, as NVIDIA's time-slicing of a MIG resource with `renameByDefault` does;
  each replica is capped at the memory its record names (`response`).

- `nvidia.com/gpu.mps`: GPUs in `mps` mode as `replicas` IDs `<uuid>::<n>`, one per MPS client
  (its own name: an MPS client shares one MPS server and fault domain with the others, so it
  is never mistaken for a time-slice replica or a whole GPU); the node agent runs the MPS
  control daemon (`gpugov.node.mps`) and each client gets its caps in `response`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpugov.k8s.annotations import Inventory
from gpugov.model.devices import DeviceMode, DeviceTopology

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MPS = "nvidia.com/gpu.mps"
MIG_PREFIX = "nvidia.com/mig-"
REPLICA_SEP = "::"
SOFT_REPLICAS = 10  # soft pods the kubelet admits per GPU when the inventory does not say


def mig_resource(profile: str, shared: bool = False) -> str:
    """`nvidia.com/mig-<profile>`, or its time-sliced replicas' `….shared`."""
    return MIG_PREFIX + profile.replace("+", ".") + (".shared" if shared else "")


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """One device ID the kubelet counts, and the physical GPU (or MIG instance) behind it."""

    id: str
    resource: str
    uuid: str  # physical GPU UUID
    index: int  # NVML index of the physical GPU
    mode: DeviceMode
    healthy: bool
    numa: int | None
    topology: DeviceTopology
    mig_profile: str | None = None
    mig_start: int | None = None
    mig_uuid: str | None = None

    @property
    def key(self) -> str:
        """What one kubelet ID stands for: the MIG instance, else the physical GPU."""
        return self.mig_uuid or self.uuid


def plugin_devices(inventory: Inventory, soft_replicas: int = SOFT_REPLICAS,
                   gpu_replicas: bool = False, mig_single: bool = False
                   ) -> dict[str, list[PluginDevice]]:
    """resource name -> its device IDs, in inventory order (empty resources are left out).

    `gpu_replicas` (the NVIDIA config's `renameByDefault: false`): time-slice and MPS replicas
    are also advertised as `nvidia.com/gpu`, as NVIDIA's plugin does, for pods written for it
    (`nvidia.com/gpu: 1` with the `-SHARED` product selector); `handshake` tells the two
    spellings apart by what the pod asks for. `mig_single` (NVIDIA's MIG `single` strategy):
    every MIG instance is advertised as `nvidia.com/gpu` instead, and none at all when the
    node is not uniform (`node/mig_strategy.single_problem`)."""
    bad = None
    if mig_single:
        from gpugov.node.mig_strategy import single_problem
        bad = single_problem(inventory)
    out: dict[str, list[PluginDevice]] = {}
    for d in inventory.devices:
        topo = DeviceTopology(d.nvlink_domain, d.pcie_switch, d.numa)
        common = dict(uuid=d.uuid, index=d.index, mode=d.mode, healthy=d.healthy, numa=d.numa,
                      topology=topo)
        if d.mode == DeviceMode.EXCLUSIVE:
            out.setdefault(GPU, []).append(PluginDevice(id=d.uuid, resource=GPU, **common))
        elif d.mode in (DeviceMode.SOFT, DeviceMode.TIMESLICE, DeviceMode.MPS):
            res = {DeviceMode.SOFT: GPU, DeviceMode.TIMESLICE: SHARED, DeviceMode.MPS: MPS}[d.mode]
            n_ids = d.replicas if d.mode != DeviceMode.SOFT or d.replicas > 1 \
                else soft_replicas
            names = (res, GPU) if gpu_replicas and res != GPU else (res,)
            for name in names:
                out.setdefault(name, []).extend(
                    PluginDevice(id=f"{d.uuid}{REPLICA_SEP}{n}", resource=name, **common)
                    for n in range(n_ids))
        elif d.mode == DeviceMode.MIG:
            for m in d.mig:
                if not m.uuid:
                    continue  # an instance without a UUID cannot be handed to a container
                res = mig_resource(m.profile, m.replicas > 1)
                if mig_single:
                    if bad is not None:
                        continue  # NVIDIA's plugin would not start: nothing MIG is served
                    res = GPU
                ids = [m.uuid] if m.replicas <= 1 else \
                    [f"{m.uuid}{REPLICA_SEP}{n}" for n in range(m.replicas)]
                out.setdefault(res, []).extend(PluginDevice(
                    id=i, resource=res, mig_profile=m.profile, mig_start=m.start,
                    mig_uuid=m.uuid, **common) for i in ids)
    return out


def socket_name(resource: str) -> str:
    """The plugin's socket file in the kubelet's plugin folder, e.g. `gpugov-gpu.sock`."""
    return "gpugov-" + resource.removeprefix("nvidia.com/").replace("/", "-") + ".sock"
