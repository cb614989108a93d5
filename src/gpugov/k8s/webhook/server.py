"""The admission webhook's HTTPS server (aiohttp): /mutate, /validate, /healthz, /metrics.

Tenancy comes from the API on each GPU pod (Tenants and Queues are few and the apiserver serves
lists from its watch cache), so a Tenant created a moment ago is honoured; when the API cannot
be read the last answer is used, and with none the pod is refused with the reason. A body that
is not an AdmissionReview gets HTTP 400 and is counted; nothing ever crashes the server.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gpugov.k8s import annotations as ann
from gpugov.k8s.crds import GROUP, VERSION
from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.resources import RequestError
from gpugov.k8s.webhook import admission
from gpugov.k8s.webhook.tenancy import Resolution, TenancyError, resolve

log = logging.getLogger("gpugov.webhook")
MAX_BODY = 4 * 1024 * 1024


class TenancySource:
    """Reads Tenants, Queues and namespace labels; remembers the last good read."""

    def __init__(self, api: client.ApiClient | None) -> None:
        self.api = api
        self._last: tuple[list[dict[str, Any]], dict[str, str | None]] | None = None
        self._ns_labels: dict[str, dict[str, str]] = {}

    async def queues(self) -> dict[str, str | None]:
        """Queue name -> parent, from the API (or the last good read)."""
        if self.api is None:
            return {}
        try:
            items = (await client.CustomObjectsApi(self.api).list_cluster_custom_object(
                GROUP, VERSION, "queues"))["items"]
        except Exception as exc:
            log.warning("cannot list queues: %s", exc)
            return self._last[1] if self._last else {}
        return {q["metadata"]["name"]: (q.get("spec") or {}).get("parent") for q in items}

    async def resolve(self, namespace: str) -> Resolution:
        if self.api is None:
            raise TenancyError("gpugov's webhook runs without API access; cannot resolve "
                               "the namespace's Tenant")
        custom = client.CustomObjectsApi(self.api)
        try:
            tenants = (await custom.list_cluster_custom_object(GROUP, VERSION, "tenants"))["items"]
            queues = {q["metadata"]["name"]: (q.get("spec") or {}).get("parent") for q in
                      (await custom.list_cluster_custom_object(GROUP, VERSION, "queues"))["items"]}
            self._last = (tenants, queues)
        except Exception as exc:  # API down or CRDs missing: fall back to the last good read
            if self._last is None:
                raise TenancyError(f"cannot read gpugov Tenants/Queues from the API ({exc})"
                                   ) from None
            log.warning("using cached tenancy: %s", exc)
            tenants, queues = self._last
        labels: dict[str, str] = {}
        if any("namespaceSelector" in (t.get("spec") or {}) for t in tenants):
            try:
                ns = await client.CoreV1Api(self.api).read_namespace(namespace)
                labels = dict(ns.metadata.labels or {})
                self._ns_labels[namespace] = labels
            except Exception as exc:
                labels = self._ns_labels.get(namespace, {})
                log.warning("namespace %s labels unavailable (%s); using cached", namespace, exc)
        return resolve(namespace, labels, tenants, queues)


class WebhookApp:
    """The aiohttp application and its metrics."""

    def __init__(self, tenancy: TenancySource, scheduler_name: str = ann.SCHEDULER_NAME) -> None:
        self.tenancy = tenancy
        self.scheduler_name = scheduler_name
        self.registry = CollectorRegistry()
        self.reviews = Counter("gpugov_webhook_reviews_total", "Admission reviews answered",
                               ["webhook", "outcome"], registry=self.registry)
        self.bad = Counter("gpugov_webhook_bad_requests_total",
                           "Requests that were not AdmissionReview v1 (answered 400)",
                           ["reason"], registry=self.registry)
        self.errors = Counter("gpugov_webhook_errors_total",
                              "Reviews that failed inside the webhook", ["webhook"],
                              registry=self.registry)
        self.app = web.Application(client_max_size=MAX_BODY)
        self.app.router.add_post("/mutate", self.mutate)
        self.app.router.add_post("/validate", self.validate)
        self.app.router.add_get("/healthz", self.healthz)
        self.app.router.add_get("/metrics", self.metrics)

    async def _review(self, request: web.Request) -> dict[str, Any] | web.Response:
        try:
            body = await request.read()
            return admission.parse_review(body)
        except admission.ReviewError as exc:
            self.bad.labels("not_admission_review").inc()
            log.warning("bad request from %s: %s", request.remote, exc)
            return web.json_response({"error": str(exc)}, status=400)
        except web.HTTPRequestEntityTooLarge:
            self.bad.labels("too_large").inc()
            return web.json_response({"error": f"body larger than {MAX_BODY} bytes"},
                                     status=413)

    async def mutate(self, request: web.Request) -> web.Response:
        req = await self._review(request)
        if isinstance(req, web.Response):
            return req
        try:
            namespace = req.get("namespace") or "default"
            resolution: Resolution | TenancyError | None = None
            if _asks_for_gpu(req):  # only GPU pods cost API reads
                try:
                    resolution = await self.tenancy.resolve(namespace)
                except TenancyError as exc:
                    resolution = exc

            def sync_resolve(ns: str) -> Resolution:
                if isinstance(resolution, TenancyError):
                    raise resolution
                assert resolution is not None
                return resolution
            out = admission.mutate(req, sync_resolve, self.scheduler_name)
        except Exception as exc:  # never crash; refuse the GPU pod with the reason
            self.errors.labels("mutate").inc()
            log.exception("mutate failed")
            out = admission.response(req["uid"], False, f"gpugov webhook error: {exc}", code=500)
        self.reviews.labels("mutate", "allowed" if out["response"]["allowed"] else "denied").inc()
        return web.json_response(out)

    async def validate(self, request: web.Request) -> web.Response:
        req = await self._review(request)
        if isinstance(req, web.Response):
            return req
        try:
            if req.get("kind", {}).get("kind") in ("Tenant", "Queue"):
                out = admission.tenancy_warnings(req, await self.tenancy.queues())
            else:
                out = admission.validate(req, self.scheduler_name)
        except Exception as exc:
            self.errors.labels("validate").inc()
            log.exception("validate failed")
            out = admission.response(req["uid"], False, f"gpugov webhook error: {exc}", code=500)
        self.reviews.labels("validate",
                            "allowed" if out["response"]["allowed"] else "denied").inc()
        return web.json_response(out)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})


def _asks_for_gpu(req: dict[str, Any]) -> bool:
    pod = req.get("object")
    if req.get("kind", {}).get("kind") != "Pod" or not isinstance(pod, dict):
        return False
    try:
        return admission.pod_request(pod) is not None
    except RequestError:
        return False  # refused by mutate before tenancy is needed


def ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


async def serve(cert: Path, key: Path, host: str, port: int, kubeconfig: Path | None,
                scheduler_name: str = ann.SCHEDULER_NAME,
                ready: asyncio.Event | None = None) -> None:
    """Run until cancelled. Without `kubeconfig`, uses the in-cluster ServiceAccount."""
    from kubernetes_asyncio import config

    if kubeconfig is not None:
        ctx = api_client(kubeconfig)
    else:
        config.load_incluster_config()
        ctx = _incluster()
    async with ctx as api:
        hook = WebhookApp(TenancySource(api), scheduler_name)
        runner = web.AppRunner(hook.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context(cert, key))
        await site.start()
        log.info("gpugov webhook listening on https://%s:%d", host, port)
        if ready is not None:
            ready.set()
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()


class _incluster:
    async def __aenter__(self) -> client.ApiClient:
        self.api = client.ApiClient()
        return self.api

    async def __aexit__(self, *exc: object) -> None:
        await self.api.close()
