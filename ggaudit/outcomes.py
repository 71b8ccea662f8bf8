"""Run one audit over several models: each model's result or error is kept, none is lost.

``scan`` and ``verify`` of several models at once (several MODEL arguments, ``--jobs N``) use this:
a failure in one model (a missing file, a truncated header, a file that changes while it is read)
becomes that model's error and the others still report. Results come back in the order the models
were given, whatever order the jobs finish in.

    outcomes = run_models(["a.gguf", "b.gguf"], lambda m: scan(m, workers=0), jobs=2)
    overall_status(outcomes)    # 0 clean, 1 findings, 2 any error
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from .errors import GGAuditError, ReadError, UsageError, check_arg, one_or_many

if TYPE_CHECKING:
    from .diagnostic import Report

log = logging.getLogger(__name__)

R = TypeVar("R")
#: An Outcome of a ScanReport is an Outcome of a Report: outcomes are read, never written.
R_co = TypeVar("R_co", covariant=True)


STATUS_CLEAN = 0
STATUS_FINDINGS = 1
STATUS_ERROR = 2

#: Longest single wait of the calling thread for a job (see run_models).
_POLL_SECONDS = 0.25


@dataclass(frozen=True)
class Outcome(Generic[R_co]):
    """What auditing one model gave: a result, or the error that stopped it (never both)."""

    model: str
    result: R_co | None = None
    error: GGAuditError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def as_error(model: str, err: BaseException) -> GGAuditError:
    """An expected failure of one model (bad input, an OSError, MemoryError) as the GGAuditError its
    outcome holds."""
    if isinstance(err, GGAuditError):
        return err
    if isinstance(err, MemoryError):
        return ReadError(model, "out of memory")
    assert isinstance(err, OSError)
    path = err.filename if err.filename is not None else model
    return ReadError.for_os_error(path, err.strerror or str(err), err)


def _one(model: str, audit: Callable[[str], R]) -> Outcome[R]:
    try:
        return Outcome(model, result=audit(model))
    except (GGAuditError, OSError, MemoryError) as err:
        # Expected failures of one model become its outcome; anything else is a bug and propagates.
        log.debug("%s failed: %s", model, err)
        return Outcome(model, error=as_error(model, err))


def run_models(models: str | Sequence[str], audit: Callable[[str], R], *, jobs: int = 1) -> list[Outcome[R]]:
    """Apply ``audit`` to every model, ``jobs`` at a time (threads), and return outcomes in order.

    ``audit`` should do its own reading in this thread (pass ``workers=0`` to ``scan`` when
    ``jobs > 1``: the jobs already use the cores, and forking reader processes from several threads
    at once is unsafe).

    Ctrl-C (KeyboardInterrupt) or any other exception in the calling thread while jobs run is raised
    at once: the calling thread is the one that waits, never beyond ``_POLL_SECONDS`` at a time, and
    the job threads start no further model. A model already being audited is not waited for: its
    thread is a daemon, which ends with the process.
    """
    models = one_or_many("models", models)     # one model's name is that model, not its letters
    check_arg("jobs", jobs, int, "an integer")
    if jobs < 1:
        raise UsageError(None, f"must be at least 1, not {jobs}", field="jobs")
    if jobs == 1 or len(models) <= 1:
        return [_one(m, audit) for m in models]
    futures: list[Future[Outcome[R]]] = [Future() for _ in models]
    todo = deque(zip(models, futures, strict=True))
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            try:
                model, future = todo.popleft()     # deque.popleft is atomic: no lock needed
            except IndexError:
                return
            try:
                future.set_result(_one(model, audit))
            except BaseException as err:           # a bug in audit: raised in the calling thread
                future.set_exception(err)

    # Not a ThreadPoolExecutor: its threads are joined at interpreter exit, so a Ctrl-C would wait
    # for every running audit to end (the whole scan of a large model).
    for i in range(min(jobs, len(models))):
        threading.Thread(target=work, name=f"ggaudit-job-{i}", daemon=True).start()
    try:
        return [_result(f) for f in futures]
    finally:
        stop.set()


def _result(future: Future[Outcome[R]]) -> Outcome[R]:
    # A wait with a timeout, again and again: a signal handler (Ctrl-C) runs between two waits even
    # where the OS cannot interrupt a wait on a lock (Windows).
    while True:
        try:
            return future.result(timeout=_POLL_SECONDS)
        except FuturesTimeout:
            continue


def overall_status(outcomes: Sequence[Outcome[Report]]) -> int:
    """2 if any model failed, else 1 if any model's report is not ok, else 0."""
    if any(o.error is not None for o in outcomes):
        return STATUS_ERROR
    if any(not o.result.ok for o in outcomes if o.result is not None):
        return STATUS_FINDINGS
    return STATUS_CLEAN
