"""Admission decisions without a cluster: patches, refusals, tenancy resolution, bad bodies."""

from __future__ import annotations

import base64
import copy
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
    """Path -> value of what the patch writes: each operation's value, and each key of a map
    it writes whole (`/metadata/annotations/<key>`), as the pod reads after it is applied."""
    ops = json.loads(base64.b64decode(out["response"]["patch"]))
    got: dict[str, object] = {}
    for op in ops:
        if "value" not in op:
            continue
        got[op["path"]] = op["value"]
        if op["path"] in ("/metadata/annotations", "/metadata/labels"):
            for key, value in op["value"].items():
                got[f"{op['path']}/{key.replace('~', '~0').replace('/', '~1')}"] = value
    return got


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
    assert (req.milli, req.memory_percent) == (None, 50.0)  # KAI: memory share, time shared


def no_tenancy(ns):
    raise AssertionError("tenancy must not be consulted")


def test_pod_without_gpu_is_not_touched_and_needs_no_tenant():
    out = admission.mutate(review(pod({"cpu": "1"})), no_tenancy)
    assert out["response"] == {"uid": "u1", "allowed": True}


@pytest.mark.parametrize("limits", [{"nvidia.com/gpu": 0}, {"nvidia.com/gpu": "0"},
                                    {"nvidia.com/gpu": "0", "nvidia.com/gpumem": "0k"}])
def test_zero_gpus_is_no_gpu(limits):
    out = admission.mutate(review(pod(limits)), no_tenancy)
    assert out["response"] == {"uid": "u1", "allowed": True}
    assert admission.validate(review(pod(limits)))["response"]["allowed"]


def test_forged_owned_keys_are_removed_from_a_pod_without_gpu():
    p = pod({"cpu": "1"}, {ann.REQUEST: '{"v":1,"count":8,"mode":"exclusive"}',
                           ann.QUEUE: "victim", ann.TRUST_TIER: "trusted", "keep": "me"})
    p["metadata"]["labels"] = {ann.MANAGED_LABEL: "true", "app": "x"}
    out = admission.mutate(review(p), no_tenancy)["response"]
    assert out["allowed"]
    ops = json.loads(base64.b64decode(out["patch"]))
    assert ops == [{"op": "remove", "path": "/metadata/annotations/gpugov.io~1request"},
                   {"op": "remove", "path": "/metadata/annotations/gpugov.io~1queue"},
                   {"op": "remove", "path": "/metadata/annotations/gpugov.io~1trust-tier"},
                   {"op": "remove", "path": "/metadata/labels/gpugov.io~1managed"}]
    assert "removed gpugov.io/request, gpugov.io/queue" in out["warnings"][0]


def test_preset_node_name_is_refused_unless_gpugov_created_the_pod():
    p = pod({"nvidia.com/gpu": 1}, nodeName="gpu-node-1")
    out = admission.mutate(review(p), lambda ns: INTERNAL)["response"]
    assert out["allowed"] is False and out["status"]["code"] == 403
    assert "spec.nodeName is set ('gpu-node-1')" in out["status"]["message"]
    assert "let the gpugov scheduler place it" in out["status"]["message"]
    assert not admission.validate(review(p))["response"]["allowed"]
    admin = {**review(p), "userInfo": {"username": "me", "groups": ["system:masters"]}}
    assert admission.mutate(admin, lambda ns: INTERNAL)["response"]["allowed"]


def test_ignore_label_on_a_gpu_pod_only_warns():
    p = pod({"nvidia.com/gpu": 1})
    p["metadata"]["labels"] = {ann.IGNORE_LABEL: "true"}
    out = admission.mutate(review(p), lambda ns: INTERNAL)["response"]
    assert out["allowed"] and "/metadata/annotations/gpugov.io~1request" in patch_of(
        {"response": out})
    assert out["warnings"] == ["the pod label gpugov.io/ignore has no effect: exemption from "
                               "gpugov is a namespace label an admin sets (gpugov.io/ignore=true "
                               "on the namespace)"]


TENANT_SA = {"username": "system:serviceaccount:team-a:tenant",
             "groups": ["system:serviceaccounts", "system:authenticated"]}
SCHEDULER_SA = {"username": "system:serviceaccount:gpugov-system:gpugov-scheduler",
                "groups": ["system:serviceaccounts"]}
OWNED_POD = pod({"nvidia.com/gpu": 1}, {ann.REQUEST: "r", ann.QUEUE: "mine",
                                        ann.TRUST_TIER: "untrusted"})


def update(old: dict, new: dict, user: dict) -> dict:
    return {**review(new, op="UPDATE"), "oldObject": old, "userInfo": user}


@pytest.mark.parametrize("key,value", [(ann.QUEUE, "theirs"), (ann.TRUST_TIER, "trusted"),
                                       (ann.REQUEST, "other"), (ann.ALLOCATION, "{}"),
                                       (ann.TENANT, "t2"), (ann.ALLOCATED, "{}"),
                                       (ann.QUEUE, None)])
def test_tenant_cannot_add_change_or_remove_an_owned_annotation(key, value):
    new = json.loads(json.dumps(OWNED_POD))
    if value is None:
        del new["metadata"]["annotations"][key]
    else:
        new["metadata"]["annotations"][key] = value
    out = admission.validate(update(OWNED_POD, new, TENANT_SA))["response"]
    assert out["allowed"] is False and out["status"]["code"] == 403
    assert out["status"]["message"] == (
        f"{key}: this pod annotation is owned by gpugov; only gpugov's components may add, "
        "change or remove it")
    assert admission.validate(update(OWNED_POD, new, SCHEDULER_SA))["response"]["allowed"]


def test_owned_label_and_pinned_namespace():
    new = json.loads(json.dumps(OWNED_POD))
    new["metadata"]["labels"] = {ann.MANAGED_LABEL: "false"}
    out = admission.validate(update(OWNED_POD, new, TENANT_SA))["response"]
    assert "gpugov.io/managed: this pod label is owned by gpugov" in out["status"]["message"]
    # a ServiceAccount named like gpugov's in the tenant's own namespace is not gpugov
    fake = {"username": "system:serviceaccount:team-a:gpugov-scheduler", "groups": []}
    assert not admission.validate(update(OWNED_POD, new, fake))["response"]["allowed"]
    other_ns = admission.validate(update(OWNED_POD, new, SCHEDULER_SA),
                                  system_namespace="elsewhere")
    assert not other_ns["response"]["allowed"]


def test_tenant_updates_that_leave_owned_keys_alone_pass():
    new = json.loads(json.dumps(OWNED_POD))
    new["metadata"]["labels"] = {"app": "x"}
    new["metadata"]["annotations"]["note"] = "mine"
    assert admission.validate(update(OWNED_POD, new, TENANT_SA))["response"]["allowed"]


def test_other_scheduler_is_refused_unless_the_tenant_lists_it():
    p = pod({"nvidia.com/gpu": 1}, schedulerName="volcano")
    out = admission.mutate(review(p), lambda ns: INTERNAL)["response"]
    assert out["allowed"] is False and out["status"]["code"] == 403
    assert ("schedulerName 'volcano' is not allowed for GPU pods of Tenant 't' (allowed: gpugov)"
            in out["status"]["message"])
    listed = Resolution("t", "q", TrustTier.INTERNAL, ("volcano",))
    out = admission.mutate(review(p), lambda ns: listed)
    assert "/spec/schedulerName" not in patch_of(out)
    # extender mode (`--scheduler-name ''`): pods keep default-scheduler
    ext = admission.mutate(review(pod({"nvidia.com/gpu": 1})), lambda ns: INTERNAL,
                           scheduler_name="")
    assert ext["response"]["allowed"] and "/spec/schedulerName" not in patch_of(ext)


@pytest.mark.parametrize("limits,annots,needle", [
    ({"nvidia.com/gpumem": 20000, "nvidia.com/gpumem-percentage": 50}, {},
     "nvidia.com/gpumem-percentage: contradicts nvidia.com/gpumem (two memory sizes); instead, "
     "keep only nvidia.com/gpumem (MiB) or only nvidia.com/gpumem-percentage (%)"),
    ({"nvidia.com/gpucores": 150}, {}, "150 % is more than one GPU"),
    ({"nvidia.com/mig-9g.99gb": 1}, {}, "no GPU in the catalog has a MIG profile '9g.99gb'"),
    ({"nvidia.com/tpu": 1}, {}, "nvidia.com/tpu: is not a GPU resource gpugov knows"),
    ({"nvidia.com/gpu": "1e400"}, {}, "'1e400' is out of range (exponent beyond ±30)"),
    ({"nvidia.com/gpu": "1e8000000"}, {}, "'1e8000000' is out of range"),
    ({"nvidia.com/gpu": 1, "cpu": "1e400"}, {}, "cpu: '1e400' is out of range"),
    ({"nvidia.com/gpu": "9" * 5000}, {}, "is not a quantity gpugov reads (longer than 64"),
    ({"nvidia.com/gpu": 10**30}, {}, "is out of range"),
    ({}, {"gpu-fraction": "1e400"}, "gpu-fraction: '1e400' is not a finite number"),
    ({}, {"gpu-fraction": "nan"}, "gpu-fraction: 'nan' is not a finite number"),
    ({}, {"gpu-memory": "9" * 100}, "is not a plain integer (MiB)"),
])
def test_impossible_or_ambiguous_requests_are_refused_with_what_to_write(limits, annots, needle):
    out = admission.mutate(review(pod(limits, annots)), lambda ns: INTERNAL)
    assert out["response"]["allowed"] is False
    assert needle in out["response"]["status"]["message"]
    assert out["response"]["status"]["code"] == 422


@pytest.mark.parametrize("annots", [{"gpugov.io/allocation": "{}"},
                                    {"gpugov.io/allocated": "{}"}])
@pytest.mark.parametrize("limits", [{"nvidia.com/gpu": 1}, {"cpu": "1"}])
def test_allocation_records_are_refused_at_create_for_every_pod(limits, annots):
    for check in (admission.mutate(review(pod(limits, annots)), lambda ns: INTERNAL),
                  admission.validate(review(pod(limits, annots)))):
        out = check["response"]
        assert out["allowed"] is False and out["status"]["code"] == 403
        key = next(iter(annots))
        assert out["status"]["message"] == (
            f"{key}: only gpugov's scheduler writes it (through the Binding); remove it from "
            "the pod")


def test_two_gpu_containers_of_one_shape_are_one_request_for_both():
    p = pod({"nvidia.com/gpu": 1})
    p["spec"]["containers"].append({"name": "side", "image": "x",
                                    "resources": {"limits": {"nvidia.com/gpu": 1}}})
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    assert out["response"]["allowed"], out
    req = ann.decode_request(patch_of(out)["/metadata/annotations/gpugov.io~1request"])
    assert (req.mode.value, req.count) == ("exclusive", 2)


def test_two_gpu_containers_of_different_shapes_are_refused_naming_both():
    p = pod({"nvidia.com/gpu": 1})
    p["spec"]["containers"].append({"name": "side", "image": "x", "resources": {"limits": {
        "nvidia.com/gpu": 1, "nvidia.com/gpumem": 10240}}})
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    msg = out["response"]["status"]["message"]
    assert "container 'main', container 'side': ask for different GPU shapes" in msg
    assert "(1 whole GPU vs 1 soft slice (10240 MiB))" in msg
    assert "give every GPU container of the pod the same per-device ask" in msg


def test_untrusted_tenant_cannot_time_slice():
    untrusted = Resolution("ext", "q", TrustTier.UNTRUSTED)
    out = admission.mutate(review(pod({"nvidia.com/gpu.shared": 1})), lambda ns: untrusted)
    msg = out["response"]["status"]["message"]
    assert "Tenant 'ext' is untrusted: its pods need hard isolation" in msg
    assert "ask for a MIG profile" in msg


def test_internal_tenant_may_time_slice_with_a_memory_cap():
    """A capped replica delivers soft isolation, an internal tenant's floor."""
    out = admission.mutate(review(pod({"nvidia.com/gpu.shared": 1, "nvidia.com/gpumem": 20000})),
                           lambda ns: INTERNAL)
    assert out["response"]["allowed"], out["response"]


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


@pytest.mark.parametrize("name,parent,queues,cycle", [
    ("a", "a", {}, "a -> a"),
    ("a", "b", {"b": "a"}, "a -> b -> a"),
    ("a", "b", {"b": "c", "c": "a", "a": None}, "a -> b -> c -> a"),
])
def test_queue_cycles_are_refused(name, parent, queues, cycle):
    req = {"uid": "u", "kind": {"kind": "Queue"}, "operation": "UPDATE", "object": {
        "metadata": {"name": name}, "spec": {"parent": parent}}}
    out = admission.review_tenancy(req, queues)["response"]
    assert out["allowed"] is False
    assert f"Queue {name}: spec.parent {parent!r} makes a cycle ({cycle})" in \
        out["status"]["message"]


def test_queue_chains_without_a_cycle_through_it_are_admitted():
    ok = {"uid": "u", "kind": {"kind": "Queue"}, "object": {
        "metadata": {"name": "a"}, "spec": {"parent": "b"}}}
    assert admission.review_tenancy(ok, {"b": "root", "root": None})["response"]["allowed"]
    # a cycle elsewhere (x <-> y) does not block an unrelated queue
    assert admission.review_tenancy(ok, {"b": "x", "x": "y", "y": "x"})["response"]["allowed"]
    deep = {f"q{i}": f"q{i + 1}" for i in range(20000)}
    assert admission.review_tenancy(ok, {"b": "q0", **deep})["response"]["allowed"]


def test_tenant_and_queue_reviews_only_warn():
    queues = {"root": None, "leaf": "root"}
    tenant = {"uid": "u", "kind": {"kind": "Tenant"}, "object": {
        "metadata": {"name": "t"}, "spec": {"namespaces": ["a"], "queue": "root"}}}
    out = admission.review_tenancy(tenant, queues)["response"]
    assert out["allowed"] is True
    assert out["warnings"] == ["Tenant t: queue 'root' has child queues (leaf); only leaf "
                               "queues take work"]
    queue = {"uid": "u", "kind": {"kind": "Queue"}, "object": {
        "metadata": {"name": "q"}, "spec": {"parent": "nope"}}}
    assert admission.review_tenancy(queue, queues)["response"]["warnings"] == [
        "Queue q: parent 'nope' does not exist"]
    ok = {"uid": "u", "kind": {"kind": "Tenant"}, "object": {
        "metadata": {"name": "t"}, "spec": {"namespaces": ["a"], "queue": "leaf"}}}
    assert "warnings" not in admission.review_tenancy(ok, queues)["response"]


def test_tenant_schedulers_are_resolved_and_bounded():
    tenant = {"metadata": {"name": "a"}, "spec": {"namespaces": ["ns"], "queue": "default",
                                                  "schedulers": ["volcano", 7, "", *"x" * 40]}}
    res = resolve("ns", {}, [tenant], QUEUES)
    assert res.schedulers[0] == "volcano" and len(res.schedulers) <= 16
    assert resolve("ns", {}, [{**tenant, "spec": {**tenant["spec"], "schedulers": "v"}}],
                   QUEUES).schedulers == ()


# -- issue 19: pods written for HAMi, KAI-Scheduler and Volcano --------------------------------

def ops_of(out: dict) -> list[dict]:
    return json.loads(base64.b64decode(out["response"]["patch"]))


def added(out: dict) -> dict[str, object]:
    """What the patch adds, by path (keys of a map added whole included, `patch_of`)."""
    return patch_of({"response": {"patch": base64.b64encode(json.dumps(
        [op for op in ops_of(out) if op["op"] == "add"]).encode())}})


def apply_ops(obj: dict, ops: list[dict]) -> dict:
    """RFC 6902 add/remove on mappings (what the webhook's patches use), as the apiserver
    applies them."""
    obj = json.loads(json.dumps(obj))
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~")
                          for p in op["path"].split("/")[1:]]
        node = obj
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if op["op"] == "remove":
            del node[last]
        else:
            node[last] = op["value"]
    return obj


def test_adopted_scheduler_is_handed_to_gpugov_and_recorded():
    opts = admission.Options(adopt=("kai-scheduler",))
    p = pod({"nvidia.com/gpu": 1}, schedulerName="kai-scheduler")
    out = admission.mutate(review(p), lambda ns: INTERNAL, options=opts)
    assert out["response"]["allowed"], out
    patch = patch_of(out)
    assert patch["/spec/schedulerName"] == "gpugov"
    assert patch["/metadata/annotations/gpugov.io~1original-scheduler"] == "kai-scheduler"
    # not on the list (the default): refused with where to list it, never taken silently
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    assert not out["response"]["allowed"]
    assert "webhook.adoptSchedulers" in out["response"]["status"]["message"]


def test_adopted_pod_passes_validation_with_its_record():
    opts = admission.Options(adopt=("volcano",))
    p = pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 2000},
            schedulerName="volcano")
    out = admission.mutate(review(p), lambda ns: INTERNAL, options=opts)
    assert out["response"]["allowed"], out
    mutated = apply_ops(p, ops_of(out))
    assert mutated["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000}
    assert admission.validate(review(mutated))["response"]["allowed"]


def test_renamed_hami_resources_are_rewritten_to_gpugovs_names():
    names = admission.ResourceNames(gpu="example.com/vgpu", gpumem="example.com/vmem")
    opts = admission.Options(names=names)
    p = pod({"example.com/vgpu": 2, "example.com/vmem": 3000, "cpu": "1"})
    out = admission.mutate(review(p), lambda ns: INTERNAL, options=opts)
    assert out["response"]["allowed"], out
    ops = ops_of(out)
    base = "/spec/containers/0/resources/limits/"
    assert {"op": "remove", "path": base + "example.com~1vgpu"} in ops
    assert {"op": "add", "path": base + "nvidia.com~1gpumem", "value": 3000} in ops
    req = ann.decode_request(added(out)["/metadata/annotations/gpugov.io~1request"])
    assert (req.count, req.memory_mib) == (2, 3000)
    # without the knob the renamed name is no GPU resource at all
    assert admission.pod_request(p) is None


def test_options_from_the_charts_env():
    opts = admission.Options.from_env({
        "GPUGOV_ADOPT_SCHEDULERS": "kai-scheduler, volcano",
        "GPUGOV_RESOURCE_NAMES": '{"gpu": "example.com/vgpu", "gpucores": "example.com/c"}'})
    assert opts.adopt == ("kai-scheduler", "volcano")
    assert opts.names.gpu == "example.com/vgpu" and opts.names.gpumem == "nvidia.com/gpumem"
    with pytest.raises(ValueError, match="unknown keys"):
        admission.Options.from_env({"GPUGOV_RESOURCE_NAMES": '{"resourceName": "x"}'})


def test_unknown_annotations_of_other_schedulers_are_named_in_a_warning():
    p = pod({"nvidia.com/gpu": 1}, annotations={"hami.io/vgpu-node": "n1",
                                                 "nvidia.com/numa-bind": "true",
                                                 "kai.scheduler/whatever": "x",
                                                 "hami.io/gpu-scheduler-policy": "binpack"})
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    assert out["response"]["allowed"]
    warnings = out["response"]["warnings"]
    assert any("hami.io/vgpu-node" in w for w in warnings)
    assert any("kai.scheduler/whatever" in w for w in warnings)
    assert any("nvidia.com/numa-bind" in w for w in warnings)
    assert not any("gpu-scheduler-policy" in w for w in warnings)  # read: binpack honoured


def test_contradictory_hami_annotations_are_refused_with_the_reason():
    p = pod({"nvidia.com/gpu": 1}, annotations={"nvidia.com/use-gputype": "A100",
                                                 "nvidia.com/nouse-gputype": "A100"})
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    assert not out["response"]["allowed"]
    assert "both name A100" in out["response"]["status"]["message"]


@pytest.mark.parametrize("label", ["kai.scheduler/queue", "runai/queue"])
def test_kai_queue_label_must_name_the_tenants_queue(label):
    ok = pod({"nvidia.com/gpu": 1})
    ok["metadata"]["labels"] = {label: "q"}
    assert admission.mutate(review(ok), lambda ns: INTERNAL)["response"]["allowed"]
    other = pod({"nvidia.com/gpu": 1})
    other["metadata"]["labels"] = {label: "someone-elses"}
    out = admission.mutate(review(other), lambda ns: INTERNAL)
    assert not out["response"]["allowed"]
    assert "its queue 'q'" in out["response"]["status"]["message"]


def test_volcano_queue_annotation_must_name_the_tenants_queue():
    p = pod({"volcano.sh/vgpu-number": 1}, annotations={
        "scheduling.volcano.sh/queue-name": "q"})
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    assert out["response"]["allowed"] and not out["response"].get("warnings")
    p["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] = "other"
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    assert not out["response"]["allowed"]
    assert "its queue 'q'" in out["response"]["status"]["message"]


def test_kai_fraction_container_name_must_name_a_container():
    p = pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-init"},
            initContainers=[{"name": "gpu-init", "image": "x"}])
    assert admission.mutate(review(p), lambda ns: INTERNAL)["response"]["allowed"]
    p["metadata"]["annotations"]["gpu-fraction-container-name"] = "nope"
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    assert not out["response"]["allowed"]
    assert "'nope'" in out["response"]["status"]["message"]


@pytest.mark.parametrize(("annots", "container", "limits"), [
    ({"gpu-fraction": "0.5"}, ("containers", 0),
     {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}),
    ({"gpu-memory": "2000", "gpu-fraction-container-name": "side"}, ("containers", 1),
     {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}),
    ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-init"}, ("initContainers", 0),
     {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}),
    ({"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"}, ("containers", 0),
     {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "25"}),
    ({"gpu-fraction": "1"}, ("containers", 0), {"nvidia.com/gpu": "1"}),
])
def test_kai_annotations_become_resources_of_the_container_kai_gives_them(
        annots, container, limits):
    """The kubelet asks the device plugin only for containers that request a device: the
    webhook writes KAI's annotation request on the container KAI documents (first, or the
    named one, init containers included), keeps the original in a record, and the result
    reads back as the same request (validation passes)."""
    p = pod(annotations=dict(annots), initContainers=[{"name": "gpu-init", "image": "x"}])
    p["spec"]["containers"].append({"name": "side", "image": "x",
                                    "resources": {"requests": {"cpu": "1"}}})
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    assert out["response"]["allowed"], out
    mutated = apply_ops(p, ops_of(out))
    key, i = container
    assert mutated["spec"][key][i]["resources"]["limits"] == limits
    kept = json.loads(mutated["metadata"]["annotations"]["gpugov.io/original-request"])
    assert kept == annots
    assert not set(annots) & set(mutated["metadata"]["annotations"])
    before = admission.pod_request(p)
    assert admission.pod_request(mutated) is not None
    assert ann.encode_request(admission.pod_request(mutated)) == ann.encode_request(before)
    assert admission.validate(review(mutated))["response"]["allowed"]


@pytest.mark.parametrize(("affinity", "field"), [
    ({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}},
         "topologyKey": "kubernetes.io/hostname"}]}}, "podAntiAffinity"),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}},
         "topologyKey": "kubernetes.io/hostname"}]}}, "podAffinity"),
])
def test_pod_affinity_is_admitted_and_a_malformed_term_refused_at_admission(affinity, field):
    """Issue 20: pod (anti-)affinity and topologySpreadConstraints are evaluated by gpugov's
    scheduler (test_pod_affinity.py), so they are admitted; a malformed term is refused at
    creation, naming the field, instead of sitting Pending."""
    out = admission.mutate(review(pod({"nvidia.com/gpu": 1}, affinity=affinity)),
                           lambda ns: INTERNAL)
    assert out["response"]["allowed"]
    bad = copy.deepcopy(affinity)
    bad[field]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] = ""
    out = admission.mutate(review(pod({"nvidia.com/gpu": 1}, affinity=bad)),
                           lambda ns: INTERNAL)
    assert not out["response"]["allowed"]
    assert f"{field}.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey" in \
        out["response"]["status"]["message"]
    spread = pod({"nvidia.com/gpu": 1}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}])
    assert admission.mutate(review(spread), lambda ns: INTERNAL)["response"]["allowed"]
    spread["spec"]["topologySpreadConstraints"][0]["maxSkew"] = 0
    out = admission.mutate(review(spread), lambda ns: INTERNAL)
    assert not out["response"]["allowed"]
    assert "topologySpreadConstraints[0].maxSkew" in out["response"]["status"]["message"]
    node_affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "NotIn", "values": ["a", "b"]}]}]}}}
    out = admission.mutate(review(pod({"nvidia.com/gpu": 1}, affinity=node_affinity)),
                           lambda ns: INTERNAL)
    assert out["response"]["allowed"]  # node affinity with any operator is evaluated
    out = admission.mutate(review(pod({"cpu": "1"}, affinity=affinity)), lambda ns: INTERNAL)
    assert out["response"]["allowed"]  # not a GPU pod: not gpugov's to refuse


@pytest.mark.parametrize("annotations,labels", [(None, None), ({"team": "a"}, {"app": "x"})])
def test_patch_keeps_the_pods_own_keys_and_writes_a_missing_map_in_one_operation(
        annotations, labels):
    p = pod({"nvidia.com/gpu": 1})
    p["metadata"].pop("annotations")
    if annotations:
        p["metadata"]["annotations"] = dict(annotations)
    if labels:
        p["metadata"]["labels"] = dict(labels)
    out = admission.mutate(review(p), lambda ns: INTERNAL)
    ops = ops_of(out)
    result = apply_ops(copy.deepcopy(p), ops)
    got = result["metadata"]
    assert {**(annotations or {})}.items() <= got["annotations"].items()
    assert {**(labels or {})}.items() <= got["labels"].items()
    assert got["annotations"][ann.QUEUE] == "q" and got["labels"][ann.MANAGED_LABEL] == "true"
    assert ann.decode_request(got["annotations"][ann.REQUEST]).count == 1
    writes = [op for op in ops if op["path"].startswith("/metadata/")]
    # each operation costs the apiserver a walk of the pod: a missing map is written whole
    assert len(writes) == (2 if annotations is None else 5)
