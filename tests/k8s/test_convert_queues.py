"""`gpugov crd convert` on other schedulers' own queue objects (tests/k8s/upstream/queues,
unedited): KAI, Volcano and Kueue queues become gpugov Queues/Tenants with their documented
meaning (units, -1, defaults, cohorts, hierarchies), everything without an equivalent is
reported, bad objects are refused naming the field, and the result is accepted by a real
apiserver with gpugov's CRDs."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.control.config import ConfigError
from gpugov.k8s import crds
from gpugov.k8s.convert import convert_objects
from gpugov.k8s.devcluster.dev import install_crds

UPSTREAM = Path(__file__).parent / "upstream" / "queues"
KUEUEVIZ = sorted(UPSTREAM.glob("kueue/v1beta1-kueueviz-*.yaml"))  # queues, then LocalQueues
# what a user applies together: each file, and Kueue's kueueviz example as its two files
SETS = [[p] for p in sorted(UPSTREAM.glob("*/*.yaml")) if p not in KUEUEVIZ] + [KUEUEVIZ]


def convert(path: Path | list[Path], to: str = "objects", *opts: str) -> tuple[int, str, str]:
    paths = path if isinstance(path, list) else [path]
    r = CliRunner().invoke(app, ["crd", "convert", *map(str, paths), "--to", to, *opts])
    return r.exit_code, r.stdout, r.stderr


def queues(path: Path | list[Path]) -> dict[str, dict]:
    code, out, err = convert(path, "config")
    assert code == 0, err
    return {q["name"]: q for q in yaml.safe_load(out)["queues"]}


@pytest.mark.parametrize("paths", SETS, ids=lambda ps: "+".join(
    f"{p.parent.name}/{p.stem}" for p in ps))
def test_every_upstream_file_converts(paths: list[Path]) -> None:
    code, out, err = convert(paths)
    assert code == 0, err
    objs = list(yaml.safe_load_all(out))
    assert objs and all(o["apiVersion"] == crds.API_VERSION for o in objs)
    crds.objects_to_config(objs)  # a valid gpugov config


def test_kai_units_minus_one_and_defaults() -> None:
    q = queues(UPSTREAM / "kai" / "limited-queue.yaml")
    # quota -1 (unlimited guarantee): no quota written, reported; limit -1: no limit
    assert q["default"]["quota"] == {} and "limit" not in q["default"]
    assert q["test"]["quota"] == {"gpu": 1.0} and q["test"]["limit"] == {"gpu": 1.0}
    assert q["test"]["parent"] == "default" and q["test"]["priority"] == 100  # KAI's default
    _, _, err = convert(UPSTREAM / "kai" / "limited-queue.yaml")
    assert "Queue/default: spec.resources.gpu.quota: -1 (an unlimited guarantee)" in err
    # KAI's units: millicores and MB (10^6 bytes); limit 0/unset = nothing beyond the quota
    conv = convert_objects([{"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                             "metadata": {"name": "research"}, "spec": {"resources": {
                                 "cpu": {"quota": 2000, "limit": 4000, "overQuotaWeight": 2},
                                 "memory": {"quota": 4096},
                                 "gpu": {"quota": 2, "limit": 4, "overQuotaWeight": 3}}}}])
    spec = conv.objects[0]["spec"]
    assert spec["quota"] == {"cpu": 2.0, "memory": pytest.approx(3.814697), "gpu": 2.0}
    assert spec["limit"] == {"cpu": 4.0, "memory": pytest.approx(3.814697), "gpu": 4.0}
    assert spec["weight"] == 3.0  # the gpu weight; the differing cpu one is reported
    assert any("overQuotaWeight" in n.field for n in conv.notes)


def test_volcano_hierarchy_capability_and_reclaimable() -> None:
    q = queues(UPSTREAM / "volcano" / "hierarchical-queues.yaml")
    assert q["root-eng-prod"]["parent"] == "root-eng" and q["root-eng"]["parent"] == "root"
    assert (q["root-eng"]["weight"], q["root-sci"]["weight"]) == (2.0, 8.0)
    assert (q["root-eng-prod"]["weight"], q["root-eng-dev"]["weight"]) == (8.0, 2.0)
    d = queues(UPSTREAM / "volcano" / "deployment-queue.yaml")
    assert d["test"]["limit"] == {"cpu": 2.0} and d["test"]["weight"] == 1.0
    _, _, err = convert(UPSTREAM / "volcano" / "deployment-queue.yaml")
    assert "spec.reclaimable" in err
    conv = convert_objects([{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                             "metadata": {"name": "q1"},
                             "spec": {"parent": "root", "deserved": {"cpu": 2, "memory": "8Gi",
                                                                     "nvidia.com/gpu": 4},
                                      "guarantee": {"resource": {"nvidia.com/gpu": 1}}}}])
    by = {o["metadata"]["name"]: o["spec"] for o in conv.objects}
    assert by["q1"]["quota"] == {"gpu": 4.0, "cpu": 2.0, "memory": 8.0}
    assert by["root"] == {}  # Volcano's implicit root queue


def test_kueue_flavors_cohorts_local_queues() -> None:
    q = queues(UPSTREAM / "kueue" / "admin-shared-quota-setup.yaml")
    # two CPU flavors summed; the virtual cpu_credits resource reported; no cohort: no borrowing
    assert q["team-cluster-queue"]["quota"] == {"cpu": 18.0}
    assert q["team-cluster-queue"]["limit"] == {"cpu": 18.0}
    code, out, err = convert(UPSTREAM / "kueue" / "serving-workloads-sample-hami.yaml",
                             "config")
    cfg = yaml.safe_load(out)
    assert cfg["queues"][0]["quota"] == {"gpu": 20.0, "gpumem": 20.0}  # 20480 MiB
    assert cfg["tenants"] == [{"namespace": "kueue-test", "queue": "hami-queue",
                               "trust": "internal"}]
    assert "total-gpucores" in err and "Deployment/kueue-test/gpu-burn" in err
    conv = convert_objects([
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
         "metadata": {"name": "team-a"}, "spec": {"cohort": "org", "resourceGroups": [
             {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "h100", "resources": [
                 {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 4,
                  "lendingLimit": 2}]}]}], "fairSharing": {"weight": "2"}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"namespace": "ns-a", "name": "lq"}, "spec": {"clusterQueue": "team-a"}}])
    assert not conv.errors
    cfg = crds.objects_to_config(conv.objects)
    a = next(x for x in cfg.queues if x.name == "team-a")
    assert (a.parent, a.quota, a.borrowing_limit, a.lending_limit, a.weight) == (
        "org", {"gpu": 8.0}, {"gpu": 4.0}, {"gpu": 2.0}, 2.0)
    assert [(t.namespace, t.queue) for t in cfg.tenants] == [("ns-a", "team-a")]


def test_kueue_v1beta1_cohort_and_local_queues_without_namespace() -> None:
    code, out, err = convert(KUEUEVIZ, "config", "--namespace", "research")
    assert code == 0, err
    cfg = yaml.safe_load(out)
    by = {q["name"]: q for q in cfg["queues"]}
    # the cohort becomes the parent Queue (no Cohort object: created, noted)
    assert by["llm-cluster-queue"]["parent"] == "ai-for-humanity-foundation"
    assert by["llm-cluster-queue"]["quota"] == {"cpu": 0.3, "memory": 0.292969}  # 300m, 300Mi
    assert "ai-for-humanity-foundation" in by and "created" in err
    # LocalQueues that name no namespace land where they are applied; one queue per namespace
    assert [t["namespace"] for t in cfg["tenants"]] == ["research"]
    assert "a gpugov namespace has one queue; kept the first" in err


@pytest.mark.parametrize(("obj", "needle"), [
    ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "x"},
      "spec": {"cohortName": "org"}}, "kueue.x-k8s.io/v1beta1 spells it cohort"),
    ({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "x"},
      "spec": {"resources": {"gpu": {"quota": "lots"}}}}, "spec.resources.gpu.quota: 'lots'"),
    ({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "x"},
      "spec": {"resources": {"gpu": {"quota": 1e400}}}}, "spec.resources.gpu.quota"),
    ({"apiVersion": "scheduling.run.ai/v1", "kind": "Queue", "metadata": {"name": "x"},
      "spec": {}}, "apiVersion 'scheduling.run.ai/v1' kind 'Queue' is not one gpugov converts"),
    ({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "x"},
      "spec": {"capability": {"nvidia.com/gpu": "1e99999"}}}, "spec.capability.nvidia.com/gpu"),
    ({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "x"},
      "spec": {"quota": 1}}, "spec.quota: not a field of scheduling.volcano.sh/v1beta1 Queue"),
    ({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
      "metadata": {"name": "x", "namespace": "ns"}, "spec": {}}, "spec.clusterQueue: None"),
])
def test_bad_objects_are_refused_by_field_and_others_still_convert(obj, needle) -> None:
    good = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "ok"},
            "spec": {"resources": {"gpu": {"quota": 1, "limit": -1}}}}
    conv = convert_objects([obj, good])
    assert len(conv.errors) == 1 and needle in conv.errors[0], conv.errors
    assert [o["metadata"]["name"] for o in conv.objects] == ["ok"]


def test_cli_fails_on_a_bad_object_with_the_reason(tmp_path: Path) -> None:
    f = tmp_path / "q.yaml"
    f.write_text("apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: a}\n"
                 "spec: {resources: {gpu: {quota: -3}}}\n")
    code, _, err = convert(f)
    assert code == 2 and "spec.resources.gpu.quota: -3; allowed: -1 or >= 0" in err


@pytest.fixture(scope="module")
def with_crds(k8s_control_plane):
    asyncio.run(install_crds(k8s_control_plane.kubeconfig))
    return k8s_control_plane


def test_apiserver_accepts_the_converted_upstream_objects(with_crds) -> None:
    plurals = {"Queue": "queues", "Tenant": "tenants"}
    made: list[tuple[str, str]] = []

    async def go() -> list[str]:
        refused = []
        async with with_crds.api() as api:
            custom = client.CustomObjectsApi(api)
            for paths in SETS:
                path = paths[0]
                _, out, _ = convert(paths)
                prefix = f"cv-{path.parent.name}-{path.stem}"[:40].lower().replace("_", "-")
                for o in yaml.safe_load_all(out):
                    o = json.loads(json.dumps(o))
                    o["metadata"]["name"] = f"{prefix}-{o['metadata']['name']}"[:63]
                    for key in ("parent", "queue"):  # keep the renamed tree consistent
                        if key in o["spec"]:
                            o["spec"][key] = f"{prefix}-{o['spec'][key]}"[:63]
                    try:
                        await custom.create_cluster_custom_object(
                            crds.GROUP, crds.VERSION, plurals[o["kind"]], o,
                            field_validation="Strict")
                        made.append((plurals[o["kind"]], o["metadata"]["name"]))
                    except ApiException as exc:
                        refused.append(f"{path.name}: {json.loads(exc.body)['message']}")
            for plural, name in reversed(made):  # the cluster is shared with other tests
                await custom.delete_cluster_custom_object(crds.GROUP, crds.VERSION, plural,
                                                          name)
        return refused

    assert asyncio.run(go()) == []


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)
_KINDS = [("scheduling.run.ai/v2", "Queue"), ("scheduling.volcano.sh/v1beta1", "Queue"),
          ("kueue.x-k8s.io/v1beta1", "ClusterQueue"), ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
          ("kueue.x-k8s.io/v1beta2", "LocalQueue"), ("kueue.x-k8s.io/v1beta2", "Cohort")]
_FIELDS = ["resources", "gpu", "quota", "limit", "capability", "deserved", "guarantee",
           "resourceGroups", "flavors", "nominalQuota", "cohort", "cohortName", "parent",
           "parentQueue", "weight", "clusterQueue", "fairSharing", "priority"]


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(_KINDS),
       spec=st.dictionaries(st.sampled_from(_FIELDS), _json, max_size=4),
       meta=st.one_of(_json, st.fixed_dictionaries({"name": st.text(min_size=1, max_size=5)},
                                                   optional={"annotations": _json,
                                                             "namespace": _json})))
def test_hostile_objects_fail_alone_never_crash(kind, spec, meta) -> None:
    good = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "ok"},
            "spec": {}}
    bad = {"apiVersion": kind[0], "kind": kind[1], "metadata": meta, "spec": spec}
    conv = convert_objects([bad, good])  # never raises
    assert "ok" in [o["metadata"]["name"] for o in conv.objects]
    assert all(isinstance(e, str) and e for e in conv.errors)
    with contextlib.suppress(crds.ConversionError, ConfigError):  # the CLI's next step
        crds.objects_to_config(conv.objects)


@settings(max_examples=200, deadline=None)
@given(obj=st.fixed_dictionaries({"apiVersion": st.just(crds.API_VERSION),
                                  "kind": st.sampled_from(["Queue", "Tenant"])},
                                 optional={"metadata": _json, "spec": _json}))
def test_malformed_gpugov_objects_passed_through_never_crash(obj) -> None:
    conv = convert_objects([obj, obj])
    # refused with a message (the CLI prints it) or accepted; never an unexpected exception
    with contextlib.suppress(crds.ConversionError, ConfigError):
        crds.objects_to_config(conv.objects)
