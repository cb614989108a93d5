"""The chart's RBAC against the real apiserver, with real ServiceAccount tokens: each component
may do what it needs and nothing else (no Secrets, no deletes, its own Lease only). The rules
ship inside the package (a wheel carries them, identical to the chart's), and the chart renders
the node-scope admission policy `gpugov.k8s.node_policy` generates."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s import node_policy
from gpugov.k8s.devcluster import build
from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.devcluster.dev import install_crds
from gpugov.k8s.devcluster.rbac import (
    RulesError,
    chart_rules_file,
    load_rules,
    rules_file,
)
from gpugov.observe.cluster import read_cluster, read_queues, read_tenancy

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpugov"

NS = "gpugov-rbac"


async def _status(coro) -> int:
    try:
        await coro
        return 200
    except ApiException as exc:
        return exc.status


def test_components_get_least_privilege(k8s_control_plane):
    cluster = k8s_control_plane
    asyncio.run(install_crds(cluster.kubeconfig))

    async def run() -> dict[str, int]:
        seen: dict[str, int] = {}
        async with cluster.api() as api:  # a Tenant for the reconciler to read
            try:
                await client.CustomObjectsApi(api).create_cluster_custom_object(
                    "gpugov.io", "v1alpha1", "tenants", {
                        "apiVersion": "gpugov.io/v1alpha1", "kind": "Tenant",
                        "metadata": {"name": "rbac-test"},
                        "spec": {"namespaces": [NS], "queue": "rbac-test"}})
            except client.exceptions.ApiException as e:
                if e.status != 409:
                    raise
        async with api_client(await cluster.component_kubeconfig("scheduler", NS)) as api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            coord = client.CoordinationV1Api(api)
            seen["sched list secrets"] = await _status(core.list_secret_for_all_namespaces())
            seen["sched read secret"] = await _status(core.read_namespaced_secret("x", NS))
            seen["sched list pods"] = await _status(core.list_pod_for_all_namespaces())
            seen["sched list nodes"] = await _status(core.list_node())
            seen["sched delete pod"] = await _status(core.delete_namespaced_pod("x", NS))
            seen["sched list queues"] = await _status(
                custom.list_cluster_custom_object("gpugov.io", "v1alpha1", "queues"))
            seen["sched create lease here"] = await _status(coord.create_namespaced_lease(
                NS, {"metadata": {"name": "gpugov-scheduler"}, "spec": {}}))
            seen["sched list leases here"] = await _status(coord.list_namespaced_lease(NS))
            seen["sched get lease elsewhere"] = await _status(
                coord.read_namespaced_lease("gpugov-scheduler", "kube-system"))
            volcano = await _status(custom.list_cluster_custom_object(
                "scheduling.volcano.sh", "v1beta1", "podgroups"))
            seen["sched list volcano podgroups"] = 200 if volcano in (200, 404) else volcano
            seen["sched create clusterrole"] = await _status(
                client.RbacAuthorizationV1Api(api).create_cluster_role(
                    {"metadata": {"name": "escalate"}, "rules": []}))
        async with api_client(await cluster.component_kubeconfig("webhook", NS)) as api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            seen["webhook list tenants"] = await _status(
                custom.list_cluster_custom_object("gpugov.io", "v1alpha1", "tenants"))
            seen["webhook read namespace"] = await _status(core.read_namespace("default"))
            seen["webhook list pods"] = await _status(core.list_pod_for_all_namespaces())
        async with api_client(await cluster.component_kubeconfig("node", NS)) as api:
            core = client.CoreV1Api(api)
            seen["node list pods"] = await _status(core.list_pod_for_all_namespaces())
            seen["node list secrets"] = await _status(core.list_secret_for_all_namespaces())
            seen["node delete node"] = await _status(core.delete_node("x"))
        async with api_client(await cluster.component_kubeconfig("reconciler", NS)) as api:
            core = client.CoreV1Api(api)
            # what `gpugov reconcile` reads, through its own code, under its own rules
            pods, nodes = await read_cluster(api)
            seen["reconciler reads its views"] = 200 if await read_queues(api) is not None \
                and isinstance(pods, list) and isinstance(nodes, list) else 0
            # whom each pod is charged to: the Tenants and namespace labels, under its rules
            seen["reconciler reads tenancy"] = 200 if await read_tenancy(api) is not None \
                else 0
            seen["reconciler list secrets"] = await _status(core.list_secret_for_all_namespaces())
            seen["reconciler patch pod"] = await _status(
                core.patch_namespaced_pod("x", NS, {"metadata": {"labels": {"a": "b"}}}))
        return seen

    assert asyncio.run(run()) == {
        "sched list secrets": 403, "sched read secret": 403, "sched list pods": 200,
        "sched list nodes": 200, "sched delete pod": 403, "sched list queues": 200,
        "sched create lease here": 200, "sched list leases here": 403,
        "sched get lease elsewhere": 403, "sched create clusterrole": 403,
        "sched list volcano podgroups": 200, "reconciler reads tenancy": 200,
        "webhook list tenants": 200, "webhook read namespace": 200, "webhook list pods": 403,
        "node list pods": 200, "node list secrets": 403, "node delete node": 403,
        "reconciler reads its views": 200, "reconciler list secrets": 403,
        "reconciler patch pod": 403,
    }


def test_packaged_rules_are_the_charts() -> None:
    assert rules_file().read_bytes() == chart_rules_file().read_bytes(), (
        "src/gpugov/k8s/data/rbac.yaml differs from deploy/helm/gpugov/files/rbac.yaml; "
        "run: python -m gpugov.k8s.devcluster.rbac --sync")
    assert set(load_rules()) == {"scheduler", "webhook", "node", "reconciler", "tenants"}


def test_unloadable_rules_are_a_clear_error(tmp_path) -> None:
    missing = tmp_path / "none.yaml"
    with pytest.raises(RulesError, match="cannot load gpugov's RBAC rules from"):
        load_rules(missing)
    bad = tmp_path / "bad.yaml"
    bad.write_text("scheduler: {clusterRules: []}\n")
    with pytest.raises(RulesError, match="component 'webhook' has no clusterRules list"):
        load_rules(bad)


def test_a_wheel_ships_the_rules_and_loads_them_outside_the_checkout(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(REPO),
                          "-w", str(tmp_path / "dist")], capture_output=True, text=True,
                         check=False, timeout=600)
    assert out.returncode == 0, out.stderr
    wheel = next((tmp_path / "dist").glob("gpugov-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        assert z.read("gpugov/k8s/data/rbac.yaml") == chart_rules_file().read_bytes()
        z.extractall(tmp_path / "site")  # what installing the wheel puts in site-packages
    probe = ("import gpugov.k8s.devcluster.rbac as r, gpugov.k8s.devcluster.dev as d; "
             "d.check_rules(); print(r.rules_file()); print(sorted(r.load_rules()))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=False, cwd=tmp_path,
                         env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    path, components = run.stdout.splitlines()
    assert Path(path).is_relative_to(tmp_path / "site")
    assert components == "['node', 'reconciler', 'scheduler', 'tenants', 'webhook']"


def test_chart_node_scope_file_is_generated() -> None:
    assert (CHART / "files" / "node-scope.yaml").read_text() == node_policy.chart_file_text(), (
        f"run: python -m gpugov.k8s.node_policy {node_policy.CHART_FILE}")


def test_node_scope_allows_exactly_the_labels_the_agent_owns() -> None:
    from gpugov.node import labels

    allowed = set(node_policy.NODE_LABELS)
    assert labels.OWNED_KEYS | {labels.MIG_CONFIG_STATE} == allowed
    assert labels._OWNED_MIG.pattern == node_policy.NODE_LABEL_PATTERN
    assert labels.MIG_CONFIG not in allowed  # the user's input, never the agent's to change
    assert re.match(node_policy.NODE_LABEL_PATTERN, "nvidia.com/mig-1g.10gb.count")


def test_chart_renders_the_node_scope_policy(helm) -> None:
    out = subprocess.run([str(helm), "template", "rel", str(CHART), "--namespace", "gpu-ops",
                          "--kube-version", build.K8S_VERSION], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    want = [*node_policy.node_scope_policies("gpu-ops", "rel-gpugov", "rel-gpugov-node-scope"),
            *node_policy.scheduler_node_policies("gpu-ops", "rel-gpugov",
                                                 "rel-gpugov-node-scope")]
    got = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")
           and d["metadata"]["name"].startswith("rel-gpugov-node-scope")]
    def by_key(docs: list[dict]) -> dict:
        return {(d["kind"], d["metadata"]["name"]): d["spec"] for d in docs}

    assert len(got) == 6 and by_key(got) == by_key(want)
    sa = next(d for d in docs if d["kind"] == "ServiceAccount"
              and d["metadata"]["name"] == "rel-gpugov-node")
    assert sa["metadata"]["namespace"] == "gpu-ops"
