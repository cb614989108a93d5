"""Kubernetes objects (as the API's JSON) for the observation tests: pods with the gpugov
annotations of docs/contracts.md, nodes with an inventory."""

from __future__ import annotations

import json
from typing import Any

MIB = 1024 * 1024


def pod(name: str, ns: str = "team-a", node: str | None = "node-1", phase: str = "Running",
        request: dict | None = None, devices: list[dict] | None = None,
        queue: str | None = "team-a", tenant: str | None = "team-a", gpu_limit: int = 0,
        raw: dict[str, str] | None = None) -> dict[str, Any]:
    ann: dict[str, str] = {}
    if request is not None:
        ann["gpugov.io/request"] = json.dumps({"v": 1, **request})
    if devices is not None:
        ann["gpugov.io/allocation"] = json.dumps({"v": 1, "node": node, "isolation": "soft",
                                                  "devices": devices})
    if queue:
        ann["gpugov.io/queue"] = queue
    if tenant:
        ann["gpugov.io/tenant"] = tenant
    ann.update(raw or {})
    limits = {"nvidia.com/gpu": str(gpu_limit)} if gpu_limit else {}
    return {"metadata": {"name": name, "namespace": ns, "annotations": ann},
            "spec": {"nodeName": node,
                     "containers": [{"name": "main", "resources": {"limits": limits}}]},
            "status": {"phase": phase}}


def device(uuid: str, index: int = 0, mode: str = "exclusive", milli: int = 1000,
           memory_mib: int = 81920) -> dict[str, Any]:
    return {"index": index, "uuid": uuid, "mode": mode, "milli": milli, "memoryMiB": memory_mib}


def node(name: str, uuids: list[str], memory_mib: int = 81920) -> dict[str, Any]:
    inv = {"v": 1, "devices": [{"index": i, "uuid": u, "model": "A100-SXM4-80GB",
                                "memoryMiB": memory_mib, "mode": "exclusive", "healthy": True}
                               for i, u in enumerate(uuids)]}
    return {"metadata": {"name": name, "annotations": {"gpugov.io/inventory": json.dumps(inv)},
                         "labels": {"nvidia.com/gpu.memory": str(memory_mib)}},
            "status": {"allocatable": {"nvidia.com/gpu": str(len(uuids))}}}


QUEUES_YAML = """\
queues:
  - name: org
    quota: {gpu: 4}
  - name: team-a
    parent: org
    quota: {gpu: 2}
  - name: team-b
    parent: org
    quota: {gpu: 2}
tenants:
  - {namespace: team-a, queue: team-a}
  - {namespace: team-b, queue: team-b}
"""
