"""The control-plane config's schema: pydantic models of queues, tenants, classes and knobs.

Field-level rules live here (types, ranges, resource names, durations); rules across entries
(names, the tree, quotas against parents) are `config.validate_config`'s. `k8s/crds.py`
generates the CRDs from these models.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpugov.control.resources import MIG_PREFIX, allowed_text, resource_problem
from gpugov.model.isolation import TrustTier

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string like `90s`, `5m`, `1.5h`, `2d`."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; use seconds or e.g. '30s', '5m', '2h'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.match(str(value))
        if not m:
            raise ValueError(
                f"{value!r} is not a duration; use seconds or e.g. '30s', '5m', '2h', '1d'"
            )
        seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{value!r} must be a finite duration >= 0")
    return seconds


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def _check_resources(value: Any) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{value!r} must be a mapping of resource -> amount, "
                         f"resources: {allowed_text()}")
    out: dict[str, float] = {}
    for key, amount in value.items():
        problem = resource_problem(key)
        if problem:
            raise ValueError(problem)
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise ValueError(f"{key}: {amount!r} is not a number; allowed: a number >= 0")
        if not math.isfinite(amount) or amount < 0:
            raise ValueError(f"{key}: {amount!r} is negative or not finite; allowed: >= 0")
        if str(key).startswith(MIG_PREFIX) and amount != int(amount):
            raise ValueError(f"{key}: {amount!r} is not a whole number of MIG instances; "
                             "allowed: 0, 1, 2, ...")
        out[str(key)] = float(amount)
    return out


class QueueConfig(_Strict):
    """One node of the quota tree. Omitted caps mean "no cap"; omitted quota means 0."""

    name: str = Field(min_length=1)
    parent: str | None = None
    quota: dict[str, float] = Field(default_factory=dict)
    limit: dict[str, float] | None = None
    borrowing_limit: dict[str, float] | None = Field(None, alias="borrowingLimit")
    lending_limit: dict[str, float] | None = Field(None, alias="lendingLimit")
    weight: float = Field(1.0, ge=0, allow_inf_nan=False)
    priority: int = 0

    @field_validator("quota", "limit", "borrowing_limit", "lending_limit", mode="before")
    @classmethod
    def _resources(cls, value: Any) -> dict[str, float] | None:
        return None if value is None else _check_resources(value)


class TimeSlicingConfig(_Strict):
    """The Tenant CRD's `timeSlicing` (k8s/crds.py writes its schema by hand)."""

    oversubscribe: bool = False


class TenantConfig(_Strict):
    """A Kubernetes namespace mapped to a leaf queue, with a trust tier."""

    namespace: str = Field(min_length=1)
    queue: str = Field(min_length=1)
    trust: TrustTier = TrustTier.INTERNAL
    # the Tenant CRD's `timeSlicing` (the replay honours it): `oversubscribe` uncaps the
    # tenant's time-slice replicas, for a trusted tenant only
    time_slicing: TimeSlicingConfig | None = Field(None, alias="timeSlicing")

    @model_validator(mode="after")
    def _oversubscribe_is_trusted(self) -> TenantConfig:
        if self.time_slicing and self.time_slicing.oversubscribe and \
                self.trust is not TrustTier.TRUSTED:
            raise ValueError("timeSlicing.oversubscribe needs trust: trusted (an uncapped "
                             "replica delivers no isolation)")
        return self

    @property
    def oversubscribe(self) -> bool:
        return bool(self.time_slicing and self.time_slicing.oversubscribe)


class PriorityClassConfig(_Strict):
    """A named priority; `preemptible` is independent of the value (unlike KAI's < 100)."""

    name: str = Field(min_length=1)
    value: int
    preemptible: bool = True
    min_runtime: float = Field(0.0, alias="minRuntime")

    @field_validator("min_runtime", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


class FairShareConfig(_Strict):
    """Optional usage history: surplus moves away from queues that used a lot recently."""

    history_window: float = Field(0.0, alias="historyWindow")
    half_life: float = Field(0.0, alias="halfLife")
    k: float = Field(1.0, ge=0, allow_inf_nan=False)

    @field_validator("history_window", "half_life", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


class BackfillConfig(_Strict):
    """Head-of-line protection: a blocked head reserves nodes after `headGrace`."""

    head_grace: float = Field(0.0, alias="headGrace")
    max_reservations: int = Field(16, ge=0, alias="maxReservations")

    @field_validator("head_grace", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


class PreemptionConfig(_Strict):
    """Preemption is on by default (inert defaults are a known failure of other systems)."""

    enabled: bool = True
    max_attempts: int = Field(64, ge=0, alias="maxAttemptsPerCycle")
    max_victim_candidates: int = Field(256, ge=1, alias="maxVictimCandidates")


class ControlConfig(_Strict):
    """The whole file. Cross-field rules live in `validate_config`."""

    queues: list[QueueConfig] = Field(min_length=1)
    tenants: list[TenantConfig] = Field(default_factory=list)
    priority_classes: list[PriorityClassConfig] = Field(
        default_factory=lambda: [PriorityClassConfig(name="default", value=0)],
        alias="priorityClasses",
    )
    fair_share: FairShareConfig = Field(default_factory=FairShareConfig, alias="fairShare")
    backfill: BackfillConfig = Field(default_factory=BackfillConfig)
    preemption: PreemptionConfig = Field(default_factory=PreemptionConfig)

    def priority_class(self, name: str | None) -> PriorityClassConfig:
        """The class called `name`; empty/None means the class with the lowest value."""
        if not name:
            return min(self.priority_classes, key=lambda c: (c.value, c.name))
        for c in self.priority_classes:
            if c.name == name:
                return c
        allowed = ", ".join(c.name for c in self.priority_classes)
        raise KeyError(f"unknown priority class {name!r}; allowed: {allowed}")
