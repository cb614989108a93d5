"""DRA mode's translation without a cluster: the webhook's patch turns extended-resource pods
(HAMi, NVIDIA, KAI spellings; several GPU containers and GPU init containers) into claims on
gpugov's DeviceClasses, and the claims state exactly the translated requests (round trip)."""

from __future__ import annotations

import base64
import json
import math
import sys
from pathlib import Path

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.k8s import annotations as ann
from gpugov.k8s.dra import templates as tpl
from gpugov.k8s.resources import RequestError, translate
from gpugov.k8s.webhook import admission, dra_translate
from gpugov.k8s.webhook.tenancy import Resolution
from gpugov.model.catalog import CATALOG
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import TrustTier

DRA = Resolution("t", "q", TrustTier.INTERNAL, dra={"allocator": "kube-scheduler"})
FLEET = Resolution("t", "q", TrustTier.INTERNAL,
                   dra={"allocator": "kube-scheduler", "models": ["H100-SXM5-80GB"]})
PLAIN = Resolution("t", "q", TrustTier.INTERNAL)
HAMI = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "30"}


def review(pod: dict, dry: bool = False) -> dict:
    return {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "ns", "operation": "CREATE", "object": pod, "dryRun": dry}


def container(name: str, limits: dict | None = None) -> dict:
    c: dict = {"name": name, "image": "x"}
    if limits is not None:
        c["resources"] = {"limits": dict(limits)}
    return c


def pod(*containers: dict, init: tuple[dict, ...] = (), annotations: dict | None = None,
        **spec) -> dict:
    out = {"metadata": {"name": "p", "annotations": annotations or {}},
           "spec": {"containers": list(containers), **spec}}
    if init:
        out["spec"]["initContainers"] = list(init)
    return out


def mutated(p: dict, res: Resolution = DRA) -> tuple[dict, dict]:
    """(the pod after the webhook's patch, the answer)."""
    out = admission.mutate(review(p), lambda ns: res)
    assert out["response"]["allowed"], out["response"].get("status")
    ops = json.loads(base64.b64decode(out["response"]["patch"]))
    return jsonpatch.apply_patch(p, ops), out


def claims_of(p: dict, out: dict) -> dict[str, tpl.Shape]:
    """container name -> the Shape of the template its claim comes from."""
    by_name = {t["metadata"]["name"]: t for t in out[dra_translate.TEMPLATES]}
    entries = {c["name"]: c["resourceClaimTemplateName"] for c in p["spec"]["resourceClaims"]}
    got = {}
    for key in ("initContainers", "containers"):
        for c in p["spec"].get(key) or []:
            for ref in (c.get("resources") or {}).get("claims") or []:
                got[c["name"]] = tpl.shape_of_claim(by_name[entries[ref["name"]]]["spec"]
                                                    ["spec"])
    return got


def test_a_hami_pod_becomes_a_claim_for_its_slice():
    after, out = mutated(pod(container("main", HAMI)))
    (c,) = after["spec"]["containers"]
    assert c["resources"]["limits"] == {}  # the extended resources left the pod
    assert c["resources"]["claims"] == [{"name": "gpu-main"}]
    (t,) = out[dra_translate.TEMPLATES]
    assert after["spec"]["resourceClaims"] == [
        {"name": "gpu-main", "resourceClaimTemplateName": t["metadata"]["name"]}]
    assert t["metadata"]["name"].startswith("gpugov-slice-")
    assert t["metadata"]["labels"] == {tpl.MANAGED_BY: "gpugov"}
    (req,) = t["spec"]["spec"]["devices"]["requests"]
    assert req["exactly"]["deviceClassName"] == "gpu-slice.gpugov.io"
    assert req["exactly"]["capacity"] == {"requests": {"memory": "20000Mi", "compute": "30"}}
    # kube-scheduler allocates: the pod stays with it; gpugov's records for explain
    assert "schedulerName" not in after["spec"]
    record = json.loads(after["metadata"]["annotations"][dra_translate.DRA_REQUEST])
    assert record["main"]["asked"] == {k: v for k, v in HAMI.items()}
    assert record["main"]["claim"] == "gpu-main"
    assert after["metadata"]["annotations"][ann.QUEUE] == "q"
    assert after["metadata"]["labels"][ann.MANAGED_LABEL] == "true"
    assert ann.REQUEST not in after["metadata"]["annotations"]
    said = "\n".join(dra_translate.explain_lines(after))
    assert "container 'main' asked nvidia.com/gpu: 1, nvidia.com/gpucores: 30, " \
        "nvidia.com/gpumem: 20000 -> claim 'gpu-main'" in said
    # the validating webhook admits what the mutating one wrote
    assert admission.validate(review(after))["response"]["allowed"]


def test_the_same_pod_outside_dra_mode_keeps_the_device_plugin_path():
    out = admission.mutate(review(pod(container("main", HAMI))), lambda ns: PLAIN)
    assert dra_translate.TEMPLATES not in out
    ops = json.loads(base64.b64decode(out["response"]["patch"]))
    assert not any(op["path"].startswith("/spec/resourceClaims") for op in ops)


def test_nvidia_whole_gpu_and_kai_fraction():
    after, out = mutated(pod(container("main", {"nvidia.com/gpu": "2"})))
    assert claims_of(after, out) == {"main": tpl.Shape("gpu", count=2)}
    # KAI: a memory share of the card, resolved over the Tenant's fleet models
    kai = pod(container("a"), container("b"),
              annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "b"})
    after, out = mutated(kai, FLEET)
    assert claims_of(after, out) == {"b": tpl.Shape(
        "slice", models=("H100-SXM5-80GB",), compute=50, memory_percent=50)}
    assert "gpu-fraction" not in after["metadata"]["annotations"]  # it is in the claim now
    (t,) = out[dra_translate.TEMPLATES]
    (sub,) = t["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert sub["capacity"]["requests"] == {"memory": "40960Mi", "compute": "50"}
    assert admission.validate(review(after))["response"]["allowed"]


def test_nvidias_product_selector_spellings_leave_the_pod_with_the_request():
    """`nvidia.com/gpu` with GFD's `-MIG-<profile>` (single strategy) or `-SHARED` product
    selector: the claim states the MIG instance / replica; the selector, which DRA nodes need
    not carry, leaves the pod (recorded), other selector keys stay."""
    sel = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "zone": "a"}
    after, out = mutated(pod(container("m", {"nvidia.com/gpu": "1"}), nodeSelector=sel))
    assert claims_of(after, out)["m"].mig_profile == "1g.10gb"
    assert after["spec"]["nodeSelector"] == {"zone": "a"}
    record = json.loads(after["metadata"]["annotations"][dra_translate.DRA_REQUEST])
    assert record["m"]["asked"]["nvidia.com/gpu.product"] == sel["nvidia.com/gpu.product"]
    shared = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED"}
    after, out = mutated(pod(container("m", {"nvidia.com/gpu": "1"}), nodeSelector=shared))
    assert claims_of(after, out)["m"].kind == "timeslice"
    assert after["spec"]["nodeSelector"] == {}
    assert admission.validate(review(after))["response"]["allowed"]


def test_kai_fraction_without_models_over_a_catalog_too_varied_is_refused_clearly():
    out = admission.mutate(review(pod(container("a"), annotations={"gpu-fraction": "0.5"})),
                           lambda ns: DRA)["response"]
    assert not out["allowed"]
    assert "spec.dra.models" in out["status"]["message"]
    assert "at most 8" in out["status"]["message"]


def test_two_gpu_containers_and_a_gpu_init_container_each_get_their_own_claim():
    p = pod(container("train", HAMI), container("side", {"nvidia.com/mig-1g.10gb": "1"}),
            container("cpu-only", {"cpu": "1"}),
            init=(container("warm", {"nvidia.com/gpu": "1"}),))
    after, out = mutated(p)
    shapes = claims_of(after, out)
    assert set(shapes) == {"train", "side", "warm"}
    assert shapes["warm"] == tpl.Shape("gpu")
    assert shapes["train"] == tpl.Shape("slice", compute=30, memory_mib=20000)
    assert shapes["side"].kind == "mig" and shapes["side"].mig_profile == "1g.10gb"
    assert [c["name"] for c in after["spec"]["resourceClaims"]] == \
        ["gpu-warm", "gpu-train", "gpu-side"]
    assert "claims" not in (after["spec"]["containers"][2].get("resources") or {})
    assert len(out[dra_translate.TEMPLATES]) == 3
    # two containers of one shape: two claims, one template
    after, out = mutated(pod(container("a", HAMI), container("b", HAMI)))
    assert len(after["spec"]["resourceClaims"]) == 2 and len(out[dra_translate.TEMPLATES]) == 1


def test_refusals_keep_todays_messages():
    bad = pod(container("a", HAMI), container("b", {"nvidia.com/gpumem": "1e400"}))
    out = admission.mutate(review(bad), lambda ns: DRA)["response"]
    assert not out["allowed"] and "container 'b'" in out["status"]["message"]
    untrusted = Resolution("t", "q", TrustTier.UNTRUSTED, dra={"allocator": "kube-scheduler"})
    out = admission.mutate(review(pod(container("a", HAMI))), lambda ns: untrusted)["response"]
    assert "Tenant 't' is untrusted: its pods need hard isolation" in out["status"]["message"]
    ts = pod(container("a", {"nvidia.com/gpu.shared": "1", "nvidia.com/gpumem": "1000"}))
    out = admission.mutate(review(ts), lambda ns: DRA)["response"]
    assert "time-slice replica has its device's memory" in out["status"]["message"]
    other = pod(container("a", HAMI), schedulerName="volcano")
    out = admission.mutate(review(other), lambda ns: DRA)["response"]
    assert out["status"]["code"] == 403 and "schedulerName 'volcano'" in out["status"]["message"]


def test_gpugovs_allocator_gets_the_pod_and_refuses_what_it_does_not_allocate():
    gpugov = Resolution("t", "q", TrustTier.INTERNAL,
                        dra={"allocator": "gpugov", "models": ["H100-SXM5-80GB"]})
    after, _ = mutated(pod(container("a", HAMI)), gpugov)
    assert after["spec"]["schedulerName"] == ann.SCHEDULER_NAME
    for p in (pod(container("a"), annotations={"gpu-fraction": "0.5"}),
              pod(container("a", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}))):
        out = admission.mutate(review(p), lambda ns: gpugov)["response"]
        assert not out["allowed"]
        assert "spec.dra.allocator: kube-scheduler" in out["status"]["message"]
    bad = Resolution("t", "q", TrustTier.INTERNAL, dra={"models": ["no-such-gpu"]})
    out = admission.mutate(review(pod(container("a", HAMI))), lambda ns: bad)["response"]
    assert not out["allowed"] and "spec.dra.models" in out["status"]["message"]


def test_a_pod_written_for_gpugovs_scheduler_is_handed_to_kube_scheduler():
    after, _ = mutated(pod(container("a", HAMI), schedulerName=ann.SCHEDULER_NAME))
    assert after["spec"]["schedulerName"] == "default-scheduler"
    assert after["metadata"]["annotations"][admission.ORIGINAL_SCHEDULER] == \
        ann.SCHEDULER_NAME


def test_forged_template_content_is_detected():
    shape = tpl.Shape("slice", compute=30, memory_mib=20000)
    mine = tpl.template(shape, "ns")
    assert tpl.differs(json.loads(json.dumps(mine)), mine) == ""
    forged = json.loads(json.dumps(mine))
    forged["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"][
        "compute"] = "100"
    assert "spec.spec" in tpl.differs(forged, mine)
    unlabelled = json.loads(json.dumps(mine))
    unlabelled["metadata"]["labels"] = {}
    assert "label" in tpl.differs(unlabelled, mine)


# --- the round trip: a claim states exactly the translated request ---

MODELS = sorted(m for m, spec in CATALOG.items() if spec.memory_mib)
H100 = ("H100-SXM5-80GB", "A100-SXM4-80GB", "H100-PCIE-80GB")


@st.composite
def spelled(draw) -> tuple[dict, dict]:
    """A container's limits and the pod's annotations in one ecosystem's spelling."""
    kind = draw(st.sampled_from(["whole", "hami", "hami-pct", "mig", "mps", "ts", "kai",
                                 "kai-mem"]))
    annots: dict = {}
    if draw(st.booleans()):
        annots["gpugov.io/model"] = ",".join(draw(st.lists(st.sampled_from(H100), min_size=1,
                                                           max_size=3, unique=True)))
    if draw(st.booleans()):
        annots["gpugov.io/topology"] = draw(st.sampled_from(["none", "preferred", "required"]))
    n = draw(st.integers(1, 4))
    lim: dict = {}
    if kind == "whole":
        lim = {"nvidia.com/gpu": str(n)}
    elif kind in ("hami", "hami-pct"):
        lim = {"nvidia.com/gpu": str(n)}
        if kind == "hami":
            lim["nvidia.com/gpumem"] = str(draw(st.integers(1, 40000)))
        else:
            lim["nvidia.com/gpumem-percentage"] = str(draw(st.integers(1, 99)))
        if draw(st.booleans()):
            lim["nvidia.com/gpucores"] = str(draw(st.integers(1, 99)))
    elif kind == "mig":
        lim = {f"nvidia.com/mig-{draw(st.sampled_from(['1g.10gb', '3g.40gb']))}": str(n)}
    elif kind == "mps":
        lim = {"nvidia.com/gpu.mps": "1"}
        if draw(st.booleans()):
            lim["nvidia.com/gpumem"] = str(draw(st.integers(1, 20000)))
        if draw(st.booleans()):
            lim["nvidia.com/gpucores"] = str(draw(st.integers(1, 50)))
    elif kind == "ts":
        lim = {"nvidia.com/gpu.shared": "1"}
    elif kind == "kai":
        annots["gpu-fraction"] = str(draw(st.sampled_from([0.1, 0.25, 0.5, 0.75])))
    else:
        annots["gpu-memory"] = str(draw(st.integers(1, 40000)))
    if lim and draw(st.booleans()):
        lim["nvidia.com/priority"] = str(draw(st.integers(0, 1)))
    return lim, annots


@settings(max_examples=300, deadline=None)
@given(spelled())
def test_round_trip_the_claims_requests_equal_the_translated_requests(case):
    lim, annots = case
    try:
        req = translate(lim, annots)
    except RequestError:
        return  # refused as on the device-plugin path
    shape = tpl.shape_of(req, fleet=H100)
    back = tpl.shape_of_claim(json.loads(json.dumps(tpl.claim_spec(shape))))
    assert back == shape
    assert tpl.template_name(back) == tpl.template_name(shape)
    # the shape is the request, in a claim's units
    assert back.count == req.count
    assert back.kind == {DeviceMode.EXCLUSIVE: "gpu", DeviceMode.SOFT: "slice",
                         DeviceMode.MIG: "mig", DeviceMode.TIMESLICE: "timeslice",
                         DeviceMode.MPS: "mps"}[req.mode]
    assert back.priority == req.priority
    assert back.mig_profile == req.mig_profile
    assert back.same_nvlink == (req.topology == "required" and req.count > 1)
    if req.mode is DeviceMode.SOFT:
        charged = req.to_pod_request("x").gpu_milli
        assert back.compute == max(1, math.ceil(charged / 10))
        if req.milli is not None:
            assert back.compute * 10 >= req.milli > (back.compute - 1) * 10
        assert back.memory_mib == req.memory_mib
        if req.memory_mib is None:
            assert back.memory_percent == math.ceil(req.memory_percent)
            assert set(back.models) == set(req.models or H100)
    else:
        assert set(back.models) == set(req.models)
    if req.mode is DeviceMode.MPS:
        assert back.memory_mib == req.memory_mib
        assert (back.compute is None) == (req.milli is None)


@pytest.mark.parametrize("name", ["main", "x" * 63])
def test_claim_names_are_dns_labels(name):
    got = dra_translate.claim_name(name)
    assert len(got) <= 63 and got.startswith("gpu-")


sys.path.insert(0, str(Path(__file__).parent))
from test_webhook_fuzz import FUZZ, _review, _well_formed, pods, users  # noqa: E402

DRA_RESOLUTIONS = [Resolution("t", "q", tier, (), dra=dra) for tier in TrustTier
                   for dra in ({"allocator": "kube-scheduler"},
                               {"allocator": "gpugov", "models": ["A100-SXM4-80GB"]},
                               {"allocator": "nope"})]


@st.composite
def dra_pods(draw) -> dict:
    """Pods of 1-3 containers and 0-2 init containers, each spelled by one ecosystem or
    hostile, with a claim entry of the pod's own sometimes."""
    def one(i: int, prefix: str) -> dict:
        lim, _ = draw(spelled())
        c = {"name": f"{prefix}{i}", "image": "x"}
        if draw(st.booleans()):
            c["resources"] = {"limits": lim}
        return c
    app = [one(i, "c") for i in range(draw(st.integers(1, 3)))]
    init = [one(i, "i") for i in range(draw(st.integers(0, 2)))]
    _, annots = draw(spelled())
    p = {"metadata": {"name": "p", "annotations": annots if draw(st.booleans()) else {}},
         "spec": {"containers": app}}
    if init:
        p["spec"]["initContainers"] = init
    if draw(st.booleans()):
        p["spec"]["resourceClaims"] = [{"name": draw(st.sampled_from(["gpu-c0", "own"])),
                                        "resourceClaimName": "x"}]
    return p


@FUZZ
@given(pod=st.one_of(pods, dra_pods()), user=users, res=st.sampled_from(DRA_RESOLUTIONS))
def test_dra_mode_answers_every_pod_and_what_it_admits_applies_and_validates(pod, user, res):
    """Hostile pods in DRA mode: a well-formed answer; an admitted pod's patch applies, and
    the result carries no GPU resource and passes the validating webhook."""
    out = admission.mutate(_review(pod, "CREATE", user), lambda ns: res)
    _well_formed(out)
    if not out["response"]["allowed"] or dra_translate.TEMPLATES not in out:
        return
    ops = json.loads(base64.b64decode(out["response"]["patch"]))
    after = jsonpatch.apply_patch(pod, ops)
    assert admission.pod_request(after) is None
    assert admission.validate(_review(after, "CREATE", user))["response"]["allowed"]
    names = {c["name"] for c in after["spec"]["resourceClaims"]}
    assert len(names) == len(after["spec"]["resourceClaims"])
