"""`gpugov node`: start the device plugin on this node (API client, device source, config).

Kept out of cli.py so the command stays a thin wrapper; every input problem raises
`NodeConfigError` with the option, the value and what is allowed (the CLI exits 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from gpugov.node.deviceplugin.manager import DEFAULT_PLUGIN_DIR, DevicePluginManager
from gpugov.node.deviceplugin.pods import ApiPodSource
from gpugov.node.deviceplugin.resources import SOFT_REPLICAS
from gpugov.node.deviceplugin.response import ResponseConfig
from gpugov.node.deviceplugin.source import DeviceSource, StaticDeviceSource
from gpugov.node.scrub import handover_for

DEFAULT_STATE_DIR = Path("/var/lib/gpugov")


class NodeConfigError(ValueError):
    """A `gpugov node` option that cannot be used."""


@dataclass(frozen=True)
class NodeOptions:
    node_name: str | None
    devices: Path | None
    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    state_dir: Path = DEFAULT_STATE_DIR
    kubeconfig: Path | None = None
    device_specs: bool = True
    cdi: bool = False
    nvml_library: Path | None = None  # with devices=None: NVML discovery (default loader path)
    mode: str = "exclusive"  # how NVML-discovered non-MIG GPUs are offered (as the agent's)
    replicas: int = 1
    soft_replicas: int = SOFT_REPLICAS
    refresh_s: float = 5.0
    metrics_listen: str | None = None  # HOST:PORT for /metrics (allocation counters)


def _library() -> Path | None:
    from gpugov.node.native import NativeLibraryMissing, library_path

    try:
        return library_path()
    except NativeLibraryMissing as exc:
        logging.getLogger("gpugov.deviceplugin").warning("%s; soft slices will be refused", exc)
        return None


def check(opts: NodeOptions) -> tuple[str, DeviceSource]:
    """Validate the options before anything starts; returns the node name and device source."""
    node = opts.node_name or os.environ.get("NODE_NAME")
    if not node:
        raise NodeConfigError("--node-name: not given and NODE_NAME is unset; pass the "
                              "Kubernetes node name (the DaemonSet sets NODE_NAME from "
                              "spec.nodeName)")
    if opts.kubeconfig is not None and not opts.kubeconfig.is_file():
        raise NodeConfigError(f"--kubeconfig: {opts.kubeconfig} is not a file")
    if opts.soft_replicas < 1:
        raise NodeConfigError(f"--soft-replicas: {opts.soft_replicas}; allowed: >= 1")
    if opts.refresh_s <= 0:
        raise NodeConfigError(f"--refresh-seconds: {opts.refresh_s}; allowed: > 0")
    if opts.metrics_listen is not None:
        listen_address(opts.metrics_listen)
    if opts.devices is not None:
        try:
            return node, StaticDeviceSource.from_file(opts.devices)
        except ValueError as exc:
            raise NodeConfigError(f"--devices: {exc}") from None
    return node, _nvml_source(opts)


def listen_address(text: str, option: str = "--metrics-listen") -> tuple[str, int]:
    """HOST:PORT; NodeConfigError names the option, the value and the form."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise NodeConfigError(f"{option}: {text!r}; expected HOST:PORT, e.g. 0.0.0.0:9401")
    return host.strip("[]"), int(port)


def install_library(state_dir: Path) -> Path | None:
    """Copy libgpugov.so into `<state>/lib/` and return that path.

    Allocate hands the kubelet *host* paths to mount. The plugin usually runs in a container
    whose own files are not on the host, but its state folder is a hostPath mounted at the
    same path, so a copy there is valid on both sides. None (soft slices refused) when the
    package has no compiled library.
    """
    import shutil

    src = _library()
    if src is None:
        return None
    dst = state_dir / "lib" / src.name
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists() or dst.read_bytes() != src.read_bytes():
        tmp = dst.with_suffix(".tmp")
        shutil.copyfile(src, tmp)
        tmp.replace(dst)  # a container that already mapped the old file keeps it
    return dst


def response_config(state_dir: Path, source: DeviceSource, device_specs: bool = True,
                    cdi: bool = False) -> ResponseConfig:
    """What Allocate answers with, as both entry points (`node device-plugin`, `node run`)
    configure it: the library copied into the state folder, the scrub handover, and — when the
    devices come from NVML and device nodes are passed — each MIG instance's capability
    device nodes (`/dev/nvidia-caps/nvidia-cap<N>`, from NVML's GPU and compute instance IDs
    and the driver's /proc files), as the NVIDIA plugin passes them."""
    from gpugov.node.deviceplugin.response import nvml_mig_ids

    nv = getattr(source, "nvml", None)
    return ResponseConfig(state_dir=state_dir, library=install_library(state_dir),
                          device_specs=device_specs, cdi=cdi,
                          handover=handover_for(state_dir),
                          mig_ids=nvml_mig_ids(nv) if nv is not None and device_specs else None)


def _nvml_source(opts: NodeOptions) -> DeviceSource:
    """Discovery and health from NVML, offered like `gpugov node agent --mode/--replicas`."""
    from gpugov.model.devices import DeviceMode
    from gpugov.node.nvml.health import HealthTracker
    from gpugov.node.nvml.library import Nvml
    from gpugov.node.nvml.source import NvmlDeviceSource, SharingPolicy

    allowed = ("exclusive", "soft", "timeslice")
    if opts.mode not in allowed:
        raise NodeConfigError(f"--mode: {opts.mode!r}; allowed: {', '.join(allowed)} "
                              "(MIG GPUs are found by discovery)")
    mode = DeviceMode(opts.mode)
    if opts.replicas < 1 or (opts.replicas > 1 and mode != DeviceMode.TIMESLICE):
        raise NodeConfigError(f"--replicas: {opts.replicas}; allowed: 1, or >= 2 with "
                              "--mode timeslice")
    nv = Nvml(str(opts.nvml_library) if opts.nvml_library else None)  # NvmlUnavailable: exit 1
    return NvmlDeviceSource(nv, HealthTracker(nv), SharingPolicy(mode, opts.replicas))


async def _serve(opts: NodeOptions, node: str, source: DeviceSource) -> None:
    from kubernetes_asyncio import client, config

    if opts.kubeconfig is not None:
        await config.load_kube_config(config_file=str(opts.kubeconfig))
    else:
        config.load_incluster_config()
    if opts.metrics_listen is not None:
        from prometheus_client import start_http_server

        host, port = listen_address(opts.metrics_listen)
        start_http_server(port, addr=host)  # a daemon thread; ends with the process
    async with client.ApiClient() as api:
        cfg = response_config(opts.state_dir, source, opts.device_specs, opts.cdi)
        mgr = DevicePluginManager(node, source, ApiPodSource(api), opts.plugin_dir, cfg,
                                  soft_replicas=opts.soft_replicas)
        watch = getattr(source, "watch", None)  # NVML: re-read discovery and health
        if watch is not None:
            asyncio.get_running_loop().create_task(watch(opts.refresh_s))
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await mgr.run_forever()  # stops every plugin and removes its socket on the way out


def run(opts: NodeOptions, node: str, source: DeviceSource) -> None:
    """Serve until interrupted (SIGINT/SIGTERM end it cleanly); `check` gave node and source."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(opts, node, source))
