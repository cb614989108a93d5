"""Fair share with usage history (`fairShare: {historyWindow, halfLife, k}`)."""

from __future__ import annotations

import numpy as np
import pytest
from cp_helpers import gpus_used, job, nodes, plane

from gpugov.control.history import UsageHistory


def _shares(history: dict | None) -> tuple[float, float, object]:
    """a ran 8 GPUs alone for 1000 s; then a and b both want the whole cluster."""
    extra = {"fairShare": history} if history else {}
    cp = plane([{"name": "a"}, {"name": "b"}], nodes(2), **extra)  # no quota: all surplus
    first = [job(cp, f"a{i}", "a") for i in range(8)]
    cp.cycle(0)
    cp.cycle(100)
    for j in first:
        cp.finish(j)
    for i in range(8):
        job(cp, f"a-next{i}", "a", submit=1000)
        job(cp, f"b{i}", "b", submit=1000)
    cp.cycle(1000)
    fair = cp.fair[:, 0] / 1000
    return float(fair[cp.tree.index("a")]), float(fair[cp.tree.index("b")]), cp


def test_without_history_equal_weights_share_equally():
    a, b, cp = _shares(None)
    assert a == pytest.approx(4) and b == pytest.approx(4)
    assert gpus_used(cp, "a") == 4 and gpus_used(cp, "b") == 4


def test_history_shifts_surplus_away_from_the_recent_heavy_user():
    a, b, cp = _shares({"halfLife": "1h", "historyWindow": "1d", "k": 1})
    # normalised weight 1/2 each, normalised usage a=1, b=0: a's weight max(0, 1/2 + (1/2-1))
    # = 0, b's 1: all surplus goes to b
    assert b == pytest.approx(8) and a == pytest.approx(0)
    # a's ratio 0/0 counts 0, so a's first job is still served once (docs: queue order)
    assert gpus_used(cp, "b") == 7 and gpus_used(cp, "a") == 1


def test_history_k_scales_the_shift():
    a, b, _ = _shares({"halfLife": "1h", "historyWindow": "1d", "k": 0.5})
    assert (a, b) == (pytest.approx(2), pytest.approx(6))  # weights 1/4 and 3/4


def test_history_outside_the_window_is_forgotten():
    cp = plane([{"name": "a"}, {"name": "b"}], nodes(2),
               fairShare={"historyWindow": "10m", "halfLife": "1d"})
    first = [job(cp, f"a{i}", "a") for i in range(8)]
    cp.cycle(0)
    cp.cycle(100)
    for j in first:
        cp.finish(j)
    cp.cycle(200)  # a's usage ended at t=200
    for i in range(8):
        job(cp, f"a-next{i}", "a", submit=5000)
        job(cp, f"b{i}", "b", submit=5000)
    cp.cycle(5000)  # more than 10 minutes later: a's burst is outside the window
    fair = cp.fair[:, 0] / 1000
    assert fair[cp.tree.index("a")] == pytest.approx(4)


@pytest.mark.parametrize("window", [0.0, 86_400.0])
def test_decayed_usage_halves_every_half_life(window):
    h = UsageHistory(window, half_life=100.0)
    h.observe(0, np.array([[8.0]]))
    h.observe(50, np.array([[0.0]]))  # 8 GPUs for 50 s, then idle
    v = h.value(50)
    assert v is not None and v[0, 0] > 0
    later = h.value(150)
    assert later is not None and later[0, 0] == pytest.approx(v[0, 0] / 2)
    h.observe(250, np.array([[0.0]]))
    after = h.value(250)
    assert after is not None and after[0, 0] == pytest.approx(v[0, 0] / 4)


def _brute(segments: list[tuple[float, float, float]], now: float, window: float,
           half_life: float) -> float:
    """The definition: sum over segments inside the window of usage x decayed duration."""
    lam = np.log(2) / half_life if half_life > 0 else 0.0
    lo = now - window if window > 0 else -np.inf
    total = 0.0
    for t0, t1, u in segments:
        a, b = max(t0, lo), t1
        if b <= a:
            continue
        w = (np.exp(-lam * (now - b)) - np.exp(-lam * (now - a))) / lam if lam else b - a
        total += u * w
    return total


@pytest.mark.parametrize("window,half_life", [(0.0, 300.0), (1000.0, 300.0), (1000.0, 0.0)])
def test_incremental_history_matches_the_definition(window, half_life):
    rng = np.random.default_rng(3)
    h = UsageHistory(window, half_life)
    times = np.cumsum(rng.integers(1, 200, 60)).astype(float)
    usage = rng.integers(0, 8, 60).astype(float)
    segments = []
    for i, t in enumerate(times):
        h.observe(t, np.array([[usage[i]]]))
        if i:
            segments.append((times[i - 1], t, usage[i - 1]))
        v = h.value(t + 10)
        expected = _brute(segments, t + 10, window, half_life)
        got = 0.0 if v is None else float(v[0, 0])
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-6)
