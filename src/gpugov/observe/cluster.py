"""Reading pods and nodes from the Kubernetes API (kubernetes_asyncio), as the API's JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config


class ClusterError(RuntimeError):
    """The cluster could not be read; the message says why."""


async def api_client(kubeconfig: Path | None) -> client.ApiClient:
    """An API client from a kubeconfig file (or the in-cluster service account)."""
    try:
        if kubeconfig is not None:
            if not kubeconfig.is_file():
                raise ClusterError(f"--kubeconfig {kubeconfig}: no such file")
            cfg = client.Configuration()
            await config.load_kube_config(config_file=str(kubeconfig),
                                          client_configuration=cfg)
            return client.ApiClient(configuration=cfg)
        config.load_incluster_config()
        return client.ApiClient()
    except ClusterError:
        raise
    except Exception as e:  # the loaders raise many types for one cause: bad config
        raise ClusterError(f"cannot load Kubernetes config "
                           f"{kubeconfig or '(in-cluster)'}: {e}") from None


async def _list(api: client.ApiClient, call: str) -> list[dict[str, Any]]:
    core = client.CoreV1Api(api)
    try:
        resp = await getattr(core, call)(_preload_content=False)
        body = json.loads(await resp.read())
    except Exception as e:  # network, TLS, auth, HTTP status: all mean "cannot read"
        raise ClusterError(f"cannot list from the Kubernetes API ({call}): {e}") from None
    return list(body.get("items") or [])


async def read_cluster(api: client.ApiClient) -> tuple[list[dict[str, Any]],
                                                       list[dict[str, Any]]]:
    """All pods and all nodes, as plain dicts (the API's JSON)."""
    pods = await _list(api, "list_pod_for_all_namespaces")
    nodes = await _list(api, "list_node")
    return pods, nodes


QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL = "gpugov.io", "v1alpha1", "queues"
TENANT_PLURAL = "tenants"


async def _custom(api: client.ApiClient, plural: str) -> list[dict[str, Any]] | None:
    custom = client.CustomObjectsApi(api)
    what = f"{plural} ({QUEUE_GROUP}/{QUEUE_VERSION})"
    try:
        resp = await custom.list_cluster_custom_object(QUEUE_GROUP, QUEUE_VERSION, plural,
                                                       _preload_content=False)
        body = json.loads(await resp.read())
    except client.exceptions.ApiException as e:
        if e.status == 404:
            return None
        raise ClusterError(f"cannot list {what}: {e.status} {e.reason}") from None
    except Exception as e:  # network, TLS, auth
        raise ClusterError(f"cannot list {what}: {e}") from None
    return list(body.get("items") or [])


async def read_queues(api: client.ApiClient) -> list[dict[str, Any]] | None:
    """The cluster's `Queue` objects (gpugov.io/v1alpha1), or None when the CRD is absent."""
    return await _custom(api, QUEUE_PLURAL)


async def read_power_domains(api: client.ApiClient) -> list[dict[str, Any]] | None:
    """The cluster's `PowerDomain` objects, or None when the CRD is absent (docs/power.md)."""
    return await _custom(api, "powerdomains")


@dataclass(frozen=True)
class Tenancy:
    """Which (tenant, queue) each namespace is charged to, by the Tenant objects alone (the
    webhook's rules), never by what a pod's annotations claim."""

    tenants: list[dict[str, Any]]
    queues: dict[str, str | None]
    labels: dict[str, dict[str, str]]

    def owner(self, namespace: str) -> tuple[str, str]:
        """(tenant, queue); `unknown` for a namespace no usable Tenant claims."""
        from gpugov.k8s.webhook.tenancy import TenancyError, resolve

        try:
            res = resolve(namespace, self.labels.get(namespace, {}), self.tenants, self.queues)
        except TenancyError:
            return "unknown", "unknown"
        return res.tenant, res.queue


async def read_tenancy(api: client.ApiClient) -> Tenancy | None:
    """Tenants, Queues and namespace labels; None when the cluster has no Tenant (the Tenant
    CRD is absent or empty): charges then come from the webhook's annotations."""
    tenants = await _custom(api, TENANT_PLURAL)
    if not tenants:
        return None
    queues = {str((q.get("metadata") or {}).get("name")): (q.get("spec") or {}).get("parent")
              for q in await read_queues(api) or []}
    labels: dict[str, dict[str, str]] = {}
    if any("namespaceSelector" in (t.get("spec") or {}) for t in tenants):
        for ns in await _list(api, "list_namespace"):
            meta = ns.get("metadata") or {}
            labels[str(meta.get("name"))] = dict(meta.get("labels") or {})
    return Tenancy(tenants, queues, labels)
