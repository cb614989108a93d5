"""The DRA claims' accounting regions on this node, attributed to claim and pod.

The kubelet plugin gives each claim on a slice or capped replica a region folder
`<state>/claim-regions/<ns>_<claim>_<claim uid>/` (`prepare.NodePaths.region_dir`) with the
library's `region`, the `devices` file (ordinal -> UUID) and a `pods` file written at prepare:
one `<pod name> <pod uid>` line per pod the claim is reserved for (`status.reservedFor`). The
exporter reads them beside the device plugin's pod regions, so usage is attributed by claim as
well as by pod.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from gpugov.node.pod_regions import PodRegion, RegionProblem, scan

_POD = re.compile(r"^[a-z0-9][a-z0-9.-]{0,252}$")
_UID = re.compile(r"^[0-9a-fA-F-]{8,64}$")


def scan_claims(root: Path | None
                ) -> tuple[list[PodRegion], list[str], list[RegionProblem]]:
    """(each claim's region as its first pod's — pod and uid "" when the `pods` file names
    none or is unreadable —, the claim name of each, the problems found)."""
    found, problems = scan(root)
    regions, claims = [], []
    for r in found:
        pod = uid = ""
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in (r.path.parent / "pods").read_text().splitlines()[:64]:
                words = line.split()
                if len(words) == 2 and _POD.match(words[0]) and _UID.match(words[1]):
                    pod, uid = words
                    break
        # the folder is <ns>_<claim>_<claim uid>: scan() read the claim as the "pod"
        regions.append(PodRegion(r.namespace, pod, uid, r.path, r.region, r.device_uuids,
                                 r.start_ticks))
        claims.append(r.pod)
    return regions, claims, problems
