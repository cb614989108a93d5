"""Fuzzing the admission webhook: pod specs, quantities, annotations, users and raw bodies.

Every answer of the pure functions is a well-formed AdmissionReview; every answer of the aiohttp
app is one, or an HTTP 400/413 for a body that is not a review; nothing raises, and each review
completes within `HANG` seconds (a hang detector only, not a performance claim).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpugov.k8s import annotations as ann
from gpugov.k8s.webhook import admission
from gpugov.k8s.webhook.server import TenancySource, WebhookApp
from gpugov.k8s.webhook.tenancy import Resolution, TenancyError
from gpugov.model.isolation import TrustTier

HANG = 2.0
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

digits = st.text("0123456789", min_size=1, max_size=30)
quantities = st.one_of(
    st.integers(-(10**40), 10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["0", "1", "2", "20k", "1Gi", "500m", "1e3", "1e400", "1e8000000", "-1",
                     "10e399", ".5", "0k", "0e9", "1E30", "1e-400", "9" * 5000, "NaN", "inf",
                     "", " 1 ", "1.5", "0x10"]),
    st.builds(lambda d, e: f"{d}e{e}", digits, st.integers(-(10**9), 10**9)),
    st.builds(lambda n: "9" * n, st.integers(1, 20000)),
    st.text(max_size=40),
)
resource_keys = st.one_of(
    st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                     "nvidia.com/gpucores", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb",
                     "nvidia.com/mig-3g.40gb.shared", "nvidia.com/tpu", "cpu", "memory",
                     "ephemeral-storage"]),
    st.text(max_size=30),
)
annotation_keys = st.one_of(
    st.sampled_from([*admission.OWNED, "gpu-fraction", "gpu-memory", "gpu-fraction-num-devices",
                     "gpugov.io/model", "gpugov.io/isolation", "gpugov.io/topology",
                     "gpugov.io/other", "note"]),
    st.text(max_size=30),
)
annotation_values = st.one_of(
    st.sampled_from(["0.5", "1", "1e400", "nan", "inf", "-1", "10240", "H100-SXM5-80GB", "hard",
                     "required", '{"v":1,"count":1,"mode":"exclusive"}', "9" * 3000]),
    st.text(max_size=60),
)
resources = st.dictionaries(resource_keys, quantities, max_size=5)
container = st.fixed_dictionaries({"name": st.text(max_size=10)}, optional={
    "resources": st.fixed_dictionaries({}, optional={"limits": resources,
                                                     "requests": resources})})
labels = st.dictionaries(st.sampled_from([ann.IGNORE_LABEL, ann.MANAGED_LABEL, "app"]),
                         st.sampled_from(["true", "false", ""]), max_size=3)
pods = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({}, optional={
        "annotations": st.dictionaries(annotation_keys, annotation_values, max_size=6),
        "labels": labels, "name": st.text(max_size=10)}),
    "spec": st.fixed_dictionaries({"containers": st.lists(container, max_size=3)}, optional={
        "initContainers": st.lists(container, max_size=2),
        "nodeName": st.sampled_from(["", "gpu-node-1"]),
        "schedulerName": st.sampled_from(["", "gpugov", "default-scheduler", "volcano"]),
        "nodeSelector": st.dictionaries(st.sampled_from(["nvidia.com/gpu.product", "x"]),
                                        st.sampled_from(["NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
                                                         "y"]), max_size=2)}),
})
users = st.sampled_from([
    {}, {"username": "system:serviceaccount:team:tenant", "groups": ["system:authenticated"]},
    {"username": "system:serviceaccount:gpugov-system:gpugov-scheduler"},
    {"username": "admin", "groups": ["system:masters"]}, {"username": 7, "groups": "x"}])
RESOLUTIONS = [Resolution("t", "q", tier, scheds) for tier in TrustTier
               for scheds in ((), ("volcano",))]


def _review(pod: dict, op: str, user: dict, old: dict | None = None) -> dict[str, Any]:
    req: dict[str, Any] = {"uid": "fuzz", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                           "namespace": "ns", "operation": op, "object": pod, "userInfo": user}
    if old is not None:
        req["oldObject"] = old
    return req


def _well_formed(out: dict[str, Any]) -> None:
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    resp = out["response"]
    assert resp["uid"] == "fuzz" and isinstance(resp["allowed"], bool)
    if not resp["allowed"]:
        assert isinstance(resp["status"]["message"], str) and resp["status"]["message"]
        assert resp["status"]["code"] in (400, 403, 422, 500)
    if "patch" in resp:
        ops = json.loads(base64.b64decode(resp["patch"]))
        assert all(op["op"] in ("add", "remove") and op["path"].startswith("/") for op in ops)
    json.dumps(out)  # serialisable as the server sends it


def _timed(fn, *args, **kw) -> dict[str, Any]:
    t0 = time.monotonic()
    out = fn(*args, **kw)
    assert time.monotonic() - t0 < HANG, "review took too long (hang detector)"
    return out


@FUZZ
@given(pod=pods, user=users, res=st.sampled_from([*RESOLUTIONS, None]),
       scheduler=st.sampled_from(["gpugov", ""]))
def test_mutate_and_validate_answer_every_pod(pod, user, res, scheduler):
    def resolve(ns: str) -> Resolution:
        if res is None:
            raise TenancyError("no tenant")
        return res
    _well_formed(_timed(admission.mutate, _review(pod, "CREATE", user), resolve, scheduler))
    _well_formed(_timed(admission.validate, _review(pod, "CREATE", user)))


@FUZZ
@given(old=pods, new=pods, user=users)
def test_updates_are_answered_and_owned_changes_need_gpugov(old, new, user):
    out = _timed(admission.validate, _review(new, "UPDATE", user, old))
    _well_formed(out)
    if admission.owned_changes(_review(new, "UPDATE", user, old)) and \
            not admission.is_gpugov_request(_review(new, "UPDATE", user, old)):
        assert out["response"]["allowed"] is False


@FUZZ
@given(value=quantities, key=st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem",
                                              "nvidia.com/gpucores", "cpu", "memory"]))
def test_any_quantity_is_a_request_or_a_clear_refusal(value, key):
    pod = {"metadata": {}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {key: value, "nvidia.com/gpu": 1}
                                    if key != "nvidia.com/gpu" else {key: value}}}]}}
    out = _timed(admission.mutate, _review(pod, "CREATE", {}), lambda ns: RESOLUTIONS[0])
    _well_formed(out)
    if not out["response"]["allowed"]:
        assert out["response"]["status"]["message"].startswith("gpugov: ")


class _Tenancy(TenancySource):
    """Tenancy without an API (the fuzz exercises the webhook, not the apiserver)."""

    def __init__(self) -> None:
        super().__init__(None)

    async def resolve(self, namespace: str) -> Resolution:
        return RESOLUTIONS[0]

    async def queues(self) -> dict[str, str | None]:
        return {"a": "b", "b": None}


@pytest.fixture(scope="module")
def app_client():
    loop = asyncio.new_event_loop()
    hook = WebhookApp(_Tenancy())
    tc = TestClient(TestServer(hook.app), loop=loop)
    loop.run_until_complete(tc.start_server())
    yield loop, tc, hook
    loop.run_until_complete(tc.close())
    loop.close()


def _post(app_client, path: str, body: bytes) -> tuple[int, Any]:
    loop, tc, _ = app_client

    async def go() -> tuple[int, Any]:
        resp = await asyncio.wait_for(tc.post(path, data=body), HANG * 5)
        return resp.status, await resp.read()
    return loop.run_until_complete(go())


def _answered(status: int, body: bytes) -> None:
    assert status in (200, 400, 413), (status, body[:200])
    data = json.loads(body)
    if status == 200:
        _well_formed(data)
    else:
        assert isinstance(data["error"], str)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=30)


@FUZZ
@given(body=st.one_of(
    st.binary(max_size=300),
    st.builds(lambda n: b"[" * n + b"]" * n, st.integers(1, 200_000)),
    st.builds(lambda n: b'{"a":' * n + b"1" + b"}" * n, st.integers(1, 50_000)),
    st.builds(lambda v: json.dumps(v).encode(), json_values),
    st.builds(lambda r: json.dumps({"apiVersion": "admission.k8s.io/v1",
                                    "kind": "AdmissionReview", "request": r}).encode(),
              json_values),
    st.just(b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
            b'{"uid": "fuzz", "object": ' + b"9" * 5000 + b"}}"),
), path=st.sampled_from(["/mutate", "/validate"]))
def test_any_body_gets_a_review_or_a_400(app_client, body, path):
    _answered(*_post(app_client, path, body))


@FUZZ
@given(pod=pods, user=users, op=st.sampled_from(["CREATE", "UPDATE"]),
       kind=st.sampled_from(["Pod", "Queue", "Tenant", "Other"]),
       path=st.sampled_from(["/mutate", "/validate"]))
def test_any_review_gets_a_well_formed_answer(app_client, pod, user, op, kind, path):
    req = _review(pod, op, user, pod if op == "UPDATE" else None)
    req["kind"] = {"kind": kind}
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": req}).encode()
    status, answer = _post(app_client, path, body)
    assert status == 200, answer[:300]
    _well_formed(json.loads(answer))


def test_a_review_over_budget_is_refused_and_counted(app_client, monkeypatch):
    loop, tc, hook = app_client

    def slow(*args: Any, **kw: Any) -> dict[str, Any]:
        time.sleep(0.5)
        raise AssertionError("not reached in time")
    monkeypatch.setattr(hook, "budget", 0.05)
    monkeypatch.setattr(admission, "validate", slow)
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": _review({"spec": {}}, "CREATE", {})}).encode()
    status, answer = _post(app_client, "/validate", body)
    out = json.loads(answer)["response"]
    assert status == 200 and out["allowed"] is False
    assert out["status"]["message"] == ("gpugov: this object took gpugov's webhook longer than "
                                        "0.05 s to review; refused (simplify its GPU request)")
    assert hook.timeouts.labels("validate")._value.get() == 1


def test_deeply_nested_body_is_a_400():
    with pytest.raises(admission.ReviewError, match="nested too deeply"):
        admission.parse_review(b"[" * 200_000 + b"]" * 200_000)


def _mutate_body(spec: dict[str, Any], pad: int = 0) -> bytes:
    pod = {"metadata": {"name": "p", "annotations": {"note": "x" * pad}}, "spec": spec}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": _review(pod, "CREATE", {"username": "u"})}).encode()


GPU_SPEC = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In",
                                                 "values": ["v"]}]}]}}}


def test_a_plain_pod_is_answered_while_every_review_thread_is_stuck(app_client, monkeypatch):
    """Small pod reviews are decided on the event loop: pods whose review is slow (affinity,
    large bodies) occupy the thread pool, ordinary pods are still answered."""
    import threading

    from gpugov.k8s.webhook import server

    loop, tc, hook = app_client
    release, real = threading.Event(), admission.mutate
    stuck: list[str] = []

    def mutate(req: Any, *args: Any, **kw: Any) -> dict[str, Any]:
        if not server._cheap(req) or len(json.dumps(req)) > server.INLINE_BODY:
            stuck.append(req["object"]["metadata"]["name"])
            release.wait(HANG * 5)
        return real(req, *args, **kw)
    monkeypatch.setattr(admission, "mutate", mutate)
    # the watch-fed cache is synced: tenancy comes from memory, no API read
    monkeypatch.setattr(hook.tenancy, "from_memory", lambda ns: (RESOLUTIONS[0], "", ""))

    async def go() -> tuple[list[Any], dict[str, Any]]:
        slow = [asyncio.ensure_future(tc.post("/mutate", data=_mutate_body(
            {**GPU_SPEC, "affinity": AFFINITY}))) for _ in range(server.WORKERS - 1)]
        slow.append(asyncio.ensure_future(tc.post("/mutate", data=_mutate_body(
            GPU_SPEC, pad=server.INLINE_BODY))))
        while len(stuck) < server.WORKERS:  # every pool thread holds a review
            await asyncio.sleep(0.01)
        plain = await asyncio.wait_for(tc.post("/mutate", data=_mutate_body(GPU_SPEC)),
                                       HANG * 5)
        answer = json.loads(await plain.read())["response"]
        assert not release.is_set()
        release.set()
        return [await (await s).read() for s in slow], answer

    slow, answer = loop.run_until_complete(go())
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch", answer
    for body in slow:  # the pooled ones are decided too, once released
        assert json.loads(body)["response"]["allowed"] is True


def test_a_slow_review_of_a_large_or_affinity_pod_is_refused_within_the_budget(
        app_client, monkeypatch):
    loop, tc, hook = app_client

    def slow(*args: Any, **kw: Any) -> dict[str, Any]:
        time.sleep(0.5)
        raise AssertionError("not reached in time")
    monkeypatch.setattr(hook, "budget", 0.05)
    monkeypatch.setattr(admission, "mutate", slow)
    from gpugov.k8s.webhook import server

    for body in (_mutate_body({**GPU_SPEC, "affinity": AFFINITY}),
                 _mutate_body(GPU_SPEC, pad=server.INLINE_BODY)):
        status, answer = _post(app_client, "/mutate", body)
        out = json.loads(answer)["response"]
        assert status == 200 and out["allowed"] is False
        assert "longer than 0.05 s to review" in out["status"]["message"]
    assert hook.timeouts.labels("mutate")._value.get() == 2
