"""The NVIDIA device plugin's own config file (`version: v1`), read so a node keeps the sharing
its operators already configured: `sharing.timeSlicing` / `sharing.mps` with `renameByDefault`,
`failRequestsGreaterThanOne` and `resources[].replicas` (NVIDIA/k8s-device-plugin README,
"Shared Access to GPUs"; api/config/v1/replicas.go).

What it becomes on a gpugov node:
- the sharing mode (`timeslice` or `mps`) and the replicas per GPU;
- `renameByDefault: false` (NVIDIA's default): the device plugin serves the replicas under
  `nvidia.com/gpu` as well as gpugov's `nvidia.com/gpu.shared` / `nvidia.com/gpu.mps`, and the
  agent writes GFD's product label with `-SHARED`, so NVIDIA's pods (`nvidia.com/gpu: 1` with
  that selector) get one replica there (docs/migration.md);
- `failRequestsGreaterThanOne`: gpugov always acts as if it were true (NVIDIA's recommended
  setting): a request for more than one replica is refused at admission, never handed
  replicas that may be the same GPU. `false` is accepted and reported in `notes`.

A time-sliced MIG resource (`name: nvidia.com/mig-<profile>`) becomes `mig_replicas`: every
instance of that profile is served as replicas under `nvidia.com/mig-<profile>.shared`, which
is NVIDIA's name for it with `renameByDefault: true` (or `rename: <name>.shared`); with
NVIDIA's default `false` it would keep the whole instance's name, which gpugov keeps for
whole instances, so that is refused naming the field.

Anything else gpugov does not serve is refused naming the field (a `rename` or `devices`
list — NVIDIA itself ignores the last two with a warning — replicas below 2, unknown keys);
never accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpugov.model.devices import DeviceMode
from gpugov.model.yaml_error import one_line

GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
MAX_REPLICAS = 1024
MAX_MIG_REPLICAS = 64  # k8s.annotations.MAX_MIG_REPLICAS: what the inventory may carry
#: flags gpugov has its own options for; accepted (their values change nothing here)
_FLAGS_ELSEWHERE = ("failOnInitError", "nvidiaDriverRoot", "gdsEnabled", "mofedEnabled",
                    "plugin", "gfd", "deviceListStrategy", "deviceIDStrategy")


class NvidiaConfigError(ValueError):
    """The file names something gpugov cannot serve; the message names the field."""


@dataclass(frozen=True, slots=True)
class NvidiaSharing:
    """How the NVIDIA config shares the node's GPUs, in gpugov's terms."""

    mode: DeviceMode = DeviceMode.EXCLUSIVE
    replicas: int = 1
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    notes: tuple[str, ...] = ()
    #: MIG profile -> replicas of each of its instances (`nvidia.com/mig-<profile>` entries)
    mig_replicas: tuple[tuple[str, int], ...] = ()
    #: `flags.migStrategy`: mixed (`none` reads as mixed) or single (node/mig_strategy.py)
    mig_strategy: str = "mixed"

    @property
    def serves_gpu_replicas(self) -> bool:
        """Replicas also advertised as `nvidia.com/gpu` (NVIDIA's unrenamed spelling)."""
        return self.mode in (DeviceMode.TIMESLICE, DeviceMode.MPS) and not self.rename_by_default


def _where(path: str, field: str) -> str:
    return f"{path}: {field}" if path else field


def parse(data: Any, source: str = "") -> NvidiaSharing:
    """The sharing a parsed NVIDIA config describes; NvidiaConfigError names the field."""
    if not isinstance(data, dict):
        raise NvidiaConfigError(_where(source, "(top level): expected a mapping with version: v1"))
    unknown = sorted(set(data) - {"version", "flags", "sharing", "resources", "imex"})
    if unknown:
        raise NvidiaConfigError(_where(source, f"{unknown[0]}: not a key of the NVIDIA device "
                                       "plugin config v1 (version, flags, sharing, resources)"))
    if data.get("version") != "v1":
        raise NvidiaConfigError(_where(source, f"version: {str(data.get('version'))[:32]!r}; "
                                       "only v1 is read"))
    notes: list[str] = []
    flags = data.get("flags") or {}
    if not isinstance(flags, dict):
        raise NvidiaConfigError(_where(source, "flags: expected a mapping"))
    strategy = "mixed"
    for key, value in flags.items():
        if key == "migStrategy":
            if value not in ("none", "mixed", "single"):
                raise NvidiaConfigError(_where(source, f"flags.migStrategy: {str(value)[:32]!r};"
                                               " allowed: none, mixed, single"))
            strategy = "single" if value == "single" else "mixed"
        elif key not in _FLAGS_ELSEWHERE:
            raise NvidiaConfigError(_where(source, f"flags.{str(key)[:64]}: not read by gpugov; "
                                           f"allowed: migStrategy, {', '.join(_FLAGS_ELSEWHERE)}"))
    if data.get("resources"):
        raise NvidiaConfigError(_where(source, "resources: custom GPU resource names are not "
                                       "served; gpugov serves nvidia.com/gpu"))
    sharing = data.get("sharing") or {}
    if not isinstance(sharing, dict):
        raise NvidiaConfigError(_where(source, "sharing: expected a mapping"))
    bad = sorted(set(sharing) - {"timeSlicing", "mps"})
    if bad:
        raise NvidiaConfigError(_where(source, f"sharing.{bad[0]}: allowed: timeSlicing, mps"))
    found = [(k, sharing[k]) for k in ("mps", "timeSlicing") if _replicated(sharing.get(k))]
    if len(found) > 1:
        raise NvidiaConfigError(_where(source, "sharing: timeSlicing and mps both replicate; "
                                       "NVIDIA: they are mutually exclusive"))
    if not found:
        return NvidiaSharing(notes=tuple(notes), mig_strategy=strategy)
    key, rr = found[0]
    mode = DeviceMode.MPS if key == "mps" else DeviceMode.TIMESLICE
    field = f"sharing.{key}"
    if not isinstance(rr, dict):
        raise NvidiaConfigError(_where(source, f"{field}: expected a mapping"))
    extra = sorted(set(rr) - {"renameByDefault", "failRequestsGreaterThanOne", "resources"})
    if extra:
        raise NvidiaConfigError(_where(source, f"{field}.{extra[0]}: allowed: renameByDefault, "
                                       "failRequestsGreaterThanOne, resources"))
    rename = rr.get("renameByDefault", False)
    fail = rr.get("failRequestsGreaterThanOne", mode is DeviceMode.MPS)  # NVIDIA's defaults
    for name, value in (("renameByDefault", rename), ("failRequestsGreaterThanOne", fail)):
        if not isinstance(value, bool):
            raise NvidiaConfigError(_where(source, f"{field}.{name}: {str(value)[:32]!r}; "
                                           "expected true or false"))
    resources = rr.get("resources")
    if not isinstance(resources, list) or not resources:
        raise NvidiaConfigError(_where(source, f"{field}.resources: expected a list"))
    replicas = None
    mig: dict[str, int] = {}
    for i, r in enumerate(resources):
        at = f"{field}.resources[{i}]"
        if not isinstance(r, dict):
            raise NvidiaConfigError(_where(source, f"{at}: expected a mapping"))
        extra = sorted(set(r) - {"name", "replicas", "rename", "devices"})
        if extra:
            raise NvidiaConfigError(_where(source, f"{at}.{extra[0]}: allowed: name, replicas"))
        name = str(r.get("name"))
        if name.startswith(MIG_PREFIX) and mode is DeviceMode.TIMESLICE:
            mig[name.removeprefix(MIG_PREFIX)] = _mig_replicas(r, at, name, rename, source)
            continue
        if r.get("name") != GPU:
            raise NvidiaConfigError(_where(source, f"{at}.name: {str(r.get('name'))[:64]!r}; "
                                           f"gpugov shares {GPU} (time-sliced MIG: ask for "
                                           "nvidia.com/mig-<profile>.shared on a MIG node)"))
        for unsupported in ("rename", "devices"):
            if r.get(unsupported) not in (None, "", "all"):
                raise NvidiaConfigError(_where(source, f"{at}.{unsupported}: not served (NVIDIA "
                                               "ignores it too); remove it"))
        n = r.get("replicas")
        if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= MAX_REPLICAS:
            raise NvidiaConfigError(_where(source, f"{at}.replicas: {str(n)[:32]!r}; allowed: "
                                           f"2..{MAX_REPLICAS}"))
        if replicas is not None and n != replicas:
            raise NvidiaConfigError(_where(source, f"{at}.replicas: {n} differs from {replicas}"))
        replicas = n
    if replicas is None:  # only MIG resources are time-sliced
        return NvidiaSharing(rename_by_default=rename, fail_requests_greater_than_one=fail,
                             notes=tuple(notes), mig_replicas=tuple(sorted(mig.items())),
                             mig_strategy=strategy)
    if mode is DeviceMode.MPS and replicas > 48:
        raise NvidiaConfigError(_where(source, f"{field}.resources[0].replicas: {replicas}; "
                                       "MPS serves at most 48 clients per GPU"))
    if not fail:
        notes.append(f"{field}.failRequestsGreaterThanOne: false: gpugov refuses a request for "
                     "more than one replica at admission anyway (replicas may be one GPU)")
    return NvidiaSharing(mode, replicas, rename, fail, tuple(notes), tuple(sorted(mig.items())),
                         strategy)


def _mig_replicas(r: dict, at: str, name: str, rename: bool, source: str) -> int:
    """Replicas of a time-sliced MIG resource entry, served as `<name>.shared`."""
    if r.get("rename") not in (None, "", name + ".shared") or (
            not rename and r.get("rename") != name + ".shared"):
        raise NvidiaConfigError(_where(source, f"{at}.rename: gpugov serves a time-sliced MIG "
                                       f"instance as {name}.shared (whole instances keep {name}); "
                                       f"set renameByDefault: true or rename: {name}.shared"))
    if r.get("devices") not in (None, "", "all"):
        raise NvidiaConfigError(_where(source, f"{at}.devices: not served (NVIDIA ignores it "
                                       "too); remove it"))
    n = r.get("replicas")
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= MAX_MIG_REPLICAS:
        raise NvidiaConfigError(_where(source, f"{at}.replicas: {str(n)[:32]!r}; allowed: "
                                       f"2..{MAX_MIG_REPLICAS}"))
    return n


def _replicated(rr: Any) -> bool:
    """NVIDIA's `isReplicated`: some resource with replicas > 1."""
    if not isinstance(rr, dict):
        return rr is not None
    res = rr.get("resources")
    if not isinstance(res, list):
        return True  # malformed: let the parser name it
    return any(not isinstance(r, dict) or not isinstance(r.get("replicas"), int)
               or r.get("replicas", 0) > 1 for r in res)


def load(path: Path) -> NvidiaSharing:
    """Read the file (the ConfigMap's value, e.g. the GPU Operator's `plugin-config.yaml`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise NvidiaConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise NvidiaConfigError(f"{path}: not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise NvidiaConfigError(f"{path}: not YAML ({one_line(exc)[:200]})") from None
    return parse(data, str(path))
