"""Fake GPU nodes from a cluster file: the openb nodes CSV or the `cluster.yaml` nodePools format.

The nodes look like what gpugov's node agent and device plugin publish on a real node: GFD
labels, the `gpugov.io/inventory` annotation, and capacity/allocatable for `cpu`, `memory`,
`pods` and the GPU resources (see `gpu_resources`). kwok manages them (annotation
`kwok.x-k8s.io/node: fake`). Parsing and checking the file is pure and lives in
`gpugov.model.cluster_spec` (the replay reads the same format); its names are re-exported here.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from gpugov.k8s import annotations as ann
from gpugov.model.catalog import CATALOG
from gpugov.model.cluster_spec import (
    NODE_COLUMNS,
    ClusterFile,
    ClusterFileError,
    DeviceGroup,
    NodePool,
    Taint,
    load_cluster_file,
    mig_instances,
    parse_cluster_yaml,
)
from gpugov.model.cluster_spec import device_modes as _device_modes
from gpugov.model.devices import DeviceMode
from gpugov.model.mig import find_placement, get_geometry

#: HAMi's default deviceSplitCount: how many pods may hold `nvidia.com/gpu: 1` on one soft device
SOFT_SPLIT = 10
PODS_PER_NODE = 110
KWOK = {"kwok.x-k8s.io/node": "fake"}

#: the built-in fleet `gpugov dev up` starts without --nodes (package data)
BUILTIN_FLEET = "dev-fleet.yaml"

__all__ = ["BUILTIN_FLEET", "KWOK", "NODE_COLUMNS", "PODS_PER_NODE", "SOFT_SPLIT", "ClusterFile",
           "ClusterFileError", "DeviceGroup", "NodePool", "Taint", "gpu_resources", "inventory",
           "builtin_fleet", "builtin_fleet_text", "load_cluster_file", "mig_instances",
           "node_objects", "parse_cluster_yaml"]


def builtin_fleet_text() -> str:
    """The built-in fleet's YAML, read from the installed package (any install, no checkout)."""
    return resources.files("gpugov.k8s").joinpath("data", BUILTIN_FLEET).read_text("utf-8")


def builtin_fleet() -> ClusterFile:
    """The mixed fleet `gpugov dev up` starts when no --nodes is given: MIG, soft,
    time-slice, MPS and exclusive devices in two pools."""
    return parse_cluster_yaml(yaml.safe_load(builtin_fleet_text()),
                              f"(built-in) gpugov/k8s/data/{BUILTIN_FLEET}")


def inventory(pool: NodePool, node: str) -> ann.Inventory:
    """The inventory the node agent would publish for one node of the pool."""
    spec = CATALOG.get(pool.model)
    memory = (spec.memory_mib or 0) if spec else 0
    devices = []
    for k, group in _device_modes(pool).items():
        mode = group.mode if group else DeviceMode.EXCLUSIVE
        mig: tuple[ann.MigInstance, ...] = ()
        if group and mode is DeviceMode.MIG:
            placed = find_placement(get_geometry(pool.model), group.layout) or ()
            mig = tuple(ann.MigInstance(m.profile, m.start, f"MIG-{node}-{k}-{m.start}")
                        for m in placed)
        devices.append(ann.InventoryDevice(
            index=k, uuid=f"GPU-{node}-{k}", model=pool.model, memory_mib=memory, mode=mode,
            replicas=group.replicas if group else 1, numa=0 if k < pool.gpus / 2 or
            pool.gpus < 2 else 1,
            nvlink_domain=0 if pool.topology == "nvswitch" else None,
            pcie_switch=k // 2 if pool.topology == "pcie" else None, mig=mig))
    return ann.Inventory(tuple(devices), pool.power_budget_w)


def gpu_resources(pool: NodePool) -> dict[str, int]:
    """Extended resources the device plugin advertises for the pool's devices.

    `nvidia.com/gpu`: exclusive devices, plus `SOFT_SPLIT` per soft device (HAMi's
    deviceSplitCount, so several soft-slice pods with `nvidia.com/gpu: 1` pass the kubelet);
    `nvidia.com/mig-<profile>`: MIG instances (mixed strategy); `nvidia.com/gpu.shared`:
    time-slice and MPS replicas. Memory and cores (`nvidia.com/gpumem`, `gpucores`) are not
    advertised: the kubelet drops requests for resources a node does not have, and gpugov's
    scheduler places them from the inventory.
    """
    out: dict[str, int] = {}

    def add(name: str, n: int) -> None:
        out[name] = out.get(name, 0) + n

    for k, group in _device_modes(pool).items():
        del k
        mode = group.mode if group else DeviceMode.EXCLUSIVE
        if mode is DeviceMode.EXCLUSIVE:
            add("nvidia.com/gpu", 1)
        elif mode is DeviceMode.SOFT:
            add("nvidia.com/gpu", SOFT_SPLIT)
        elif mode is DeviceMode.MIG:
            for m in group.layout:
                add(f"nvidia.com/mig-{m}", 1)
        else:
            add("nvidia.com/gpu.shared", group.replicas)
    return out


def _mig_strategy(pool: NodePool) -> str:
    return "mixed" if any(g.mode is DeviceMode.MIG for g in pool.devices) else "none"


def node_objects(cluster: ClusterFile) -> list[dict[str, Any]]:
    """Node manifests (with status) for every node of the cluster file."""
    nodes = []
    for pool in cluster.node_pools:
        for name in cluster.node_names(pool):
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                      "kubernetes.io/arch": "amd64", "type": "kwok", "gpugov.io/pool": pool.name}
            annotations = dict(KWOK)
            if pool.gpus:
                labels.update(ann.gfd_labels(pool.model, pool.gpus, _mig_strategy(pool)))
                annotations[ann.INVENTORY] = ann.encode_inventory(inventory(pool, name))
            labels.update(pool.labels)
            capacity = {"cpu": f"{pool.cpu_milli}m", "memory": f"{pool.memory_mib}Mi",
                        "pods": str(PODS_PER_NODE)}
            capacity.update({k: str(v) for k, v in gpu_resources(pool).items()})
            spec: dict[str, Any] = {}
            if pool.taints:
                spec["taints"] = [t.model_dump() for t in pool.taints]
            nodes.append({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "labels": labels,
                                       "annotations": annotations},
                          "spec": spec,
                          "status": {"capacity": capacity, "allocatable": dict(capacity)}})
    return nodes
