"""Node-scoped agents (the NodeRestriction pattern): a ValidatingAdmissionPolicy that lets the
node ServiceAccount change only its own Node and the pods bound to it, and only the fields the
node side owns.

RBAC cannot say "your own node": the node agent and device plugin need `patch` on nodes and
pods, cluster-wide. The apiserver can: a ServiceAccount token bound to a Node (a TokenRequest
with `boundObjectRef` kind Node) or to a pod on that node (the DaemonSet pod's projected token)
carries the node's name in `request.userInfo.extra['authentication.kubernetes.io/node-name']`.
The policy, matched only for the node ServiceAccount (`identities`, pinned to the system
namespace), requires that claim and compares it with the object:

- a Node may be updated only when it is the token's node, and only its node-owned annotations
  (`gpugov.io/inventory`, `gpugov.io/unschedulable-gpus`, `gpugov.io/mig-config-state`,
  `gpugov.io/power`, `gpugov.io/mig-requests-state`) and
  GPU feature discovery labels (`NODE_LABELS`, the per-profile MIG labels, and
  `nvidia.com/mig.config.state`) may change; spec, other labels and annotations may not;
- a pod may be updated only when it is bound to the token's node, and only its
  `gpugov.io/allocated` annotation may change;
- a token without the claim (a plain TokenRequest, a long-lived Secret token) changes nothing.

There are two policies, one for nodes and one for pods, so each type-checks against its own
schema. A third, `<name>-scheduler-nodes`, narrows gpugov's scheduler in the same way: its
RBAC has `patch` on nodes (to ask a node agent for an on-demand MIG instance), and the policy
lets it change only the `gpugov.io/mig-requests` annotation of a Node, nothing else. The
Helm chart renders the same objects (templates/node-policy.yaml and
scheduler-node-policy.yaml; a test keeps them equal).
"""

from __future__ import annotations

from typing import Any

from gpugov.k8s import annotations as ann
from gpugov.k8s import identities
from gpugov.k8s.power.contract import POWER

NAME = "gpugov-node-scope"
#: the token claim the apiserver sets for node-bound and pod-bound ServiceAccount tokens
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
#: Node annotations the node agent writes (`gpugov.io/power`: measured draw, docs/power.md)
NODE_ANNOTATIONS = (ann.INVENTORY, ann.UNSCHEDULABLE_GPUS, ann.MIG_CONFIG_STATE, POWER,
                    ann.MIG_REQUESTS_STATE)
#: Node labels the node agent writes (GFD's convention; `gpugov.node.labels.OWNED_KEYS` plus
#: the MIG outcome label; a test keeps them in step)
NODE_LABELS = (
    ann.GFD_PRESENT, ann.GFD_PRODUCT, ann.GFD_COUNT, ann.GFD_MEMORY, ann.GFD_FAMILY,
    ann.GFD_MIG_STRATEGY, "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy",
    "nvidia.com/mig.capable", "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor",
    *(f"nvidia.com/cuda.driver-version.{k}" for k in ("major", "minor", "revision", "full")),
    *(f"nvidia.com/cuda.runtime-version.{k}" for k in ("major", "minor", "full")),
    "nvidia.com/mig.config.state",
)
#: per-profile MIG labels of the mixed strategy (`gpugov.node.labels._OWNED_MIG`)
NODE_LABEL_PATTERN = r"^nvidia\.com/mig-[A-Za-z0-9.+-]+\.(count|memory)$"
#: pod annotations the device plugin writes
POD_ANNOTATIONS = (ann.ALLOCATED,)

NO_CLAIM = (f"this node ServiceAccount token is not bound to a node (no {NODE_NAME_EXTRA}): use "
            "the node agent pod's projected token or a TokenRequest bound to its Node")
OTHER_NODE = "the node agent may change only its own Node"
OTHER_POD = "the node agent may change only pods bound to its own node"
NODE_FIELDS = ("the node agent may change only gpugov's node-owned annotations ("
               + ", ".join(NODE_ANNOTATIONS) + ") and GPU feature discovery labels of its Node")
POD_FIELDS = f"the node agent may change only the {ann.ALLOCATED} annotation of a pod"
#: Node annotations gpugov's scheduler writes (on-demand MIG requests to the node agent)
SCHEDULER_NODE_ANNOTATIONS = (ann.MIG_REQUESTS,)
SCHEDULER_FIELDS = ("gpugov's scheduler may change only the "
                    + ", ".join(SCHEDULER_NODE_ANNOTATIONS) + " annotation of a Node")


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


def _only_changes(new: str, old: str, allowed: str) -> str:
    """CEL: maps `new` and `old` (string -> string) differ only in keys for which `allowed`
    (an expression over `k`) holds."""
    return (f"{new}.all(k, ({allowed}) || (k in {old} && {old}[k] == {new}[k])) && "
            f"{old}.all(k, ({allowed}) || k in {new})")


def _same(field: str, empty: str = "[]") -> str:
    return (f"(has(object.metadata.{field}) ? object.metadata.{field} : {empty}) == "
            f"(has(oldObject.metadata.{field}) ? oldObject.metadata.{field} : {empty})")


def _rest() -> str:
    """CEL: the spec, finalizers and owner references are unchanged."""
    return (" && object.spec == oldObject.spec && " + _same("finalizers") + " && "
            + _same("ownerReferences"))


#: the two resources, one policy each (each type-checks against its own schema)
RESOURCES = ("nodes", "pods")


def variables() -> list[dict[str, str]]:
    x = f"'{NODE_NAME_EXTRA}'"
    return [
        {"name": "nodeName", "expression":
         f"has(request.userInfo.extra) && {x} in request.userInfo.extra && "
         f"size(request.userInfo.extra[{x}]) == 1 ? request.userInfo.extra[{x}][0] : ''"},
        {"name": "newAnn", "expression":
         "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
        {"name": "oldAnn", "expression":
         "has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}"},
        {"name": "newLabels", "expression":
         "has(object.metadata.labels) ? object.metadata.labels : {}"},
        {"name": "oldLabels", "expression":
         "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"},
    ]


def validations(resource: str) -> list[dict[str, str]]:
    """The rules for `resource` ("nodes" or "pods"), the token's claim first."""
    rest = _rest()
    claim = {"expression": "variables.nodeName != ''", "message": NO_CLAIM,
             "reason": "Forbidden"}
    if resource == "nodes":
        pattern = NODE_LABEL_PATTERN.replace("\\", "\\\\")  # a CEL string literal
        label_ok = f"k in {_cel_list(NODE_LABELS)} || k.matches('{pattern}')"
        return [
            claim,
            {"expression": "object.metadata.name == variables.nodeName",
             "message": OTHER_NODE, "reason": "Forbidden"},
            {"expression": _only_changes("variables.newAnn", "variables.oldAnn",
                                         f"k in {_cel_list(NODE_ANNOTATIONS)}")
             + " && " + _only_changes("variables.newLabels", "variables.oldLabels", label_ok)
             + rest, "message": NODE_FIELDS, "reason": "Forbidden"},
        ]
    if resource == "pods":
        return [
            claim,
            {"expression": "has(oldObject.spec.nodeName) && "
                           "oldObject.spec.nodeName == variables.nodeName",
             "message": OTHER_POD, "reason": "Forbidden"},
            {"expression": _only_changes("variables.newAnn", "variables.oldAnn",
                                         f"k in {_cel_list(POD_ANNOTATIONS)}")
             + " && variables.newLabels == variables.oldLabels" + rest,
             "message": POD_FIELDS, "reason": "Forbidden"},
        ]
    raise ValueError(f"resource {resource!r}; allowed: {', '.join(RESOURCES)}")


def scheduler_validations() -> list[dict[str, str]]:
    """gpugov's scheduler on a Node: only `gpugov.io/mig-requests` may change."""
    return [{"expression": _only_changes("variables.newAnn", "variables.oldAnn",
                                         f"k in {_cel_list(SCHEDULER_NODE_ANNOTATIONS)}")
             + " && variables.newLabels == variables.oldLabels" + _rest(),
             "message": SCHEDULER_FIELDS, "reason": "Forbidden"}]


def _update_policy(full: str, resource: str, match: str, user: str,
                   validations: list[dict[str, str]]) -> list[dict[str, Any]]:
    """A Deny ValidatingAdmissionPolicy on UPDATE of `resource` by `user`, and its binding."""
    return [{
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy", "metadata": {"name": full},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                "resources": [resource]}]},
            "matchConditions": [{"name": match,
                                 "expression": f"request.userInfo.username == '{user}'"}],
            "variables": variables(),
            "validations": validations,
        },
    }, {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": full},
        "spec": {"policyName": full, "validationActions": ["Deny"]},
    }]


def scheduler_node_policies(namespace: str = identities.SYSTEM_NAMESPACE,
                            release: str = identities.RELEASE,
                            name: str = NAME) -> list[dict[str, Any]]:
    """`<name>-scheduler-nodes` and its binding, for the scheduler ServiceAccount of
    `release` in `namespace`."""
    user = identities.service_account("scheduler", namespace, release)
    return _update_policy(f"{name}-scheduler-nodes", "nodes", "scheduler-service-account",
                          user, scheduler_validations())


def node_scope_policies(namespace: str = identities.SYSTEM_NAMESPACE,
                        release: str = identities.RELEASE,
                        name: str = NAME) -> list[dict[str, Any]]:
    """Two ValidatingAdmissionPolicies (`<name>-nodes`, `<name>-pods`) and their bindings
    for the node ServiceAccount of `release` in `namespace`
    (`system:serviceaccount:<namespace>:<release>-node`)."""
    user = identities.service_account("node", namespace, release)
    return [obj for resource in RESOURCES
            for obj in _update_policy(f"{name}-{resource}", resource, "node-service-account",
                                      user, validations(resource))]


#: the chart's copy of the policy's CEL (`files/node-scope.yaml`, read by
#: templates/node-policy.yaml); `python -m gpugov.k8s.node_policy FILE` writes it
CHART_FILE = "deploy/helm/gpugov/files/node-scope.yaml"


def chart_file_text() -> str:
    """What the chart's `files/node-scope.yaml` holds: the variables and validations (the
    parts that do not depend on the release's name and namespace)."""
    import yaml

    head = ("# Generated by `python -m gpugov.k8s.node_policy " + CHART_FILE + "` from\n"
            "# src/gpugov/k8s/node_policy.py; do not edit (tests/k8s/test_rbac.py checks it).\n")
    return head + yaml.safe_dump({"variables": variables(),
                                  **{r: {"validations": validations(r)} for r in RESOURCES},
                                  "schedulerNodes": {"validations": scheduler_validations()}},
                                 sort_keys=False, width=100)


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if len(sys.argv) != 2:
        sys.exit(f"usage: python -m gpugov.k8s.node_policy {CHART_FILE}")
    Path(sys.argv[1]).write_text(chart_file_text())
