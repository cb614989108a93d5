"""gpugov's scheduler on nodes with device modes, against a real kube-apiserver and kwok.

The nodes are what `gpugov dev up` makes from a `cluster.yaml` pool (the node agent's
inventory, GFD labels, device resources, labels and taints); each test runs its own scheduler
on its own nodes (see test_scheduler_e2e.py).
"""

from __future__ import annotations

import asyncio

from gpugov.k8s.annotations import INVENTORY, decode_allocation, decode_inventory
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

MIG_1G = {"nvidia.com/mig-1g.10gb": "1"}
TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}]


def pool(name: str, gpus: int, devices: list | None = None, **extra) -> dict:
    return {"name": name, "count": 1, "model": "H100-SXM5-80GB", "gpus": gpus,
            "cpuMilli": 64000, "memoryMiB": 524288, "devices": devices or [], **extra}


def record(p: dict):
    return decode_allocation(p["metadata"]["annotations"][names.ANN_ALLOCATION])


async def conditions(e, want: set[str], ns: str | None = None) -> dict[str, str]:
    async def check():
        got = {p["metadata"]["name"]: condition(p)[1] for p in await pods(e.kube, ns or e.ns)
               if condition(p)}
        return got if want <= set(got) else None

    return await wait_until(check, TIMEOUT, f"PodScheduled=False on {sorted(want)}")


def test_a_tainted_pool_takes_only_pods_that_tolerate_it(k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            plain, infer = await e.add_pools(
                pool("plain", 2, labels={"zone": "a"}),
                pool("infer", 2, labels={"zone": "b"}, taints=[TAINT]))
            q = await e.queue("q")
            e.start_scheduler()
            await e.pods([e.pod(f"p{i}", q, tolerations=[]) for i in range(3)]
                         + [e.pod(f"t{i}", q, tolerations=TOLERATE,
                                  node_selector={"zone": "b"}) for i in range(2)]
                         + [e.pod("s0", q, tolerations=[], node_selector={"zone": "b"})])
            items = await e.wait_bound(4)
            msgs = await conditions(e, {"p2", "s0"})
            items = await e.list()
            placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound(items)}
            assert placed == {"p0": plain, "p1": plain, "t0": infer, "t1": infer}
            assert "gpugov: no-node-fits" in msgs["p2"]  # waits for the untainted pool
            assert "taint" in msgs["s0"]  # its zone is all tainted
            assert not invariant_problems(items, e.nodes)

    asyncio.run(main())


def test_mig_pods_get_free_instances_and_a_restart_readopts_them(k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            (node,) = await e.add_pools(pool("mig", 1, [
                {"index": "0", "mode": "mig",
                 "layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}]))
            _, obj = await e.kube.request("GET", f"/api/v1/nodes/{node}")
            inv = decode_inventory(obj["metadata"]["annotations"][INVENTORY])
            uuid = {(m.profile, m.start): m.uuid for m in inv.devices[0].mig}
            q = await e.queue("q")
            first = e.start_scheduler("-a")
            await e.pods([e.pod(f"m{i}", q, limits=MIG_1G) for i in range(2)])
            items = await e.wait_bound(2)
            held = {}
            for p in bound(items):
                (d,) = record(p).devices
                assert (d.index, d.mode.value, d.mig_profile) == (0, "mig", "1g.10gb")
                assert d.mig_uuid == uuid[("1g.10gb", d.mig_start)]
                held[p["metadata"]["name"]] = d.mig_start
            assert sorted(held.values()) == sorted(s for p, s in uuid if p == "1g.10gb")
            e.kill(first)
            second = e.start_scheduler("-b")  # knows the API objects only
            await e.pods([e.pod("m2", q, limits=MIG_1G),
                          e.pod("big", q, limits={"nvidia.com/mig-3g.40gb": "1"})])
            await e.wait_bound(3)
            msgs = await conditions(e, {"m2"})
            assert "mig-slice" in msgs["m2"]  # both 1g.10gb instances are held (re-adopted)
            (d,) = record(by_name(await e.list())["big"]).devices
            assert (d.mig_profile, d.mig_uuid) == ("3g.40gb", uuid[("3g.40gb", d.mig_start)])
            await e.kube.request("DELETE", f"/api/v1/namespaces/{e.ns}/pods/m0",
                                 {"gracePeriodSeconds": 0})

            async def m2_bound():
                got = by_name(bound(await e.list()))
                return got.get("m2")

            m2 = await wait_until(m2_bound, TIMEOUT, "m2 bound to m0's instance")
            assert record(m2).devices[0].mig_start == held["m0"]
            assert not invariant_problems(await e.list(), e.nodes)
            assert e.alive(second)

    asyncio.run(main())


def test_an_untrusted_tenant_never_shares_a_device(k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await e.add_pools(pool("mig", 2, [
                {"index": "0-1", "mode": "mig", "layout": ["1g.10gb"] * 7}]))
            q = await e.queue("q")
            ext_a = await k8s_control_plane.unique_namespace("ext-a")
            ext_b = await k8s_control_plane.unique_namespace("ext-b")
            await e.tenant("a", {"namespaces": [ext_a], "queue": q, "trust": "untrusted"})
            await e.tenant("b", {"namespaces": [ext_b], "queue": q, "trust": "untrusted"})
            await e.tenant("c", {"namespaces": [e.ns], "queue": q, "trust": "internal"})
            e.start_scheduler()
            await e.pods([e.pod("a0", None, limits=MIG_1G, namespace=ext_a),
                          e.pod("a1", None, limits=MIG_1G, namespace=ext_a)])
            await e.wait_bound(2, ext_a)
            await e.pods([e.pod("b0", None, limits=MIG_1G, namespace=ext_b)])
            await e.wait_bound(1, ext_b)
            await e.pods([e.pod("c0", None, limits=MIG_1G)])
            msgs = await conditions(e, {"c0"})
            assert "tenant-isolation" in msgs["c0"]  # each device holds an untrusted tenant
            items = [p for ns in (ext_a, ext_b, e.ns) for p in await pods(e.kube, ns)]
            on: dict[int, set[str]] = {}
            for p in bound(items):
                on.setdefault(record(p).devices[0].index, set()).add(p["metadata"]["namespace"])
            assert sorted(on.values(), key=sorted) == [{ext_a}, {ext_b}]
            assert not invariant_problems(items, e.nodes)

    asyncio.run(main())
