"""The node agent's power work: measure each GPU's draw and energy, publish them, and set the
power limits its PowerDomain asks for (docs/power.md).

Each round:
1. measure (NVML): `nvmlDeviceGetPowerUsage` (draw), `nvmlDeviceGetTotalEnergyConsumption`
   (energy since the driver loaded), `nvmlDeviceGetPowerManagementLimit` and its range
   (`nvmlDeviceGetPowerManagementLimitConstraints`) -> the Node annotation `gpugov.io/power`
   (k8s/power/contract.py), which the scheduler sums per domain;
2. read the caps for this node from the PowerDomains' `status.caps` (the scheduler's plan:
   lowest-priority GPUs first) and set them with `nvmlDeviceSetPowerManagementLimit`; a
   device no cap names goes back to its default limit
   (`nvmlDeviceGetPowerManagementDefaultLimit`). A cap below the card's minimum is set to the
   minimum (and said so); the driver's refusals (not root: NO_PERMISSION, out of range:
   INVALID_ARGUMENT, no power management: NOT_SUPPORTED) are reported, never retried in a
   tight loop: the same refusal is reported once until the cap changes.
Every change and every refusal is a Kubernetes Event on the Node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import pynvml

from gpugov.k8s.power.contract import DevicePower
from gpugov.node.nvml.library import Nvml

log = logging.getLogger(__name__)

#: limits closer than this (W) to the wanted one are left alone (the driver rounds)
SLACK_W = 1.0


@dataclass(frozen=True, slots=True)
class LimitChange:
    """What one round did to one GPU's power limit (the Event it becomes)."""

    index: int
    outcome: str  # "capped", "restored", "refused"
    old_w: float | None
    new_w: float | None
    message: str

    @property
    def reason(self) -> str:
        return {"capped": "GpuPowerCapped", "restored": "GpuPowerRestored"}.get(
            self.outcome, "GpuPowerCapRefused")


def _w(mw: int | None) -> float | None:
    return None if mw is None else mw / 1000


def measure(nv: Nvml) -> list[DevicePower]:
    """Draw, energy and limits of every GPU NVML lists (a value the driver lacks is None)."""
    count = nv.query(pynvml.nvmlDeviceGetCount) or 0
    out = []
    for i in range(count):
        h = nv.query(pynvml.nvmlDeviceGetHandleByIndex, i)
        if h is None:
            continue
        draw = nv.query(pynvml.nvmlDeviceGetPowerUsage, h)
        if draw is None:
            continue
        energy = nv.query("nvmlDeviceGetTotalEnergyConsumption", h)
        limits = nv.query("nvmlDeviceGetPowerManagementLimitConstraints", h)
        limit = nv.query(pynvml.nvmlDeviceGetPowerManagementLimit, h)
        lo, hi = (limits if limits else (None, None))
        out.append(DevicePower(i, draw / 1000, None if energy is None else energy / 1000,
                               _w(limit), _w(lo), _w(hi)))
    return out


@dataclass
class PowerCaps:
    """The limits this agent set, so it restores exactly those and reports each refusal once."""

    #: device -> the cap asked for that this agent applied (or was refused)
    applied: dict[int, float] = field(default_factory=dict)
    refused: dict[int, tuple[float | None, str]] = field(default_factory=dict)

    def apply(self, nv: Nvml, caps: Mapping[int, float]) -> list[LimitChange]:
        """Set the caps (W) on the devices named; restore the default on devices this agent
        capped and no cap names any more."""
        out: list[LimitChange] = []
        for i in sorted(set(caps) | set(self.applied) | set(self.refused)):
            want = caps.get(i)
            if want is None and i not in self.applied and i not in self.refused:
                continue
            change = self._one(nv, i, want)
            if change is not None:
                out.append(change)
        return out

    def _one(self, nv: Nvml, i: int, want: float | None) -> LimitChange | None:
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            now_mw = pynvml.nvmlDeviceGetPowerManagementLimit(h)
            lo_mw, hi_mw = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
            default_mw = pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h)
        except pynvml.NVMLError as e:
            return self._refused(i, want, f"GPU {i}: cannot read its power limits: {e}")
        now = now_mw / 1000
        note = ""
        if want is None:
            target_mw = default_mw
        else:
            target_mw = round(want * 1000)
            if target_mw < lo_mw:
                note = (f" (asked {want:.0f} W, below the card's minimum {lo_mw / 1000:.0f} W: "
                        "set to the minimum)")
                target_mw = lo_mw
            elif target_mw > hi_mw:
                target_mw = hi_mw
        if abs(target_mw - now_mw) < SLACK_W * 1000:
            self._done(i, want)
            return None
        try:
            pynvml.nvmlDeviceSetPowerManagementLimit(h, target_mw)
        except pynvml.NVMLError as e:
            why = {pynvml.NVML_ERROR_NO_PERMISSION: "not permitted (the agent must run as "
                                                    "root to set power limits)",
                   pynvml.NVML_ERROR_INVALID_ARGUMENT: "out of the card's range",
                   pynvml.NVML_ERROR_NOT_SUPPORTED: "the GPU has no power management"
                   }.get(e.value, str(e))
            return self._refused(i, want, f"GPU {i}: setting its power limit to "
                                          f"{target_mw / 1000:.0f} W was refused: {why}")
        self._done(i, want)
        new = target_mw / 1000
        if want is None:
            return LimitChange(i, "restored", now, new, f"GPU {i}: power limit restored to its "
                               f"default {new:.0f} W (was {now:.0f} W): the rack has headroom")
        return LimitChange(i, "capped", now, new, f"GPU {i}: power limit {now:.0f} W -> "
                           f"{new:.0f} W: its power domain's measured draw is over budget"
                           + note)

    def _done(self, i: int, want: float | None) -> None:
        self.refused.pop(i, None)
        if want is None:
            self.applied.pop(i, None)
        else:
            self.applied[i] = want

    def _refused(self, i: int, want: float | None, message: str) -> LimitChange | None:
        if self.refused.get(i) == (want, message):
            return None  # said already; said again when the cap changes
        self.refused[i] = (want, message)
        log.warning("%s", message)
        return LimitChange(i, "refused", None, None, message)


async def reconcile(agent) -> list[LimitChange]:  # noqa: ANN001 - node.agent.NodeAgent
    """One round of the agent's power work (module doc): measure and publish, then apply
    this node's caps and post one Event per change or refusal."""
    import asyncio

    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    from gpugov.k8s.power.contract import API_VERSION, GROUP, PLURAL, caps_for, encode_power

    loop = asyncio.get_running_loop()
    nv = agent.source.nvml
    devices = await loop.run_in_executor(None, measure, nv)
    agent.power_annotation = encode_power(devices) if devices else None
    await agent.publish()
    if not devices:
        return []
    try:
        domains = await client.CustomObjectsApi(agent.api).list_cluster_custom_object(
            GROUP, API_VERSION, PLURAL)
    except ApiException as e:
        if e.status != 404:
            raise
        domains = {}  # the PowerDomain CRD is not installed: no caps, defaults stay
    caps: dict[int, float] = {}
    for obj in domains.get("items") or []:
        caps.update(caps_for(obj, agent.cfg.node_name))
    changes = await loop.run_in_executor(None, agent.power_caps.apply, nv, caps)
    for c in changes:
        await agent.event(c.reason, c.message, warning=c.outcome == "refused")
    if any(c.outcome != "refused" for c in changes):  # publish the limits now in force
        devices = await loop.run_in_executor(None, measure, nv)
        agent.power_annotation = encode_power(devices) if devices else None
        await agent.publish()
    return changes
