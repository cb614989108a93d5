"""Every pod the kept upstream files describe (tests/compat/upstream/SOURCES.md): Pods, and
the pod templates of Deployments and Jobs, from YAML files and from the ```yaml / ```shell
blocks of Markdown guides."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

UPSTREAM = Path(__file__).parent / "upstream"
_BLOCK = re.compile(r"```(?:yaml|shell)\n(.*?)```", re.S)


@dataclass(frozen=True)
class UpstreamPod:
    key: str  # "<folder>/<path>#<name>"
    source: str  # the file, relative to upstream/
    kind: str  # what the file holds the pod in: Pod, Deployment, Job
    pod: dict[str, Any]  # a v1 Pod as the apiserver receives it


def _documents(path: Path) -> Iterator[dict[str, Any]]:
    text = path.read_text()
    if path.suffix == ".md":
        for block in _BLOCK.findall(text):
            if "cat <<EOF" in block:
                block = block.split("cat <<EOF", 1)[1].split("\nEOF", 1)[0].split("\n", 1)[1]
            try:
                docs = list(yaml.safe_load_all(block))
            except yaml.YAMLError:
                continue
            for d in docs:
                if isinstance(d, dict) and "spec" in d and "containers" in (d.get("spec") or {}):
                    # a guide's snippet: metadata + spec of a v1 Pod
                    yield {"apiVersion": "v1", "kind": "Pod", **d}
                elif isinstance(d, dict) and d.get("kind") == "Pod":
                    yield d
        return
    for d in yaml.safe_load_all(text):
        if isinstance(d, dict):
            yield d


def _pod_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    kind = doc.get("kind")
    if kind == "Pod":
        return doc
    if kind in ("Deployment", "Job", "StatefulSet", "ReplicaSet"):
        tmpl = doc["spec"]["template"]
        meta = dict(tmpl.get("metadata") or {})
        meta.setdefault("name", doc["metadata"].get("name") or
                        doc["metadata"].get("generateName", "pod").rstrip("-"))
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"]}
    return None


def upstream_pods() -> list[UpstreamPod]:
    out = []
    for path in sorted(UPSTREAM.rglob("*")):
        if path.suffix not in (".yaml", ".yml", ".md") or path.name == "SOURCES.md":
            continue
        source = str(path.relative_to(UPSTREAM))
        for doc in _documents(path):
            pod = _pod_of(doc)
            if pod is None:
                continue
            name = (pod.get("metadata") or {}).get("name", "?")
            out.append(UpstreamPod(f"{source}#{name}", source, str(doc.get("kind")), pod))
    return out
