"""What the DRA kubelet-plugin tests share: an asyncio loop in a thread (the plugin serves
while the test drives the kubelet's DRA manager), the claim source over the test's Kube, an
API client, and a polling wait."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from gpugov.k8s.scheduler.kube import Kube
from gpugov.node.dra.source import KubeClaimSource


class Loop:
    """An asyncio loop in a thread: the plugin serves while the test drives the peer."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60):  # noqa: ANN001, ANN201
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class KubeClaims:
    def __init__(self, kube: Kube, source: KubeClaimSource | None = None) -> None:
        self.kube, self.source = kube, source

    async def preemptible(self, claim: dict) -> bool | None:
        """The plugin's own reading of the pods' priority class (`KubeClaimSource`)."""
        return await self.source.preemptible(claim) if self.source is not None else None

    async def get_claim(self, namespace: str, name: str) -> dict | None:
        """None only on 404 (`ClaimSource`'s contract: the sweep removes a claim's files on
        None); any other answer raises."""
        status, doc = await self.kube.request(
            "GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}")
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError(f"GET resourceclaim {namespace}/{name}: HTTP {status}: {doc}")
        return doc


async def api_client(kubeconfig: Path):  # noqa: ANN202 - kubernetes_asyncio's ApiClient
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


def wait(fn, what: str, timeout: float = 60):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
