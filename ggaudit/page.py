"""What a report shows on the HTML page, as data that names no job: headings, facts, tables, listings and
pictures (a file's map, histograms, a strip of table rows), in the order shown. ``report.page()`` gives them;
the HTML reporter draws them, and decides how much of each fits on a page (at most so many rows, marks,
histograms: the rest counted). Text here is already escaped for a terminal (ggaudit.escaping); the reporter
escapes it for HTML.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["Bar", "Block", "Cell", "FactTable", "Figure", "FileMap", "Folded", "Heading", "Histograms", "Legend",
           "Listing", "Paragraph", "RowLane", "RowStrip", "Span", "Table"]


@dataclass(frozen=True)
class Span:
    """A stretch of bytes (or rows) drawn as a segment: where, its CSS class and its tooltip."""

    start: int
    length: int
    css: str
    title: str


@dataclass(frozen=True)
class Bar:
    """One bucket of a histogram: its label under the axis (or ""), its count, CSS class, tooltip and key."""

    label: str
    count: int
    css: str
    title: str
    key: str


@dataclass(frozen=True, kw_only=True)
class Heading:
    text: str


@dataclass(frozen=True, kw_only=True)
class Paragraph:
    """A sentence; ``strong`` for a verdict said first."""

    text: str
    css: str = ""
    strong: bool = False


@dataclass(frozen=True, kw_only=True)
class FactTable:
    """A table of (what, value) rows without a head; ``mono``: the values are digests, counts, names."""

    rows: tuple[tuple[str, str], ...]
    mono: bool = False


@dataclass(frozen=True, kw_only=True)
class Cell:
    """A table cell: its text (lines joined with ``\\n``), and its CSS class (``mono``, ``num``)."""

    text: str
    css: str = ""

    @classmethod
    def number(cls, n: int | float | None) -> Cell:
        return cls(text="-" if n is None else str(n), css="num")


@dataclass(frozen=True, kw_only=True)
class Table:
    """Rows under a head; ``total``: how many rows there are, ``rows`` the first of them (the page shows fewer
    and counts the rest, as ``what``); ``hits``: the rows marked as findings."""

    head: tuple[str, ...]
    rows: Iterable[tuple[Cell, ...]]
    total: int
    what: str
    hits: frozenset[int] = frozenset()


@dataclass(frozen=True, kw_only=True)
class Folded:
    """A table shown folded under ``summary`` (unfolded when ``open``)."""

    summary: str
    table: Table
    open: bool = False


@dataclass(frozen=True, kw_only=True)
class Listing:
    """Lines listed in order, each as code; those past the page's room counted as more ``what``."""

    lines: tuple[str, ...]
    what: str = "finding"


@dataclass(frozen=True, kw_only=True)
class Legend:
    """What each colour of the picture before it means: (CSS class, name) pairs."""

    items: tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True)
class FileMap:
    """A file's bytes [0, extent) as a bar of ``segments``, with ``marks`` placed by offset (each, then as
    many of ``findings`` as fit); ``unlisted``: findings counted but not listed, so not on the map."""

    extent: int
    segments: tuple[Span, ...]
    label: str
    legend: Legend
    marks: tuple[Span, ...] = ()
    findings: tuple[Span, ...] = ()
    unlisted: int = 0


@dataclass(frozen=True, kw_only=True)
class Figure:
    bars: tuple[Bar, ...]
    label: str
    caption: str


@dataclass(frozen=True, kw_only=True)
class Histograms:
    """Histograms of powers of two, a group per tensor, the most telling first (the page draws the first
    groups and counts the rest)."""

    groups: tuple[tuple[Figure, ...], ...]


@dataclass(frozen=True, kw_only=True)
class RowLane:
    """A lane of a row strip: its name, CSS class and what its rows are (``what``, in each run's tooltip);
    its rows as (first, last) ``ranges``, or as ascending ``pieces`` of row numbers (a table of 600M rows
    has 13M crossing a page: the strip thins them)."""

    name: str
    css: str
    what: str
    ranges: tuple[tuple[int, int], ...] = ()
    pieces: Iterable[ArrayLike] = ()


@dataclass(frozen=True, kw_only=True)
class RowStrip:
    """A table's ``n_rows`` rows left to right, a lane each, and ``marks`` (a row each) across them all."""

    n_rows: int
    lanes: tuple[RowLane, ...]
    marks: tuple[Span, ...]
    label: str
    legend: Legend


Block = Heading | Paragraph | FactTable | Table | Folded | Listing | FileMap | Histograms | RowStrip
