"""Decayed usage history per queue, for time-based fair share (optional).

Usage is integrated over time with exponential decay (`halfLife`) and only the last
`window` seconds count. Pure: the caller passes the time, nothing reads a clock.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class UsageHistory:
    def __init__(self, window: float, half_life: float) -> None:
        self.window, self.half_life = window, half_life
        self.segments: deque[tuple[float, float, np.ndarray]] = deque()
        self.last_t: float | None = None
        self.last_usage: np.ndarray | None = None

    @property
    def enabled(self) -> bool:
        return self.window > 0 or self.half_life > 0

    def observe(self, now: float, usage: np.ndarray) -> None:
        """Record that `usage` (as of the previous observation) lasted until `now`."""
        if self.last_t is not None and self.last_usage is not None and now > self.last_t:
            if self.window <= 0:  # no window: one running decayed sum is enough
                dt = now - self.last_t
                lam = np.log(2) / self.half_life
                acc = self.segments.pop()[2] if self.segments else 0.0
                acc = acc * np.exp(-lam * dt) + self.last_usage * (1 - np.exp(-lam * dt)) / lam
                self.segments.append((now, now, acc))
            else:
                self.segments.append((self.last_t, now, self.last_usage))
        self.last_t, self.last_usage = now, usage.copy()
        if self.window > 0:
            while self.segments and self.segments[0][1] <= now - self.window:
                self.segments.popleft()

    def value(self, now: float) -> np.ndarray | None:
        """Decayed usage integral per queue and resource, or None with no history yet."""
        if not self.segments:
            return None
        if self.window <= 0:
            t, _, acc = self.segments[-1]
            return acc * np.exp(-np.log(2) / self.half_life * (now - t))
        total = np.zeros_like(self.segments[0][2])
        lo = now - self.window if self.window > 0 else -np.inf
        for t0, t1, usage in self.segments:
            a, b = max(t0, lo), t1
            if b <= a:
                continue
            if self.half_life > 0:
                lam = np.log(2) / self.half_life
                w = (np.exp(-lam * (now - b)) - np.exp(-lam * (now - a))) / lam
            else:
                w = b - a
            total += usage * w
        return total
