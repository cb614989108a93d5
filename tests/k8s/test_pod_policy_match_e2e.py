"""The pod policy's matchCondition on the real apiserver: it lets a pod no rule could refuse
skip the rules (the apiserver converts the whole pod for each CEL pass of a policy, three
passes per evaluated pod; `bench/webhook_admission_parts.py` measures it), and every pod a rule
refuses still reaches them: the condition is a superset of the refusals, by keys only. The
policy is bound to this module's namespaces by a label, so other tests' pods are unaffected.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s import annotations as ann
from gpugov.k8s.webhook import policy

SYSTEM_NS = "gpugov-system"
LABEL = {"gpugov-policy-match": "true"}
NAME = "gpugov-policy-match"


def _policies() -> list[dict[str, Any]]:
    return policy.pod_ownership_policies(SYSTEM_NS, {"matchLabels": dict(LABEL)}, NAME)


def _pod(name: str, limits: dict | None = None, annotations: dict | None = None,
         labels: dict | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": "busybox"}
    if limits:
        c["resources"] = {"limits": limits}
    return {"metadata": {"name": name, "annotations": annotations or {},
                         "labels": labels or {}},
            "spec": {"containers": [c]}}


async def _status(call: Any) -> tuple[int, str]:
    try:
        await call
        return 200, ""
    except ApiException as exc:
        try:
            return exc.status, json.loads(exc.body).get("message", "")
        except (TypeError, ValueError):
            return exc.status, str(exc.body)


@pytest.fixture(scope="module")
def cluster(k8s_control_plane):
    c = k8s_control_plane
    asyncio.run(policy.apply_policies(c.kubeconfig, _policies()))

    async def enforced() -> None:  # the policy is live once a forged record is refused
        ns = await c.unique_namespace("match-probe", dict(LABEL))
        async with c.api() as api:
            core = client.CoreV1Api(api)
            for _ in range(300):
                status, _m = await _status(core.create_namespaced_pod(
                    ns, _pod("p", annotations={ann.ALLOCATION: "x"}), dry_run="All"))
                if status != 200:
                    return
                await asyncio.sleep(0.1)
        raise AssertionError("policy never enforced")
    asyncio.run(enforced())
    yield c
    asyncio.run(policy.delete_policies(c.kubeconfig, _policies()))


def test_pods_no_rule_refuses_pass_and_each_refusal_still_reaches_the_rules(cluster):
    async def run() -> None:
        ns = await cluster.unique_namespace("match", dict(LABEL))
        tenant = await cluster.tenant_kubeconfig(ns)
        from gpugov.k8s.devcluster.client import api_client

        async with api_client(tenant) as mine:
            core = client.CoreV1Api(mine)
            # plain pod: created and relabelled, neither evaluated by the rules
            assert (await _status(core.create_namespaced_pod(ns, _pod("plain"))))[0] == 200
            assert (await _status(core.patch_namespaced_pod(
                "plain", ns, {"metadata": {"labels": {"app": "x"}}})))[0] == 200
            # a GPU pod already carrying gpugov's translation passes every CREATE rule
            status, _m = await _status(core.create_namespaced_pod(ns, _pod(
                "translated", {"nvidia.com/gpu": "1"},
                {ann.REQUEST: '{"v":1,"count":1}'}), dry_run="All"))
            assert status == 200
            # an owned key a tenant set at CREATE (the webhook removes it; none runs here)
            assert (await _status(core.create_namespaced_pod(
                ns, _pod("owned", annotations={ann.QUEUE: "q"}))))[0] == 200
            translated_on_node = _pod("n", {"volcano.sh/vgpu-number": "1"},
                                      {ann.REQUEST: '{"v":1,"count":1}'})
            translated_on_node["spec"]["nodeName"] = "node-1"
            init_gpu = _pod("i")
            init_gpu["spec"]["initContainers"] = [{"name": "init", "image": "busybox",
                                                   "resources": {"limits": {
                                                       "nvidia.com/gpu": "1"}}}]
            # what a rule refuses still reaches the rules: each kind the condition lets in
            refused = [
                core.create_namespaced_pod(ns, _pod("g", {"nvidia.com/gpu": "1"}),
                                           dry_run="All"),
                core.create_namespaced_pod(ns, _pod("k", annotations={"gpu-fraction": "0.5"}),
                                           dry_run="All"),
                core.create_namespaced_pod(ns, _pod("a", annotations={ann.ALLOCATED: "x"}),
                                           dry_run="All"),
                core.create_namespaced_pod(ns, translated_on_node, dry_run="All"),
                core.create_namespaced_pod(ns, init_gpu, dry_run="All"),
                core.patch_namespaced_pod("plain", ns, {"metadata": {"labels": {
                    ann.MANAGED_LABEL: "true"}}}),
                # the owned key only before: removing it is a change too
                core.patch_namespaced_pod("owned", ns, {"metadata": {"annotations": {
                    ann.QUEUE: None}}}),
            ]
            for call in refused:
                status, msg = await _status(call)
                assert status in (403, 422) and "gpugov" in msg, (status, msg)
    asyncio.run(run())


def test_the_chart_renders_the_codes_condition():
    text = (Path(__file__).resolve().parents[2] / "deploy/helm/gpugov/files/"
            "pod-policy-match.cel").read_text().strip()
    assert text == policy.match_condition()
