"""What /proc says about a PID: alive or not, its pod (from the cgroup path), the host PIDs
of a process a region registered by its container-namespace PID and start time, and whether a
process holds a given file open. Everything here is read from the host side: nothing a
container can write decides which host process a region accounts for.

The exporter and agent run with the host PID namespace (hostPID) so NVML's PIDs are visible.
"""

from __future__ import annotations

import os
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
    # (ns pid, start) -> host PIDs (several containers may each have one)
    by_ns: dict[tuple[int, int], list[int]] = field(default_factory=dict)
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
                t.by_ns.setdefault((int(nspid[-1]), start), []).append(pid)
        return t

    def host_pid(self, ns_pid: int, start_ticks: int) -> int | None:
        """A host PID of a container process (its innermost PID and start time)."""
        found = self.by_ns.get((ns_pid, start_ticks))
        return found[0] if found else None

    def host_pids(self, ns_pid: int, start_ticks: int) -> list[int]:
        """Every host PID whose innermost PID and start time are these."""
        return list(self.by_ns.get((ns_pid, start_ticks), ()))

    def holds_file(self, pid: int, path: Path) -> bool:
        """Whether `pid` has `path` open (same device and inode), from /proc/<pid>/fd."""
        try:
            want = os.stat(path)
            fds = list((self.root / str(pid) / "fd").iterdir())
        except OSError:
            return False
        for fd in fds[:4096]:  # bounded: a process with more descriptors is not searched further
            try:
                st = os.stat(fd)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino):
                return True
        return False

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
