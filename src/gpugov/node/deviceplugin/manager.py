"""Runs one `ResourcePlugin` per served resource and keeps them registered.

- Resources follow the device source: a new MIG profile starts a plugin, a vanished one stops;
  health changes reach the kubelet through the open ListAndWatch streams.
- Kubelet restart: a new kubelet deletes every socket in its plugin folder and creates a new
  `kubelet.sock`. The manager polls the folder (no inotify dependency): when `kubelet.sock` has a
  new inode, or a plugin's own socket is gone, every plugin restarts on a fresh socket and
  registers again. Registration failures are logged and retried; they never stop the process.
- Gone pods: every `sweep_s` the region folders and QoS board files of pods no longer on the
  node are removed (`cleanup`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from gpugov.node.deviceplugin import cleanup
from gpugov.node.deviceplugin.plugin import ResourcePlugin
from gpugov.node.deviceplugin.pods import PodSource
from gpugov.node.deviceplugin.resources import SOFT_REPLICAS, plugin_devices
from gpugov.node.deviceplugin.response import ResponseConfig, write_preload
from gpugov.node.deviceplugin.source import DeviceSource

log = logging.getLogger("gpugov.deviceplugin")

KUBELET_SOCKET = "kubelet.sock"
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")


class DevicePluginManager:
    """All of gpugov's device plugins on one node."""

    def __init__(self, node: str, source: DeviceSource, pods: PodSource, plugin_dir: Path,
                 cfg: ResponseConfig, poll_s: float = 0.2,
                 soft_replicas: int = SOFT_REPLICAS, gpu_replicas: bool = False,
                 mig_single: bool = False, sweep_s: float = cleanup.SWEEP_S) -> None:
        self.node, self.source, self.pods = node, source, pods
        self.sweep_s = sweep_s  # how often gone pods' regions and boards are removed
        self.soft_replicas = soft_replicas
        self.gpu_replicas = gpu_replicas  # NVIDIA renameByDefault: false (resources.py)
        self.mig_single = mig_single  # NVIDIA's MIG single strategy (node/mig_strategy.py)
        self.plugin_dir, self.cfg, self.poll_s = plugin_dir, cfg, poll_s
        self.plugins: dict[str, ResourcePlugin] = {}
        self.registrations = 0  # successful Register calls (restarts show as more)
        self._kubelet_id: tuple[int, int] | None = None
        self._tasks: list[asyncio.Task] = []
        self._registered: set[str] = set()
        self._said: dict[str, str] = {}  # the last status line said on each subject

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.kubelet_socket)
        except OSError:
            return None
        return st.st_ino, st.st_ctime_ns

    async def start(self) -> None:
        """Serve every resource and start watching the source and the kubelet."""
        if self.cfg.library is not None:
            write_preload(self.cfg)
        await self._sync()
        self._tasks = [asyncio.create_task(self._watch_source()),
                       asyncio.create_task(self._watch_kubelet()),
                       asyncio.create_task(self._sweep_gone())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
        for p in list(self.plugins.values()):
            await p.stop()
        self.plugins.clear()

    async def run_forever(self) -> None:
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    async def _sync(self) -> None:
        """Bring the set of plugins and their device lists in line with the source."""
        wanted = plugin_devices(self.source.inventory(), self.soft_replicas, self.gpu_replicas,
                                self.mig_single)
        for res in [r for r in self.plugins if r not in wanted]:
            log.info("resource %s is gone from the node; stopping its plugin", res)
            await self.plugins.pop(res).stop()
            self._registered.discard(res)
        for res, devices in wanted.items():
            plugin = self.plugins.get(res)
            if plugin is None:
                plugin = ResourcePlugin(res, self.node, self.plugin_dir, self.pods,
                                        self.source.inventory, self.cfg)
                plugin.set_devices(devices)
                await plugin.start()
                self.plugins[res] = plugin
            else:
                plugin.set_devices(devices)
        if wanted:
            self._say("serving", "serving " + ", ".join(
                f"{res} ({len(devices)} devices)" for res, devices in sorted(wanted.items())))
        else:
            self._say("serving", "the device inventory offers no GPU: serving no resource "
                      "until it changes", logging.WARNING)
        await self._register_missing()

    def _say(self, subject: str, line: str, level: int = logging.INFO) -> None:
        """Log what the plugin serves or waits for, once per change: it used to sit silent
        on an empty inventory or before the kubelet came up."""
        if self._said.get(subject) != line:
            self._said[subject] = line
            log.log(level, "%s", line)

    async def _register_missing(self) -> None:
        ident = self._kubelet_identity()
        if ident is None:  # the watcher registers when kubelet.sock appears
            self._say("kubelet", f"waiting for the kubelet: no {self.kubelet_socket} yet "
                      "(--plugin-dir must be the kubelet's device-plugins folder)")
            return
        self._say("kubelet", f"kubelet found at {self.kubelet_socket}")
        self._kubelet_id = ident
        for res, plugin in self.plugins.items():
            if res in self._registered:
                continue
            try:
                await plugin.register(self.kubelet_socket)
            except Exception as exc:  # kubelet refused or is restarting: retried by the watcher
                log.warning("registering %s failed: %s (will retry)", res, exc)
                continue
            self._registered.add(res)
            self.registrations += 1

    async def _restart_all(self) -> None:
        log.info("kubelet restarted (new %s): restarting plugins and registering again",
                 self.kubelet_socket)
        self._registered.clear()
        for plugin in self.plugins.values():
            await plugin.stop()
            await plugin.start()
        await self._register_missing()

    async def _watch_source(self) -> None:
        version = self.source.version
        while True:
            version = await self.source.wait_change(version)
            try:
                await self._sync()
            except Exception:
                log.exception("applying a device change failed; keeping the previous state")

    async def _sweep_gone(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_s)
            try:
                await cleanup.sweep(self.cfg.state_dir, self.pods, self.node)
            except Exception as exc:  # the API is away: the next sweep tries again
                log.warning("removing gone pods' regions and QoS boards failed: %s", exc)

    async def _watch_kubelet(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                ident = self._kubelet_identity()
                if ident is None:
                    self._registered.clear()
                    continue
                lost = any(not p.socket.exists() for p in self.plugins.values())
                if ident != self._kubelet_id or lost:
                    await self._restart_all()
                elif len(self._registered) < len(self.plugins):
                    await self._register_missing()
            except Exception:
                log.exception("kubelet watch step failed; retrying")
