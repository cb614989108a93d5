"""Two `gpugov scheduler --leader-elect` replicas on one Lease, against the real apiserver:
SIGKILL the leader mid-burst, the standby takes over; a replica restarted after SIGKILL
rebuilds its state from the API alone. Checked from the API afterwards: every allocation
record matches its binding, no device is given twice, the queue's limit is never exceeded
(sampled all along), and every pod that fits ends up bound."""

from __future__ import annotations

import asyncio
import time

from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import TIMEOUT, bound, env, invariant_problems, wait_until

LEASE = ("--leader-elect", "--lease-namespace", "kube-system", "--lease-duration", "4",
         "--renew-deadline", "3", "--retry-period", "0.5")
LEASE_DURATION = 4.0


def test_failover_and_restart_keep_every_invariant(k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await e.add_nodes(4, 4)
            q = await e.queue("q", limit={"gpu": 12})
            lease = f"{e.uid}-lease"
            lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{lease}"
            procs = {who: e.start_scheduler(f"-{who}", *LEASE, "--lease-name", lease,
                                            "--identity", who) for who in ("A", "B")}

            async def holder() -> str | None:
                status, doc = await e.kube.request("GET", lease_path)
                return (doc.get("spec") or {}).get("holderIdentity") if status == 200 else None

            leader = await wait_until(holder, TIMEOUT, "a replica to hold the Lease")
            standby = "B" if leader == "A" else "A"
            over_limit: list[int] = []

            async def sample() -> list[dict]:
                items = await e.list()
                if len(bound(items)) > 12:
                    over_limit.append(len(bound(items)))
                return items

            await e.pods([e.pod(f"p{i:02d}", q) for i in range(8)])
            await wait_until(lambda: _bound_at_least(sample, 1), TIMEOUT, "a first binding")
            burst = asyncio.create_task(e.pods([e.pod(f"p{i:02d}", q) for i in range(8, 16)]))
            e.kill(procs[leader])
            killed_at = time.monotonic()
            await burst
            await wait_until(lambda: _is(holder, standby), TIMEOUT, f"{standby} to lead")
            takeover = time.monotonic() - killed_at
            # the standby waits out the lease it last saw renewed, then one retry period
            assert takeover < 3 * LEASE_DURATION + 5, takeover
            await wait_until(lambda: _bound_at_least(sample, 12), TIMEOUT, "12 pods bound")

            # restart the killed replica (a standby now), then kill the new leader too: the
            # restarted one must lead, rebuild from the API and go on
            e.cluster.plane.procs.stop(procs[leader], grace=1)
            procs[leader] = e.start_scheduler(f"-{leader}2", *LEASE, "--lease-name", lease,
                                              "--identity", leader)
            await asyncio.sleep(1.0)
            e.kill(procs[standby])
            await wait_until(lambda: _is(holder, leader), TIMEOUT, f"{leader} to lead again")
            items = await sample()
            gone = [p["metadata"]["name"] for p in bound(items)][:4]
            for name in gone:
                await e.kube.request("DELETE", f"/api/v1/namespaces/{e.ns}/pods/{name}",
                                     {"gracePeriodSeconds": 0})

            async def all_bound():
                got = await sample()
                live = [p for p in got if not p["metadata"].get("deletionTimestamp")]
                return live if len(live) == 12 and len(bound(live)) == 12 else None

            items = await wait_until(all_bound, TIMEOUT, "the 12 remaining pods all bound")
            assert not over_limit, f"the queue limit of 12 GPUs was exceeded: {over_limit}"
            assert not invariant_problems(items, e.nodes)
            for p in items:
                assert names.ANN_ALLOCATION in p["metadata"]["annotations"]
            assert "lost lease" not in e.log(procs[leader])

    asyncio.run(main())


async def _bound_at_least(sample, n: int) -> bool:
    return len(bound(await sample())) >= n


async def _is(holder, who: str) -> bool:
    return await holder() == who
