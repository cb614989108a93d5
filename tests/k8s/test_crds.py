"""CRDs generated from the config models: committed YAML is fresh; the real apiserver enforces
the schema and CEL rules; the config converts to objects and back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.control.config import parse_config
from gpugov.k8s import crds
from gpugov.k8s.devcluster.dev import install_crds

REPO = Path(__file__).resolve().parents[2]
CONFIG = {
    "queues": [
        {"name": "root", "quota": {"gpu": 16}},
        {"name": "team-a", "parent": "root", "quota": {"gpu": 8, "cpu": 64}, "limit": {"gpu": 12},
         "borrowingLimit": {"gpu": 4}, "weight": 2, "priority": 1},
        {"name": "team-b", "parent": "root", "quota": {"gpu": 8}, "lendingLimit": {"gpu": 2}},
    ],
    "tenants": [{"namespace": "ns-a", "queue": "team-a", "trust": "trusted"},
                {"namespace": "ns-b", "queue": "team-b", "trust": "untrusted"}],
    "priorityClasses": [{"name": "batch", "value": 10, "preemptible": True,
                         "minRuntime": "5m"},
                        {"name": "prod", "value": 1000, "preemptible": False}],
}


def test_committed_crds_match_the_config_models():
    committed = REPO / crds.CRD_DIR
    for name, crd in crds.generate().items():
        path = committed / name
        assert path.exists(), f"{path} missing: run `gpugov crd generate`"
        assert path.read_text() == crds.render(crd), \
            f"{path} is stale: run `gpugov crd generate`"
    assert sorted(p.name for p in committed.glob("*.yaml")) == sorted(crds.generate())


def test_config_round_trips_through_objects():
    cfg = parse_config(CONFIG)
    objs = crds.config_to_objects(cfg)
    kinds = [o["kind"] for o in objs]
    assert kinds.count("Queue") == 3 and kinds.count("Tenant") == 2
    assert kinds.count("PriorityClass") == 2 and kinds.count("PriorityPolicy") == 2
    assert crds.objects_to_config(objs) == cfg


def test_cli_converts_both_ways(tmp_path):
    src = tmp_path / "config.yaml"
    src.write_text(yaml.safe_dump(CONFIG))
    runner = CliRunner()
    out = runner.invoke(app, ["crd", "convert", str(src)])
    assert out.exit_code == 0, out.output
    objs_file = tmp_path / "objects.yaml"
    objs_file.write_text(out.output)
    back = runner.invoke(app, ["crd", "convert", str(objs_file), "--to", "config"])
    assert back.exit_code == 0, back.output
    assert parse_config(yaml.safe_load(back.output)) == parse_config(CONFIG)
    objs_file.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    bad = runner.invoke(app, ["crd", "convert", str(objs_file), "--to", "config"])
    assert bad.exit_code == 2 and "kind 'ConfigMap' is not part of gpugov's config" in bad.output


def test_selector_tenant_has_no_config_form():
    with pytest.raises(crds.ConversionError, match="namespaceSelector has no config form"):
        crds.objects_to_config([
            {"kind": "Queue", "metadata": {"name": "q"}, "spec": {}},
            {"kind": "Tenant", "metadata": {"name": "all"},
             "spec": {"namespaceSelector": {}, "queue": "q"}}])


def _create(cluster, plural: str, body: dict) -> str | None:
    """Create a cluster-scoped gpugov object; returns the apiserver's refusal or None."""
    async def go() -> str | None:
        async with cluster.api() as api:
            try:
                # kubectl's default (--validate=strict) asks the server for Strict
                await client.CustomObjectsApi(api).create_cluster_custom_object(
                    crds.GROUP, crds.VERSION, plural, body, field_validation="Strict")
            except ApiException as exc:
                return f"{exc.status} {json.loads(exc.body)['message']}"
            return None
    return asyncio.run(go())


@pytest.fixture(scope="module")
def with_crds(k8s_control_plane):
    asyncio.run(install_crds(k8s_control_plane.kubeconfig))
    return k8s_control_plane


def test_apiserver_accepts_every_converted_object(with_crds):
    plurals = {"Queue": "queues", "Tenant": "tenants", "PriorityPolicy": "prioritypolicies"}
    made = []
    for o in crds.config_to_objects(parse_config(CONFIG)):
        if o["kind"] == "PriorityClass":
            continue
        o = {**o, "metadata": {"name": f"crd-ok-{o['metadata']['name']}"}}
        spec = dict(o["spec"])
        for key in ("parent", "queue"):  # keep the renamed tree consistent
            if key in spec:
                spec[key] = f"crd-ok-{spec[key]}"
        o["spec"] = spec
        assert _create(with_crds, plurals[o["kind"]], o) is None
        made.append((plurals[o["kind"]], o["metadata"]["name"]))

    async def cleanup() -> None:  # the cluster is shared with other tests
        async with with_crds.api() as api:
            for plural, name in reversed(made):
                await client.CustomObjectsApi(api).delete_cluster_custom_object(
                    crds.GROUP, crds.VERSION, plural, name)
    asyncio.run(cleanup())


@pytest.mark.parametrize("plural,spec,needle", [
    ("queues", {"quota": {"gpu": 8}, "limit": {"gpu": 4}},
     "limit.gpu must be >= quota.gpu"),
    ("queues", {"quota": {"gpu": -1}}, "spec.quota.gpu: Invalid value: -1: "
     "spec.quota.gpu in body should be greater than or equal to 0"),
    ("queues", {"quota": {"gpux": 1}}, 'unknown field "spec.quota.gpux"'),
    ("queues", {"weight": -2}, "spec.weight in body should be greater than or equal to 0"),
    ("tenants", {"queue": "q"}, "set exactly one of namespaces and namespaceSelector"),
    ("tenants", {"namespaces": ["a"], "queue": "q", "trust": "sometimes"},
     'Unsupported value: "sometimes"'),
    ("prioritypolicies", {"minRuntime": "soon"}, "spec.minRuntime in body should match"),
    ("tenants", {"namespaces": ["a"], "queue": "q", "schedulers": [""]},
     "spec.schedulers[0] in body should be at least 1 chars long"),
    ("tenants", {"namespaces": ["a"], "queue": "q", "schedulers": ["v", "v"]},
     'spec.schedulers[1]: Duplicate value: "v"'),
    ("tenants", {"namespaces": ["a"], "queue": "q", "schedulers": [f"s{i}" for i in range(17)]},
     "spec.schedulers: Too many: 17: must have at most 16 items"),
    ("tenants", {"namespaces": ["a"], "queue": "q", "timeSlicing": {"oversubscribe": True}},
     "timeSlicing.oversubscribe needs trust: trusted"),
    ("tenants", {"namespaces": ["a"], "queue": "q", "trust": "trusted",
                 "timeSlicing": {"oversubscribe": "yes"}}, "spec.timeSlicing.oversubscribe"),
])
def test_apiserver_refuses_bad_objects(with_crds, plural, spec, needle):
    kind = {"queues": "Queue", "tenants": "Tenant", "prioritypolicies": "PriorityPolicy"}[plural]
    refusal = _create(with_crds, plural, {"apiVersion": crds.API_VERSION, "kind": kind,
                                          "metadata": {"name": "crd-bad"}, "spec": spec})
    assert refusal is not None and refusal[:3] in ("422", "400"), refusal
    assert needle in refusal, refusal


def test_apiserver_refuses_a_queue_that_is_its_own_parent(with_crds):
    refusal = _create(with_crds, "queues", {"apiVersion": crds.API_VERSION, "kind": "Queue",
                                            "metadata": {"name": "crd-loop"},
                                            "spec": {"parent": "crd-loop"}})
    assert refusal is not None and "a queue cannot be its own parent" in refusal


def test_tenant_lists_the_schedulers_its_gpu_pods_may_name(with_crds):
    assert _create(with_crds, "tenants", {
        "apiVersion": crds.API_VERSION, "kind": "Tenant", "metadata": {"name": "crd-scheds"},
        "spec": {"namespaces": ["crd-scheds"], "queue": "q",
                 "schedulers": ["volcano", "kai-scheduler"]}}) is None

    async def cleanup() -> None:
        async with with_crds.api() as api:
            await client.CustomObjectsApi(api).delete_cluster_custom_object(
                crds.GROUP, crds.VERSION, "tenants", "crd-scheds")
    asyncio.run(cleanup())
    desc = crds.tenant_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"]["properties"]["schedulers"]["description"]
    assert "besides gpugov's" in desc


def test_a_trusted_tenant_may_oversubscribe_time_slices(with_crds):
    assert _create(with_crds, "tenants", {
        "apiVersion": crds.API_VERSION, "kind": "Tenant", "metadata": {"name": "crd-over"},
        "spec": {"namespaces": ["crd-over"], "queue": "q", "trust": "trusted",
                 "timeSlicing": {"oversubscribe": True}}}) is None

    async def cleanup() -> None:
        async with with_crds.api() as api:
            await client.CustomObjectsApi(api).delete_cluster_custom_object(
                crds.GROUP, crds.VERSION, "tenants", "crd-over")
    asyncio.run(cleanup())
