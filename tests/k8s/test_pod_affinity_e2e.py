"""Pod anti-affinity and topology spread honoured by gpugov's scheduler on a real
kube-apiserver + etcd with kwok nodes: inference replicas spread for availability land on
distinct nodes (the one too many waits, its condition naming the anti-affinity term), a
maxSkew 1 zone spread stays balanced, and a term naming a label no node has is a clear
reason on the pod, not a silent wait."""

from __future__ import annotations

import asyncio
from collections import Counter

from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import (
    TIMEOUT,
    bound,
    by_name,
    condition,
    env,
    gpu_node,
    wait_until,
)

HOST = "kubernetes.io/hostname"


async def zoned_nodes(e, zones: list[str]) -> dict[str, str]:
    """kwok GPU nodes labelled as kubelet and a cloud would: hostname and zone."""
    made = [gpu_node(f"{e.uid}-n{i}", 8, {**e.label, HOST: f"{e.uid}-n{i}",
                                          "topology.kubernetes.io/zone": z})
            for i, z in enumerate(zones)]
    for n in made:
        e.nodes[n["metadata"]["name"]] = 8
    await e._create_nodes(made)
    return {n["metadata"]["name"]: z for n, z in zip(made, zones, strict=True)}


def replica(e, name: str, q: str, labels: dict, **spec) -> dict:
    p = e.pod(name, q, limits={names.GPU_RESOURCE: "1"}, labels=labels)
    p["spec"].update(spec)
    return p


def test_replicas_with_hostname_anti_affinity_land_on_distinct_nodes(k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await zoned_nodes(e, ["a", "a", "b"])
            q = await e.queue("q")
            e.start_scheduler()
            anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "llm"}}, "topologyKey": HOST}]}}
            await e.pods([replica(e, f"llm-{i}", q, {"app": "llm"}, affinity=anti)
                          for i in range(4)])
            items = await e.wait_bound(3)

            async def fourth_waits():
                items = await e.list()
                late = [p for p in items if not p["spec"].get("nodeName")]
                c = condition(late[0]) if len(late) == 1 else None
                return (items, c) if c and "pod-anti-affinity" in c[1] else None

            items, (_, msg) = await wait_until(fourth_waits, TIMEOUT, "the 4th replica's reason")
            nodes = [p["spec"]["nodeName"] for p in bound(items)]
            assert len(nodes) == 3 and len(set(nodes)) == 3, nodes
            assert "app=llm" in msg and HOST in msg, msg

    asyncio.run(main())


def test_zone_spread_max_skew_one_and_a_missing_label_is_named(k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            zone_of = await zoned_nodes(e, ["a", "a", "b"])
            q = await e.queue("q")
            e.start_scheduler()
            spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                       "whenUnsatisfiable": "DoNotSchedule",
                       "labelSelector": {"matchLabels": {"app": "web"}}}]
            await e.pods([replica(e, f"web-{i}", q, {"app": "web"},
                                  topologySpreadConstraints=spread) for i in range(6)])
            items = await e.wait_bound(6)
            zones = Counter(zone_of[p["spec"]["nodeName"]] for p in bound(items))
            assert zones == {"a": 3, "b": 3}, zones
            rack = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "rack"}]}}
            await e.pods([replica(e, "follower", q, {"app": "f"}, affinity=rack)])

            async def named():
                p = by_name(await e.list()).get("follower")
                c = condition(p) if p else None
                return c if c and "pod-affinity" in c[1] else None

            _, msg = await wait_until(named, TIMEOUT, "follower's reason")
            assert "'rack'" in msg and "label" in msg, msg

    asyncio.run(main())
