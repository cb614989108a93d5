"""The used view of a `gpugov dev up` cluster: SIMULATED exporter series for its kwok nodes
(`gpugov node exporter --simulate`, `gpugov.node.synthetic`) and, when Debian's `prometheus`
binary is installed, a Prometheus scraping them, so `gpugov top --prometheus URL` shows busy
and memory numbers, labelled simulated. Without the binary, `up` records why and `top` says
it (`NO_PROMETHEUS_HERE`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from gpugov.k8s.devcluster.plane import LocalControlPlane, probe
from gpugov.k8s.devcluster.processes import free_port

#: keys of the dev cluster's state (`ProcessSet.extra`)
PROMETHEUS_URL = "prometheus_url"
SIMULATOR_URL = "simulated_exporter_url"
NO_PROMETHEUS_HERE = ("no `prometheus` binary on PATH (Debian: apt install prometheus), so "
                      "`gpugov dev up` started no Prometheus and the dev cluster's used view "
                      "(simulated) is not collected")


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def start(plane: LocalControlPlane, argv: Callable[..., list[str]], kubeconfig: Path,
          say: Callable[[str], None] = lambda _m: None) -> str | None:
    """Start the simulated exporter and (if installed) Prometheus; the Prometheus URL, or
    None (the reason is in the state's extra)."""
    port = free_port()
    say("starting the SIMULATED GPU metrics of the kwok nodes (gpugov node exporter "
        "--simulate)")
    plane.start_process("gpugov-simulated-exporter", argv(
        "node", "exporter", "--simulate", "--kubeconfig", str(kubeconfig),
        "--listen", f"127.0.0.1:{port}"),
        ready=lambda: probe(f"http://127.0.0.1:{port}/healthz", None) == b"ok", timeout=30)
    plane.procs.extra[SIMULATOR_URL] = f"http://127.0.0.1:{port}/metrics"
    binary = prometheus_binary()
    if binary is None:
        plane.procs.extra["prometheus_missing"] = NO_PROMETHEUS_HERE
        say(NO_PROMETHEUS_HERE)
        return None
    folder = plane.workdir / "prometheus"
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {"global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
           "scrape_configs": [{"job_name": "gpugov-simulated",
                               "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}
    (folder / "prometheus.yml").write_text(json.dumps(cfg))
    prom_port = free_port()
    say(f"starting Prometheus ({binary}) on 127.0.0.1:{prom_port}")
    plane.start_process("prometheus", [
        binary, f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        ready=lambda: probe(f"http://127.0.0.1:{prom_port}/-/ready", None) is not None,
        timeout=60)
    url = f"http://127.0.0.1:{prom_port}"
    plane.procs.extra[PROMETHEUS_URL] = url
    return url
