"""The capping plan: which GPUs of a power domain get a lower power limit, and how low.

Pure (no I/O): the scheduler runs it every cycle on each domain's measured draw (the
node agents' `gpugov.io/power`) and writes the result to the PowerDomain's `status.caps`;
each node agent sets those limits with NVML and reports every change as an Event.

- Over budget (measured > ratio × panel, each GPU counted at no more than the cap it
  already has: a cap the agent has not applied yet is not shed again): the lowest-priority
  devices first (priority of the highest pod on the device; idle devices first of all, then
  by larger draw), each is capped
  to what it draws minus what is still to shed, never below its minimum limit, until the
  expected saving covers the excess.
- Below the budget by more than `hysteresis` of it: caps are raised, highest priority
  first, by what is left below that line; a cap that reaches the device's maximum is
  removed (the agent restores the default limit).
- In between: caps stay (no flapping around the budget).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: share of the budget measured draw must fall below before caps are raised
HYSTERESIS = 0.05


@dataclass(frozen=True, slots=True)
class CapDevice:
    """One GPU of the domain as the plan sees it."""

    node: str
    index: int
    priority: int  # highest priority of the pods on it; idle devices: below every pod
    draw_w: float
    min_w: float
    max_w: float


Key = tuple[str, int]


def plan_caps(budget_w: float, devices: Sequence[CapDevice], caps: Mapping[Key, float],
              hysteresis: float = HYSTERESIS) -> dict[Key, float]:
    """The caps to hold next (see module doc); `caps` are the ones in force now."""
    known = {(d.node, d.index): d for d in devices}
    out = {k: v for k, v in caps.items() if k in known}
    measured = sum(d.draw_w for d in devices)
    expected = sum(min(d.draw_w, out.get((d.node, d.index), d.draw_w)) for d in devices)
    if expected > budget_w:
        shed = expected - budget_w
        for d in sorted(devices, key=lambda d: (d.priority, -d.draw_w, d.node, d.index)):
            if shed <= 0:
                break
            key = (d.node, d.index)
            now = min(out.get(key, d.max_w), d.draw_w)
            new = max(d.min_w, now - shed)
            if new < out.get(key, d.max_w) and now - new > 0:
                out[key] = round(new, 1)
                shed -= now - new
        return out
    room = budget_w * (1 - hysteresis) - measured
    if room <= 0 or not out:
        return out
    for d in sorted((known[k] for k in out), key=lambda d: (-d.priority, d.node, d.index)):
        if room <= 0:
            break
        key = (d.node, d.index)
        new = min(d.max_w, out[key] + room)
        room -= new - out[key]
        if new >= d.max_w:
            del out[key]
        else:
            out[key] = round(new, 1)
    return out
