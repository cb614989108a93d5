"""Study plots tell the policies apart (the PNG itself: test_study_chart.py)."""

from __future__ import annotations

import itertools

import numpy as np
from matplotlib.colors import to_rgb

from gpugov.sim.report import POLICY_COLORS


def test_policy_colours_are_far_apart() -> None:
    """FGD and GpuPacking used to be drawn in near-identical colours (issue 13 item 17)."""
    rgb = {k: np.array(to_rgb(c)) for k, c in POLICY_COLORS.items()}
    for a, b in itertools.combinations(rgb, 2):
        assert np.abs(rgb[a] - rgb[b]).sum() > 0.45, (a, b)
