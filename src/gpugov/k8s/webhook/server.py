"""The admission webhook's HTTPS server (aiohttp): /mutate, /validate, /healthz, /metrics.

Tenancy comes from a watch-fed copy of Tenants, Queues and namespace labels (`cache.py`);
while it is not synced, or a Tenant/Queue write the webhook allowed is not in it yet, the API
is read live, and when neither answers the pod is refused with the reason. A body that is not
an AdmissionReview gets HTTP 400 and is counted; nothing ever crashes the server.
`gpugov_webhook_review_seconds` is the time a review spends inside the webhook.

Nothing a tenant writes can stall it: bodies are limited (`MAX_BODY`). A pod review of at most
`INLINE_BODY` bytes whose spec has none of `POOLED_FIELDS` is parsed and decided on the event
loop: its cost is bounded by its size (a few ms at worst, measured), and the hop to a thread
and back cost more than the decision (inside the webhook, p50 3.5 ms pooled vs 0.6 ms inline
under a burst on the loaded 2-core machine). Every other review is parsed and decided in one
step of a small thread pool, within a time budget (`REVIEW_BUDGET`); a review over budget is
refused with that message and counted (`gpugov_webhook_timeouts_total`). With `client_ca`,
TLS requires a client certificate signed by that CA (the apiserver's, see `devcluster.plane`),
so nobody else can call it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import importlib
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gpugov.k8s import annotations as ann
from gpugov.k8s import identities
from gpugov.k8s.crds import GROUP, VERSION
from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.scheduler.kube import Kube
from gpugov.k8s.webhook import admission, dra_translate
from gpugov.k8s.webhook.cache import TenancyCache
from gpugov.k8s.webhook.tenancy import Resolution, TenancyError, resolve

# admission's lazy imports, loaded now rather than during the first review on the event loop
importlib.import_module("gpugov.k8s.driver_capabilities")
importlib.import_module("gpugov.k8s.scheduler.translate")
log = logging.getLogger("gpugov.webhook")
MAX_BODY = 4 * 1024 * 1024
#: seconds one review may take (parsing, and again deciding) before it is refused
REVIEW_BUDGET = 2.0
#: threads deciding reviews (a stuck one cannot take the event loop with it)
WORKERS = 4
#: seconds `serve` waits for the first complete lists before listening
SYNC_WAIT = 10.0
#: largest pod review decided on the event loop (a hostile pod this size with no
#: `POOLED_FIELDS` takes at most ~6 ms, about the 5 ms a pool thread holds the GIL anyway)
INLINE_BODY = 16 * 1024
#: pod spec fields whose checks may cost more (the scheduler's affinity translation): pooled
POOLED_FIELDS = ("affinity", "topologySpreadConstraints")


class ReviewTimeout(Exception):
    """A review ran past its budget."""


class _NotInMemory(Exception):
    """The GPU pod's tenancy must be read from the API before deciding."""

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self.namespace = namespace


class TenancySource:
    """Tenants, Queues and namespace labels: from the watch-fed `TenancyCache` while it is
    synced, else read live from the API; never from a stale or empty copy (a pod that cannot be
    resolved either way is refused with the reason)."""

    def __init__(self, api: client.ApiClient | None, cache: TenancyCache | None = None) -> None:
        self.api = api
        self.cache = cache
        #: namespace -> (cache generation, its Resolution then)
        self._memo: dict[str, tuple[int, Resolution]] = {}
        #: why pods were resolved by a live read (counted by WebhookApp's metrics)
        self.live_reads: dict[str, int] = {}

    def expect(self, kind: str, obj: dict[str, Any]) -> None:
        """The webhook allowed a write of a Tenant/Queue: honour it before its watch event."""
        if self.cache is not None:
            self.cache.expect(kind, obj)

    def _live(self, why: str) -> None:
        self.live_reads[why] = self.live_reads.get(why, 0) + 1

    async def _list(self, plural: str) -> list[dict[str, Any]]:
        return (await client.CustomObjectsApi(self.api).list_cluster_custom_object(
            GROUP, VERSION, plural))["items"]

    async def queues(self) -> dict[str, str | None]:
        """Queue name -> parent, from memory or the API ({} when neither can say)."""
        if self.api is None:
            return {}
        if self.cache is not None and not self.cache.problem()[0]:
            return self.cache.queues()
        try:
            items = await self._list("queues")
        except Exception as exc:
            log.warning("cannot list queues: %s", exc)
            return {}
        return {q["metadata"]["name"]: (q.get("spec") or {}).get("parent") for q in items}

    async def tenant_context(self, system_namespace: str
                             ) -> tuple[list[dict[str, Any]], dict[str, dict[str, str]]]:
        """The Tenants and the labels of the system namespaces, for reviewing a Tenant (a
        namespace that cannot be read counts with its name label only, as the apiserver
        sets it)."""
        from gpugov.k8s.tenants.checks import system_namespaces

        if self.api is None:
            return [], {}
        cache = self.cache if self.cache is not None and not self.cache.problem()[0] else None
        if cache is not None:
            tenants = cache.tenants()
        else:
            try:
                tenants = await self._list("tenants")
            except Exception as exc:
                log.warning("cannot list tenants: %s", exc)
                tenants = []
        protected: dict[str, dict[str, str]] = {}
        for ns in system_namespaces(system_namespace):
            labels = {"kubernetes.io/metadata.name": ns}
            known = cache.labels(ns) if cache is not None else None
            if known is not None:
                labels.update(known)
            else:
                try:
                    got = await client.CoreV1Api(self.api).read_namespace(ns)
                    labels.update(got.metadata.labels or {})
                except Exception:
                    pass
            protected[ns] = labels
        return tenants, protected

    def from_memory(self, namespace: str) -> tuple[Resolution | None, str, str]:
        """(the namespace's Resolution, "", "") from the watch-fed copy, or (None, code, why)
        when it must be read from the API. Memory only, so the review threads may call it."""
        cache = self.cache
        if self.api is None or cache is None:
            return None, "no-cache", "no cache"
        code, why = cache.problem()
        if code:
            return None, code, why
        gen = cache.generation  # taken first: an answer is memoised for the data it read
        hit = self._memo.get(namespace)
        if hit is not None and hit[0] == gen:
            return hit[1], "", ""
        tenants = cache.tenants()
        labels: dict[str, str] | None = {}
        if any("namespaceSelector" in (t.get("spec") or {}) for t in tenants):
            labels = cache.labels(namespace)
            if labels is None:
                return None, "namespace-unknown", "the namespace is not in memory"
        try:
            res = resolve(namespace, labels, tenants, cache.queues())
        except TenancyError:  # never refuse on a copy a moment old
            return None, "refusal-checked", "a refusal is checked live"
        if len(self._memo) >= 10_000:
            self._memo = {}
        self._memo[namespace] = (gen, res)
        return res, "", ""

    async def resolve(self, namespace: str) -> Resolution:
        """The namespace's Resolution: from memory, else read live; TenancyError says why
        neither gives one."""
        if self.api is None:
            raise TenancyError("gpugov's webhook runs without API access; cannot resolve "
                               "the namespace's Tenant")
        res, code, why = self.from_memory(namespace)
        if res is not None:
            return res
        self._live(code)
        return await self._resolve_live(namespace, why)

    async def _resolve_live(self, namespace: str, why: str) -> Resolution:
        """The old path: list Tenants and Queues, read the namespace."""
        try:
            tenants = await self._list("tenants")
            queues = {q["metadata"]["name"]: (q.get("spec") or {}).get("parent")
                      for q in await self._list("queues")}
        except Exception as exc:  # API down or CRDs missing: refuse, never guess
            raise TenancyError(
                f"cannot read gpugov Tenants/Queues from the API ({str(exc)[:300]}); its "
                f"in-memory copy is not usable either ({why}); retry when the API answers"
            ) from None
        labels: dict[str, str] = {}
        if any("namespaceSelector" in (t.get("spec") or {}) for t in tenants):
            try:
                ns = await client.CoreV1Api(self.api).read_namespace(namespace)
                labels = dict(ns.metadata.labels or {})
            except Exception as exc:
                raise TenancyError(f"cannot read namespace {namespace!r}'s labels from the "
                                   f"API ({str(exc)[:300]}); Tenants select namespaces by "
                                   "label, so its Tenant is unknown") from None
        return resolve(namespace, labels, tenants, queues)


class WebhookApp:
    """The aiohttp application and its metrics."""

    def __init__(self, tenancy: TenancySource, scheduler_name: str = ann.SCHEDULER_NAME,
                 system_namespace: str = identities.SYSTEM_NAMESPACE,
                 budget: float = REVIEW_BUDGET,
                 options: admission.Options = admission.DEFAULT_OPTIONS) -> None:
        self.tenancy = tenancy
        self.options = options
        self.scheduler_name = scheduler_name
        self.system_namespace = system_namespace
        self.budget = budget
        self.pool = concurrent.futures.ThreadPoolExecutor(WORKERS, "gpugov-review")
        self.registry = CollectorRegistry()
        self.reviews = Counter("gpugov_webhook_reviews_total", "Admission reviews answered",
                               ["webhook", "outcome"], registry=self.registry)
        self.bad = Counter("gpugov_webhook_bad_requests_total",
                           "Requests that were not AdmissionReview v1 (answered 400)",
                           ["reason"], registry=self.registry)
        self.errors = Counter("gpugov_webhook_errors_total",
                              "Reviews that failed inside the webhook", ["webhook"],
                              registry=self.registry)
        self.timeouts = Counter("gpugov_webhook_timeouts_total",
                                "Reviews refused because they ran past the time budget",
                                ["webhook"], registry=self.registry)
        self.latency = Histogram(
            "gpugov_webhook_review_seconds", "Time inside the webhook per review, from the "
            "body read to the answer", ["webhook"], registry=self.registry,
            buckets=(.0005, .001, .002, .003, .005, .0075, .01, .015, .02, .03, .05, .1, .25,
                     .5, 1, 2.5))
        self._cache_metrics()
        self.app = web.Application(client_max_size=MAX_BODY)
        self.app.router.add_post("/mutate", self.mutate)
        self.app.router.add_post("/validate", self.validate)
        self.app.router.add_get("/healthz", self.healthz)
        self.app.router.add_get("/metrics", self.metrics)
        self.app.on_cleanup.append(self._close)

    def _cache_metrics(self) -> None:
        """The tenancy cache's state, read at each scrape."""
        self.live_reads = Gauge("gpugov_webhook_tenancy_live_reads", "GPU pods whose tenancy "
                                "was read from the API instead of memory, by why (since "
                                "start)", ["why"], registry=self.registry)
        cache = self.tenancy.cache
        if cache is None:
            return
        synced = Gauge("gpugov_webhook_cache_synced", "1 while the watched collection is "
                       "complete and current", ["kind"], registry=self.registry)
        objects = Gauge("gpugov_webhook_cache_objects", "Objects kept in memory", ["kind"],
                        registry=self.registry)
        relists = Gauge("gpugov_webhook_cache_lists", "Complete lists of the collection "
                        "(1 + relists after 410 Gone or errors)", ["kind"],
                        registry=self.registry)
        for kind, col in cache.cols.items():
            synced.labels(kind).set_function(lambda c=col: float(c.synced))
            objects.labels(kind).set_function(lambda c=col: float(len(c.objects)))
            relists.labels(kind).set_function(lambda c=col: float(c.relists))

    async def _close(self, _app: web.Application) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in the pool, within the budget; ReviewTimeout past it."""
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.pool, functools.partial(fn, *args))
        try:
            return await asyncio.wait_for(fut, self.budget)
        except TimeoutError:
            raise ReviewTimeout from None

    async def _review(self, request: web.Request, webhook: str,
                      step: Callable[[dict[str, Any]], dict[str, Any] | None],
                      inline: bool = False
                      ) -> tuple[dict[str, Any], dict[str, Any] | None | Exception] | web.Response:
        """Parse the body and answer it: (request, `step(request)`: the answer, or None when
        the API must be read first, or the exception the decision raised); or the HTTP error
        for a body that is no review. With `inline`, a small plain pod review is parsed and
        decided on the event loop (`INLINE_BODY`); otherwise both happen in one pool step."""
        parsed: list[dict[str, Any]] = []

        def decide(req: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None | Exception]:
            try:
                return req, step(req)
            except Exception as exc:  # a decision failed: refused with it, not a 400
                return req, exc

        def work(body: bytes) -> tuple[dict[str, Any], dict[str, Any] | None | Exception]:
            req = admission.parse_review(body)
            parsed.append(req)
            return decide(req)
        try:
            body = await request.read()
            if inline and len(body) <= INLINE_BODY:
                req = admission.parse_review(body)
                parsed.append(req)
                return decide(req) if _cheap(req) else await self._run(decide, req)
            return await self._run(work, body)
        except admission.ReviewError as exc:
            self.bad.labels("not_admission_review").inc()
            log.warning("bad request from %s: %s", request.remote, exc)
            return web.json_response({"error": str(exc)}, status=400)
        except web.HTTPRequestEntityTooLarge:
            self.bad.labels("too_large").inc()
            return web.json_response({"error": f"body larger than {MAX_BODY} bytes"},
                                     status=413)
        except ReviewTimeout as exc:
            if parsed:  # read in time; deciding ran over: refused with the reason
                return parsed[0], exc
            self.bad.labels("too_slow").inc()
            self.timeouts.labels(webhook).inc()
            return web.json_response({"error": f"body not read within {self.budget:g} s"},
                                     status=400)
        except Exception as exc:  # anything else a body can provoke is the caller's fault
            self.bad.labels("unreadable").inc()
            log.warning("unreadable request from %s: %r", request.remote, exc)
            return web.json_response({"error": f"body is not an AdmissionReview: {exc!r}"[:500]},
                                     status=400)

    def _answer(self, webhook: str, out: dict[str, Any]) -> web.Response:
        self.reviews.labels(webhook, "allowed" if out["response"]["allowed"] else "denied").inc()
        return web.json_response(out)

    def _over_budget(self, webhook: str, req: dict[str, Any]) -> dict[str, Any]:
        self.timeouts.labels(webhook).inc()
        log.warning("review %s ran past %s s", req["uid"], self.budget)
        return admission.response(
            req["uid"], False, f"gpugov: this object took gpugov's webhook longer than "
            f"{self.budget:g} s to review; refused (simplify its GPU request)", code=422)

    def _failed(self, webhook: str, req: dict[str, Any], exc: Exception) -> dict[str, Any]:
        self.errors.labels(webhook).inc()
        log.exception("%s failed: %r", webhook, exc)
        return admission.response(req["uid"], False, f"gpugov webhook error: {exc}"[:1000],
                                  code=500)

    def _mutate_now(self, req: dict[str, Any]) -> dict[str, Any] | _NotInMemory:
        """The mutating answer (on the event loop for a small pod, else in a review thread);
        `_NotInMemory` when a GPU pod's tenancy
        is not in memory (the event loop reads it from the API, then decides again: deciding
        has no side effects). Tenancy is asked for only once the pod asks for a GPU."""
        def from_memory(namespace: str) -> Resolution:
            res = self.tenancy.from_memory(namespace)[0]
            if res is None:
                raise _NotInMemory(namespace)
            return res
        try:
            return admission.mutate(req, from_memory, self.scheduler_name,
                                    self.system_namespace, self.options)
        except _NotInMemory as exc:
            return exc

    async def mutate(self, request: web.Request) -> web.Response:
        start = time.perf_counter()
        got = await self._review(request, "mutate", self._mutate_now, inline=True)
        if isinstance(got, web.Response):
            return got
        req, out = got
        try:
            if isinstance(out, _NotInMemory):  # a GPU pod whose tenancy must be read live
                resolution: Resolution | TenancyError
                try:
                    resolution = await self.tenancy.resolve(out.namespace)
                except TenancyError as exc:
                    resolution = exc
                out = await self._run(admission.mutate, req, _resolver(resolution),
                                      self.scheduler_name, self.system_namespace, self.options)
            elif isinstance(out, Exception):
                raise out
            # DRA mode: write the pod's ResourceClaimTemplates (not on dryRun) or refuse it
            out = await dra_translate.ensure_templates(self.tenancy.api, req, out)
        except ReviewTimeout:
            out = self._over_budget("mutate", req)
        except Exception as exc:  # never crash; refuse the GPU pod with the reason
            out = self._failed("mutate", req, exc)
        self.latency.labels("mutate").observe(time.perf_counter() - start)
        return self._answer("mutate", out)

    def _validate_now(self, req: dict[str, Any]) -> dict[str, Any] | None:
        """A pod's validating answer, in the review thread; None for a Tenant or Queue (they
        are checked against the others, read on the event loop)."""
        if (req.get("kind") or {}).get("kind") in ("Tenant", "Queue"):
            return None
        return admission.validate(req, self.scheduler_name, self.system_namespace)

    async def validate(self, request: web.Request) -> web.Response:
        start = time.perf_counter()
        got = await self._review(request, "validate", self._validate_now)
        if isinstance(got, web.Response):
            return got
        req, out = got
        try:
            if isinstance(out, Exception):
                raise out
            if out is None:
                kind = (req.get("kind") or {}).get("kind")
                queues = await self.tenancy.queues()
                tenants, protected = await self.tenancy.tenant_context(self.system_namespace)
                out = await self._run(admission.review_tenancy, req, queues, tenants,
                                      protected)
                obj = req.get("object")
                if out["response"]["allowed"] and isinstance(obj, dict):
                    self.tenancy.expect(str(kind), obj)  # pods read live until its event
        except ReviewTimeout:
            out = self._over_budget("validate", req)
        except Exception as exc:
            out = self._failed("validate", req, exc)
        self.latency.labels("validate").observe(time.perf_counter() - start)
        return self._answer("validate", out)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        for why, n in list(self.tenancy.live_reads.items()):  # set at scrape time
            self.live_reads.labels(why).set(n)
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})


def _cheap(req: dict[str, Any]) -> bool:
    """The review's object has no spec field whose checks may be costly (`POOLED_FIELDS`)."""
    obj = req.get("object")
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return not isinstance(spec, dict) or not any(f in spec for f in POOLED_FIELDS)


def _resolver(resolution: Resolution | TenancyError | None) -> Callable[[str], Resolution]:
    """`admission.mutate`'s tenancy callback answering with what was resolved."""
    def resolve_tenancy(namespace: str) -> Resolution:
        if isinstance(resolution, TenancyError):
            raise resolution
        if resolution is None:
            raise TenancyError("gpugov: tenancy was not resolved for this pod")
        return resolution
    return resolve_tenancy


def quiet_gc() -> None:
    """Move everything alive at start-up (modules, the API client, the first lists) out of the
    collector's reach: each full collection walked those ~90,000 objects while reviews waited
    (37 ms idle, 140-300 ms on the loaded 2-core machine)."""
    gc.collect()
    gc.freeze()


def ssl_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """The serving context; with `client_ca`, a client certificate signed by it is required
    (the TLS handshake fails without one)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    if client_ca is not None:
        ctx.load_verify_locations(cafile=str(client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


async def serve(cert: Path, key: Path, host: str, port: int, kubeconfig: Path | None,
                scheduler_name: str = ann.SCHEDULER_NAME,
                ready: asyncio.Event | None = None, client_ca: Path | None = None,
                system_namespace: str = identities.SYSTEM_NAMESPACE) -> None:
    """Run until cancelled. Without `kubeconfig`, uses the in-cluster ServiceAccount."""
    from kubernetes_asyncio import config

    if kubeconfig is not None:
        ctx = api_client(kubeconfig)
    else:
        config.load_incluster_config()
        ctx = _incluster()
    async with ctx as api:
        cache = TenancyCache(Kube(api))
        cache.start()
        if not await cache.wait_synced(SYNC_WAIT):  # until then pods are resolved live
            log.warning("tenancy cache not synced after %s s (%s); reading the API per pod "
                        "until it is", SYNC_WAIT, cache.problem()[1])
        # adoption list and resource renames: the chart's env (admission.Options.from_env)
        hook = WebhookApp(TenancySource(api, cache), scheduler_name, system_namespace,
                          options=admission.Options.from_env())
        quiet_gc()
        runner = web.AppRunner(hook.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context(cert, key, client_ca))
        await site.start()
        log.info("gpugov webhook listening on https://%s:%d (client certificates: %s)", host,
                 port, f"required, CA {client_ca}" if client_ca else "not required")
        if ready is not None:
            ready.set()
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
            await cache.close()


class _incluster:
    async def __aenter__(self) -> client.ApiClient:
        self.api = client.ApiClient()
        return self.api

    async def __aexit__(self, *exc: object) -> None:
        await self.api.close()
