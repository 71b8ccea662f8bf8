"""What runs on a Dask worker: each function opens the files it reads itself, where the data lives, and
returns only small things (a model's tensor table, accumulators of findings, digests), never file bytes.

Nothing here imports Dask: these are plain functions a worker unpickles and calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import GGAuditError, ReadError
from ..format.layout import GGUFFile, Model, open_gguf, open_model as open_path
from ..stores.locate import open_model, resolve_model
from ..format.structure import StructureFinding, check_structure
from ..io.identity import FileIdentity
from ..scan.kernel import Acc, Options
from ..scan.report import ScanReport
from ..scan.options import ScanOptions
from ..scan.run import ScanPlan, plan_scan, scan
from ..scan.workers import Task, run_task
from ..verify.manifests.tensor import ManifestFile, TensorDigest, digest_gguf_file
from ..verify.options import VerifyOptions
from ..verify.report import VerifyReport

if TYPE_CHECKING:
    from ..check.options import CheckOptions
    from ..check.run import CheckPlan, FileCheckPlan, PassObservation


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
class Planned:
    """What a model's first task sends back: its scan's plan (:func:`ggaudit.scan.run.plan_scan`, the one a
    local scan makes), its files without their metadata (the report needs names and offsets; a vocabulary
    can be megabytes), and the structure of its files (a few KiB read)."""

    plan: ScanPlan
    structure: tuple[StructureFinding, ...]


def plan_model(target: str, options: ScanOptions, store: str | None) -> Planned:
    """Open ``target`` where the data lives and plan its scan as a local :func:`scan` does."""
    plan = plan_scan(open_model(target, store=store), options)
    structure = tuple(finding for f in plan.model.files for finding in check_structure(f))
    return Planned(plan=dataclasses.replace(plan, model=without_metadata(plan.model)), structure=structure)


def without_metadata(model: Model) -> Model:
    """``model`` with its files' metadata left out: what travels back to the client."""
    return dataclasses.replace(model, files=tuple(dataclasses.replace(f, metadata={}) for f in model.files))


def scan_whole(target: str, options: ScanOptions, store: str | None) -> ScanReport:
    """One model in one task, read once from its first byte to its last: what digests need (``hashes``)."""
    return scan(open_model(target, store=store), options=dataclasses.replace(options, workers=0))


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


def verify_target(target: str, options: VerifyOptions) -> VerifyReport:
    """``ggaudit.verify(target, options=options)`` where the files are: the report is small (digests,
    mismatches)."""
    from ..verify.dispatch import verify

    return verify(target, options=options)


def model_files(target: str, store: str | None) -> list[str]:
    """Every file ``target`` names, in order: each shard of a split set, an Ollama model's projector too."""
    return [f.path for path in resolve_model(target, store=store) for f in open_path(path).files]


def digest_file(path: str, group_bytes: int) -> tuple[ManifestFile, tuple[TensorDigest, ...]]:
    """One file's manifest entries: its sha256 and its tensors' digests, in one sequential read."""
    gguf: GGUFFile = open_gguf(path)
    return digest_gguf_file(gguf, group_bytes)


def plan_check(target: str, options: CheckOptions) -> CheckPlan:
    """Open ``target`` where the data lives and plan its check as a local :func:`ggaudit.check` does (its
    store's digests and the manifest are read here), its files without their metadata."""
    from ..check.run import plan_check as plan

    planned = plan(target, options)
    files = tuple(dataclasses.replace(f, file=dataclasses.replace(f.file, metadata={})) for f in planned.files)
    scans = tuple(dataclasses.replace(s, model=without_metadata(s.model)) for s in planned.scans)
    return dataclasses.replace(planned, files=files, scans=scans)


def check_pass(plan: FileCheckPlan, mode: str) -> PassObservation:
    """One file through one read path, where it lives: what the pass observed (digests, each tensor's,
    the scan's accumulators on the scan path), never its bytes. The file must be the one planned (same
    size and modification time), as for :func:`scan_range`."""
    from ..check.run import observe_pass

    here = _same_file(plan.file.path, plan.file.identity, f"before it was read ({mode})")
    return observe_pass(dataclasses.replace(plan, file=dataclasses.replace(plan.file, identity=here)), mode)
