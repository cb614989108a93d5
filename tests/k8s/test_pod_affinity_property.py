"""Affinity decisions equal kube-scheduler's on random small clusters: gpugov's pod view
(`k8s/scheduler/pod_affinity.py`, `spread.py`) against a reference written from
kube-scheduler's InterPodAffinity and PodTopologySpread plugins
(`kube_interpod_reference.py`): the same nodes pass the filter, and each plugin's normalised
score is the same on the nodes that pass. Random nodes (zone, rack, hostname labels, some
missing), existing pods of two namespaces (some terminating, some with their own required
and preferred terms), and an incoming pod with random required/preferred pod affinity and
anti-affinity (namespaces, namespaceSelector, matchLabelKeys) and spread constraints
(maxSkew, minDomains, both whenUnsatisfiable, node inclusion policies, nodeSelector)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.k8s import kube_interpod_reference as ref
from tests.k8s.test_scheduler_modes import nodes as node_objs
from tests.k8s.test_scheduler_modes import pod as gpu_pod
from tests.k8s.test_scheduler_modes import pool, state

from gpugov.k8s.scheduler.pod_affinity import PodView
from gpugov.k8s.scheduler.pod_terms import parse_pod_terms
from gpugov.k8s.scheduler.spread import spread_scores
from gpugov.model.cluster import NodeSpec
from gpugov.model.constraints import Taint, Toleration
from gpugov.model.request import PodRequest

NS = ("ns1", "ns2")
NS_LABELS = {"ns1": {"env": "prod"}, "ns2": {"env": "dev"}}
KEYS = ("zone", "rack", ref.HOSTNAME)

label_sets = st.fixed_dictionaries({}, optional={"app": st.sampled_from(["x", "y"]),
                                                  "tier": st.sampled_from(["t1", "t2"])})


@st.composite
def selectors(draw):
    kind = draw(st.sampled_from(["labels", "expr", "empty", "nil"]))
    if kind == "nil":
        return None
    if kind == "empty":
        return {}
    if kind == "labels":
        return {"matchLabels": draw(label_sets)}
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
    e = {"key": draw(st.sampled_from(["app", "tier"])), "operator": op}
    if op in ("In", "NotIn"):
        e["values"] = draw(st.lists(st.sampled_from(["x", "y", "t1"]), min_size=1,
                                    max_size=2, unique=True))
    return {"matchExpressions": [e]}


@st.composite
def affinity_terms(draw):
    t = {"topologyKey": draw(st.sampled_from(KEYS)), "labelSelector": draw(selectors())}
    if t["labelSelector"] is None:
        del t["labelSelector"]
    which = draw(st.sampled_from(["own", "names", "selector", "all"]))
    if which == "names":
        t["namespaces"] = draw(st.lists(st.sampled_from(NS), min_size=1, max_size=2,
                                        unique=True))
    elif which == "selector":
        t["namespaceSelector"] = {"matchLabels": {"env": draw(st.sampled_from(["prod",
                                                                              "dev"]))}}
    elif which == "all":
        t["namespaceSelector"] = {}
    if draw(st.booleans()):
        t["matchLabelKeys"] = ["tier"]
    return t


@st.composite
def affinity(draw, required_only: bool = False):
    out: dict = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        block: dict = {}
        req = draw(st.lists(affinity_terms(), max_size=2))
        if req:
            block["requiredDuringSchedulingIgnoredDuringExecution"] = req
        if not required_only:
            pref = draw(st.lists(st.tuples(st.integers(1, 100), affinity_terms()), max_size=2))
            if pref:
                block["preferredDuringSchedulingIgnoredDuringExecution"] = [
                    {"weight": w, "podAffinityTerm": t} for w, t in pref]
        if block:
            out[kind] = block
    return out


@st.composite
def spread_list(draw):
    out = []
    for _ in range(draw(st.integers(0, 2))):
        hard = draw(st.booleans())
        c = {"maxSkew": draw(st.integers(1, 2)), "topologyKey": draw(st.sampled_from(KEYS)),
             "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway"}
        sel = draw(selectors())
        if sel is not None:
            c["labelSelector"] = sel
        if hard and draw(st.booleans()):
            c["minDomains"] = draw(st.integers(1, 4))
        if draw(st.booleans()):
            c["nodeAffinityPolicy"] = draw(st.sampled_from(["Honor", "Ignore"]))
        if draw(st.booleans()):
            c["nodeTaintsPolicy"] = draw(st.sampled_from(["Honor", "Ignore"]))
        if draw(st.booleans()):
            c["matchLabelKeys"] = ["tier"]
        out.append(c)
    return out


@st.composite
def clusters(draw):
    n = draw(st.integers(1, 5))
    nodes = []
    for i in range(n):
        labels = {ref.HOSTNAME: f"n{i}"} if draw(st.integers(0, 5)) else {}
        if draw(st.integers(0, 4)):
            labels["zone"] = draw(st.sampled_from(["a", "b", "c"]))
        if draw(st.booleans()):
            labels["rack"] = draw(st.sampled_from(["r1", "r2"]))
        taints = [{"key": "t", "effect": "NoSchedule"}] if draw(st.integers(0, 4)) == 0 else []
        nodes.append({"name": f"n{i}", "labels": labels, "taints": taints})
    pods = []
    for j in range(draw(st.integers(0, 7))):
        spec = {"affinity": draw(affinity())} if draw(st.integers(0, 2)) == 0 else {}
        pods.append({"name": f"p{j}", "ns": draw(st.sampled_from(NS)), "labels": draw(label_sets),
                     "node": f"n{draw(st.integers(0, n - 1))}",
                     "terminating": draw(st.integers(0, 5)) == 0, "spec": spec})
    spec = {"affinity": draw(affinity()), "topologySpreadConstraints": draw(spread_list())}
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = {"zone": draw(st.sampled_from(["a", "b"]))}
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "t", "operator": "Exists"}]
    pod = {"name": "in", "ns": draw(st.sampled_from(NS)), "labels": draw(label_sets),
           "spec": spec}
    return nodes, pods, pod


def obj(p: dict) -> dict:
    return {"metadata": {"namespace": p["ns"], "labels": p["labels"]}, "spec": p["spec"]}


def gpugov_view(nodes, pods, pod):
    specs = [NodeSpec(n["name"], 1000, 1000, 0, "", labels=tuple(sorted(n["labels"].items())),
                      taints=tuple(Taint(t["key"], "", t["effect"]) for t in n["taints"]))
             for n in nodes]
    view = PodView(specs, NS_LABELS)
    for p in pods:
        view.add(int(p["node"][1:]), parse_pod_terms(obj(p)), p["terminating"])
    terms = parse_pod_terms(obj(pod))
    tols = tuple(Toleration(t["key"], "Exists") for t in pod["spec"].get("tolerations") or [])
    req = PodRequest("in", 1, 1, tolerations=tols, pods=terms)
    return view, req, terms


@settings(max_examples=600, deadline=None)
@given(clusters())
def test_filter_and_scores_equal_kube_schedulers(case) -> None:
    nodes, pods, pod = case
    view, req, terms = gpugov_view(nodes, pods, pod)
    got = view.mask(req)
    want = [a and b for a, b in zip(ref.interpod_filter(pod, nodes, pods, NS_LABELS),
                                    ref.spread_filter(pod, nodes, pods), strict=True)]
    assert got.tolist() == want
    feasible = [i for i, ok in enumerate(want) if ok]
    idx = np.array(feasible, dtype=np.int64)
    assert view.affinity_scores(terms, idx).tolist() == ref.interpod_scores(
        pod, nodes, feasible, pods, NS_LABELS)
    assert spread_scores(view, req, terms, idx).tolist() == ref.spread_scores(
        pod, nodes, feasible, pods)


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_a_placement_counts_for_the_next_decision(case) -> None:
    """Placing the pod on a node it may take, then asking again for a copy of it, equals
    kube-scheduler's answer with the first copy bound there (pods of one cycle count)."""
    nodes, pods, pod = case
    view, req, _ = gpugov_view(nodes, pods, pod)
    ok = np.flatnonzero(view.mask(req))
    if not len(ok):
        return
    first = int(ok[0])
    view.moved(req, first, 1)
    placed = {**pod, "node": f"n{first}", "terminating": False}
    want = [a and b for a, b in zip(ref.interpod_filter(pod, nodes, [*pods, placed], NS_LABELS),
                                    ref.spread_filter(pod, nodes, [*pods, placed]), strict=True)]
    assert view.mask(req).tolist() == want
    view.moved(req, first, -1)
    assert view.mask(req).tolist() == [a and b for a, b in zip(
        ref.interpod_filter(pod, nodes, pods, NS_LABELS), ref.spread_filter(pod, nodes, pods),
        strict=True)]


@settings(max_examples=120, deadline=None)
@given(clusters())
def test_the_schedulers_decisions_are_those_kube_scheduler_allows(case) -> None:
    """Through the whole scheduler (API objects in, a cycle, a binding or a reason out): a
    GPU pod with the random terms binds iff kube-scheduler's filters (inter-pod, taints,
    nodeSelector) let some node take it, on one of those nodes; else it waits, with an
    inter-pod reason when taints and nodeSelector alone would have left a node."""
    cluster, pods, pod = case
    objs = node_objs(*[pool(n["name"], 8, labels=n["labels"], taints=n["taints"])
                       for n in cluster])
    for o in objs:  # the pool's own hostname label follows the drawn labels
        o["metadata"]["labels"].pop(ref.HOSTNAME, None)
        o["metadata"]["labels"].update(next(n["labels"] for n in cluster
                                            if o["metadata"]["name"] == f"{n['name']}-0"))
    st = state(objs)
    for name, labels in NS_LABELS.items():
        st.set_object("namespace", {"metadata": {"name": name, "labels": labels}})
    for p in pods:
        st.set_pod({"metadata": {"name": p["name"], "namespace": p["ns"], "uid": p["name"],
                                 "labels": p["labels"],
                                 **({"deletionTimestamp": "2027-01-01T00:00:00Z"}
                                    if p["terminating"] else {})},
                    "spec": {**p["spec"], "schedulerName": "default-scheduler",
                             "nodeName": f"{p['node']}-0", "containers": [{"name": "c"}]},
                    "status": {"phase": "Running"}})
    g = gpu_pod("in", ns=pod["ns"], **pod["spec"])
    g["metadata"]["labels"] = dict(pod["labels"])
    st.set_pod(g)
    plan = st.cycle(1_800_000_000.0)
    allowed = [a and b and ref.tolerated(pod, n) and ref.required_node_affinity(pod, n)
               for a, b, n in zip(ref.interpod_filter(pod, cluster, pods, NS_LABELS),
                                  ref.spread_filter(pod, cluster, pods), cluster, strict=True)]
    names = [f"{n['name']}-0" for n in cluster]
    if any(allowed):
        (b,) = plan.binds
        assert allowed[names.index(b.node)], (b.node, allowed)
    else:
        assert not plan.binds
        (c,) = [c for c in plan.conditions if c.name == "in"]
        if any(ref.tolerated(pod, n) and ref.required_node_affinity(pod, n) for n in cluster):
            # nodeSelector and taints leave nodes: the inter-pod term is what is named
            assert c.code in ("pod-affinity", "pod-anti-affinity", "topology-spread"), c
