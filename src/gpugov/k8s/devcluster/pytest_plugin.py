"""pytest plugin: one real local control plane per test session (`k8s_control_plane`).

Registered from tests/conftest.py. Builds the binaries when they are missing (skips, with the
reason, only where Go is absent), starts etcd + kube-apiserver + kube-controller-manager + kwok
(no kube-scheduler: tests that compare with it start their own), and stops exactly those at the
end of the session. Tests share the cluster, so each should work in its own namespace
(`unique_namespace`) and give its nodes unique names.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from gpugov.k8s.devcluster import build
from gpugov.k8s.devcluster.client import api_client, create_nodes, wait_nodes_ready
from gpugov.k8s.devcluster.cluster_file import load_cluster_file, node_objects
from gpugov.k8s.devcluster.plane import LocalControlPlane

_counter = itertools.count()


class DevCluster:
    """What the fixture yields: the kubeconfig and helpers around one running control plane."""

    def __init__(self, plane: LocalControlPlane) -> None:
        self.plane = plane

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    @property
    def server(self) -> str:
        return self.plane.server

    @property
    def workdir(self) -> Path:
        return self.plane.workdir

    @property
    def bin_dir(self) -> Path:
        return self.plane.bin

    def api(self, kubeconfig: Path | None = None) -> AbstractAsyncContextManager[Any]:
        """`async with cluster.api() as api:` — a kubernetes_asyncio ApiClient (admin)."""
        return api_client(kubeconfig or self.kubeconfig)

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for another identity (see `pki.service_account_user`)."""
        return self.plane.kubeconfig_for(user, groups)

    async def acreate_nodes(self, nodes: list[dict[str, Any]] | Path | str,
                            wait_ready: bool = True) -> list[str]:
        """Create nodes from manifests or a cluster file (cluster.yaml / nodes CSV)."""
        if not isinstance(nodes, list):
            nodes = node_objects(load_cluster_file(nodes))
        async with self.api() as api:
            names = await create_nodes(api, nodes, replace=True)
            if wait_ready:
                await wait_nodes_ready(api, names)
        return names

    def create_nodes(self, nodes: list[dict[str, Any]] | Path | str,
                     wait_ready: bool = True) -> list[str]:
        """Synchronous `acreate_nodes` (do not call from inside a running event loop)."""
        return asyncio.run(self.acreate_nodes(nodes, wait_ready))

    async def component_kubeconfig(self, component: str, namespace: str = "gpugov-system"
                                   ) -> Path:
        """A kubeconfig for the chart's ServiceAccount of `component` (scheduler, webhook,
        node) with exactly the chart's RBAC; the token is a real ServiceAccount token."""
        from gpugov.k8s.devcluster.rbac import apply_component_rbac

        out = self.workdir / f"kubeconfig-{namespace}-{component}"
        return await apply_component_rbac(self.kubeconfig, component, namespace, out)

    async def tenant_kubeconfig(self, namespace: str, name: str = "tenant") -> Path:
        """A kubeconfig acting as a tenant: a real ServiceAccount `name` in `namespace`
        holding only the built-in `edit` ClusterRole there (a RoleBinding), with a
        TokenRequest token: exactly what a team member of a namespace usually has."""
        from gpugov.k8s.devcluster.rbac import tenant_edit_kubeconfig

        out = self.workdir / f"kubeconfig-tenant-{namespace}-{name}"
        return await tenant_edit_kubeconfig(self.kubeconfig, namespace, name, out)

    async def unique_namespace(self, prefix: str = "t",
                               labels: dict[str, str] | None = None) -> str:
        """Create a fresh namespace (name unique in this session) and return its name."""
        from kubernetes_asyncio import client

        name = f"{prefix}-{next(_counter)}"
        async with self.api() as api:
            await client.CoreV1Api(api).create_namespace(
                {"metadata": {"name": name, "labels": labels or {}}})
        return name


def ensure_binaries_or_skip() -> Path:
    """The binary folder; builds what is missing, skips the test only when Go is absent."""
    if build.missing() and build.go_binary() is None:
        pytest.skip("needs Go to build kube-apiserver/etcd/kwok from their Go modules "
                    f"(none cached in {build.bin_dir()}, and `go` is not installed)")
    build.ensure_binaries()
    return build.bin_dir()


@pytest.fixture(scope="session")
def k8s_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A running local control plane for the whole session (etcd, apiserver, KCM, kwok)."""
    ensure_binaries_or_skip()
    # die_with_parent: a test run killed by a timeout leaves no apiserver behind
    plane = LocalControlPlane(tmp_path_factory.mktemp("k8s-plane"), die_with_parent=True)
    plane.start()
    try:
        yield DevCluster(plane)
    finally:
        plane.stop()
