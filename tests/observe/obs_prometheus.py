"""A real Prometheus (/usr/bin/prometheus) for tests: temp dir, free port, stopped after."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

PROMETHEUS = shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PromServer:
    url: str
    proc: subprocess.Popen
    log: Path

    def query(self, promql: str) -> list[dict]:
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        data = body["data"]
        return data["result"] if data["resultType"] == "vector" else [{"value": data["result"]}]

    def wait_for(self, promql: str, timeout: float = 30.0) -> list[dict]:
        """Poll until `promql` returns a non-empty vector (or raise with what is missing)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"no data for {promql!r} after {timeout}s; Prometheus "
                                     f"log tail:\n{self.log.read_text()[-2000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start(tmp: Path, targets: list[str], rule_files: list[Path] = (),
          interval: str = "1s") -> PromServer:
    """Start Prometheus scraping `targets` (host:port) every `interval`."""
    assert PROMETHEUS, "prometheus not installed"
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = {"global": {"scrape_interval": interval, "evaluation_interval": interval},
           "rule_files": [str(p) for p in rule_files],
           "scrape_configs": [{"job_name": f"t{i}", "static_configs": [{"targets": [t]}]}
                              for i, t in enumerate(targets)]}
    (tmp / "prometheus.yml").write_text(json.dumps(cfg))
    port = free_port()
    log = tmp / "prometheus.log"
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    server = PromServer(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"prometheus did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
