"""The webhook's in-memory copy of Tenants, Queues and namespace labels, fed by list + watch.

Why: listing Tenants and Queues (and reading the namespace) for every GPU pod made admission
about four times slower than plain pod creation. Here each collection is listed once, then
watched from the list's resourceVersion; a 410 Gone (or any broken stream) lists it again.

Never stale without saying so: a collection is `synced` only between a complete list and the
next error; while any collection the webhook needs is not synced, `TenancySource` reads the
API live (and refuses with the reason when it cannot), never the old or empty copy.

Read-your-writes for what the webhook reviews itself: a Tenant or Queue write the webhook has
just allowed (`expect`) makes GPU pods read live until that write's watch event arrives (or
`EXPECT_TTL` passes, if the write was refused later), so a Tenant created or edited a moment
ago is honoured by the next pod, not only after the event.

Bounded: at most `Limits` objects and characters per collection (objects are kept slim:
a Tenant's name and spec, a Queue's parent, a namespace's labels); past a limit the collection
is dropped and read live until a fresh list fits again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpugov.k8s.crds import GROUP, VERSION
from gpugov.k8s.scheduler.kube import Kube, WatchExpired

log = logging.getLogger("gpugov.webhook.cache")

#: seconds a write the webhook allowed keeps pods on live reads when no event comes for it
EXPECT_TTL = 10.0
#: seconds between lists of a collection that is missing (CRD not installed) or over a limit
RETRY = 10.0
#: objects per page when listing
PAGE = 500

TENANTS, QUEUES, NAMESPACES = "tenants", "queues", "namespaces"
PATHS = {TENANTS: f"/apis/{GROUP}/{VERSION}/tenants",
         QUEUES: f"/apis/{GROUP}/{VERSION}/queues",
         NAMESPACES: "/api/v1/namespaces"}
#: the kind of a reviewed object -> its collection
KINDS = {"Tenant": TENANTS, "Queue": QUEUES}


@dataclass(frozen=True)
class Limits:
    """Most objects and characters (JSON of the slim copy) kept per collection."""

    objects: Mapping[str, int] = field(default_factory=lambda: {
        TENANTS: 10_000, QUEUES: 10_000, NAMESPACES: 100_000})
    chars: Mapping[str, int] = field(default_factory=lambda: {
        TENANTS: 8 << 20, QUEUES: 2 << 20, NAMESPACES: 16 << 20})


def _slim(kind: str, obj: Mapping[str, Any]) -> tuple[str, Any, int]:
    """(name, what the webhook keeps of `obj`, its size in characters)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    if kind == TENANTS:
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        kept: Any = {"metadata": {"name": name}, "spec": spec}
        return name, kept, len(name) + len(json.dumps(spec, separators=(",", ":")))
    if kind == QUEUES:
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        parent = spec.get("parent")
        kept = parent if isinstance(parent, str) else None
        return name, kept, len(name) + len(kept or "")
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    kept = {str(k): str(v) for k, v in labels.items()}
    return name, kept, len(name) + sum(len(k) + len(v) for k, v in kept.items())


class Overflow(Exception):
    """A collection is larger than its limit."""


@dataclass
class Collection:
    """One watched collection: objects by name, and whether they are complete and current."""

    kind: str
    max_objects: int
    max_chars: int
    objects: dict[str, Any] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    chars: int = 0
    rv: str = ""
    synced: bool = False
    #: why the collection is not kept ("" = it is)
    problem: str = "not listed yet"
    relists: int = 0

    def replace(self, items: list[dict[str, Any]]) -> None:
        self.objects, self.sizes, self.chars = {}, {}, 0
        for obj in items:
            self.put(obj)

    def put(self, obj: Mapping[str, Any]) -> None:
        name, kept, size = _slim(self.kind, obj)
        old = self.sizes.get(name, 0)
        if name not in self.objects and len(self.objects) >= self.max_objects:
            raise Overflow(f"more than {self.max_objects} {self.kind}")
        if self.chars - old + size > self.max_chars:
            raise Overflow(f"{self.kind} larger than {self.max_chars} characters")
        self.objects[name], self.sizes[name] = kept, size
        self.chars += size - old

    def drop(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        self.objects.pop(name, None)
        self.chars -= self.sizes.pop(name, 0)

    def clear(self, problem: str) -> None:
        self.objects, self.sizes, self.chars = {}, {}, 0
        self.synced, self.rv, self.problem = False, "", problem


class TenancyCache:
    """Tenants, Queues and namespace labels kept current by list + watch (see the module)."""

    def __init__(self, kube: Kube, limits: Limits | None = None, watch_timeout: int = 300,
                 backoff: float = 1.0, retry: float = RETRY) -> None:
        self.kube = kube
        limits = limits or Limits()
        self.cols = {k: Collection(k, limits.objects[k], limits.chars[k]) for k in PATHS}
        self.watch_timeout = watch_timeout
        self.backoff = backoff
        self.retry = retry
        #: bumped on every change: memoised resolutions are valid for one generation
        self.generation = 0
        self._expected: dict[tuple[str, str], tuple[float, str]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        self.on_change: list[Callable[[], None]] = []

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(c), name=f"watch-{c.kind}")
                       for c in self.cols.values()]

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        session = getattr(self.kube, "_session", None)  # the lists' session (not the api's)
        if session is not None and not session.closed:
            await session.close()

    async def wait_synced(self, timeout: float) -> bool:
        """Wait until every collection is synced (False after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while not all(c.synced for c in self.cols.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 0.5))
        return True

    # -- reads ----------------------------------------------------------------------------
    def synced(self, kind: str) -> bool:
        return self.cols[kind].synced

    def tenants(self) -> list[dict[str, Any]]:
        return list(self.cols[TENANTS].objects.values())

    def queues(self) -> dict[str, str | None]:
        return dict(self.cols[QUEUES].objects)

    def labels(self, namespace: str) -> dict[str, str] | None:
        """The namespace's labels; None when not known here (not synced, or not seen yet)."""
        col = self.cols[NAMESPACES]
        return col.objects.get(namespace) if col.synced else None

    def problem(self) -> tuple[str, str]:
        """(code, words): why tenancy cannot be served from memory now; ("", "") = it can.
        Codes: `not-synced`, `write-pending`."""
        for kind in (TENANTS, QUEUES):
            col = self.cols[kind]
            if not col.synced:
                return "not-synced", f"{kind}: {col.problem}"
        expected = self._expire()
        if expected:
            kind, name = next(iter(expected))
            return "write-pending", f"a write of {kind[:-1]} {name} is not in the watch yet"
        return "", ""

    def expect(self, kind: str, obj: Mapping[str, Any]) -> None:
        """The webhook allowed a write of this Tenant or Queue: read live until it is seen."""
        col = KINDS.get(kind)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = meta.get("name")
        if col is None or not isinstance(name, str):
            return
        if len(self._expected) >= 1000:  # a flood of writes: the oldest give way (live reads)
            self._expected.pop(next(iter(self._expected)))
        self._expected[(col, name)] = (time.monotonic() + EXPECT_TTL,
                                       str(meta.get("resourceVersion") or ""))

    def _expire(self) -> dict[tuple[str, str], tuple[float, str]]:
        """Drop expectations past their time; the rest (a copy: review threads call this
        while the event loop changes the dict)."""
        if not self._expected:
            return {}
        now = time.monotonic()
        expected = dict(self._expected)
        for key, (t, _) in expected.items():
            if t < now:
                self._expected.pop(key, None)
        return {k: v for k, v in expected.items() if v[0] >= now}

    def _seen(self, kind: str, etype: str, obj: Mapping[str, Any]) -> None:
        """A watch event arrived: the write expected for this object (if any) is in."""
        if not self._expected:
            return
        meta = obj.get("metadata") or {}
        key = (kind, str(meta.get("name", "")))
        want = self._expected.get(key)
        if want is None:
            return
        old = want[1]
        rv = str(meta.get("resourceVersion") or "")
        if etype == "DELETED" and not old:
            return  # a create is expected; this is an older object going away
        if old and rv == old:
            return  # the object as it was before the write
        if old.isdigit() and rv.isdigit() and int(rv) < int(old):
            return
        self._expected.pop(key, None)

    # -- the watch loop -------------------------------------------------------------------
    def _bump(self) -> None:
        self.generation += 1
        self._changed.set()
        for fn in self.on_change:
            fn()

    async def _list(self, col: Collection) -> str:
        """List `col` page by page into memory; its resourceVersion ("" = not installed)."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query = [("limit", str(PAGE))] + ([("continue", token)] if token else [])
            status, doc = await self.kube.request("GET", PATHS[col.kind], query=query)
            if status == 404:
                return ""
            if status != 200 or not isinstance(doc, dict):
                raise RuntimeError(f"list {col.kind}: HTTP {status}: "
                                   f"{str((doc or {}).get('message', doc))[:200]}")
            items.extend(doc.get("items") or [])
            if len(items) > col.max_objects:
                raise Overflow(f"more than {col.max_objects} {col.kind}")
            meta = doc.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                col.replace(items)
                return str(meta.get("resourceVersion") or "")

    async def _run(self, col: Collection) -> None:
        while True:
            try:
                if not col.rv:
                    col.synced = False
                    rv = await self._list(col)
                    if not rv:
                        col.clear(f"the {col.kind} collection is not served by the API "
                                  "(CRD not installed?)")
                        self._bump()
                        await asyncio.sleep(self.retry)
                        continue
                    col.rv, col.synced, col.problem = rv, True, ""
                    col.relists += 1
                    self._bump()
                async for etype, obj in self.kube.watch(PATHS[col.kind], col.rv,
                                                        self.watch_timeout):
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or col.rv)
                    if etype != "BOOKMARK":
                        if etype == "DELETED":
                            col.drop(obj)
                        else:
                            col.put(obj)
                        self._seen(col.kind, etype, obj)
                        self._bump()
                    col.rv = rv
                # the server ended the stream (timeoutSeconds): watch on from col.rv
            except asyncio.CancelledError:
                col.synced = False
                raise
            except WatchExpired:
                log.info("watch %s: resourceVersion %s expired (410); listing again",
                         col.kind, col.rv)
                col.synced, col.rv, col.problem = False, "", "listing again after 410 Gone"
                self._bump()
            except Overflow as exc:
                log.warning("%s: not kept in memory (%s); reading the API per pod", col.kind,
                            exc)
                col.clear(str(exc))
                self._bump()
                await asyncio.sleep(self.retry)
            except Exception as exc:  # connection reset, apiserver restart, 403 ...
                log.warning("watch %s: %s; listing again", col.kind, exc)
                col.synced, col.rv = False, ""
                col.problem = f"listing again after an error ({str(exc)[:200]})"
                self._bump()
                await asyncio.sleep(self.backoff)
