"""Names and codecs the scheduler and the node agents share for power (docs/contracts.md).

- `gpugov.io/power` (Node annotation, written by the node's agent): measured draw and
  energy per GPU and each GPU's power-limit range, JSON
  `{"v": 1, "devices": [{"index", "drawW", "energyJ", "limitW", "minW", "maxW"}]}`.
  Read by the scheduler (the PowerDomain's `status.measuredWatts` and its capping plan) and
  by the reconciler (metrics). Written only by gpugov's node identity (node_policy).
- PowerDomain `status.caps` (written by the scheduler): node -> device index -> the power
  limit in watts the node's agent sets; a device absent there runs at its default limit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

POWER = "gpugov.io/power"
VERSION = 1
GROUP, API_VERSION, PLURAL, KIND = "gpugov.io", "v1alpha1", "powerdomains", "PowerDomain"
PATH = f"/apis/{GROUP}/{API_VERSION}/{PLURAL}"
#: the most devices one node's annotation may list (a node has at most 256 GPUs)
MAX_DEVICES = 256
#: the largest draw or limit a device may report (10 kW: no GPU comes near)
MAX_DEVICE_W = 10_000.0


@dataclass(frozen=True, slots=True)
class DevicePower:
    """One GPU's measurement: draw (W), energy since driver load (J), limit and its range."""

    index: int
    draw_w: float
    energy_j: float | None = None
    limit_w: float | None = None
    min_w: float | None = None
    max_w: float | None = None


def encode_power(devices: list[DevicePower]) -> str:
    out = []
    for d in devices:
        item: dict[str, Any] = {"index": d.index, "drawW": round(d.draw_w, 3)}
        for key, value in (("energyJ", d.energy_j), ("limitW", d.limit_w),
                           ("minW", d.min_w), ("maxW", d.max_w)):
            if value is not None:
                item[key] = round(value, 3)
        out.append(item)
    return json.dumps({"v": VERSION, "devices": out}, separators=(",", ":"))


def _watts(item: dict, key: str, hi: float, required: bool = False) -> float | None:
    value = item.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or not 0 <= value <= hi:
        raise ValueError(f"{POWER}: {key} {value!r} is not a number in 0..{hi:g}")
    return float(value)


def decode_power(text: str | None) -> list[DevicePower]:
    """The devices of a node's `gpugov.io/power`; ValueError naming the field when the text
    is not what an agent writes (sizes bounded before use)."""
    if not text:
        return []
    if len(text) > 64 * 1024:
        raise ValueError(f"{POWER}: {len(text)} bytes; at most 65536")
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValueError(f"{POWER}: not JSON") from None
    if not isinstance(doc, dict) or doc.get("v") != VERSION:
        raise ValueError(f"{POWER}: expected an object with v: {VERSION}")
    items = doc.get("devices")
    if not isinstance(items, list) or len(items) > MAX_DEVICES:
        raise ValueError(f"{POWER}: devices must be a list of at most {MAX_DEVICES}")
    out, seen = [], set()
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"{POWER}: devices[]: expected objects")
        index = item.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or \
                not 0 <= index < MAX_DEVICES or index in seen:
            raise ValueError(f"{POWER}: devices[].index {index!r} is not a distinct "
                             f"index in 0..{MAX_DEVICES - 1}")
        seen.add(index)
        out.append(DevicePower(
            index, _watts(item, "drawW", MAX_DEVICE_W, True) or 0.0,
            _watts(item, "energyJ", 1e18), _watts(item, "limitW", MAX_DEVICE_W),
            _watts(item, "minW", MAX_DEVICE_W), _watts(item, "maxW", MAX_DEVICE_W)))
    return out


def caps_for(domain_obj: dict[str, Any], node: str) -> dict[int, float]:
    """The caps a PowerDomain's status sets on `node`'s devices (malformed entries are
    skipped: the agent then keeps the device's default limit)."""
    caps = ((domain_obj.get("status") or {}).get("caps") or {}).get(node) or {}
    out: dict[int, float] = {}
    if not isinstance(caps, dict):
        return out
    for key, value in caps.items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            continue
        if isinstance(value, int | float) and not isinstance(value, bool) and \
                math.isfinite(value) and 0 < value <= MAX_DEVICE_W and 0 <= index < MAX_DEVICES:
            out[index] = float(value)
    return out
