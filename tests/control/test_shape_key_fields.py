"""Jobs that differ only in `topology: required` (nvlink) or a memory percentage must not
share one cached placement outcome within a cycle: the cycle caches a failed placement per
`Job.shape_key`, so a 40 %-of-the-card job that fits nowhere made a 10 % one wait too."""

import dataclasses

from tests.control.cp_helpers import plane

from gpugov.control.workload import Job
from gpugov.model.cluster import NodeSpec
from gpugov.model.devices import DeviceTopology
from gpugov.model.request import PodRequest


def _split_node() -> NodeSpec:
    # 4 GPUs in two NVLink pairs, two of them (one per pair) taken below
    topo = tuple(DeviceTopology(i // 2, None, 0) for i in range(4))
    return dataclasses.replace(NodeSpec("n0", 64_000, 262_144, 4, "A100"), topology=topo)


def test_shape_keys_differ_in_nvlink_and_memory_percentage():
    cp = plane([{"name": "a", "quota": {"gpu": 4}}], [_split_node()])
    leaf, trust = cp.tree.resolve("a")
    base = PodRequest("p", 1000, 1024, 1, 500)
    keys = {Job(f"j{i}", leaf, cp.cfg.priority_class("low"), 0, 1, r, trust).shape_key()
            for i, r in enumerate((base, dataclasses.replace(base, nvlink=True),
                                   dataclasses.replace(base, gpu_memory_percent=40.0)))}
    assert len(keys) == 3
