"""vCluster: host pods shaped exactly as the syncer writes them map back to virtual names.

The fixture is `TestSyncTable`'s `pObjectMeta` in loft-sh/vcluster's
pkg/controllers/resources/pods/syncer_test.go (kept unedited in tests/k8s/upstream/vcluster/,
SOURCES.md gives the commit); the key names are read from the upstream Go constants, so a
renamed label in vCluster fails here rather than silently in a cluster.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gpugov.k8s.tenants import vcluster
from gpugov.k8s.webhook import admission
from gpugov.k8s.webhook.tenancy import resolve

UPSTREAM = Path(__file__).parent / "upstream" / "vcluster"


def _constants() -> dict[str, str]:
    """`translate.X` / `podtranslate.X` -> the string vCluster's Go code defines."""
    out = {}
    for file, prefix in (("types.go", "translate"), ("translator.go", "podtranslate")):
        for name, value in re.findall(r'^\s*(\w+)\s*=\s*"([^"]+)"', (UPSTREAM / file).read_text(),
                                      re.M):
            out[f"{prefix}.{name}"] = value
    return out


def _fixture_keys() -> tuple[list[str], list[str]]:
    """The annotation and label constants `pObjectMeta` of TestSyncTable sets."""
    text = (UPSTREAM / "syncer_test.go").read_text()
    block = text[text.index("pObjectMeta := metav1.ObjectMeta{"):]
    block = block[:block.index("virtualNode :=")]
    annots = block[block.index("Annotations:"):block.index("Labels:")]
    labels = block[block.index("Labels:"):]
    pick = re.compile(r"((?:pod)?translate\.\w+):")
    return pick.findall(annots), pick.findall(labels)


def synced_pod() -> dict:
    """The host pod of virtual pod testns/testpod of vCluster `vcluster` in host namespace
    `test`, every key and value as TestSyncTable's pObjectMeta has it."""
    c = _constants()
    annots, labels = _fixture_keys()
    v = {"name": "testpod", "namespace": "testns"}
    host = vcluster.host_name("testpod", "testns", "vcluster")
    values = {"podtranslate.ClusterAutoScalerAnnotation": "false",
              "podtranslate.VClusterLabelsAnnotation": "",
              "podtranslate.NameAnnotation": v["name"],
              "podtranslate.NamespaceAnnotation": v["namespace"],
              "translate.NameAnnotation": v["name"], "translate.UIDAnnotation": "",
              "translate.NamespaceAnnotation": v["namespace"],
              "translate.KindAnnotation": "/v1, Kind=Pod",
              "translate.HostNamespaceAnnotation": "test",
              "translate.HostNameAnnotation": host,
              "podtranslate.ServiceAccountNameAnnotation": "",
              "podtranslate.UIDAnnotation": ""}
    label_values = {"translate.NamespaceLabel": v["namespace"],
                    "translate.MarkerLabel": "vcluster"}
    return {"metadata": {
        "name": host, "namespace": "test",
        "annotations": {c[k]: values[k] for k in annots},
        "labels": {c[k]: label_values[k] for k in labels}},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def test_gpugov_reads_the_keys_vcluster_defines():
    c = _constants()
    assert c["translate.MarkerLabel"] == vcluster.MANAGED_BY
    assert c["translate.NamespaceLabel"] == vcluster.NAMESPACE_LABEL
    assert c["translate.NameAnnotation"] == vcluster.OBJECT_NAME
    assert c["translate.NamespaceAnnotation"] == vcluster.OBJECT_NAMESPACE
    assert c["podtranslate.NameAnnotation"] == vcluster.POD_NAME
    assert c["podtranslate.NamespaceAnnotation"] == vcluster.POD_NAMESPACE
    annots, labels = _fixture_keys()
    assert "translate.NameAnnotation" in annots and "translate.MarkerLabel" in labels


def test_a_synced_pod_maps_back_to_its_virtual_names():
    pod = synced_pod()
    assert pod["metadata"]["name"] == "testpod-x-testns-x-vcluster"
    v = vcluster.virtual_pod(pod)
    assert v == vcluster.VirtualPod("vcluster", "testns", "testpod", "test",
                                    "testpod-x-testns-x-vcluster")
    assert vcluster.display_name(pod) == "testns/testpod (vCluster vcluster)"


def test_the_host_namespace_decides_the_tenant_not_the_syncer_labels():
    """The webhook resolves the Tenant of the host namespace; the virtual namespace label
    (written inside the tenant's namespace) changes nothing."""
    pod = synced_pod()
    tenants = [{"metadata": {"name": "team-a"},
                "spec": {"namespaces": ["test"], "queue": "a", "trust": "internal"}},
               {"metadata": {"name": "testns"},
                "spec": {"namespaces": ["testns"], "queue": "b"}}]
    queues = {"a": None, "b": None}
    req = {"uid": "1", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": "test",
           "object": pod}
    out = admission.mutate(req, lambda ns: resolve(ns, {}, tenants, queues))
    assert out["response"]["allowed"], out
    import base64
    import json
    patch = json.loads(base64.b64decode(out["response"]["patch"]))
    tenant = [p["value"] for p in patch if p["path"].endswith("gpugov.io~1tenant")]
    assert tenant == ["team-a"]


def test_long_names_hash_as_the_syncer_does():
    name = vcluster.host_name("a" * 40, "b" * 20, "vc")
    assert len(name) == 63 and name.startswith("a" * 40 + "-x-" + "b" * 9)


def test_other_pods_are_not_virtual():
    assert vcluster.virtual_pod({"metadata": {"name": "p", "namespace": "n"}}) is None
    half = synced_pod()
    del half["metadata"]["labels"][vcluster.MANAGED_BY]
    assert vcluster.virtual_pod(half) is None
    assert vcluster.display_name(half) == "test/testpod-x-testns-x-vcluster"


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=300),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=40),
                                                                         c, max_size=4),
                    max_leaves=12))
def test_hostile_metadata_never_crashes(meta):
    v = vcluster.virtual_pod({"metadata": meta})
    assert v is None or (v.name and len(v.name) <= vcluster.MAX_NAME)
