"""PowerDomains on a real kube-apiserver with kwok nodes: the CRD's validation refuses bad
budgets naming the field, a pod waits with reason `power` while its rack's budget is spent
and binds when a pod of that rack ends, and the scheduler (under the chart's RBAC) writes
the domain's status."""

from __future__ import annotations

import asyncio

from gpugov.k8s.power.contract import PATH
from gpugov.k8s.scheduler.harness import TIMEOUT, bound, condition, env, wait_until


def test_pod_waits_for_its_rack_and_binds_when_a_pod_there_ends(k8s_control_plane) -> None:
    async def main() -> None:
        async with env(k8s_control_plane) as e:
            rack = f"{e.uid}-r1"
            nodes = await e.add_nodes(2, 4)
            for n in nodes:
                await e.kube.request("PATCH", f"/api/v1/nodes/{n}",
                                     {"metadata": {"labels": {"gpugov.io/rack": rack}}},
                                     content_type="application/merge-patch+json")
            # the apiserver refuses what the engine would refuse, naming the field
            for spec, field in (({"panelWatts": 0}, "spec.panelWatts"),
                                ({"panelWatts": 1000, "ratio": 1.5}, "spec.ratio"),
                                ({"panelWatts": 1000, "ratio": 0}, "spec.ratio"),
                                ({"ratio": 0.5}, "spec.panelWatts")):
                status, doc = await e.kube.request("POST", PATH, {
                    "apiVersion": "gpugov.io/v1alpha1", "kind": "PowerDomain",
                    "metadata": {"name": f"{e.uid}-bad"}, "spec": spec})
                assert status == 422 and field in doc["message"], (spec, doc)
            # A100 400 W: idle 8 x 40 W; 0.8 x 2000 W leaves room for 3 GPUs at 360 W more
            status, _ = await e.kube.request("POST", PATH, {
                "apiVersion": "gpugov.io/v1alpha1", "kind": "PowerDomain",
                "metadata": {"name": rack}, "spec": {"panelWatts": 2000}})
            assert status == 201
            e.cluster_objs.append(f"{PATH}/{rack}")
            q = await e.queue("q")
            sched = e.start_scheduler(kubeconfig=await k8s_control_plane.component_kubeconfig(
                "scheduler"))
            await e.pods([e.pod(f"p{i}", q) for i in range(4)])
            try:
                await e.wait_bound(3)
            except TimeoutError:
                raise AssertionError(e.log(sched)[-3000:]) from None

            async def waiting():
                got = [condition(p) for p in await e.list() if condition(p)]
                return got[0] if got else None

            reason, message = await wait_until(waiting, TIMEOUT, "a pod pending for power")
            assert reason == "Unschedulable" and "power" in message
            assert f"power domain {rack} would draw 1760 W of 1600 W allowed " \
                   "(80 % of 2000 W)" in message

            async def domain_status():
                _, doc = await e.kube.request("GET", f"{PATH}/{rack}")
                st = doc.get("status") or {}
                return st if st.get("admittedWatts") == 1400 else None

            st = await wait_until(domain_status, TIMEOUT, "PowerDomain status admitted 1400 W")
            assert st["budgetWatts"] == 1600 and st["headroomWatts"] == 200
            assert st["nodes"] == 2 and st["conditions"][0]["status"] == "True"

            done = bound(await e.list())[0]["metadata"]["name"]
            await e.kube.request("DELETE", f"/api/v1/namespaces/{e.ns}/pods/{done}",
                                 {"gracePeriodSeconds": 0})

            async def rebound():
                items = [p for p in await e.list() if p["metadata"]["name"] != done]
                return items if len(bound(items)) == 3 else None

            await wait_until(rebound, TIMEOUT, "the waiting pod bound once a rack pod ended")

    asyncio.run(main())
