"""On-demand MIG end to end, on a real kube-apiserver: gpugov's scheduler, and the node agent
on the fake NVML publishing a kwok node's inventory. A MIG pod whose profile no instance has
makes the scheduler ask the agent; the agent creates the instance in free slices (beside a
busy instance it never touches) and re-publishes; the pod binds on it. Prints the time from
pod creation to bind (not asserted)."""

from __future__ import annotations

import asyncio
import contextlib
import time

from nvml_fake import H100_80

from gpugov.k8s.annotations import (
    ALLOCATION,
    INVENTORY,
    MIG_REQUESTS,
    MIG_REQUESTS_STATE,
    decode_allocation,
    decode_inventory,
)
from gpugov.k8s.scheduler.harness import TIMEOUT, bound, by_name, env, wait_until
from gpugov.node.agent import AgentConfig, NodeAgent
from gpugov.node.mig_apply import busy_pids
from gpugov.node.nvml.discovery import discover
from gpugov.node.nvml.health import HealthTracker
from gpugov.node.nvml.source import NvmlDeviceSource, SharingPolicy

GiB = 1 << 30


def test_a_pod_gets_a_mig_instance_created_for_it_and_binds(k8s_control_plane, node, open_nvml,
                                                             sleepers) -> None:
    busy = sleepers.start()
    node.gpu(H100_80, "cc 9 0", "mig-mode 1", "gi 9 0", f"proc {busy} {GiB} 1",  # 3g.40gb@0
             "power 60000 700000")
    nv = open_nvml(node)
    source = NvmlDeviceSource(nv, HealthTracker(nv), SharingPolicy(mig_on_demand=True))

    async def main() -> None:
        async with env(k8s_control_plane) as e, k8s_control_plane.api() as api:
            (name,) = await e.add_pools({
                "name": "od", "count": 1, "model": "H100-SXM5-80GB", "gpus": 1,
                "cpuMilli": 64000, "memoryMiB": 524288,
                "devices": [{"index": "0", "mode": "mig", "layout": ["3g.40gb"]}]})
            agent = NodeAgent(api, source, AgentConfig(name, interval_s=0.2))
            task = asyncio.create_task(agent.run())
            try:
                async def published():
                    _, obj = await e.kube.request("GET", f"/api/v1/nodes/{name}")
                    inv = decode_inventory(obj["metadata"]["annotations"][INVENTORY])
                    return inv.devices[0].mig_on_demand
                await wait_until(published, TIMEOUT, "the agent's inventory")
                q = await e.queue("q")
                sched = e.start_scheduler()

                async def synced():
                    return "synced:" in e.log(sched)
                await wait_until(synced, TIMEOUT, "the scheduler to sync")
                t0 = time.monotonic()
                await e.pods([e.pod("infer", q, limits={"nvidia.com/mig-2g.20gb": "1"})])
                seen: dict[str, float] = {}

                async def steps():  # when each step became visible in the API (for the log)
                    while True:
                        _, obj = await e.kube.request("GET", f"/api/v1/nodes/{name}")
                        ann = obj["metadata"]["annotations"]
                        if MIG_REQUESTS in ann:
                            seen.setdefault("asked", time.monotonic() - t0)
                        if "created" in ann.get(MIG_REQUESTS_STATE, ""):
                            seen.setdefault("created", time.monotonic() - t0)
                        await asyncio.sleep(0.05)
                watcher = asyncio.create_task(steps())
                try:
                    items = await e.wait_bound(1)
                except TimeoutError:  # what each side saw, for the log
                    _, obj = await e.kube.request("GET", f"/api/v1/nodes/{name}")
                    print({k: v for k, v in obj["metadata"]["annotations"].items()
                           if "mig" in k or "inventory" in k}, dict(agent.errors))
                    print([(p["metadata"]["name"], p.get("status")) for p in await e.list()])
                    raise
                took = time.monotonic() - t0
                watcher.cancel()
                print(f"\non-demand MIG: pod created -> asked {seen.get('asked', -1):.2f} s -> "
                      f"created {seen.get('created', -1):.2f} s -> bound {took:.2f} s")
                rec = decode_allocation(by_name(bound(items))["infer"]["metadata"]
                                        ["annotations"][ALLOCATION])
                (d,) = rec.devices
                made = {(m.profile, m.start): m.uuid for m in discover(nv).gpus[0].mig}
                assert (d.mig_profile, d.mig_uuid) == ("2g.20gb", made[("2g.20gb", d.mig_start)])
                assert d.mig_start >= 4 and ("3g.40gb", 0) in made  # beside, not over
                assert busy_pids(nv, 0) == [busy]  # the running instance kept its work
                _, obj = await e.kube.request("GET", f"/api/v1/nodes/{name}")
                assert "created" in obj["metadata"]["annotations"][MIG_REQUESTS_STATE]
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    asyncio.run(main())
