"""Raw JSON access to the API through kubernetes_asyncio's ApiClient (auth, TLS, pooling).

The scheduler reads and writes plain dicts: decoding 10,000s of pods into generated model
classes costs more than scheduling them, and some answers (a Binding's `Status`) do not
decode at all. `request` returns (HTTP status, parsed body) and never raises for an HTTP
error status; `watch` yields (type, object) events of one list+watch stream.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
from kubernetes_asyncio import client, config

JSON = "application/json"
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
               "all_proxy")
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class Kube:
    """A thin JSON client over one kubernetes_asyncio ApiClient."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._session: aiohttp.ClientSession | None = None
        # the fast path skips aiohttp's per-request proxy lookup (trust_env, a thread hop per
        # request): only when no proxy is configured in the environment
        self._fast_ok = not any(os.environ.get(v) for v in _PROXY_VARS)

    def _own_session(self) -> aiohttp.ClientSession:
        """A session on the ApiClient's connector (its TLS and client certificate)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=self.api.rest_client.pool_manager.connector, connector_owner=False,
                trust_env=False, read_bufsize=2**21)
        return self._session

    @classmethod
    async def from_kubeconfig(cls, path: Path | str, pool: int = 128) -> Kube:
        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(path), client_configuration=cfg)
        cfg.connection_pool_maxsize = pool
        return cls(client.ApiClient(cfg))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self.api.close()

    async def request(self, method: str, path: str, body: Any = None,
                      query: list[tuple[str, str]] | None = None, content_type: str = JSON,
                      timeout: float | None = 60.0) -> tuple[int, Any]:
        rest = self.api.rest_client
        if self._fast_ok and not (getattr(rest, "proxy", None)
                                  or getattr(rest, "server_hostname", None)):
            return await self.fast_path(method, path, body, query, content_type, timeout)
        resp = await self.api.call_api(
            path, method, query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": JSON}, body=body,
            auth_settings=["BearerToken"], _preload_content=False,
            _return_http_data_only=True, _request_timeout=timeout)
        try:
            data = await resp.read()
        finally:
            resp.release()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = {"message": data[:200].decode("utf-8", "replace")}
        return resp.status, parsed

    async def fast_path(self, method: str, path: str, body: Any,
                    query: list[tuple[str, str]] | None, content_type: str,
                    timeout: float | None) -> tuple[int, Any]:
        """The same request on the ApiClient's own session (TLS, client certificate) and
        auth headers, without its generic per-call serialisation (the hot path of binding
        thousands of pods: about a third of the client's CPU per request)."""
        headers = {"Content-Type": content_type, "Accept": JSON, **self.api.default_headers}
        await self.api.update_params_for_auth(headers, [], ["BearerToken"])
        url = self.api.configuration.host + path
        if query:
            url += "?" + urlencode(query)
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        resp = await self._own_session().request(
            method, url, data=data, headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout))
        try:
            raw = await resp.read()
        finally:
            resp.release()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = {"message": raw[:200].decode("utf-8", "replace")}
        return resp.status, parsed

    async def list_all(self, path: str, page: int = 1000, label_selector: str = ""
                       ) -> tuple[list[dict[str, Any]], str]:
        """Every object of a collection (paginated) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query = [("limit", str(page))] + ([("continue", token)] if token else [])
            if label_selector:
                query.append(("labelSelector", label_selector))
            status, doc = await self.request("GET", path, query=query)
            if status == 404:
                return [], ""  # the resource (a CRD) is not installed
            if status != 200:
                raise RuntimeError(f"GET {path}: HTTP {status}: {_message(doc)}")
            items.extend(doc.get("items") or [])
            meta = doc.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                return items, meta.get("resourceVersion", "")

    async def watch(self, path: str, resource_version: str,
                    timeout_s: int = 300) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Events after `resource_version` until the server ends the stream."""
        query = [("watch", "1"), ("resourceVersion", resource_version),
                 ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_s))]
        resp = await self.api.call_api(
            path, "GET", query_params=query, header_params={"Accept": JSON},
            auth_settings=["BearerToken"], _preload_content=False,
            _return_http_data_only=True, _request_timeout=timeout_s + 30)
        try:
            if resp.status == 410:
                raise WatchExpired(path)
            if resp.status != 200:
                raise RuntimeError(f"watch {path}: HTTP {resp.status}")
            buf = b""
            while True:
                chunk = await resp.content.readany()
                if not chunk:
                    return
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    kind, obj = ev.get("type", ""), ev.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise WatchExpired(path)
                        raise RuntimeError(f"watch {path}: {_message(obj)}")
                    yield kind, obj
        finally:
            resp.release()


def _message(doc: Any) -> str:
    if isinstance(doc, dict):
        return str(doc.get("message") or doc.get("reason") or doc)
    return str(doc)


def message(doc: Any) -> str:
    """The human part of an API error body."""
    return _message(doc)
