"""What the kubelet test peers (kubelet_driver: the device manager; kubelet_dra_driver: the
DRA manager and plugin watcher) share: the build recipe and the JSON-lines process.

`build_peer` compiles a peer on demand into ${XDG_CACHE_HOME:-~/.cache}/gpugov/k8s-v1.34.2/bin/
from a wrapper module that requires k8s.io/kubernetes v1.34.2 with every staging module replaced
by k8s.io/<name> v0.34.2 (the staging list is read from the served go.mod). A file lock keeps
parallel test runs from building twice; a hash of the sources decides when to rebuild.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from gpugov.k8s.devcluster.build import K8S_VERSION, go_binary
from gpugov.k8s.devcluster.build import cache_root as cache_dir


class DriverUnavailable(RuntimeError):
    """Go is missing (tests skip) — any other build failure is an error."""


def _digest(here: Path, sources: tuple[str, ...]) -> str:
    h = hashlib.sha256(K8S_VERSION.encode())
    for name in sources:
        h.update((here / name).read_bytes())
    return h.hexdigest()


def _go(args: list[str], cwd: Path) -> str:
    go = go_binary()
    assert go is not None
    env = {**os.environ, "GOWORK": "off", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false",
           "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "local")}
    env["PATH"] = f"{Path(go).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([go, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"go {' '.join(args)} failed in {cwd}:\n{proc.stderr[-4000:]}")
    return proc.stdout


def build_peer(here: Path, sources: tuple[str, ...], name: str, what: str) -> Path:
    """The Go test peer `name` (sources in `here`, around the kubelet's `what`), built when
    missing or when its sources changed."""
    if go_binary() is None:
        raise DriverUnavailable(f"Go is not installed (needed to build the kubelet {what} "
                                "test peer from k8s.io/kubernetes)")
    root = cache_dir()
    (root / "bin").mkdir(parents=True, exist_ok=True)
    binary = root / "bin" / name
    stamp = root / "bin" / f"{name}.sha256"
    digest = _digest(here, sources)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists() and stamp.exists() and stamp.read_text() == digest:
            return binary
        src = root / f"{name}-src"
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir()
        for source in sources:
            shutil.copy(here / source, src / source)
        _go(["mod", "init", f"gpugov.test/{name}"], src)
        info = json.loads(_go(["mod", "download", "-json", f"k8s.io/kubernetes@v{K8S_VERSION}"],
                              src))
        upstream = Path(info["GoMod"]).read_text()
        staging = re.findall(r"^\s*(k8s\.io/[a-z0-9-]+) => \./staging", upstream, re.M)
        minor = "v0." + K8S_VERSION.split(".", 1)[1]
        _go(["mod", "edit", *[f"-replace={m}={m}@{minor}" for m in staging]], src)
        godebug = re.findall(r"^godebug .*$", upstream, re.M)
        if godebug:
            with open(src / "go.mod", "a") as f:
                f.write("\n".join(godebug) + "\n")
        _go(["get", f"k8s.io/kubernetes@v{K8S_VERSION}"], src)
        _go(["mod", "tidy"], src)
        tmp = binary.with_suffix(".tmp")
        _go(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), "."], src)
        tmp.replace(binary)
        stamp.write_text(digest)
        return binary


class JsonLinePeer:
    """A Go test peer in its own process group, spoken to in JSON lines on stdin/stdout."""

    what = "test peer"
    start_timeout = 30.0

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.argv, self.log_path = argv, log_path
        self.proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()

    def start(self) -> None:
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, text=True,
                                         start_new_session=True)
        self._lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self._lines), daemon=True).start()
        ready = self._next(self.start_timeout)
        if not ready.get("ok"):
            raise RuntimeError(f"{self.what} did not start: {ready}")

    @staticmethod
    def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def _next(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{self.what} silent for {timeout}s; "
                               f"log: {self.log_path}") from None
        if line is None:
            raise RuntimeError(f"{self.what} exited; log: {self.log_path}")
        return json.loads(line)

    def call(self, cmd: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._next(timeout)

    def stop(self) -> None:
        """Stop exactly the process this peer started (its own process group)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None and proc.stdin is not None:
                proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
                proc.stdin.flush()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        finally:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
