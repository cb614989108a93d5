"""An in-apiserver policy on the tenant controller's own writes (defence in depth).

RBAC lets the controller create RoleBindings, ClusterRoles and ClusterRoleBindings and `bind`
the built-in `admin`/`edit`/`view`; the apiserver's escalation check keeps it from granting
more than that, but not from granting `admin` cluster-wide or touching objects that are not
its own. This ValidatingAdmissionPolicy, matched only to the controller's ServiceAccount,
confines it to what `fences` makes: every object named `gpugov-…` and (on create/update)
labelled `gpugov.io/tenant`, never in a system namespace; RoleBindings only to
`admin`/`edit`/`view`; ClusterRoles only `get` on named gpugov Queues; ClusterRoleBindings only
to the ClusterRole of their own name `gpugov-tenant-<tenant>-queue`. The apiserver evaluates
it itself (`failurePolicy: Fail`), so it holds whatever the controller's code does.

`fence_ownership_policies`: the other direction. A tenant's `edit`/`admin` roles may write
NetworkPolicies (and `admin` RoleBindings) in its namespace; the fences labelled
`gpugov.io/tenant` may be changed or deleted only by the controller, cluster admins and the
kube-system controllers (namespace deletion), so a tenant cannot open its fence even for the
moment before the controller restores it.
"""

from __future__ import annotations

from typing import Any

from gpugov.k8s import identities
from gpugov.k8s.tenants.checks import system_namespaces
from gpugov.k8s.tenants.fences import TENANT_LABEL

NAME = "gpugov-tenant-controller-scope"
OWNED = "gpugov-tenant-fences-owned"
RESOURCES = (("", ["resourcequotas", "limitranges"]),
             ("networking.k8s.io", ["networkpolicies"]),
             ("rbac.authorization.k8s.io", ["rolebindings", "clusterroles",
                                            "clusterrolebindings"]))


def validations(namespace: str) -> list[dict[str, str]]:
    obj = "(request.operation == 'DELETE' ? oldObject : object)"
    system = ", ".join(f"'{n}'" for n in system_namespaces(namespace))
    write = "request.operation == 'DELETE' || "
    return [
        {"expression": f"{obj}.metadata.name.startsWith('gpugov-')",
         "message": "the tenant controller writes only objects named gpugov-…"},
        {"expression": f"{write}(has(object.metadata.labels) && "
                       f"'{TENANT_LABEL}' in object.metadata.labels)",
         "message": f"the tenant controller's objects carry the {TENANT_LABEL} label"},
        {"expression": f"!has({obj}.metadata.namespace) || "
                       f"!({obj}.metadata.namespace in [{system}])",
         "message": "the tenant controller never writes in a system namespace"},
        {"expression": f"{write}request.kind.kind != 'RoleBinding' || "
                       "(object.roleRef.kind == 'ClusterRole' && "
                       "object.roleRef.name in ['admin', 'edit', 'view'])",
         "message": "the tenant controller binds only admin, edit or view in a namespace"},
        {"expression": f"{write}request.kind.kind != 'ClusterRoleBinding' || "
                       "(object.roleRef.kind == 'ClusterRole' && "
                       "object.roleRef.name == object.metadata.name && "
                       "object.metadata.name.matches('^gpugov-tenant-.+-queue$'))",
         "message": "the tenant controller binds cluster-wide only its Queue reader roles"},
        {"expression": f"{write}request.kind.kind != 'ClusterRole' || "
                       "(object.metadata.name.matches('^gpugov-tenant-.+-queue$') && "
                       "has(object.rules) && object.rules.all(r, r.apiGroups == ['gpugov.io'] "
                       "&& r.verbs == ['get'] && has(r.resourceNames) && "
                       "r.resources.all(x, x in ['queues', 'queues/status'])))",
         "message": "the tenant controller's ClusterRoles grant only get on named Queues"},
    ]


def controller_scope_policies(namespace: str = identities.SYSTEM_NAMESPACE,
                              release: str = identities.RELEASE) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, for the controller ServiceAccount
    `<release>-tenants` in `namespace`."""
    user = f"system:serviceaccount:{namespace}:{release}-tenants"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [group], "apiVersions": ["v1"],
                 "operations": ["CREATE", "UPDATE", "DELETE"], "resources": resources}
                for group, resources in RESOURCES]},
            "matchConditions": [{"name": "tenant-controller",
                                 "expression": f"request.userInfo.username == '{user}'"}],
            "validations": validations(namespace)}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": NAME},
               "spec": {"policyName": NAME, "validationActions": ["Deny"]}}
    return [policy, binding]


def fence_ownership_policies(namespace: str = identities.SYSTEM_NAMESPACE,
                             release: str = identities.RELEASE) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy (and binding) refusing UPDATE/DELETE of a fence by
    anyone but the controller, `system:masters` and kube-system's controllers."""
    user = f"system:serviceaccount:{namespace}:{release}-tenants"
    others = (f"request.userInfo.username != '{user}' && "
              "!(has(request.userInfo.groups) && "
              "'system:masters' in request.userInfo.groups) && "
              "request.userInfo.username != 'system:kube-controller-manager' && "
              "!request.userInfo.username.startsWith('system:serviceaccount:kube-system:')")
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": OWNED},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [group], "apiVersions": ["v1"],
                 "operations": ["UPDATE", "DELETE"], "resources": resources}
                for group, resources in RESOURCES]},
            "matchConditions": [
                {"name": "a-fence", "expression":
                 f"has(oldObject.metadata.labels) && '{TENANT_LABEL}' in "
                 "oldObject.metadata.labels && oldObject.metadata.name.startsWith('gpugov-')"},
                {"name": "not-gpugov", "expression": others}],
            "validations": [{
                "expression": "false", "reason": "Forbidden",
                "messageExpression": (
                    "request.kind.kind + ' ' + oldObject.metadata.name + ' is a fence of "
                    f"Tenant ' + oldObject.metadata.labels['{TENANT_LABEL}'] + ', kept by "
                    "gpugov: an admin changes it through the Tenant spec.guardrails'")}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": OWNED},
               "spec": {"policyName": OWNED, "validationActions": ["Deny"]}}
    return [policy, binding]


def all_policies(namespace: str = identities.SYSTEM_NAMESPACE,
                 release: str = identities.RELEASE) -> list[dict[str, Any]]:
    """Both policies and their bindings (what `gpugov dev up` and the chart install)."""
    return [*controller_scope_policies(namespace, release),
            *fence_ownership_policies(namespace, release)]


def chart_template() -> str:
    """The policies as the chart's template text (templates/tenant-policy.yaml)."""
    import yaml

    docs = all_policies("NAMESPACE-PLACEHOLDER", "RELEASE-PLACEHOLDER")
    text = "---\n".join(yaml.safe_dump(d, sort_keys=False, width=1000) for d in docs)
    text = text.replace("NAMESPACE-PLACEHOLDER", "{{ .Release.Namespace }}")
    text = text.replace("RELEASE-PLACEHOLDER", '{{ include "gpugov.fullname" . }}')
    return ("{{- if .Values.tenants.enabled }}\n"
            "# Generated by `python -m gpugov.k8s.tenants.policy` from "
            "src/gpugov/k8s/tenants/policy.py; do not edit.\n" + text + "{{- end }}\n")


if __name__ == "__main__":  # python -m gpugov.k8s.tenants.policy > templates/tenant-policy.yaml
    print(chart_template(), end="")
