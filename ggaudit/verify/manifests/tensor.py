"""ggaudit's own tensor manifest: per file its size and sha256, per tensor and per group of whole rows
an xxh3-128, built in one read of each file; written and read back as versioned JSON."""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Sequence

from ..._version import __version__
from ...io.fan_out import ChunkConsumer, Progress, read_through
from ...io.hashing import Sha256
from ...io.opening import fs_path
from ...io.output_files import write_output_file
from ..digests import Segment, SegmentDigests, Tally
from ...errors import ManifestError, UsageError
from ...format.blocks import GGMLQuantizationType
from ...format.layout import GGUFFile, Model, open_model
from ...stores.locate import Target, resolve_model
from ...untrusted import quote, shorten
from ...stores.small_files import is_count, load_json

log = logging.getLogger(__name__)

MANIFEST_FORMAT = "ggaudit-tensor-manifest"
MANIFEST_VERSION = 1
DEFAULT_GROUP_BYTES = 1 << 20


@dataclass(frozen=True)
class ManifestFile:
    """A file a tensor manifest names: its base name, size and sha256 (its tensors are TensorDigests)."""

    name: str           # base name of the file (shards of a split set share a folder)
    size: int
    sha256: str


@dataclass(frozen=True)
class TensorDigest:
    name: str
    file: str           # base name of the file holding it
    ggml_type: str
    shape: tuple[int, ...]
    offset: int         # absolute file offset of the data
    nbytes: int
    row_bytes: int
    n_rows: int
    rows_per_group: int
    xxh3_128: str
    groups: tuple[str, ...]

    def group_rows(self, group: int) -> tuple[int, int]:
        """First and last row (inclusive) covered by row group ``group``."""
        first = group * self.rows_per_group
        return first, min(first + self.rows_per_group, self.n_rows) - 1

    def group_span(self, group: int) -> tuple[int, int]:
        """Absolute file offset and length of row group ``group``."""
        start = group * self.rows_per_group * self.row_bytes
        return self.offset + start, min(self.rows_per_group * self.row_bytes, self.nbytes - start)


@dataclass(frozen=True)
class TensorManifest:
    group_bytes: int
    files: tuple[ManifestFile, ...]
    tensors: tuple[TensorDigest, ...]
    created_by: str = ""
    version: int = MANIFEST_VERSION


def rows_per_group(row_bytes: int, group_bytes: int = DEFAULT_GROUP_BYTES) -> int:
    """Whole rows per group: as many as fit in ``group_bytes``, at least one."""
    return max(1, group_bytes // row_bytes) if row_bytes > 0 else 1


def digest_gguf_file(gguf_file: GGUFFile, group_bytes: int = DEFAULT_GROUP_BYTES,
                     extra: Sequence[ChunkConsumer] = (), *,
                     progress: Progress | None = None) -> tuple[ManifestFile, tuple[TensorDigest, ...]]:
    """sha256 of one GGUF file and xxh3-128 of each of its tensors and row groups, in ONE read.

    ``extra`` chunk consumers (a scanner, say) ride along on the same read. ``progress(done, total)``:
    bytes of the file read.
    """
    tensors = gguf_file.tensors
    sha = Sha256()
    plan = [(t, rows_per_group(t.row_bytes, group_bytes)) for t in tensors]
    segments = SegmentDigests(Segment(str(i), t.offset, t.nbytes, max(1, rpg * t.row_bytes))
                              for i, (t, rpg) in enumerate(plan))
    read_through(gguf_file.path, [sha, segments, *extra], end=gguf_file.size, progress=progress)
    gguf_file.check_unchanged("while it was being read")
    results = segments.results()
    name = os.path.basename(gguf_file.path)
    digests = tuple(
        TensorDigest(t.name, name, t.ggml_type.name, t.shape, t.offset, t.nbytes, t.row_bytes, t.n_rows, rpg,
                     results[str(i)].digest, results[str(i)].groups)
        for i, (t, rpg) in enumerate(plan))
    return ManifestFile(name, gguf_file.size, sha.hexdigest()), digests


def build_tensor_manifest(model: Target | Sequence[Target], *, group_bytes: int = DEFAULT_GROUP_BYTES,
                          store: str | os.PathLike[str] | None = None,
                          hf_cache: str | os.PathLike[str] | None = None,
                          progress: Progress | None = None) -> TensorManifest:
    """The tensor manifest of a model (a file or a split set), each file read once.

    ``model`` is a path, ``ollama:NAME`` (its model layer and, if it has one, its projector),
    ``hf:ORG/NAME``, a Model, or a sequence of those (``store`` and ``hf_cache``: where those names are
    looked up, by default the usual places). Several models (an Ollama model and its projector,
    say) make one manifest of all their files; tensors are matched per file, so the same tensor name in
    two files is fine. ``progress(done, total)``: bytes read of the bytes of every file.

    Raises:
        UsageError: ``group_bytes`` below 1 or of the wrong type, a name of no known store.
        FormatError: a file that is no well-formed GGUF or split set (naming the offset and the field).
        ReadError: a file that cannot be opened or read, or that changed while it was read. One the OS
            refused is also the standard exception of that error (``FileNotFoundError``, ``PermissionError``,
            else ``OSError``, with ``errno``, ``strerror`` and ``filename``).
        ManifestError: what a store says of a name (an Ollama manifest) is missing, malformed or unsafe.
    """
    if not is_count(group_bytes, 1):    # 0 or less would make no groups (or endless ones)
        raise UsageError(None, f"must be a positive integer, not {group_bytes!r}", field="group_bytes")
    models = [m for t in _targets(model) for m in _open_all(t, store, hf_cache)]
    files: list[ManifestFile] = []
    tensors: list[TensorDigest] = []
    unique = {os.path.basename(f.path): f for m in models for f in m.files}   # the same file given twice: once
    tally = Tally(progress)
    tally.plan(sum(f.size for f in unique.values()))
    for gguf_file in (f for m in models for f in m.files):
        if any(f.name == os.path.basename(gguf_file.path) for f in files):
            continue  # the same file given twice is listed once
        file_digest, tensor_digests = digest_gguf_file(gguf_file, group_bytes, progress=tally.part())
        files.append(file_digest)
        tensors.extend(tensor_digests)
    return TensorManifest(group_bytes, tuple(files), tuple(tensors), f"ggaudit {__version__}")


def _targets(model: Target | Sequence[Target]) -> list[Target]:
    if isinstance(model, (Model, str, os.PathLike)):
        return [model]
    if isinstance(model, Sequence):
        return list(model)
    raise UsageError(None, f"must be a path, a store name, a Model or a sequence of them, not "
                           f"{type(model).__name__}", field="model")


def _open_all(target: Target, store: str | os.PathLike[str] | None,
              hf_cache: str | os.PathLike[str] | None) -> list[Model]:
    """Every model ``target`` names: an Ollama model is its weights and its projector."""
    if isinstance(target, Model):
        return [target]
    return [open_model(path) for path in resolve_model(fs_path(target), store=store, hf_cache=hf_cache)]


def tensor_manifest_to_json(manifest: TensorManifest) -> dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "version": manifest.version,
        "created_by": manifest.created_by,
        "hash": {"file": "sha256", "tensor": "xxh3-128", "row_group": "xxh3-128"},
        "row_group_bytes": manifest.group_bytes,
        "files": [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in manifest.files],
        "tensors": [{"name": t.name, "file": t.file, "type": t.ggml_type, "shape": list(t.shape),
                     "offset": t.offset, "nbytes": t.nbytes, "row_bytes": t.row_bytes,
                     "n_rows": t.n_rows, "rows_per_group": t.rows_per_group,
                     "xxh3_128": t.xxh3_128, "row_groups": list(t.groups)}
                    for t in manifest.tensors],
    }


def tensor_manifest_text(manifest: TensorManifest) -> str:
    """The manifest as the text a manifest file holds (what ``-o -`` prints)."""
    return json.dumps(tensor_manifest_to_json(manifest), indent=1) + "\n"


def write_tensor_manifest(manifest: TensorManifest, path: str | os.PathLike[str], *, replace: bool = False,
                          inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Write the manifest as JSON, atomically: a temporary file in the same folder, flushed to disk, then
    renamed over ``path``. An existing ``path`` is refused unless ``replace``, and is never one of
    ``inputs`` (the files the manifest describes, however they are named) nor anything but a file.

    Raises:
        UsageError: ``path`` exists (without ``replace``), is one of ``inputs`` or no regular file, or its
            folder cannot be written to.
        OSError: writing the file failed (a full disk); ``path`` is then left as it was.
    """
    write_output_file(tensor_manifest_text(manifest), path, replace=replace, inputs=inputs)


def read_tensor_manifest(path: str | os.PathLike[str]) -> TensorManifest:
    """Parse and validate a tensor manifest; anything malformed is a ManifestError naming the field."""
    src = Path(path)
    doc = load_json(src, "tensor manifest")
    check = _Checker(src)
    check.that(isinstance(doc, dict), "format", "not a JSON object")
    check.that(doc.get("format") == MANIFEST_FORMAT, "format", f"is not {MANIFEST_FORMAT!r}")
    check.that(doc.get("version") == MANIFEST_VERSION, "version",
               f"{shorten(repr(doc.get('version')))} is not supported (this ggaudit reads {MANIFEST_VERSION})")
    group_bytes = check.count(doc, "row_group_bytes", "", positive=True)
    files = tuple(_file_entry(check, e, f"files[{i}]") for i, e in enumerate(check.list(doc, "files")))
    tensors = tuple(_tensor_entry(check, e, f"tensors[{i}]")
                    for i, e in enumerate(check.list(doc, "tensors")))
    _check_tensor_files(check, files, tensors)
    created_by = doc.get("created_by", "")
    return TensorManifest(group_bytes, files, tensors,
                          created_by if isinstance(created_by, str) else "", MANIFEST_VERSION)


class _Checker:
    """Small helpers that turn a malformed JSON field into a ManifestError naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def that(self, ok: bool, field: str, message: str) -> None:
        if not ok:
            raise ManifestError(self.path, message, field=field)

    def count(self, obj: dict[str, Any], key: str, where: str, positive: bool = False) -> int:
        value = obj.get(key)
        if not is_count(value, 1 if positive else 0):
            raise ManifestError(self.path, f"{shorten(repr(value))} is not a "
                                f"{'positive' if positive else 'non-negative'} integer", field=f"{where}{key}")
        return value

    def text(self, obj: dict[str, Any], key: str, where: str) -> str:
        value = obj.get(key)
        if not isinstance(value, str):
            raise ManifestError(self.path, "is not a string", field=f"{where}{key}")
        return value

    def hexdigest(self, obj: dict[str, Any], key: str, where: str, digits: int) -> str:
        return self.hexvalue(obj.get(key), f"{where}{key}", digits)

    def hexvalue(self, value: object, field: str, digits: int) -> str:
        ok = isinstance(value, str) and re.fullmatch(f"[0-9a-f]{{{digits}}}", value) is not None
        self.that(ok, field, f"is not {digits} lowercase hex digits")
        return value  # type: ignore[return-value]

    def list(self, obj: dict[str, Any], key: str, where: str = "") -> list[Any]:
        value = obj.get(key)
        if not isinstance(value, list):
            raise ManifestError(self.path, "is not a list", field=f"{where}{key}")
        return value

    def obj(self, value: object, field: str) -> dict[str, Any]:
        self.that(isinstance(value, dict), field, "is not an object")
        return value  # type: ignore[return-value]


def _check_tensor_files(check: _Checker, files: tuple[ManifestFile, ...],
                        tensors: tuple[TensorDigest, ...]) -> None:
    """Every tensor belongs to a listed file, and no name repeats where it would be ambiguous."""
    names = {f.name for f in files}     # a set: a list made this quadratic in files x tensors
    check.that(len(names) == len(files), "files", "a file name appears twice")
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(tensors):
        check.that(t.file in names, f"tensors[{i}].file", f"{quote(t.file)} is not one of the files")
        check.that((t.file, t.name) not in seen, f"tensors[{i}].name",
                   f"{quote(t.name)} appears twice in {quote(t.file)}")
        seen.add((t.file, t.name))


def _file_entry(check: _Checker, entry: object, field: str) -> ManifestFile:
    e = check.obj(entry, field)
    where = f"{field}."
    name = check.text(e, "name", where)
    check.that("\0" not in name, f"{where}name", "holds a NUL byte, which no file name can")
    check.that(name not in ("", ".", "..") and "/" not in name and "\\" not in name, f"{where}name",
               "is not a plain file name")
    return ManifestFile(name, check.count(e, "size", where), check.hexdigest(e, "sha256", where, 64))


#: What a tensor entry's ``type`` may be: the names ggaudit writes (``GGMLQuantizationType`` names).
_TYPE_NAMES = frozenset(t.name for t in GGMLQuantizationType)


def _tensor_entry(check: _Checker, entry: object, field: str) -> TensorDigest:
    e = check.obj(entry, field)
    w = f"{field}."
    shape = check.list(e, "shape", w)
    check.that(all(is_count(d) for d in shape),
               f"{w}shape", "is not a list of non-negative integers")
    groups = tuple(check.hexvalue(g, f"{w}row_groups[{i}]", 32)
                   for i, g in enumerate(check.list(e, "row_groups", w)))
    ggml_type = check.text(e, "type", w)
    check.that(ggml_type in _TYPE_NAMES, f"{w}type", f"{quote(ggml_type)} is not a GGML type name")
    digest = TensorDigest(check.text(e, "name", w), check.text(e, "file", w), ggml_type,
                          tuple(shape), check.count(e, "offset", w), check.count(e, "nbytes", w),
                          check.count(e, "row_bytes", w), check.count(e, "n_rows", w),
                          check.count(e, "rows_per_group", w, positive=True),
                          check.hexdigest(e, "xxh3_128", w, 32), groups)
    expected_groups = -(-digest.n_rows // digest.rows_per_group) if digest.nbytes else 0
    check.that(len(groups) == expected_groups, f"{w}row_groups",
               f"has {len(groups)} entries, {shorten(str(expected_groups))} expected for "
               f"{shorten(str(digest.n_rows))} rows")
    return digest
