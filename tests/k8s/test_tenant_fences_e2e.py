"""A Tenant's fences on the real kube-apiserver: provisioned, enforced, repaired, reported.

The tenant controller runs as `gpugov tenants` under the chart's ServiceAccount and RBAC (a
real token), fencing only the Tenants this module labels (the cluster is shared). The webhook
is registered for this module's namespaces only.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s import crds
from gpugov.k8s.devcluster.dev import (
    apply_webhook_configurations,
    gpugov_argv,
    install_crds,
    start_webhook,
)
from gpugov.k8s.tenants.policy import all_policies
from gpugov.k8s.webhook import registration
from gpugov.k8s.webhook.policy import apply_policies, delete_policies

SCOPE = {"gpugov-tenant-e2e": "true"}
MANAGED = {"gpugov-tenant-e2e": "yes"}  # the controller's --tenant-selector
QUEUE = "tenant-e2e-a"
OTHER_QUEUE = "tenant-e2e-b"
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
MERGE = "application/merge-patch+json"
CONTAINER_SC = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _configs(cluster, url: str) -> list[dict]:
    objs = registration.configurations(cluster.plane.ca.pair.cert, url=url)
    for o in objs:
        for hook in o["webhooks"]:
            if "namespaceSelector" in hook:
                hook["namespaceSelector"]["matchLabels"] = dict(SCOPE)
    return objs


def _tenant(name: str, spec: dict) -> dict:
    return {"apiVersion": crds.API_VERSION, "kind": "Tenant",
            "metadata": {"name": name, "labels": dict(MANAGED)}, "spec": spec}


async def _custom(cluster, fn: str, *args, **kw):
    async with cluster.api() as api:
        return await getattr(client.CustomObjectsApi(api), fn)(
            crds.GROUP, crds.VERSION, *args, **kw)


async def _wait(check, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = await check()
            if last:
                return last
        except ApiException as exc:
            last = exc
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout} s (last: {last})")


def _pod(name: str, gpu: bool = True, restricted: bool = True, **spec_extra) -> dict:
    c: dict = {"name": "main", "image": "busybox"}
    if gpu:
        c["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    if restricted:
        c["securityContext"] = dict(CONTAINER_SC)
    spec: dict = {"containers": [c], **spec_extra}
    if restricted:
        spec["securityContext"] = dict(RESTRICTED)
    return {"metadata": {"name": name}, "spec": spec}


async def _create_pod(kubeconfig, ns: str, body: dict, cluster) -> tuple[int, str]:
    async with cluster.api(kubeconfig) as api:
        try:
            await client.CoreV1Api(api).create_namespaced_pod(ns, body)
            return 201, ""
        except ApiException as exc:
            msg = json.loads(exc.body).get("message", "") if exc.body else ""
            return exc.status, msg


@pytest.fixture(scope="module")
def fenced(k8s_control_plane):
    cluster = k8s_control_plane
    asyncio.run(install_crds(cluster.kubeconfig))

    async def setup() -> dict:
        async with cluster.api() as api:
            custom = client.CustomObjectsApi(api)
            for q in (QUEUE, OTHER_QUEUE):
                try:
                    await custom.create_cluster_custom_object(
                        crds.GROUP, crds.VERSION, "queues",
                        {"apiVersion": crds.API_VERSION, "kind": "Queue",
                         "metadata": {"name": q}, "spec": {"weight": 1}})
                except ApiException as exc:
                    if exc.status != 409:
                        raise
        a = await cluster.unique_namespace("tenant-a", SCOPE)
        b = await cluster.unique_namespace("tenant-b", {**SCOPE, "team": "b-e2e"})
        trusted = await cluster.unique_namespace("tenant-t", SCOPE)
        return {"a": a, "b": b, "trusted": trusted}

    names = asyncio.run(setup())
    url = start_webhook(cluster.plane)
    asyncio.run(apply_webhook_configurations(cluster.kubeconfig, _configs(cluster, url)))
    kc = asyncio.run(cluster.component_kubeconfig("tenants"))
    cluster.tenants_kubeconfig = kc
    asyncio.run(apply_policies(cluster.kubeconfig, all_policies()))
    cluster.plane.start_process("gpugov-tenants", gpugov_argv(
        "tenants", "--kubeconfig", str(kc), "--resync", "5",
        "--tenant-selector", ",".join(f"{k}={v}" for k, v in MANAGED.items())))
    tenants = {
        "e2e-a": _tenant("e2e-a", {
            "namespaces": [names["a"]], "queue": QUEUE, "trust": "untrusted",
            "guardrails": {"quota": {"hard": {"pods": "10", "requests.cpu": "4"}},
                           "rbac": {"editors": [{"kind": "User", "name": "alice"},
                                                {"kind": "Group", "name": "team-a"}]}}}),
        "e2e-b": _tenant("e2e-b", {
            "namespaceSelector": {"matchLabels": {"team": "b-e2e"}}, "queue": OTHER_QUEUE,
            "trust": "internal",
            "guardrails": {"quota": {"hard": {"pods": "5"}},
                           "rbac": {"viewers": [{"kind": "User", "name": "bob"}]},
                           "placement": {"nodeSelector": {"gpugov.io/pool": "team-b"},
                                         "tolerations": [{"key": "dedicated",
                                                          "operator": "Equal",
                                                          "value": "team-b",
                                                          "effect": "NoSchedule"}]}}}),
        "e2e-trusted": _tenant("e2e-trusted", {
            "namespaces": [names["trusted"]], "queue": OTHER_QUEUE, "trust": "trusted",
            "guardrails": {"podSecurity": {"level": "baseline"}, "podChecks": False}}),
    }
    for body in tenants.values():
        asyncio.run(_custom(cluster, "create_cluster_custom_object", "tenants", body))
    cluster.tenant_names = names
    yield cluster

    async def teardown() -> None:
        for name in [*tenants, "e2e-missing-sa", "e2e-bad-rule"]:
            try:
                await _custom(cluster, "delete_cluster_custom_object", "tenants", name)
            except ApiException as exc:
                if exc.status != 404:
                    raise

        async def gone():  # the controller removes what the Tenants made
            async with cluster.api() as api:
                got = await client.NetworkingV1Api(api).list_network_policy_for_all_namespaces(
                    label_selector="gpugov.io/tenant")
                return not [p for p in got.items if p.metadata.labels["gpugov.io/tenant"]
                            .startswith("e2e-")]
        await _wait(gone, what="fences removed")
        async with cluster.api() as api:
            reg = client.AdmissionregistrationV1Api(api)
            await reg.delete_mutating_webhook_configuration(registration.NAME)
            await reg.delete_validating_webhook_configuration(registration.NAME)
    asyncio.run(teardown())
    asyncio.run(delete_policies(cluster.kubeconfig, all_policies()))
    cluster.plane.procs.stop("gpugov-tenants")
    cluster.plane.procs.stop("gpugov-webhook")


async def _ready(cluster, name: str) -> dict:
    async def check():
        t = await _custom(cluster, "get_cluster_custom_object", "tenants", name)
        conds = {c["type"]: c for c in (t.get("status") or {}).get("conditions") or []}
        return t if conds.get("Ready", {}).get("status") == "True" else None
    return await _wait(check, what=f"Tenant {name} Ready")


def test_a_tenant_gets_its_fences_and_reports_them(fenced):
    cluster = fenced
    ns = cluster.tenant_names["a"]

    async def run() -> None:
        t = await _ready(cluster, "e2e-a")
        conds = {c["type"]: c for c in t["status"]["conditions"]}
        assert {k: conds[k]["status"] for k in ("PodSecurity", "ResourceQuota", "LimitRange",
                                                 "NetworkPolicy", "RBAC", "Ready")} == \
            dict.fromkeys(("PodSecurity", "ResourceQuota", "LimitRange", "NetworkPolicy",
                           "RBAC", "Ready"), "True")
        assert t["status"]["namespaces"] == [ns]
        async with cluster.api() as api:
            core, net = client.CoreV1Api(api), client.NetworkingV1Api(api)
            rbac = client.RbacAuthorizationV1Api(api)
            labels = (await core.read_namespace(ns)).metadata.labels
            assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
            assert labels["gpugov.io/tenant"] == "e2e-a"
            rq = await core.read_namespaced_resource_quota("gpugov-tenant", ns)
            assert rq.spec.hard == {"pods": "10", "requests.cpu": "4"}
            lr = await core.read_namespaced_limit_range("gpugov-tenant", ns)
            assert lr.spec.limits[0].default_request == {"cpu": "100m", "memory": "128Mi"}
            pols = {p.metadata.name for p in
                    (await net.list_namespaced_network_policy(ns)).items}
            assert pols == {"gpugov-default-deny", "gpugov-allow-tenant", "gpugov-allow-dns"}
            rb = await rbac.read_namespaced_role_binding("gpugov-tenant-edit", ns)
            assert rb.role_ref.name == "edit"
            assert {(s.kind, s.name) for s in rb.subjects} == {("User", "alice"),
                                                               ("Group", "team-a")}
    asyncio.run(run())


def test_psa_and_the_webhook_refuse_what_bypasses_the_library(fenced):
    cluster = fenced
    a, b, trusted = (cluster.tenant_names[k] for k in ("a", "b", "trusted"))

    async def run() -> None:
        await _ready(cluster, "e2e-a")
        await _ready(cluster, "e2e-b")
        await _ready(cluster, "e2e-trusted")
        kc = cluster.kubeconfig
        # untrusted: a GPU pod that does not meet `restricted` is refused by the apiserver's
        # own PodSecurity admission (no gpugov code in that refusal)
        code, msg = await _create_pod(kc, a, _pod("plain", restricted=False), cluster)
        assert code == 403 and 'violates PodSecurity "restricted:latest"' in msg, msg
        # a privileged GPU pod of a trusted tenant that turned podChecks off: PSA baseline
        priv = _pod("priv", restricted=False)
        priv["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        code, msg = await _create_pod(kc, trusted, priv, cluster)
        assert code == 403 and 'violates PodSecurity "baseline:latest"' in msg, msg
        assert "privileged" in msg
        # untrusted privileged GPU pod: refused (gpugov first, PSA behind it)
        code, msg = await _create_pod(kc, a, priv, cluster)
        assert code == 403 and "gpugov" in msg and "privileged: true" in msg, msg
        # /dev/nvidia* hostPath: the webhook says what and why
        dev = _pod("devs", restricted=False, volumes=[
            {"name": "nv", "hostPath": {"path": "/dev/nvidia0"}}])
        dev["spec"]["containers"][0]["volumeMounts"] = [{"name": "nv",
                                                         "mountPath": "/dev/nvidia0"}]
        code, msg = await _create_pod(kc, b, dev, cluster)
        assert code == 403 and "gpugov" in msg and "/dev/nvidia0" in msg, msg
        env = _pod("env")
        env["spec"]["containers"][0]["env"] = [{"name": "CUDA_VISIBLE_DEVICES", "value": "1"}]
        code, msg = await _create_pod(kc, a, env, cluster)
        assert code == 403 and "CUDA_VISIBLE_DEVICES" in msg, msg
        # a compliant GPU pod of the untrusted tenant is admitted
        code, msg = await _create_pod(kc, a, _pod("ok"), cluster)
        assert code == 201, msg
        # a GPU pod of the dedicated-pool tenant gets its nodeSelector and toleration
        code, msg = await _create_pod(kc, b, _pod("placed"), cluster)
        assert code == 201, msg
        async with cluster.api() as api:
            pod = await client.CoreV1Api(api).read_namespaced_pod("placed", b)
        assert pod.spec.node_selector == {"gpugov.io/pool": "team-b"}
        assert any(t.key == "dedicated" and t.value == "team-b" for t in pod.spec.tolerations)
    asyncio.run(run())


def test_a_tenant_user_acts_in_its_namespace_only(fenced):
    cluster = fenced
    a, b = cluster.tenant_names["a"], cluster.tenant_names["b"]
    alice = cluster.kubeconfig_for("alice", ("team-a",))

    async def run() -> None:
        await _ready(cluster, "e2e-a")
        code, msg = await _create_pod(alice, a, _pod("by-alice", gpu=False), cluster)
        assert code == 201, msg
        code, msg = await _create_pod(alice, b, _pod("by-alice", gpu=False), cluster)
        assert code == 403, msg
        async with cluster.api(alice) as api:  # edit may write NetworkPolicies, not the fences
            net = client.NetworkingV1Api(api)
            await net.create_namespaced_network_policy(a, {
                "metadata": {"name": "alice-own"}, "spec": {"podSelector": {}}})
            for call in (lambda: net.delete_namespaced_network_policy("gpugov-default-deny", a),
                         lambda: net.patch_namespaced_network_policy(
                             "gpugov-allow-tenant", a, {"metadata": {"labels": {
                                 "gpugov.io/tenant": None}}}, _content_type=MERGE)):
                with pytest.raises(ApiException) as err:
                    await call()
                assert err.value.status == 403
                assert "is a fence of Tenant e2e-a, kept by gpugov" in err.value.body
        async with cluster.api(alice) as api:
            custom = client.CustomObjectsApi(api)
            own = await custom.get_cluster_custom_object_status(
                crds.GROUP, crds.VERSION, "queues", QUEUE)
            assert own["metadata"]["name"] == QUEUE
            for call in (custom.get_cluster_custom_object(crds.GROUP, crds.VERSION, "queues",
                                                          OTHER_QUEUE),
                         custom.patch_cluster_custom_object(crds.GROUP, crds.VERSION, "queues",
                                                            QUEUE, {"spec": {"weight": 9}},
                                                            _content_type=MERGE),
                         custom.patch_cluster_custom_object(crds.GROUP, crds.VERSION,
                                                            "tenants", "e2e-a",
                                                            {"spec": {"trust": "trusted"}},
                                                            _content_type=MERGE)):
                with pytest.raises(ApiException) as err:
                    await call
                assert err.value.status == 403
    asyncio.run(run())


def test_drift_is_repaired_and_new_namespaces_fenced(fenced, capsys):
    cluster = fenced
    a = cluster.tenant_names["a"]

    async def run() -> None:
        await _ready(cluster, "e2e-a")
        async with cluster.api() as api:
            core, net = client.CoreV1Api(api), client.NetworkingV1Api(api)
            t0 = time.monotonic()
            await net.delete_namespaced_network_policy("gpugov-default-deny", a)
            await _wait(lambda: net.read_namespaced_network_policy("gpugov-default-deny", a),
                        what="NetworkPolicy restored")
            restored = time.monotonic() - t0
            await core.patch_namespaced_resource_quota("gpugov-tenant", a,
                                                       {"spec": {"hard": {"pods": "1000"}}},
                                                       _content_type=MERGE)

            async def quota_back():
                rq = await core.read_namespaced_resource_quota("gpugov-tenant", a)
                return rq.spec.hard.get("pods") == "10"
            await _wait(quota_back, what="quota restored")
            await core.patch_namespace(a, {"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "privileged"}}}, _content_type=MERGE)

            async def psa_back():
                ns = await core.read_namespace(a)
                return ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
            await _wait(psa_back, what="PSA label restored")
            t1 = time.monotonic()
            late = await cluster.unique_namespace("tenant-b-late", {**SCOPE, "team": "b-e2e"})

            async def fenced_late():
                pols = (await net.list_namespaced_network_policy(late)).items
                ns = await core.read_namespace(late)
                return len(pols) == 3 and \
                    ns.metadata.labels.get("pod-security.kubernetes.io/enforce") == "baseline"
            await _wait(fenced_late, what="a later namespace fenced")
            fenced_in = time.monotonic() - t1
        with capsys.disabled():
            print(f"\n[tenant fences] deleted NetworkPolicy back in {restored:.2f} s; "
                  f"a namespace labelled later fenced in {fenced_in:.2f} s")
    asyncio.run(run())


def test_bad_tenants_are_refused_or_reported_never_half_applied(fenced):
    cluster = fenced
    a, b = cluster.tenant_names["a"], cluster.tenant_names["b"]

    async def refused(body: dict) -> str:
        with pytest.raises(ApiException) as err:
            await _custom(cluster, "create_cluster_custom_object", "tenants", body)
        return json.loads(err.value.body)["message"]

    async def run() -> None:
        msg = await refused(_tenant("e2e-overlap", {"namespaces": [a], "queue": QUEUE}))
        assert "already belong to Tenant e2e-a" in msg, msg
        msg = await refused(_tenant("e2e-kube", {"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "kube-system"}}, "queue": QUEUE}))
        assert "matches system namespace(s) kube-system" in msg, msg
        msg = await refused(_tenant("e2e-sys", {"namespaces": ["kube-system"], "queue": QUEUE}))
        assert "system namespace" in msg, msg
        msg = await refused(_tenant("e2e-low", {
            "namespaces": ["nowhere-e2e"], "queue": QUEUE, "trust": "untrusted",
            "guardrails": {"podSecurity": {"level": "baseline"}}}))
        assert "below the floor" in msg and "restricted" in msg, msg
        # a ServiceAccount subject that does not exist: RBAC reported, nothing bound
        ns = await cluster.unique_namespace("tenant-sa", SCOPE)
        await _custom(cluster, "create_cluster_custom_object", "tenants", _tenant(
            "e2e-missing-sa", {"namespaces": [ns], "queue": QUEUE, "guardrails": {"rbac": {
                "admins": [{"kind": "ServiceAccount", "name": "ghost", "namespace": ns}]}}}))

        async def reported():
            t = await _custom(cluster, "get_cluster_custom_object", "tenants", "e2e-missing-sa")
            conds = {c["type"]: c for c in (t.get("status") or {}).get("conditions") or []}
            return conds if conds.get("RBAC", {}).get("reason") == "SubjectNotFound" else None
        conds = await _wait(reported, what="SubjectNotFound reported")
        assert conds["RBAC"]["status"] == "False" and f"{ns}/ghost" in conds["RBAC"]["message"]
        assert conds["Ready"]["status"] == "False"
        assert conds["NetworkPolicy"]["status"] == "True"  # other fences still hold
        async with cluster.api() as api:
            rbs = (await client.RbacAuthorizationV1Api(api).list_namespaced_role_binding(
                ns, label_selector="gpugov.io/tenant")).items
            assert rbs == []
        # an extra rule the apiserver refuses: that fence reported, the others in place
        ns2 = await cluster.unique_namespace("tenant-rule", SCOPE)
        await _custom(cluster, "create_cluster_custom_object", "tenants", _tenant(
            "e2e-bad-rule", {"namespaces": [ns2], "queue": QUEUE, "guardrails": {
                "networkPolicy": {"ingress": [{"ports": [{"port": 70000}]}]}}}))

        async def rejected():
            t = await _custom(cluster, "get_cluster_custom_object", "tenants", "e2e-bad-rule")
            conds = {c["type"]: c for c in (t.get("status") or {}).get("conditions") or []}
            return conds if conds.get("NetworkPolicy", {}).get("reason") == "Rejected" else None
        conds = await _wait(rejected, what="Rejected reported")
        assert "gpugov-extra" in conds["NetworkPolicy"]["message"]
        assert conds["LimitRange"]["status"] == "True"
        async with cluster.api() as api:
            pols = {p.metadata.name for p in (await client.NetworkingV1Api(api)
                                              .list_namespaced_network_policy(ns2)).items}
            assert pols == {"gpugov-default-deny", "gpugov-allow-tenant", "gpugov-allow-dns"}
        # a quota below what the namespace already holds: reported, the quota left as it was
        for i in range(3):
            code, msg = await _create_pod(cluster.kubeconfig, b, _pod(f"hold-{i}", gpu=False),
                                          cluster)
            assert code == 201, msg
        await _custom(cluster, "patch_cluster_custom_object", "tenants", "e2e-b",
                      {"spec": {"guardrails": {"quota": {"hard": {"pods": "1"}}}}},
                      _content_type=MERGE)

        async def below():
            t = await _custom(cluster, "get_cluster_custom_object", "tenants", "e2e-b")
            conds = {c["type"]: c for c in (t.get("status") or {}).get("conditions") or []}
            return conds if conds.get("ResourceQuota", {}).get("reason") == "BelowUsage" \
                else None
        conds = await _wait(below, what="BelowUsage reported")
        assert "pods=1" in conds["ResourceQuota"]["message"]
        async with cluster.api() as api:
            rq = await client.CoreV1Api(api).read_namespaced_resource_quota("gpugov-tenant", b)
            assert rq.spec.hard["pods"] == "5"
    asyncio.run(run())


def test_the_controller_itself_cannot_grant_more_than_tenant_fences(fenced):
    """RBAC lets the controller bind `admin`; the in-apiserver policy confines it to the
    objects its fences are made of."""
    cluster = fenced
    a = cluster.tenant_names["a"]
    rbac_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"}
    me = {"kind": "User", "name": "mallory", "apiGroup": "rbac.authorization.k8s.io"}
    labels = {"gpugov.io/tenant": "e2e-a"}

    async def run() -> None:
        async with cluster.api(cluster.tenants_kubeconfig) as api:
            rbac, net = client.RbacAuthorizationV1Api(api), client.NetworkingV1Api(api)
            attempts = {
                "cluster-wide admin": rbac.create_cluster_role_binding({
                    "metadata": {"name": "gpugov-tenant-evil-queue", "labels": labels},
                    "subjects": [me], "roleRef": rbac_ref}),
                "policy in kube-system": net.create_namespaced_network_policy("kube-system", {
                    "metadata": {"name": "gpugov-allow-all", "labels": labels},
                    "spec": {"podSelector": {}}}),
                "not its own object": net.create_namespaced_network_policy(a, {
                    "metadata": {"name": "allow-all", "labels": labels},
                    "spec": {"podSelector": {}}}),
            }
            for what, call in attempts.items():
                with pytest.raises(ApiException) as err:
                    await call
                assert err.value.status in (403, 422), what
                assert "gpugov-tenant-controller-scope" in err.value.body, (what, err.value.body)
    asyncio.run(run())
