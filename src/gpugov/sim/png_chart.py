"""The study's curves figure drawn with Pillow: allocation, a zoom, fragmentation.

Why not matplotlib: importing its Figure and Agg canvas alone took ~0.3 s of a one-core budget
of 1.5 s for the whole `gpugov experiment fgd` command (bench/experiment_wall.py); these
three panels of lines, min–max bands and markers need only Pillow (already installed with
matplotlib), which imports in ~0.02 s. Text uses matplotlib's bundled DejaVu Sans when it is
there (found without importing matplotlib), else Pillow's default font.
"""

from __future__ import annotations

import importlib.util
import io
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageColor, ImageDraw, ImageFont

#: 17 x 4.8 inches at 110 dpi, as the matplotlib figure was
SIZE = (1870, 528)
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 78, 18, 34, 56
BAND_ALPHA = 51  # 0.2 of 255
GRID = (225, 225, 225)


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    spec = importlib.util.find_spec("matplotlib")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
        if path.is_file():
            return ImageFont.truetype(str(path), size)
    return ImageFont.load_default(size)


def nice_ticks(lo: float, hi: float, most: int = 7) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 x 10^k apart) within lo..hi, at most `most`."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / max(most - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


@dataclass
class Panel:
    """One plot area: pixel box on the image, data limits, and its texts."""

    box: tuple[int, int, int, int]  # left, top, right, bottom (pixels)
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    title: str
    xlabel: str
    ylabel: str
    #: (label, colour, kind) drawn in the legend, kind: "line", "marker" or "dotted"
    legend: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # a flat series (e.g. no fragmentation at all: every pod the same) gives a zero
        # range, which px() would divide by; give it a unit range above its value instead
        self.xlim = _span(self.xlim)
        self.ylim = _span(self.ylim)

    def px(self, x: np.ndarray | float, y: np.ndarray | float
           ) -> tuple[np.ndarray, np.ndarray]:
        """Data coordinates to pixel coordinates inside the panel's own image."""
        (x0, x1), (y0, y1) = self.xlim, self.ylim
        w, h = self.box[2] - self.box[0], self.box[3] - self.box[1]
        return ((np.asarray(x, dtype=float) - x0) * w / (x1 - x0),
                (y1 - np.asarray(y, dtype=float)) * h / (y1 - y0))


def _span(lim: tuple[float, float]) -> tuple[float, float]:
    """`lim`, or (lo, lo + 1) when it is empty or not finite (0 for a non-finite lo)."""
    lo, hi = float(lim[0]), float(lim[1])
    if not math.isfinite(lo):
        lo = 0.0
    if not (math.isfinite(hi) and hi > lo):
        hi = lo + 1.0
    return lo, hi


def _segments(x: np.ndarray, *ys: np.ndarray) -> list[np.ndarray]:
    """Index runs where every y is finite (NaN columns leave gaps, as in matplotlib)."""
    ok = np.all([np.isfinite(y) for y in ys], axis=0)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], ok.astype(np.int8), [0]])))
    return [np.arange(a, b) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def _rgba(colour: str, alpha: int = 255) -> tuple[int, int, int, int]:
    return (*ImageColor.getrgb(colour)[:3], alpha)


class Chart:
    """Panels side by side on one white image; call the draw methods, then `png`."""

    def __init__(self, panels: Sequence[Panel]) -> None:
        self.panels = list(panels)
        self.image = Image.new("RGB", SIZE, "white")
        self.areas = [Image.new("RGB", (p.box[2] - p.box[0], p.box[3] - p.box[1]), "white")
                      for p in self.panels]
        self.font, self.small, self.title_font = _font(13), _font(11), _font(15)
        for p, area in zip(self.panels, self.areas, strict=True):
            draw = ImageDraw.Draw(area)
            xs, ys = p.px(nice_ticks(*p.xlim), nice_ticks(*p.ylim))
            for x in xs:
                draw.line([(x, 0), (x, area.height)], fill=GRID)
            for y in ys:
                draw.line([(0, y), (area.width, y)], fill=GRID)

    def band(self, i: int, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, colour: str) -> None:
        draw = ImageDraw.Draw(self.areas[i], "RGBA")  # blends overlapping bands
        for run in _segments(x, lo, hi):
            if len(run) < 2:
                continue
            px, plo = self.panels[i].px(x[run], lo[run])
            _, phi = self.panels[i].px(x[run], hi[run])
            outline = list(zip(px, phi, strict=True)) + list(zip(px[::-1], plo[::-1],
                                                                 strict=True))
            draw.polygon(outline, fill=_rgba(colour, BAND_ALPHA))

    def line(self, i: int, x: np.ndarray, y: np.ndarray, colour: str, dotted: bool = False
             ) -> None:
        draw = ImageDraw.Draw(self.areas[i])
        for run in _segments(x, y):
            px, py = self.panels[i].px(x[run], y[run])
            points = list(zip(px.tolist(), py.tolist(), strict=True))
            if not dotted:
                draw.line(points, fill=colour, width=2, joint="curve")
                continue
            for (ax, ay), (bx, by) in zip(points, points[1:], strict=False):
                n = max(int(math.hypot(bx - ax, by - ay) / 4), 1)
                for k in range(n):
                    t = k / n
                    draw.point((ax + (bx - ax) * t, ay + (by - ay) * t), fill=colour)

    def markers(self, i: int, x: Sequence[float], y: Sequence[float], colour: str) -> None:
        draw = ImageDraw.Draw(self.areas[i])
        px, py = self.panels[i].px(np.asarray(x), np.asarray(y))
        for cx, cy in zip(px.tolist(), py.tolist(), strict=True):
            _diamond(draw, cx, cy, colour)

    def png(self) -> bytes:
        draw = ImageDraw.Draw(self.image)
        for p, area in zip(self.panels, self.areas, strict=True):
            self.image.paste(area, p.box[:2])
            left, top, right, bottom = p.box
            draw.rectangle(p.box, outline="black")
            xs, ys = nice_ticks(*p.xlim), nice_ticks(*p.ylim)
            for value, x in zip(xs, p.px(xs, 0)[0].tolist(), strict=True):
                draw.line([(left + x, bottom), (left + x, bottom + 4)], fill="black")
                draw.text((left + x, bottom + 6), _num(value), fill="black", font=self.font,
                          anchor="ma")
            for value, y in zip(ys, p.px(0, ys)[1].tolist(), strict=True):
                draw.line([(left - 4, top + y), (left, top + y)], fill="black")
                draw.text((left - 6, top + y), _num(value), fill="black", font=self.font,
                          anchor="rm")
            draw.text(((left + right) / 2, top - 8), p.title, fill="black",
                      font=self.title_font, anchor="md")
            draw.text(((left + right) / 2, bottom + 26), p.xlabel, fill="black",
                      font=self.font, anchor="ma")
            self._ylabel(p)
            self._legend(draw, p)
        buf = io.BytesIO()
        self.image.save(buf, format="png")
        return buf.getvalue()

    def _ylabel(self, p: Panel) -> None:
        box = self.font.getbbox(p.ylabel)
        text = Image.new("L", (int(box[2]) + 4, int(box[3]) + 4), 0)
        ImageDraw.Draw(text).text((2, 2), p.ylabel, fill=255, font=self.font)
        text = text.rotate(90, expand=True)
        y = (p.box[1] + p.box[3] - text.height) // 2
        self.image.paste((0, 0, 0), (p.box[0] - MARGIN_LEFT + 4, y), text)

    def _legend(self, draw: ImageDraw.ImageDraw, p: Panel) -> None:
        if not p.legend:
            return
        row = 16
        width = 40 + max(int(self.small.getlength(label)) for label, _, _ in p.legend)
        x0, y0 = p.box[0] + 10, p.box[1] + 10
        draw.rectangle((x0, y0, x0 + width, y0 + 8 + row * len(p.legend)), fill="white",
                       outline=(200, 200, 200))
        for k, (label, colour, kind) in enumerate(p.legend):
            y = y0 + 4 + row * k + row / 2
            if kind == "marker":
                _diamond(draw, x0 + 17, y, colour)
            elif kind == "dotted":
                for dx in range(6, 30, 4):
                    draw.point((x0 + dx, y), fill=colour)
            else:
                draw.line([(x0 + 6, y), (x0 + 28, y)], fill=colour, width=2)
            draw.text((x0 + 34, y), label, fill="black", font=self.small, anchor="lm")


def _diamond(draw: ImageDraw.ImageDraw, cx: float, cy: float, colour: str, r: float = 5
             ) -> None:
    draw.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], outline=colour,
                 width=2)


def _num(value: float) -> str:
    return f"{value:g}"


def min_mean_max(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column over the seeds: mean, min, max (columns no run reached stay NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return (np.nanmean(curves, axis=0), np.nanmin(curves, axis=0),
                np.nanmax(curves, axis=0))
