"""Inline SVG pictures for the HTML reporter: a file's byte range, a histogram, a strip of table rows.

Every function takes text already made safe for a terminal (ggaudit.escaping: no control, invisible or bidi
character) and XML-escapes it here, so the SVG parses as XML on its own. Colours come from the page's CSS
classes; no picture refers to anything outside the document.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape as xml

from ...page import Bar, Span

#: Width of a map and of a row strip, in SVG units (the picture is scaled to the page's width).
MAP_WIDTH = 1000
#: Left margin of a row strip, where its lanes are named.
STRIP_LABEL = 170
#: Most bins a row strip draws: a table with more rows puts several in one bin.
STRIP_BINS = 1000
_BAR_Y, _BAR_H = 22, 30
_HIST_W, _HIST_H, _PLOT_H = 300, 92, 62
#: Least distance between two labels under a histogram ("NaN/Inf" is the widest).
_LABEL_GAP = 34


def _n(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _title(text: str) -> str:
    return f"<title>{xml(text)}</title>"


def map_x(offset: int, extent: int) -> float:
    """Where byte ``offset`` of a file of ``extent`` bytes is drawn on a map."""
    return offset * MAP_WIDTH / max(extent, 1)


def file_map(extent: int, segments: Sequence[Span], marks: Sequence[Span], label: str) -> str:
    """A file's bytes [0, extent) as a bar: ``segments`` (tensors, the header) in it, and ``marks``
    (findings) placed by offset: a line through the bar and a triangle above it, so a one-byte finding
    in a gigabyte file still shows."""
    out = [f'<svg class="map" viewBox="0 0 {MAP_WIDTH} 70" width="100%" role="img" aria-label="{xml(label)}">',
           f'<rect class="bg" x="0" y="{_BAR_Y}" width="{MAP_WIDTH}" height="{_BAR_H}"/>']
    for s in segments:
        x, w = map_x(s.start, extent), max(map_x(s.length, extent), 0.5)
        out.append(f'<rect class="{s.css}" x="{_n(x)}" y="{_BAR_Y}" width="{_n(w)}" height="{_BAR_H}">'
                   f'{_title(s.title)}</rect>')
    for m in marks:
        x, w = map_x(m.start, extent), map_x(m.length, extent)
        out.append(f'<g class="mark {m.css}" data-offset="{m.start}">{_title(m.title)}'
                   f'<rect x="{_n(x)}" y="{_BAR_Y - 2}" width="{_n(max(w, 1.5))}" height="{_BAR_H + 4}"/>'
                   f'<path d="M{_n(x - 5)} 4 L{_n(x + 5)} 4 L{_n(x)} {_BAR_Y - 3} Z"/></g>')
    out.append(f'<text x="0" y="66">0</text><text x="{MAP_WIDTH}" y="66" text-anchor="end">{extent} bytes</text>')
    out.append("</svg>")
    return "".join(out)


def histogram(bars: Sequence[Bar], label: str) -> str:
    """Bars side by side with heights on a log scale (log10(count + 1)), so a bucket of one value stays
    visible beside a bucket of millions; a bar with any count is at least 3 units high."""
    top = max((b.count for b in bars), default=0)
    slot = _HIST_W / max(len(bars), 1)
    out = [f'<svg class="hist" viewBox="0 0 {_HIST_W} {_HIST_H}" width="{_HIST_W}" height="{_HIST_H}" role="img" '
           f'aria-label="{xml(label)}">', f'<line class="axis" x1="0" y1="{_PLOT_H}" x2="{_HIST_W}" y2="{_PLOT_H}"/>']
    for i, b in enumerate(bars):
        x = i * slot
        if b.count:
            h = max(3.0, (_PLOT_H - 4) * math.log10(b.count + 1) / math.log10(top + 1))
            out.append(f'<rect class="{b.css}" x="{_n(x + slot * 0.1)}" y="{_n(_PLOT_H - h)}" '
                       f'width="{_n(max(slot * 0.8, 0.8))}" height="{_n(h)}" data-bucket="{xml(b.key)}" '
                       f'data-count="{b.count}">{_title(b.title)}</rect>')
    for x, text in _spaced([((i + 0.5) * slot, b.label) for i, b in enumerate(bars) if b.label]):
        anchor = "end" if x + 3 * len(text) > _HIST_W else "middle"     # the last label stays on the picture
        out.append(f'<text x="{_n(min(x, _HIST_W))}" y="{_PLOT_H + 12}" text-anchor="{anchor}">{xml(text)}</text>')
    out.append(f'<text x="0" y="{_HIST_H - 2}">log count; max {top}</text></svg>')
    return "".join(out)


def _spaced(labels: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """The labels that fit without overlapping: the last one always (the largest power, or the non-finite
    bar), then from the left each that clears the ones kept."""
    if not labels:
        return []
    last = labels[-1]
    kept: list[tuple[float, str]] = []
    for x, text in labels[:-1]:
        if (not kept or x - kept[-1][0] >= _LABEL_GAP) and last[0] - x >= _LABEL_GAP:
            kept.append((x, text))
    return [*kept, last]


@dataclass(frozen=True)
class Lane:
    """One lane of a row strip: its name, CSS class and the runs of bins it marks."""

    name: str
    css: str
    runs: Sequence[Span]


def strip_bins(n_rows: int) -> int:
    return max(1, min(n_rows, STRIP_BINS))


def strip_x(row: int, n_rows: int) -> float:
    """Where row ``row`` of ``n_rows`` starts on a strip (in its bin)."""
    bins = strip_bins(n_rows)
    return STRIP_LABEL + (row * bins // max(n_rows, 1)) * MAP_WIDTH / bins


def runs(bins: Iterable[int]) -> list[tuple[int, int]]:
    """Ascending bin numbers as (first, count) runs of consecutive bins."""
    out: list[tuple[int, int]] = []
    for b in bins:
        if out and out[-1][0] + out[-1][1] == b:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((b, 1))
    return out


def row_strip(n_rows: int, lanes: Sequence[Lane], marks: Sequence[Span], label: str) -> str:
    """A table's rows left to right, one lane per property (bins of rows: ``Span.start`` and ``length`` count
    bins), and ``marks`` (rows: ``start`` is a row) drawn across every lane."""
    bins = strip_bins(n_rows)
    unit = MAP_WIDTH / bins
    lane_h = 16
    height = lane_h * len(lanes) + 24
    out = [f'<svg class="strip" viewBox="0 0 {STRIP_LABEL + MAP_WIDTH} {height}" width="100%" role="img" '
           f'aria-label="{xml(label)}">']
    for i, lane in enumerate(lanes):
        y = 4 + i * lane_h
        out.append(f'<text x="0" y="{y + 11}">{xml(lane.name)}</text>'
                   f'<rect class="bg" x="{STRIP_LABEL}" y="{y}" width="{MAP_WIDTH}" height="{lane_h - 3}"/>')
        for r in lane.runs:
            out.append(f'<rect class="{lane.css}" x="{_n(STRIP_LABEL + r.start * unit)}" y="{y}" '
                       f'width="{_n(max(r.length * unit, 0.8))}" height="{lane_h - 3}">{_title(r.title)}</rect>')
    bottom = 4 + len(lanes) * lane_h
    for m in marks:
        x = strip_x(m.start, n_rows)
        out.append(f'<g class="mark {m.css}" data-row="{m.start}">{_title(m.title)}'
                   f'<rect x="{_n(x)}" y="2" width="{_n(max(unit, 2.0))}" height="{bottom - 2}"/></g>')
    out.append(f'<text x="{STRIP_LABEL}" y="{height - 4}">row 0</text>'
               f'<text x="{STRIP_LABEL + MAP_WIDTH}" y="{height - 4}" text-anchor="end">row {n_rows - 1}</text></svg>')
    return "".join(out)
