"""The Helm chart: renders for every values file, passes server-side dry-run on the real
apiserver, and its RBAC is least privilege (checked with real ServiceAccount tokens)."""

from __future__ import annotations

import asyncio
import base64
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s.devcluster import build
from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.devcluster.dev import install_crds
from gpugov.k8s.devcluster.rbac import load_rules
from gpugov.k8s.webhook import policy, registration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpugov"
EXAMPLES = sorted((REPO / "deploy" / "helm" / "examples").glob("values-*.yaml"))
NS = "gpugov-chart"


def render(helm: Path, *args: str, namespace: str = NS) -> list[dict]:
    # helm built by `go install` has no version stamp and assumes Kubernetes 1.20 offline
    out = subprocess.run([str(helm), "template", "gpugov", str(CHART), "--namespace", namespace,
                          "--kube-version", build.K8S_VERSION, *args],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def kinds(docs: list[dict]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def test_default_render_has_every_component(helm):
    docs = render(helm)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    sched = by[("Deployment", "gpugov-scheduler")]
    assert sched["spec"]["replicas"] == 2
    args = sched["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-elect" in args and f"--lease-namespace={NS}" in args
    assert ("DaemonSet", "gpugov-node") in by and ("Service", "gpugov-webhook") in by
    hook = by[("MutatingWebhookConfiguration", "gpugov")]["webhooks"][0]
    assert hook["matchConditions"][0]["expression"] == registration.GPU_POD_CONDITION
    assert hook["failurePolicy"] == "Fail"
    assert base64.b64decode(hook["clientConfig"]["caBundle"]).startswith(b"-----BEGIN CERT")
    assert "ServiceMonitor" not in kinds(docs) and "PrometheusRule" not in kinds(docs)
    mounts = {m["mountPath"] for m in by[("DaemonSet", "gpugov-node")]["spec"]["template"]
              ["spec"]["containers"][0]["volumeMounts"]}
    assert {"/var/lib/kubelet/device-plugins", "/dev"} <= mounts


def test_reconciler_is_opt_in_and_needs_its_prometheus(helm):
    assert not [d for d in render(helm) if "reconciler" in d["metadata"]["name"]]
    out = subprocess.run([str(helm), "template", "gpugov", str(CHART), "--kube-version",
                          build.K8S_VERSION, "--set", "reconciler.enabled=true"],
                         capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "reconciler.prometheusUrl is required" in out.stderr
    docs = render(helm, "--set", "reconciler.enabled=true", "--set",
                  "reconciler.prometheusUrl=http://prom.monitoring:9090", "--set",
                  "metrics.serviceMonitor.enabled=true")
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    (c,) = by[("Deployment", "gpugov-reconciler")]["spec"]["template"]["spec"]["containers"]
    assert c["args"][:2] == ["reconcile", "--prometheus=http://prom.monitoring:9090"]
    assert ("Service", "gpugov-reconciler") in by and ("ServiceMonitor", "gpugov-reconciler") in by
    assert ("ServiceAccount", "gpugov-reconciler") in by


@pytest.mark.parametrize("values", [None, *EXAMPLES], ids=lambda v: v.name if v else "default")
def test_node_config_is_what_gpugov_node_run_accepts(helm, values, tmp_path):
    from gpugov.node.deviceplugin.all_in_one import load_node_file

    docs = render(helm, *(["-f", str(values)] if values else []))
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] ==
              "gpugov-node")
    path = tmp_path / "node.yaml"
    path.write_text(cm["data"]["node.yaml"])
    cfg = load_node_file(path)  # raises NodeConfigError naming the field
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["gpugov", "node", "run"]
    assert "--config=/etc/gpugov/node.yaml" in container["args"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in \
        container["env"]
    assert cfg.defaultMode in ("exclusive", "soft", "timeslice", "mps", "mig")


def test_cel_condition_file_matches_the_code():
    text = (CHART / "files" / "gpu-pod-condition.cel").read_text().strip()
    assert text == registration.GPU_POD_CONDITION


def test_admission_objects_are_the_codes(helm):
    """The chart's ownership policy and webhook rules are what gpugov's code generates (for
    the release namespace), so the chart and `gpugov dev up` cannot drift."""
    docs = render(helm)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    expected = policy.pod_ownership_policies(NS)
    for want in expected:
        got = by[(want["kind"], want["metadata"]["name"])]
        assert got["spec"] == want["spec"]
    hooks = {h["name"]: h for kind in ("Mutating", "Validating")
             for h in by[(f"{kind}WebhookConfiguration", "gpugov")]["webhooks"]}
    code = {h["name"]: h for o in registration.configurations(b"x", service={},
                                                                system_namespace=NS)
            for h in o["webhooks"]}
    assert sorted(hooks) == sorted(code)
    for name, hook in hooks.items():
        assert "objectSelector" not in hook  # a pod label exempts nothing
        assert hook["rules"] == code[name]["rules"]
        assert hook.get("matchConditions") == code[name].get("matchConditions"), name
        assert hook["failurePolicy"] == code[name]["failurePolicy"]
    assert {"key": "gpugov.io/ignore", "operator": "NotIn", "values": ["true"]} in \
        hooks["mutate.pods.gpugov.io"]["namespaceSelector"]["matchExpressions"]
    args = by[("Deployment", "gpugov-webhook")]["spec"]["template"]["spec"]["containers"][0][
        "args"]
    assert f"--system-namespace={NS}" in args and not any("--client-ca" in a for a in args)
    # without the policy, the webhook validates pod CREATE again (one more HTTPS call per pod)
    off = render(helm, "--set", "admissionPolicy.enabled=false")
    assert not [d for d in off if d["kind"].startswith("ValidatingAdmissionPolicy")
                and d["metadata"]["name"] == "gpugov-pod-ownership"]
    again = {h["name"]: h for d in off if d["kind"] == "ValidatingWebhookConfiguration"
             for h in d["webhooks"]}["validate.pods.gpugov.io"]
    want = {h["name"]: h for o in registration.configurations(
        b"x", service={}, system_namespace=NS, create_validation=True)
        for h in o["webhooks"]}["validate.pods.gpugov.io"]
    assert again["rules"] == want["rules"] and again["matchConditions"] == want["matchConditions"]


def test_webhook_client_ca_and_network_policy(helm, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"webhook": {
        "clientCA": "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
        "networkPolicy": {"enabled": True, "from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}]}}}))
    by = {(d["kind"], d["metadata"]["name"]): d for d in render(helm, "-f", str(values))}
    pod = by[("Deployment", "gpugov-webhook")]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert "--client-ca=/etc/gpugov/client-ca/ca.crt" in c["args"]
    assert c["readinessProbe"] == {"tcpSocket": {"port": "https"}}
    assert {"name": "client-ca", "configMap": {"name": "gpugov-webhook-client-ca"}} in \
        pod["volumes"]
    assert by[("ConfigMap", "gpugov-webhook-client-ca")]["data"]["ca.crt"].startswith("-----")
    netpol = by[("NetworkPolicy", "gpugov-webhook")]["spec"]
    assert netpol["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8443}],
                                  "from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}]}]
    out = subprocess.run([str(helm), "template", "gpugov", str(CHART), "--kube-version",
                          build.K8S_VERSION, "--set", "webhook.networkPolicy.enabled=true"],
                         capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "webhook.networkPolicy.from is required" in out.stderr


def test_monitoring_objects_come_from_the_observability_files(helm):
    docs = render(helm, "--set", "metrics.serviceMonitor.enabled=true",
                  "--set", "metrics.prometheusRule.enabled=true",
                  "--set", "metrics.dashboards.enabled=true")
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    alerts = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"]
    boards = [d for d in docs if d["kind"] == "ConfigMap" and "-dashboard-" in
              d["metadata"]["name"]]
    assert len(boards) == len(list((CHART / "files" / "dashboards").glob("*.json")))
    assert any(d["kind"] == "ServiceMonitor" for d in docs)


def test_cert_manager_mode_replaces_the_generated_secret(helm):
    docs = render(helm, "--set", "webhook.certManager.enabled=true")
    assert "Certificate" in kinds(docs) and "Issuer" in kinds(docs)
    assert not any(d["kind"] == "Secret" for d in docs)
    hook = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"{NS}/gpugov-webhook"


def _kubectl_dry_run(kubeconfig: Path, docs: list[dict]) -> subprocess.CompletedProcess:
    kubectl = build.bin_dir() / "kubectl"
    if not kubectl.exists():
        kubectl = Path("/usr/bin/kubectl")
    return subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", "apply",
                           "--server-side", "--dry-run=server", "--force-conflicts",
                           "--field-manager=gpugov-test",
                           "-f", "-"], input=yaml.safe_dump_all(docs), capture_output=True,
                          text=True, check=False)


THIRD_PARTY = [("monitoring.coreos.com", "ServiceMonitor", "servicemonitors", "v1"),
               ("monitoring.coreos.com", "PrometheusRule", "prometheusrules", "v1"),
               ("cert-manager.io", "Certificate", "certificates", "v1"),
               ("cert-manager.io", "Issuer", "issuers", "v1")]


async def _prepare(kubeconfig: Path) -> None:
    await install_crds(kubeconfig)
    async with api_client(kubeconfig) as api:
        core = client.CoreV1Api(api)
        try:
            await core.create_namespace({"metadata": {"name": NS}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        ext = client.ApiextensionsV1Api(api)
        # Schema-less stand-ins for the operators' CRDs (not installed here), so their kinds
        # exist; the apiserver checks the objects' envelope, not their content.
        for group, kind, plural, version in THIRD_PARTY:
            try:
                await ext.create_custom_resource_definition({
                    "metadata": {"name": f"{plural}.{group}"},
                    "spec": {"group": group, "scope": "Namespaced",
                             "names": {"kind": kind, "plural": plural},
                             "versions": [{"name": version, "served": True, "storage": True,
                                           "schema": {"openAPIV3Schema": {
                                               "type": "object",
                                               "x-kubernetes-preserve-unknown-fields": True}}}]}})
            except ApiException as exc:
                if exc.status != 409:
                    raise
        for _ in range(100):
            crds = await ext.list_custom_resource_definition()
            established = {c.metadata.name for c in crds.items for cond in
                           (c.status.conditions or []) if cond.type == "Established" and
                           cond.status == "True"}
            if all(f"{p}.{g}" in established for g, _, p, _ in THIRD_PARTY):
                return
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("values", [None, *EXAMPLES], ids=lambda v: v.name if v else "default")
def test_rendered_manifests_pass_server_side_dry_run(helm, k8s_control_plane, values):
    asyncio.run(_prepare(k8s_control_plane.kubeconfig))
    args = ["--include-crds", "--set", "metrics.serviceMonitor.enabled=true",
            "--set", "reconciler.enabled=true", "--set", "reconciler.prometheusUrl=http://p:9090",
            "--set", "metrics.prometheusRule.enabled=true",
            "--set", "metrics.dashboards.enabled=true"]
    if values is not None:
        args += ["-f", str(values)]
    docs = render(helm, *args)
    out = _kubectl_dry_run(k8s_control_plane.kubeconfig, docs)
    assert out.returncode == 0, out.stderr
    assert "(server dry run)" in out.stdout
    cm = _kubectl_dry_run(k8s_control_plane.kubeconfig,
                          render(helm, "--set", "webhook.certManager.enabled=true"))
    assert cm.returncode == 0, cm.stderr


def test_rendered_rbac_is_the_rules_file(helm):
    rules = load_rules()
    docs = render(helm)
    docs += [d for d in render(helm, "--set", "reconciler.enabled=true", "--set",
                               "reconciler.prometheusUrl=http://prom:9090")
             if d["metadata"]["name"] == "gpugov-reconciler"]
    for component in ("scheduler", "webhook", "node", "reconciler"):
        role = next(d for d in docs if d["kind"] == "ClusterRole" and
                    d["metadata"]["name"] == f"gpugov-{component}")
        assert role["rules"] == rules[component]["clusterRules"]
        binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding" and
                       d["metadata"]["name"] == f"gpugov-{component}")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"gpugov-{component}",
                                        "namespace": NS}]
    lease_role = next(d for d in docs if d["kind"] == "Role")
    assert lease_role["metadata"] == {**lease_role["metadata"], "name": "gpugov-scheduler",
                                      "namespace": NS}
    assert lease_role["rules"] == rules["scheduler"]["namespaceRules"]


def test_scheduler_kubeconfig_works_with_a_mounted_token(helm, k8s_control_plane, tmp_path):
    """The chart's kubeconfig ConfigMap (tokenFile + CA file of the pod's ServiceAccount),
    with those files placed here, authenticates the scheduler's real token."""
    cluster = k8s_control_plane
    cm = next(d for d in render(helm) if d["kind"] == "ConfigMap" and
              d["metadata"]["name"] == "gpugov-kubeconfig")
    text = cm["data"]["kubeconfig"]
    sa_kc = yaml.safe_load(asyncio.run(cluster.component_kubeconfig(
        "scheduler", "gpugov-chart-kc")).read_text())
    (tmp_path / "token").write_text(sa_kc["users"][0]["user"]["token"])
    (tmp_path / "ca.crt").write_bytes((cluster.workdir / "pki" / "ca.crt").read_bytes())
    text = text.replace("/var/run/secrets/kubernetes.io/serviceaccount", str(tmp_path))
    text = text.replace("https://kubernetes.default.svc", cluster.server)
    path = tmp_path / "kubeconfig"
    path.write_text(text)

    async def status(call) -> int:
        try:
            await call
            return 200
        except ApiException as exc:
            return exc.status

    async def run() -> tuple[int, int]:
        async with api_client(path) as api:
            core = client.CoreV1Api(api)
            return (await status(core.list_node()),
                    await status(core.list_secret_for_all_namespaces()))
    assert asyncio.run(run()) == (200, 403)  # authenticated as the scheduler, not more


@pytest.mark.parametrize("mode,field,want", [("timeslice", "timesliceReplicas", 4),
                                             ("mps", "mpsReplicas", 4)])
def test_a_shared_default_mode_serves_the_charts_replicas_per_card(helm, tmp_path, mode, field,
                                                                    want):
    """`--set node.defaultMode=timeslice|mps` alone gives N replicas (or MPS clients) per card
    (the node agent publishes them; the scheduler charges each card/N), and MPS clients share
    the daemon's /dev/shm from the node's state folder."""
    from gpugov.node.deviceplugin.all_in_one import load_node_file

    docs = render(helm, "--set", f"node.defaultMode={mode}")
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] ==
              "gpugov-node")
    path = tmp_path / "node.yaml"
    path.write_text(cm["data"]["node.yaml"])
    cfg = load_node_file(path)
    assert cfg.defaultMode == mode and getattr(cfg, field) == want
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    mounts = {m["name"]: m["mountPath"] for m in
              ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert mounts["mps-shm"] == "/dev/shm"
    assert vols["mps-shm"]["hostPath"]["path"] == "/var/lib/gpugov/mps/shm"


def test_helm_template_renders_without_a_kube_version(helm) -> None:
    """Issue 22 (low): `helm template` without --kube-version failed against the chart's
    kubeVersion (GitOps tools render that way)."""
    out = subprocess.run([str(helm), "template", "gpugov", str(CHART)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "kind: ValidatingAdmissionPolicy" in out.stdout


def _node_env(docs: list[dict]) -> dict[str, str]:
    ds = next(d for d in docs if d["kind"] == "DaemonSet" and
              d["metadata"]["name"] == "gpugov-node")
    return {e["name"]: e.get("value") for e in
            ds["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_hami_metric_names_are_a_chart_value(helm):
    """`node.exporter.hamiMetrics=true` sets GPUGOV_EXPORTER_HAMI_METRICS=1 on the node
    container (the exporter serves HAMi's names); off by default."""
    assert "GPUGOV_EXPORTER_HAMI_METRICS" not in _node_env(render(helm))
    env = _node_env(render(helm, "--set", "node.exporter.hamiMetrics=true"))
    assert env["GPUGOV_EXPORTER_HAMI_METRICS"] == "1"


def test_nvidias_own_plugin_config_is_a_chart_value(helm, tmp_path):
    """`node.nvidiaConfig` takes the GPU Operator's time-slicing config file unedited
    (tests/compat/upstream): the node file `gpugov node run` reads serves its 10 replicas,
    as nvidia.com/gpu too (renameByDefault: false)."""
    from gpugov.node.deviceplugin.all_in_one import load_node_file

    src = Path(__file__).parents[1] / "compat/upstream/gpu-operator/tests/plugin-config.yaml"
    values = tmp_path / "values.yaml"
    values.write_text("node:\n  nvidiaConfig:\n" + "".join(
        f"    {line}\n" for line in src.read_text().splitlines()))
    docs = render(helm, "-f", str(values))
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] ==
              "gpugov-node")
    path = tmp_path / "node.yaml"
    path.write_text(cm["data"]["node.yaml"])
    assert load_node_file(path).sharing() == ("timeslice", 10, True)
