"""``ggaudit.check``: every byte of every file of a target through every read path, truth by evidence,
the verdict in words.

Per file, one pass per read path (buffered, mmap, direct), each feeding in the same read: the file's
xxh3-128 and each tensor's and row group's (every path), the expectations' algorithms (sha256, md5: on
buffered and direct, the paths compared with a published digest), and the scan of stored values and
structure (the mmap pass, the way engines read weights). :mod:`.decide` then says which bytes are right.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import NothingChecked, UsageError, options_from
from ..format.layout import GGUFFile, Model, open_model
from ..format.structure import StructureConsumer, StructureFinding
from ..io import ChunkConsumer, Hasher, Sha256, Xxh3_128
from ..rows.readers import DirectIOUnavailable, open_reader
from ..scan.kernel import Acc, by_file
from ..scan.options import ScanOptions
from ..scan.run import ScanConsumer, ScanPlan, plan_scan, report_of
from ..scan.report import ScanReport, ScanStats
from ..stores.locate import Target, target_text
from ..stores.registry import Roots, Store, find_store
from ..verify.digests import GitBlobSha1, Segment, SegmentDigests
from ..verify.manifests.llama_hash import FORMAT as LLAMA_HASH
from ..verify.manifests.llama_hash import manifest_format
from ..verify.manifests.tensor import (DEFAULT_GROUP_BYTES, TensorDigest, TensorManifest, read_tensor_manifest,
                                       rows_per_group)
from .decide import MANIFEST, Expectation, Observed, decide_file
from .expect import file_key, published_digests
from .verdict import summarize
from .options import CheckOptions
from .passes import read_pass
from .report import CheckReport, FileCheck, PathRead

__all__ = ["check"]

#: The paths a published digest is compared on: the page cache's reference read and the device's.
DIGEST_PATHS = ("buffered", "direct")


def check(target: Target, *, options: CheckOptions | None = None, **keywords: Any) -> CheckReport:
    """Read every byte of every file of ``target`` (a path, a store name, or a Model) through each read
    path and say, in words and as data, whether the file is intact, damaged, holds non-finite values, or
    is read differently by some path on this machine, and what decided it.

    The options are a :class:`ggaudit.check.options.CheckOptions` (``options=``) or its fields as keywords.
    A filesystem that refuses direct I/O: that path is skipped (a warning) and the verdict names the paths
    compared. Raises UsageError for bad input, ReadError for an unreadable file.
    """
    o = options_from(CheckOptions, options, keywords)
    started = time.perf_counter()
    text, store, models = _open(target, o)
    files = [f for m in models for f in m.files]
    published = published_digests(store, [f.path for f in files], o)
    manifest = _manifest(o.manifest)
    plans = [plan_scan(m, ScanOptions(anomalies=o.anomalies, workers=0)) for m in models]
    modes = tuple(o.modes)      # CheckOptions keeps them as a tuple in the house order
    scan_path = "mmap" if "mmap" in modes else modes[0]
    checked: list[FileCheck] = []
    accs: dict[str, dict[int, Acc]] = {}
    structure: dict[str, tuple[StructureFinding, ...]] = {}
    for f in files:
        expected = _manifest_entry(manifest, f, len(files))
        checked.append(_check_file(f, modes, scan_path, published.get(file_key(f.path)), expected, plans,
                                   accs, structure))
    scans = tuple(_scan_report(p, accs, structure) for p in plans)
    return summarize(target=text, store=store, files=tuple(checked), modes=modes, scans=scans,
                     scan_path=scan_path, seconds=time.perf_counter() - started)


def _open(target: Target, o: CheckOptions) -> tuple[str, Store | None, list[Model]]:
    """The target's text as given, its store, and its models (a store's model, then its projector)."""
    if isinstance(target, Model):
        return target.source, None, [target]
    text = target_text(target, "target")
    store = find_store(text, Roots(o.store, o.hf_cache), field="target")
    paths = [text] if store is None else store.model_files()
    return text, store, [open_model(p) for p in paths]


def _manifest(path: str | os.PathLike[str] | None) -> TensorManifest | None:
    if path is None:
        return None
    if manifest_format(path) == LLAMA_HASH:
        raise UsageError(path, "is llama-gguf-hash lines: check takes ggaudit's tensor manifest (`ggaudit manifest`); "
                               "`ggaudit verify --manifest` checks against these", field="manifest")
    return read_tensor_manifest(path)


@dataclass(frozen=True)
class _Expected:
    """A tensor manifest's entry for one file: its whole-file digest and its tensors'."""

    whole: Expectation
    tensors: tuple[TensorDigest, ...]
    group_bytes: int


def _manifest_entry(manifest: TensorManifest | None, f: GGUFFile, n_files: int) -> _Expected | None:
    """The manifest's entry for ``f``: by its file name, or (a manifest of one file, a target of one file: an
    Ollama blob renamed) the one entry."""
    if manifest is None:
        return None
    name = os.path.basename(f.path)
    entry = next((e for e in manifest.files if e.name == name), None)
    if entry is None and len(manifest.files) == 1 and n_files == 1:
        entry = manifest.files[0]
    if entry is None:
        return None
    whole = Expectation(algorithm="sha256", digest=entry.sha256, source=MANIFEST,
                        what=f"the manifest's sha256 of {entry.name}")
    return _Expected(whole, tuple(t for t in manifest.tensors if t.file == entry.name), manifest.group_bytes)


def _check_file(f: GGUFFile, modes: Sequence[str], scan_path: str, published: Expectation | None,
                expected: _Expected | None, plans: Sequence[ScanPlan], accs: dict[str, dict[int, Acc]],
                structure: dict[str, tuple[StructureFinding, ...]]) -> FileCheck:
    algorithms = sorted({e.algorithm for e in (published, expected.whole if expected else None) if e is not None})
    digest_paths = [m for m in modes if m in DIGEST_PATHS] or list(modes[:1])
    reads: list[PathRead] = []
    observed: list[Observed] = []
    skipped: dict[str, str] = {}
    group_bytes = expected.group_bytes if expected else DEFAULT_GROUP_BYTES
    for mode in modes:
        try:
            reader = open_reader(f.path, mode)
        except DirectIOUnavailable as err:
            skipped[mode] = err.message
            continue
        with reader:
            whole, tensors = Xxh3_128(), _tensor_digests(f, group_bytes)
            hashers = {a: _hasher(a, f.size) for a in algorithms} if mode in digest_paths else {}
            consumers: list[ChunkConsumer] = [whole, tensors, *hashers.values()]
            scanner = structure_check = None
            if mode == scan_path:
                scanner, structure_check = _scanner(f, plans), StructureConsumer(f)
                consumers += [c for c in (scanner, structure_check) if c is not None]
            stats = read_pass(reader, consumers)
        f.check_unchanged(f"while it was read ({mode})")
        digests = {a: h.hexdigest() for a, h in hashers.items()}
        reads.append(PathRead(stats=stats, fingerprint=whole.hexdigest(), digests=digests))
        observed.append(Observed(mode=mode, fingerprint=whole.hexdigest(), digests=digests,
                                 tensors=_tensor_results(f, tensors, group_bytes)))
        if scanner is not None:
            accs[f.path] = scanner.results()
        if structure_check is not None:
            structure[f.path] = tuple(structure_check.findings())
    if not observed:
        raise NothingChecked(f.path, f"no read path could read it ({'; '.join(skipped.values())}): nothing was "
                                     "checked", field="modes")
    decision = decide_file(f.path, observed, published=published, manifest=expected.whole if expected else None,
                           expected_tensors=expected.tensors if expected else ())
    return FileCheck(path=f.path, size=f.size, published=published, manifest=expected.whole if expected else None,
                     reads=tuple(reads), skipped=skipped, decision=decision)


def _hasher(algorithm: str, size: int) -> Hasher:
    if algorithm == "sha256":
        return Sha256()
    if algorithm == "git-sha1":
        return GitBlobSha1(size)
    if algorithm == "md5":
        return Hasher(hashlib.md5(usedforsecurity=False))
    raise UsageError(None, f"no hasher for the published algorithm {algorithm!r}", field="algorithm")


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


def _scanner(f: GGUFFile, plans: Sequence[ScanPlan]) -> ScanConsumer | None:
    for plan in plans:
        group = by_file(plan.plans).get(f.path)
        if group:
            return ScanConsumer(group, plan.options.kernel)
    return None


def _scan_report(plan: ScanPlan, accs: dict[str, dict[int, Acc]],
                 structure: dict[str, tuple[StructureFinding, ...]]) -> ScanReport:
    merged = {k: v for f in plan.model.files for k, v in accs.get(f.path, {}).items()}
    found = tuple(s for f in plan.model.files for s in structure.get(f.path, ()))
    total = sum(p.nbytes for p in plan.plans)
    return report_of(plan, merged, ScanStats(bytes=total, seconds=0.0, workers=0), found)
