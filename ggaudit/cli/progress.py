"""Progress of the long commands: one line on stderr, only when stderr is a terminal and not with -q.

A run (``scan`` of several models, ``verify`` of several targets, or one of anything) has one line:
the item being worked on (``2/3`` and its name when there are several), the amount done of the amount
to do (bytes, or rows for ``rows``), the rate, and the time left. The time left is shown only once the
rate has been measured over enough time and work (:class:`Meter`): a first frame drawn while a pool of
readers starts would otherwise say "ETA 4482s". The line is redrawn at most ten times a second, cut to
the terminal's width, drawn with plain spaces and carriage returns (no escape sequences, so any
console shows it), and wiped when the run ends, fails or is interrupted, before the report is printed.
Nothing here writes to stdout: reports (text, JSON, SARIF, ...) never hold a frame.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TextIO

from ..escaping import escape_path
from .common import stderr_is_tty
from .reporters import Rendering

if TYPE_CHECKING:
    from ..io.fan_out import Progress

#: The time left is shown once the rate has been measured over this long ...
MIN_SECONDS = 0.5
#: ... and over this many bytes (a few chunks of every reader: the start-up is behind).
MIN_BYTES = 4 << 20
#: Time constant of the smoothed rate: a burst (files whose digests were cached) fades over seconds.
SMOOTHING_SECONDS = 3.0
#: Shortest time between two frames.
REDRAW_SECONDS = 0.1

BYTES, ROWS = "bytes", "rows"

def shows_progress(rendering: Rendering) -> bool:
    """Progress is for a person watching a terminal: never in a pipe or a log, never with -q."""
    return not rendering.quiet and stderr_is_tty()


class Meter:
    """The rate of a growing count and the time left, from samples (time, count done).

    No rate until the count has grown by ``min_amount`` over at least ``min_seconds`` since the first
    sample: before that, what was measured is start-up, not the rate. Then a rate smoothed over
    ``smoothing`` seconds (an exponential moving average of the rate between samples)."""

    def __init__(self, *, min_seconds: float = MIN_SECONDS, min_amount: int = MIN_BYTES,
                 smoothing: float = SMOOTHING_SECONDS) -> None:
        self.min_seconds, self.min_amount, self.smoothing = min_seconds, min_amount, smoothing
        self._first: tuple[float, int] | None = None
        self._last = (0.0, 0)
        self.rate: float | None = None

    @property
    def started(self) -> bool:
        return self._first is not None

    def sample(self, now: float, done: int) -> None:
        if self._first is None:
            self._first = self._last = (now, done)
            return
        (t0, d0), (t1, d1) = self._first, self._last
        if self.rate is None:
            if now - t0 >= self.min_seconds and done - d0 >= max(self.min_amount, 1):
                self.rate = (done - d0) / (now - t0)
        elif now > t1:
            weight = 1.0 - math.exp(-(now - t1) / self.smoothing)
            self.rate += weight * ((done - d1) / (now - t1) - self.rate)
        self._last = (now, done)

    def eta(self, done: int, total: int | None) -> float | None:
        """Seconds left, or None while the rate is unmeasured (or nil) or the total unknown."""
        if total is None or self.rate is None or self.rate <= 0:
            return None
        return max(total - done, 0) / self.rate


class RunProgress:
    """The progress line of a run of ``names`` (items started in that order, as ``batch.run_models``
    starts them, ``jobs`` at a time or not). Each item says its own (done, total) through the callback
    :meth:`item` gives; the line adds them up. An item not started yet counts its ``estimates`` entry
    (a file's size, say) as its total, or, where that is None, leaves the run's total unknown (no
    percentage, no time left) until it starts. Thread-safe; does nothing when not ``enabled``."""

    def __init__(self, verb: str, names: Sequence[str], *, enabled: bool,
                 estimates: Sequence[int | None] | None = None, unit: str = BYTES,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.verb, self.names, self.enabled, self.unit = verb, list(names), enabled, unit
        self._unit = unit   # the run's, which a stage may change (rows' whole-file passes count bytes)
        self._estimates = list(estimates) if estimates is not None else [None] * len(self.names)
        self._done = [0] * len(self.names)
        self._totals: list[int | None] = [None] * len(self.names)
        self._stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._lock = threading.Lock()
        self._started = 0
        self._stage = ""
        self._meter = self._new_meter()
        self._drawn_at = -math.inf  # the first tick draws: the line says at once what is being done
        self._shown = 0             # characters on the line now
        self._closed = False

    def _new_meter(self) -> Meter:
        return Meter(min_amount=MIN_BYTES if self.unit == BYTES else 1)

    @contextlib.contextmanager
    def item(self) -> Iterator[Progress | None]:
        """Start the next item; yields its callback (None when not enabled). When it ends, however it
        ends, its total becomes what it did."""
        if not self.enabled:
            yield None
            return
        with self._lock:
            index = self._started
            self._started += 1
        try:
            yield lambda done, total: self._tick(index, done, total)
        finally:
            with self._lock:
                self._totals[index] = self._done[index]

    def stage(self, name: str, unit: str | None = None) -> None:
        """A new pass over the item, counted from 0 again (``rows``: the next read path), in *unit* (default:
        the run's): named on the line, and the rate measured afresh."""
        with self._lock:
            self.unit = unit or self._unit
            self._stage, self._meter = name, self._new_meter()
            self._done = [0] * len(self._done)

    def close(self) -> None:
        """Wipe the line; later ticks (a job thread still running after Ctrl-C) draw nothing."""
        with self._lock:
            self._closed = True
            if self._shown:
                self._write("\r" + " " * self._shown + "\r")
                self._shown = 0

    def _tick(self, index: int, done: int, total: int) -> None:
        with self._lock:
            if self._closed:
                return
            self._done[index], self._totals[index] = done, total
            now = self._clock()
            if now - self._drawn_at < REDRAW_SECONDS:
                if not self._meter.started:     # the rate is measured from the first tick, drawn or not
                    self._meter.sample(now, sum(self._done))
                return
            self._drawn_at = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        done = sum(self._done)
        self._meter.sample(now, done)
        total = self._total()
        text = self.frame(done, total, _columns(self._stream) - 1)
        self._write("\r" + text + " " * max(self._shown - len(text), 0))
        self._shown = max(len(text), self._shown)

    def _total(self) -> int | None:
        total = 0
        for known, estimate in zip(self._totals, self._estimates, strict=True):
            if known is None and estimate is None:
                return None
            total += known if known is not None else estimate or 0
        return total

    def frame(self, done: int, total: int | None, width: int) -> str:
        """The line's text, at most ``width`` characters: what is least needed goes first."""
        n = len(self.names)
        head = " ".join(filter(None, [self.verb, f"{min(self._started, n)}/{n}" if n > 1 else "", self._stage]))
        name = escape_path(self.names[max(self._started - 1, 0)]) if self.names else ""
        amount = _amount(done, total, self.unit)
        percent = f"{100 * done // total}%" if total else ""
        rate = _rate(self._meter.rate, self.unit) if self._meter.rate is not None else ""
        eta = self._meter.eta(done, total)
        left = f"ETA {_duration(eta)}" if eta is not None else ""
        parts = [head, name, amount, percent, rate, left]
        text = "  ".join(filter(None, parts))
        if len(text) > width and name:     # the name, shortened from its start, then gone
            room = width - (len(text) - len(name))
            parts[1] = "..." + name[len(name) - room + 3:] if room >= 12 else ""
            text = "  ".join(filter(None, parts))
        for drop in (4, 3):                 # then the rate, then the percentage
            if len(text) > width:
                parts[drop] = ""
                text = "  ".join(filter(None, parts))
        return text[:max(width, 0)]

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):
            self._closed = True     # the terminal is gone: the run goes on without its progress


@contextlib.contextmanager
def run_progress(verb: str, names: Sequence[str], rendering: Rendering, *,
                 estimates: Sequence[int | None] | None = None, unit: str = BYTES) -> Iterator[RunProgress]:
    """A :class:`RunProgress` for the run, shown as :func:`shows_progress` says; its line wiped when
    the block ends, by an error or Ctrl-C too, before anything else is printed."""
    bar = RunProgress(verb, names, enabled=shows_progress(rendering), estimates=estimates, unit=unit)
    try:
        yield bar
    finally:
        bar.close()


def file_size(path: str) -> int | None:
    """The size of the regular file at ``path`` (an item's bytes, guessed before it starts), or None."""
    try:
        return os.path.getsize(path) if os.path.isfile(path) else None
    except (OSError, ValueError):
        return None


def _columns(stream: TextIO) -> int:
    # The terminal the line is drawn on is stderr's: shutil.get_terminal_size asks stdout's, which is a
    # pipe whenever the report is redirected. $COLUMNS first, as shutil does; its fallback last.
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            columns = 0
    return columns if columns > 0 else shutil.get_terminal_size().columns


def _amount(done: int, total: int | None, unit: str) -> str:
    if unit == BYTES:
        return size_text(done) if total is None else f"{size_text(done)} / {size_text(total)}"
    return f"{done:,} {unit}" if total is None else f"{done:,} / {total:,} {unit}"


def _rate(rate: float, unit: str) -> str:
    return f"{size_text(rate)}/s" if unit == BYTES else f"{rate:,.0f} {unit}/s"


def size_text(n: float) -> str:
    """Bytes for people: 512 B, 1.5 MiB, 3.2 GiB."""
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if round(n, 1) < 1024 or unit == "TiB":     # 1023.96 MiB is 1.0 GiB, not "1024.0 MiB"
            break
    return f"{n:.1f} {unit}"


def _duration(seconds: float) -> str:
    """12s, 4m05s, 1h02m."""
    s = math.ceil(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
