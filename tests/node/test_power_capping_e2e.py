"""The capping loop end to end on the real apiserver: gpugov's scheduler (a process) places
a low- and a high-priority pod in a rack, the node agent (fake NVML) publishes the GPUs'
measured draw, the rack's panel is derated under them, the scheduler's PowerDomain status
caps the low-priority pod's GPU, the agent sets that limit (an Event), and when the rack has
headroom again the cap is lifted and the default limit restored (an Event)."""

from __future__ import annotations

import asyncio

from nvml_fake import A100_80
from test_agent_k8s import _events

from gpugov.k8s.annotations import decode_allocation
from gpugov.k8s.power.contract import PATH, POWER, decode_power
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import TIMEOUT, env, wait_until
from gpugov.node.agent import AgentConfig, NodeAgent
from gpugov.node.nvml.health import HealthTracker
from gpugov.node.nvml.source import NvmlDeviceSource

MERGE = "application/merge-patch+json"


def test_over_budget_caps_the_low_priority_gpu_and_lifts_it_later(k8s_control_plane, node,
                                                                   open_nvml):
    # two A100s drawing 390 W each, limits settable within 100..400 W
    for _ in range(2):
        node.gpu(A100_80, "cc 8 0", "power 390000 400000", "power-range 100000 400000")
    nv = open_nvml(node)

    async def main() -> None:
        async with env(k8s_control_plane) as e:
            (name,) = await e.add_nodes(1, 2)
            rack = f"{e.uid}-rack"
            await e.kube.request("PATCH", f"/api/v1/nodes/{name}",
                                 {"metadata": {"labels": {"gpugov.io/rack": rack}}},
                                 content_type=MERGE)
            for pc, value in (("low", 10), ("high", 1000)):
                await e.kube.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
                    "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": f"{e.uid}-{pc}"}, "value": value})
                e.cluster_objs.append(f"/apis/scheduling.k8s.io/v1/priorityclasses/{e.uid}-{pc}")
            status, _ = await e.kube.request("POST", PATH, {
                "apiVersion": "gpugov.io/v1alpha1", "kind": "PowerDomain",
                "metadata": {"name": rack}, "spec": {"panelWatts": 4000}})
            assert status == 201
            e.cluster_objs.append(f"{PATH}/{rack}")
            q = await e.queue("q")
            e.start_scheduler()
            await e.pods([e.pod("lo", q, priority_class=f"{e.uid}-low"),
                          e.pod("hi", q, priority_class=f"{e.uid}-high")])
            items = await e.wait_bound(2)
            dev = {p["metadata"]["name"]: decode_allocation(
                p["metadata"]["annotations"][names.ANN_ALLOCATION]).devices[0].index
                for p in items}
            lo, hi = dev["lo"], dev["hi"]

            async with k8s_control_plane.api() as api:
                source = NvmlDeviceSource(nv, HealthTracker(nv, recovery_s=60))
                agent = NodeAgent(api, source, AgentConfig(name))
                await agent.round()
                _, n = await e.kube.request("GET", f"/api/v1/nodes/{name}")
                assert [d.draw_w for d in decode_power(n["metadata"]["annotations"][POWER])] \
                    == [390.0, 390.0]
                # the panel is derated under the running pods: 0.8 x 800 W = 640 W < 780 W
                await e.kube.request("PATCH", f"{PATH}/{rack}", {"spec": {"panelWatts": 800}},
                                     content_type=MERGE)

                async def caps():
                    _, doc = await e.kube.request("GET", f"{PATH}/{rack}")
                    got = (doc.get("status") or {}).get("caps") or {}
                    return got if got.get(name) else None

                got = await wait_until(caps, TIMEOUT, "the scheduler's capping plan")
                assert got == {name: {str(lo): 250.0}}  # 140 W shed, all on the low pod's GPU
                await agent.round()
                _, n = await e.kube.request("GET", f"/api/v1/nodes/{name}")
                power = {d.index: d for d in decode_power(n["metadata"]["annotations"][POWER])}
                assert (power[lo].limit_w, power[lo].draw_w) == (250.0, 250.0)
                assert power[hi].limit_w == 400.0  # the high-priority pod's GPU is untouched
                events = await _events(api, name)
                assert any(r == "GpuPowerCapped" and f"GPU {lo}: power limit 400 W -> 250 W"
                           in m for r, m in events)

                # headroom again: the cap is lifted, the default limit restored
                await e.kube.request("PATCH", f"{PATH}/{rack}", {"spec": {"panelWatts": 4000}},
                                     content_type=MERGE)

                async def lifted():
                    await agent.round()
                    return any(r == "GpuPowerRestored" for r, _ in await _events(api, name))

                await wait_until(lifted, TIMEOUT, "the cap lifted and the limit restored")
                _, n = await e.kube.request("GET", f"/api/v1/nodes/{name}")
                assert [d.limit_w for d in decode_power(n["metadata"]["annotations"][POWER])] \
                    == [400.0, 400.0]

    asyncio.run(main())
