"""Scan and manifest many models on a Dask cluster, with the reports a single machine gives.

Each model's first task opens it where the data lives and plans its scan (or lists its files); its byte
ranges (:func:`ggaudit.scan.workers.make_tasks`: whole units, tensor and row aligned) or its files then
become tasks of their own, run by whichever worker is free. The client holds only small results
(accumulators, digests) and merges each model's in file order, as a local scan merges its worker
processes'. At most a few tasks per worker thread are submitted at a time, so the scheduler never holds a
whole hub's tasks and a model's first results are merged while others are still being planned.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._version import __version__
from ..check.options import CheckOptions
from ..evidence.paths import MODES, Mode
from ..outcomes import Outcome, as_error
from ..errors import GGAuditError, ReadError, UsageError, one_or_many, option_keywords, options_from
from ..scan.kernel import Acc
from ..scan.report import ScanReport, ScanStats
from ..scan.options import ScanOptions
from ..scan.run import report_of
from ..scan.workers import TASK_BYTES, merge_results, make_tasks
from ..stores.small_files import is_count
from ..verify.cache import CacheChoice
from ..verify.manifests.tensor import DEFAULT_GROUP_BYTES, ManifestFile, TensorDigest, TensorManifest
from ..verify.options import VerifyOptions
from ..verify.report import VerifyReport
from .tasks import (Failed, Planned, check_pass, digest_file, guarded, model_files, plan_check, plan_model, scan_range,
                    scan_whole, verify_target)

if TYPE_CHECKING:
    from distributed import Client, Future

    from ..check.report import CheckReport
    from ..check.run import CheckPlan, PassObservation

__all__ = ["DEFAULT_RETRIES", "check_on", "manifest_on", "on_fleet", "scan_on", "verify_on"]

#: Times a task that raised is run again (a network share's transient EIO, say). A task whose worker died
#: is rescheduled by Dask itself, up to its ``distributed.scheduler.allowed-failures``.
DEFAULT_RETRIES = 1
#: Tasks submitted and not finished, per worker thread of the cluster: no thread waits for the client.
_IN_FLIGHT_PER_THREAD = 4
#: The tag of a model's first task (planning, or listing its files); its later tasks count from 0.
_FIRST = -1

R = TypeVar("R")
#: The options a cluster may refuse (:func:`on_fleet`).
Opts = TypeVar("Opts", ScanOptions, CheckOptions)

#: The options that ask what a cluster cannot do, each with why: :func:`on_fleet` refuses them in an options
#: object, and :func:`scan_on` and :func:`check_on` offer no keyword parameter for them (tests/test_api.py holds
#: their parameters to their options' fields but these).
REFUSED_ON_FLEET: Mapping[str, str] = {
    # Deciding an anomaly reads its block again, which the client may not be able to do.
    "anomalies": "reads blocks again where the results are merged: not on a Dask cluster",
    "workers": "the cluster's workers are the readers: not on a Dask cluster",
}


@dataclass(frozen=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    tag: int


class _Job(Generic[R]):
    """One model's tasks: a first one, then those its result calls for; an error ends the model."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.todo: Iterator[_Call] = iter(())
        self.running = 0
        self.queued = False
        self.error: GGAuditError | None = None
        self.outcome: Outcome[R] | None = None

    def first(self) -> _Call:
        raise NotImplementedError

    def took(self, tag: int, value: Any) -> None:
        """A task's result; may set ``todo`` to the tasks it calls for."""
        raise NotImplementedError

    def result(self) -> R:
        raise NotImplementedError

    def receive(self, tag: int, future: Future) -> None:
        if self.error is not None:
            return
        try:
            value = future.result()
        except (GGAuditError, OSError, MemoryError) as err:
            self._fail(as_error(self.model, err))
        except Exception as err:
            if type(err).__name__ != "KilledWorker":     # anything else is a bug: raised to the caller
                raise
            self._fail(ReadError(self.model, "the workers reading it died again and again (Dask's "
                                 "allowed-failures): out of memory, or a file that shrank under a mapping?"))
        else:
            if isinstance(value, Failed):
                self._fail(value.error)
            else:
                self.took(tag, value)

    def finish(self) -> None:
        if self.error is None:
            try:
                self.outcome = Outcome(self.model, result=self.result())
                return
            except GGAuditError as err:     # what is decided where the results merge (nothing checked, say)
                self.error = err
        self.outcome = Outcome(self.model, error=self.error)

    def _fail(self, err: GGAuditError) -> None:
        self.error, self.todo = err, iter(())


def _run(client: Client, jobs: Sequence[_Job[Any]], retries: int) -> None:
    """Run every job's tasks on the cluster, a bounded number at a time, until every job has an outcome.

    Ctrl-C or a bug in the client cancels what was submitted before it goes on.
    """
    from distributed import as_completed

    window = _IN_FLIGHT_PER_THREAD * max(1, sum(client.nthreads().values()))
    for job in jobs:
        job.todo, job.queued = iter((job.first(),)), True
    ready = deque(jobs)
    owner: dict[Future, tuple[_Job[Any], int]] = {}
    done = as_completed()

    def fill() -> None:
        while len(owner) < window and ready:
            job = ready[0]
            call = next(job.todo, None)
            if call is None:
                ready.popleft()
                job.queued = False
                if not job.running:
                    job.finish()
                continue
            future = client.submit(guarded, call.fn, *call.args, key=f"ggaudit-{call.fn.__name__}-{uuid.uuid4().hex}",
                                   retries=retries)
            owner[future] = (job, call.tag)
            job.running += 1
            done.add(future)

    try:
        fill()
        for future in done:
            job, tag = owner.pop(future)
            job.running -= 1
            job.receive(tag, future)
            if not job.queued:
                ready.append(job)
                job.queued = True
            fill()
    except BaseException:
        client.cancel(list(owner))
        raise


class _ScanJob(_Job[ScanReport]):
    def __init__(self, model: str, options: ScanOptions, store: str | None, task_bytes: int, threads: int) -> None:
        super().__init__(model)
        self.options, self.store, self.task_bytes, self.threads = options, store, task_bytes, threads
        self.planned: Planned | None = None
        self.whole: ScanReport | None = None
        self.parts: dict[int, list[tuple[int, Acc]]] = {}
        self.started = time.perf_counter()

    def first(self) -> _Call:
        # Digests need each file read once, in order: such a scan is one task.
        return _Call(scan_whole if self.options.hashes else plan_model, (self.model, self.options, self.store),
                     _FIRST)

    def took(self, tag: int, value: Any) -> None:
        if tag != _FIRST:
            self.parts[tag] = value
            if any(acc.stopped for _, acc in value):
                self.todo = iter(())    # --fail-fast: the ranges before this one are all submitted
        elif self.options.hashes:
            self.whole = value
        else:
            self.planned = value
            self.started = time.perf_counter()
            self.todo = self._ranges(value)

    def _ranges(self, planned: Planned) -> Iterator[_Call]:
        identities = {f.path: f.identity for f in planned.plan.model.files}
        for i, task in enumerate(make_tasks(planned.plan.plans, identities, self.task_bytes)):
            yield _Call(scan_range, (task, self.options.kernel), i)

    def result(self) -> ScanReport:
        if self.whole is not None:
            return self.whole
        p = self.planned
        assert p is not None
        accs: dict[int, Acc] = {}
        for i in sorted(self.parts):
            if merge_results(accs, self.parts[i], self.options.kernel):
                break
        stats = ScanStats(bytes=sum(plan.nbytes for plan in p.plan.plans),
                          seconds=time.perf_counter() - self.started, workers=self.threads)
        return report_of(p.plan, accs, stats, p.structure)


def on_fleet(options: Opts) -> Opts:
    """``options``, refused (UsageError) where a scan or check on a cluster cannot do what they ask: the one
    place that says so, for :func:`scan_on`, :func:`check_on` and ``--dask`` before a cluster is started."""
    for field in dataclasses.fields(options):
        if field.name in REFUSED_ON_FLEET and getattr(options, field.name) != field.default:
            raise UsageError(None, REFUSED_ON_FLEET[field.name], field=field.name)
    return options


def _fleet_keywords(kind: type, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The options of *kind* among the parameters of :func:`scan_on` or :func:`check_on` (their ``locals()``
    as they start): every field but those the cluster refuses, for :func:`ggaudit.errors.options_from`."""
    return {f.name: parameters[f.name] for f in dataclasses.fields(kind) if f.name not in REFUSED_ON_FLEET}


def scan_on(client: Client, models: str | Sequence[str], *, tensors: Collection[str] | None = None,
            deep: bool = False, max_abs: float | None = None, as_fp8: Collection[str] = (), limit: int = 16,
            fail_fast: bool = False, hashes: Collection[str] = (), histograms: bool = False,
            options: ScanOptions | None = None, store: str | None = None, task_bytes: int = TASK_BYTES,
            retries: int = DEFAULT_RETRIES) -> list[Outcome[ScanReport]]:
    """Scan ``models`` (paths, or store names such as ``ollama:NAME``, as the workers see them) on the Dask
    cluster of ``client``: one outcome per model, in order, each the report :func:`ggaudit.scan` gives on
    one machine (``stats`` aside) or the error that stopped that model.

    The options are :func:`ggaudit.scan`'s, a ScanOptions (``options=``) or its fields as these keyword
    parameters, not both, except what :func:`on_fleet` refuses (``anomalies``, ``workers``: no parameter
    here, and a UsageError in ``options``). ``store``: the root of the store names are found in (default
    per OS). ``task_bytes``: tensor bytes per task (whole units, tensor and row aligned). With ``hashes`` a
    model is one task, its files read once from first byte to last. ``retries``: runs again of a task that
    raised; a task whose worker died is rescheduled by Dask.

    Raises:
        UsageError: an option of the wrong type or value, both ``options`` and keywords, an option the cluster
            refuses, ``task_bytes`` or ``retries`` not a count; before any task is submitted. What stops one model
            (a FormatError, a ReadError, an OSError a retry did not cure, any error of its own) is that model's
            outcome, not raised.
    """
    opts = on_fleet(options_from(ScanOptions, options, _fleet_keywords(ScanOptions, locals())))
    _check_count(task_bytes, "task_bytes")
    _check_count(retries, "retries", minimum=0)
    threads = sum(client.nthreads().values())
    # A str is one model, pattern or name, as for ggaudit.scan: never its letters.
    jobs = [_ScanJob(model, opts, store, task_bytes, threads) for model in one_or_many("models", models)]
    _run(client, jobs, retries)
    return [_outcome(job) for job in jobs]


class _ManifestJob(_Job[TensorManifest]):
    def __init__(self, model: str, group_bytes: int, store: str | None) -> None:
        super().__init__(model)
        self.group_bytes, self.store = group_bytes, store
        self.digests: dict[int, tuple[ManifestFile, tuple[TensorDigest, ...]]] = {}

    def first(self) -> _Call:
        return _Call(model_files, (self.model, self.store), _FIRST)

    def took(self, tag: int, value: Any) -> None:
        if tag != _FIRST:
            self.digests[tag] = value
            return
        unique: dict[str, str] = {}
        for path in value:      # the same file given twice is listed once, as build_tensor_manifest does
            unique.setdefault(os.path.basename(path), path)
        self.todo = (_Call(digest_file, (path, self.group_bytes), i) for i, path in enumerate(unique.values()))

    def result(self) -> TensorManifest:
        parts = [self.digests[i] for i in sorted(self.digests)]
        return TensorManifest(self.group_bytes, tuple(f for f, _ in parts), tuple(t for _, ts in parts for t in ts),
                              f"ggaudit {__version__}")


def manifest_on(client: Client, models: str | Sequence[str], *, group_bytes: int = DEFAULT_GROUP_BYTES,
                store: str | None = None, retries: int = DEFAULT_RETRIES) -> list[Outcome[TensorManifest]]:
    """The tensor manifest of each model (a file, a split set, ``ollama:NAME``), built on the Dask cluster
    of ``client`` one task per file (a file's sha256 is one sequential read): byte for byte the manifest
    :func:`ggaudit.build_manifest` writes on one machine, or the error that stopped that model.

    Raises:
        UsageError: ``group_bytes`` or ``retries`` not a count; before any task is submitted. What stops one model
            (a FormatError, a ReadError, an OSError a retry did not cure, any error of its own) is that model's
            outcome, not raised.
    """
    _check_count(group_bytes, "group_bytes", minimum=1)
    _check_count(retries, "retries", minimum=0)
    jobs = [_ManifestJob(model, group_bytes, store) for model in one_or_many("models", models)]
    _run(client, jobs, retries)
    return [_outcome(job) for job in jobs]


class _VerifyJob(_Job[VerifyReport]):
    def __init__(self, target: str, options: VerifyOptions) -> None:
        super().__init__(target)
        self.options = options
        self.report: VerifyReport | None = None

    def first(self) -> _Call:
        return _Call(verify_target, (self.model, self.options), _FIRST)

    def took(self, tag: int, value: Any) -> None:
        self.report = value

    def result(self) -> VerifyReport:
        assert self.report is not None, "a verify job ends with its one task's report"
        return self.report


def verify_on(client: Client, targets: str | Sequence[str], *, manifest: str | os.PathLike[str] | None = None,
              sums: str | os.PathLike[str] | None = None, store: str | os.PathLike[str] | None = None,
              hf_cache: str | os.PathLike[str] | None = None, fail_fast: bool = False, sha256: str | None = None,
              ignore_missing: bool = False, base: str | os.PathLike[str] | None = None, cache: CacheChoice = False,
              trust_cache: bool = False, quick: bool = False, options: VerifyOptions | None = None,
              retries: int = DEFAULT_RETRIES) -> list[Outcome[VerifyReport]]:
    """:func:`ggaudit.verify` of each target (a file, a blob, ``ollama:NAME``, ``hf:ORG/NAME``; with
    ``manifest``, a model against it) on the Dask cluster of ``client``, one task per target, where the
    files are: the report a local call gives, or the error that stopped that target. The options are
    :func:`ggaudit.verify`'s, a VerifyOptions (``options=``) or its fields as these keyword parameters, not
    both. ``cache``: each worker uses its own digest cache (off by default: a worker's cache folder may not
    be shared or kept). ``retries``: runs again of a task that raised.

    Raises:
        UsageError: an option of the wrong type or value, both ``options`` and keywords, ``retries`` not a count;
            before any task is submitted. What stops one target (a FormatError, a ReadError, an OSError a retry did
            not cure, any error of its own) is that target's outcome, not raised.
    """
    opts = options_from(VerifyOptions, options, option_keywords(VerifyOptions, locals()))
    _check_count(retries, "retries", minimum=0)
    jobs = [_VerifyJob(target, opts) for target in one_or_many("targets", targets)]
    _run(client, jobs, retries)
    return [_outcome(job) for job in jobs]


class _CheckJob(_Job["CheckReport"]):
    """A target's check: a first task plans it (its store, its files, their expectations), then one task
    per file and read path; each file's decision and the verdict are made here, from their observations."""

    def __init__(self, target: str, options: CheckOptions) -> None:
        super().__init__(target)
        self.options = options
        self.plan: CheckPlan | None = None
        self.passes: dict[int, PassObservation] = {}
        self.started = time.perf_counter()

    def first(self) -> _Call:
        return _Call(plan_check, (self.model, self.options), _FIRST)

    def took(self, tag: int, value: Any) -> None:
        if tag != _FIRST:
            self.passes[tag] = value
            return
        self.plan = value
        modes = value.modes
        self.todo = (_Call(check_pass, (f, mode), i * len(modes) + j)
                     for i, f in enumerate(value.files) for j, mode in enumerate(modes))

    def result(self) -> CheckReport:
        from ..check.run import judge

        plan = self.plan
        assert plan is not None, "a check job's first task plans it"
        n = len(plan.modes)
        passes = [[self.passes[i * n + j] for j in range(n)] for i in range(len(plan.files))]
        return judge(plan, passes, seconds=time.perf_counter() - self.started)


def check_on(client: Client, targets: str | Sequence[str], *, manifest: str | os.PathLike[str] | None = None,
             sums: str | os.PathLike[str] | None = None, sha256: str | None = None,
             store: str | os.PathLike[str] | None = None, hf_cache: str | os.PathLike[str] | None = None,
             modes: Mode | Collection[Mode] = MODES, evict: bool = True, options: CheckOptions | None = None,
             retries: int = DEFAULT_RETRIES) -> list[Outcome[CheckReport]]:
    """:func:`ggaudit.check` of each target (a file, a split set, ``ollama:NAME``, ``hf:ORG/NAME``, ...) on
    the Dask cluster of ``client``: one task plans a target where its files are, then each file is read
    through each read path in a task of its own; the decision and the verdict are made here. One outcome
    per target, in order: the report a local call gives (timings aside), or the error that stopped that
    target. The options are :func:`ggaudit.check`'s, a CheckOptions (``options=``) or its fields as these
    keyword parameters, not both, except what :func:`on_fleet` refuses (``anomalies``: no parameter here,
    and a UsageError in ``options``). ``retries``: runs again of a task that raised; a task whose worker
    died is rescheduled by Dask.

    Raises:
        UsageError: an option of the wrong type or value, both ``options`` and keywords, an option the cluster
            refuses, ``retries`` not a count; before any task is submitted. What stops one target (a FormatError, a
            ReadError, an OSError a retry did not cure, any error of its own) is that target's outcome, not raised.
    """
    opts = on_fleet(options_from(CheckOptions, options, _fleet_keywords(CheckOptions, locals())))
    _check_count(retries, "retries", minimum=0)
    jobs = [_CheckJob(target, opts) for target in one_or_many("targets", targets)]
    _run(client, jobs, retries)
    return [_outcome(job) for job in jobs]


def _outcome(job: _Job[R]) -> Outcome[R]:
    assert job.outcome is not None, "every job finishes before _run returns"
    return job.outcome


def _check_count(value: int, field: str, minimum: int = 1) -> None:
    if not is_count(value, minimum):
        raise UsageError(None, f"must be an integer >= {minimum}, not {value!r}", field=field)
