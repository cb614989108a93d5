"""The webhook's watch-fed tenancy cache against the real kube-apiserver: changes are honoured
at their watch event, a restarted or expired watch lists again, and nothing is decided on a
copy that is not synced (a live read, or a refusal that says why)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from kubernetes_asyncio import client

from gpugov.k8s import annotations as ann
from gpugov.k8s import crds
from gpugov.k8s.devcluster.dev import (
    apply_webhook_configurations,
    create_defaults,
    install_crds,
    start_webhook,
)
from gpugov.k8s.devcluster.plane import probe
from gpugov.k8s.scheduler.kube import Kube
from gpugov.k8s.webhook import registration
from gpugov.k8s.webhook.cache import NAMESPACES, QUEUES, TENANTS, Limits, TenancyCache
from gpugov.k8s.webhook.server import TenancySource
from gpugov.k8s.webhook.tenancy import TenancyError

TEAM = "gpugov-cache-test/team"
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def cluster(k8s_control_plane):
    asyncio.run(install_crds(k8s_control_plane.kubeconfig))
    asyncio.run(create_defaults(k8s_control_plane.kubeconfig))
    return k8s_control_plane


async def _create(cluster, plural: str, name: str, spec: dict) -> None:
    async with cluster.api() as api:
        await client.CustomObjectsApi(api).create_cluster_custom_object(
            crds.GROUP, crds.VERSION, plural,
            {"apiVersion": crds.API_VERSION, "kind": plural[:-1].capitalize(),
             "metadata": {"name": name}, "spec": spec})


async def _patch_tenant(cluster, name: str, spec: dict) -> None:
    async with cluster.api() as api:
        await client.CustomObjectsApi(api).patch_cluster_custom_object(
            crds.GROUP, crds.VERSION, "tenants", name, {"spec": spec}, _content_type=MERGE)


async def _until(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


class _Tenancy:
    """A cache and the webhook's TenancySource on it, as `gpugov webhook` runs them."""

    def __init__(self, kube: Kube, cache: TenancyCache) -> None:
        self.kube, self.cache = kube, cache
        self.source = TenancySource(kube.api, cache)

    @classmethod
    async def open(cls, cluster, kubeconfig=None, start: bool = True, **kw) -> _Tenancy:
        # the webhook's own ServiceAccount and RBAC (list + watch), unless told otherwise
        kc = kubeconfig or await cluster.component_kubeconfig("webhook")
        kube = await Kube.from_kubeconfig(kc)
        cache = TenancyCache(kube, backoff=0.2, retry=0.5, **kw)
        if start:
            cache.start()
        return cls(kube, cache)

    async def close(self) -> None:
        await self.cache.close()
        await self.kube.close()

    def live(self) -> int:
        return sum(self.source.live_reads.values())


def test_a_tenant_edit_is_honoured_from_memory_at_its_watch_event(cluster):
    async def run():
        ns = await cluster.unique_namespace("wc")
        await _create(cluster, "queues", f"{ns}-a", {"weight": 1})
        await _create(cluster, "queues", f"{ns}-b", {"weight": 1})
        await _create(cluster, "tenants", ns, {"namespaces": [ns], "queue": f"{ns}-a"})
        t = await _Tenancy.open(cluster)
        try:
            assert await t.cache.wait_synced(30)
            first = await t.source.resolve(ns)
            await _patch_tenant(cluster, ns, {"queue": f"{ns}-b", "trust": "untrusted"})
            tenants = t.cache.cols[TENANTS].objects
            await _until(lambda: tenants[ns]["spec"]["queue"] == f"{ns}-b")  # the one event
            second = await t.source.resolve(ns)
            return ns, first, second, t.live()
        finally:
            await t.close()
    ns, first, second, live = asyncio.run(run())
    assert (first.tenant, first.queue, first.trust.value) == (ns, f"{ns}-a", "internal")
    assert (second.tenant, second.queue, second.trust.value) == (ns, f"{ns}-b", "untrusted")
    assert live == 0  # both answers from memory, none from a list per pod


def test_a_removed_namespace_label_moves_the_namespace_to_the_catch_all(cluster):
    async def run():
        ns = await cluster.unique_namespace("wc", {TEAM: "x"})
        await _create(cluster, "queues", f"{ns}-team", {"weight": 1})
        await _create(cluster, "tenants", f"{ns}-team", {
            "namespaceSelector": {"matchLabels": {TEAM: "x"}}, "queue": f"{ns}-team"})
        t = await _Tenancy.open(cluster)
        try:
            assert await t.cache.wait_synced(30)
            await _until(lambda: f"{ns}-team" in t.cache.cols[TENANTS].objects)
            labelled = await t.source.resolve(ns)
            async with cluster.api() as api:
                await client.CoreV1Api(api).patch_namespace(
                    ns, {"metadata": {"labels": {TEAM: None}}}, _content_type=MERGE)
            await _until(lambda: TEAM not in (t.cache.labels(ns) or {TEAM: ""}))
            unlabelled = await t.source.resolve(ns)
            return ns, labelled, unlabelled, t.live()
        finally:
            await t.close()
    ns, labelled, unlabelled, live = asyncio.run(run())
    assert (labelled.tenant, labelled.queue) == (f"{ns}-team", f"{ns}-team")
    assert (unlabelled.tenant, unlabelled.queue) == ("default", "default")
    assert live == 0


def test_a_namespace_the_copy_does_not_hold_is_read_live(cluster):
    async def run():
        t = await _Tenancy.open(cluster)
        try:
            assert await t.cache.wait_synced(30)
            watch = next(x for x in t.cache._tasks if x.get_name() == f"watch-{NAMESPACES}")
            watch.cancel()  # namespaces are no longer watched: the next one is never seen
            ns = await cluster.unique_namespace("wc", {TEAM: "y"})
            await _create(cluster, "queues", f"{ns}-y", {"weight": 1})
            await _create(cluster, "tenants", f"{ns}-y", {
                "namespaceSelector": {"matchLabels": {TEAM: "y"}}, "queue": f"{ns}-y"})
            await _until(lambda: f"{ns}-y" in t.cache.cols[TENANTS].objects)
            return ns, await t.source.resolve(ns), dict(t.source.live_reads)
        finally:
            await t.close()
    ns, res, live = asyncio.run(run())
    # the Tenant from memory selects by label; the labels were read live, and are the new ones
    assert (res.tenant, res.queue) == (f"{ns}-y", f"{ns}-y")
    assert live == {"namespace-unknown": 1}


def test_watch_restarts_and_410_relist_keep_the_copy_current(cluster):
    async def run():
        ns = await cluster.unique_namespace("wc")
        for q in ("a", "b", "c"):
            await _create(cluster, "queues", f"{ns}-{q}", {"weight": 1})
        await _create(cluster, "tenants", ns, {"namespaces": [ns], "queue": f"{ns}-a"})
        t = await _Tenancy.open(cluster, watch_timeout=1)  # the server ends each stream at 1 s
        col = t.cache.cols[TENANTS]
        try:
            assert await t.cache.wait_synced(30)
            await asyncio.sleep(2.5)  # streams ended and resumed from their resourceVersion
            lists_after_restarts = col.relists
            await _patch_tenant(cluster, ns, {"queue": f"{ns}-b"})
            await _until(lambda: col.objects[ns]["spec"]["queue"] == f"{ns}-b")
            after_restart = await t.source.resolve(ns)
            col.rv = "1"  # the next stream starts from a long-gone version: 410 Gone
            await _until(lambda: col.relists > lists_after_restarts and col.synced)
            await _patch_tenant(cluster, ns, {"queue": f"{ns}-c"})
            await _until(lambda: col.objects[ns]["spec"]["queue"] == f"{ns}-c")
            after_relist = await t.source.resolve(ns)
            return (ns, lists_after_restarts, col.relists, after_restart, after_relist,
                    t.live())
        finally:
            await t.close()
    ns, lists1, lists2, res1, res2, live = asyncio.run(run())
    assert lists1 == 1  # a stream the server ended is resumed, not listed again
    assert lists2 == 2  # the expired version was listed again, once
    assert res1.queue == f"{ns}-b" and res2.queue == f"{ns}-c"
    assert live == 0


def test_without_a_synced_copy_a_pod_is_resolved_live_or_refused_with_the_reason(cluster):
    async def run():
        ns = await cluster.unique_namespace("wc")
        await _create(cluster, "queues", f"{ns}-q", {"weight": 1})
        await _create(cluster, "tenants", ns, {"namespaces": [ns], "queue": f"{ns}-q"})
        # never started: nothing listed yet, so every answer is a live read
        cold = await _Tenancy.open(cluster, start=False)
        # an identity that may not list Tenants: neither the copy nor a live read works
        denied = await _Tenancy.open(cluster, await cluster.tenant_kubeconfig(ns))
        try:
            res = await cold.source.resolve(ns)
            await asyncio.sleep(1.0)  # its lists are refused (403) and retried
            assert not denied.cache.synced(TENANTS)
            with pytest.raises(TenancyError) as refused:
                await denied.source.resolve(ns)
            return ns, res, cold.source.live_reads, str(refused.value)
        finally:
            await cold.close()
            await denied.close()
    ns, res, live, message = asyncio.run(run())
    assert (res.tenant, res.queue) == (ns, f"{ns}-q") and live == {"not-synced": 1}
    assert message.startswith("cannot read gpugov Tenants/Queues from the API (")
    assert "its in-memory copy is not usable either (tenants: " in message


def test_a_collection_over_its_limit_is_not_kept_and_pods_are_read_live(cluster):
    async def run():
        ns = await cluster.unique_namespace("wc")
        await _create(cluster, "queues", f"{ns}-q", {"weight": 1})
        await _create(cluster, "tenants", ns, {"namespaces": [ns], "queue": f"{ns}-q"})
        limits = Limits(objects={TENANTS: 1, QUEUES: 10_000, NAMESPACES: 100_000})
        t = await _Tenancy.open(cluster, limits=limits)
        try:
            await _until(lambda: "more than 1 tenants" in t.cache.cols[TENANTS].problem)
            return ns, len(t.cache.cols[TENANTS].objects), await t.source.resolve(ns), \
                dict(t.source.live_reads)
        finally:
            await t.close()
    ns, kept, res, live = asyncio.run(run())
    assert kept == 0
    assert (res.tenant, res.queue) == (ns, f"{ns}-q") and live == {"not-synced": 1}


def test_a_write_the_webhook_allowed_is_read_live_until_its_event_arrives(cluster):
    async def run():
        ns = await cluster.unique_namespace("wc")
        await _create(cluster, "queues", f"{ns}-a", {"weight": 1})
        await _create(cluster, "queues", f"{ns}-b", {"weight": 1})
        await _create(cluster, "tenants", ns, {"namespaces": [ns], "queue": f"{ns}-a"})
        t = await _Tenancy.open(cluster)
        try:
            assert await t.cache.wait_synced(30)
            await _until(lambda: ns in t.cache.cols[TENANTS].objects)
            async with cluster.api() as api:
                obj = await client.CustomObjectsApi(api).get_cluster_custom_object(
                    crds.GROUP, crds.VERSION, "tenants", ns)
            # what WebhookApp.validate does when it allows an edit of the Tenant
            t.cache.expect("Tenant", obj)
            pending = t.cache.problem()[0]
            before = await t.source.resolve(ns)  # read live: the write may land any moment
            await _patch_tenant(cluster, ns, {"queue": f"{ns}-b"})
            await _until(lambda: t.cache.problem() == ("", ""))  # its event cleared the mark
            after = await t.source.resolve(ns)
            return ns, pending, before, after, dict(t.source.live_reads)
        finally:
            await t.close()
    ns, pending, before, after, live = asyncio.run(run())
    assert pending == "write-pending"
    assert (before.queue, after.queue) == (f"{ns}-a", f"{ns}-b")
    assert live == {"write-pending": 1}  # the answer after the event came from memory


# -- through the webhook process behind the apiserver ----------------------------------------
SCOPE = {"gpugov-webhook-cache-e2e": "true"}  # only these namespaces' pods reach this webhook


@pytest.fixture(scope="module")
def hooked(cluster):
    async def up() -> str:
        kc = await cluster.component_kubeconfig("webhook")  # its own RBAC: list + watch
        url = start_webhook(cluster.plane, kubeconfig=kc)
        objs = registration.configurations(cluster.plane.ca.pair.cert, url=url)
        for o in objs:
            for hook in o["webhooks"]:
                if "namespaceSelector" in hook:
                    hook["namespaceSelector"]["matchLabels"] = dict(SCOPE)
        await apply_webhook_configurations(cluster.kubeconfig, objs)
        return url
    cluster.cache_webhook_url = asyncio.run(up())
    yield cluster
    cluster.plane.procs.stop("gpugov-webhook")

    async def down() -> None:
        async with cluster.api() as api:
            reg = client.AdmissionregistrationV1Api(api)
            await reg.delete_mutating_webhook_configuration(registration.NAME)
            await reg.delete_validating_webhook_configuration(registration.NAME)
    asyncio.run(down())


def _gpu_pod(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [
        {"name": "main", "image": "busybox",
         "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"}}}]}}


def test_a_tenant_edited_mid_burst_is_honoured_by_every_later_pod(hooked):
    async def run():
        ns = await hooked.unique_namespace("wce", SCOPE)
        await _create(hooked, "queues", f"{ns}-a", {"weight": 1})
        await _create(hooked, "queues", f"{ns}-b", {"weight": 1})
        await _create(hooked, "tenants", ns, {"namespaces": [ns], "queue": f"{ns}-a"})
        created: list[tuple[float, str]] = []  # (when its create was sent, its queue)
        async with hooked.api() as api:
            core = client.CoreV1Api(api)
            sem = asyncio.Semaphore(8)

            async def one(i: int) -> None:
                async with sem:
                    sent = time.monotonic()
                    pod = await core.create_namespaced_pod(ns, _gpu_pod(f"p{i}"))
                    created.append((sent, pod.metadata.annotations[ann.QUEUE]))

            burst = asyncio.gather(*(one(i) for i in range(80)))
            await _until(lambda: len(created) >= 15)
            await _patch_tenant(hooked, ns, {"queue": f"{ns}-b"})  # mid-burst
            edited = time.monotonic()
            await burst
        return ns, created, edited
    ns, created, edited = asyncio.run(run())
    after = [q for sent, q in created if sent > edited]
    assert after, "the burst ended before the edit"
    assert set(after) == {f"{ns}-b"}  # no pod sent after the edit returned got the old queue
    assert {q for _, q in created} == {f"{ns}-a", f"{ns}-b"}


def test_the_webhook_exports_its_latency_and_its_cache_state(hooked):
    async def run():
        ns = await hooked.unique_namespace("wce", SCOPE)
        async with hooked.api() as api:
            await client.CoreV1Api(api).create_namespaced_pod(ns, _gpu_pod("m"))
    asyncio.run(run())
    body = probe(hooked.cache_webhook_url + "/metrics", hooked.plane.ssl_context())
    assert body is not None
    text = body.decode()
    assert 'gpugov_webhook_review_seconds_bucket{le="0.02",webhook="mutate"}' in text
    count = next(line for line in text.splitlines()
                 if line.startswith('gpugov_webhook_review_seconds_count{webhook="mutate"}'))
    assert float(count.split()[-1]) >= 1
    for kind in (TENANTS, QUEUES, NAMESPACES):
        assert f'gpugov_webhook_cache_synced{{kind="{kind}"}} 1.0' in text
