"""In-apiserver ownership of gpugov's pod fields: a ValidatingAdmissionPolicy (CEL, GA since
Kubernetes 1.30) and its binding.

The apiserver evaluates the policy itself, so it holds while gpugov's webhook is down (the
webhook refuses the same changes as a second layer). On pod UPDATE an owned annotation or
label may be added, changed or removed only by gpugov's components (`identities`, pinned to
the system namespace) or a cluster admin (`system:masters`); on pod CREATE nobody may set
`gpugov.io/allocation` / `gpugov.io/allocated` (the scheduler writes the allocation through
the Binding subresource, the device plugin writes `allocated` later).

After every mutating webhook ran, a pod CREATE in a namespace gpugov's webhook reviews (not in
`skip_namespaces`, not labelled `gpugov.io/ignore=true` by an admin) that asks for a GPU (a
non-zero `nvidia.com/` or `volcano.sh/vgpu` resource, or KAI's `gpu-fraction`/`gpu-memory`)
must carry gpugov's translation (`gpugov.io/request`: its GPU came after gpugov's webhook ran,
or no webhook is registered), and may preset `spec.nodeName` only when gpugov or an admin
creates it. These were the separate CREATE call of the validating webhook; here they cost the
apiserver no HTTP call and hold while the webhook is down (docs/threat-model.md).

Its `matchConditions` (`match_condition`) let only requests some rule could refuse reach the
rules: the apiserver converts the pod for CEL once for the condition instead of once per pass
(validations, messages, audit annotations). Measured, that is small beside what the policy
costs before any expression runs (about 0.4 ms per pod; docs/kubernetes.md).

Only the `pods` resource is matched: the scheduler's `pods/binding` and the kubelet's
`pods/status` are subresources and not affected. The Helm chart renders the same objects
(templates/admission-policy.yaml).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpugov.k8s import annotations as ann
from gpugov.k8s import identities

NAME = "gpugov-pod-ownership"
#: pod annotations only gpugov's components write
OWNED_ANNOTATIONS = (ann.REQUEST, ann.QUEUE, ann.TENANT, ann.TRUST_TIER, ann.ALLOCATION,
                     ann.ALLOCATED)
#: pod labels only gpugov's components write
OWNED_LABELS = (ann.MANAGED_LABEL,)
#: annotations nobody may set when creating a pod
FORBIDDEN_AT_CREATE = (ann.ALLOCATION, ann.ALLOCATED)


#: CEL: a resource name gpugov translates (the webhook's matchCondition, registration.py)
_GPU_KEY = "(k.startsWith('nvidia.com/') || k.startsWith('volcano.sh/vgpu'))"
#: CEL: the pod asks for a GPU (a zero quantity asks for nothing, as `pod_request` reads it)
ASKS_GPU = (
    "[(has(object.spec.initContainers) ? object.spec.initContainers : []), "
    "object.spec.containers].exists(cs, cs.exists(c, has(c.resources) && ("
    f"(has(c.resources.limits) && c.resources.limits.exists(k, {_GPU_KEY} && "
    "quantity(c.resources.limits[k]).isGreaterThan(quantity('0')))) || "
    f"(has(c.resources.requests) && c.resources.requests.exists(k, {_GPU_KEY} && "
    "quantity(c.resources.requests[k]).isGreaterThan(quantity('0'))))))) || "
    "'gpu-fraction' in variables.newAnn || 'gpu-memory' in variables.newAnn"
)


def _owned_present(obj: str) -> str:
    return (f"(has({obj}.metadata.annotations) && {_cel_list(OWNED_ANNOTATIONS)}.exists(k, k in "
            f"{obj}.metadata.annotations)) || (has({obj}.metadata.labels) && "
            f"{_cel_list(OWNED_LABELS)}.exists(k, k in {obj}.metadata.labels))")


def _may_ask_gpu() -> str:
    """A superset of ASKS_GPU that reads only keys (no quantity): a GPU resource named."""
    return ("[(has(object.spec.initContainers) ? object.spec.initContainers : []), "
            "object.spec.containers].exists(cs, cs.exists(c, has(c.resources) && ("
            f"(has(c.resources.limits) && c.resources.limits.exists(k, {_GPU_KEY})) || "
            f"(has(c.resources.requests) && c.resources.requests.exists(k, {_GPU_KEY}))))) || "
            "(has(object.metadata.annotations) && ('gpu-fraction' in object.metadata.annotations"
            " || 'gpu-memory' in object.metadata.annotations))")


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


def _unchanged(key: str, new: str, old: str) -> str:
    k = f"'{key}'"
    return (f"(({k} in {new}) == ({k} in {old}) && "
            f"(!({k} in {new}) || {new}[{k}] == {old}[{k}]))")


def match_condition() -> str:
    """CEL: the request is one some validation could refuse (a superset, by keys only), so
    every other pod is decided by this one check: the apiserver converts the whole pod for
    each CEL evaluation pass of a policy (validations, messages, audit annotations), and a
    matchCondition that is false ends after one. UPDATE: an owned key present
    before or after (nothing owned on either side: nothing owned changed). CREATE: an
    allocation record set, or a pod that may ask for a GPU and either presets spec.nodeName
    or lacks gpugov's translation (a pod gpugov's webhook translated, with no node preset,
    passes every CREATE rule)."""
    ann_new = "object.metadata.annotations"
    alloc = " || ".join(f"'{k}' in {ann_new}" for k in FORBIDDEN_AT_CREATE)
    return (f"request.operation == 'UPDATE' ? ({_owned_present('object')} || "
            f"{_owned_present('oldObject')}) : "
            f"(has({ann_new}) && ({alloc})) || "
            f"((has(object.spec.nodeName) || !has({ann_new}) || !('{ann.REQUEST}' in {ann_new}))"
            f" && ({_may_ask_gpu()}))")


def owner_message(key: str, what: str = "annotation") -> str:
    """The refusal both layers give for a change of an owned key (the e2e tests match it)."""
    return (f"{key}: this pod {what} is owned by gpugov; only gpugov's components may add, "
            "change or remove it")


def create_message(key: str) -> str:
    return (f"{key}: only gpugov's scheduler writes it (through the Binding); remove it from "
            "the pod")


def node_name_message() -> str:
    return ("spec.nodeName: set on a pod that asks for a GPU; a GPU pod is placed by the gpugov "
            "scheduler, which accounts it in its queue: remove spec.nodeName (use a nodeSelector "
            "or node affinity to pick nodes)")


def untranslated_message() -> str:
    return (f"{ann.REQUEST}: the pod asks for a GPU but gpugov's mutating webhook did not "
            "translate it (a GPU resource or annotation was added after gpugov's webhook ran, "
            "or the webhook is not registered); create it with its GPU request as written")


def validations() -> list[dict[str, str]]:
    """One CEL rule per owned key, so the refusal names the key; then the CREATE rules for
    pods that ask for a GPU (cheap tests first: CEL stops at the first true operand)."""
    out = []
    for key in OWNED_ANNOTATIONS:
        out.append({
            "expression": "request.operation != 'UPDATE' || variables.gpugov || "
                          + _unchanged(key, "variables.newAnn", "variables.oldAnn"),
            "message": owner_message(key), "reason": "Forbidden"})
    for key in OWNED_LABELS:
        out.append({
            "expression": "request.operation != 'UPDATE' || variables.gpugov || "
                          + _unchanged(key, "variables.newLabels", "variables.oldLabels"),
            "message": owner_message(key, "label"), "reason": "Forbidden"})
    for key in FORBIDDEN_AT_CREATE:
        out.append({"expression": f"request.operation != 'CREATE' || "
                                  f"!('{key}' in variables.newAnn)",
                    "message": create_message(key), "reason": "Forbidden"})
    out.append({"expression": "request.operation != 'CREATE' || !has(object.spec.nodeName) || "
                              "variables.gpugov || variables.exempt || !variables.asksGpu",
                "message": node_name_message(), "reason": "Forbidden"})
    out.append({"expression": f"request.operation != 'CREATE' || '{ann.REQUEST}' in "
                              "variables.newAnn || variables.exempt || !variables.asksGpu",
                "message": untranslated_message(), "reason": "Invalid"})
    return out


def variables(namespace: str, skip_namespaces: tuple[str, ...] = ("kube-system",)
              ) -> list[dict[str, str]]:
    """`exempt`: the namespaces gpugov's webhook does not review (the chart's
    webhook.skipNamespaces, gpugov's own, an admin's `gpugov.io/ignore=true` label)."""
    users = identities.component_users(namespace)
    skip = (*skip_namespaces, namespace)
    ignore = f"namespaceObject.metadata.labels['{ann.IGNORE_LABEL}']"
    return [
        {"name": "gpugov", "expression":
         f"request.userInfo.username in {_cel_list(users)} || "
         f"(has(request.userInfo.groups) && '{identities.ADMIN_GROUP}' in "
         "request.userInfo.groups)"},
        {"name": "newAnn", "expression":
         "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
        {"name": "oldAnn", "expression":
         "request.operation == 'UPDATE' && has(oldObject.metadata.annotations) ? "
         "oldObject.metadata.annotations : {}"},
        {"name": "newLabels", "expression":
         "has(object.metadata.labels) ? object.metadata.labels : {}"},
        {"name": "oldLabels", "expression":
         "request.operation == 'UPDATE' && has(oldObject.metadata.labels) ? "
         "oldObject.metadata.labels : {}"},
        {"name": "exempt", "expression":
         f"namespaceObject.metadata.name in {_cel_list(skip)} || "
         f"(has(namespaceObject.metadata.labels) && '{ann.IGNORE_LABEL}' in "
         f"namespaceObject.metadata.labels && {ignore} == 'true')"},
        {"name": "asksGpu", "expression": ASKS_GPU},
    ]


def pod_ownership_policies(namespace: str = identities.SYSTEM_NAMESPACE,
                           namespace_selector: dict[str, Any] | None = None,
                           name: str = NAME,
                           skip_namespaces: tuple[str, ...] = ("kube-system",)
                           ) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding. `namespace`: where gpugov's component
    ServiceAccounts live; `namespace_selector`: limit the binding (tests; default: every
    namespace); `skip_namespaces`: those the webhook skips besides `namespace` (as
    `registration.configurations`)."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["pods"]}]},
            "matchConditions": [{"name": "may-refuse", "expression": match_condition()}],
            "variables": variables(namespace, skip_namespaces),
            "validations": validations(),
        },
    }
    binding: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    if namespace_selector is not None:
        binding["spec"]["matchResources"] = {"namespaceSelector": namespace_selector}
    return [policy, binding]


async def apply_policies(kubeconfig: Path, objs: list[dict[str, Any]]) -> None:
    """Create or replace each ValidatingAdmissionPolicy / binding in `objs`."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.rest import ApiException

    from gpugov.k8s.devcluster.client import api_client

    async with api_client(kubeconfig) as api:
        reg = client.AdmissionregistrationV1Api(api)
        for obj in objs:
            name = obj["metadata"]["name"]
            if obj["kind"] == "ValidatingAdmissionPolicy":
                read, create, replace = (reg.read_validating_admission_policy,
                                         reg.create_validating_admission_policy,
                                         reg.replace_validating_admission_policy)
            else:
                read, create, replace = (reg.read_validating_admission_policy_binding,
                                         reg.create_validating_admission_policy_binding,
                                         reg.replace_validating_admission_policy_binding)
            try:
                cur = await read(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                await create(obj)
                continue
            body = {**obj, "metadata": {**obj["metadata"],
                                        "resourceVersion": cur.metadata.resource_version}}
            await replace(name, body)


async def delete_policies(kubeconfig: Path, objs: list[dict[str, Any]]) -> None:
    """Delete the objects of `objs` (missing ones are fine)."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.rest import ApiException

    from gpugov.k8s.devcluster.client import api_client

    async with api_client(kubeconfig) as api:
        reg = client.AdmissionregistrationV1Api(api)
        for obj in reversed(objs):
            delete = (reg.delete_validating_admission_policy
                      if obj["kind"] == "ValidatingAdmissionPolicy"
                      else reg.delete_validating_admission_policy_binding)
            try:
                await delete(obj["metadata"]["name"])
            except ApiException as exc:
                if exc.status != 404:
                    raise
