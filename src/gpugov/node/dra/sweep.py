"""Sweeping what prepared claims left on the node once the claims are gone from the API.

Why: prepare writes, per claim, a record (`<state>/dra/<uid>.json`), a CDI spec, a region
folder (whose `devices` and `pods` files the exporter reads to attribute usage to the claim)
and QoS board files; only NodeUnprepareResources removed them. When the kubelet never calls it
— a node crash that lost the kubelet's DRA checkpoint, the plugin reinstalled, a claim
force-deleted while the node was down — they stayed forever: the exporter kept attributing to
a claim that no longer exists, dead boards took the library's board slots (it reads at most 64
per device), and files piled up.

The rule (conservative): a claim's files go only when the claim is definitively gone — the API
answers 404 for its namespace/name, or the claim of that namespace/name has another UID (it
was deleted and created again). An API error, a timeout, or a claim that still exists (even
deallocated, even terminating) keeps everything; the next pass asks again. A record that
cannot be read is skipped alone (`records.RecordError`), never removed on a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

#: how often the plugin sweeps (`gpugov node dra-plugin --sweep-interval`), and how long one
#: claim's API read may take before it counts as unknown
SWEEP_S = 60.0
READ_TIMEOUT_S = 10.0
#: API reads failed in a row after which a pass stops asking (an API down would otherwise
#: cost READ_TIMEOUT_S per claim); the claims not asked are kept, the next pass asks again
MAX_READ_FAILURES = 3


class Verdict(Enum):
    GONE = "gone"  # 404, or the name now holds another claim: sweep
    LIVE = "live"  # the claim (this UID) exists: keep
    UNKNOWN = "unknown"  # the answer does not say (no UID in it): keep


def verdict(obj: Any, uid: str) -> tuple[Verdict, str]:
    """What the API's answer for the record's namespace/name says about claim `uid`, and
    why in words. `obj` is None only for a 404 (`ClaimSource.get_claim`'s contract)."""
    if obj is None:
        return Verdict.GONE, "the API answers 404"
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    now = meta.get("uid") if isinstance(meta, dict) else None
    if not isinstance(now, str) or not now:
        return Verdict.UNKNOWN, "the API's answer has no metadata.uid"
    if now != uid:
        return Verdict.GONE, f"that name now holds another claim (UID {now[:64]})"
    return Verdict.LIVE, "the claim exists"


@dataclass(slots=True)
class SweepReport:
    """One pass: the claims swept, kept and not decided (namespace, name, uid), and the
    record files skipped (path, why)."""

    swept: list[tuple[str, str, str]] = field(default_factory=list)
    kept: list[tuple[str, str, str]] = field(default_factory=list)
    unknown: list[tuple[str, str, str]] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class SweepStats:
    """Counts since the plugin started (the plugin serves no metrics; these are logged and
    read by tests)."""

    passes: int = 0
    swept: int = 0
    kept: int = 0
    unknown: int = 0
    bad: int = 0
    failed: int = 0  # removal steps that raised (the files stay; the next pass retries)

    def add(self, report: SweepReport) -> None:
        self.passes += 1
        self.swept += len(report.swept)
        self.kept += len(report.kept)
        self.unknown += len(report.unknown)
        self.bad += len(report.bad)
