"""Writes the PowerDomain statuses a scheduler cycle computed (merge patch on /status).

A merge patch cannot drop a map key by leaving it out, so a cap that was lifted is written
as null (the apiserver removes it), which is what the node agents read as "default limit".
"""

from __future__ import annotations

import logging
from typing import Any

from gpugov.k8s.power.contract import PATH
from gpugov.k8s.power.tracker import PowerTracker

log = logging.getLogger("gpugov.scheduler")
MERGE = "application/merge-patch+json"


def merge_doc(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """`new` with every cap `old` had and `new` lacks set to null."""
    doc = dict(new)
    old_caps = (old or {}).get("caps") or {}
    caps: dict[str, Any] = {n: dict(c) for n, c in (new.get("caps") or {}).items()}
    for node, devs in old_caps.items():
        if node not in caps:
            caps[node] = None
            continue
        for index in devs or {}:
            caps[node].setdefault(index, None)
    doc["caps"] = caps
    return doc


async def write_statuses(kube: Any, tracker: PowerTracker, docs: dict[str, dict[str, Any]]
                         ) -> None:
    for name, doc in docs.items():
        try:
            status, body = await kube.request(
                "PATCH", f"{PATH}/{name}/status",
                {"status": merge_doc(tracker.written.get(name), doc)}, content_type=MERGE)
        except (TimeoutError, OSError) as e:
            log.warning("PowerDomain %s status: %s", name, e)
            continue
        if 200 <= status < 300 or status == 404:
            tracker.status_written(name, doc)
        else:
            log.warning("PowerDomain %s status: HTTP %s: %s", name, status, body)
