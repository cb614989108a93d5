"""The chart runs the tenant controller under its own least-privilege ServiceAccount."""

from __future__ import annotations

from tests.k8s.test_chart import NS, render

from gpugov.k8s.devcluster.rbac import load_rules
from gpugov.k8s.tenants.policy import all_policies, chart_template


def test_chart_runs_gpugov_tenants_with_its_own_rules(helm):  # noqa: F811
    by = {(d["kind"], d["metadata"]["name"]): d for d in render(helm)}
    dep = by[("Deployment", "gpugov-tenants")]
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpugov-tenants"
    (c,) = pod["containers"]
    assert c["args"][0] == "tenants" and "--resync=30" in c["args"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert by[("ClusterRole", "gpugov-tenants")]["rules"] == load_rules()["tenants"][
        "clusterRules"]
    binding = by[("ClusterRoleBinding", "gpugov-tenants")]
    assert binding["subjects"][0]["name"] == "gpugov-tenants"
    assert not [d for d in render(helm, "--set", "tenants.enabled=false")
                if "tenants" in d["metadata"]["name"]]


def test_chart_carries_the_tenant_policies_the_code_makes(helm):  # noqa: F811
    from pathlib import Path

    template = Path(__file__).parents[2] / "deploy/helm/gpugov/templates/tenant-policy.yaml"
    assert template.read_text() == chart_template(), \
        "run: python -m gpugov.k8s.tenants.policy > deploy/helm/gpugov/templates/tenant-policy.yaml"
    got = [d for d in render(helm) if d["kind"].startswith("ValidatingAdmissionPolicy")
           and d["metadata"]["name"].startswith("gpugov-tenant-")]
    def order(d: dict) -> tuple[str, str]:
        return d["kind"], d["metadata"]["name"]
    assert sorted(got, key=order) == sorted(all_policies(NS, "gpugov"), key=order)
