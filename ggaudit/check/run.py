"""``ggaudit.check``: every byte of every file of a target through every read path, truth by evidence,
the verdict in words.

Per file, one pass per read path (buffered, mmap, direct), each feeding in the same read: the file's
xxh3-128 and each tensor's and row group's (every path), the expectations' algorithms (sha256, md5: on
buffered and direct, the paths compared with a published digest), and the scan of stored values and
structure (the mmap pass, the way engines read weights). :mod:`.decide` then says which bytes are right.

Three steps, so :mod:`ggaudit.fleet` can run each pass as a task where the data lives: :func:`plan_check`
(the target's files and what each should be), :func:`observe_pass` (one file through one read path: what it
delivered, never its bytes) and :func:`judge` (the decisions and the verdict from every pass's observations).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import NothingChecked, options_from
from ..format.layout import GGUFFile, Model, open_model
from ..format.structure import StructureConsumer, StructureFinding
from ..io import ChunkConsumer, Progress, Xxh3_128
from ..evidence.readers import DirectIOUnavailable, open_reader
from ..scan.kernel import Acc, Options, Plan, by_file
from ..scan.options import ScanOptions
from ..scan.run import ScanConsumer, ScanPlan, plan_scan, report_of
from ..scan.report import ScanReport, ScanStats
from ..stores.locate import Target, target_text
from ..stores.registry import Roots, Store, find_store
from ..verify.digests import Segment, SegmentDigests, published_hasher
from ..verify.manifests.llama_hash import FORMAT as LLAMA_HASH
from ..verify.manifests.llama_hash import (FilePlan, HashEntry, LineDigests, in_header_order, manifest_format,
                                           plan_llama_check, read_llama_hash)
from ..verify.manifests.tensor import (DEFAULT_GROUP_BYTES, TensorDigest, TensorManifest, read_tensor_manifest,
                                       rows_per_group)
from .decide import MANIFEST, Expectation, LineDigest, ManifestLines, Observed, decide_file
from .expect import file_key, published_digests
from .verdict import summarize
from .options import CheckOptions
from ..evidence.whole import read_pass
from .passes import PassBytes, beside
from .report import CheckReport, FileCheck, PathRead

__all__ = ["CheckPlan", "FileCheckPlan", "PassObservation", "check", "judge", "observe_pass", "plan_check"]

#: The paths a published digest is compared on: the page cache's reference read and the device's.
DIGEST_PATHS = ("buffered", "direct")


def check(target: Target, *, options: CheckOptions | None = None, progress: Progress | None = None,
          **keywords: Any) -> CheckReport:
    """Read every byte of every file of ``target`` (a path, a store name, or a Model) through each read
    path and say, in words and as data, whether the file is intact, damaged, holds non-finite values, or
    is read differently by some path on this machine, and what decided it.

    The options are a :class:`ggaudit.check.options.CheckOptions` (``options=``) or its fields as keywords.
    A filesystem that refuses direct I/O: that path is skipped (a warning) and the verdict names the paths
    compared. ``progress(done, total)``: bytes read of every file, once per read path. Raises UsageError for
    bad input, ReadError for an unreadable file.
    """
    o = options_from(CheckOptions, options, keywords)
    started = time.perf_counter()
    plan = plan_check(target, o)
    counted = PassBytes.of(progress, sum(f.file.size for f in plan.files) * len(plan.modes))
    passes = [_observe_file(f, plan.modes, counted) for f in plan.files]
    return judge(plan, passes, seconds=time.perf_counter() - started)


@dataclass(frozen=True, kw_only=True)
class FileCheckPlan:
    """What every pass over one file needs, worked out once before the first: the file, the digests it
    should have (``lines``: a llama-gguf-hash manifest's, computed on every path), the paths that compute the
    expectations' algorithms, and the scan of its tensors (on the ``scan_path`` pass: ``scan``, its plans, and
    ``kernel``, how they are scanned)."""

    file: GGUFFile
    published: Expectation | None
    expected: _Expected | None
    digest_paths: tuple[str, ...]
    scan_path: str
    scan: tuple[Plan, ...]
    kernel: Options
    lines: ManifestLines | None = None

    @property
    def algorithms(self) -> list[str]:
        return sorted({e.algorithm for e in (self.published, self.expected.whole if self.expected else None)
                       if e is not None})

    @property
    def group_bytes(self) -> int:
        return self.expected.group_bytes if self.expected else DEFAULT_GROUP_BYTES


@dataclass(frozen=True, kw_only=True)
class CheckPlan:
    """A target ready to be read: its text as given, its store, the read paths compared (``modes``), the
    scan plan of each of its models and the plan of each of its files, in order."""

    target: str
    store: Store | None
    modes: tuple[str, ...]
    scan_path: str
    scans: tuple[ScanPlan, ...]
    files: tuple[FileCheckPlan, ...]


@dataclass(frozen=True, kw_only=True)
class PassObservation:
    """What one read path delivered of one file: how it read and what (``read``, ``observed``), or why it
    could not read it here (``skipped``); on the scan path's pass, the scan's accumulators (``accs``: None
    when the file holds no floats) and the structure findings (``structure``)."""

    mode: str
    read: PathRead | None = None
    observed: Observed | None = None
    skipped: str | None = None
    accs: dict[int, Acc] | None = None
    structure: tuple[StructureFinding, ...] | None = None


def plan_check(target: Target, o: CheckOptions) -> CheckPlan:
    """Open ``target``, find what its files should be (its store's digests, the manifest) and plan their
    passes: everything a check works out before it reads a tensor's bytes, locally or on ggaudit.fleet."""
    text, store, models = _open(target, o)
    files = [f for m in models for f in m.files]
    published = published_digests(store, [f.path for f in files], o)
    manifest = _manifest(o.manifest)
    lines = _manifest_lines(manifest, files, o.manifest, text) if isinstance(manifest, tuple) else [None] * len(files)
    tensor_manifest = manifest if isinstance(manifest, TensorManifest) else None
    scan_options = ScanOptions(anomalies=o.anomalies, workers=0)
    scans = tuple(plan_scan(m, scan_options) for m in models)
    modes = tuple(o.modes)      # CheckOptions keeps them as a tuple in the house order
    scan_path = "mmap" if "mmap" in modes else modes[0]
    digest_paths = tuple(m for m in modes if m in DIGEST_PATHS) or modes[:1]
    return CheckPlan(target=text, store=store, modes=modes, scan_path=scan_path, scans=scans,
                     files=tuple(FileCheckPlan(file=f, published=published.get(file_key(f.path)),
                                          expected=_manifest_entry(tensor_manifest, f), lines=f_lines,
                                          digest_paths=digest_paths, scan_path=scan_path, scan=_scan_of(f, scans),
                                          kernel=scan_options.kernel) for f, f_lines in zip(files, lines, strict=True)))


def judge(plan: CheckPlan, passes: Sequence[Sequence[PassObservation]], *, seconds: float) -> CheckReport:
    """The report from every file's passes (``passes[i]``: those of ``plan.files[i]``), however they were
    read: each file's decision, then the verdict of the whole target."""
    accs: dict[str, dict[int, Acc]] = {}
    structure: dict[str, tuple[StructureFinding, ...]] = {}
    checked: list[FileCheck] = []
    for f, seen in zip(plan.files, passes, strict=True):
        checked.append(_judge_file(f, seen))
        for p in seen:
            if p.accs is not None:
                accs[f.file.path] = p.accs
            if p.structure is not None:
                structure[f.file.path] = p.structure
    scans = tuple(_scan_report(p, accs, structure) for p in plan.scans)
    return summarize(target=plan.target, store=plan.store, files=tuple(checked), modes=plan.modes, scans=scans,
                     scan_path=plan.scan_path, seconds=seconds)


def _open(target: Target, o: CheckOptions) -> tuple[str, Store | None, list[Model]]:
    """The target's text as given, its store, and its models (a store's model, then its projector)."""
    if isinstance(target, Model):
        return target.source, None, [target]
    text = target_text(target, "target")
    store = find_store(text, Roots(o.store, o.hf_cache), field="target")
    paths = [text] if store is None else store.model_files()
    return text, store, [open_model(p) for p in paths]


def _manifest(path: str | os.PathLike[str] | None) -> TensorManifest | tuple[HashEntry, ...] | None:
    """ggaudit's tensor manifest, or llama-gguf-hash's lines, told apart by content (as verify tells them)."""
    if path is None:
        return None
    if manifest_format(path) == LLAMA_HASH:
        return read_llama_hash(path)
    return read_tensor_manifest(path)


#: Why a model line is not compared on a file whose tensors' data is not in header order.
NOT_IN_HEADER_ORDER = ("the file stores its tensors' data in another order than its header lists them, and its "
                       "digest of them in header order does not compose from each tensor's digest")


def _manifest_lines(entries: Sequence[HashEntry], files: Sequence[GGUFFile], path: str | os.PathLike[str] | None,
                    target: str) -> list[ManifestLines | None]:
    """Each file's lines of a llama-gguf-hash manifest, matched as verify matches them (by tensor name, never by
    the path a line gives: :func:`plan_llama_check`); None for a file no line names. A manifest naming nothing
    of the target, or giving a file only a model line that cannot be compared, is NothingChecked."""
    plan = plan_llama_check(entries, files, path)
    if not any(p.named for p in plan.files):
        raise NothingChecked(path, f"names nothing of {target}: no line names a tensor or a file of it; nothing was "
                                   "checked", field="manifest")
    missing: dict[str, list[str]] = {}
    for _, tensor, home in plan.missing:
        if home is not None:
            missing.setdefault(home.path, []).append(tensor)
    found = [_file_lines(p, tuple(missing.get(p.file.path, ())), path) if p.named else None for p in plan.files]
    for lines, p in zip(found, plan.files, strict=True):
        if lines is not None and not lines.comparable:
            raise NothingChecked(path, f"gives {p.file.path} only its model line, which cannot be compared: "
                                       f"{lines.model_why}; nothing was checked", field="manifest")
    return found


def _file_lines(p: FilePlan, missing: tuple[str, ...], path: str | os.PathLike[str] | None) -> ManifestLines:
    model = None if p.model is None else LineDigest(p.model.type, p.model.hex, p.model.line)
    return ManifestLines(tensors={name: LineDigest(e.type, e.hex, e.line) for name, e in p.tensors.items()},
                         model=model, model_why=None if model is None or in_header_order(p.file) else
                         NOT_IN_HEADER_ORDER, missing=missing,
                         unnamed=tuple(t.name for t in p.file.tensors if t.name not in p.tensors) if p.extra else (),
                         what=f"the llama-gguf-hash manifest {os.path.basename(os.fspath(path or ''))}")


@dataclass(frozen=True)
class _Expected:
    """A tensor manifest's entry for one file: its whole-file digest and its tensors'."""

    whole: Expectation
    tensors: tuple[TensorDigest, ...]
    group_bytes: int


def _manifest_entry(manifest: TensorManifest | None, f: GGUFFile) -> _Expected | None:
    """The manifest's entry for ``f``: by its file name, else by content identity (a manifest made from
    ``model.gguf`` checked against the Ollama blob it was pulled as): the one entry of ``f``'s size whose
    tensors are ``f``'s, by name, type, shape and offset."""
    if manifest is None:
        return None
    name = os.path.basename(f.path)
    entry = next((e for e in manifest.files if e.name == name), None)
    what = ""
    if entry is None:
        same = [e for e in manifest.files if e.size == f.size and _layout(manifest.tensors, e.name) == _layout(f)]
        entry = same[0] if len(same) == 1 else None
        what = " (its tensors are this file's, at the same offsets)"
    if entry is None:
        return None
    whole = Expectation(algorithm="sha256", digest=entry.sha256, source=MANIFEST,
                        what=f"the manifest's sha256 of {entry.name}{what}")
    return _Expected(whole, tuple(t for t in manifest.tensors if t.file == entry.name), manifest.group_bytes)


def _layout(tensors: Sequence[TensorDigest] | GGUFFile, file: str = "") -> list[tuple[str, str, tuple[int, ...], int]]:
    """What a file's tensors are, their bytes aside: name, type, shape and offset of each, sorted."""
    if isinstance(tensors, GGUFFile):
        return sorted((t.name, t.ggml_type.name, tuple(t.shape), t.offset) for t in tensors.tensors)
    return sorted((t.name, t.ggml_type, tuple(t.shape), t.offset) for t in tensors if t.file == file)


def _observe_file(plan: FileCheckPlan, modes: Sequence[str], counted: PassBytes | None = None) -> list[PassObservation]:
    """Every pass over one file, in the order of ``modes``. The direct pass reads the device and the others the
    page cache, so it runs beside them: the device's time is spent while the CPU hashes and scans what the page
    cache delivers, not after it. (O_DIRECT reads the device whatever the page cache holds meanwhile.)"""
    if "direct" not in modes or len(modes) == 1:
        return [observe_pass(plan, mode, counted=counted) for mode in modes]
    cached = [mode for mode in modes if mode != "direct"]
    direct, others = beside(lambda stop: observe_pass(plan, "direct", stop=stop, counted=counted),
                            lambda: [observe_pass(plan, mode, counted=counted) for mode in cached])
    found = {**dict(zip(cached, others, strict=True)), "direct": direct}
    return [found[mode] for mode in modes]


def observe_pass(plan: FileCheckPlan, mode: str, *, stop: threading.Event | None = None,
                 counted: PassBytes | None = None) -> PassObservation:
    """Read every byte of ``plan``'s file once through ``mode``, feeding in the same read its xxh3-128, each
    tensor's and row group's, the expectations' algorithms (on the digest paths) and the scan and structure
    checks (on the scan path). A filesystem that refuses direct I/O: the pass is skipped, and says why.
    ``stop``, once set, ends the pass at its next chunk (PassStopped): the pass beside it failed. ``counted``:
    the check's byte count (progress), fed the bytes this pass reads."""
    f = plan.file
    try:
        reader = open_reader(f.path, mode)
    except DirectIOUnavailable as err:
        if counted is not None:
            counted.skip(f.size)
        return PassObservation(mode=mode, skipped=err.message)
    with reader:
        whole, tensors = Xxh3_128(), _tensor_digests(f, plan.group_bytes)
        hashers = {a: published_hasher(a, f.size) for a in plan.algorithms} if mode in plan.digest_paths else {}
        lines = _line_digests(f, plan.lines)      # every path: the lines decide which path is right
        consumers: list[ChunkConsumer] = [whole, tensors, *hashers.values(), *([counted] if counted else []),
                                          *(lines.consumers if lines else ())]
        scanner = structure_check = None
        if mode == plan.scan_path:
            scanner = ScanConsumer(plan.scan, plan.kernel) if plan.scan else None
            structure_check = StructureConsumer(f)
            consumers += [c for c in (scanner, structure_check) if c is not None]
        stats = read_pass(reader, consumers, stop=stop)
    f.check_unchanged(f"while it was read ({mode})")
    digests = {a: h.hexdigest() for a, h in hashers.items()}
    by_line, model_line = lines.results() if lines else (None, None)
    return PassObservation(mode=mode, read=PathRead(stats=stats, fingerprint=whole.hexdigest(), digests=digests),
                           observed=Observed(mode=mode, fingerprint=whole.hexdigest(), digests=digests,
                                             tensors=_tensor_results(f, tensors, plan.group_bytes),
                                             lines=by_line, model_line=model_line),
                           accs=None if scanner is None else scanner.results(),
                           structure=None if structure_check is None else tuple(structure_check.findings()))


def _judge_file(plan: FileCheckPlan, passes: Sequence[PassObservation]) -> FileCheck:
    f, expected = plan.file, plan.expected
    skipped = {p.mode: p.skipped for p in passes if p.skipped is not None}
    observed = [p.observed for p in passes if p.observed is not None]
    if not observed:
        raise NothingChecked(f.path, f"no read path could read it ({'; '.join(skipped.values())}): nothing was "
                                     "checked", field="modes")
    decision = decide_file(f.path, observed, published=plan.published,
                           manifest=expected.whole if expected else None,
                           expected_tensors=expected.tensors if expected else (), lines=plan.lines)
    return FileCheck(path=f.path, size=f.size, published=plan.published,
                     manifest=expected.whole if expected else None,
                     reads=tuple(p.read for p in passes if p.read is not None), skipped=skipped, decision=decision)


def _line_digests(f: GGUFFile, lines: ManifestLines | None) -> LineDigests | None:
    """The consumers of a llama-gguf-hash manifest's lines of ``f``: each tensor's of its line's type, and the
    model line's when it is compared."""
    if lines is None:
        return None
    model = lines.compared_model
    return LineDigests(f, {name: line.algorithm for name, line in lines.tensors.items()},
                       None if model is None else model.algorithm)




def _tensor_digests(f: GGUFFile, group_bytes: int) -> SegmentDigests:
    return SegmentDigests(Segment(str(i), t.offset, t.nbytes, max(1, rows_per_group(t.row_bytes, group_bytes)
                                                                   * t.row_bytes))
                          for i, t in enumerate(f.tensors))


def _tensor_results(f: GGUFFile, digests: SegmentDigests, group_bytes: int) -> tuple[TensorDigest, ...]:
    """Each tensor's digests as a manifest's entries, so the pure compare of verify compares them."""
    results = digests.results()
    name = os.path.basename(f.path)
    return tuple(TensorDigest(t.name, name, t.ggml_type.name, t.shape, t.offset, t.nbytes, t.row_bytes, t.n_rows,
                              rows_per_group(t.row_bytes, group_bytes), results[str(i)].digest,
                              results[str(i)].groups)
                 for i, t in enumerate(f.tensors))


def _scan_of(f: GGUFFile, scans: Sequence[ScanPlan]) -> tuple[Plan, ...]:
    """The scan plans of ``f``'s tensors that hold floats (of the first model that has any)."""
    return next((tuple(group) for scan in scans if (group := by_file(scan.plans).get(f.path))), ())


def _scan_report(plan: ScanPlan, accs: dict[str, dict[int, Acc]],
                 structure: dict[str, tuple[StructureFinding, ...]]) -> ScanReport:
    merged = {k: v for f in plan.model.files for k, v in accs.get(f.path, {}).items()}
    found = tuple(s for f in plan.model.files for s in structure.get(f.path, ()))
    total = sum(p.nbytes for p in plan.plans)
    return report_of(plan, merged, ScanStats(bytes=total, seconds=0.0, workers=0), found)
