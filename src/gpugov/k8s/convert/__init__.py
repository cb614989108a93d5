"""`gpugov crd convert` of other schedulers' queue objects into gpugov's Queue/Tenant objects.

Dispatch is by apiVersion and kind, so a KAI `Queue` and a Volcano `Queue` mean what their
projects document; gpugov's own objects (gpugov.io/v1alpha1) and PriorityClasses pass through.
Everything without a gpugov equivalent is reported (`Conversion.notes`); an object that cannot
be read is an error naming it, the field and the value, and the others still convert.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpugov.k8s.convert import kai, kueue, volcano
from gpugov.k8s.convert.common import Conversion, ConvertError, Note, ident, queue
from gpugov.k8s.crds import API_VERSION

__all__ = ["Conversion", "ConvertError", "Note", "convert_objects", "is_foreign", "SUPPORTED"]

Converter = Callable[[dict[str, Any], list[Note]], list[dict[str, Any]]]
SUPPORTED: dict[tuple[str, str], Converter] = {
    (kai.API, "Queue"): kai.convert,
    (volcano.API, "Queue"): volcano.convert,
    **{(api, "ClusterQueue"): kueue.convert_cluster_queue for api in kueue.APIS},
    **{(api, "LocalQueue"): kueue.convert_local_queue for api in kueue.APIS},
    ("kueue.x-k8s.io/v1beta2", "Cohort"): kueue.convert_cohort,
    ("kueue.x-k8s.io/v1alpha1", "Cohort"): kueue.convert_cohort,
}
# kinds of these projects that hold no quota: skipped with a note
SKIPPED = {"ResourceFlavor", "Topology", "AdmissionCheck", "WorkloadPriorityClass",
           "ProvisioningRequestConfig", "MultiKueueConfig", "MultiKueueCluster"}
PASS_THROUGH = {(API_VERSION, "Queue"), (API_VERSION, "Tenant"), (API_VERSION, "PriorityPolicy"),
                ("scheduling.k8s.io/v1", "PriorityClass")}
_GROUPS = ("scheduling.run.ai/", "scheduling.volcano.sh/", "kueue.x-k8s.io/")


def is_foreign(doc: object) -> bool:
    """A Kubernetes object (it has apiVersion and kind), not a gpugov config file."""
    return isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc


def _supported_text() -> str:
    return ", ".join(sorted(f"{k} ({a})" for a, k in SUPPORTED))


def convert_objects(docs: list[Any], namespace: str = "default") -> Conversion:
    """`namespace`: for namespaced objects that name none (where kubectl would apply them)."""
    out = Conversion()
    others: list[str] = []
    for i, obj in enumerate(docs):
        if not isinstance(obj, dict):
            out.errors.append(f"document {i}: {obj!r:.60} is not an object")
            continue
        api, kind = obj.get("apiVersion"), obj.get("kind")
        try:
            if (api, kind) in PASS_THROUGH:
                _check_own(obj)
                out.objects.append(obj)
            elif kind == "LocalQueue" and api in kueue.APIS:
                out.objects.extend(kueue.convert_local_queue(obj, out.notes, namespace))
            elif (api, kind) in SUPPORTED:
                out.objects.extend(SUPPORTED[(api, kind)](obj, out.notes))
            elif kind in SKIPPED and isinstance(api, str) and api.startswith(_GROUPS):
                out.notes.append(Note(ident(obj), "kind", "holds no quota; not converted"))
            elif isinstance(api, str) and api.startswith(_GROUPS):
                raise ConvertError(f"{ident(obj)}: apiVersion {api!r} kind {kind!r} is not one "
                                   f"gpugov converts; supported: {_supported_text()}")
            else:  # a workload or namespace next to the queues (as upstream samples ship)
                others.append(f"{ident(obj)}: kind {kind!r} is not part of gpugov's config "
                              f"nor a queue object gpugov converts")
        except ConvertError as e:
            out.errors.append(str(e))
        except (TypeError, AttributeError, KeyError, ValueError) as e:
            # a shape the converters did not foresee: this object fails, the others convert
            out.errors.append(f"{ident(obj)}: malformed ({type(e).__name__}: {e}); see the "
                              f"{kind} schema of {api}")
    if others and not out.objects and not out.errors:
        out.errors.extend(f"{o}; supported: {_supported_text()}, and gpugov's own"
                          for o in others)
    else:
        out.notes.extend(Note(o.split(": ", 1)[0], "kind", "not a queue object: skipped "
                              "(apply it as it is)") for o in others)
    _dedupe(out)
    return out


def _check_own(obj: dict[str, Any]) -> None:
    """The envelope of one of gpugov's own objects, before the config loader reads it (the
    loader checks the fields; this keeps a wrong shape from reaching it)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ConvertError(f"{ident(obj)}: metadata.name: missing; allowed: a non-empty name")
    if obj.get("kind") == "PriorityClass":
        if "value" in obj and (isinstance(obj["value"], bool) or not isinstance(obj["value"],
                                                                                 int)):
            raise ConvertError(f"{ident(obj)}: value: {obj['value']!r:.40}; allowed: an integer")
        return
    spec = obj.get("spec", {})
    if spec is not None and not isinstance(spec, dict):
        raise ConvertError(f"{ident(obj)}: spec: {spec!r:.40} is not a mapping")
    spaces = (spec or {}).get("namespaces")
    if obj.get("kind") == "Tenant" and spaces is not None and not (
            isinstance(spaces, list) and all(isinstance(n, str) and n for n in spaces)):
        raise ConvertError(f"{ident(obj)}: spec.namespaces: {spaces!r:.40}; allowed: a list "
                           "of namespace names")


def _dedupe(out: Conversion) -> None:
    """One object per kind and name; parents named but absent are created (noted).
    Passed-through objects may be malformed: objects_to_config reports those afterwards."""
    seen: dict[tuple[object, object], dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    for o in out.objects:
        meta = o.get("metadata") if isinstance(o.get("metadata"), dict) else {}
        key = (o.get("kind"), meta.get("name"))
        spec = o.get("spec") if isinstance(o.get("spec"), dict) else {}
        if key in seen and o.get("apiVersion") == API_VERSION:
            first = seen[key]
            first_spec = first.get("spec") if isinstance(first.get("spec"), dict) else {}
            if o != first and key[0] == "Tenant":
                out.notes.append(Note(f"{API_VERSION} Tenant/{key[1]}", "spec.queue",
                                      f"namespace {key[1]} has queues {first_spec.get('queue')}"
                                      f" and {spec.get('queue')}: a gpugov namespace has one "
                                      "queue; kept the first"))
            elif o != first and key[0] == "Queue" and spec:
                if first_spec:
                    out.errors.append(f"Queue {key[1]} is defined twice with different specs")
                else:
                    first["spec"] = spec
            continue
        seen[key] = o
        kept.append(o)
    names = {k[1] for k in seen if k[0] == "Queue"}
    for o in list(kept):
        spec = o.get("spec") if isinstance(o.get("spec"), dict) else {}
        parent = spec.get("parent") if o.get("kind") == "Queue" else None
        if isinstance(parent, str) and parent and parent not in names:
            names.add(parent)
            kept.append(queue(parent))
            out.notes.append(Note(f"{API_VERSION} Queue/{parent}", "metadata.name",
                                  f"created: {(o.get('metadata') or {}).get('name')} names it "
                                  "as its parent (a Kueue cohort, Volcano's root) and no object"
                                  " defines it"))
    out.objects = kept
