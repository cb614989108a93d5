"""The replay's nodes from a cluster file: the openb nodes CSV or `cluster.yaml` (nodePools).

The file type is decided by the extension (`.csv`; `.yaml`/`.yml`) and otherwise by the
content (a CSV header starting `sn,`). The nodePools format is parsed by the same code as the
kwok dev cluster (`model.cluster_spec`). What the replay's engine cannot model yet is refused
with a clear "planned" message rather than silently ignored: per-device modes (`devices:` —
MIG layouts, soft/time-slice/MPS devices), taints and power budgets (issue 8, increment b).
"""

from __future__ import annotations

from pathlib import Path

from gpugov.model.cluster import NodeSpec
from gpugov.model.cluster_spec import ClusterFileError, parse_cluster_yaml
from gpugov.sim.text_input import load_yaml, read_text
from gpugov.sim.trace import MAX_CPU_MILLI, MAX_GPUS_PER_NODE, MAX_MEMORY_MIB, load_nodes

PLANNED = ("is planned for the replay (its engine does not model per-device modes, taints or "
           "power yet)")


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
    cluster = parse_cluster_yaml(load_yaml(path), str(path))
    problems: list[str] = []
    for i, pool in enumerate(cluster.node_pools):
        where = f"nodePools[{i}]"
        if pool.devices:
            problems.append(f"{where}.devices: per-device modes (mig, soft, timeslice, mps) "
                            f"{PLANNED}; omit devices: (every device then takes whole-GPU "
                            "pods and soft slices)")
        if pool.taints:
            problems.append(f"{where}.taints: taints {PLANNED}; omit taints:")
        if pool.power_budget_w is not None:
            problems.append(f"{where}.powerBudgetW: a power budget {PLANNED}; omit it")
        for field, value, hi in (("gpus", pool.gpus, MAX_GPUS_PER_NODE),
                                 ("cpuMilli", pool.cpu_milli, MAX_CPU_MILLI),
                                 ("memoryMiB", pool.memory_mib, MAX_MEMORY_MIB)):
            if value > hi:
                problems.append(f"{where}.{field}: {value} is out of range; accepted: 0..{hi}")
    if problems:
        raise ClusterFileError(str(path), problems)
    return [NodeSpec(name, pool.cpu_milli, pool.memory_mib, pool.gpus, pool.model)
            for pool in cluster.node_pools for name in cluster.node_names(pool)]
