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
