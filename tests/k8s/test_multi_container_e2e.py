"""Pods with several GPU containers and a GPU init container on the real apiserver (+ etcd,
kwok nodes), gpugov's scheduler placing them: the pod is charged what its containers hold at
once (init containers before the others), and one whose containers ask different shapes is
refused with the reason, naming them."""

from __future__ import annotations

import asyncio

from gpugov.k8s.annotations import decode_allocation
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import QUEUES, TIMEOUT, condition, env, wait_until


def several(e, name: str, q: str, apps: dict[str, dict[str, str]],
            inits: dict[str, dict[str, str]] | None = None) -> dict:
    """A pod of this test's scheduler whose containers ask what `apps`/`inits` say."""
    pod = e.pod(name, q)
    pod["spec"]["containers"] = [{"name": n, "image": "fake", "resources": {"limits": lim}}
                                 for n, lim in apps.items()]
    if inits:
        pod["spec"]["initContainers"] = [{"name": n, "image": "fake",
                                          "resources": {"limits": lim}}
                                         for n, lim in inits.items()]
    return pod


def test_two_gpu_containers_and_a_gpu_init_container_bind_charged_what_runs_at_once(
        k8s_control_plane) -> None:
    gpu = names.GPU_RESOURCE

    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await e.add_nodes(1, 4)
            q = await e.queue("q", quota={"gpu": 3}, limit={"gpu": 3})
            e.start_scheduler()
            # init 1, then train 2 + eval 1 together: 3 GPUs at once (not 1 + 2 + 1 = 4)
            await e.pods([several(e, "job", q, {"train": {gpu: "2"}, "eval": {gpu: "1"}},
                                  {"fetch": {gpu: "1"}})])
            (job,) = await e.wait_bound(1)
            rec = decode_allocation(job["metadata"]["annotations"][names.ANN_ALLOCATION])
            assert len(rec.devices) == 3 and len({d.index for d in rec.devices}) == 3
            assert all(d.milli == 1000 for d in rec.devices)

            async def charged():
                _, doc = await e.kube.request("GET", f"{QUEUES}/{q}")
                st = doc.get("status") or {}
                return st if (st.get("usage") or {}).get("gpu") == 3 else None

            st = await wait_until(charged, TIMEOUT, "the queue charged 3 GPUs")
            assert st["admitted"] == 1
            # the queue is full at 3: one more GPU waits, naming the queue
            await e.pods([e.pod("one-more", q)])

            async def held():
                got = [condition(p) for p in await e.list()
                       if p["metadata"]["name"] == "one-more" and condition(p)]
                return got[0] if got else None

            reason, message = await wait_until(held, TIMEOUT, "one-more held")
            assert message.startswith("gpugov: over-quota") and q in message, message

    asyncio.run(main())


def test_containers_asking_different_shapes_are_refused_naming_them(k8s_control_plane) -> None:
    gpu = names.GPU_RESOURCE

    async def main() -> None:
        async with env(k8s_control_plane) as e:
            await e.add_nodes(1, 2)
            q = await e.queue("q")
            e.start_scheduler()
            await e.pods([several(e, "mixed", q, {
                "a": {gpu: "1"}, "b": {gpu: "1", "nvidia.com/gpumem": "10240"}})])

            async def refused():
                got = [condition(p) for p in await e.list() if condition(p)]
                return got[0] if got else None

            reason, message = await wait_until(refused, TIMEOUT, "mixed refused")
            assert "container 'a', container 'b': ask for different GPU shapes (1 whole GPU " \
                   "vs 1 soft slice (10240 MiB))" in message, message
            assert "give every GPU container of the pod the same per-device ask" in message

    asyncio.run(main())
