"""`gpugov.io/topology: required` on a real kube-apiserver: a 4-GPU pod is kept inside one
NVLink domain of an 8-GPU node with two 4-GPU islands, or refused with reason `topology`."""

from __future__ import annotations

import asyncio
import dataclasses

from gpugov.k8s.annotations import INVENTORY, decode_allocation, decode_inventory, encode_inventory
from gpugov.k8s.devcluster.cluster_file import node_objects, parse_cluster_yaml
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import TIMEOUT, bound, condition, env, pods, wait_until

REQUIRED = {"gpugov.io/topology": "required"}


async def two_island_node(e) -> str:
    """One 8-GPU H100 node whose GPUs 0-3 and 4-7 are two NVLink domains (its inventory)."""
    pool = {"name": f"{e.uid}-hgx", "count": 1, "model": "H100-SXM5-80GB", "gpus": 8,
            "cpuMilli": 64000, "memoryMiB": 524288,
            "devices": [{"index": "0-7", "mode": "exclusive"}]}
    (obj,) = node_objects(parse_cluster_yaml({"nodePools": [pool]}, "test"))
    ann = obj["metadata"]["annotations"]
    inv = decode_inventory(ann[INVENTORY])
    ann[INVENTORY] = encode_inventory(dataclasses.replace(inv, devices=tuple(
        dataclasses.replace(d, nvlink_domain=d.index // 4) for d in inv.devices)))
    obj["metadata"]["labels"].update(e.label)
    e.nodes[obj["metadata"]["name"]] = 8
    (name,) = await e._create_nodes([obj])
    return name


def devices(p: dict) -> set[int]:
    rec = decode_allocation(p["metadata"]["annotations"][names.ANN_ALLOCATION])
    return {d.index for d in rec.devices}


def test_a_required_4_gpu_pod_stays_in_one_domain_or_is_refused_with_topology(
        k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await two_island_node(e)
            q = await e.queue("q")
            e.start_scheduler()
            # a 1-GPU pod first: one island stays whole, the required pod must take it
            await e.pods([e.pod("one", q, limits={names.GPU_RESOURCE: "1"})])
            await e.wait_bound(1)
            await e.pods([e.pod("tp", q, limits={names.GPU_RESOURCE: "4"}, annotations=REQUIRED)])
            items = await e.wait_bound(2)
            by = {p["metadata"]["name"]: p for p in bound(items)}
            assert len({i // 4 for i in devices(by["tp"])}) == 1
            assert not devices(by["tp"]) & devices(by["one"])
            # 3 GPUs left: a second required 4-GPU pod waits, with the reason on it
            await e.pods([e.pod("tp2", q, limits={names.GPU_RESOURCE: "4"},
                                annotations=REQUIRED)])

            async def refused():
                got = {p["metadata"]["name"]: condition(p) for p in await pods(e.kube, e.ns)}
                return got.get("tp2")

            _, msg = await wait_until(refused, TIMEOUT, "tp2 refused")
            assert "gpugov: " in msg

    asyncio.run(main())


def test_a_required_pod_whose_free_gpus_span_domains_is_refused_with_topology(
        k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await two_island_node(e)
            q = await e.queue("q")
            e.start_scheduler()
            three = {names.GPU_RESOURCE: "3"}
            await e.pods([e.pod("a", q, limits=three), e.pod("b", q, limits=three)])
            items = await e.wait_bound(2)
            used = set().union(*(devices(p) for p in bound(items)))
            assert {i // 4 for i in set(range(8)) - used} == {0, 1}  # one free per island
            await e.pods([e.pod("req", q, limits={names.GPU_RESOURCE: "2"},
                                annotations=REQUIRED)])

            async def refused():
                got = {p["metadata"]["name"]: condition(p) for p in await pods(e.kube, e.ns)}
                return got.get("req")

            _, msg = await wait_until(refused, TIMEOUT, "req refused")
            assert "topology" in msg and "NVLink" in msg, msg

    asyncio.run(main())
