"""mig-parted `version: v1` config files (what `gpugov plan mig --out` writes), validated.

Every error names the file, the config, the entry and the field, the bad value and what is
allowed. Profile names are checked against what the GPU's driver offers when the layout is
applied (`mig_apply`), because that is the only authority on a given GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpugov.model.yaml_error import one_line


class MigConfigError(ValueError):
    """A config file or config name gpugov cannot apply."""


@dataclass(frozen=True, slots=True)
class MigEntry:
    devices: tuple[int, ...] | None  # None = all
    enabled: bool
    mig_devices: dict[str, int]
    device_filter: tuple[str, ...] = ()  # PCI ids "0xDDDDVVVV"; empty = any

    def matches(self, index: int, pci_device_id: str) -> bool:
        if self.devices is not None and index not in self.devices:
            return False
        return not self.device_filter or pci_device_id.upper() in {
            f.upper() for f in self.device_filter}

    def layout(self) -> list[str]:
        """The profiles to create, largest first (the order mig-parted creates them in)."""
        return [p for p, n in sorted(self.mig_devices.items()) for _ in range(n)]


def parse(data: Any, source: str = "<config>") -> dict[str, list[MigEntry]]:
    """Validate a parsed mig-parted document; config name -> entries."""
    if not isinstance(data, dict):
        raise MigConfigError(f"{source}: expected a mapping with `version` and `mig-configs`")
    extra = set(data) - {"version", "mig-configs"}
    if extra:
        raise MigConfigError(f"{source}: unknown top-level key(s) {sorted(extra)}; allowed: "
                             "version, mig-configs")
    if data.get("version") != "v1":
        raise MigConfigError(f"{source}: version {data.get('version')!r}; allowed: v1")
    configs = data.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise MigConfigError(f"{source}: mig-configs must map config names to entry lists "
                             "(at least one config)")
    out: dict[str, list[MigEntry]] = {}
    for name, entries in configs.items():
        where = f"{source}: mig-configs.{name}"
        if not isinstance(entries, list) or not entries:
            raise MigConfigError(f"{where}: expected a non-empty list of entries")
        out[str(name)] = [_entry(e, f"{where}[{i}]") for i, e in enumerate(entries)]
    return out


def _entry(e: Any, where: str) -> MigEntry:
    if not isinstance(e, dict):
        raise MigConfigError(f"{where}: expected a mapping")
    extra = set(e) - {"devices", "mig-enabled", "mig-devices", "device-filter"}
    if extra:
        raise MigConfigError(f"{where}: unknown key(s) {sorted(extra)}; allowed: devices, "
                             "mig-enabled, mig-devices, device-filter")
    devices = e.get("devices")
    if devices == "all":
        devs = None
    elif isinstance(devices, list) and devices and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices):
        devs = tuple(devices)
    else:
        raise MigConfigError(f"{where}.devices: {devices!r}; allowed: \"all\" or a list of GPU "
                             "indexes (integers >= 0)")
    enabled = e.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise MigConfigError(f"{where}.mig-enabled: {enabled!r}; allowed: true or false")
    mig = e.get("mig-devices") or {}
    if not isinstance(mig, dict):
        raise MigConfigError(f"{where}.mig-devices: {mig!r}; allowed: a mapping profile -> count")
    if mig and not enabled:
        raise MigConfigError(f"{where}.mig-devices: must be absent or empty when mig-enabled "
                             "is false")
    for profile, n in mig.items():
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= 7:
            raise MigConfigError(f"{where}.mig-devices.{profile}: {n!r}; allowed: an integer "
                                 "0..7 (a GPU holds at most 7 MIG instances)")
    filt = e.get("device-filter", ())
    if isinstance(filt, str):
        filt = (filt,)
    if not isinstance(filt, list | tuple) or not all(isinstance(f, str) for f in filt):
        raise MigConfigError(f"{where}.device-filter: {filt!r}; allowed: a PCI id such as "
                             "\"0x20B210DE\" or a list of them")
    return MigEntry(devs, enabled, {str(k): int(v) for k, v in mig.items() if v}, tuple(filt))


def load(path: Path) -> dict[str, list[MigEntry]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MigConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise MigConfigError(f"{path}: not UTF-8 text (a mig-parted YAML config is expected)"
                             ) from None
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise MigConfigError(f"{path}: not YAML ({one_line(exc)})") from None
    return parse(data, str(path))


def select(configs: dict[str, list[MigEntry]], name: str, source: str = "<config>"
           ) -> list[MigEntry]:
    try:
        return configs[name]
    except KeyError:
        raise MigConfigError(f"{source}: no config named {name!r}; known: "
                             f"{', '.join(sorted(configs))}") from None
