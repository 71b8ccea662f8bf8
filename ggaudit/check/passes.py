"""Check's passes side by side: :func:`beside` runs one pass (the direct one, which waits on the device) in a
thread of its own while others run; :class:`PassBytes` counts every pass's bytes as one progress. A pass itself
is :func:`ggaudit.evidence.read_pass.read_pass`. ``scripts/bench_check.py`` measures what this costs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from ..io.fan_out import Progress

_T = TypeVar("_T")
_U = TypeVar("_U")


def beside(background: Callable[[threading.Event], _T], foreground: Callable[[], _U]) -> tuple[_T, _U]:
    """Run ``background(stop)`` in a thread of its own while ``foreground()`` runs in this one; both results.

    An error of ``foreground`` (Ctrl-C included) sets ``stop``, waits for the background to end at its next
    chunk and propagates; an error of the background is raised once ``foreground`` has succeeded, so the
    first error in the order the work was planned in is the one raised.
    """
    stop = threading.Event()
    results: list[_T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(background(stop))
        except BaseException as err:    # handed to the calling thread, raised there
            errors.append(err)

    thread = threading.Thread(target=run, daemon=True, name="ggaudit-pass-beside")
    thread.start()
    try:
        here = foreground()
        while thread.is_alive():    # a timed join: Ctrl-C reaches this thread meanwhile on Windows too
            thread.join(0.2)
    except BaseException:
        stop.set()
        thread.join()
        raise
    if errors:
        raise errors[0]
    return results[0], here


class PassBytes:
    """A chunk consumer that counts the bytes every pass of a check has read, as one ``progress(done,
    total)``: ``total`` is every file's size once per read path, the passes beside each other (direct and
    the page cache's) adding to one count. A pass skipped (direct I/O refused) counts its bytes done at
    once, so the count still ends at ``total``. Without ``progress`` it is not fed at all (see :meth:`of`)."""

    def __init__(self, progress: Progress, total: int) -> None:
        self._progress, self.total, self.done = progress, total, 0
        self._lock = threading.Lock()
        progress(0, total)

    @staticmethod
    def of(progress: Progress | None, total: int) -> PassBytes | None:
        return None if progress is None else PassBytes(progress, total)

    def update(self, offset: int, data: memoryview) -> None:
        self.skip(len(data))

    def skip(self, nbytes: int) -> None:
        with self._lock:
            self.done = min(self.done + nbytes, self.total)
            self._progress(self.done, self.total)
