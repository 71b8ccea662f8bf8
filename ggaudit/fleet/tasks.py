"""What runs on a Dask worker: each function opens the files it reads itself, where the data lives, and
returns only small things (a model's tensor table, accumulators of findings, digests), never file bytes.

Nothing here imports Dask: these are plain functions a worker unpickles and calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from ..errors import GGAuditError, ReadError
from ..format.layout import GGUFFile, Model, Tensor, open_gguf, open_model as open_path
from ..format.locate import open_model, resolve_model
from ..format.structure import StructureFinding, check_structure
from ..io import FileIdentity
from ..scan.kernel import Acc, Options, Plan
from ..scan.report import ScanReport
from ..scan.run import check_options, check_reads, fp8_names, make_plans, select_tensors, scan
from ..scan.workers import Task, run_task
from ..verify.manifests.tensor import FileDigest, TensorDigest, digest_gguf_file
from ..verify.run import VerifyReport


@dataclass(frozen=True)
class Failed:
    """What a task that met bad input returns: the error, as a value (Dask would retry a raised one, to no
    avail, and log it as a worker's failure)."""

    error: GGAuditError


def guarded(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or :class:`Failed` when it raises a GGAuditError. Other exceptions are raised: an
    OSError (a network share's EIO, say) may pass on a retry, and a bug must be seen."""
    try:
        return fn(*args)
    except GGAuditError as err:
        return Failed(err)


@dataclass(frozen=True, kw_only=True)
class ScanSpec:
    """The options of a scan, as sent to the workers (one object shared by every model's first task)."""

    tensors: Collection[str] | None = None
    deep: bool = False
    max_abs: float | None = None
    as_fp8: Collection[str] = ()
    limit: int = 16
    fail_fast: bool = False
    hashes: tuple[str, ...] = ()
    histograms: bool = False
    store: str | None = None

    @property
    def options(self) -> Options:
        return Options(None if self.max_abs is None else float(self.max_abs), self.limit, self.fail_fast,
                       self.histograms)


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A model ready to be scanned in byte ranges: what :func:`ggaudit.scan.run.scan` works out before it
    reads a tensor, and the structure of its files (a few KiB read)."""

    model: Model                     # files without their metadata: the report needs names and offsets
    selected: tuple[Tensor, ...]     # in model order
    plans: tuple[Plan, ...]
    fp8: frozenset[str]
    warnings: tuple[str, ...]
    structure: tuple[StructureFinding, ...]


def prepare_scan(target: str, spec: ScanSpec) -> Prepared:
    """Open ``target`` and plan its scan exactly as a local :func:`scan` does (same checks, same order)."""
    m = open_model(target, store=spec.store)
    check_options(m.source, spec.max_abs, spec.limit)
    check_reads(m.source, spec.hashes, None)
    fp8 = fp8_names(m, spec.as_fp8)
    selected = select_tensors(m, spec.tensors)
    plans, warnings = make_plans(selected, fp8, spec.deep)
    for f in m.files:
        f.check_unchanged("since it was opened")
    structure = tuple(finding for f in m.files for finding in check_structure(f))
    light = dataclasses.replace(m, files=tuple(dataclasses.replace(f, metadata={}) for f in m.files))
    return Prepared(model=light, selected=tuple(selected), plans=tuple(plans), fp8=frozenset(fp8),
                    warnings=tuple(warnings), structure=structure)


def scan_whole(target: str, spec: ScanSpec) -> ScanReport:
    """One model in one task, read once from its first byte to its last: what digests need (``hashes``)."""
    return scan(open_model(target, store=spec.store), tensors=spec.tensors, deep=spec.deep,
                max_abs=spec.max_abs, as_fp8=spec.as_fp8, limit=spec.limit, fail_fast=spec.fail_fast,
                workers=0, hashes=spec.hashes, histograms=spec.histograms)


def scan_range(task: Task, opts: Options) -> list[tuple[int, Acc]]:
    """Scan one task's byte range (whole units of tensors) in place, as a local worker process does.

    The file must be the one planned: same size and modification time, before and after the read. Device
    and inode numbers are not compared: another machine mounting the same share may number them
    otherwise; the task goes on with this machine's identity of the file.
    """
    here = _same_file(task.path, task.identity, "during scan")
    results = run_task(dataclasses.replace(task, identity=here), opts)
    _same_file(task.path, task.identity, "during scan")
    return results


def _same_file(path: str, expected: FileIdentity, when: str) -> FileIdentity:
    now = FileIdentity.now(path, when)
    if (now.size, now.mtime_ns) != (expected.size, expected.mtime_ns):
        raise ReadError(path, f"file changed {when} (replaced, resized or rewritten: size {expected.size} -> "
                        f"{now.size}, mtime {expected.mtime_ns} -> {now.mtime_ns})")
    return now


def verify_target(target: str, options: dict[str, Any]) -> VerifyReport:
    """``ggaudit.verify(target, **options)`` where the files are: the report is small (digests, mismatches)."""
    from ..verify.dispatch import verify

    return verify(target, **options)


def model_files(target: str, store: str | None) -> list[str]:
    """Every file ``target`` names, in order: each shard of a split set, an Ollama model's projector too."""
    return [f.path for path in resolve_model(target, store=store) for f in open_path(path).files]


def digest_file(path: str, group_bytes: int) -> tuple[FileDigest, tuple[TensorDigest, ...]]:
    """One file's manifest entries: its sha256 and its tensors' digests, in one sequential read."""
    gguf: GGUFFile = open_gguf(path)
    return digest_gguf_file(gguf, group_bytes)

