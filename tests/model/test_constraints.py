"""Taints, tolerations and node selectors behave as Kubernetes documents them."""

import pytest

from gpugov.model.constraints import Taint, Toleration, selects, tolerates

NO_SCHED = Taint("dedicated", "infer", "NoSchedule")


def test_untolerated_noschedule_and_noexecute_taints_keep_pods_off() -> None:
    assert not tolerates((), [NO_SCHED])
    assert not tolerates((), [Taint("gpu", "", "NoExecute")])


def test_prefer_noschedule_is_a_preference_not_a_refusal() -> None:
    assert tolerates((), [Taint("spot", "yes", "PreferNoSchedule")])


@pytest.mark.parametrize("tol, ok", [
    (Toleration("dedicated", "Equal", "infer"), True),
    (Toleration("dedicated", "Equal", "train"), False),
    (Toleration("dedicated", "Exists"), True),
    (Toleration("other", "Exists"), False),
    (Toleration("dedicated", "Equal", "infer", "NoExecute"), False),
    (Toleration("dedicated", "Equal", "infer", "NoSchedule"), True),
    (Toleration("", "Exists"), True),  # empty key + Exists tolerates everything
    (Toleration("", "Exists", effect="NoExecute"), False),
])
def test_toleration_matching(tol: Toleration, ok: bool) -> None:
    assert tolerates([tol], [NO_SCHED]) is ok


def test_every_hard_taint_needs_its_own_match() -> None:
    taints = [NO_SCHED, Taint("gpu", "h100", "NoSchedule")]
    assert not tolerates([Toleration("dedicated", "Exists")], taints)
    assert tolerates([Toleration("dedicated", "Exists"), Toleration("gpu", "Exists")], taints)


@pytest.mark.parametrize("kwargs", [
    {"key": "", "operator": "Equal"},
    {"key": "a", "operator": "Exists", "value": "x"},
    {"key": "a", "operator": "In"},
    {"key": "a", "effect": "Sometimes"},
])
def test_malformed_tolerations_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Toleration(**kwargs)


def test_malformed_taints_are_refused() -> None:
    with pytest.raises(ValueError):
        Taint("")
    with pytest.raises(ValueError):
        Taint("a", "b", "Never")


def test_node_selector_needs_every_label() -> None:
    labels = {"zone": "a", "tier": "gold"}
    assert selects([("zone", "a")], labels)
    assert selects([], labels)
    assert not selects([("zone", "a"), ("tier", "silver")], labels)
    assert not selects([("rack", "1")], labels)
