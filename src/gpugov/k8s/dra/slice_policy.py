"""Node-scoped ResourceSlices: a ValidatingAdmissionPolicy that lets the node ServiceAccount
write only its own node's `gpu.gpugov.io` slices (the NodeRestriction pattern of
`k8s/node_policy.py`, which holds for Nodes and pods).

RBAC gives the node identity create/update/delete on every ResourceSlice (it cannot say
"your own node"). The policy, matched only for the node ServiceAccount, requires the token's
node-name claim (`authentication.kubernetes.io/node-name`: a token bound to the Node or to the
node agent's pod) and that a created or updated slice is gpugov's driver, with `nodeName`
and pool name both that node, and that an updated or deleted slice was that node's.
`policies()` renders the objects; the chart (`dra.enabled`, templates/dra.yaml, from the
generated files/dra.yaml: `chart_files.py`) and `gpugov dev up --dra-pool` install them.
"""

from __future__ import annotations

from typing import Any

from gpugov.k8s import identities
from gpugov.k8s.dra.slices import DRIVER
from gpugov.k8s.node_policy import NO_CLAIM, variables

NAME = "gpugov-node-slices"
OTHER_NODE = (f"the node agent may write only its own node's {DRIVER} ResourceSlices "
              "(spec.driver, spec.nodeName and spec.pool.name must be gpugov's and its node's)")
OLD_OTHER = "the node agent may change or delete only its own node's ResourceSlices"


def validations() -> list[dict[str, str]]:
    mine = ("has(object.spec.nodeName) && object.spec.nodeName == variables.nodeName && "
            f"object.spec.pool.name == variables.nodeName && object.spec.driver == '{DRIVER}'")
    return [
        {"expression": "variables.nodeName != ''", "message": NO_CLAIM, "reason": "Forbidden"},
        {"expression": f"request.operation == 'DELETE' || ({mine})", "message": OTHER_NODE,
         "reason": "Forbidden"},
        {"expression": "request.operation == 'CREATE' || (has(oldObject.spec.nodeName) && "
                       "oldObject.spec.nodeName == variables.nodeName)",
         "message": OLD_OTHER, "reason": "Forbidden"},
    ]


def policies(namespace: str = identities.SYSTEM_NAMESPACE, release: str = identities.RELEASE,
             name: str = NAME) -> list[dict[str, Any]]:
    """The policy and its binding for `system:serviceaccount:<namespace>:<release>-node`."""
    user = identities.service_account("node", namespace, release)
    return [{
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["resourceslices"]}]},
            "matchConditions": [{"name": "node-service-account",
                                 "expression": f"request.userInfo.username == '{user}'"}],
            "variables": [v for v in variables() if v["name"] == "nodeName"],
            "validations": validations(),
        },
    }, {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }]
