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
from gpugov.node.deviceplugin.response import ResponseConfig
from gpugov.node.deviceplugin.source import DeviceSource, StaticDeviceSource

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
    if opts.devices is None:
        raise NodeConfigError("--devices: not given; pass an inventory JSON file in the "
                              "gpugov.io/inventory format (NVML discovery as the device source "
                              "is planned)")
    try:
        source = StaticDeviceSource.from_file(opts.devices)
    except ValueError as exc:
        raise NodeConfigError(f"--devices: {exc}") from None
    if opts.kubeconfig is not None and not opts.kubeconfig.is_file():
        raise NodeConfigError(f"--kubeconfig: {opts.kubeconfig} is not a file")
    return node, source


async def _serve(opts: NodeOptions, node: str, source: DeviceSource) -> None:
    from kubernetes_asyncio import client, config

    if opts.kubeconfig is not None:
        await config.load_kube_config(config_file=str(opts.kubeconfig))
    else:
        config.load_incluster_config()
    async with client.ApiClient() as api:
        cfg = ResponseConfig(state_dir=opts.state_dir, library=_library(),
                             device_specs=opts.device_specs, cdi=opts.cdi)
        mgr = DevicePluginManager(node, source, ApiPodSource(api), opts.plugin_dir, cfg)
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await mgr.run_forever()  # stops every plugin and removes its socket on the way out


def run(opts: NodeOptions) -> None:
    """Serve until interrupted (SIGINT/SIGTERM end it cleanly)."""
    node, source = check(opts)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(opts, node, source))
