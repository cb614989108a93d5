"""Node constraints a pod must satisfy besides capacity: labels it selects, taints it tolerates.

Kubernetes semantics (core/v1): a pod may land on a node only if it tolerates every taint with
effect `NoSchedule` or `NoExecute`; `PreferNoSchedule` is a preference, never a refusal. A
toleration matches a taint when the keys are equal (an empty key with `Exists` matches every
key), the effects are equal (an empty effect matches every effect) and, for `Equal`, the values
are equal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: effects that keep a pod off a node unless tolerated.
HARD_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a taint needs a key")
        if self.effect not in TAINT_EFFECTS:
            raise ValueError(f"taint effect {self.effect!r} is not one of "
                             f"{', '.join(TAINT_EFFECTS)}")


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def __post_init__(self) -> None:
        if self.operator not in ("Equal", "Exists"):
            raise ValueError(f"toleration operator {self.operator!r} is not Equal or Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration with an empty key needs operator Exists")
        if self.effect and self.effect not in TAINT_EFFECTS:
            raise ValueError(f"toleration effect {self.effect!r} is not one of "
                             f"{', '.join(TAINT_EFFECTS)}")

    def matches(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return True
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def tolerates(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> bool:
    """True when every NoSchedule/NoExecute taint is matched by some toleration."""
    tols = tuple(tolerations)
    return all(any(t.matches(taint) for t in tols)
               for taint in taints if taint.effect in HARD_EFFECTS)


def selects(selector: Iterable[tuple[str, str]], labels: Mapping[str, str]) -> bool:
    """True when the node's labels carry every key=value of the pod's nodeSelector."""
    return all(labels.get(k) == v for k, v in selector)
