"""`gpugov node dra-plugin`: the DRA kubelet plugin of one node, fed by the node's inventory.

The CLI composes this with the slice publisher (`gpugov.k8s.dra.publisher.run_node`) in one
process, as upstream DRA drivers do: the node's plugin publishes its own node's
ResourceSlices, which the kubelet wipes when it starts.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio import client, config

from gpugov.k8s.annotations import Inventory
from gpugov.k8s.dra.slices import DRIVER, Features
from gpugov.node.dra.plugin import DraPlugin
from gpugov.node.dra.prepare import NodePaths
from gpugov.node.dra.source import KubeClaimSource, NodeInventory, static_inventory
from gpugov.node.dra.sweep import SWEEP_S


@dataclass(frozen=True, slots=True)
class DraOptions:
    node: str
    devices: Path | None  # a static inventory file; None = the node's annotation
    kubelet_plugins: Path  # /var/lib/kubelet/plugins (the socket is in <it>/gpu.gpugov.io/)
    registry: Path  # /var/lib/kubelet/plugins_registry
    cdi_dir: Path
    state_dir: Path
    kubeconfig: Path | None
    consumable_capacity: bool  # the API server has DRAConsumableCapacity
    #: seconds between sweeps of gone claims' files (the first at start; docs/dra.md)
    sweep_interval: float = SWEEP_S


async def serve(opts: DraOptions, library: Path | None,
                extra: Callable[[client.ApiClient, asyncio.Event], Awaitable[None]] | None = None
                ) -> None:
    """Run the plugin (and `extra`, e.g. the publisher) until SIGTERM/SIGINT."""
    cfg = client.Configuration()
    if opts.kubeconfig is not None:
        await config.load_kube_config(config_file=str(opts.kubeconfig),
                                      client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    api = client.ApiClient(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    inventory: Callable[[], Inventory]
    watcher: NodeInventory | None = None
    if opts.devices is not None:
        fixed = static_inventory(opts.devices)
        inventory = lambda: fixed  # noqa: E731
    else:
        watcher = NodeInventory(api, opts.node)
        await watcher.start()
        inventory = watcher
    plugin = DraPlugin(opts.node, inventory, Features(opts.consumable_capacity),
                       NodePaths(opts.cdi_dir, opts.state_dir, library), KubeClaimSource(api),
                       plugin_dir=opts.kubelet_plugins / DRIVER, registry_dir=opts.registry,
                       sweep_s=opts.sweep_interval)
    await plugin.start()
    tasks = [asyncio.create_task(extra(api, stop))] if extra is not None else []
    try:
        await stop.wait()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await plugin.stop()
        if watcher is not None:
            await watcher.stop()
        await api.close()
