"""What /proc says about a PID: alive or not, its pod (from the cgroup path), and the host PID
of a process a region registered by its container-namespace PID and start time.

The exporter and agent run with the host PID namespace (hostPID) so NVML's PIDs are visible.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
# kubepods cgroups name the pod UID: ".../pod<uid>/..." (cgroupfs) or "...-pod<u_i_d>.slice"
_H = "[-_]"
_POD_UID = re.compile(rf"pod([0-9a-f]{{8}}{_H}[0-9a-f]{{4}}{_H}[0-9a-f]{{4}}{_H}[0-9a-f]{{4}}"
                      rf"{_H}[0-9a-f]{{12}})")


def _starttime(stat: str) -> int | None:
    """Field 22 of /proc/<pid>/stat (after the parenthesised command name)."""
    try:
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


@dataclass
class ProcTable:
    """A snapshot of /proc, built once per scrape."""

    root: Path = PROC
    alive: set[int] = field(default_factory=set)
    by_ns: dict[tuple[int, int], int] = field(default_factory=dict)  # (ns pid, start) -> host
    _pods: dict[int, str | None] = field(default_factory=dict)

    @classmethod
    def read(cls, root: Path = PROC, pids: Iterable[int] | None = None) -> ProcTable:
        """Read all of /proc, or only `pids` (what detection needs: the PIDs NVML lists)."""
        t = cls(root)
        dirs = (root / str(p) for p in pids) if pids is not None else root.iterdir()
        for d in dirs:
            if not d.name.isdigit():
                continue
            pid = int(d.name)
            try:
                stat = (d / "stat").read_text()
                status = (d / "status").read_text()
            except OSError:
                continue  # exited meanwhile
            t.alive.add(pid)
            start = _starttime(stat)
            nspid = next((ln.split()[1:] for ln in status.splitlines()
                          if ln.startswith("NSpid:")), [str(pid)])
            if start is not None and nspid:
                t.by_ns.setdefault((int(nspid[-1]), start), pid)
        return t

    def host_pid(self, ns_pid: int, start_ticks: int) -> int | None:
        """The host PID of a container process (its innermost PID and start time)."""
        return self.by_ns.get((ns_pid, start_ticks))

    def pod_uid(self, pid: int) -> str | None:
        """The UID of the pod whose cgroup holds `pid` (None: not in a pod / unknown)."""
        if pid not in self._pods:
            uid = None
            try:
                m = _POD_UID.search((self.root / str(pid) / "cgroup").read_text())
                uid = m.group(1).replace("_", "-") if m else None
            except OSError:
                pass
            self._pods[pid] = uid
        return self._pods[pid]
