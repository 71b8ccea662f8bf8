"""Scan large models in worker processes that map windows of the file and read the fields in place.

A mapping of a file that shrinks under it raises SIGBUS when touched past the new end, which kills the
process: here that process is a worker, and the parent turns the broken pool into
``ReadError("file changed during scan")``. Each task maps its own window (64 MiB) and unmaps it, so
resident memory does not grow with the file.

Workers never outlive the scan, however it ends. Each worker dies with its parent: on Linux the kernel
kills it (``PR_SET_PDEATHSIG``), and everywhere a thread in it waits on the parent's sentinel and exits
when the parent is gone (even after SIGKILL, which runs nothing in the parent). Workers ignore SIGINT
(Ctrl-C reaches the whole process group; the parent decides). While workers run in the main thread,
Ctrl-C, SIGTERM and SIGHUP kill them at once: Ctrl-C then ends the scan in ``KeyboardInterrupt``, and
SIGTERM or SIGHUP end the process by that same signal, as if no handler had been installed.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import mmap
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections import deque
from contextvars import ContextVar
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from types import FrameType
from typing import Any
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..io import advice, opening, processes
from ..errors import ReadError
from ..io.identity import FileIdentity
from ..format.layout import GGUFFile
from .kernel import Acc, Options, Plan, by_file, scan_units, settle_anomalies

log = logging.getLogger(__name__)

#: Raw bytes a worker maps and scans per task.
TASK_BYTES = 64 << 20
#: Tasks queued per worker, so workers never wait for the parent.
_QUEUE_PER_WORKER = 2
#: Tasks submitted but not yet merged, per worker: bounds memory when one worker stalls.
_MAX_UNMERGED_PER_WORKER = 8
#: Longest wait for a task before the parent looks again whether it was interrupted. Waits that the OS
#: cannot interrupt (a lock on Windows) still end this often; a task takes far less on a healthy disk.
_POLL_SECONDS = 0.25
#: Signals that ask a process to end (SIGHUP is POSIX-only).
_TERMINATION_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@dataclass(frozen=True)
class Piece:
    """A run of whole units of one tensor."""

    plan: Plan
    first_unit: int
    n_units: int

    @property
    def start(self) -> int:
        return self.plan.offset + self.first_unit * self.plan.layout.block_bytes

    @property
    def end(self) -> int:
        return self.start + self.n_units * self.plan.layout.block_bytes


@dataclass(frozen=True)
class Task:
    """Neighbouring pieces of one file that a worker maps and scans together."""

    path: str
    identity: FileIdentity
    pieces: tuple[Piece, ...]

    @property
    def start(self) -> int:
        return self.pieces[0].start

    @property
    def end(self) -> int:
        return self.pieces[-1].end

    @property
    def nbytes(self) -> int:
        return sum(p.end - p.start for p in self.pieces)


def make_tasks(plans: Sequence[Plan], identities: dict[str, FileIdentity], task_bytes: int) -> Iterator[Task]:
    """Cut tensors into pieces and pack neighbouring pieces into tasks of about ``task_bytes``."""
    for path, group in by_file(plans).items():
        pieces: list[Piece] = []
        size = 0
        for plan in group:
            per_piece = max(1, task_bytes // plan.layout.block_bytes)
            if plan.anomaly is not None:      # a scale model scores whole rows: pieces hold whole rows
                per_piece = max(1, per_piece // plan.units_per_row) * plan.units_per_row
            for u0 in range(0, plan.units, per_piece):
                piece = Piece(plan, u0, min(per_piece, plan.units - u0))
                full = size + piece.end - piece.start > task_bytes
                if pieces and (full or piece.start - pieces[-1].end > task_bytes):
                    yield Task(path, identities[path], tuple(pieces))
                    pieces, size = [], 0
                pieces.append(piece)
                size += piece.end - piece.start
        if pieces:
            yield Task(path, identities[path], tuple(pieces))


def run_task(task: Task, opts: Options) -> list[tuple[int, Acc]]:
    """In a worker: map the task's window of the file and scan its pieces in place.

    Float elements are mapped too: reading them into a buffer (a copy) measured dearer here than the
    mapping's page faults.
    """
    fd = opening.open_fd(task.path)
    try:
        st = os.fstat(fd)
        if not task.identity.same_file(st) or st.st_size < task.end:
            raise ReadError(task.path, f"file changed during scan (now {st.st_size} bytes, expected "
                            f"{task.identity.size})", offset=task.end)
        base = task.start - task.start % mmap.ALLOCATIONGRANULARITY
        try:
            mm = mmap.mmap(fd, task.end - base, access=mmap.ACCESS_READ, offset=base)
        except (OSError, ValueError) as err:   # it shrank between the size check and the mapping
            raise ReadError(task.path, f"file changed during scan: cannot map it ({err})",
                            offset=task.start) from None
    finally:
        os.close(fd)
    advice.advise_mapping(mm)
    try:
        return scan_pieces(task, opts, mm, base)
    finally:
        with contextlib.suppress(BufferError):   # a view survives in a traceback; the mapping goes with the process
            mm.close()


def scan_pieces(task: Task, opts: Options, mm: mmap.mmap, base: int) -> list[tuple[int, Acc]]:
    """Scan each piece of ``task`` in the mapping ``mm`` of the file from offset ``base``."""
    out: list[tuple[int, Acc]] = []
    window = np.frombuffer(mm, dtype=np.uint8)
    try:
        for piece in task.pieces:
            acc = Acc()
            scan_units(piece.plan, opts, acc, window[piece.start - base:piece.end - base], piece.first_unit)
            out.append((piece.plan.index, acc))
            if acc.stopped:
                break
    finally:
        del window
    settle_anomalies(acc for _, acc in out)
    return out


def _worker_init(parent_pid: int) -> None:
    # A worker killed by SIGBUS is expected (the file shrank) and reported by the parent as a
    # ReadError; a fault handler inherited from the parent would only add a stack dump to stderr.
    faulthandler.disable()
    # Ctrl-C goes to the whole process group: the parent decides, and kills the workers. A forked
    # worker also inherited the parent's handlers for SIGTERM and SIGHUP: back to the default.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    processes.unblock_sigint()      # held back while the parent started this worker (see _drive)
    for signum in _TERMINATION_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    processes.die_with_parent(parent_pid)
    _watch_parent()


def _watch_parent() -> None:
    """Exit this worker as soon as its parent is gone, on every OS and however the parent died.

    The parent's sentinel (a pipe whose write end only the parent and workers started after this one
    hold, or on Windows the parent's process handle) becomes ready when the parent ends.
    """
    parent = multiprocessing.parent_process()
    sentinel = parent.sentinel if parent is not None else None
    if sentinel is None:
        return

    def watch() -> None:
        try:
            multiprocessing.connection.wait([sentinel])
        except OSError:          # cannot watch: the kernel's PR_SET_PDEATHSIG (Linux) still holds
            return
        os._exit(1)

    threading.Thread(target=watch, name="ggaudit-parent-watch", daemon=True).start()


def _pool_context() -> multiprocessing.context.BaseContext:
    # fork starts a worker in milliseconds, which matters when a whole scan takes 100 ms; where it is
    # unavailable (Windows, macOS default) spawn is correct, only slower to start.
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


class _SharedPool:
    """The pool of a :func:`reader_pool` block: started by the first scan that needs workers, reused by
    the next ones (with the same number of workers), shut down when the block ends."""

    def __init__(self) -> None:
        self.pool: ProcessPoolExecutor | None = None
        self.workers = 0

    def get(self, workers: int) -> ProcessPoolExecutor:
        if self.pool is not None and self.workers != workers:
            self.close()
        if self.pool is None:
            self.pool, self.workers = _new_pool(workers), workers
        return self.pool

    def discard(self) -> None:
        """After a failure: its workers are killed, and the next scan starts a new pool."""
        if self.pool is not None:
            _kill_workers(self.pool)
            self.close()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


_SHARED: ContextVar[_SharedPool | None] = ContextVar("ggaudit_reader_pool", default=None)


@contextlib.contextmanager
def reader_pool() -> Iterator[None]:
    """Within the block, scans that read in worker processes share one pool instead of starting and ending
    their own (the command line scanning several models, a hub auditing a folder). The workers end with
    the block, however it ends; outside one, a scan leaves no process behind."""
    shared = _SharedPool()
    token = _SHARED.set(shared)
    try:
        yield
    except BaseException:
        shared.discard()
        raise
    finally:
        _SHARED.reset(token)
        shared.close()


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=_pool_context(), initializer=_worker_init,
                               initargs=(os.getpid(),))


def run_mapped(plans: Sequence[Plan], opts: Options, files: Sequence[GGUFFile], workers: int,
               advance: Callable[[int], None]) -> dict[int, Acc]:
    """Scan ``plans`` in ``workers`` processes (a :func:`reader_pool`'s, if one is open); results are
    merged in file order.

    However this ends (done, an error, Ctrl-C, SIGTERM), no worker is left running: on any exception
    the workers are killed, not waited for, before the exception goes on.
    """
    shared = _SHARED.get()
    pool = shared.get(workers) if shared is not None else _new_pool(workers)
    with _StopOnSignals(pool) as guard:
        try:
            accs = _drive(pool, plans, opts, files, workers, advance, guard)
        except BaseException:
            if shared is not None:
                shared.discard()
            else:
                _kill_workers(pool)
            raise
        finally:
            if shared is None:
                pool.shutdown(wait=True, cancel_futures=True)
    return accs


def _drive(pool: ProcessPoolExecutor, plans: Sequence[Plan], opts: Options, files: Sequence[GGUFFile],
           workers: int, advance: Callable[[int], None], guard: _StopOnSignals) -> dict[int, Acc]:
    """Submit the tasks and merge their results in file order.

    A new task is submitted whenever any worker finishes, not only when the oldest task does: on a
    busy machine one worker can stall, and the other must not idle behind it. Finished results wait
    (they are small) until everything before them has been merged.
    """
    identities = {f.path: f.identity for f in files}
    tasks = make_tasks(plans, identities, TASK_BYTES)
    accs: dict[int, Acc] = {}
    pending: deque[tuple[Task, Future[list[tuple[int, Acc]]]]] = deque()
    current: Task | None = None
    try:
        while True:
            guard.check()
            running = sum(1 for _, f in pending if not f.done())
            with guard.submitting():
                while (running < workers * _QUEUE_PER_WORKER
                       and len(pending) < workers * _MAX_UNMERGED_PER_WORKER
                       and (task := next(tasks, None)) is not None):
                    pending.append((task, pool.submit(run_task, task, opts)))
                    running += 1
            if not pending:
                return accs
            if not pending[0][1].done():
                # Only futures still running: a finished one queued behind the head would make wait()
                # return at once, and this loop would spin on the core the workers need.
                wait([f for _, f in pending if not f.done()], timeout=_POLL_SECONDS, return_when=FIRST_COMPLETED)
            while pending and pending[0][1].done():
                guard.check()    # the workers killed on Ctrl-C fail their futures: say interrupted
                current, future = pending.popleft()
                if merge_results(accs, future.result(), opts):
                    return accs
                advance(current.nbytes)
    except BrokenProcessPool:
        guard.check()
        path = current.path if current is not None else files[0].path
        raise ReadError(path, "file changed during scan: a reader process was killed "
                        "(SIGBUS from a mapping of a file that shrank?)",
                        offset=current.start if current is not None else None) from None


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's worker processes now, without waiting for their tasks.

    ``_processes`` is the executor's own table of its workers (there is no public one); killing a dead
    or finished worker is harmless. Safe in a signal handler: no lock is taken.
    """
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError):     # already reaped, or its handle closed
            process.kill()


class _StopOnSignals:
    """While a pool runs in the main thread: Ctrl-C, SIGTERM and SIGHUP kill its workers at once.

    Ctrl-C only sets a flag that the parent's loop turns into KeyboardInterrupt at a point of its
    choosing: a KeyboardInterrupt raised inside concurrent.futures (between acquiring two futures'
    locks, say) can leave a lock held and the pool's shutdown waiting forever. SIGTERM and SIGHUP end
    the process by that same signal once the workers are killed. Handlers are installed only where
    the defaults are in place: an embedding program's own handlers are left alone.
    """

    def __init__(self, pool: ProcessPoolExecutor) -> None:
        self._pool = pool
        self._owner = os.getpid()
        self._saved: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
        self.interrupted = False
        self._deferring = False
        self._deferred: int | None = None

    def __enter__(self) -> _StopOnSignals:
        if threading.current_thread() is not threading.main_thread():
            return self             # only the main thread may set handlers, and only it gets signals
        defaults: list[tuple[int, object]] = [(signal.SIGINT, signal.default_int_handler)]
        defaults += [(signum, signal.SIG_DFL) for signum in _TERMINATION_SIGNALS]
        for signum, default in defaults:
            if signal.getsignal(signum) is default:
                self._saved[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        if exc_type is None:
            self.check()        # Ctrl-C during the pool's shutdown

    def check(self) -> None:
        """Raise KeyboardInterrupt if Ctrl-C came."""
        if self.interrupted:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def submitting(self) -> Iterator[None]:
        """For submitting tasks, which may start a worker. SIGINT is held back from this thread so
        that a new worker inherits it blocked (a Ctrl-C in its first milliseconds would end it in a
        traceback before it has set SIGINT aside). A signal still arrives, through another thread, and
        its handler runs here: it then only takes note, and kills the workers when the submit is done,
        because the pool adds a worker to its table of processes while its manager thread, once a
        killed worker is seen, walks that table (CPython 3.11: "dictionary changed size during
        iteration", a traceback on stderr)."""
        self._deferring = True
        try:
            with processes.SigintBlocked():
                yield
        finally:
            self._deferring = False
            deferred, self._deferred = self._deferred, None
            if deferred is not None:
                self._on_signal(deferred, None)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._owner:
            # A worker forked before its initializer replaced this inherited handler: act as the
            # default would, and never touch the parent's pool.
            if signum != signal.SIGINT:
                _die_by(signum)
            return
        if self._deferring:
            if self._deferred in (None, signal.SIGINT):   # a termination signal outranks Ctrl-C
                self._deferred = signum
            self.interrupted = self.interrupted or signum == signal.SIGINT
            return
        _kill_workers(self._pool)
        if signum == signal.SIGINT:
            self.interrupted = True
            return
        _release_semaphores(self._pool)
        _die_by(signum)


def _release_semaphores(pool: ProcessPoolExecutor) -> None:
    """Unlink the named semaphores of the pool's queues and tell the resource tracker, as their finalizers
    would at a normal exit. A process ended by a signal runs no finalizer, and the tracker (spawn and
    forkserver pools; fork unlinks them at once) would then print "resource_tracker: There appear to be N
    leaked semaphore objects" on stderr after the process is gone.

    ``_call_queue`` and ``_result_queue`` are the executor's own (there is no public way to its queues); the
    locks are found among each queue's attributes, whatever their names. Nothing here may stop the process
    from ending by its signal: a failure leaves the warning, no more."""
    from multiprocessing.synchronize import SemLock     # the pool imported it already: no import in a handler

    for queue in (getattr(pool, "_call_queue", None), getattr(pool, "_result_queue", None)):
        for lock in vars(queue).values() if queue is not None else ():
            name = getattr(getattr(lock, "_semlock", None), "name", None)
            if isinstance(lock, SemLock) and name is not None:
                with contextlib.suppress(Exception):
                    SemLock._cleanup(name)     # type: ignore[attr-defined]  # what its finalizer calls


def _die_by(signum: int) -> None:
    """End this process by ``signum`` with its default action, as if no handler had caught it."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)       # not reached where the default action ends the process


def merge_results(accs: dict[int, Acc], results: list[tuple[int, Acc]], opts: Options) -> bool:
    """Fold a task's results in; True when --fail-fast has found its finding."""
    for index, acc in results:
        accs.setdefault(index, Acc()).merge(acc, opts.limit if not opts.fail_fast else 1)
        if acc.stopped:
            return True
    settle_anomalies(accs[index] for index, _ in results)
    return False
