"""A cluster description: the `cluster.yaml` nodePools format or the openb nodes CSV.

Pure parsing and checks (no Kubernetes client), shared by the kwok dev cluster
(`k8s.devcluster.cluster_file` turns it into Node objects) and the replay (`sim.fleet` turns it
into the engine's nodes). Errors name the file, the path inside it (or the CSV line) and the
field, and list every problem at once.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from gpugov.model.catalog import CATALOG
from gpugov.model.devices import DeviceMode
from gpugov.model.mig import MIG_GEOMETRIES, MigInstance, find_placement, get_geometry
from gpugov.model.power import (
    DEFAULT_LABEL,
    DEFAULT_RATIO,
    MAX_PANEL_W,
    PowerDomain,
    resolve_domains,
)
from gpugov.model.validation import pydantic_problems, yaml_loader

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


class ClusterFileError(ValueError):
    """A cluster file gpugov cannot use: one line per problem, each naming path and field."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source, self.problems = source, problems
        super().__init__(f"{source}: invalid cluster file:\n  " + "\n  ".join(problems))


#: upper bounds of a cluster file (a typo such as `count: 1000000000` must be an error that
#: names the range, not a replay that grows to gigabytes): far above any real cluster
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 256
MAX_REPLICAS = 1024
MAX_CPU_MILLI = 2**40
MAX_MEMORY_MIB = 2**40
MAX_POOLS = 10_000
MAX_LIST = 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Taint(_Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class DeviceGroup(_Strict):
    """Devices `index` ("0-1", "4" or 4) in one mode."""

    index: str
    mode: DeviceMode
    layout: list[str] = Field(default_factory=list, max_length=MAX_LIST)
    replicas: int = Field(1, ge=1, le=MAX_REPLICAS)

    @field_validator("index", mode="before")
    @classmethod
    def _index(cls, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"{value!r} is not an index; write 3 or a range like '0-3'")
        text = str(value).strip()
        if not re.fullmatch(r"\d+(-\d+)?", text):
            raise ValueError(f"{value!r} is not an index; write 3 or a range like '0-3'")
        return text

    def indexes(self) -> range:
        lo, _, hi = self.index.partition("-")
        return range(int(lo), int(hi or lo) + 1)


class NodePool(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=200)
    count: int = Field(ge=1, le=MAX_NODES)
    model: str = ""
    gpus: int = Field(0, ge=0, le=MAX_GPUS_PER_NODE)
    cpu_milli: int = Field(alias="cpuMilli", ge=0, le=MAX_CPU_MILLI)
    memory_mib: int = Field(alias="memoryMiB", ge=0, le=MAX_MEMORY_MIB)
    topology: Literal["nvswitch", "pcie", "none"] = "none"
    power_budget_w: float | None = Field(None, alias="powerBudgetW", ge=0, le=1e9,
                                         allow_inf_nan=False)
    labels: dict[str, str] = Field(default_factory=dict, max_length=MAX_LIST)
    taints: list[Taint] = Field(default_factory=list, max_length=MAX_LIST)
    devices: list[DeviceGroup] = Field(default_factory=list, max_length=MAX_GPUS_PER_NODE)


class PowerDomainSpec(_Strict):
    """A rack (row, PDU): its panel's rating and admission ratio; members by `nodes` or by
    the node label `powerDomainLabel` (pool `labels`)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=200)
    panel_watts: float = Field(alias="panelWatts", gt=0, le=MAX_PANEL_W, allow_inf_nan=False)
    ratio: float = Field(DEFAULT_RATIO, gt=0, le=1, allow_inf_nan=False)
    nodes: list[str] = Field(default_factory=list, max_length=MAX_NODES)


class ClusterFile(_Strict):
    node_pools: list[NodePool] = Field(alias="nodePools", min_length=1, max_length=MAX_POOLS)
    power_domains: list[PowerDomainSpec] = Field(default_factory=list, alias="powerDomains",
                                                 max_length=MAX_LIST)
    power_domain_label: str = Field(DEFAULT_LABEL, alias="powerDomainLabel", min_length=1,
                                    max_length=317)

    @model_validator(mode="after")
    def _total_nodes(self) -> ClusterFile:
        total = sum(p.count for p in self.node_pools)
        if total > MAX_NODES:
            raise ValueError(f"nodePools: {total} nodes in all; allowed: at most {MAX_NODES}")
        return self
    _exact_names: bool = PrivateAttr(False)  # CSV: one pool per node, named as the node

    def node_names(self, pool: NodePool) -> list[str]:
        if self._exact_names:
            return [pool.name]
        return [f"{pool.name}-{i}" for i in range(pool.count)]


def _pool_problems(i: int, pool: NodePool, dynamic_mig: bool = False) -> list[str]:
    where = f"nodePools[{i}]"
    problems: list[str] = []
    if pool.gpus and pool.model not in CATALOG:
        problems.append(f"{where}.model: unknown GPU model {pool.model!r}; allowed: "
                        f"{', '.join(CATALOG)}")
    if pool.gpus == 0 and pool.devices:
        problems.append(f"{where}.devices: the pool has no GPUs (gpus: 0)")
    seen: dict[int, int] = {}
    for j, group in enumerate(pool.devices):
        w = f"{where}.devices[{j}]"
        lo, _, hi = group.index.partition("-")
        if hi and int(hi) < int(lo):
            problems.append(f"{w}.index: {group.index!r} is an empty range; write 'LOW-HIGH' "
                            "with LOW <= HIGH")
        for k in group.indexes():
            if k >= pool.gpus:
                problems.append(f"{w}.index: device {k} does not exist; allowed: "
                                f"0..{pool.gpus - 1}")
                break
            if k in seen:
                problems.append(f"{w}.index: device {k} is already in devices[{seen[k]}]; "
                                "device ranges must not overlap")
                break
            seen[k] = j
        if group.mode is DeviceMode.MIG:
            if pool.model not in MIG_GEOMETRIES:
                problems.append(f"{w}.mode: {pool.model or '(no model)'} has no MIG; MIG "
                                f"models: {', '.join(MIG_GEOMETRIES)}")
                continue
            geometry = get_geometry(pool.model)
            bad = [p for p in group.layout if p not in geometry.profile_names()]
            if bad:
                problems.append(f"{w}.layout: unknown profile(s) {', '.join(bad)} on "
                                f"{pool.model}; allowed: {', '.join(geometry.profile_names())}")
            elif not group.layout and not dynamic_mig:
                problems.append(f"{w}.layout: a MIG device needs a layout, e.g. "
                                f"[{geometry.whole.name}]")
            elif not group.layout:
                pass  # the replay: no layout = dynamic MIG (instances made where pods land)
            elif find_placement(geometry, group.layout) is None:
                problems.append(f"{w}.layout: {', '.join(group.layout)} does not fit on one "
                                f"{pool.model}")
        elif group.layout:
            problems.append(f"{w}.layout: only MIG devices have a layout (mode is "
                            f"{group.mode.value})")
        if group.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS) and group.replicas < 2:
            problems.append(f"{w}.replicas: {group.mode.value} needs replicas >= 2")
        elif group.mode not in (DeviceMode.TIMESLICE, DeviceMode.MPS) and \
                "replicas" in group.model_fields_set:
            problems.append(f"{w}.replicas: only timeslice and mps devices have replicas "
                            f"(mode is {group.mode.value}); remove replicas")
    return problems


def parse_cluster_yaml(data: Any, source: str, dynamic_mig: bool = False) -> ClusterFile:
    """A validated nodePools file. `dynamic_mig`: a `mig` device group without `layout` is a
    dynamic MIG device (the replay creates instances at valid starts where pods land); without
    it (the kwok dev cluster, which advertises fixed instances) a MIG group needs a layout."""
    if not isinstance(data, dict):
        raise ClusterFileError(source, ["<root>: expected a mapping with 'nodePools'"])
    try:
        cluster = ClusterFile.model_validate(data)
    except ValidationError as exc:
        problems = pydantic_problems(exc)
        raise ClusterFileError(source, problems) from None
    problems = [p for i, pool in enumerate(cluster.node_pools)
                for p in _pool_problems(i, pool, dynamic_mig)]
    names = [pool.name for pool in cluster.node_pools]
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append(f"nodePools[{i}].name: duplicate pool name {name!r}")
    if not problems:
        problems = [f"powerDomains: {p}" if not p.startswith("powerDomains") else p
                    for p in power_domains(cluster)[1]]
    if problems:
        raise ClusterFileError(source, problems)
    return cluster


def power_domains(cluster: ClusterFile) -> tuple[dict[str, PowerDomain], list[str]]:
    """(node name -> its power domain, problems): members listed by name or labelled with
    `powerDomainLabel`; a domain without nodes, a node in two domains, two domains of one
    name or a label naming no domain is a problem."""
    problems: list[str] = []
    domains: list[PowerDomain] = []
    for i, d in enumerate(cluster.power_domains):
        if any(d.name == e.name for e in domains):
            problems.append(f"powerDomains[{i}].name: duplicate domain {d.name!r}")
            continue
        domains.append(PowerDomain(d.name, d.panel_watts, d.ratio))
    if not domains:
        return {}, problems
    nodes = [(n, pool.labels) for pool in cluster.node_pools for n in cluster.node_names(pool)]
    got, more = resolve_domains(nodes, domains, cluster.power_domain_label,
                                {d.name: d.nodes for d in cluster.power_domains})
    for i, pool in enumerate(cluster.node_pools):
        if pool.gpus and not CATALOG[pool.model].tdp_w and \
                any(n in got for n in cluster.node_names(pool)):
            more.append(f"nodePools[{i}].model: {pool.model} has no known TDP, so its draw "
                        "cannot be budgeted in a power domain")
    return got, problems + more


def _csv_pools(path: Path) -> ClusterFile:
    problems: list[str] = []
    pools: list[dict[str, Any]] = []
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing_cols = [c for c in NODE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing_cols:
            raise ClusterFileError(str(path), [f"line 1: missing column(s) "
                                               f"{', '.join(missing_cols)}; need "
                                               f"{','.join(NODE_COLUMNS)}"])
        seen: set[str] = set()
        for line, row in enumerate(reader, start=2):
            name = (row["sn"] or "").strip()
            values: dict[str, int] = {}
            for col in ("cpu_milli", "memory_mib", "gpu"):
                raw = (row[col] or "").strip()
                if not raw.isdigit():
                    problems.append(f"line {line}: {col}: {raw!r} is not a whole number >= 0")
                values[col] = int(raw) if raw.isdigit() else 0
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name):
                problems.append(f"line {line}: sn: {name!r} is not a valid node name "
                                "(lower-case letters, digits, '-' and '.')")
            elif name in seen:
                problems.append(f"line {line}: sn: duplicate node name {name!r}")
            seen.add(name)
            model = (row["model"] or "").strip()
            if values["gpu"] and model not in CATALOG:
                problems.append(f"line {line}: model: unknown GPU model {model!r}; allowed: "
                                f"{', '.join(CATALOG)}")
            pools.append({"name": name, "count": 1, "model": model, "gpus": values["gpu"],
                          "cpuMilli": values["cpu_milli"], "memoryMiB": values["memory_mib"]})
    if problems:
        raise ClusterFileError(str(path), problems)
    if not pools:
        raise ClusterFileError(str(path), ["no nodes (the file has only a header)"])
    # one pool per CSV row, named after the node (see node_names)
    cluster = ClusterFile.model_validate({"nodePools": pools})
    cluster._exact_names = True
    return cluster


def load_cluster_file(path: Path | str) -> ClusterFile:
    """Read `cluster.yaml` (nodePools) or an openb nodes CSV; ClusterFileError on bad input."""
    path = Path(path)
    if path.is_dir():
        raise ClusterFileError(str(path), ["is a folder; expected a cluster.yaml or nodes CSV"])
    if not path.is_file():
        raise ClusterFileError(str(path), ["no such file"])
    if path.suffix.lower() == ".csv":
        return _csv_pools(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8-sig"),  # noqa: S506 - SafeLoader
                         Loader=yaml_loader())
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as exc:
        raise ClusterFileError(str(path), [f"not valid YAML: {exc}"]) from None
    return parse_cluster_yaml(data, str(path))


def device_modes(pool: NodePool) -> dict[int, DeviceGroup | None]:
    modes: dict[int, DeviceGroup | None] = dict.fromkeys(range(pool.gpus))
    for group in pool.devices:
        for k in group.indexes():
            modes[k] = group
    return modes


def mig_instances(pool: NodePool, index: int) -> tuple[MigInstance, ...]:
    """Where the layout of device `index` puts its instances (empty unless MIG)."""
    group = device_modes(pool).get(index)
    if not group or group.mode is not DeviceMode.MIG:
        return ()
    return find_placement(get_geometry(pool.model), group.layout) or ()
