"""The control-plane config: queues (a quota tree), tenants, priority classes, knobs.

YAML validated by pydantic (the models are in `control/schema.py`, re-exported here). Every
error names the field (as a path such as `queues[1].quota.gpux`), the bad value, and what is
allowed; `load_config` gathers all of them into one `ConfigError` so a user fixes the file in
one pass.

Units in YAML: `gpu` in GPUs (fractions allowed), `cpu` in cores, `memory` and `gpumem` in
GiB, `mig-<profile>` in instances (`control/resources.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpugov.control.resources import RESOURCES, SCALE
from gpugov.control.schema import (
    BackfillConfig,
    ControlConfig,
    FairShareConfig,
    PreemptionConfig,
    PriorityClassConfig,
    QueueConfig,
    TenantConfig,
    parse_duration,
)
from gpugov.control.tree import build_tree, reserve_problems
from gpugov.model.validation import pydantic_problems, yaml_loader
from gpugov.model.yaml_error import one_line

__all__ = ["RESOURCES", "SCALE", "BackfillConfig", "ConfigError", "ControlConfig",
           "FairShareConfig", "PreemptionConfig", "PriorityClassConfig", "QueueConfig",
           "TenantConfig", "load_config", "parse_config", "parse_duration", "validate_config"]


#: problems a ConfigError's message lists (all stay in `problems`): thousands of lines on a
#: terminal hide the first, which is usually the cause
MAX_SHOWN = 50


class ConfigError(ValueError):
    """A config that cannot be used; `problems` holds one line per error."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source, self.problems = source, problems
        super().__init__(f"{source}: invalid config:\n  " + "\n  ".join(shown(problems)))


def shown(problems: list[str], limit: int = MAX_SHOWN) -> list[str]:
    """The first `limit` problems, and a line counting the rest."""
    if len(problems) <= limit:
        return problems
    return [*problems[:limit], f"... and {len(problems) - limit} more problems (the first "
                               f"{limit} are shown)"]


def validate_config(cfg: ControlConfig, where: _Where | None = None) -> list[str]:
    """Cross-field rules: names, tree shape, quotas vs parent, caps vs quota, tenants.

    `where` (used when some entries failed their own validation and were left out) maps
    the remaining entries back to their positions in the file and names the queues that
    exist there but were invalid, so no reference to them is reported twice.
    """
    w = where or _Where.whole(cfg)
    problems: list[str] = []
    index: dict[str, int] = {}
    for i, q in enumerate(cfg.queues):
        if q.name in index or q.name in w.invalid_queues:
            problems.append(f"queues[{w.queues[i]}].name: duplicate queue name {q.name!r}; "
                            "queue names must be unique")
        index.setdefault(q.name, i)
    for i, q in enumerate(cfg.queues):
        at = f"queues[{w.queues[i]}]"
        if q.parent is not None and q.parent not in index \
                and q.parent not in w.invalid_queues:
            problems.append(f"{at}.parent: {q.parent!r} is not a queue; "
                            f"allowed: one of {', '.join(sorted(index))} or omitted")
        for r, v in (q.limit or {}).items():
            if v < q.quota.get(r, 0.0):
                problems.append(f"{at}.limit.{r}: {v:g} is below quota "
                                f"{q.quota[r]:g}; allowed: >= quota")
    # cycles
    for i, q in enumerate(cfg.queues):
        seen, cur = [q.name], q.parent
        while cur is not None and cur in index:
            if cur in seen:
                problems.append(f"queues[{w.queues[i]}].parent: {q.name!r} is in a cycle "
                                f"({' -> '.join([*seen, cur])}); the queues must form a tree")
                break
            seen.append(cur)
            cur = cfg.queues[index[cur]].parent
    children: dict[str, list[QueueConfig]] = {}
    for q in cfg.queues:
        if q.parent is not None:
            children.setdefault(q.parent, []).append(q)
    for i, q in enumerate(cfg.queues):
        at = f"queues[{w.queues[i]}]"
        kids = children.get(q.name, [])
        for r in q.quota:
            if not kids:
                continue
            total = sum(k.quota.get(r, 0.0) for k in kids)
            if total > q.quota[r] + 1e-9:
                problems.append(
                    f"{at}.quota.{r}: children of {q.name!r} "
                    f"({', '.join(k.name for k in kids)}) have quota {total:g}, more than "
                    f"the parent's {q.quota[r]:g}; allowed: sum of children's quotas <= parent's"
                )
        for r, v in (q.lending_limit or {}).items():
            if kids and r not in q.quota:
                continue  # quota inherited from the children: checked against the tree
            if v > q.quota.get(r, 0.0) + 1e-9:
                problems.append(
                    f"{at}.lendingLimit.{r}: {v:g} is above its quota {q.quota.get(r, 0.0):g};"
                    f" allowed: 0 to quota (how much of its unused quota others may borrow)")
    leaves = {q.name for q in cfg.queues if q.name not in children}
    seen_ns: set[str] = set()
    for i, t in enumerate(cfg.tenants):
        at = f"tenants[{w.tenants[i]}]"
        if t.namespace in seen_ns:
            problems.append(f"{at}.namespace: duplicate namespace {t.namespace!r}")
        seen_ns.add(t.namespace)
        if t.queue in w.invalid_queues:
            continue
        if t.queue not in index:
            problems.append(f"{at}.queue: {t.queue!r} is not a queue; "
                            f"allowed: a leaf queue ({', '.join(sorted(leaves))})")
        elif t.queue not in leaves:
            problems.append(f"{at}.queue: {t.queue!r} has child queues; only leaf "
                            f"queues take work ({', '.join(sorted(leaves))})")
    names: set[str] = set()
    for i, c in enumerate(cfg.priority_classes):
        if c.name in names:
            problems.append(f"priorityClasses[{w.classes[i]}].name: duplicate class "
                            f"{c.name!r}")
        names.add(c.name)
    if not cfg.priority_classes and not w.partial:
        problems.append("priorityClasses: at least one priority class is required")
    return problems


class _Where:
    """Positions in the file of the entries a (possibly partial) config holds."""

    def __init__(self, queues: list[int], tenants: list[int], classes: list[int],
                 invalid_queues: set[str], partial: bool) -> None:
        self.queues, self.tenants, self.classes = queues, tenants, classes
        self.invalid_queues, self.partial = invalid_queues, partial

    @classmethod
    def whole(cls, cfg: ControlConfig) -> _Where:
        return cls(list(range(len(cfg.queues))), list(range(len(cfg.tenants))),
                   list(range(len(cfg.priority_classes))), set(), False)


_LISTS = (("queues", QueueConfig), ("tenants", TenantConfig),
          ("priorityClasses", PriorityClassConfig))
_SECTIONS = (("fairShare", FairShareConfig), ("backfill", BackfillConfig),
             ("preemption", PreemptionConfig))


def _valid_parts(data: Mapping[str, Any]) -> tuple[ControlConfig, _Where]:
    """A config of the entries that are valid on their own (after a validation error), so
    the cross-field rules can still report every other problem in the same pass."""
    kept: dict[str, list[Any]] = {}
    where: dict[str, list[int]] = {}
    invalid: set[str] = set()
    for key, model in _LISTS:
        raw = data.get(key)
        kept[key], where[key] = [], []
        for i, item in enumerate(raw if isinstance(raw, list) else []):
            try:
                kept[key].append(model.model_validate(item))
                where[key].append(i)
            except ValidationError:
                if key == "queues" and isinstance(item, Mapping) \
                        and isinstance(item.get("name"), str):
                    invalid.add(item["name"])
    sections: dict[str, Any] = {}
    for key, model in _SECTIONS:
        try:
            sections[key] = model.model_validate(data.get(key) or {})
        except ValidationError:
            sections[key] = model()
    classes = kept["priorityClasses"] if "priorityClasses" in data else \
        [PriorityClassConfig(name="default", value=0)]
    cfg = ControlConfig.model_construct(
        queues=kept["queues"], tenants=kept["tenants"], priority_classes=classes,
        fair_share=sections["fairShare"], backfill=sections["backfill"],
        preemption=sections["preemption"])
    w = _Where(where["queues"], where["tenants"],
               where["priorityClasses"] if "priorityClasses" in data else [0], invalid, True)
    return cfg, w


def parse_config(data: Any, source: str = "<config>") -> ControlConfig:
    """Validate already-parsed YAML; raises ConfigError listing every problem."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, [f"<root>: expected a mapping with 'queues', got "
                                   f"{type(data).__name__}"])
    try:
        cfg = ControlConfig.model_validate(data)
    except ValidationError as exc:
        # report the cross-field problems of the valid entries too: every problem at once
        problems = pydantic_problems(exc)
        partial, where = _valid_parts(data)
        problems += [p for p in validate_config(partial, where) if p not in problems]
        raise ConfigError(source, problems) from None
    problems = validate_config(cfg)
    if not problems:  # the tree is sound: check what only its arrays show
        problems = reserve_problems(build_tree(cfg))
    if problems:
        raise ConfigError(source, problems)
    return cfg


def load_config(path: Path | str) -> ControlConfig:
    """Read and validate a YAML config file (UTF-8; a spreadsheet's byte-order mark is fine)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), [f"not UTF-8 text (byte {exc.start})"]) from None
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None
    try:
        data = yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise ConfigError(str(path), [f"not valid YAML: {one_line(exc)}"]) from None
    return parse_config(data, str(path))
