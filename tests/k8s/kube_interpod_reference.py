"""A reference of kube-scheduler's InterPodAffinity and PodTopologySpread plugins (v1.34),
written from kubernetes/kubernetes pkg/scheduler/framework/plugins/interpodaffinity
(filtering.go: preFilterState's affinityCounts / antiAffinityCounts /
existingAntiAffinityCounts keyed by topology pair, satisfyPodAffinity, satisfyPodAntiAffinity,
satisfyExistingPodsAntiAffinity; scoring.go: processExistingPod, NormalizeScore) and
podtopologyspread (filtering.go: calPreFilterState, Filter, minMatchNum; scoring.go:
initPreScoreState, PreScore, Score, NormalizeScore; common.go: countPodsMatchSelector,
matchNodeInclusionPolicies), on plain dicts and in the plugins' own structure, to check
gpugov's evaluator against. Pods: {"ns", "labels", "node", "terminating", "spec"} with the
API's spec fields; nodes: {"name", "labels", "taints"}.
"""

from __future__ import annotations

import math

HOSTNAME = "kubernetes.io/hostname"


def selector_matches(sel: dict | None, labels: dict) -> bool:
    """metav1.LabelSelectorAsSelector(sel).Matches(labels); nil selects nothing."""
    if sel is None:
        return False
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        op, has = e["operator"], e["key"] in labels
        if op == "In" and not (has and labels[e["key"]] in e["values"]):
            return False
        if op == "NotIn" and has and labels[e["key"]] in e["values"]:
            return False
        if op == "Exists" and not has:
            return False
        if op == "DoesNotExist" and has:
            return False
    return True


def selector_empty(sel: dict | None) -> bool:
    return sel is not None and not sel.get("matchLabels") and not sel.get("matchExpressions")


def affinity_term(owner: dict, term: dict, ns_labels: dict) -> dict:
    """framework.AffinityTerm: namespaces (the owner's when neither field is set), selector
    merged with matchLabelKeys / mismatchLabelKeys, namespaceSelector."""
    names = set(term.get("namespaces") or [])
    ns_sel = term.get("namespaceSelector")
    if not names and ns_sel is None:
        names = {owner["ns"]}
    sel = term.get("labelSelector")
    extra = [{"key": k, "operator": "In", "values": [owner["labels"][k]]}
             for k in term.get("matchLabelKeys") or [] if k in owner["labels"]]
    extra += [{"key": k, "operator": "NotIn", "values": [owner["labels"][k]]}
              for k in term.get("mismatchLabelKeys") or [] if k in owner["labels"]]
    if extra:
        sel = {"matchLabels": dict((sel or {}).get("matchLabels") or {}),
               "matchExpressions": list((sel or {}).get("matchExpressions") or []) + extra}
    return {"names": names, "ns_sel": ns_sel, "sel": sel, "key": term["topologyKey"],
            "weight": term.get("weight", 0)}


def term_matches(t: dict, pod: dict, ns_labels: dict) -> bool:
    """AffinityTerm.Matches(pod, nsLabels)."""
    in_ns = pod["ns"] in t["names"] or (
        t["ns_sel"] is not None and selector_matches(t["ns_sel"], ns_labels.get(pod["ns"], {})))
    return in_ns and selector_matches(t["sel"], pod["labels"])


def terms_of(pod: dict, kind: str, hard: bool, ns_labels: dict) -> list[dict]:
    block = ((pod["spec"].get("affinity") or {}).get(kind) or {})
    if hard:
        return [affinity_term(pod, t, ns_labels)
                for t in block.get("requiredDuringSchedulingIgnoredDuringExecution") or []]
    return [affinity_term(pod, {**w["podAffinityTerm"], "weight": w["weight"]}, ns_labels)
            for w in block.get("preferredDuringSchedulingIgnoredDuringExecution") or []]


def _inc(m: dict, node: dict, key: str, value: int) -> None:
    if key in node["labels"]:
        pair = (key, node["labels"][key])
        m[pair] = m.get(pair, 0) + value


def interpod_filter(pod: dict, nodes: list[dict], pods: list[dict], ns_labels: dict
                    ) -> list[bool]:
    by_name = {n["name"]: n for n in nodes}
    aff = terms_of(pod, "podAffinity", True, ns_labels)
    anti = terms_of(pod, "podAntiAffinity", True, ns_labels)
    affinity_counts: dict = {}
    anti_counts: dict = {}
    existing_anti: dict = {}
    for p in pods:
        node = by_name[p["node"]]
        for t in terms_of(p, "podAntiAffinity", True, ns_labels):  # existing pods' terms
            if term_matches(t, pod, ns_labels):
                _inc(existing_anti, node, t["key"], 1)
        if aff and all(term_matches(t, p, ns_labels) for t in aff):  # updateWithAffinityTerms
            for t in aff:
                _inc(affinity_counts, node, t["key"], 1)
        for t in anti:
            if term_matches(t, p, ns_labels):
                _inc(anti_counts, node, t["key"], 1)
    out = []
    for n in nodes:
        ok = True
        # satisfyPodAffinity
        pods_exist = True
        for t in aff:
            if t["key"] in n["labels"]:
                if affinity_counts.get((t["key"], n["labels"][t["key"]]), 0) <= 0:
                    pods_exist = False
            else:
                ok = False
                break
        if ok and not pods_exist:
            ok = not affinity_counts and all(term_matches(t, pod, ns_labels) for t in aff)
        # satisfyPodAntiAffinity
        if ok and anti_counts:
            for t in anti:
                if t["key"] in n["labels"] and \
                        anti_counts.get((t["key"], n["labels"][t["key"]]), 0) > 0:
                    ok = False
        # satisfyExistingPodsAntiAffinity
        if ok and existing_anti:
            ok = not any(existing_anti.get((k, v), 0) > 0 for k, v in n["labels"].items())
        out.append(ok)
    return out


def spread_constraints(pod: dict, hard: bool) -> list[dict]:
    out = []
    want = "DoNotSchedule" if hard else "ScheduleAnyway"
    for c in pod["spec"].get("topologySpreadConstraints") or []:
        if c["whenUnsatisfiable"] != want:
            continue
        sel = c.get("labelSelector")
        keys = {k: pod["labels"][k] for k in c.get("matchLabelKeys") or [] if k in pod["labels"]}
        if keys:
            sel = {"matchLabels": {**((sel or {}).get("matchLabels") or {}), **keys},
                   "matchExpressions": list((sel or {}).get("matchExpressions") or [])}
        out.append({"key": c["topologyKey"], "skew": c["maxSkew"], "sel": sel,
                    "min_domains": c.get("minDomains") or 1,
                    "affinity": c.get("nodeAffinityPolicy", "Honor") == "Honor",
                    "taints": c.get("nodeTaintsPolicy", "Ignore") == "Honor"})
    return out


def required_node_affinity(pod: dict, node: dict) -> bool:
    """nodeaffinity.GetRequiredNodeAffinity(pod).Match(node): nodeSelector only here."""
    return all(node["labels"].get(k) == v for k, v in (pod["spec"].get("nodeSelector") or {}
                                                        ).items())


def tolerated(pod: dict, node: dict) -> bool:
    tols = pod["spec"].get("tolerations") or []
    return all(any(t.get("operator") == "Exists" and (not t.get("key") or t["key"] == x["key"])
                   for t in tols)
               for x in node.get("taints") or [] if x["effect"] in ("NoSchedule", "NoExecute"))


def inclusion(c: dict, pod: dict, node: dict) -> bool:
    """matchNodeInclusionPolicies."""
    if c["affinity"] and not required_node_affinity(pod, node):
        return False
    return not (c["taints"] and not tolerated(pod, node))


def count_pods(pods: list[dict], node: dict, sel: dict | None, ns: str) -> int:
    """countPodsMatchSelector over the node's pods."""
    if selector_empty(sel):
        return 0
    return sum(1 for p in pods if p["node"] == node["name"] and not p["terminating"]
               and p["ns"] == ns and selector_matches(sel, p["labels"]))


def spread_filter(pod: dict, nodes: list[dict], pods: list[dict]) -> list[bool]:
    cons = spread_constraints(pod, hard=True)
    if not cons:
        return [True] * len(nodes)
    counts: list[dict] = [{} for _ in cons]
    for n in nodes:
        if not all(c["key"] in n["labels"] for c in cons):
            continue
        for i, c in enumerate(cons):
            if not inclusion(c, pod, n):
                continue
            v = n["labels"][c["key"]]
            counts[i][v] = counts[i].get(v, 0) + count_pods(pods, n, c["sel"], pod["ns"])
    out = []
    for n in nodes:
        ok = True
        for i, c in enumerate(cons):
            if c["key"] not in n["labels"]:
                ok = False
                break
            low = min(counts[i].values()) if counts[i] else 2**31 - 1
            if len(counts[i]) < c["min_domains"]:
                low = 0
            me = 1 if selector_matches(c["sel"], pod["labels"]) else 0
            if counts[i].get(n["labels"][c["key"]], 0) + me - low > c["skew"]:
                ok = False
                break
        out.append(ok)
    return out


def interpod_scores(pod: dict, nodes: list[dict], feasible: list[int], pods: list[dict],
                    ns_labels: dict) -> list[int]:
    """InterPodAffinity PreScore + Score + NormalizeScore over the feasible nodes."""
    by_name = {n["name"]: n for n in nodes}
    pa = terms_of(pod, "podAffinity", False, ns_labels)
    pn = terms_of(pod, "podAntiAffinity", False, ns_labels)
    topo: dict = {}

    def process(t: dict, weight: int, target: dict, node: dict, mult: int) -> None:
        if term_matches(t, target, ns_labels) and t["key"] in node["labels"]:
            pair = (t["key"], node["labels"][t["key"]])
            topo[pair] = topo.get(pair, 0) + weight * mult

    for p in pods:
        node = by_name[p["node"]]
        if not node["labels"]:
            continue
        for t in pa:
            process(t, t["weight"], p, node, 1)
        for t in pn:
            process(t, t["weight"], p, node, -1)
        for t in terms_of(p, "podAffinity", True, ns_labels):
            process(t, 1, pod, node, 1)  # hardPodAffinityWeight
        for t in terms_of(p, "podAffinity", False, ns_labels):
            process(t, t["weight"], pod, node, 1)
        for t in terms_of(p, "podAntiAffinity", False, ns_labels):
            process(t, t["weight"], pod, node, -1)
    raw = [sum(w for (k, v), w in topo.items() if nodes[i]["labels"].get(k) == v)
           for i in feasible]
    if not topo or not raw:
        return [0] * len(feasible)
    low, high = min(raw), max(raw)
    return [int(100 * ((s - low) / (high - low))) if high > low else 0 for s in raw]


def spread_scores(pod: dict, nodes: list[dict], feasible: list[int], pods: list[dict]
                  ) -> list[int]:
    cons = spread_constraints(pod, hard=False)
    if not cons or not feasible:
        return [0] * len(feasible)
    ignored = {i for i in feasible if not all(c["key"] in nodes[i]["labels"] for c in cons)}
    counts: list[dict] = [{} for _ in cons]
    size = [0] * len(cons)
    for i in feasible:
        if i in ignored:
            continue
        for j, c in enumerate(cons):
            if c["key"] == HOSTNAME:
                continue
            v = nodes[i]["labels"][c["key"]]
            if v not in counts[j]:
                counts[j][v] = 0
                size[j] += 1
    weight = [math.log(((len(feasible) - len(ignored)) if c["key"] == HOSTNAME else size[j]) + 2)
              for j, c in enumerate(cons)]
    for n in nodes:
        if not all(c["key"] in n["labels"] for c in cons):
            continue
        for j, c in enumerate(cons):
            if not inclusion(c, pod, n):
                continue
            v = n["labels"][c["key"]]
            if c["key"] == HOSTNAME or v not in counts[j]:
                continue
            counts[j][v] += count_pods(pods, n, c["sel"], pod["ns"])
    raw = {}
    for i in feasible:
        if i in ignored:
            continue
        s = 0.0
        for j, c in enumerate(cons):
            cnt = count_pods(pods, nodes[i], c["sel"], pod["ns"]) if c["key"] == HOSTNAME \
                else counts[j][nodes[i]["labels"][c["key"]]]
            s += cnt * weight[j] + (c["skew"] - 1)
        raw[i] = int(math.floor(s + 0.5))
    low = min(raw.values()) if raw else 0
    high = max(raw.values()) if raw else 0
    out = []
    for i in feasible:
        if i in ignored:
            out.append(0)
        elif high == 0:
            out.append(100)
        else:
            out.append(100 * (high + low - raw[i]) // high)
    return out
