"""Admission decisions without a cluster: patches, refusals, tenancy resolution, bad bodies."""

from __future__ import annotations

import base64
import json

import pytest

from gpugov.k8s import annotations as ann
from gpugov.k8s.webhook import admission
from gpugov.k8s.webhook.tenancy import Resolution, TenancyError, resolve
from gpugov.model.isolation import TrustTier

INTERNAL = Resolution("t", "q", TrustTier.INTERNAL)


def review(pod: dict, namespace: str = "ns", op: str = "CREATE") -> dict:
    return {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": namespace, "operation": op, "object": pod}


def pod(limits: dict | None = None, annotations: dict | None = None, **spec) -> dict:
    c = {"name": "main", "image": "x"}
    if limits is not None:
        c["resources"] = {"limits": limits}
    return {"metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"containers": [c], **spec}}


def patch_of(out: dict) -> dict[str, object]:
    ops = json.loads(base64.b64decode(out["response"]["patch"]))
    return {op["path"]: op["value"] for op in ops}


def test_hami_spelling_becomes_the_canonical_annotation():
    out = admission.mutate(review(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000,
                                       "nvidia.com/gpucores": 30})), lambda ns: INTERNAL)
    assert out["response"]["allowed"]
    p = patch_of(out)
    req = ann.decode_request(p["/metadata/annotations/gpugov.io~1request"])
    assert (req.mode.value, req.memory_mib, req.milli) == ("soft", 20000, 300)
    assert p["/metadata/annotations/gpugov.io~1queue"] == "q"
    assert p["/metadata/annotations/gpugov.io~1trust-tier"] == "internal"
    assert p["/spec/schedulerName"] == "gpugov"
    assert p["/metadata/labels/gpugov.io~1managed"] == "true"


def test_kai_annotation_alone_asks_for_a_gpu():
    out = admission.mutate(review(pod(annotations={"gpu-fraction": "0.5"})), lambda ns: INTERNAL)
    req = ann.decode_request(patch_of(out)["/metadata/annotations/gpugov.io~1request"])
    assert req.milli == 500


def test_pod_without_gpu_is_not_touched_and_needs_no_tenant():
    def no_tenancy(ns):
        raise AssertionError("tenancy must not be consulted")
    out = admission.mutate(review(pod({"cpu": "1"})), no_tenancy)
    assert out["response"] == {"uid": "u1", "allowed": True}


def test_explicit_other_scheduler_is_kept():
    out = admission.mutate(review(pod({"nvidia.com/gpu": 1}, schedulerName="volcano")),
                           lambda ns: INTERNAL)
    assert "/spec/schedulerName" not in patch_of(out)


@pytest.mark.parametrize("limits,annots,needle", [
    ({"nvidia.com/gpumem": 20000, "nvidia.com/gpumem-percentage": 50}, {},
     "nvidia.com/gpumem-percentage: contradicts nvidia.com/gpumem (two memory sizes); instead, "
     "keep only nvidia.com/gpumem (MiB) or only nvidia.com/gpumem-percentage (%)"),
    ({"nvidia.com/gpucores": 150}, {}, "150 % is more than one GPU"),
    ({"nvidia.com/mig-9g.99gb": 1}, {}, "no GPU in the catalog has a MIG profile '9g.99gb'"),
    ({"nvidia.com/tpu": 1}, {}, "nvidia.com/tpu: is not a GPU resource gpugov knows"),
    ({"nvidia.com/gpu": 1}, {"gpugov.io/allocation": "{}"},
     "gpugov.io/allocation: only gpugov's scheduler writes it"),
])
def test_impossible_or_ambiguous_requests_are_refused_with_what_to_write(limits, annots, needle):
    out = admission.mutate(review(pod(limits, annots)), lambda ns: INTERNAL)
    assert out["response"]["allowed"] is False
    assert needle in out["response"]["status"]["message"]
    assert out["response"]["status"]["code"] == 422


def test_two_gpu_containers_are_refused():
    p = pod({"nvidia.com/gpu": 1})
    p["spec"]["containers"].append({"name": "side", "image": "x",
                                    "resources": {"limits": {"nvidia.com/gpu": 1}}})
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    assert "more than one container asks for GPUs" in out["response"]["status"]["message"]


def test_untrusted_tenant_cannot_time_slice():
    untrusted = Resolution("ext", "q", TrustTier.UNTRUSTED)
    out = admission.mutate(review(pod({"nvidia.com/gpu.shared": 1})), lambda ns: untrusted)
    msg = out["response"]["status"]["message"]
    assert "Tenant 'ext' is untrusted: its pods need hard isolation" in msg
    assert "ask for a MIG profile" in msg


def test_validate_detects_a_request_changed_after_mutation():
    p = pod({"nvidia.com/gpu": 1}, {ann.REQUEST: ann.encode_request(
        admission.pod_request(pod({"nvidia.com/gpu": 2})))})
    out = admission.validate(review(p))
    assert "no longer matches" in out["response"]["status"]["message"]
    p["metadata"]["annotations"][ann.REQUEST] = ann.encode_request(admission.pod_request(p))
    assert admission.validate(review(p))["response"]["allowed"]


@pytest.mark.parametrize("body,needle", [
    (b"\x00garbage", "body is not JSON"),
    (b"[]", "not a JSON object"),
    (b'{"apiVersion": "v1", "kind": "Pod"}', "expected apiVersion admission.k8s.io/v1"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request.uid"),
])
def test_garbage_bodies_are_review_errors(body, needle):
    with pytest.raises(admission.ReviewError, match=needle):
        admission.parse_review(body)


TENANTS = [
    {"metadata": {"name": "catch-all"}, "spec": {"namespaceSelector": {}, "queue": "default"}},
    {"metadata": {"name": "gpu-teams"}, "spec": {
        "namespaceSelector": {"matchLabels": {"team": "ml"}}, "queue": "ml", "trust": "trusted"}},
    {"metadata": {"name": "prod"}, "spec": {"namespaces": ["prod"], "queue": "prod",
                                            "trust": "untrusted"}},
]
QUEUES = {"default": None, "ml": None, "prod": None, "root": None, "leafless": "root"}


def test_tenancy_prefers_named_then_most_specific_selector():
    assert resolve("prod", {"team": "ml"}, TENANTS, QUEUES).tenant == "prod"
    assert resolve("x", {"team": "ml"}, TENANTS, QUEUES) == Resolution("gpu-teams", "ml",
                                                                      TrustTier.TRUSTED)
    assert resolve("y", {}, TENANTS, QUEUES).tenant == "catch-all"


@pytest.mark.parametrize("tenants,needle", [
    ([], "belongs to no gpugov Tenant"),
    ([{"metadata": {"name": "a"}, "spec": {"namespaces": ["ns"], "queue": "default"}},
      {"metadata": {"name": "b"}, "spec": {"namespaces": ["ns"], "queue": "default"}}],
     "claimed by several Tenants (a, b)"),
    ([{"metadata": {"name": "a"}, "spec": {"namespaces": ["ns"], "queue": "nope"}}],
     "queue 'nope', which does not exist"),
    ([{"metadata": {"name": "a"}, "spec": {"namespaces": ["ns"], "queue": "root"}}],
     "which has child queues (leafless)"),
])
def test_tenancy_refusals(tenants, needle):
    with pytest.raises(TenancyError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        resolve("ns", {}, tenants, QUEUES)


@pytest.mark.parametrize("stored,mib", [("20k", 20000), ("20000", 20000), ("1e4", 10000),
                                        (20480, 20480)])
def test_canonical_quantities_from_the_apiserver_are_read_as_numbers(stored, mib):
    out = admission.mutate(review(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": stored})),
                           lambda ns: INTERNAL)
    req = ann.decode_request(patch_of(out)["/metadata/annotations/gpugov.io~1request"])
    assert req.memory_mib == mib


def test_fractional_quantity_is_refused():
    out = admission.mutate(review(pod({"nvidia.com/gpu": "500m"})), lambda ns: INTERNAL)
    assert "'500m' is not a plain integer (GPUs)" in out["response"]["status"]["message"]


def test_tenant_and_queue_reviews_only_warn():
    queues = {"root": None, "leaf": "root"}
    tenant = {"uid": "u", "kind": {"kind": "Tenant"}, "object": {
        "metadata": {"name": "t"}, "spec": {"namespaces": ["a"], "queue": "root"}}}
    out = admission.tenancy_warnings(tenant, queues)["response"]
    assert out["allowed"] is True
    assert out["warnings"] == ["Tenant t: queue 'root' has child queues (leaf); only leaf "
                               "queues take work"]
    queue = {"uid": "u", "kind": {"kind": "Queue"}, "object": {
        "metadata": {"name": "q"}, "spec": {"parent": "nope"}}}
    assert admission.tenancy_warnings(queue, queues)["response"]["warnings"] == [
        "Queue q: parent 'nope' does not exist"]
    ok = {"uid": "u", "kind": {"kind": "Tenant"}, "object": {
        "metadata": {"name": "t"}, "spec": {"namespaces": ["a"], "queue": "leaf"}}}
    assert "warnings" not in admission.tenancy_warnings(ok, queues)["response"]
