"""Pod affinity, pod anti-affinity and topologySpreadConstraints on gpugov's scheduler, on
plain API objects: kube-scheduler's semantics (required terms are filters, preferred terms
and ScheduleAnyway scores), pods of every kind and scheduler counted, pods placed in one
cycle (a gang's members too) counting for each other, and a reason naming the term when no
node passes."""

from __future__ import annotations

import copy

import pytest
from tests.k8s.test_scheduler_modes import T0, bind, nodes, pod, pool, state, submit

from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.pod_terms import TermError, parse_pod_terms
from gpugov.k8s.scheduler.state import INVALID
from gpugov.k8s.scheduler.translate import affinity_refusal

ONE = {"nvidia.com/gpu": "1"}
HOST = "kubernetes.io/hostname"


def fleet(zones: tuple[str, ...] = ("a", "a", "b"), gpus: int = 8) -> list[dict]:
    return nodes(*[pool(f"n{i}", gpus, labels={"zone": z}) for i, z in enumerate(zones)])


def labelled(name: str, labels: dict, ns: str = "team-a", **spec) -> dict:
    obj = pod(name, ns=ns, limits=ONE, **spec)
    obj["metadata"]["labels"] = dict(labels)
    return obj


def anti(key: str = HOST, **match: str) -> dict:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": match}, "topologyKey": key}]}}


def affine(key: str = "zone", **match: str) -> dict:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": match}, "topologyKey": key}]}}


def spread(key: str = "zone", skew: int = 1, hard: bool = True, **match: str) -> list[dict]:
    return [{"maxSkew": skew, "topologyKey": key,
             "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
             "labelSelector": {"matchLabels": match}}]


def other_scheduler_pod(name: str, node: str, labels: dict, ns: str = "team-a",
                        **spec) -> dict:
    """A CPU pod bound by kube-scheduler: no GPU, no allocation record."""
    return {"metadata": {"name": name, "namespace": ns, "uid": f"u-{name}", "labels": labels,
                         "creationTimestamp": "2027-01-15T07:00:00Z"},
            "spec": {"schedulerName": "default-scheduler", "nodeName": node, **spec,
                     "containers": [{"name": "c", "resources": {}}]},
            "status": {"phase": "Running"}}


def test_replicas_with_required_anti_affinity_land_on_distinct_nodes_in_one_cycle() -> None:
    st = state(fleet())
    objs = submit(st, *[labelled(f"r{i}", {"app": "web"}, affinity=anti(app="web"))
                        for i in range(4)])
    plan = st.cycle(T0)
    assert sorted(b.node for b in plan.binds) == ["n0-0", "n1-0", "n2-0"]
    (cond,) = plan.conditions
    bind(st, plan, objs)
    assert not st.cycle(T0 + 1).binds
    assert cond.code == "pod-anti-affinity"
    assert "podAntiAffinity" in cond.message and "app=web" in cond.message


def test_an_existing_pods_anti_affinity_keeps_a_plain_pod_off_its_node() -> None:
    """Symmetry: the incoming pod states nothing; a CPU pod bound by another scheduler
    repels it."""
    st = state(fleet(("a", "b")))
    st.set_pod(other_scheduler_pod("db", "n0-0", {"app": "db"}, affinity=anti(role="noisy")))
    submit(st, labelled("gpu", {"role": "noisy"}))
    (b,) = st.cycle(T0).binds
    assert b.node == "n1-0"


def test_pods_of_every_kind_count_for_affinity() -> None:
    """A CPU pod of another scheduler is what a GPU pod follows into its zone."""
    st = state(fleet(("a", "b", "b")))
    st.set_pod(other_scheduler_pod("cache", "n2-0", {"app": "cache"}))
    submit(st, labelled("p", {}, affinity=affine(app="cache")))
    (b,) = st.cycle(T0).binds
    assert b.node in ("n1-0", "n2-0")  # zone b


def test_affinity_to_a_pod_that_does_not_exist_waits_naming_the_term() -> None:
    st = state(fleet())
    submit(st, labelled("p", {}, affinity=affine(app="nothing")))
    plan = st.cycle(T0)
    (cond,) = plan.conditions
    assert not plan.binds and cond.code == "pod-affinity"
    assert "app=nothing" in cond.message and "podAffinity" in cond.message


def test_the_first_pod_of_a_self_affine_group_is_placed() -> None:
    st = state(fleet())
    submit(st, labelled("p", {"app": "x"}, affinity=affine(app="x")))
    assert len(st.cycle(T0).binds) == 1


def test_a_topology_key_no_node_has_is_a_clear_reason_not_a_silent_wait() -> None:
    st = state(fleet())
    submit(st, labelled("p", {"app": "x"}, affinity=affine("rack", app="x")),
           labelled("s", {"app": "y"}, topologySpreadConstraints=spread("rack", app="y")))
    plan = st.cycle(T0)
    by = {c.name: c for c in plan.conditions}
    assert not plan.binds
    assert by["p"].code == "pod-affinity" and "'rack'" in by["p"].message
    assert by["s"].code == "topology-spread" and "'rack'" in by["s"].message


def test_spread_max_skew_one_across_zones_alternates() -> None:
    st = state(fleet(("a", "a", "b")))
    objs = submit(st, *[labelled(f"s{i}", {"app": "s"},
                                 topologySpreadConstraints=spread(app="s")) for i in range(4)])
    plan = st.cycle(T0)
    zone = {"n0-0": "a", "n1-0": "a", "n2-0": "b"}
    got = [zone[b.node] for b in plan.binds]
    assert sorted(got) == ["a", "a", "b", "b"]
    bind(st, plan, objs)


def test_spread_counts_only_its_namespace_and_selector() -> None:
    st = state(fleet(("a", "b")))
    for i in range(3):  # zone a is full of app=s pods, but of another namespace
        st.set_pod(other_scheduler_pod(f"o{i}", "n0-0", {"app": "s"}, ns="team-b"))
    st.set_pod(other_scheduler_pod("mine", "n1-0", {"app": "s"}))
    submit(st, labelled("p", {"app": "s"}, topologySpreadConstraints=spread(app="s")))
    (b,) = st.cycle(T0).binds
    assert b.node == "n0-0"  # zone a has 0 of team-a's, zone b 1


def test_min_domains_treats_the_minimum_as_zero() -> None:
    st = state(fleet(("a", "b")))
    st.set_pod(other_scheduler_pod("x", "n0-0", {"app": "s"}))
    st.set_pod(other_scheduler_pod("y", "n1-0", {"app": "s"}))
    c = spread(app="s")
    c[0]["minDomains"] = 3  # 2 domains < 3: global minimum 0, so 1 + 1 - 0 > maxSkew 1
    submit(st, labelled("p", {"app": "s"}, topologySpreadConstraints=c))
    plan = st.cycle(T0)
    assert not plan.binds and plan.conditions[0].code == "topology-spread"


def test_schedule_anyway_prefers_the_emptier_zone() -> None:
    st = state(fleet(("a", "b")))
    for i in range(2):
        st.set_pod(other_scheduler_pod(f"o{i}", "n0-0", {"app": "s"}))
    submit(st, labelled("p", {"app": "s"},
                        topologySpreadConstraints=spread(app="s", hard=False)))
    (b,) = st.cycle(T0).binds
    assert b.node == "n1-0"


def test_preferred_anti_affinity_ranks_nodes() -> None:
    st = state(fleet(("a", "b")))
    st.set_pod(other_scheduler_pod("o", "n0-0", {"app": "busy"}))
    pref = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "busy"}},
                                            "topologyKey": HOST}}]}}
    submit(st, labelled("p", {}, affinity=pref))
    (b,) = st.cycle(T0).binds
    assert b.node == "n1-0"


def test_namespace_selector_and_namespaces_of_a_term() -> None:
    st = state(fleet(("a", "b")))
    st.set_object("namespace", {"metadata": {"name": "team-b", "labels": {"env": "prod"}}})
    st.set_object("namespace", {"metadata": {"name": "team-a", "labels": {}}})
    st.set_pod(other_scheduler_pod("o", "n0-0", {"app": "db"}, ns="team-b"))
    own_ns = anti(app="db")  # the pod's own namespace only: team-b's pod does not count
    submit(st, labelled("p1", {}, affinity=own_ns))
    by_sel = anti(app="db")
    by_sel["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaceSelector"] = {
            "matchLabels": {"env": "prod"}}
    named = anti(app="db")
    named["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaces"] = ["team-b"]
    submit(st, labelled("p2", {}, affinity=by_sel), labelled("p3", {}, affinity=named))
    binds = {b.name: b.node for b in st.cycle(T0).binds}
    assert binds["p2"] == binds["p3"] == "n1-0"
    assert "p1" in binds


def test_a_gangs_members_keep_their_anti_affinity_among_themselves() -> None:
    st = state(fleet(("a", "b", "c")))
    st.set_object("podgroup", {"metadata": {"name": "g", "namespace": "team-a"},
                               "spec": {"minMember": 3}})
    members = []
    for i in range(3):
        o = labelled(f"g{i}", {"app": "g", names.PODGROUP_LABEL: "g"}, affinity=anti(app="g"))
        members.append(o)
    submit(st, *members)
    plan = st.cycle(T0)
    assert sorted(b.node for b in plan.binds) == ["n0-0", "n1-0", "n2-0"]


def test_a_gang_that_cannot_be_spread_waits_whole() -> None:
    st = state(fleet(("a", "b")))
    st.set_object("podgroup", {"metadata": {"name": "g", "namespace": "team-a"},
                               "spec": {"minMember": 3}})
    submit(st, *[labelled(f"g{i}", {"app": "g", names.PODGROUP_LABEL: "g"},
                          affinity=anti(app="g")) for i in range(3)])
    plan = st.cycle(T0)
    assert not plan.binds and len(plan.conditions) == 3


def test_the_pod_filter_leaves_once_no_pod_states_terms() -> None:
    """Requests carry terms only while some live pod states one: plain clusters keep the
    engine's fast path."""
    st = state(fleet())
    submit(st, labelled("a", {"app": "x"}, affinity=anti(app="x")))
    st.cycle(T0)
    assert st.pod_request(st.pods["team-a/a"]).pods is not None
    st.delete_pod("team-a/a")
    submit(st, labelled("b", {"app": "x"}))
    st.cycle(T0 + 1)
    assert st.pod_request(st.pods["team-a/b"]).pods is None


@pytest.mark.parametrize("spec,field", [
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt",
                                                 "values": ["1"]}]},
         "topologyKey": HOST}]}}}, "matchExpressions[0].operator"),
    ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {}, "topologyKey": ""}]}}}, "topologyKey"),
    ({"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "podAffinityTerm": {"topologyKey": "zone"}}]}}}, "weight"),
    ({"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "zone",
                                     "whenUnsatisfiable": "DoNotSchedule"}]}, "maxSkew"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                     "whenUnsatisfiable": "Sometimes"}]}, "whenUnsatisfiable"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                     "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}]},
     "minDomains"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                     "whenUnsatisfiable": "DoNotSchedule",
                                     "nodeTaintsPolicy": "Maybe"}]}, "nodeTaintsPolicy"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z",
                                     "whenUnsatisfiable": "DoNotSchedule"}] * 33},
     "at most 32"),
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "In",
                                                 "values": ["v"] * 300}]},
         "topologyKey": HOST}]}}}, "values"),
])
def test_malformed_terms_are_refused_naming_the_field(spec: dict, field: str) -> None:
    why = affinity_refusal(spec)
    assert field in why
    st = state(fleet())
    submit(st, labelled("p", {}, **spec))
    plan = st.cycle(T0)
    (cond,) = plan.conditions
    assert not plan.binds and cond.code == INVALID and field in cond.message


def test_match_label_keys_merge_the_pods_own_values() -> None:
    c = spread(app="s")
    c[0]["matchLabelKeys"] = ["rev"]
    t = parse_pod_terms({"metadata": {"namespace": "n", "labels": {"app": "s", "rev": "2"}},
                        "spec": {"topologySpreadConstraints": c}})
    sel = t.spread[0].selector
    assert sel.matches({"app": "s", "rev": "2"}) and not sel.matches({"app": "s", "rev": "1"})
    with pytest.raises(TermError, match="labels"):
        parse_pod_terms({"metadata": {"labels": {f"k{i}": "v" for i in range(300)}},
                         "spec": {"topologySpreadConstraints": c}})


def test_a_bound_pod_leaving_frees_its_domain() -> None:
    st = state(fleet(("a",)))
    objs = submit(st, labelled("r0", {"app": "w"}, affinity=anti(app="w")))
    bound = bind(st, st.cycle(T0), objs)
    submit(st, labelled("r1", {"app": "w"}, affinity=anti(app="w")))
    assert not st.cycle(T0 + 1).binds
    gone = copy.deepcopy(bound["r0"])
    gone["status"]["phase"] = "Succeeded"
    st.set_pod(gone)
    (b,) = st.cycle(T0 + 2).binds
    assert b.name == "r1"


def test_the_extender_leaves_inter_pod_terms_to_kube_scheduler_and_refuses_bad_ones() -> None:
    """In extender mode kube-scheduler's own plugins evaluate pod (anti-)affinity and
    spread: gpugov's filter neither refuses such a pod nor second-guesses them; a malformed
    term is refused naming its field."""
    from tests.k8s.test_scheduler_modes import extender

    ext = extender(*fleet(("a", "b")))
    req, why = ext.request_of(labelled("p", {"app": "w"}, affinity=anti(app="w")))
    assert req is not None and not why
    assert ext.filter(req, ["n0-0", "n1-0"])[0] == ["n0-0", "n1-0"]
    bad = anti(app="w")
    bad["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "topologyKey"] = ""
    req, why = ext.request_of(labelled("q", {}, affinity=bad))
    assert req is None and "topologyKey" in why


def test_preemption_evicts_the_lower_priority_pod_an_anti_affinity_forbids() -> None:
    """As kube-scheduler's preemption does: a high-priority pod kept off the only node by a
    low-priority pod its anti-affinity matches evicts that pod (room alone would not)."""
    st = state(fleet(("a",)))
    st.set_object("priorityclass", {"metadata": {"name": "low"}, "value": 10})
    st.set_object("priorityclass", {"metadata": {"name": "high"}, "value": 1000})
    objs = submit(st, labelled("low", {"app": "x"}, priorityClassName="low"),
                  labelled("other", {"app": "y"}, priorityClassName="low"))
    bind(st, st.cycle(T0), objs)
    submit(st, labelled("vip", {}, priorityClassName="high", affinity=anti(app="x")))
    assert [e.name for e in st.cycle(T0 + 1).evictions] == ["low"]


def test_a_pod_with_terms_and_too_many_labels_is_refused_not_counted_without_its_terms() -> None:
    st = state(fleet())
    submit(st, labelled("p", {f"k{i}": "v" for i in range(300)}, affinity=anti(app="x")))
    plan = st.cycle(T0)
    (cond,) = plan.conditions
    assert not plan.binds and cond.code == INVALID and "metadata.labels" in cond.message


def test_a_pending_pods_new_labels_are_what_counts() -> None:
    """Labels may change after creation: a pending pod relabelled out of an existing pod's
    anti-affinity is placed by its new labels."""
    st = state(fleet(("a",)))
    st.set_pod(other_scheduler_pod("db", "n0-0", {"app": "db"}, affinity=anti(role="noisy")))
    objs = submit(st, labelled("p", {"role": "noisy"}))
    assert not st.cycle(T0).binds
    relabelled = copy.deepcopy(objs["p"])
    relabelled["metadata"]["labels"] = {"role": "quiet"}
    st.set_pod(relabelled)
    assert [b.name for b in st.cycle(T0 + 1).binds] == ["p"]


def test_a_job_not_tried_again_keeps_the_words_naming_its_term() -> None:
    """A pending job the engine does not try again in a cycle keeps its earlier inter-pod
    block; its reason must still name the term, not fall back to the bare code."""
    from types import SimpleNamespace

    from gpugov.k8s.scheduler.pod_affinity import ANTI_AFFINITY
    from gpugov.k8s.scheduler.pod_presence import PodPresence

    presence = PodPresence()
    terms = object()  # any hashable stands for the request's terms
    job = SimpleNamespace(request=SimpleNamespace(pods=terms), blocked_by=ANTI_AFFINITY,
                          reason=ANTI_AFFINITY, detail=ANTI_AFFINITY)
    words = "required anti-affinity app=llm on kubernetes.io/hostname: every node holds one"
    presence.view = SimpleNamespace(why={terms: words})
    assert presence.reason(job) == (ANTI_AFFINITY, words)
    presence.view = SimpleNamespace(why={})  # the next cycle did not try the job
    assert presence.reason(job) == (ANTI_AFFINITY, words)
    job.blocked_by = "quota"  # blocked by something else now: its own reason
    assert presence.reason(job) == (ANTI_AFFINITY, ANTI_AFFINITY)


# -- an untrusted Tenant's terms reach only its own Tenant's pods --------------------------
def _cross_tenant(trust: str, zones: tuple[str, ...] = ("a",), namespaces=("team-a",)):
    """Nodes n0-0.. ; Tenant A (`trust`) in `namespaces`, Tenant B (internal) in team-b."""
    return state(nodes(*[pool(f"n{i}", 8, labels={"zone": z}) for i, z in enumerate(zones)]),
                 [{"metadata": {"name": "a"}, "spec": {"namespaces": list(namespaces),
                                                       "queue": "qa", "trust": trust}},
                  {"metadata": {"name": "b"}, "spec": {"namespaces": ["team-b"],
                                                       "queue": "qa", "trust": "internal"}}])


def _every_ns(kind: str) -> dict:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "victim"}}, "namespaceSelector": {},
         "topologyKey": HOST}]}}


@pytest.mark.parametrize("trust", ["untrusted", "internal"])
def test_an_untrusted_tenants_anti_affinity_cannot_keep_other_tenants_off_its_node(trust):
    st = _cross_tenant(trust)
    st.set_pod(other_scheduler_pod("blocker", "n0-0", {"app": "x"}, ns="team-a",
                                   affinity=_every_ns("podAntiAffinity")))
    submit(st, labelled("victim", {"app": "victim"}, ns="team-b"))
    plan = st.cycle(T0)
    if trust == "untrusted":  # its term matches Tenant A's pods only: the victim lands
        assert [b.node for b in plan.binds] == ["n0-0"]
    else:  # kube-scheduler's semantics: the existing pod's anti-affinity keeps it out
        (cond,) = plan.conditions
        assert not plan.binds and cond.code == "pod-anti-affinity"


@pytest.mark.parametrize("trust", ["untrusted", "internal"])
def test_an_untrusted_tenants_affinity_cannot_follow_another_tenants_pods(trust):
    st = _cross_tenant(trust, ("a", "b"))
    st.set_pod(other_scheduler_pod("victim", "n1-0", {"app": "victim"}, ns="team-b"))
    submit(st, labelled("follower", {"app": "f"}, ns="team-a",
                        affinity=_every_ns("podAffinity")))
    plan = st.cycle(T0)
    if trust == "untrusted":
        (cond,) = plan.conditions
        assert not plan.binds and cond.code == "pod-affinity"
        assert "its terms match only its own Tenant's pods" in cond.message
    else:
        assert [b.node for b in plan.binds] == ["n1-0"]


def test_an_untrusted_tenants_terms_still_reach_its_own_pods_in_its_other_namespaces():
    st = _cross_tenant("untrusted", ("a", "b"), namespaces=("team-a", "team-a2"))
    st.set_pod(other_scheduler_pod("peer", "n1-0", {"app": "victim"}, ns="team-a2"))
    submit(st, labelled("follower", {"app": "f"}, ns="team-a",
                        affinity=_every_ns("podAffinity")))
    assert [b.node for b in st.cycle(T0).binds] == ["n1-0"]
