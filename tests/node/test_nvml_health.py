"""Health from NVML: XID -> unhealthy -> healthy again, lost GPUs, and the device source the
device plugin reads."""

from __future__ import annotations

import asyncio

from nvml_fake import A100_80

from gpugov.k8s.annotations import decode_inventory, encode_inventory
from gpugov.model.devices import DeviceMode
from gpugov.node.nvml.health import HealthTracker
from gpugov.node.nvml.source import NvmlDeviceSource, SharingPolicy


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_xid_makes_unhealthy_then_recovers(node, open_nvml):
    node.gpu(A100_80)
    node.gpu(A100_80)
    clock = Clock()
    h = HealthTracker(open_nvml(node), recovery_s=60, clock=clock)
    h.register()
    assert h.poll() == [] and h.healthy(0) and h.healthy(1)
    node.event("xid 0 79")
    node.event("xid 1 13")  # an application fault: says nothing about the GPU
    assert h.poll() == [(0, 79), (1, 13)]
    assert not h.healthy(0) and h.devices[0].reason == "XID 79"
    assert h.healthy(1) and h.devices[1].last_xid == 13
    clock.t += 59
    h.poll()
    assert not h.healthy(0)
    clock.t += 1
    h.poll()
    assert h.healthy(0) and h.devices[0].last_xid == 79  # the last XID stays reported


def test_lost_gpu_unhealthy_until_it_answers(node, open_nvml):
    node.gpu(A100_80)
    clock = Clock()
    h = HealthTracker(open_nvml(node), recovery_s=0, clock=clock)
    h.poll()
    node.event("lost 0 1")
    h.poll()
    assert not h.healthy(0) and h.devices[0].reason == "GPU is lost"
    node.event("lost 0 0")
    clock.t += 1
    h.poll()
    assert h.healthy(0)


def test_events_unsupported_degrade_to_probing(node, open_nvml):
    node.gpu(A100_80, "unsupported events")
    nv = open_nvml(node)
    h = HealthTracker(nv, clock=Clock())
    h.register()
    assert h.events_supported == {0: False}
    node.event("xid 0 48")  # not delivered: the device cannot register for events
    assert h.poll() == [] and h.healthy(0)


def test_device_source_versions_follow_health(node, open_nvml):
    node.gpu(A100_80, "power 60000 400000")
    node.gpu(A100_80, "mig-mode 1", "gi 9 0", "power 60000 400000")
    nv = open_nvml(node)
    clock = Clock()
    src = NvmlDeviceSource(nv, HealthTracker(nv, recovery_s=30, clock=clock),
                           SharingPolicy(DeviceMode.SOFT))
    inv = src.inventory()
    assert [d.mode for d in inv.devices] == [DeviceMode.SOFT, DeviceMode.MIG]
    assert inv.devices[1].mig[0].profile == "3g.40gb" and inv.power_budget_w == 800.0
    assert decode_inventory(encode_inventory(inv)) == inv  # the annotation round-trips
    v = src.version
    assert not src.refresh() and src.version == v  # nothing changed, no new version

    async def scenario() -> list[bool]:
        waiter = asyncio.create_task(src.wait_change(v))
        await asyncio.sleep(0)
        node.event("xid 0 79")
        src.refresh()
        v2 = await asyncio.wait_for(waiter, 5)
        seen = [src.inventory().devices[0].healthy]
        clock.t += 30
        src.refresh()
        assert src.version > v2
        return seen + [src.inventory().devices[0].healthy]

    assert asyncio.run(scenario()) == [False, True]
