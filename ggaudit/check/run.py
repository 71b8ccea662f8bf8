"""``ggaudit.check``: every byte of every file of a target through every read path, truth by evidence,
the verdict in words.

Per file, one pass per read path (buffered, mmap, direct), each feeding in the same read: the file's
xxh3-128 and each tensor's and row group's (every path), the expectations' algorithms (sha256, md5: once, on
the device's pass, else the first; a path that delivers other bytes is hashed again only then), and the scan of
stored values and structure (the mmap pass, the way engines read weights). :mod:`.decide` then says which
bytes are right.

Three steps, so :mod:`ggaudit.fleet` can run each pass as a task where the data lives: :func:`plan_check`
(the target's files and what each should be), :func:`observe_pass` (one file through one read path: what it
delivered, never its bytes) and :func:`judge` (the decisions and the verdict from every pass's observations).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import FormatError, GGAuditError, NothingChecked, ReadError, option_keywords, options_from
from ..format.layout import GGUFFile, HeaderRead, Model, open_model
from ..format.structure import StructureConsumer, StructureFinding, regions
from ..io.fan_out import ChunkConsumer, Progress
from ..io.hashing import Xxh3_128
from ..evidence.active import evict_and_read, first_difference, read_range
from ..io import direct_shares_cache
from ..evidence.paths import DEVICE, MODES, Mode, Source, digest_path, proof_order, read_path, source_of
from ..evidence.readers import DirectIOUnavailable, Reader, open_reader
from ..scan.kernel import Acc, Options, Plan, by_file
from ..scan.options import ScanOptions
from ..scan.run import ScanConsumer, ScanPlan, plan_scan, report_of
from ..scan.report import ScanReport, ScanStats
from ..stores.locate import Target, find_target, target_text
from ..stores.registry import Roots, Store
from ..verify.digests import Segment, SegmentDigest, SegmentDigests, published_hasher
from ..verify.manifests.llama_hash import FORMAT as LLAMA_HASH
from ..verify.manifests.llama_hash import (FilePlan, HashEntry, LineDigests, in_header_order, manifest_format,
                                           plan_llama_check, read_llama_hash)
from ..verify.manifests.tensor import (DEFAULT_GROUP_BYTES, TensorDigest, TensorManifest, read_tensor_manifest,
                                       rows_per_group)
from ..wording import joined
from ..stores.expected import WARNING, FileExpectations
from ..verify.walk.tensor_match import BY_CONTENT, BY_NAME, IN_PLACE, ManifestMatch, match_manifest
from ..verify.walk.tensors import compare_tensors
from .decide import decide_file
from .facts import (CACHE_VERIFIED, INTACT, MANIFEST, PUBLISHED, READ_PATH, UNVERIFIED, Conclusion, Eviction,
                    Expectation, FileDecision, LineDigest, ManifestLines, Needs, Observed, Probes)
from .expect import expectations_for, file_key
from .verdict import summarize
from .options import CheckOptions
from ..evidence.read_pass import read_pass
from .passes import PassBytes, beside
from .report import CheckReport, FileCheck, PathRead

__all__ = ["CheckPlan", "FileCheckPlan", "PassObservation", "check", "judge", "observe_pass", "plan_check"]

def check(target: Target, *, manifest: str | os.PathLike[str] | None = None, sums: str | os.PathLike[str] | None = None,
          sha256: str | None = None, store: str | os.PathLike[str] | None = None,
          hf_cache: str | os.PathLike[str] | None = None, modes: Mode | Collection[Mode] = MODES,
          anomalies: bool = False, evict: bool = True, options: CheckOptions | None = None,
          progress: Progress | None = None) -> CheckReport:
    """Read every byte of every file of ``target`` (a path, a store name, or a Model) through each read
    path and say, in words and as data, whether the file is intact, damaged, holds non-finite values, or
    is read differently by some path on this machine, and what decided it.

    The options are a :class:`ggaudit.check.options.CheckOptions` (``options=``) or its fields as these
    keyword parameters, not both.
    A filesystem that refuses direct I/O: that path is skipped (a warning) and the verdict names the paths
    compared. ``progress(done, total)``: bytes read of every file, once per read path.

    Raises:
        UsageError: an option of the wrong type or value, both ``options`` and keywords, one ``sha256`` for a
            target of several files, a name of no known store. Its subclass NothingChecked: a manifest naming
            nothing of the target, or a file no read path could read.
        FormatError: a file that is no well-formed GGUF or split set (naming the offset and the field).
        ReadError: a file that cannot be opened or read, or that changed while it was read. One the OS
            refused is also the standard exception of that error (``FileNotFoundError``, ``PermissionError``,
            else ``OSError``, with ``errno``, ``strerror`` and ``filename``).
        ManifestError: ``manifest``, ``sums`` or what a store says of the target cannot be read, is malformed
            or is unsafe; one the OS refused is also the standard exception, as above.
    """
    o = options_from(CheckOptions, options, option_keywords(CheckOptions, locals()))
    started = time.perf_counter()
    plan = plan_check(target, o)
    report = _read_and_judge(plan, progress, started)
    replan = {f.path: f.replanned for f in report.files if f.replanned is not None}
    if not replan:
        return report
    # The header the plan rests on is not what the passes decided: plan again from the bytes they delivered,
    # once (a plan that still disagrees then says so, and is not planned a third time).
    return _read_and_judge(plan_check(target, o, replan), progress, started)


def _read_and_judge(plan: CheckPlan, progress: Progress | None, started: float) -> CheckReport:
    counted = PassBytes.of(progress, sum(f.file.size for f in plan.files) * len(plan.modes))
    passes = [_observe_file(f, plan.modes, counted) for f in plan.files]
    return judge(plan, passes, seconds=time.perf_counter() - started)


@dataclass(frozen=True, kw_only=True)
class FileCheckPlan:
    """What every pass over one file needs, worked out once before the first: the file, the digests it
    should have (``lines``: a llama-gguf-hash manifest's, computed on every path), the path that computes the
    expectations' algorithms, and the scan of its tensors (on the ``scan_path`` pass: ``scan``, its plans, and
    ``kernel``, how they are scanned)."""

    file: GGUFFile
    published: tuple[Expectation, ...]
    expected: _Expected | None
    #: The one pass that computes the expectations' algorithms (sha256, md5): a path that delivers other bytes
    #: than it is hashed again only then (:func:`_rehash`, asked for by the decision).
    digest_path: str
    scan_path: str
    scan: tuple[Plan, ...]
    kernel: Options
    lines: ManifestLines | None = None
    #: Whether the eviction test may evict the pages where the page cache and the device differ.
    evict: bool = True
    #: Where each path's reads of the file come from, found before any pass (a probe's direct read of a page
    #: not cached must not meet the pages the page cache's passes bring in).
    sources: Mapping[str, Source] = field(default_factory=dict)
    #: What the store (or the manifest) says is wrong with the file before a byte is read: findings.
    problems: tuple[Conclusion, ...] = ()
    #: What the store only warns of (a file without download metadata, say).
    warnings: tuple[str, ...] = ()
    #: How the plan's header was read when it was not by positioned reads (the read path, and why: the first
    #: read of it was found wrong); None when it was.
    planned: Replanned | None = None

    @property
    def algorithms(self) -> list[str]:
        return sorted({e.algorithm for e in (*self.published, self.expected.whole if self.expected else None)
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


def plan_check(target: Target, o: CheckOptions, replan: Mapping[str, Replanned] | None = None) -> CheckPlan:
    """Open ``target``, find what its files should be (its store's digests, the manifest) and plan their
    passes: everything a check works out before it reads a tensor's bytes, locally or on ggaudit.fleet.
    ``replan``: the files whose headers are read again through another read path (their first plan's read
    was found wrong)."""
    planned: dict[str, Replanned] = dict(replan or {})
    text, store, models = _open(target, o, planned)
    files = [f for m in models for f in m.files]
    expectations = expectations_for(store, [f.path for f in files], o)
    manifest = _manifest(o.manifest)
    lines = _manifest_lines(manifest, files, o.manifest, text) if isinstance(manifest, tuple) else [None] * len(files)
    tensor_manifest = manifest if isinstance(manifest, TensorManifest) else None
    match = None if tensor_manifest is None else match_manifest(tensor_manifest, files, manifest_path=o.manifest,
                                                                target=text)
    scan_options = ScanOptions(anomalies=o.anomalies, workers=0)
    scans = tuple(plan_scan(m, scan_options) for m in models)
    modes = tuple(o.modes)      # CheckOptions keeps them as a tuple in the house order
    scan_path = next((m for m in modes if read_path(m).engines_read), modes[0])
    digest_on = digest_path(modes)
    return CheckPlan(target=text, store=store, modes=modes, scan_path=scan_path, scans=scans,
                     files=tuple(FileCheckPlan(file=f, published=_published(expectations[file_key(f.path)]),
                                          problems=_problems(expectations[file_key(f.path)],
                                                             match is not None and f.path in match.extra),
                                          warnings=tuple(f"{p.subject}: {p.detail}"
                                                         for p in expectations[file_key(f.path)].problems
                                                         if p.kind == WARNING),
                                          expected=_manifest_entry(tensor_manifest, match, f), lines=f_lines,
                                          digest_path=digest_on, scan_path=scan_path, scan=_scan_of(f, scans),
                                          kernel=scan_options.kernel, evict=o.evict, planned=planned.get(f.path),
                                          sources={m: source_of(m, f.path, _probed) for m in modes})
                                 for f, f_lines in zip(files, lines, strict=True)))


def judge(plan: CheckPlan, passes: Sequence[Sequence[PassObservation]], *, seconds: float) -> CheckReport:
    """The report from every file's passes (``passes[i]``: those of ``plan.files[i]``), however they were
    read: each file's decision, then the verdict of the whole target. Where the scan's path is decided wrong,
    the file is scanned again through a right path: what the file holds is what that read shows, and what
    the scan's path delivered is that path's (``through``)."""
    accs: dict[str, dict[int, Acc]] = {}
    structure: dict[str, tuple[StructureFinding, ...]] = {}
    through_accs: dict[str, dict[int, Acc]] = {}
    through_structure: dict[str, tuple[StructureFinding, ...]] = {}
    checked: list[FileCheck] = []
    for f, seen in zip(plan.files, passes, strict=True):
        found = _judge_file(f, seen)
        checked.append(found)
        scanned = next((p for p in seen if p.mode == plan.scan_path and p.observed is not None), None)
        again = _scanned_again(f, found.decision, scanned, {p.mode: p.observed for p in seen if p.observed})
        if again is not None and scanned is not None:
            through_accs[f.file.path], through_structure[f.file.path] = scanned.accs or {}, scanned.structure or ()
            scanned = again
        if scanned is not None:
            if scanned.accs is not None:
                accs[f.file.path] = scanned.accs
            if scanned.structure is not None:
                structure[f.file.path] = scanned.structure
    scans = tuple(_scan_report(p, accs, structure) for p in plan.scans)
    through = tuple(_scan_report(p, through_accs, through_structure) for p in plan.scans
                    if any(f.path in through_accs for f in p.model.files))
    return summarize(target=plan.target, store=plan.store, files=tuple(checked), modes=plan.modes, scans=scans,
                     scan_path=plan.scan_path, seconds=seconds, through=through)


def _scanned_again(plan: FileCheckPlan, decision: FileDecision, scanned: PassObservation | None,
                   first: dict[str, Observed]) -> PassObservation | None:
    """The scan of the file read again through a right path, when the scan's own path is decided wrong; None
    when it is not, or when that read delivered other bytes than the path's first (then nothing is swapped)."""
    if scanned is None or scanned.mode not in decision.wrong or not decision.right:
        return None
    mode = decision.right[0]
    f = plan.file
    try:
        with open_reader(f.path, mode) as reader:
            whole, (scanner, structure_check) = Xxh3_128(), _scan_consumers(plan)
            read_pass(reader, [whole, structure_check, *([scanner] if scanner else [])])
    except ReadError:
        return None
    f.check_unchanged(f"while it was scanned again ({mode})")
    if whole.hexdigest() != first[mode].fingerprint:
        return None
    return PassObservation(mode=mode, accs=None if scanner is None else scanner.results(),
                           structure=tuple(structure_check.findings()),
                           observed=Observed(mode=mode, fingerprint=whole.hexdigest()))


def _scan_consumers(plan: FileCheckPlan) -> tuple[ScanConsumer | None, StructureConsumer]:
    """What scans a pass's bytes: the stored values (None when the file holds no floats) and the structure."""
    return (ScanConsumer(plan.scan, plan.kernel) if plan.scan else None), StructureConsumer(plan.file)


def _probed(path: str) -> str | None:
    """Why direct reads of ``path`` come from the page cache: what its filesystem says, else what a direct read
    of a page not cached shows (it lands in the page cache)."""
    return direct_shares_cache.direct_shares_page_cache(path) or direct_shares_cache.probe_direct_fills_cache(path)


def _open(target: Target, o: CheckOptions, planned: dict[str, Replanned]) -> tuple[str, Store | None, list[Model]]:
    """The target's text as given, its store, and its models (a store's model, then its projector); a file in
    ``planned`` has its header read through the read path named there, and one whose header the first read
    cannot parse is read through the other paths before it is refused (``planned`` gains it)."""
    if isinstance(target, Model):
        return target.source, None, [target]
    text = target_text(target, "target")
    store = find_target(text, Roots(o.store, o.hf_cache), field="target")
    paths = [text] if store is None else store.model_files()
    return text, store, [_open_model(p, tuple(o.modes), planned) for p in paths]


@dataclass(frozen=True)
class Replanned:
    """A file whose plan was made from another read path's bytes (``mode``), and why (``conclusion``)."""

    mode: str
    conclusion: Conclusion


def _open_model(path: str, modes: Sequence[str], planned: dict[str, Replanned]) -> Model:
    """``path``'s model, each file's header read as ``planned`` says. When the first read of a header cannot be
    parsed, every other read path reads it too: a file no path reads as a GGUF is refused (the first error);
    one that another path reads is planned from that path's bytes, and the first read is said wrong."""
    def header_read(file: str) -> HeaderRead | None:
        return None if file not in planned else _reads_through(planned[file].mode)(file)
    try:
        return open_model(path, header_read if planned else None)
    except (FormatError, ReadError) as first:
        if isinstance(first, NothingChecked) or first.path is None:
            raise
        for mode in (m for m in proof_order(modes) if m != "buffered" and first.path not in planned):
            try:
                planned[first.path] = Replanned(mode, _unparsed(first, mode))
                return open_model(path, header_read)
            except (FormatError, ReadError):
                del planned[first.path]
        raise first from None


def _unparsed(err: GGAuditError, mode: str) -> Conclusion:
    return Conclusion(code="plan-read-differs",
                      text=f"the header as first read (positioned reads, to plan the check) is not one ggaudit can "
                           f"read ({err}), but read through {mode} it is: that first read delivered other bytes; the "
                           f"check was planned from the bytes {mode} reads delivered",
                      evidence={"path": mode, "offset": err.offset, "first": str(err)})


def _reads_through(mode: str) -> Callable[[str], HeaderRead]:
    """Header reads of a file through ``mode`` (a reader opened for each, as the parser asks for a window)."""
    def of(path: str) -> HeaderRead:
        def read(offset: int, n: int) -> bytes:
            with open_reader(path, mode) as reader:
                n = max(0, min(n, reader.size - offset))
                return read_range(reader, offset, n) if n else b""
        return read
    return of


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


#: How a file matched its manifest entry, in words after the entry's name (by name: nothing to add).
MATCHED_HOW = {BY_NAME: "", BY_CONTENT: " (its tensors are this file's, at the same offsets)",
               IN_PLACE: " (checked in its place: the manifest describes one file, of another name)"}


def _manifest_entry(manifest: TensorManifest | None, match: ManifestMatch | None, f: GGUFFile) -> _Expected | None:
    """The manifest's entry for ``f``, as verify matches it (:func:`match_manifest`: by its file name, else by
    content identity, a manifest made from ``model.gguf`` checked against the Ollama blob it was pulled as)."""
    if manifest is None or match is None:
        return None
    entry = match.files.get(f.path)
    if entry is None:
        return None
    whole = Expectation(algorithm="sha256", digest=entry.sha256, source=MANIFEST,
                        what=f"the manifest's sha256 of {entry.name}{MATCHED_HOW[match.how[f.path]]}")
    return _Expected(whole, tuple(t for t in manifest.tensors if t.file == entry.name), manifest.group_bytes)


def _published(found: FileExpectations) -> tuple[Expectation, ...]:
    return tuple(Expectation(algorithm=e.algorithm, digest=e.digest, source=PUBLISHED, what=e.what, note=e.note)
                 for e in found.expected)


def _problems(found: FileExpectations, extra: bool) -> tuple[Conclusion, ...]:
    """What the store says is wrong with the file (as verify says it: a finding), and a file of the target the
    manifest gives no entry (verify's ``file-extra``)."""
    said = [Conclusion(code="store-problem", text=f"{p.subject}: {p.detail}",
                       evidence={"kind": p.kind, "subject": p.subject, "detail": p.detail})
            for p in found.problems if p.kind != WARNING]
    if extra:
        said.append(Conclusion(code="file-extra", text="the manifest gives this file of the target no entry: its "
                                                       "bytes were not compared with it",
                               evidence={}))
    return tuple(said)


def _observe_file(plan: FileCheckPlan, modes: Sequence[str], counted: PassBytes | None = None) -> list[PassObservation]:
    """Every pass over one file, in the order of ``modes``. The device's pass waits on the device and the others
    read the page cache, so it runs beside them: the device's time is spent while the CPU hashes and scans what
    the page cache delivers, not after it. (O_DIRECT reads the device whatever the page cache holds meanwhile.)
    The device's path is opened first: where the filesystem refuses direct I/O, the expectations' algorithms
    ride on the first page-cache pass instead."""
    device = next((m for m in modes if read_path(m).reads == DEVICE), None)
    if device is None or len(modes) == 1:
        return [observe_pass(plan, mode, counted=counted) for mode in modes]
    cached = [mode for mode in modes if mode != device]
    try:
        opened: Reader | None = open_reader(plan.file.path, device)
    except DirectIOUnavailable as err:
        on_cache = replace(plan, digest_path=cached[0]) if plan.digest_path == device else plan
        found = {device: _skipped(plan, device, err, counted),
                 **{mode: observe_pass(on_cache, mode, counted=counted) for mode in cached}}
        return [found[mode] for mode in modes]
    except ReadError:
        opened = None       # opened again in its pass, failing there in the order the passes are planned in
    beside_them, others = beside(lambda stop: observe_pass(plan, device, stop=stop, counted=counted, opened=opened),
                                 lambda: [observe_pass(plan, mode, counted=counted) for mode in cached])
    found = {**dict(zip(cached, others, strict=True)), device: beside_them}
    return [found[mode] for mode in modes]


def _skipped(plan: FileCheckPlan, mode: str, err: DirectIOUnavailable, counted: PassBytes | None) -> PassObservation:
    if counted is not None:
        counted.skip(plan.file.size)
    return PassObservation(mode=mode, skipped=err.message)


def observe_pass(plan: FileCheckPlan, mode: str, *, stop: threading.Event | None = None,
                 counted: PassBytes | None = None, opened: Reader | None = None) -> PassObservation:
    """Read every byte of ``plan``'s file once through ``mode``, feeding in the same read its xxh3-128, each
    tensor's and row group's, the expectations' algorithms (on the digest path) and the scan and structure
    checks (on the scan path). A filesystem that refuses direct I/O: the pass is skipped, and says why.
    ``stop``, once set, ends the pass at its next chunk (PassStopped): the pass beside it failed. ``counted``:
    the check's byte count (progress), fed the bytes this pass reads. ``opened``: the path's reader, opened
    already (this pass closes it)."""
    f = plan.file
    try:
        reader = opened or open_reader(f.path, mode)
    except DirectIOUnavailable as err:
        return _skipped(plan, mode, err, counted)
    with reader:
        whole, spans = Xxh3_128(), _span_digests(f, plan.group_bytes)
        hashers = {a: published_hasher(a, f.size) for a in plan.algorithms} if mode == plan.digest_path else {}
        lines = _line_digests(f, plan.lines)      # every path: the lines decide which path is right
        consumers: list[ChunkConsumer] = [whole, spans, *hashers.values(),
                                          *([counted] if counted else []), *(lines.consumers if lines else ())]
        scanner = structure_check = None
        if mode == plan.scan_path:
            scanner, structure_check = _scan_consumers(plan)
            consumers += [c for c in (scanner, structure_check) if c is not None]
        stats = read_pass(reader, consumers, stop=stop)
    f.check_unchanged(f"while it was read ({mode})")
    digests = {a: h.hexdigest() for a, h in hashers.items()}
    by_line, model_line = lines.results() if lines else (None, None)
    source = plan.sources.get(mode) or source_of(mode, f.path)
    found = spans.results()
    return PassObservation(mode=mode, read=PathRead(stats=stats, fingerprint=whole.hexdigest(), digests=digests),
                           observed=Observed(mode=mode, fingerprint=whole.hexdigest(), digests=digests,
                                             tensors=_tensor_results(f, found, plan.group_bytes),
                                             lines=by_line, model_line=model_line,
                                             regions={span: found[f"r{span[0]}+{span[1]}"].digest
                                                      for span in _regions(f)},
                                             header=tuple(found[f"h{i}"].digest for i in range(len(f.header_reads))),
                                             source="" if source.why is None else source.reads,
                                             source_why=source.why),
                           accs=None if scanner is None else scanner.results(),
                           structure=None if structure_check is None else tuple(structure_check.findings()))


def _judge_file(plan: FileCheckPlan, passes: Sequence[PassObservation]) -> FileCheck:
    """The file's decision from its passes, and the active tests it asks for made (a second read hashed, the
    eviction test), deciding again with what they found."""
    f, expected = plan.file, plan.expected
    skipped = {p.mode: p.skipped for p in passes if p.skipped is not None}
    observed = [p.observed for p in passes if p.observed is not None]
    if not observed:
        raise NothingChecked(f.path, f"no read path could read it ({'; '.join(skipped.values())}): nothing was "
                                     "checked", field="modes")

    def decided(tested: Probes | None) -> FileDecision:
        return decide_file(f.path, observed, published=plan.published, manifest=expected.whole if expected else None,
                           expected_tensors=expected.tensors if expected else (), lines=plan.lines, tested=tested,
                           skipped=next(iter(skipped.values()), None))

    decision = decided(None)
    for _ in range(2):      # the second read's hash may leave the eviction test to make
        if not decision.needs:
            break
        decision = decided(_tested(plan, observed, decision.needs, decision.tested))
    decision = _first_difference(plan, observed, decision)
    unconfirmed = _header_unconfirmed(f, observed, decision)
    notes = [c for c in (plan.planned.conclusion if plan.planned else None,
                         unconfirmed.conclusion if unconfirmed else None) if c is not None]
    if plan.problems:
        decision = replace(decision, conclusions=(*plan.problems, *decision.conclusions))
    if notes:     # a read delivered wrong bytes of the header: a read path of this machine, whatever the file is
        verdict = READ_PATH if decision.verdict in (INTACT, CACHE_VERIFIED, UNVERIFIED) else decision.verdict
        decision = replace(decision, verdict=verdict, conclusions=(*notes, *decision.conclusions))
    return FileCheck(path=f.path, size=f.size, published=plan.published[0] if plan.published else None,
                     expectations=plan.published, manifest=expected.whole if expected else None,
                     reads=tuple(p.read for p in passes if p.read is not None), skipped=skipped, decision=decision,
                     warnings=plan.warnings,
                     replanned=unconfirmed if unconfirmed and unconfirmed.mode and plan.planned is None else None)


def _first_difference(plan: FileCheckPlan, observed: Sequence[Observed], decision: FileDecision) -> FileDecision:
    """The decision with the exact first byte where the paths of its read-path-differs conclusion differ
    (``first``: the offset, and the tensor and row holding it), found by reading the spans whose digests
    differ through one path of each side; unchanged when there is none, or when they now read alike."""
    by_mode = {o.mode: o for o in observed}
    said = list(decision.conclusions)
    for i, c in enumerate(said):
        right = next((m for m in c.evidence.get("agree", ()) if m in by_mode), None)
        wrong = next((m for m in c.evidence.get("paths", ()) if m in by_mode), None)
        if c.code != "read-path-differs" or right is None or wrong is None:
            continue
        try:
            with open_reader(plan.file.path, right) as a, open_reader(plan.file.path, wrong) as b:
                found = first_difference(a, b, _differing_spans(by_mode[right], by_mode[wrong]))
        except ReadError:
            return decision         # the evidence stands without it: the spans are said already
        plan.file.check_unchanged("while where its paths differ was read again")
        if found is not None:
            said[i] = replace(c, evidence={**c.evidence, "first": _placed(plan.file, found[0])})
        return replace(decision, conclusions=tuple(said))
    return decision


def _placed(f: GGUFFile, offset: int) -> dict[str, Any]:
    """An absolute offset of ``f`` with the tensor and row holding it (None for bytes no tensor owns)."""
    t = next((t for t in f.tensors if t.offset <= offset < t.offset + t.nbytes), None)
    return {"offset": offset, "tensor": None if t is None else t.name,
            "row": None if t is None else (offset - t.offset) // t.row_bytes}


def _header_unconfirmed(f: GGUFFile, observed: Sequence[Observed], decision: FileDecision) -> Replanned | None:
    """Whether the header the plan was parsed from is the header the passes delivered: the right paths' (or,
    nothing decided, every path's when they agree on it). When it is not, the plan's read was wrong: the file
    is planned again from what the first of those paths delivered."""
    planned = tuple(d for _, _, d in f.header_reads)
    by_mode = {o.mode: o for o in observed}
    agreeing = decision.right or (tuple(by_mode) if len({o.header for o in observed}) == 1 else ())
    if not agreeing or by_mode[agreeing[0]].header == planned:
        return None
    seen = by_mode[agreeing[0]].header
    i = next(i for i, (a, b) in enumerate(zip(planned, seen, strict=True)) if a != b)
    offset, length, _ = f.header_reads[i]
    used = offset < f.header_end
    text = (f"the read the check was planned from (positioned reads of the header) delivered other bytes at offsets "
            f"{offset}-{offset + length - 1} than {joined(agreeing)} reads did: that read was wrong; "
            + (f"the check was planned again from the bytes {agreeing[0]} reads delivered" if used else
               "they lie past the header, so the plan it made is right"))
    return Replanned(agreeing[0] if used else "", Conclusion(
        code="plan-read-differs", text=text,
        evidence={"path": agreeing[0], "offset": offset, "length": length, "paths": list(agreeing),
                  "planned_again": used}))


def _tested(plan: FileCheckPlan, observed: Sequence[Observed], needs: Needs, before: Probes | None) -> Probes:
    """What the tests ``needs`` asks for found, added to what was found ``before``."""
    rehashed: dict[str, Observed | str] = dict(before.rehashed) if before else {}
    for mode in needs.rehash:
        rehashed[mode] = _rehash(plan, mode)
    eviction = before.eviction if before else None
    if needs.evict is not None:
        eviction = _eviction(plan, {o.mode: o for o in observed}, *needs.evict)
    return Probes(rehashed=rehashed, eviction=eviction)


def _rehash(plan: FileCheckPlan, mode: str) -> Observed | str:
    """A second whole read through ``mode``, hashed with the expectations' algorithms; or why it gave none."""
    f = plan.file
    try:
        with open_reader(f.path, mode) as reader:
            whole, hashers = Xxh3_128(), {a: published_hasher(a, f.size) for a in plan.algorithms}
            read_pass(reader, [whole, *hashers.values()])
    except ReadError as err:
        return f"its second read failed: {err}"
    f.check_unchanged(f"while it was read again ({mode})")
    return Observed(mode=mode, fingerprint=whole.hexdigest(), digests={a: h.hexdigest() for a, h in hashers.items()})


def _eviction(plan: FileCheckPlan, by_mode: dict[str, Observed], cached: str, device: str) -> Eviction:
    """The eviction test between the page-cache path ``cached`` and the device's ``device``: where they first
    differ, that page evicted and read again through ``cached``, now from the device."""
    if not plan.evict:
        return Eviction(cached=cached, device=device, offset=None, outcome=None,
                        why="not made (--no-evict): nothing was evicted")
    f = plan.file
    spans = _differing_spans(by_mode[cached], by_mode[device])
    try:
        with open_reader(f.path, cached) as a, open_reader(f.path, device) as b:
            found = first_difference(a, b, spans)
        if found is None:       # the device's path, read again, delivers the page cache's bytes now
            return Eviction(cached=cached, device=device, offset=None, outcome="gone",
                            why=f"read again, {device} reads deliver the bytes {cached} reads did: their first "
                                "read was wrong once")
        first, page_cache, from_device = found
        page = first - first % len(page_cache) if page_cache else first
        after = evict_and_read(f.path, page, len(page_cache), lambda p: open_reader(p, cached))
    except ReadError as err:
        return Eviction(cached=cached, device=device, offset=None, outcome=None, why=f"a read failed: {err}")
    f.check_unchanged("while its pages were evicted and read again")
    at = first - page
    hexed = (page_cache[at:at + 16].hex(" "), from_device[at:at + 16].hex(" "))
    if after.data is None:
        return Eviction(cached=cached, device=device, offset=first, outcome=None, why=after.why,
                        cached_hex=hexed[0], device_hex=hexed[1])
    outcome = "page-cache" if after.data == page_cache else "device" if after.data == from_device else "neither"
    return Eviction(cached=cached, device=device, offset=first, outcome=outcome, cached_hex=hexed[0],
                    device_hex=hexed[1], after_hex=after.data[at:at + 16].hex(" "))


def _differing_spans(a: Observed, b: Observed) -> list[tuple[int, int]]:
    """Where two paths' digests differ: the tensors' row groups, and the runs of bytes no tensor owns."""
    spans = [(m.offset, m.length) for m in compare_tensors(a.tensors, b.tensors, "")
             if m.offset is not None and m.length is not None]
    spans += [span for span, digest in a.regions.items() if b.regions.get(span) != digest]
    return spans


def _line_digests(f: GGUFFile, lines: ManifestLines | None) -> LineDigests | None:
    """The consumers of a llama-gguf-hash manifest's lines of ``f``: each tensor's of its line's type, and the
    model line's when it is compared."""
    if lines is None:
        return None
    model = lines.compared_model
    return LineDigests(f, {name: line.algorithm for name, line in lines.tensors.items()},
                       None if model is None else model.algorithm)




def _regions(f: GGUFFile) -> list[tuple[int, int]]:
    """The runs of bytes no tensor owns, by offset and length: the header, then each region the structure
    check walks (padding, gaps, trailing data)."""
    return [(0, f.header_end), *((r.start, r.end - r.start) for r in regions(f))]


def _span_digests(f: GGUFFile, group_bytes: int) -> SegmentDigests:
    """One consumer (one thread of the pass) for every span a pass digests: each tensor with its row groups
    (key ``i``), each run of bytes no tensor owns (``rO+N``) and each read the plan's header was parsed from
    (``hI``)."""
    tensors = (Segment(str(i), t.offset, t.nbytes, max(1, rows_per_group(t.row_bytes, group_bytes) * t.row_bytes))
               for i, t in enumerate(f.tensors))
    unowned = (Segment(f"r{o}+{n}", o, n, max(n, 1)) for o, n in _regions(f))
    header = (Segment(f"h{i}", o, n, max(n, 1)) for i, (o, n, _) in enumerate(f.header_reads))
    return SegmentDigests([*tensors, *unowned, *header])


def _tensor_results(f: GGUFFile, results: Mapping[str, SegmentDigest], group_bytes: int) -> tuple[TensorDigest, ...]:
    """Each tensor's digests as a manifest's entries, so the pure compare of verify compares them."""
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
