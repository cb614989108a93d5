"""The tenant controller: puts each Tenant's fences in its namespaces and keeps them there.

One pass (`reconcile_once`) reads Tenants, namespaces and every object labelled
`gpugov.io/tenant`, computes what each Tenant wants (`fences`), and creates what is missing,
replaces what drifted (an edited quota is restored), deletes what no Tenant wants any more
(a namespace that left the Tenant loses its fences), and writes one condition per fence to
the Tenant's status. Passes run on every watch event of those kinds (a deleted NetworkPolicy
or a new namespace is repaired/fenced within a pass) and at least every `resync` seconds.

A namespace is fenced for the Tenant the webhook resolves it to (`tenancy.resolve`'s rule:
listed beats selected, the most specific selector wins); system namespaces never are.
Cluster-dependent refusals leave the fence as it was, with the reason in the status, never
half applied: a ServiceAccount subject that does not exist (RBAC), a quota below what the
namespace already uses (ResourceQuota), malformed or below-floor guardrails (every fence).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s import identities
from gpugov.k8s.crds import GROUP, VERSION
from gpugov.k8s.quantity import parse_quantity
from gpugov.k8s.tenants import fences
from gpugov.k8s.tenants.checks import is_catch_all, system_namespaces
from gpugov.k8s.tenants.guardrails import GuardrailError, Guardrails, parse
from gpugov.k8s.tenants.objects import KINDS, content_same, key, ops
from gpugov.k8s.webhook.tenancy import TenancyError, resolve
from gpugov.model.isolation import TrustTier

log = logging.getLogger("gpugov.tenants")
SELECTOR = fences.TENANT_LABEL
MERGE = "application/merge-patch+json"


@dataclass
class Outcome:
    """What one pass did for one Tenant: per fence (ok, reason, message), its namespaces."""

    namespaces: list[str] = field(default_factory=list)
    fences: dict[str, tuple[bool, str, str]] = field(default_factory=dict)


def owners(namespaces: Mapping[str, Mapping[str, str]], tenants: list[dict[str, Any]],
           skip: tuple[str, ...]) -> dict[str, str]:
    """namespace -> the Tenant that fences it (the webhook's resolution rule)."""
    leaves = {(t.get("spec") or {}).get("queue", ""): None for t in tenants}
    out = {}
    for ns, labels in namespaces.items():
        if ns in skip:
            continue
        try:
            out[ns] = resolve(ns, labels, tenants, leaves).tenant
        except TenancyError:
            continue  # no Tenant, or claimed ambiguously (the webhook refuses its pods)
    return out


def pod_usage(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """What a namespace's live pods hold, in ResourceQuota keys (pods, requests.*, limits.*
    and bare names meaning requests)."""
    use: dict[str, Any] = {"pods": 0}
    for p in pods:
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        use["pods"] += 1
        for c in (p.get("spec") or {}).get("containers") or []:
            res = c.get("resources") or {}
            for part in ("requests", "limits"):
                for r, v in (res.get(part) or {}).items():
                    try:
                        q = parse_quantity(str(v))
                    except ValueError:
                        continue
                    use[f"{part}.{r}"] = use.get(f"{part}.{r}", 0) + q
                    if part == "requests":
                        use[r] = use.get(r, 0) + q
    return use


def _amount(value: Any) -> Fraction:
    return Fraction(value) if isinstance(value, int | Fraction) else parse_quantity(str(value))


def below_usage(hard: Mapping[str, str], used: Mapping[str, Any]) -> list[str]:
    """`key=hard (in use: n)` for every quota key set below what is already used."""
    out = []
    for k, v in hard.items():
        if k in used:
            have = _amount(used[k])
            if parse_quantity(str(v)) < have:
                shown = used[k] if isinstance(used[k], str) else f"{float(have):g}"
                out.append(f"{k}={v} (in use: {shown})")
    return out


class TenantController:
    def __init__(self, api: client.ApiClient, system_namespace: str = identities.SYSTEM_NAMESPACE,
                 resync: float = 30.0, tenant_selector: Mapping[str, str] | None = None) -> None:
        self.api = api
        #: only Tenants carrying these labels are fenced (None: every Tenant)
        self.tenant_selector = dict(tenant_selector) if tenant_selector else None
        self.skip = system_namespaces(system_namespace)
        self.resync = resync
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self._wake = asyncio.Event()
        self.passes = 0

    # ------------------------------------------------------------------ one pass
    async def reconcile_once(self) -> dict[str, Outcome]:
        tenants = (await self.custom.list_cluster_custom_object(GROUP, VERSION, "tenants")
                   )["items"]
        ns_list = (await self.core.list_namespace()).items
        namespaces = {n.metadata.name: dict(n.metadata.labels or {}) for n in ns_list
                      if (n.status.phase or "Active") == "Active"}
        owner = owners(namespaces, tenants, self.skip)
        actual: dict[tuple[str, str, str], dict[str, Any]] = {}
        for kind in KINDS:
            items = (await ops(self.api, kind).list(label_selector=SELECTOR)).items
            for o in items:
                d = self.api.sanitize_for_serialization(o)
                d["kind"] = kind
                actual[key(d)] = d
        desired: dict[tuple[str, str, str], dict[str, Any]] = {}
        keep: set[tuple[str, str, str]] = set()  # refused fences stay as they were
        outcomes: dict[str, Outcome] = {}
        wanted_labels: dict[str, dict[str, str]] = {}
        unmanaged = set()
        fence_of: dict[tuple[str, str, str], tuple[str, str]] = {}
        for t in tenants:
            name = t["metadata"]["name"]
            spec = t.get("spec") or {}
            if not self._manages(t):
                unmanaged.add(name)
                continue
            out = outcomes[name] = Outcome(sorted(ns for ns, o in owner.items() if o == name))
            if is_catch_all(spec) and "guardrails" not in spec:
                out.namespaces = []
                for f in fences.FENCES:
                    out.fences[f] = (True, "NotRequested", "a catch-all Tenant "
                                     "(namespaceSelector: {}) is fenced only when it declares "
                                     "spec.guardrails: it would fence every namespace")
                continue
            try:
                trust = TrustTier(spec.get("trust", TrustTier.INTERNAL.value))
                g = parse(name, spec, trust)
            except (GuardrailError, ValueError) as exc:
                for f in fences.FENCES:
                    out.fences[f] = (False, "InvalidGuardrails", str(exc)[:1000])
                keep |= {k for k, o in actual.items()
                         if (o["metadata"].get("labels") or {}).get(SELECTOR) == name}
                for ns in out.namespaces:  # keep its labels too
                    wanted_labels[ns] = {k: v for k, v in namespaces[ns].items()
                                         if k == SELECTOR or k.startswith(fences.PSA_PREFIX)}
                continue
            per_fence: dict[str, list[dict[str, Any]]] = {f: [] for f in fences.FENCES}
            for ns in out.namespaces:
                wanted_labels[ns] = fences.namespace_labels(name, g)
                for fence, obj in fences.namespace_objects(name, ns, g):
                    per_fence[fence].append(obj)
            for fence, obj in fences.cluster_objects(name, spec.get("queue", ""), g):
                per_fence[fence].append(obj)
            refusal = {"RBAC": await self._rbac_refusal(g),
                       "ResourceQuota": await self._quota_refusal(per_fence["ResourceQuota"],
                                                                   actual)}
            for fence in fences.FENCES:
                mine = [k for k, o in actual.items() if o["kind"] in _KINDS_OF[fence] and
                        (o["metadata"].get("labels") or {}).get(SELECTOR) == name]
                if refusal.get(fence):
                    keep |= set(mine)
                    out.fences[fence] = (False, refusal[fence][0], refusal[fence][1])
                    continue
                for obj in per_fence[fence]:
                    desired[key(obj)] = obj
                    fence_of[key(obj)] = (name, fence)
                out.fences[fence] = _done(fence, per_fence[fence], out.namespaces, g)
        keep |= {k for k, o in actual.items()
                 if (o["metadata"].get("labels") or {}).get(SELECTOR) in unmanaged}
        await self._apply_labels({ns: labels for ns, labels in namespaces.items()
                                  if labels.get(SELECTOR) not in unmanaged}, wanted_labels)
        rejected = await self._apply_objects(desired, actual, keep)
        for k, message in rejected.items():  # the apiserver refused it: that fence only
            tenant, fence = fence_of[k]
            outcomes[tenant].fences[fence] = (
                False, "Rejected", f"{k[0]} {'/'.join(x for x in k[1:] if x)}: {message}")
        await self._write_status([t for t in tenants if t["metadata"]["name"] in outcomes],
                                 outcomes)
        self.passes += 1
        return outcomes

    def _manages(self, tenant: Mapping[str, Any]) -> bool:
        if self.tenant_selector is None:
            return True
        labels = (tenant.get("metadata") or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in self.tenant_selector.items())

    async def _rbac_refusal(self, g: Guardrails) -> tuple[str, str] | None:
        missing = []
        for subjects in g.rbac.values():
            for s in subjects:
                if s.kind != "ServiceAccount":
                    continue  # users and groups live outside the cluster: nothing to check
                try:
                    await self.core.read_namespaced_service_account(s.name, s.namespace)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    missing.append(f"{s.namespace}/{s.name}")
        if missing:
            return ("SubjectNotFound",
                    f"ServiceAccount subject(s) {', '.join(sorted(set(missing))[:10])} do not "
                    "exist; no RoleBinding changed: create them or fix spec.guardrails.rbac")
        return None

    async def _quota_refusal(self, quotas: list[dict[str, Any]],
                             actual: Mapping[tuple[str, str, str], dict[str, Any]]
                             ) -> tuple[str, str] | None:
        problems = []
        for q in quotas:
            ns = q["metadata"]["namespace"]
            cur = actual.get(key(q))
            used = ((cur or {}).get("status") or {}).get("used")
            if not used:
                pods = (await self.core.list_namespaced_pod(ns)).items
                used = pod_usage([self.api.sanitize_for_serialization(p) for p in pods])
            low = below_usage(q["spec"]["hard"], used)
            if low:
                problems.append(f"{ns}: {', '.join(low)}")
        if problems:
            return ("BelowUsage", "quota below what the namespace already uses, left as it "
                    f"was: {'; '.join(problems[:10])}; raise spec.guardrails.quota.hard or "
                    "remove pods first")
        return None

    async def _apply_labels(self, namespaces: Mapping[str, Mapping[str, str]],
                            wanted: Mapping[str, Mapping[str, str]]) -> None:
        for ns, labels in namespaces.items():
            want = wanted.get(ns, {})
            ours = {k for k in labels if k == SELECTOR or
                    (SELECTOR in labels and k.startswith(fences.PSA_PREFIX))}
            patch: dict[str, Any] = {k: v for k, v in want.items() if labels.get(k) != v}
            patch.update({k: None for k in ours - set(want)})
            if patch:
                await self.core.patch_namespace(ns, {"metadata": {"labels": patch}},
                                                _content_type=MERGE)

    async def _apply_objects(self, desired: Mapping[tuple[str, str, str], dict[str, Any]],
                             actual: Mapping[tuple[str, str, str], dict[str, Any]],
                             keep: set[tuple[str, str, str]]
                             ) -> dict[tuple[str, str, str], str]:
        """Create, repair and remove; the objects the apiserver refused (e.g. an extra
        NetworkPolicy rule it finds invalid), with its message: they fail alone."""
        rejected: dict[tuple[str, str, str], str] = {}
        for k, obj in desired.items():
            o = ops(self.api, obj["kind"])
            ns = obj["metadata"].get("namespace")
            args = (ns,) if o.namespaced else ()
            cur = actual.get(k)
            try:
                if cur is None:
                    try:
                        await o.create(*args, obj)
                        log.info("created %s %s", obj["kind"], "/".join(k[1:]))
                    except ApiException as exc:
                        if exc.status != 409:
                            raise
                        # there, but without gpugov's label (someone removed it, or made
                        # an object of that name): take it over
                        found = await o.read(obj["metadata"]["name"], *args)
                        body = {**obj, "metadata": {**obj["metadata"], "resourceVersion":
                                                    found.metadata.resource_version}}
                        await o.replace(obj["metadata"]["name"], *args, body)
                        log.info("took over %s %s", obj["kind"], "/".join(k[1:]))
                elif not content_same(obj, cur):
                    if obj["kind"].endswith("RoleBinding") and \
                            not content_same({"kind": "RoleBinding", "subjects": [],
                                              "roleRef": obj["roleRef"]},
                                             {**cur, "subjects": []}):
                        await o.delete(obj["metadata"]["name"], *args)  # roleRef is immutable
                        await o.create(*args, obj)
                    else:
                        body = {**obj, "metadata": {**obj["metadata"], "resourceVersion":
                                                    cur["metadata"]["resourceVersion"]}}
                        await o.replace(obj["metadata"]["name"], *args, body)
                    log.info("repaired %s %s", obj["kind"], "/".join(k[1:]))
            except ApiException as exc:
                # a create answered 404 names something missing (a binding's role, the
                # namespace): reported, retried at the next pass, never in a tight loop
                if exc.status == 409 or (exc.status == 404 and cur is not None):
                    log.debug("%s %s: %s, retrying", obj["kind"], "/".join(k[1:]), exc.status)
                    self._wake.set()  # raced with a deletion or an edit: pass again
                elif exc.status in (400, 403, 404, 422):
                    rejected[k] = _api_message(exc)
                    log.warning("%s %s refused: %s", obj["kind"], "/".join(k[1:]), rejected[k])
                else:
                    raise
        for k in actual:
            if k in desired or k in keep:
                continue
            o = ops(self.api, k[0])
            args = (k[1],) if o.namespaced else ()
            try:
                await o.delete(k[2], *args)
                log.info("removed %s %s", k[0], "/".join(k[1:]))
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return rejected

    async def _write_status(self, tenants: list[dict[str, Any]],
                            outcomes: Mapping[str, Outcome]) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for t in tenants:
            name = t["metadata"]["name"]
            out = outcomes[name]
            old = {c.get("type"): c for c in (t.get("status") or {}).get("conditions") or []}
            conds = []
            for fence, (ok, reason, message) in out.fences.items():
                conds.append(_condition(fence, ok, reason, message, old, now))
            bad = [f for f, (ok, _, _) in out.fences.items() if not ok]
            conds.append(_condition(
                "Ready", not bad, "Fenced" if not bad else "FenceRefused",
                f"all fences in place on {len(out.namespaces)} namespace(s)" if not bad else
                f"not in place: {', '.join(bad)}", old, now))
            status = {"conditions": conds, "namespaces": out.namespaces}
            current = t.get("status") or {}
            if current.get("namespaces") == status["namespaces"] and \
                    [_cmp(c) for c in current.get("conditions") or []] == [_cmp(c) for c in conds]:
                continue
            try:
                await self.custom.patch_cluster_custom_object_status(
                    GROUP, VERSION, "tenants", name, {"status": status},
                    _content_type=MERGE)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    # ------------------------------------------------------------------ loop
    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Pass after pass until `stop`: on watch events (debounced) and every `resync` s."""
        stop = stop or asyncio.Event()
        watchers = [asyncio.create_task(self._watch(fn, **kw)) for fn, kw in self._sources()]
        try:
            while not stop.is_set():
                self._wake.clear()
                t0 = time.monotonic()
                try:
                    await self.reconcile_once()
                    log.debug("pass %d in %.3f s", self.passes, time.monotonic() - t0)
                except Exception as exc:  # the API hiccupped: retry soon, never die
                    log.warning("tenant pass failed: %s", exc)
                    await asyncio.sleep(1.0)
                    continue
                waiter = asyncio.create_task(self._wake.wait())
                stopper = asyncio.create_task(stop.wait())
                await asyncio.wait({waiter, stopper}, timeout=self.resync,
                                   return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
                await asyncio.sleep(0.05)  # debounce a burst of events into one pass
        finally:
            for w in watchers:
                w.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)

    def _sources(self) -> list[tuple[Any, dict[str, Any]]]:
        src: list[tuple[Any, dict[str, Any]]] = [
            (self.custom.list_cluster_custom_object,
             {"group": GROUP, "version": VERSION, "plural": "tenants"}),
            (self.core.list_namespace, {})]
        for kind in KINDS:
            src.append((ops(self.api, kind).list, {"label_selector": SELECTOR}))
        return src

    async def _watch(self, fn: Any, **kw: Any) -> None:
        while True:
            try:
                w = watch.Watch()
                async with w.stream(fn, timeout_seconds=300, **kw) as stream:
                    async for _event in stream:
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # relist on the next pass; watch again shortly
                log.warning("watch %s: %s", getattr(fn, "__name__", fn), exc)
                self._wake.set()
                await asyncio.sleep(1.0)


_KINDS_OF = {"PodSecurity": (), "ResourceQuota": ("ResourceQuota",),
             "LimitRange": ("LimitRange",), "NetworkPolicy": ("NetworkPolicy",),
             "RBAC": ("RoleBinding", "ClusterRole", "ClusterRoleBinding")}


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message", exc.reason))[:500]
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)[:500]


def _done(fence: str, objs: list[dict[str, Any]], namespaces: list[str],
          g: Guardrails) -> tuple[bool, str, str]:
    if fence == "PodSecurity":
        return (True, "Applied", f"pod-security.kubernetes.io/enforce={g.pod_security} on "
                f"{len(namespaces)} namespace(s)")
    if not objs:
        return (True, "NotRequested", "the Tenant's guardrails ask for none")
    return (True, "Applied", f"{len(objs)} object(s) in place")


def _condition(kind: str, ok: bool, reason: str, message: str,
               old: Mapping[str, Mapping[str, Any]], now: str) -> dict[str, Any]:
    status = "True" if ok else "False"
    prev = old.get(kind) or {}
    since = prev.get("lastTransitionTime") if prev.get("status") == status else None
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": since or now}


def _cmp(c: Mapping[str, Any]) -> tuple[Any, ...]:
    return (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))


async def run(kubeconfig: Any, system_namespace: str = identities.SYSTEM_NAMESPACE,
              resync: float = 30.0, tenant_selector: Mapping[str, str] | None = None) -> None:
    """`gpugov tenants`: run the controller until cancelled (in-cluster without kubeconfig)."""
    from kubernetes_asyncio import config

    from gpugov.k8s.devcluster.client import api_client

    if kubeconfig is not None:
        async with api_client(kubeconfig) as api:
            await TenantController(api, system_namespace, resync, tenant_selector).run()
        return
    config.load_incluster_config()
    api = client.ApiClient()
    try:
        await TenantController(api, system_namespace, resync, tenant_selector).run()
    finally:
        await api.close()
