"""The replay's nodes from a cluster file: the openb nodes CSV or `cluster.yaml` (nodePools).

The file type is decided by the extension (`.csv`; `.yaml`/`.yml`) and otherwise by the
content (a CSV header starting `sn,`). The nodePools format is parsed by the same code as the
kwok dev cluster (`model.cluster_spec`) and becomes the one cluster state's `NodeSpec`s:

- `devices:` groups set each device's mode: `mig` with a `layout` is a fixed layout (what
  mig-parted applied), `mig` without one a dynamic MIG device (instances are created at valid
  starts where pods land); `soft`; `timeslice` / `mps` with `replicas`; `exclusive`. A device
  no group names is `exclusive` (whole-GPU pods only), as on the kwok dev cluster. The openb
  nodes CSV stays all `soft` (the trace's sharing semantics).
- `labels`, `taints` (NoSchedule/NoExecute keep pods that do not tolerate them off the node),
  `powerBudgetW` (hard: every device hosting a pod counts at its model's TDP) and `topology`
  (`nvswitch`: one NVLink domain per node; `pcie`: no NVLink, PCIe switches and NUMA nodes in
  index order; `none`: unknown).
- `powerDomains:` racks with `panelWatts` and `ratio` (default 0.80), members by `nodes:` or
  the pool label `powerDomainLabel` (default `gpugov.io/rack`): the state admits a pod only
  while its rack's expected draw stays within ratio × panel (model/power.py).

`FleetCards` checks a job's request against the fleet's cards before the replay runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpugov.model.catalog import get_model
from gpugov.model.cluster import NodeSpec
from gpugov.model.cluster_spec import (
    ClusterFile,
    ClusterFileError,
    NodePool,
    device_modes,
    parse_cluster_yaml,
    power_domains,
)
from gpugov.model.constraints import Taint
from gpugov.model.devices import DeviceConfig, DeviceMode, DeviceTopology, hgx_topology
from gpugov.model.gpu_request import GpuRequest
from gpugov.model.mig import find_placement, get_geometry
from gpugov.model.mig_table import mig_table
from gpugov.sim.text_input import load_yaml, read_text
from gpugov.sim.trace import MAX_CPU_MILLI, MAX_GPUS_PER_NODE, MAX_MEMORY_MIB, load_nodes


def is_csv(path: Path) -> bool:
    """True for an openb nodes CSV, by extension or (for other names) by its header."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return True
    if suffix in (".yaml", ".yml"):
        return False
    for raw in read_text(path).splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            return line.startswith("sn,")
    return False


def load_fleet(path: Path | str) -> list[NodeSpec]:
    """The engine's nodes from either format; TraceError / ClusterFileError name file,
    line or path, and field."""
    path = Path(path)
    if is_csv(path):
        return load_nodes(path)
    return fleet_nodes(parse_cluster_yaml(load_yaml(path), str(path), dynamic_mig=True),
                       str(path))


def fleet_nodes(cluster: ClusterFile, source: str) -> list[NodeSpec]:
    """Every node of a parsed nodePools file, or ClusterFileError listing every problem."""
    problems = [p for i, pool in enumerate(cluster.node_pools)
                for p in _replay_problems(i, pool)]
    if problems:
        raise ClusterFileError(source, problems)
    out = []
    domains = power_domains(cluster)[0]  # checked by parse_cluster_yaml
    for pool in cluster.node_pools:
        devices = pool_devices(pool)
        topology = pool_topology(pool)
        labels = tuple(sorted(pool.labels.items()))
        taints = tuple(Taint(t.key, t.value, t.effect) for t in pool.taints)
        for name in cluster.node_names(pool):
            out.append(NodeSpec(name, pool.cpu_milli, pool.memory_mib, pool.gpus, pool.model,
                                devices=devices, labels=labels, taints=taints,
                                power_budget_w=pool.power_budget_w, topology=topology,
                                power_domain=domains.get(name)))
    return out


def pool_devices(pool: NodePool) -> tuple[DeviceConfig, ...]:
    """One `DeviceConfig` per GPU: the group naming it, else exclusive."""
    out = []
    for _, group in sorted(device_modes(pool).items()):
        if group is None:
            out.append(DeviceConfig(DeviceMode.EXCLUSIVE))
        elif group.mode is DeviceMode.MIG:
            layout = (find_placement(get_geometry(pool.model), group.layout)
                      if group.layout else None)
            out.append(DeviceConfig(DeviceMode.MIG, mig_layout=layout))
        elif group.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS):
            out.append(DeviceConfig(group.mode, replicas=group.replicas))
        else:
            out.append(DeviceConfig(group.mode))
    return tuple(out)


def pool_topology(pool: NodePool) -> tuple[DeviceTopology, ...]:
    """Per-device interconnect: nvswitch = one NVLink domain; pcie = no NVLink."""
    if not pool.gpus or pool.topology == "none":
        return ()
    return hgx_topology(pool.gpus, domains=1 if pool.topology == "nvswitch" else 0)


def _replay_problems(i: int, pool: NodePool) -> list[str]:
    """What the replay refuses beyond the shared checks: sizes past the engine's ranges, MIG
    media-extension profiles (not modelled) and a power budget on a model without a TDP."""
    where = f"nodePools[{i}]"
    problems = []
    for field, value, hi in (("gpus", pool.gpus, MAX_GPUS_PER_NODE),
                             ("cpuMilli", pool.cpu_milli, MAX_CPU_MILLI),
                             ("memoryMiB", pool.memory_mib, MAX_MEMORY_MIB)):
        if value > hi:
            problems.append(f"{where}.{field}: {value} is out of range; accepted: 0..{hi}")
    for j, group in enumerate(pool.devices):
        if group.mode is DeviceMode.MIG and group.layout:
            media = [p for p in group.layout if p not in mig_table(pool.model).by_profile]
            if media:
                problems.append(f"{where}.devices[{j}].layout: {', '.join(media)}: media-"
                                "extension profiles are not modelled by the replay; use the "
                                "profile without +me")
    if pool.power_budget_w is not None and pool.gpus and not get_model(pool.model).tdp_w:
        problems.append(f"{where}.powerBudgetW: {pool.model} has no known TDP, so a power "
                        "budget cannot be enforced; remove powerBudgetW or use a catalog model "
                        "with a TDP")
    return problems


class FleetCards:
    """The cluster's GPU cards, to check a job's request against them before the replay:
    a MIG profile no node's model has, or more memory than any card the request may use,
    is refused (it could never run); a memory percentage stays a percentage, resolved by
    the state on the card each pod lands on (so a mixed fleet serves it)."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        self.memory: dict[str, int] = {}
        for n in nodes:
            if n.gpu_count:
                self.memory[n.model] = max(self.memory.get(n.model, 0), n.device_memory_mib)

    def card_for(self, req: GpuRequest) -> int | None:
        """MiB of the card a share is taken of (None: the default); ValueError when no card
        of the cluster can serve `req`."""
        cards = {m: mib for m, mib in self.memory.items() if not req.models or m in req.models}
        have = ", ".join(f"{m} ({mib} MiB)" for m, mib in sorted(self.memory.items())) or \
            "(no GPUs)"
        if not cards:
            what = (f"MIG profile {req.mig_profile} (on {', '.join(req.models)})"
                    if req.mig_profile else f"GPU model {', '.join(req.models)}")
            raise ValueError(f"{', '.join(req.spellings) or 'the request'}: no node of the "
                             f"cluster has a GPU with {what}; the cluster's GPUs: {have}")
        if req.memory_percent is not None and req.memory_mib is None:
            return None  # a share of the card each pod lands on: the state resolves it
        biggest = max(cards.values())
        if req.memory_mib is not None and req.memory_mib > biggest:
            raise ValueError(f"nvidia.com/gpumem: {req.memory_mib} MiB is more than any card "
                             f"of the cluster has; the cluster's GPUs: {have}")
        return None
