"""Where the device plugin learns what GPUs the node has and whether they are healthy.

The plugin does not talk to NVML itself: it reads a `DeviceSource`. The node agent's NVML
discovery implements it (XID events and lost devices turn `healthy` off, recovery turns it back
on); tests and `gpugov node --devices FILE` use `StaticDeviceSource`. The snapshot is the same
`Inventory` the agent publishes as the `gpugov.io/inventory` node annotation, so the plugin
advertises exactly what the scheduler places on.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from gpugov.k8s.annotations import Inventory, InventoryDevice, decode_inventory


class DeviceSource(Protocol):
    """A node's devices and their health; `wait_change` wakes the plugin on any change."""

    @property
    def version(self) -> int:
        """Increases on every change of the inventory (devices, health, MIG layout)."""
        ...

    def inventory(self) -> Inventory:
        """The current devices of the node."""
        ...

    async def wait_change(self, since: int) -> int:
        """Return once `version` > since; the new version."""
        ...


class StaticDeviceSource:
    """An in-memory source: set the inventory or one device's health by hand."""

    def __init__(self, inventory: Inventory) -> None:
        self._inventory = inventory
        self._version = 1
        self._changed: asyncio.Event | None = None

    @classmethod
    def from_file(cls, path: Path) -> StaticDeviceSource:
        """Load an inventory JSON file (the `gpugov.io/inventory` format)."""
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"{path}: cannot read the device inventory ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not UTF-8 text (a gpugov.io/inventory JSON file is "
                             "expected)") from None
        try:
            return cls(decode_inventory(text))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    @property
    def version(self) -> int:
        return self._version

    def inventory(self) -> Inventory:
        return self._inventory

    def set_inventory(self, inventory: Inventory) -> None:
        self._inventory = inventory
        self._bump()

    def set_health(self, uuid: str, healthy: bool) -> None:
        """Mark one physical GPU (and so its MIG instances and replicas) healthy or not."""
        devices = []
        found = False
        for d in self._inventory.devices:
            if d.uuid == uuid:
                found = True
                d = replace(d, healthy=healthy)
            devices.append(d)
        if not found:
            raise KeyError(f"no device with uuid {uuid!r}")
        self.set_inventory(Inventory(tuple(devices), self._inventory.power_budget_w))

    def remove(self, uuid: str) -> InventoryDevice:
        """The GPU fell off the bus: it leaves the inventory."""
        keep = [d for d in self._inventory.devices if d.uuid != uuid]
        gone = [d for d in self._inventory.devices if d.uuid == uuid]
        if not gone:
            raise KeyError(f"no device with uuid {uuid!r}")
        self.set_inventory(Inventory(tuple(keep), self._inventory.power_budget_w))
        return gone[0]

    def _bump(self) -> None:
        self._version += 1
        if self._changed is not None:
            self._changed.set()

    async def wait_change(self, since: int) -> int:
        while self._version <= since:
            if self._changed is None or self._changed.is_set():
                self._changed = asyncio.Event()
            await self._changed.wait()
        return self._version
