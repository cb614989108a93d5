"""Several MIG instances per pod and time-sliced MIG, on a real kube-apiserver with kwok nodes:
gpugov's scheduler binds them, writes v2 records naming each instance (or the replica's
instance), re-adopts them after a SIGKILL, and never gives an instance twice."""

from __future__ import annotations

import asyncio
import time

from gpugov.k8s.annotations import (
    INVENTORY,
    decode_allocation,
    decode_inventory,
    encode_inventory,
)
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import (
    TIMEOUT,
    bound,
    by_name,
    condition,
    env,
    invariant_problems,
    pods,
    wait_until,
)
from gpugov.k8s.scheduler.kube import MERGE


def pool(name: str, gpus: int, devices: list) -> dict:
    return {"name": name, "count": 1, "model": "H100-SXM5-80GB", "gpus": gpus,
            "cpuMilli": 64000, "memoryMiB": 524288, "devices": devices}


def record(p: dict):
    return decode_allocation(p["metadata"]["annotations"][names.ANN_ALLOCATION])


async def time_slice(e, node: str, replicas: dict[tuple[int, str], int]) -> dict:
    """What the node agent publishes when its instances are time-sliced: the instances of
    (device, profile) with that many replicas. Returns (device, profile, start) -> UUID."""
    _, obj = await e.kube.request("GET", f"/api/v1/nodes/{node}")
    inv = decode_inventory(obj["metadata"]["annotations"][INVENTORY])
    devs = tuple(type(d)(**{**{f: getattr(d, f) for f in d.__slots__}, "mig": tuple(
        type(m)(m.profile, m.start, m.uuid, replicas.get((d.index, m.profile), 1))
        for m in d.mig)}) for d in inv.devices)
    new = encode_inventory(type(inv)(devs, inv.power_budget_w))
    status, _ = await e.kube.request("PATCH", f"/api/v1/nodes/{node}", {
        "metadata": {"annotations": {INVENTORY: new}}}, content_type=MERGE)
    assert status == 200
    return {(d.index, m.profile, m.start): m.uuid for d in inv.devices for m in d.mig}


def test_several_instances_and_time_sliced_replicas_bind_and_survive_a_restart(
        k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            (node,) = await e.add_pools(pool("mig", 2, [
                {"index": "0", "mode": "mig", "layout": ["3g.40gb", "2g.20gb", "1g.10gb"]},
                {"index": "1", "mode": "mig", "layout": ["1g.10gb"] * 7}]))
            # device 0's 1g.10gb time-sliced x4; device 1's seven stay whole
            uuids = await time_slice(e, node, {(0, "1g.10gb"): 4})
            q = await e.queue("q")
            first = e.start_scheduler("-a")
            t0 = time.monotonic()
            await e.pods([e.pod("two", q, limits={"nvidia.com/mig-1g.10gb": "2"}),
                          e.pod("three", q, limits={"nvidia.com/mig-1g.10gb": "3"})]
                         + [e.pod(f"r{i}", q, limits={"nvidia.com/mig-1g.10gb.shared": "1"})
                            for i in range(4)])
            try:
                items = await e.wait_bound(6)
            except TimeoutError:
                for p in await e.list():
                    print(p["metadata"]["name"], condition(p))
                print(e.log(first)[-3000:])
                raise
            print(f"\n6 MIG pods (5 instances, 4 replicas) bound in {time.monotonic() - t0:.2f} s")
            got = by_name(bound(items))
            for name, n in (("two", 2), ("three", 3)):
                rec = record(got[name])
                assert len(rec.devices) == n and {d.index for d in rec.devices} == {1}
                for d in rec.devices:
                    assert d.mig_uuid == uuids[(1, "1g.10gb", d.mig_start)]
            for i in range(4):
                (d,) = record(got[f"r{i}"]).devices
                assert (d.index, d.mig_profile, d.mig_replicas, d.memory_mib) == (
                    0, "1g.10gb", 4, 9984 // 4)
            assert not invariant_problems(items, e.nodes)
            e.kill(first)
            second = e.start_scheduler("-b")  # knows the API objects only
            await e.pods([e.pod("two-more", q, limits={"nvidia.com/mig-1g.10gb": "2"})])
            await e.wait_bound(7)  # the last two whole instances: the others were re-adopted
            await e.pods([e.pod("one-more", q, limits={"nvidia.com/mig-1g.10gb": "1"}),
                          e.pod("r4", q, limits={"nvidia.com/mig-1g.10gb.shared": "1"})])

            async def waiting():
                got = {p["metadata"]["name"]: condition(p)[1] for p in await pods(e.kube, e.ns)
                       if condition(p)}
                return got if {"one-more", "r4"} <= set(got) else None

            msgs = await wait_until(waiting, TIMEOUT, "one-more and r4 to wait")
            assert "mig-slice" in msgs["one-more"]  # 7 whole instances held, none twice
            assert "replicas" in msgs["r4"]  # 4 replicas of 4 held
            items = await e.list()
            assert "two-more" in by_name(bound(items))
            assert not invariant_problems(items, e.nodes)
            assert e.alive(second)

    asyncio.run(main())
