"""The enforcement regions of the pods on this node, and which pod each belongs to.

The device plugin gives every soft-slice pod a host folder `<state>/regions/<ns>_<pod>_<uid>/`
holding the `region` file the library writes (gpugov.node.deviceplugin.response); the folder
name is the pod attribution (namespace and pod names cannot contain `_`). One region serves all
containers of the pod, so the `container` label stays empty — except for a pod with several GPU
containers: each has its own region in `containers/<container>/` of the pod's folder (their
device ordinals differ), and carries its name. The region's device indexes are the
container's CUDA ordinals; an optional `devices` file beside it (one GPU/MIG UUID per line, in
ordinal order) maps them to physical GPUs, else the ordinals are matched through the processes
NVML sees (see `detect`).
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from gpugov.node.region import RegionError, RegionSnapshot, read_region, read_start_ticks

log = logging.getLogger(__name__)
_DIR = re.compile(r"^([a-z0-9][a-z0-9.-]*)_([a-z0-9][a-z0-9.-]*)_([0-9a-fA-F-]{8,})$")


@dataclass(frozen=True, slots=True)
class PodRegion:
    namespace: str
    pod: str
    uid: str
    path: Path
    region: RegionSnapshot
    device_uuids: tuple[str, ...] = ()  # ordinal -> UUID, when the `devices` file exists
    start_ticks: dict[int, int] | None = None  # slot index -> process start time
    container: str = ""  # one of the pod's several GPU containers ("" = the pod's region)


@dataclass(frozen=True, slots=True)
class RegionProblem:
    path: Path
    reason: str  # short, for the errors metric: "unreadable", "corrupt", "bad_folder_name"
    message: str


def scan(root: Path | None) -> tuple[list[PodRegion], list[RegionProblem]]:
    """Read every pod region under `root`; a bad one is reported, never raised."""
    found: list[PodRegion] = []
    problems: list[RegionProblem] = []
    if root is None or not root.is_dir():
        return found, problems
    for d, container in _folders(root):
        region_file = d / "region"
        if not d.is_dir() or not region_file.exists():
            continue
        m = _DIR.match((d.parent.parent if container else d).name)
        if not m:
            problems.append(RegionProblem(d, "bad_folder_name",
                                          f"{d}: folder name is not <namespace>_<pod>_<uid>"))
            continue
        try:
            snap = read_region(region_file)
            starts = read_start_ticks(region_file)
        except RegionError as exc:
            problems.append(RegionProblem(region_file, "region_corrupt", str(exc)))
            continue
        except OSError as exc:
            problems.append(RegionProblem(region_file, "region_unreadable",
                                          f"{region_file}: {exc.strerror}"))
            continue
        uuids: tuple[str, ...] = ()
        with contextlib.suppress(OSError):
            uuids = tuple(x.strip() for x in (d / "devices").read_text().split() if x.strip())
        found.append(PodRegion(m.group(1), m.group(2), m.group(3).replace("_", "-"),
                               region_file, snap, uuids, starts, container))
    for p in problems:
        log.warning("%s", p.message)
    return found, problems


def _folders(root: Path) -> list[tuple[Path, str]]:
    """(region folder, container name or "") of every pod folder and of its containers'."""
    out: list[tuple[Path, str]] = []
    for d in sorted(root.iterdir()):
        out.append((d, ""))
        inner = d / "containers"
        if d.is_dir() and not d.is_symlink() and inner.is_dir() and not inner.is_symlink():
            with contextlib.suppress(OSError):
                out += [(c, c.name) for c in sorted(inner.iterdir())
                        if _CONTAINER.match(c.name) and not c.is_symlink()]
    return out


_CONTAINER = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
