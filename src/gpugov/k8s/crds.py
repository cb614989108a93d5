"""gpugov's CustomResourceDefinitions (`gpugov.io/v1alpha1`), generated from the config models.

One source of truth: the schemas of `Queue`, `Tenant` and `PriorityPolicy` come from the pydantic
models of `control/config.py` (the replay's YAML config), turned into structural OpenAPI v3 with
CEL `x-kubernetes-validations` for the cross-field invariants the apiserver can check itself
(quota <= limit, a queue is not its own parent, a Tenant names its namespaces
one way). Amounts are never negative (`minimum: 0`). The committed YAML under
deploy/helm/gpugov/crds/ is `generate()`'s output (a test fails when it is stale); `gpugov crd
generate` rewrites it. `config_to_objects` / `objects_to_config` convert between the two forms.

- `Queue` (cluster-scoped): one node of the quota tree; `metadata.name` is the queue name.
- `Tenant` (cluster-scoped): namespaces (a list, or a label selector) -> leaf queue + trust tier,
  and `schedulers`: the other schedulers its GPU pods may name (default: gpugov only; the
  webhook refuses any other), and `timeSlicing.oversubscribe` (a trusted tenant's time-slice
  replicas are not capped at their memory), and `guardrails` (Pod Security, quota, limit
  range, network policy, RBAC, placement: the fences `gpugov tenants` keeps; status carries
  one condition per fence). The config's one `namespace` becomes `namespaces: [namespace]`.
- `PowerDomain` (cluster-scoped): a rack's panel (`panelWatts`, `ratio` default 0.80) and the
  nodes it feeds (`nodeSelector`, default the label `gpugov.io/rack=<name>`); status: budget,
  admitted and measured watts, headroom, the caps node agents apply (docs/power.md).
- `PriorityPolicy` (cluster-scoped): extends the Kubernetes PriorityClass of the same name with
  `preemptible` and `minRuntime`; the value stays on the PriorityClass.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from gpugov.control.config import (
    RESOURCES,
    ControlConfig,
    PriorityClassConfig,
    QueueConfig,
    TenantConfig,
    parse_config,
)
from gpugov.model.power import DEFAULT_RATIO, MAX_PANEL_W

GROUP = "gpugov.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
RESOURCE_MAPS = ("quota", "limit", "borrowingLimit", "lendingLimit")
DURATION_PATTERN = r"^[0-9]+(\.[0-9]+)?(ms|s|m|h|d)?$"
CRD_DIR = Path("deploy") / "helm" / "gpugov" / "crds"
_UNITS = {"gpu": "GPUs (fractions allowed)", "cpu": "cores", "memory": "GiB",
          "gpumem": "GiB of GPU memory"}


def _structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """pydantic JSON schema -> Kubernetes structural schema (no $ref, anyOf-null, titles)."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        if rest.get("default", 0) is None:
            rest.pop("default")
        return _structural({**options[0], **rest}, defs)
    out: dict[str, Any] = {}
    for key in ("type", "description", "enum", "minimum", "maximum", "minLength", "default",
                "pattern", "minItems"):
        if key in schema:
            out[key] = schema[key]
    if schema.get("type") == "object":
        if "properties" in schema:
            out["properties"] = {k: _structural(v, defs) for k, v in schema["properties"].items()}
            if schema.get("required"):
                out["required"] = list(schema["required"])
        elif isinstance(schema.get("additionalProperties"), dict):
            out["additionalProperties"] = _structural(schema["additionalProperties"], defs)
    if schema.get("type") == "array" and "items" in schema:
        out["items"] = _structural(schema["items"], defs)
    return out


def _model_schema(model: type[BaseModel], drop: tuple[str, ...] = ()) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True)
    spec = _structural(raw, raw.get("$defs", {}))
    for name in drop:
        spec["properties"].pop(name, None)
        if name in spec.get("required", []):
            spec["required"].remove(name)
    if not spec.get("required"):
        spec.pop("required", None)
    return spec


def _resource_map(description: str) -> dict[str, Any]:
    return {"type": "object", "description": description,
            "properties": {r: {"type": "number", "minimum": 0,
                               "description": f"{r} in {_UNITS.get(r, 'units')}"}
                           for r in RESOURCES}}


def _queue_rules() -> list[dict[str, str]]:
    rules = []
    for r in RESOURCES:
        quota = f"(has(self.quota) && has(self.quota.{r}) ? double(self.quota.{r}) : 0.0)"
        rules.append({
            "rule": f"!has(self.limit) || !has(self.limit.{r}) || "
                    f"{quota} <= double(self.limit.{r})",
            "message": f"limit.{r} must be >= quota.{r} (a queue cannot be guaranteed more "
                       "than it may ever use)",
            "fieldPath": f".limit.{r}"})
    return rules


def queue_crd() -> dict[str, Any]:
    spec = _model_schema(QueueConfig, drop=("name",))
    for m in RESOURCE_MAPS:
        spec["properties"][m] = _resource_map(
            spec["properties"][m].get("description", "") or f"{m} per resource")
    spec["x-kubernetes-validations"] = _queue_rules()
    status = {"type": "object", "properties": {
        "usage": _resource_map("what admitted pods of this queue (and children) hold"),
        "draUsage": _resource_map("the part of usage held by DRA ResourceClaims of driver "
                                  "gpu.gpugov.io (docs/dra.md)"),
        "fairShare": _resource_map("the queue's current fair share"),
        "pending": {"type": "integer", "minimum": 0, "description": "pending pods"},
        "admitted": {"type": "integer", "minimum": 0, "description": "admitted pods"},
        "conditions": _conditions()}}
    root_rules = [{"rule": "!has(self.spec.parent) || self.spec.parent != self.metadata.name",
                   "message": "spec.parent: a queue cannot be its own parent"}]
    return _crd("Queue", "queues", spec, status, root_rules, [
        {"name": "Parent", "type": "string", "jsonPath": ".spec.parent"},
        {"name": "Quota-GPU", "type": "number", "jsonPath": ".spec.quota.gpu"},
        {"name": "Limit-GPU", "type": "number", "jsonPath": ".spec.limit.gpu"},
        {"name": "Usage-GPU", "type": "number", "jsonPath": ".status.usage.gpu"},
        {"name": "Pending", "type": "integer", "jsonPath": ".status.pending"}],
        short=["gq"])


def tenant_crd() -> dict[str, Any]:
    spec = _model_schema(TenantConfig, drop=("namespace", "timeSlicing"))  # written below
    spec["properties"]["namespaces"] = {
        "type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1},
        "description": "namespaces of this tenant (or use namespaceSelector)"}
    spec["properties"]["namespaceSelector"] = {
        "type": "object", "description": "a label selector over namespaces; {} matches every "
        "namespace (a catch-all tenant, used when no other tenant names the namespace)",
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {"type": "array", "items": {
                "type": "object", "required": ["key", "operator"], "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string",
                                 "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}}}}}}}
    spec["properties"]["schedulers"] = {
        "type": "array", "maxItems": 16, "x-kubernetes-list-type": "set",
        "items": {"type": "string", "minLength": 1, "maxLength": 253},
        "description": "schedulers besides gpugov's that GPU pods of this tenant may name in "
        "spec.schedulerName (default: none; gpugov's admission refuses any other, since a pod "
        "placed by another scheduler escapes gpugov's queues and quotas)"}
    spec["properties"]["timeSlicing"] = {
        "type": "object", "description": "how this tenant's time-slice replicas "
        "(nvidia.com/gpu.shared) are served",
        "properties": {"oversubscribe": {
            "type": "boolean", "default": False,
            "description": "false (default): each replica is charged and capped at the memory "
            "it names (nvidia.com/gpumem), else card/replicas, by the enforcement library (soft "
            "isolation); true: replicas are not capped and the card's memory may be "
            "oversubscribed, as the NVIDIA device plugin's time-slicing (isolation none; only "
            "a trusted tenant)"}}}
    spec["properties"]["guardrails"] = _guardrails_schema()
    spec["properties"]["dra"] = {  # webhook/dra_translate.py, docs/dra.md "Translation"
        "type": "object", "description": "DRA mode: the webhook turns this tenant's GPU "
        "pods' extended resources (every spelling) into ResourceClaims on gpugov's DRA "
        "driver, one per GPU container; absent: the device plugin's extended resources",
        "properties": {
            "allocator": {"type": "string", "enum": ["kube-scheduler", "gpugov"],
                          "default": "kube-scheduler",
                          "description": "who allocates the claims: kube-scheduler (from "
                          "gpugov's ResourceSlices, governed by `gpugov dra governor`) or "
                          "gpugov's scheduler (queues, fair share, gangs and reclaim apply; "
                          "docs/dra.md)"},
            "models": {"type": "array", "maxItems": 32, "x-kubernetes-list-type": "set",
                       "items": {"type": "string", "minLength": 1, "maxLength": 64},
                       "description": "the GPU models this tenant's DRA pods run on: a "
                       "share of the card (nvidia.com/gpumem-percentage, KAI gpu-fraction) "
                       "is resolved over their memory sizes when a pod names no models"}}}
    spec["x-kubernetes-validations"] = [{
        "rule": "has(self.namespaces) != has(self.namespaceSelector)",
        "message": "set exactly one of namespaces and namespaceSelector"}, {
        "rule": "!has(self.timeSlicing) || !has(self.timeSlicing.oversubscribe) || "
                "!self.timeSlicing.oversubscribe || (has(self.trust) && self.trust == 'trusted')",
        "message": "timeSlicing.oversubscribe needs trust: trusted (an uncapped replica "
                   "delivers no isolation)"}]
    status = {"type": "object", "properties": {
        "conditions": _conditions(),
        "namespaces": {"type": "array", "items": {"type": "string"},
                       "description": "the namespaces the tenant controller fences for it"}}}
    return _crd("Tenant", "tenants", spec, status, [], [
        {"name": "Queue", "type": "string", "jsonPath": ".spec.queue"},
        {"name": "Trust", "type": "string", "jsonPath": ".spec.trust"},
        {"name": "Ready", "type": "string",
         "jsonPath": ".status.conditions[?(@.type=='Ready')].status"}], short=["gt"])


def _any_objects(description: str) -> dict[str, Any]:
    return {"type": "array", "maxItems": 64, "description": description,
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}


def _quantities(description: str) -> dict[str, Any]:
    return {"type": "object", "description": description, "maxProperties": 64,
            "additionalProperties": {"x-kubernetes-int-or-string": True}}


def _subjects(role: str) -> dict[str, Any]:
    return {"type": "array", "maxItems": 64, "description": f"bound to the `{role}` "
            "ClusterRole in each of the tenant's namespaces (and may read its own Queue)",
            "items": {"type": "object", "required": ["kind", "name"], "properties": {
                "kind": {"type": "string", "enum": ["User", "Group", "ServiceAccount"]},
                "name": {"type": "string", "minLength": 1, "maxLength": 253},
                "namespace": {"type": "string", "maxLength": 63}}}}


def _guardrails_schema() -> dict[str, Any]:
    """`spec.guardrails`: the fences the tenant controller keeps around the tenant's
    namespaces (gpugov.k8s.tenants; defaults per trust tier: docs/tenancy.md)."""
    return {"type": "object", "description": "fences around the tenant's namespaces; "
            "unset fields take the trust tier's defaults (docs/tenancy.md)", "properties": {
        "podSecurity": {"type": "object", "properties": {"level": {
            "type": "string", "enum": ["privileged", "baseline", "restricted"],
            "description": "Pod Security Standard enforced on every namespace (default and "
            "floor: untrusted restricted, internal baseline; trusted: privileged)"}}},
        "podChecks": {"type": "boolean", "description": "the webhook refuses GPU pods that "
                      "mount /dev/nvidia*, set device/preload env or run privileged (default "
                      "true; only a trusted tenant may turn it off)"},
        "quota": {"type": "object", "properties": {"hard": _quantities(
            "ResourceQuota spec.hard per namespace, e.g. requests.cpu, limits.memory, pods, "
            "requests.nvidia.com/gpu (default: untrusted pods: 200)")}},
        "limitRange": {"type": "object", "properties": {
            "defaultRequest": _quantities("container request defaults (untrusted/internal "
                                          "default: cpu 100m, memory 128Mi)"),
            "default": _quantities("container limit defaults (default: none)")}},
        "networkPolicy": {"type": "object", "properties": {
            "isolate": {"type": "boolean", "description": "default deny between tenants, "
                        "allow within the tenant and to DNS (default: true except trusted; "
                        "untrusted cannot turn it off)"},
            "ingress": _any_objects("extra NetworkPolicyIngressRules for every namespace"),
            "egress": _any_objects("extra NetworkPolicyEgressRules for every namespace")}},
        "rbac": {"type": "object", "properties": {
            "admins": _subjects("admin"), "editors": _subjects("edit"),
            "viewers": _subjects("view")}},
        "placement": {"type": "object", "description": "a dedicated pool: the webhook "
                      "adds these to the tenant's GPU pods", "properties": {
            "nodeSelector": {"type": "object", "maxProperties": 32,
                             "additionalProperties": {"type": "string"}},
            "tolerations": _any_objects("tolerations added to the tenant's GPU pods")}}}}


def priority_policy_crd() -> dict[str, Any]:
    spec = _model_schema(PriorityClassConfig, drop=("name", "value"))
    spec["properties"]["minRuntime"] = {
        "type": "string", "pattern": DURATION_PATTERN, "default": "0s",
        "description": "a preemptible pod is not preempted before it ran this long, e.g. 10m"}
    return _crd("PriorityPolicy", "prioritypolicies", spec, None, [], [
        {"name": "Preemptible", "type": "boolean", "jsonPath": ".spec.preemptible"},
        {"name": "MinRuntime", "type": "string", "jsonPath": ".spec.minRuntime"}],
        short=["gpp"],
        description="Extends the Kubernetes PriorityClass of the same name for gpugov.")


def _label_selector(description: str) -> dict[str, Any]:
    """A metav1.LabelSelector (matchLabels AND matchExpressions)."""
    return {"type": "object", "description": description, "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items": {
            "type": "object", "required": ["key", "operator"], "properties": {
                "key": {"type": "string", "minLength": 1},
                "operator": {"type": "string", "enum": ["In", "NotIn", "Exists",
                                                        "DoesNotExist"]},
                "values": {"type": "array", "items": {"type": "string"}}}}}}}


def power_domain_crd() -> dict[str, Any]:
    """A rack (row, PDU) whose panel feeds the selected nodes: the scheduler admits GPUs there
    while their expected draw stays within ratio × panelWatts (docs/power.md)."""
    spec = {"type": "object", "required": ["panelWatts"], "properties": {
        "nodeSelector": _label_selector(
            "the nodes this panel feeds; default: nodes labelled gpugov.io/rack=<name>"),
        "panelWatts": {"type": "number", "minimum": 0, "exclusiveMinimum": True,
                       "maximum": MAX_PANEL_W,
                       "description": "the panel's (breaker's) rating in watts"},
        "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1,
                  "default": DEFAULT_RATIO,
                  "description": "share of panelWatts admitted draw may reach"}}}
    watts = {"type": "number", "minimum": 0}
    status = {"type": "object", "properties": {
        "budgetWatts": {**watts, "description": "ratio × panelWatts"},
        "admittedWatts": {**watts, "description": "expected draw of the admitted pods and "
                          "the idle devices (the scheduler's state)"},
        "measuredWatts": {**watts, "description": "sum of the nodes' measured GPU draw "
                          "(published by their node agents)"},
        "headroomWatts": {"type": "number", "description": "budget minus admitted"},
        "nodes": {"type": "integer", "minimum": 0, "description": "nodes in the domain"},
        "caps": {"type": "object", "description": "node -> device index -> power limit (W) "
                 "its node agent is to set while measured draw is over the budget",
                 "additionalProperties": {"type": "object",
                                          "additionalProperties": {"type": "number"}}},
        "conditions": _conditions()}}
    return _crd("PowerDomain", "powerdomains", spec, status, [], [
        {"name": "Panel-W", "type": "number", "jsonPath": ".spec.panelWatts"},
        {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
        {"name": "Admitted-W", "type": "number", "jsonPath": ".status.admittedWatts"},
        {"name": "Measured-W", "type": "number", "jsonPath": ".status.measuredWatts"},
        {"name": "Headroom-W", "type": "number", "jsonPath": ".status.headroomWatts"}],
        short=["gpd"], description=" ".join((power_domain_crd.__doc__ or "").split()))


def _conditions() -> dict[str, Any]:
    return {"type": "array", "items": {
        "type": "object", "required": ["type", "status"], "properties": {
            "type": {"type": "string"}, "status": {"type": "string",
                                                   "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"}, "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"}}},
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}


def _crd(kind: str, plural: str, spec: dict[str, Any], status: dict[str, Any] | None,
         root_rules: list[dict[str, str]], columns: list[dict[str, str]], short: list[str],
         description: str = "") -> dict[str, Any]:
    props: dict[str, Any] = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                             "metadata": {"type": "object"}, "spec": spec}
    schema: dict[str, Any] = {"type": "object", "required": ["spec"], "properties": props}
    if description or spec.get("description"):
        schema["description"] = description or spec["description"]
    if status is not None:
        props["status"] = status
    if root_rules:
        schema["x-kubernetes-validations"] = root_rules
    version: dict[str, Any] = {"name": VERSION, "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": schema},
                               "additionalPrinterColumns": columns}
    if status is not None:
        version["subresources"] = {"status": {}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{GROUP}"},
            "spec": {"group": GROUP, "scope": "Cluster",
                     "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                               "singular": kind.lower(), "shortNames": short,
                               "categories": ["gpugov"]},
                     "versions": [version]}}


def generate() -> dict[str, dict[str, Any]]:
    """File name -> CRD manifest, for every gpugov CRD."""
    return {f"{c['metadata']['name']}.yaml": c
            for c in (queue_crd(), tenant_crd(), priority_policy_crd(), power_domain_crd())}


HEADER = "# Generated by `gpugov crd generate` from src/gpugov/control/config.py; do not edit.\n"


def render(crd: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(crd, sort_keys=False, width=100)


def write_crds(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, crd in generate().items():
        path = out / name
        path.write_text(render(crd))
        paths.append(path)
    return paths


# ------------------------------------------------------------------ config <-> objects

def _duration_text(seconds: float) -> str:
    return f"{seconds:g}s"


def config_to_objects(cfg: ControlConfig) -> list[dict[str, Any]]:
    """Queue, Tenant, PriorityClass and PriorityPolicy objects describing the config."""
    objs: list[dict[str, Any]] = []
    for q in cfg.queues:
        spec = q.model_dump(by_alias=True, exclude={"name"}, exclude_none=True)
        objs.append({"apiVersion": API_VERSION, "kind": "Queue",
                     "metadata": {"name": q.name}, "spec": spec})
    for t in cfg.tenants:
        objs.append({"apiVersion": API_VERSION, "kind": "Tenant",
                     "metadata": {"name": t.namespace},
                     "spec": {"namespaces": [t.namespace], "queue": t.queue,
                              "trust": t.trust.value}})
    for c in cfg.priority_classes:
        objs.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": c.name}, "value": c.value,
                     "preemptionPolicy": "PreemptLowerPriority"})
        objs.append({"apiVersion": API_VERSION, "kind": "PriorityPolicy",
                     "metadata": {"name": c.name},
                     "spec": {"preemptible": c.preemptible,
                              "minRuntime": _duration_text(c.min_runtime)}})
    return objs


class ConversionError(ValueError):
    """Objects that do not make a config; names the object and field."""


def objects_to_config(objs: list[dict[str, Any]], source: str = "<objects>",
                      extra: dict[str, Any] | None = None) -> ControlConfig:
    """A validated config from Queue/Tenant/PriorityClass/PriorityPolicy objects.

    A Tenant with a namespaceSelector has no config form and is refused, as is a Tenant with
    several namespaces' being split (each namespace becomes one config tenant).
    `extra` carries the config-only sections (fairShare, backfill, preemption).
    """
    data: dict[str, Any] = copy.deepcopy(extra or {})
    queues, tenants, classes = [], [], {}
    policies: dict[str, dict[str, Any]] = {}
    for i, o in enumerate(objs):
        kind = o.get("kind")
        name = (o.get("metadata") or {}).get("name")
        if kind == "Queue":
            queues.append({"name": name, **(o.get("spec") or {})})
        elif kind == "Tenant":
            spec = o.get("spec") or {}
            if "namespaceSelector" in spec:
                raise ConversionError(f"{source}: objects[{i}] Tenant {name}: a "
                                      "namespaceSelector has no config form; list namespaces")
            for ns in spec.get("namespaces") or []:
                tenants.append({"namespace": ns, "queue": spec.get("queue"),
                                **({"trust": spec["trust"]} if "trust" in spec else {})})
        elif kind == "PriorityClass":
            classes[name] = o.get("value", 0)
        elif kind == "PriorityPolicy":
            policies[name] = o.get("spec") or {}
        elif kind is not None and kind != "List":
            raise ConversionError(f"{source}: objects[{i}]: kind {kind!r} is not part of "
                                  "gpugov's config; allowed: Queue, Tenant, PriorityClass, "
                                  "PriorityPolicy")
    data["queues"] = queues
    if tenants:
        data["tenants"] = tenants
    names = list(dict.fromkeys([*classes, *policies]))
    if names:
        data["priorityClasses"] = [{"name": n, "value": classes.get(n, 0),
                                    **policies.get(n, {})} for n in names]
    return parse_config(data, source)


def config_sections(cfg: ControlConfig) -> dict[str, Any]:
    """The config's YAML form (by alias), for writing back a converted file."""
    return cfg.model_dump(by_alias=True, exclude_none=True, mode="json")
