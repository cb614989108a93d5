"""Async API access to a (local) cluster through kubernetes_asyncio, and node creation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.rest import ApiException


@asynccontextmanager
async def api_client(kubeconfig: Path | str,
                     pool_size: int = 64) -> AsyncIterator[client.ApiClient]:
    """An ApiClient for `kubeconfig`, closed on exit; `pool_size` = HTTP connection pool."""
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    api = client.ApiClient(cfg)
    try:
        yield api
    finally:
        await api.close()


async def create_nodes(api: client.ApiClient, nodes: Iterable[dict[str, Any]],
                       concurrency: int = 32, replace: bool = False) -> list[str]:
    """Create Node objects with their status (capacity, allocatable); returns their names.

    Node create accepts status; kwok then keeps the capacity and adds Ready conditions.
    An existing node of the same name is replaced when `replace`, else it is an error.
    """
    core = client.CoreV1Api(api)
    sem = asyncio.Semaphore(concurrency)

    async def one(node: dict[str, Any]) -> str:
        name = node["metadata"]["name"]
        async with sem:
            try:
                await core.create_node(node)
            except ApiException as exc:
                if exc.status != 409 or not replace:
                    raise
                await core.delete_node(name)
                await core.create_node(node)
        return name

    return list(await asyncio.gather(*(one(n) for n in nodes)))


#: the taint the apiserver puts on every new node; the node lifecycle controller (not run in
#: the local plane: kwok's nodes have no kubelet lease) removes it once the node is Ready
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


async def wait_nodes_ready(api: client.ApiClient, names: Iterable[str],
                           timeout: float = 60.0) -> None:
    """Until kwok has marked every node Ready (TimeoutError names the ones that are not),
    then remove their `node.kubernetes.io/not-ready` taint, as the node lifecycle controller
    does, so pods without tolerations can land on them."""
    core = client.CoreV1Api(api)
    want = set(names)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        ready = {}
        nodes = await core.list_node()
        for n in nodes.items:
            for c in n.status.conditions or []:
                if c.type == "Ready" and c.status == "True":
                    ready[n.metadata.name] = n
        left = want - set(ready)
        if not left:
            for name in want:
                taints = ready[name].spec.taints or []
                keep = [api.sanitize_for_serialization(t) for t in taints
                        if t.key != NOT_READY_TAINT]
                if len(keep) < len(taints):
                    await core.patch_node(name, [{"op": "replace", "path": "/spec/taints",
                                                  "value": keep}])
            return
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"nodes not Ready after {timeout:.0f} s: "
                               f"{', '.join(sorted(left)[:10])}")
        await asyncio.sleep(0.2)
