"""Tenant guardrails without a cluster: tier defaults and floors, the objects per namespace,
the webhook's pod checks, bad Tenants, drift detection. The real apiserver's side is in
test_tenant_fences_e2e.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpugov.k8s.tenants import fences, objects, podchecks
from gpugov.k8s.tenants.checks import tenant_problems
from gpugov.k8s.tenants.controller import below_usage, owners, pod_usage
from gpugov.k8s.tenants.guardrails import GuardrailError, parse
from gpugov.model.isolation import TrustTier

U, INT, T = TrustTier.UNTRUSTED, TrustTier.INTERNAL, TrustTier.TRUSTED
PROTECTED = {"kube-system": {"kubernetes.io/metadata.name": "kube-system"},
             "gpugov-system": {"kubernetes.io/metadata.name": "gpugov-system"}}


def test_tier_defaults():
    u, i, t = parse("a", {}, U), parse("a", {}, INT), parse("a", {}, T)
    assert (u.pod_security, i.pod_security, t.pod_security) == \
        ("restricted", "baseline", "privileged")
    assert u.quota == {"pods": "200"} and i.quota == {} and t.quota == {}
    assert u.isolate and i.isolate and not t.isolate
    assert u.pod_checks and i.pod_checks and t.pod_checks
    assert u.default_requests == {"cpu": "100m", "memory": "128Mi"} and not t.default_requests


@pytest.mark.parametrize("trust,guard,field", [
    (U, {"podSecurity": {"level": "baseline"}}, "podSecurity.level"),
    (INT, {"podSecurity": {"level": "privileged"}}, "podSecurity.level"),
    (U, {"networkPolicy": {"isolate": False}}, "networkPolicy.isolate"),
    (INT, {"podChecks": False}, "podChecks"),
    (INT, {"quota": {"hard": {"pods": "lots"}}}, "quota.hard.pods"),
    (INT, {"rbac": {"owners": []}}, "rbac"),
    (INT, {"rbac": {"admins": [{"kind": "Robot", "name": "x"}]}}, "rbac.admins[0].kind"),
    (INT, {"rbac": {"admins": [{"kind": "ServiceAccount", "name": "x"}]}},
     "rbac.admins[0].namespace"),
])
def test_below_floor_or_malformed_is_refused_with_the_field(trust, guard, field):
    with pytest.raises(GuardrailError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse("a", {"guardrails": guard}, trust)


def test_a_tenant_may_raise_its_fence():
    assert parse("a", {"guardrails": {"podSecurity": {"level": "restricted"}}}, INT) \
        .pod_security == "restricted"


def test_objects_per_namespace():
    g = parse("a", {"guardrails": {"quota": {"hard": {"requests.nvidia.com/gpu": 4}},
                                   "rbac": {"editors": [{"kind": "Group", "name": "g"}]},
                                   "networkPolicy": {"egress": [{"to": [{"ipBlock": {
                                       "cidr": "10.0.0.0/8"}}]}]}}}, U)
    objs = fences.namespace_objects("a", "ns1", g)
    names = {(o["kind"], o["metadata"]["name"]) for _, o in objs}
    assert names == {("ResourceQuota", "gpugov-tenant"), ("LimitRange", "gpugov-tenant"),
                     ("NetworkPolicy", "gpugov-default-deny"),
                     ("NetworkPolicy", "gpugov-allow-tenant"),
                     ("NetworkPolicy", "gpugov-allow-dns"), ("NetworkPolicy", "gpugov-extra"),
                     ("RoleBinding", "gpugov-tenant-edit")}
    assert all(o["metadata"]["labels"] == {"gpugov.io/tenant": "a"} for _, o in objs)
    rq = next(o for _, o in objs if o["kind"] == "ResourceQuota")
    assert rq["spec"]["hard"] == {"pods": "200", "requests.nvidia.com/gpu": "4"}
    assert fences.namespace_labels("a", g)["pod-security.kubernetes.io/enforce"] == "restricted"
    role, binding = (o for _, o in fences.cluster_objects("a", "qa", g))
    assert role["rules"][0]["resourceNames"] == ["qa"]
    assert role["rules"][0]["verbs"] == ["get"]
    assert binding["subjects"] == [{"kind": "Group", "name": "g",
                                    "apiGroup": "rbac.authorization.k8s.io"}]


def _gpu_pod(**spec) -> dict:
    c = {"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    c.update(spec.pop("container", {}))
    return {"metadata": {"name": "p"}, "spec": {"containers": [c], **spec}}


@pytest.mark.parametrize("pod,needle", [
    (_gpu_pod(volumes=[{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}]), "/dev/nvidia0"),
    (_gpu_pod(volumes=[{"name": "d", "hostPath": {"path": "/dev/"}}]), "'/dev'"),
    (_gpu_pod(volumes=[{"name": "d", "hostPath": {"path": "//dev/../dev/nvidiactl"}}]),
     "/dev/nvidiactl"),
    (_gpu_pod(volumes=[{"name": "d", "hostPath": {"path": "/"}}]), "hostPath '/'"),
    (_gpu_pod(container={"securityContext": {"privileged": True}}), "privileged"),
    (_gpu_pod(container={"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}),
     "SYS_ADMIN"),
    (_gpu_pod(hostPID=True), "hostPID"),
    (_gpu_pod(container={"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}),
     "NVIDIA_VISIBLE_DEVICES"),
    (_gpu_pod(container={"env": [{"name": "LD_PRELOAD", "value": "/x.so"}]}), "LD_PRELOAD"),
    (_gpu_pod(container={"env": [{"name": "GPUGOV_MEMORY_LIMIT_0", "value": "80Gi"}]}),
     "GPUGOV_MEMORY_LIMIT_0"),
    (_gpu_pod(container={"volumeMounts": [{"name": "v", "mountPath": "/etc"}]}),
     "/etc/ld.so.preload"),
    (_gpu_pod(container={"volumeMounts": [{"name": "v", "mountPath": "/usr/local/gpugov/lib"}]}),
     "/usr/local/gpugov"),
])
def test_pod_checks_refuse_what_bypasses_the_library(pod, needle):
    found = podchecks.refusals(pod)
    assert found and needle in " ".join(found), found


def test_pod_checks_pass_a_plain_gpu_pod():
    pod = _gpu_pod(volumes=[{"name": "data", "hostPath": {"path": "/data/devices"}}],
                   container={"env": [{"name": "CUDA_LAUNCH_BLOCKING", "value": "1"}],
                              "volumeMounts": [{"name": "data", "mountPath": "/etc-data"}]})
    assert podchecks.refusals(pod) == []


def test_placement_adds_selector_and_tolerations_or_refuses_a_conflict():
    g = parse("a", {"guardrails": {"placement": {"nodeSelector": {"pool": "a"}, "tolerations": [
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}}}, INT)
    patch, refusal = podchecks.placement_patch(_gpu_pod(), g)
    assert refusal is None
    assert {p["path"] for p in patch} == {"/spec/nodeSelector", "/spec/tolerations"}
    patch, refusal = podchecks.placement_patch(_gpu_pod(nodeSelector={"zone": "z"}), g)
    assert patch == [{"op": "add", "path": "/spec/nodeSelector/pool", "value": "a"}, {
        "op": "add", "path": "/spec/tolerations",
        "value": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}]
    _, refusal = podchecks.placement_patch(_gpu_pod(nodeSelector={"pool": "b"}), g)
    assert refusal and "pool=a" in refusal


def _t(name, **spec):
    return {"metadata": {"name": name}, "spec": {"queue": "q", **spec}}


def test_bad_tenants():
    others = [_t("a", namespaces=["x", "y"])]
    assert "already belong to Tenant a" in tenant_problems(
        _t("b", namespaces=["y"]), others, PROTECTED)[0]
    assert tenant_problems(_t("a", namespaces=["x"]), others, PROTECTED) == []  # itself
    assert "system namespace" in tenant_problems(
        _t("b", namespaces=["gpugov-system"]), others, PROTECTED)[0]
    sel = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "Exists"}]}
    assert "kube-system" in tenant_problems(_t("b", namespaceSelector=sel), others,
                                            PROTECTED)[0]
    assert tenant_problems(_t("b", namespaceSelector={}), others, PROTECTED) == []
    assert "below the floor" in tenant_problems(
        _t("b", namespaces=["z"], trust="untrusted",
           guardrails={"podSecurity": {"level": "privileged"}}), others, PROTECTED)[0]


def test_tenant_naming_an_unknown_dra_model_is_refused_with_the_known_ones():
    from gpugov.model.catalog import CATALOG

    known = next(iter(CATALOG))
    bad = tenant_problems(_t("b", namespaces=["z"], dra={"models": [known, "H999"]}), [],
                          PROTECTED)
    assert len(bad) == 1 and "'H999'" in bad[0] and "spec.dra.models" in bad[0]
    assert known in bad[0].split("known: ")[1]
    assert tenant_problems(_t("b", namespaces=["z"], dra={"models": [known]}), [],
                           PROTECTED) == []


def test_owners_follow_the_webhooks_rule_and_skip_system_namespaces():
    tenants = [_t("all", namespaceSelector={}), _t("a", namespaces=["x"]),
               _t("b", namespaceSelector={"matchLabels": {"team": "b"}})]
    got = owners({"x": {}, "y": {"team": "b"}, "z": {}, "kube-system": {}}, tenants,
                 ("kube-system",))
    assert got == {"x": "a", "y": "b", "z": "all"}


def test_quota_below_usage():
    used = pod_usage([{"spec": {"containers": [{"resources": {"requests": {"cpu": "2"}}}]}},
                      {"spec": {"containers": [{"resources": {"requests": {"cpu": "500m"}}}]}},
                      {"status": {"phase": "Succeeded"}, "spec": {"containers": []}}])
    assert used["pods"] == 2
    assert below_usage({"pods": "1", "requests.cpu": "3"}, used) == ["pods=1 (in use: 2)"]
    assert below_usage({"cpu": "2"}, used) == ["cpu=2 (in use: 2.5)"]


def test_drift_detection():
    want = {"kind": "ResourceQuota", "spec": {"hard": {"cpu": "0.5", "pods": "10"}}}
    assert objects.content_same(want, {"spec": {"hard": {"cpu": "500m", "pods": "10"}}})
    assert not objects.content_same(want, {"spec": {"hard": {"cpu": "1", "pods": "10"}}})
    assert not objects.content_same(want, {"spec": {"hard": {"cpu": "500m", "pods": "10",
                                                             "secrets": "1"}}})
    pol = {"kind": "NetworkPolicy", "spec": {"podSelector": {}, "ingress": [{"from": []}]}}
    assert objects.content_same(pol, {"spec": {"podSelector": {}, "ingress": [{"from": []}],
                                               "egress": None}})
    assert not objects.content_same(pol, {"spec": {"podSelector": {}, "ingress": [
        {"from": []}, {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}})


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(
                        st.sampled_from(["podSecurity", "level", "quota", "hard", "rbac",
                                         "admins", "kind", "name", "placement", "nodeSelector",
                                         "tolerations", "networkPolicy", "isolate", "ingress",
                                         "limitRange", "default", "podChecks", "x"]),
                        c, max_size=4), max_leaves=16),
       st.sampled_from(list(TrustTier)))
def test_hostile_guardrails_fail_alone_and_clearly(guard, trust):
    try:
        parse("t", {"guardrails": guard}, trust)
    except GuardrailError as exc:
        assert str(exc).startswith("Tenant t: spec.guardrails")
