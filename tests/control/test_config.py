"""Config errors name the field, the value and what is allowed."""

from __future__ import annotations

import pytest

from gpugov.control.config import ConfigError, load_config, parse_config
from gpugov.control.tree import build_tree


def problems(data) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    return str(exc.value)


def test_issue_example_is_valid_and_omitted_caps_mean_no_cap(tmp_path):
    path = tmp_path / "q.yaml"
    path.write_text("""
queues:
  - name: org-a
    quota: {gpu: 8, cpu: 64, memory: 512}
    limit: {gpu: 16}
    weight: 1
  - name: team-a1
    parent: org-a
    quota: {gpu: 4}
    borrowingLimit: {gpu: 4}
    lendingLimit: {gpu: 2}
    priority: 100
tenants:
  - {namespace: ns-a1, queue: team-a1, trust: internal}
priorityClasses:
  - {name: high, value: 1000, preemptible: false}
  - {name: low, value: 10, preemptible: true, minRuntime: 0s}
""")
    cfg = load_config(path)
    tree = build_tree(cfg)
    assert tree.cap[1, 0] == 8000 and tree.cap[0, 0] == 16000
    assert tree.reserve[1, 0] == 2000
    assert cfg.priority_class("").name == "low"


@pytest.mark.parametrize("data,expected", [
    ({"queues": [{"name": "a", "quota": {"gpux": 1}}]}, "queues[0].quota: unknown resource 'gpux'"),
    ({"queues": [{"name": "a", "quota": {"gpu": -1}}]}, "allowed: >= 0"),
    ({"queues": [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]}, "cycle"),
    ({"queues": [{"name": "a", "parent": "zz"}]}, "queues[0].parent: 'zz' is not a queue"),
    ({"queues": [{"name": "p", "quota": {"gpu": 4}},
                 {"name": "c1", "parent": "p", "quota": {"gpu": 3}},
                 {"name": "c2", "parent": "p", "quota": {"gpu": 2}}]},
     "queues[0].quota.gpu: children of 'p' (c1, c2) have quota 5, more than the parent's 4"),
    ({"queues": [{"name": "a", "quota": {"gpu": 4}, "limit": {"gpu": 2}}]},
     "queues[0].limit.gpu: 2 is below quota 4"),
    ({"queues": [{"name": "a"}], "tenants": [{"namespace": "n", "queue": "a",
                                              "trust": "friendly"}]}, "tenants[0].trust"),
    ({"queues": [{"name": "p"}, {"name": "c", "parent": "p"}],
      "tenants": [{"namespace": "n", "queue": "p"}]}, "only leaf queues take work"),
    ({"queues": [{"name": "a", "wieght": 2}]}, "queues[0].wieght: unknown field"),
    ({"queues": [{"name": "a"}], "priorityClasses": [{"name": "x", "value": 1,
                                                      "minRuntime": "soon"}]},
     "'soon' is not a duration"),
    ({"queues": [{"name": "a"}, {"name": "a"}]}, "duplicate queue name 'a'"),
])
def test_bad_configs_are_explained(data, expected):
    assert expected in problems(data)


def test_unreadable_and_non_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("queues: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_every_problem_is_reported_in_one_pass():
    # field errors (bad amount, bad duration) and cross-field errors (duplicate name,
    # unknown parent, lendingLimit above quota, tenant of an unknown queue, duplicate class)
    # all at once, each with its position in the file
    text = problems({
        "queues": [{"name": "a", "quota": {"gpu": -1}}, {"name": "b"}, {"name": "b"},
                   {"name": "c", "parent": "zz"}, {"name": "d", "parent": "a"},
                   {"name": "e", "quota": {"gpu": 2}, "lendingLimit": {"gpu": 3}}],
        "tenants": [{"namespace": "x", "queue": "a"}, {"namespace": "y", "queue": "nope"}],
        "priorityClasses": [{"name": "p", "value": "x"}, {"name": "q", "value": 1},
                            {"name": "q", "value": 2}],
        "backfill": {"headGrace": "soon"}})
    for expected in ("queues[0].quota: gpu: -1", "priorityClasses[0].value",
                     "backfill.headGrace: 'soon' is not a duration",
                     "queues[2].name: duplicate queue name 'b'",
                     "queues[3].parent: 'zz' is not a queue",
                     "queues[5].lendingLimit.gpu: 3 is above its quota 2",
                     "tenants[1].queue: 'nope' is not a queue",
                     "priorityClasses[2].name: duplicate class 'q'"):
        assert expected in text, expected
    # references to a queue that exists but is invalid itself are not reported again
    assert "queues[4].parent" not in text and "tenants[0]" not in text


def test_lending_limit_above_quota_is_refused_and_up_to_quota_accepted():
    assert "queues[0].lendingLimit.gpu: 5 is above its quota 4" in problems(
        {"queues": [{"name": "a", "quota": {"gpu": 4}, "lendingLimit": {"gpu": 5}}]})
    assert "queues[0].lendingLimit.gpu: 1 is above its quota 0" in problems(
        {"queues": [{"name": "a", "lendingLimit": {"gpu": 1}}]})
    cfg = parse_config({"queues": [{"name": "a", "quota": {"gpu": 4},
                                    "lendingLimit": {"gpu": 4}}]})
    assert build_tree(cfg).reserve[0, 0] == 0


def test_children_reserves_above_the_parents_cap_are_refused():
    # the parent omits its quota (so it inherits 8) but caps itself at 4, while its
    # children keep 3 + 3 GPUs they never lend: c2 or c1 could never get anything beyond
    text = problems({"queues": [
        {"name": "p", "limit": {"gpu": 4}},
        {"name": "c1", "parent": "p", "quota": {"gpu": 4}, "lendingLimit": {"gpu": 1}},
        {"name": "c2", "parent": "p", "quota": {"gpu": 4}, "lendingLimit": {"gpu": 1}}]})
    assert "the children of 'p' keep 6 GPUs of idle reserve" in text
    assert "above its cap 4 GPUs" in text
