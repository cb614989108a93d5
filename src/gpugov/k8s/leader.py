"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does.

One replica holds the Lease and renews it every `retry_period`; the others poll it. A
standby takes the Lease over when the record it last saw has not changed for
`lease_duration` (measured on its own clock, from when it saw the change, so clock skew
between machines does not matter). A leader that cannot renew within `renew_deadline`
stops leading (`lost` is set); the scheduler exits then, as kube-scheduler does, so two
replicas never act at once for longer than the lease allows. Updates are conditional on
the Lease's resourceVersion, so two candidates cannot both win one round.

Defaults are client-go's: 15 s lease, 10 s renew deadline, 2 s retry period.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpugov.k8s.scheduler.kube import Kube, message

log = logging.getLogger("gpugov.leader")


@dataclass(frozen=True)
class LeaseTiming:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError(
                f"need lease duration > renew deadline > retry period > 0, got "
                f"{self.lease_duration:g} / {self.renew_deadline:g} / {self.retry_period:g} s")


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquire, then keep, a Lease named `name` in `namespace` for `identity`."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str,
                 timing: LeaseTiming | None = None) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.timing = timing or LeaseTiming()
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.lost = asyncio.Event()
        self.transitions = 0
        self._observed: tuple[Any, float] | None = None  # (record, local time first seen)
        self._last_renew = 0.0

    async def _get(self) -> dict[str, Any] | None:
        status, doc = await self.kube.request("GET", f"{self.path}/{self.name}", timeout=5)
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError(f"get lease: HTTP {status}: {message(doc)}")
        return doc

    def _spec(self, old: dict[str, Any] | None, acquire: bool) -> dict[str, Any]:
        spec = dict((old or {}).get("spec") or {})
        now = _micro_time()
        if acquire:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if old else 0)
        spec.update(holderIdentity=self.identity, renewTime=now,
                    leaseDurationSeconds=max(1, round(self.timing.lease_duration)))
        return spec

    async def try_acquire_or_renew(self) -> bool:
        """One round: True when this identity holds the Lease afterwards."""
        lease = await self._get()
        now = time.monotonic()
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(None, True)}
            status, _ = await self.kube.request("POST", self.path, body, timeout=5)
            return status == 201
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"),
                  spec.get("leaseTransitions"))
        if self._observed is None or self._observed[0] != record:
            self._observed = (record, now)
        holder = spec.get("holderIdentity")
        mine = holder == self.identity
        expired = self._observed[1] + self.timing.lease_duration < now
        if holder and not mine and not expired:
            return False
        lease["spec"] = self._spec(lease, not mine)
        status, doc = await self.kube.request(
            "PUT", f"{self.path}/{self.name}", lease, timeout=5)
        if status != 200:
            return False  # 409: someone else wrote first
        new = doc.get("spec") or {}
        self._observed = ((new.get("holderIdentity"), new.get("renewTime"),
                           new.get("leaseTransitions")), time.monotonic())
        if not mine:
            self.transitions += 1
            log.info("%s acquired lease %s/%s", self.identity, self.namespace, self.name)
        return True

    async def acquire(self) -> None:
        """Wait until this identity leads."""
        while True:
            try:
                if await self.try_acquire_or_renew():
                    self._last_renew = time.monotonic()
                    return
            except (TimeoutError, OSError, RuntimeError) as e:
                log.warning("lease %s: %s", self.name, e)
            await asyncio.sleep(self.timing.retry_period)

    async def keep(self) -> None:
        """Renew every retry period; set `lost` and return once a renewal is overdue."""
        while True:
            await asyncio.sleep(self.timing.retry_period)
            try:
                ok = await asyncio.wait_for(self.try_acquire_or_renew(),
                                            self.timing.renew_deadline)
            except (TimeoutError, OSError, RuntimeError) as e:
                log.warning("lease %s renewal failed: %s", self.name, e)
                ok = False
            if ok:
                self._last_renew = time.monotonic()
            elif time.monotonic() - self._last_renew > self.timing.renew_deadline or \
                    await self._someone_else():
                log.error("%s lost lease %s/%s", self.identity, self.namespace, self.name)
                self.lost.set()
                return

    async def _someone_else(self) -> bool:
        try:
            lease = await self._get()
        except (TimeoutError, OSError, RuntimeError):
            return False
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return holder is not None and holder != self.identity

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown, so a standby need not wait it out."""
        try:
            lease = await self._get()
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.kube.request("PUT", f"{self.path}/{self.name}", lease, timeout=5)
        except (TimeoutError, OSError, RuntimeError):
            pass
