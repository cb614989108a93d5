"""Start and stop the control plane's processes: own process groups, pids in a state file.

Each process runs in its own session (process group) with its output in a log file. The state
file (`state.json` in the work dir) records every pid with its identity from /proc — start
time and executable — so `stop` signals exactly the processes that were started, never a later
process that reused the pid. An entry whose identity cannot be proven (no start time recorded,
a different executable, an unreadable /proc) is never signalled; a damaged state file is a
`StateFileError` that names the file and signals nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

STATE_FILE = "state.json"


def free_port() -> int:
    """A free loopback TCP port, picked now (the kernel chooses; two runs do not collide)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StateFileError(ValueError):
    """The work dir's state file cannot be read; nothing was signalled."""


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _exe(pid: int) -> str | None:
    """The process's executable (/proc/PID/exe), None when it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def alive(pid: int, ticks: int | None = None, exe: str | None = None) -> bool:
    """True when `pid` runs and (if given) is the process that started at `ticks` from `exe`."""
    now = _start_ticks(pid)
    if now is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z":
        return False
    if ticks is not None and now != ticks:
        return False
    return exe is None or _exe(pid) in (exe, None)


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Managed:
    """One started process."""

    name: str
    pid: int
    ticks: int | None
    log: Path
    argv: list[str]
    popen: subprocess.Popen | None = None
    exe: str | None = None

    def running(self) -> bool:
        """Still the process we started. A process known only from the state file counts
        only when its start time was recorded and still matches (and its executable, when
        recorded): an unproven identity is never ours to signal."""
        if self.popen is not None:
            return self.popen.poll() is None
        return self.ticks is not None and alive(self.pid, self.ticks, self.exe)

    def as_dict(self) -> dict:
        return {"name": self.name, "pid": self.pid, "ticks": self.ticks, "exe": self.exe,
                "log": str(self.log), "argv": self.argv}


class ProcessSet:
    """The processes of one work dir; persisted to its state file after every change."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: dict[str, Managed] = {}
        self.extra: dict[str, object] = {}

    @property
    def state_path(self) -> Path:
        return self.workdir / STATE_FILE

    def save(self) -> None:
        data = {"processes": [p.as_dict() for p in self.procs.values()], **self.extra}
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.state_path)

    @classmethod
    def load(cls, workdir: Path) -> ProcessSet:
        """The state file's processes; StateFileError (naming the file) when it is not one
        gpugov wrote. Nothing is signalled on the way."""
        ps = cls(workdir)
        path = ps.state_path
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("processes", []), list):
                raise ValueError("expected an object with a list 'processes'")
            for i, p in enumerate(data.pop("processes", [])):
                ticks, exe = p.get("ticks"), p.get("exe")
                if not isinstance(p.get("name"), str) or type(p.get("pid")) is not int \
                        or p["pid"] <= 1 or (ticks is not None and type(ticks) is not int) \
                        or (exe is not None and not isinstance(exe, str)):
                    raise ValueError(f"processes[{i}] is not a process gpugov recorded")
                ps.procs[p["name"]] = Managed(p["name"], p["pid"], ticks,
                                              Path(str(p.get("log", ""))),
                                              list(p.get("argv") or []), exe=exe)
        except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError) as e:
            raise StateFileError(
                f"{path}: {e}; no process was signalled. Check what still runs (`ps -ef`), "
                "stop it yourself, then remove the work dir") from None
        ps.extra = data
        return ps

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              die_with_parent: bool = False) -> Managed:
        """Start `argv` in its own session, output to logs/NAME.log. `die_with_parent`: the
        kernel sends SIGKILL when the starting process dies (even by SIGKILL), so a killed
        test run leaves nothing behind (SIGKILL, not SIGTERM: with its etcd gone, an
        apiserver's graceful shutdown was seen to take over 30 s, and a throwaway test
        cluster has nothing to save); `gpugov dev up` leaves it off (its cluster outlives
        the command)."""
        if name in self.procs and self.procs[name].running():
            raise RuntimeError(f"{name} is already running (pid {self.procs[name].pid})")
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir,
                                     env=env, start_new_session=True,
                                     preexec_fn=_die_with_parent if die_with_parent else None)
        ticks = _start_ticks(popen.pid)
        for _ in range(20):  # /proc may lag a fresh child for a moment
            if ticks is not None:
                break
            time.sleep(0.01)
            ticks = _start_ticks(popen.pid)
        proc = Managed(name, popen.pid, ticks, log, argv, popen, exe=_exe(popen.pid))
        self.procs[name] = proc
        self.save()
        return proc

    def stop(self, name: str, grace: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL after `grace` seconds; forget the process."""
        proc = self.procs.get(name)
        if proc is None:
            return
        if proc.running():
            _signal_group(proc, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while proc.running() and time.monotonic() < deadline:
                time.sleep(0.05)
            if proc.running():
                _signal_group(proc, signal.SIGKILL)
                deadline = time.monotonic() + 5
                while proc.running() and time.monotonic() < deadline:
                    time.sleep(0.05)
        if proc.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=1)
        del self.procs[name]
        self.save()

    def stop_all(self, grace: float = 10.0) -> None:
        """Stop in reverse start order (clients before the apiserver before etcd)."""
        for name in reversed(list(self.procs)):
            self.stop(name, grace)


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _signal_group(proc: Managed, sig: signal.Signals) -> None:
    # The process leads its own session, so its pgid is its pid; only signal while it is
    # still, provably, the process we started.
    if proc.popen is None and not proc.running():
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
