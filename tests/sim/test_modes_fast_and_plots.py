"""Study plots tell the policies apart and draw the published numbers when given."""

from __future__ import annotations

import itertools

import numpy as np
from matplotlib.colors import to_rgb

from gpugov.sim.report import POLICY_COLORS, plot_figure
from gpugov.sim.study import run_study
from gpugov.sim.workload import default_nodes, default_pods


def test_policy_colours_are_far_apart() -> None:
    """FGD and GpuPacking used to be drawn in near-identical colours (issue 13 item 17)."""
    rgb = {k: np.array(to_rgb(c)) for k, c in POLICY_COLORS.items()}
    for a, b in itertools.combinations(rgb, 2):
        assert np.abs(rgb[a] - rgb[b]).sum() > 0.45, (a, b)


def test_plot_draws_published_targets_and_labels_every_axis() -> None:
    import matplotlib.pyplot as plt

    nodes = default_nodes()[:40]
    result = run_study(nodes, default_pods(nodes)[:400], "w", ["fgd", "gpupacking"], [1], 1.3)
    fig = plot_figure(result, {"06-FGD": (95.0, 97.0)})
    try:
        labels = [line.get_label() for line in fig.axes[0].lines]
        assert "06-FGD published" in labels and "04-GpuPacking published" not in labels
        marker = next(ln for ln in fig.axes[0].lines if ln.get_label() == "06-FGD published")
        assert list(marker.get_xdata()) == [100, 130] and list(marker.get_ydata()) == [95, 97]
        assert all(ax.get_ylabel() for ax in fig.axes)
        colors = {ln.get_label(): ln.get_color() for ln in fig.axes[0].lines}
        assert colors["06-FGD"] != colors["04-GpuPacking"]
    finally:
        plt.close(fig)
