"""The study's PNG: three panels, every policy in its own colour, published numbers as markers
where they belong, gaps where no run got, a labelled axis everywhere."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageColor

from gpugov.sim.curves import columns
from gpugov.sim.png_chart import SIZE, nice_ticks
from gpugov.sim.report import POLICY_COLORS, plot_figure
from gpugov.sim.study import RunSummary, StudyResult


def _result() -> StudyResult:
    cols = np.array(columns(1.3), dtype=float)
    fgd = np.minimum(cols, 95.0)
    packing = np.minimum(cols, 50.0)
    packing_short = packing.copy()
    packing_short[111:] = np.nan  # this seed's arrivals stopped at 110 %

    def run(policy: str, label: str, seed: int, alloc: np.ndarray, frag: float) -> RunSummary:
        frags = np.full(len(cols), frag)
        return RunSummary(policy, label, seed, 6212,
                          {"alloc": alloc, "frag": frags, "frag_ratio": frags}, 100, 90)
    return StudyResult("w", 1.3, [run("fgd", "06-FGD", 1, fgd, 4.0),
                                  run("gpupacking", "04-GpuPacking", 1, packing, 8.0),
                                  run("gpupacking", "04-GpuPacking", 2, packing_short, 8.0)])


def _colours_near(image: Image.Image, chart, panel: int, x: float, y: float,  # type: ignore[no-untyped-def]
                  r: int = 6) -> set[tuple[int, int, int]]:
    p = chart.panels[panel]
    px, py = p.px(x, y)
    cx, cy = int(round(p.box[0] + float(px))), int(round(p.box[1] + float(py)))
    box = image.crop((cx - r, cy - r, cx + r + 1, cy + r + 1))
    return {c for _, c in box.getcolors(maxcolors=10_000)}


def test_png_has_the_markers_the_curves_and_the_gaps() -> None:
    chart = plot_figure(_result(), {"06-FGD": (95.0, 97.0)})
    image = Image.open(io.BytesIO(chart.png()))
    assert image.size == SIZE
    image = image.convert("RGB")
    fgd = ImageColor.getrgb(POLICY_COLORS["06-FGD"])
    packing = ImageColor.getrgb(POLICY_COLORS["04-GpuPacking"])
    for panel in (0, 1):  # published @100 / @130 as markers on both allocation panels
        assert fgd in _colours_near(image, chart, panel, 130, 97)
        assert packing not in _colours_near(image, chart, panel, 130, 97)
    # the mean line of each policy is drawn (allocation panel, far from the legend)
    assert packing in _colours_near(image, chart, 0, 70, 50, r=2)
    assert fgd in _colours_near(image, chart, 0, 120, 95, r=2)
    # fragmentation panel draws every policy too
    assert fgd in _colours_near(image, chart, 2, 60, 4.0, r=2)
    assert packing in _colours_near(image, chart, 2, 60, 8.0, r=2)


def test_columns_no_run_reached_stay_empty() -> None:
    result = _result()
    for r in result.runs:
        r.curves["alloc"][121:] = np.nan
    chart = plot_figure(result, {})
    image = Image.open(io.BytesIO(chart.png())).convert("RGB")
    packing = ImageColor.getrgb(POLICY_COLORS["04-GpuPacking"])
    assert packing in _colours_near(image, chart, 0, 100, 50, r=2)
    assert packing not in _colours_near(image, chart, 0, 127, 50, r=2)


def test_legend_and_labels() -> None:
    chart = plot_figure(_result(), {"06-FGD": (95.0, 97.0)})
    labels = [label for label, _, _ in chart.panels[0].legend]
    assert "06-FGD published" in labels and "04-GpuPacking published" not in labels
    assert {"06-FGD", "04-GpuPacking", "ideal"} <= set(labels)
    colours = {label: colour for label, colour, _ in chart.panels[0].legend}
    assert colours["06-FGD"] != colours["04-GpuPacking"]
    assert all(p.title and p.xlabel and p.ylabel for p in chart.panels)
    assert "published" in chart.panels[1].title
    assert "published" not in plot_figure(_result(), {}).panels[1].title


def test_ticks_are_round_evenly_spaced_and_inside() -> None:
    assert nice_ticks(0, 132) == [0, 25, 50, 75, 100, 125]
    assert nice_ticks(80, 100) == [80, 85, 90, 95, 100]
    for lo, hi in ((0, 0.3), (0, 15.7), (80, 132), (3, 1e6)):
        ticks = nice_ticks(lo, hi)
        assert 2 <= len(ticks) <= 7 and lo <= ticks[0] and ticks[-1] <= hi
        assert len({round(b - a, 9) for a, b in zip(ticks, ticks[1:], strict=False)}) == 1
    assert nice_ticks(5, 5) == [5]


def test_a_flat_fragmentation_panel_is_drawn_not_a_crash() -> None:
    """No fragmentation anywhere (every pod the same, packed perfectly) once gave the panel a
    zero y-range: px() divided by it and drawing the ticks failed on NaN."""
    result = _result()
    for r in result.runs:
        r.curves["frag"][:] = 0.0
    chart = plot_figure(result, {})
    (y0, y1) = chart.panels[2].ylim
    assert y1 > y0 == 0
    image = Image.open(io.BytesIO(chart.png())).convert("RGB")
    assert image.size == SIZE
    fgd = ImageColor.getrgb(POLICY_COLORS["06-FGD"])  # the other panels still drawn
    assert fgd in _colours_near(image, chart, 0, 120, 95, r=2)


def test_empty_or_broken_limits_get_a_unit_range() -> None:
    from gpugov.sim.png_chart import Panel
    for lim, want in (((0, 0), (0.0, 1.0)), ((5, 5), (5.0, 6.0)), ((3, 1), (3.0, 4.0)),
                      ((0, float("nan")), (0.0, 1.0)), ((float("nan"), 2), (0.0, 2.0))):
        p = Panel((0, 0, 100, 100), lim, lim, "t", "x", "y")
        assert (p.xlim, p.ylim) == (want, want)
        px, py = p.px(np.array([want[0], want[1]]), np.array([want[0], want[1]]))
        assert np.isfinite(px).all() and np.isfinite(py).all()
