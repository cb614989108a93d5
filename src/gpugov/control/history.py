"""Decayed usage history per queue, for time-based fair share (optional).

Usage is integrated over time with exponential decay (`halfLife`) and only the last
`window` seconds count. Pure: the caller passes the time, nothing reads a clock.

Kept incrementally, O(queues) per observation instead of a sum over every stored segment:
`acc` is the decayed integral over all time; `old` the same integral over what has left
the window, kept as of the window's start. With decay factor D(t) = exp(-lambda t) (no decay:
D = 1), the windowed value at `now` is acc(now) - D(window) * old(now - window); a segment
is folded into `old` once, when it leaves the window, and only the one straddling the
window's start is split.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class UsageHistory:
    def __init__(self, window: float, half_life: float) -> None:
        self.window, self.half_life = window, half_life
        self.lam = float(np.log(2) / half_life) if half_life > 0 else 0.0
        # segments still (partly) inside the window: (start, end, usage)
        self.segments: deque[tuple[float, float, np.ndarray]] = deque()
        self.acc: np.ndarray | None = None  # decayed integral of everything, as of last_t
        self.old: np.ndarray | None = None  # ... of what left the window, as of old_t
        self.old_t = 0.0
        self.last_t: float | None = None
        self.last_usage: np.ndarray | None = None

    @property
    def enabled(self) -> bool:
        return self.window > 0 or self.half_life > 0

    def _decay(self, acc: np.ndarray, dt: float) -> np.ndarray:
        return acc * np.exp(-self.lam * dt) if self.lam else acc

    def _extend(self, acc: np.ndarray | None, usage: np.ndarray, dt: float) -> np.ndarray:
        """`acc` carried `dt` seconds forward while `usage` lasted."""
        weight = (1.0 - np.exp(-self.lam * dt)) / self.lam if self.lam else dt
        base = np.zeros_like(usage, dtype=np.float64) if acc is None else self._decay(acc, dt)
        return base + usage * weight

    def observe(self, now: float, usage: np.ndarray) -> None:
        """Record that `usage` (as of the previous observation) lasted until `now`."""
        if self.last_t is not None and self.last_usage is not None and now > self.last_t:
            self.acc = self._extend(self.acc, self.last_usage, now - self.last_t)
            if self.window > 0:
                self.segments.append((self.last_t, now, self.last_usage))
        self.last_t, self.last_usage = now, np.array(usage, dtype=np.float64)
        if self.window > 0:
            while self.segments and self.segments[0][1] <= now - self.window:
                t0, t1, u = self.segments.popleft()
                base = None if self.old is None else self._decay(self.old, t0 - self.old_t)
                self.old, self.old_t = self._extend(base, u, t1 - t0), t1

    def value(self, now: float) -> np.ndarray | None:
        """Decayed usage integral per queue and resource, or None with no history yet."""
        if self.acc is None or self.last_t is None or (self.window > 0 and not self.segments):
            return None
        total = self._decay(self.acc, now - self.last_t)
        if self.window <= 0:
            return total
        lo = now - self.window
        before, at = self.old, self.old_t  # decayed integral of what precedes `lo`, as of `at`
        for t0, t1, u in self.segments:  # stored segments that start before the window
            if t0 >= lo:
                break
            base = None if before is None else self._decay(before, t0 - at)
            before, at = self._extend(base, u, min(t1, lo) - t0), min(t1, lo)
        if before is None:
            return total
        before = self._decay(before, lo - at)
        inside = total - self._decay(before, self.window)
        # the subtraction leaves rounding noise where everything has left the window; only
        # proportions matter downstream, so noise must read as exactly 0, not as "some use"
        return np.where(inside > 1e-9 * total, inside, 0.0)
