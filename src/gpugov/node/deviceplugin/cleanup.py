"""What a gone pod left in the plugin's state folder: its region folder
(`regions/<ns>_<pod>_<uid>/`) and its QoS board file on each device it shared
(`qos/<device>/<ns>_<pod>_<uid>`, gpugov.node.deviceplugin.response).

Why: the library reads at most 64 board files per device (native/qos.c), the freshest
first, so dead pods' files must not pile up; and the exporter would keep reading dead
regions. A pod is gone when the API no longer lists it on this node, or lists it
Succeeded/Failed. A name is removed only when it is older than `GRACE_S` (its mtime), so
a pod the kubelet allocates between the list and the removal keeps its files. Only names of
the `<ns>_<pod>_<uid>` shape are touched; a symlink or anything else in the folders is left
alone, and a region folder is removed without following links inside it (a pod writes in
its own folder).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from gpugov.node.deviceplugin.pods import PodSource

log = logging.getLogger("gpugov.deviceplugin")

#: how often the manager sweeps, and how old a gone pod's file must be to go
SWEEP_S = 30.0
GRACE_S = 60.0
_POD_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*_[a-z0-9][a-z0-9.-]*_([0-9a-fA-F-]{8,})$")


def live_uids(pods: list[dict[str, Any]]) -> set[str]:
    """UIDs of the listed pods that may still run (a terminating pod still does)."""
    return {str((p.get("metadata") or {}).get("uid") or "").lower() for p in pods
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")}


def leftovers(state_dir: Path, live: set[str], now: float, grace_s: float = GRACE_S
              ) -> list[Path]:
    """Region folders and board files of pods not in `live`, older than `grace_s`."""
    out: list[Path] = []
    places = [(state_dir / "regions", stat.S_ISDIR)]
    qos = state_dir / "qos"
    if qos.is_dir() and not qos.is_symlink():
        places += [(d, stat.S_ISREG) for d in sorted(qos.iterdir())
                   if d.is_dir() and not d.is_symlink()]
    for folder, kind in places:
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for p in entries:
            m = _POD_NAME.match(p.name)
            if m is None or m.group(1).lower() in live:
                continue
            try:
                st = p.lstat()
            except OSError:
                continue
            if kind(st.st_mode) and st.st_mtime < now - grace_s:
                out.append(p)
    return out


def remove(paths: list[Path]) -> list[Path]:
    """Remove each path (a folder with what it holds); returns those that went."""
    gone: list[Path] = []
    for p in paths:
        try:
            if stat.S_ISDIR(p.lstat().st_mode):
                shutil.rmtree(p)  # fd-based on Linux: links inside are not followed
            else:
                os.unlink(p)
            gone.append(p)
        except OSError as exc:
            log.warning("could not remove %s, left by a gone pod: %s", p, exc)
    return gone


async def sweep(state_dir: Path, pods: PodSource, node: str, now: float | None = None,
                grace_s: float = GRACE_S) -> list[Path]:
    """List this node's pods and remove what the gone ones left; returns what went. A
    failed list removes nothing (the next sweep tries again)."""
    listed = await pods.list_pods(node)
    paths = leftovers(state_dir, live_uids(listed), time.time() if now is None else now,
                      grace_s)
    gone = remove(paths)
    if gone:
        log.info("removed %d region folder(s) and QoS board file(s) of gone pods", len(gone))
    return gone
