"""Isolation levels and trust tiers: the weaker the trust, the stronger the isolation.

`none` (MPS, oversubscribed time-slicing: memory and fault domain shared), `soft` (memory MiB
+ compute % enforced in software by CUDA API interception, HAMi-core style: a bug or an
unhooked allocation path escapes it; a capped time-slice replica gets the memory cap, and its
compute is shared by the driver's time-slicing), `hard` (MIG instance or whole device:
enforced by the hardware). The tenant's trust tier, set by the control plane, sets the
minimum level; placement never gives less.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class IsolationLevel(IntEnum):
    """Ordered: NONE < SOFT < HARD, so `max()` and `>=` mean "at least as strong"."""

    NONE = 0
    SOFT = 1
    HARD = 2

    @classmethod
    def parse(cls, text: str) -> IsolationLevel:
        """Parse `none|soft|hard` (case-insensitive); ValueError lists the allowed values."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(
                f"isolation level {text!r} is not one of: none, soft, hard"
            ) from None

    def __str__(self) -> str:
        return self.name.lower()


class TrustTier(StrEnum):
    """A tenant attribute: how far the platform trusts code from this tenant."""

    TRUSTED = "trusted"  # e.g. the platform team's own jobs
    INTERNAL = "internal"  # other teams of the same company
    UNTRUSTED = "untrusted"  # external customers, arbitrary code


MIN_ISOLATION: dict[TrustTier, IsolationLevel] = {
    TrustTier.TRUSTED: IsolationLevel.NONE,
    TrustTier.INTERNAL: IsolationLevel.SOFT,
    TrustTier.UNTRUSTED: IsolationLevel.HARD,
}


def required_isolation(requested: IsolationLevel | None, tier: TrustTier) -> IsolationLevel:
    """The level placement must deliver: the stronger of what the pod asks and its tier's floor."""
    floor = MIN_ISOLATION[tier]
    return floor if requested is None else max(requested, floor)


def satisfies(delivered: IsolationLevel, required: IsolationLevel) -> bool:
    """True when a slice with `delivered` isolation may be given to a pod needing `required`."""
    return delivered >= required
