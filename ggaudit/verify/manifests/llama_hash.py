"""llama.cpp's manifest format, as ``llama-gguf-hash`` prints it: read, written, and matched to a model.

One line per hash, ``printf("%-8s  %-s  %s\\n", type, hex, name)``. ``type`` is ``xxh64`` (seed 0),
``xxh3`` (its 64-bit variant), ``sha1``, ``sha256`` or ``uuid`` (a UUIDv5 in llama.cpp's namespace: sha1
over the namespace's 16 bytes then the data, version and variant bits set, printed 8-4-4-4-12); ``hex``
is lowercase, most significant byte first. ``name`` is ``<path>:<tensor>`` for a tensor's line (exactly
the tensor's bytes) and ``<path>`` for the model line (every tensor's bytes, concatenated in the order
the header lists them: no metadata, so not the file's sha256). For each tensor, in the header's order,
its lines come in the order xxh64, xxh3, sha1, sha256; the model lines follow, in the same order, then
uuid (which llama-gguf-hash only ever computes for the whole model). ``path`` is the file as it was
typed when the manifest was made, so a manifest is matched to a model by tensor names, never by path.
"""

from __future__ import annotations

import hashlib
import logging
import ntpath
import os
import re
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import xxhash

from ...errors import ManifestError, UsageError
from ...format.layout import GGUFFile, Model, Tensor, open_model
from ...stores.locate import Target, resolve_model
from ...untrusted import quote
from ...io.fan_out import Progress, read_through
from ...io.opening import fs_path
from ...io.output_files import write_output_file
from ..digests import Tally
from ...stores.small_files import read_text

log = logging.getLogger(__name__)

#: The name of the format (``ggaudit manifest --manifest-format``, the JSON's ``format``).
FORMAT = "llama-gguf-hash"
#: Every hash type, in the order llama-gguf-hash prints a tensor's (and the model's) lines.
HASH_TYPES = ("xxh64", "xxh3", "sha1", "sha256", "uuid")
#: What llama-gguf-hash computes when given no option.
DEFAULT_TYPES = ("xxh64",)
#: Strongest first: the one used when a manifest gives several for a tensor or a model. sha256 and sha1
#: are cryptographic; uuid carries 122 bits of a sha1; xxh64 and xxh3 are 64-bit checksums, xxh64 first as
#: llama-gguf-hash's own --check picks it first.
STRENGTH = ("sha256", "sha1", "uuid", "xxh64", "xxh3")
#: Hex digits of each type's digest (uuid is checked by its own pattern).
HEX_DIGITS = {"xxh64": 16, "xxh3": 16, "sha1": 40, "sha256": 64}
#: llama.cpp's UUIDv5 namespace (uuid5 of NAMESPACE_URL and 'en.wikipedia.org/wiki/Llama.cpp').
UUID_NAMESPACE = uuid.UUID("ef001206-dadc-5f6d-a15f-3359e577d4e5")

#: Most lines a manifest may have: five per tensor of a model of 800k tensors.
MAX_LINES = 1 << 22
#: Longest line: a path of 32k characters (Windows' longest) and a tensor name are far shorter.
MAX_LINE_CHARS = 1 << 16

_LINE = re.compile(r"(\S+)[ \t]+(\S+)[ \t]+(\S.*)")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class HashEntry:
    """One line of a manifest read: its type, digest and name as written, and its line number."""

    type: str
    hex: str
    name: str
    line: int


@dataclass(frozen=True)
class HashLine:
    """One line of a manifest made here: the tensor's (or, for ``tensor`` None, the model's) digest."""

    type: str
    hex: str
    path: str
    tensor: str | None = None

    @property
    def name(self) -> str:
        return self.path if self.tensor is None else f"{self.path}:{self.tensor}"

    def text(self) -> str:
        return f"{self.type:<8}  {self.hex}  {self.name}\n"


@dataclass(frozen=True)
class LlamaHashManifest:
    """A manifest made here: the types asked for, and its lines in llama-gguf-hash's order."""

    types: tuple[str, ...]
    lines: tuple[HashLine, ...]


# --- reading ---------------------------------------------------------------------------------------------

def manifest_format(path: str | os.PathLike[str]) -> str:
    """Which format a manifest file is in: this one when its first character, blank space aside, is a
    letter (every line starts with its type), else ggaudit's tensor manifest (JSON, whose errors then say
    what is wrong with it)."""
    head = read_text(Path(path), "manifest").lstrip("\ufeff \t\r\n")[:1]
    return FORMAT if head.isascii() and head.isalpha() else "ggaudit-tensor-manifest"


def read_llama_hash(path: str | os.PathLike[str]) -> tuple[HashEntry, ...]:
    """Parse a llama-gguf-hash manifest; a malformed line is a ManifestError naming its line and field.

    Blank lines are skipped, a line ends at ``\\n`` (a ``\\r`` before it is dropped). The same name and
    type twice is one entry when the digests agree and an error when they do not.
    """
    src = Path(path)
    text = read_text(src, "llama-gguf-hash manifest")
    # Refused before splitting: 64 MiB of newlines would make a list of 64 million empty lines.
    if text.count("\n") > MAX_LINES:
        raise ManifestError(src, f"llama-gguf-hash manifest has more than {MAX_LINES} lines")
    entries: dict[tuple[str, str], HashEntry] = {}
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line.strip(" \t"):
            continue
        entry = _parse_line(src, line, number)
        seen = entries.setdefault((entry.type, entry.name), entry)
        if seen.hex != entry.hex:
            raise ManifestError(src, f"{quote(entry.name)} has another {entry.type} at line {seen.line}",
                                field=f"line {number}, name")
    if not entries:
        raise ManifestError(src, "llama-gguf-hash manifest holds no hash lines")
    return tuple(entries.values())


def _parse_line(src: Path, line: str, number: int) -> HashEntry:
    where = f"line {number}"
    if len(line) > MAX_LINE_CHARS:
        raise ManifestError(src, f"is longer than {MAX_LINE_CHARS} characters", field=where)
    if "\0" in line:
        raise ManifestError(src, "holds a NUL byte", field=where)
    match = _LINE.fullmatch(line)
    if match is None:
        raise ManifestError(src, f"{quote(line)} is not 'TYPE  HEX  NAME'", field=where)
    kind, digest, name = match.groups()
    if kind not in HASH_TYPES:
        raise ManifestError(src, f"{quote(kind)} is not one of {', '.join(HASH_TYPES)}", field=f"{where}, type")
    if kind == "uuid":
        if _UUID.fullmatch(digest) is None:
            raise ManifestError(src, f"{quote(digest)} is not a lowercase UUID (8-4-4-4-12 hex digits)",
                                field=f"{where}, hex")
    elif re.fullmatch(f"[0-9a-f]{{{HEX_DIGITS[kind]}}}", digest) is None:
        raise ManifestError(src, f"{quote(digest)} is not {HEX_DIGITS[kind]} lowercase hex digits ({kind})",
                            field=f"{where}, hex")
    return HashEntry(kind, digest, name, number)


# --- hashing ---------------------------------------------------------------------------------------------

class _Hash(Protocol):
    def update(self, data: Any, /) -> None: ...

    def hexdigest(self) -> str: ...


class _Uuid5:
    """llama-gguf-hash's uuid: a UUIDv5 (RFC 4122) of the data in llama.cpp's namespace."""

    def __init__(self) -> None:
        self._sha1 = hashlib.sha1(UUID_NAMESPACE.bytes, usedforsecurity=False)

    def update(self, data: Any, /) -> None:
        self._sha1.update(data)

    def hexdigest(self) -> str:
        return str(uuid.UUID(bytes=self._sha1.digest()[:16], version=5))


def new_hash(kind: str) -> _Hash:
    """A fresh hash object of a llama-gguf-hash type (``update``, ``hexdigest`` as llama prints it)."""
    if kind == "xxh64":
        return xxhash.xxh64(seed=0)
    if kind == "xxh3":
        return xxhash.xxh3_64()
    if kind == "sha1":
        return hashlib.sha1(usedforsecurity=False)
    if kind == "sha256":
        return hashlib.sha256()
    if kind == "uuid":
        return _Uuid5()
    raise UsageError(None, f"{quote(kind)} is not one of {', '.join(HASH_TYPES)}", field="types")


@dataclass(frozen=True)
class FileHashes:
    """What one read of a GGUF file gave: per tensor and type its digest, per type the model's, and how
    many bytes of tensor data were hashed (the padding between tensors is read, not hashed)."""

    path: str
    tensors: Mapping[str, Mapping[str, str]]
    model: Mapping[str, str]
    bytes_hashed: int


class _TensorFeed:
    """A chunk consumer: hands the bytes of each tensor of a run (in file order, none overlapping) to that
    tensor's hashes. Bytes between tensors (alignment padding) are read but hashed by nobody."""

    def __init__(self, spans: Sequence[tuple[int, int, Sequence[_Hash]]]) -> None:
        self._spans = spans
        self._next = 0

    def update(self, offset: int, data: memoryview) -> None:
        end = offset + len(data)
        while self._next < len(self._spans):
            start, length, hashes = self._spans[self._next]
            lo, hi = max(start, offset), min(start + length, end)
            if hi > lo:
                piece = data[lo - offset:hi - offset]
                for h in hashes:
                    h.update(piece)
            if start + length > end:
                return
            self._next += 1


def _runs(tensors: Sequence[Tensor]) -> list[list[Tensor]]:
    """The tensors in header order, cut wherever the next one lies before the previous one's end: each
    run is read front to back, so a file whose header lists tensors out of file order still feeds the
    model's hashes in header order, each byte read once."""
    runs: list[list[Tensor]] = []
    for t in tensors:
        if runs and t.offset >= runs[-1][-1].end:
            runs[-1].append(t)
        else:
            runs.append([t])
    return runs


def in_header_order(gguf_file: GGUFFile) -> bool:
    """Whether the file stores its tensors' data in the order its header lists them, each after the one
    before: only then does one read front to back feed a model line's hash as llama-gguf-hash feeds it
    (none of its types composes from each tensor's digest)."""
    return len(_runs(gguf_file.tensors)) <= 1


class LineDigests:
    """The digests a manifest's lines ask of one file, as chunk consumers of one read of the whole file
    front to back (any read path): per type, one consumer over the tensors asked of that type, in file
    order; with ``model_type``, the model line's over every tensor (the file must be :func:`in_header_order`).
    ``tensor_types``: tensor name -> type."""

    def __init__(self, gguf_file: GGUFFile, tensor_types: Mapping[str, str], model_type: str | None) -> None:
        if model_type is not None and not in_header_order(gguf_file):
            raise ValueError("a model line is fed in header order, and this file stores its tensors in another")
        by_offset = sorted(gguf_file.tensors, key=lambda t: t.offset)
        self._tensors = {name: new_hash(kind) for name, kind in tensor_types.items()}
        self._model = None if model_type is None else new_hash(model_type)
        kinds = [k for k in HASH_TYPES if k in set(tensor_types.values())]
        spans = [[(t.offset, t.nbytes, (self._tensors[t.name],)) for t in by_offset
                  if tensor_types.get(t.name) == kind] for kind in kinds]
        if self._model is not None:
            spans.append([(t.offset, t.nbytes, (self._model,)) for t in gguf_file.tensors])
        self.consumers: tuple[_TensorFeed, ...] = tuple(_TensorFeed(s) for s in spans if s)

    def results(self) -> tuple[dict[str, str], str | None]:
        """Each tensor's digest (by name) and the model line's (None when not asked), once the file was read."""
        return ({name: h.hexdigest() for name, h in self._tensors.items()},
                None if self._model is None else self._model.hexdigest())


def tensor_data_span(gguf_file: GGUFFile) -> int:
    """Bytes :func:`hash_gguf_file` reads of the file at most: its runs of tensors, padding between included."""
    return sum(run[-1].end - run[0].offset for run in _runs(gguf_file.tensors))


def hash_gguf_file(gguf_file: GGUFFile, tensor_types: Mapping[str, Collection[str]],
                   model_types: Collection[str], *, progress: Progress | None = None) -> FileHashes:
    """Digests of one GGUF file's tensors (``tensor_types``: which types of which tensors) and of all its
    tensor data (``model_types``), streamed: each byte read once, hashed by a worker per type and role.
    ``progress(done, total)``: bytes read of :func:`tensor_data_span`'s (a run nothing is asked of: skipped)."""
    tensor_hashes = {name: {kind: new_hash(kind) for kind in kinds} for name, kinds in tensor_types.items()}
    model_hashes = {kind: new_hash(kind) for kind in model_types}
    hashed = 0
    tally = Tally(progress)
    tally.plan(tensor_data_span(gguf_file))
    for run in _runs(gguf_file.tensors):
        feeds = [feed for kind in HASH_TYPES for feed in _feeds(run, kind, tensor_hashes, model_hashes)]
        if not feeds:
            tally.skip(run[-1].end - run[0].offset)
        else:
            read_through(gguf_file.path, feeds, start=run[0].offset, end=run[-1].end, progress=tally.part())
            hashed += sum(t.nbytes for t in run if model_hashes or tensor_hashes.get(t.name))
    gguf_file.check_unchanged("while it was being read")
    return FileHashes(gguf_file.path, {name: {k: h.hexdigest() for k, h in hashes.items()}
                                       for name, hashes in tensor_hashes.items()},
                      {k: h.hexdigest() for k, h in model_hashes.items()}, hashed)


def _feeds(run: Sequence[Tensor], kind: str, tensor_hashes: Mapping[str, Mapping[str, _Hash]],
           model_hashes: Mapping[str, _Hash]) -> list[_TensorFeed]:
    """The workers of one type over a run: the tensors' digests, and the model's beside them (in one
    thread, a sha256 of each tensor and of them all would hash every byte twice in a row)."""
    per_tensor = [(t.offset, t.nbytes, (h,)) for t in run
                  if (h := tensor_hashes.get(t.name, {}).get(kind)) is not None]
    whole = [(t.offset, t.nbytes, (model_hashes[kind],)) for t in run] if kind in model_hashes else []
    return [_TensorFeed(spans) for spans in (per_tensor, whole) if spans]


# --- writing ---------------------------------------------------------------------------------------------

def hash_types(types: Iterable[str]) -> tuple[str, ...]:
    """The types asked for, in llama-gguf-hash's order; ``all`` is every type. UsageError for another name
    or none at all."""
    asked: set[str] = set()
    for kind in types:
        if kind == "all":
            asked.update(HASH_TYPES)
        elif kind in HASH_TYPES:
            asked.add(kind)
        else:
            raise UsageError(None, f"{quote(kind)} is not one of {', '.join(HASH_TYPES)} or all", field="types")
    if not asked:
        raise UsageError(None, "give at least one hash type", field="types")
    return tuple(k for k in HASH_TYPES if k in asked)


def build_llama_hash(model: Target | Sequence[Target], types: Iterable[str] = DEFAULT_TYPES, *,
                     store: str | os.PathLike[str] | None = None,
                     hf_cache: str | os.PathLike[str] | None = None,
                     progress: Progress | None = None) -> LlamaHashManifest:
    """The lines llama-gguf-hash would print for each file of ``model`` (a path, ``ollama:NAME``,
    ``hf:ORG/NAME``, a Model, or a sequence of them), one block per file, each file read once.

    ``types``: any of xxh64, xxh3, sha1, sha256, uuid, or all (llama-gguf-hash's ``--all`` leaves uuid
    out); uuid is a model line only, as in llama-gguf-hash. A name holding a line break, or a path
    starting with blank space, cannot be written as a line: UsageError. ``progress(done, total)``: bytes
    of tensor data read, of every file's.
    """
    kinds = hash_types([types] if isinstance(types, str) else types)
    per_tensor = [k for k in kinds if k != "uuid"]
    lines: list[HashLine] = []
    done: set[str] = set()
    files = [f for m in _models(model, store, hf_cache) for f in m.files]
    tally = Tally(progress)
    tally.plan(sum(tensor_data_span(f) for f in {f.path: f for f in files}.values()))
    for gguf_file in files:
        if gguf_file.path in done:
            continue
        done.add(gguf_file.path)
        _check_writable(gguf_file)
        hashes = hash_gguf_file(gguf_file, {t.name: per_tensor for t in gguf_file.tensors}, kinds,
                                progress=tally.part())
        lines.extend(HashLine(k, hashes.tensors[t.name][k], gguf_file.path, t.name)
                     for t in gguf_file.tensors for k in per_tensor)
        lines.extend(HashLine(k, hashes.model[k], gguf_file.path) for k in kinds)
    return LlamaHashManifest(kinds, tuple(lines))


def _models(model: Target | Sequence[Target], store: str | os.PathLike[str] | None,
            hf_cache: str | os.PathLike[str] | None) -> list[Model]:
    models: list[Model] = []
    for target in [model] if isinstance(model, (Model, str, os.PathLike)) else list(model):
        if isinstance(target, Model):
            models.append(target)
        else:
            paths = resolve_model(fs_path(target), store=store, hf_cache=hf_cache)
            models.extend(open_model(path) for path in paths)
    return models


def _check_writable(gguf_file: GGUFFile) -> None:
    path = gguf_file.path
    if any(c in path for c in "\n\r\0") or path[:1].isspace():
        raise UsageError(path, "cannot be named in a llama-gguf-hash line (a line break, a NUL or blank "
                         "space first)")
    for t in gguf_file.tensors:
        if any(c in t.name for c in "\n\r\0"):
            raise UsageError(path, f"tensor {quote(t.name)} cannot be named in a llama-gguf-hash line "
                             "(a line break or a NUL)")


def llama_hash_text(manifest: LlamaHashManifest) -> str:
    """The manifest as llama-gguf-hash prints it (what ``-o -`` prints, and the file holds)."""
    return "".join(line.text() for line in manifest.lines)


def llama_hash_to_json(manifest: LlamaHashManifest) -> dict[str, Any]:
    return {"format": FORMAT, "types": list(manifest.types),
            "lines": [{"type": h.type, "hex": h.hex, "name": h.name, "path": h.path, "tensor": h.tensor}
                      for h in manifest.lines]}


def write_llama_hash(manifest: LlamaHashManifest, path: str | os.PathLike[str], *, replace: bool = False,
                     inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Write the manifest atomically, as :func:`ggaudit.verify.manifests.tensor.write_tensor_manifest`
    writes its own (never over an input, an existing file only with ``replace``)."""
    write_output_file(llama_hash_text(manifest), path, replace=replace, inputs=inputs)


# --- matching a manifest to a model ----------------------------------------------------------------------

@dataclass(frozen=True)
class FilePlan:
    """What to check in one file: the line (the strongest) for each of its tensors a line names, the
    strongest model line, and whether its tensors no line names are ``extra`` (they are, unless the
    manifest gives only model lines for this file, as ``llama-gguf-hash --no-layer`` writes). ``named``:
    some line of the manifest is this file's (a block of lines goes to it, or a line names one of its
    tensors); a file no line names is not in the manifest at all."""

    file: GGUFFile
    tensors: Mapping[str, HashEntry]
    model: HashEntry | None
    extra: bool
    named: bool


@dataclass(frozen=True)
class LlamaHashPlan:
    files: tuple[FilePlan, ...]
    #: Tensor lines naming no tensor of the model: (line, tensor name, the file its block matched or None).
    missing: tuple[tuple[HashEntry, str, GGUFFile | None], ...]
    #: Model lines matched to no file (by their tensors or, failing that, their file name).
    unmatched: tuple[HashEntry, ...]


def plan_llama_check(entries: Sequence[HashEntry], files: Sequence[GGUFFile],
                     manifest: str | os.PathLike[str] | None = None) -> LlamaHashPlan:
    """Match a manifest's lines to a model's files by tensor name (never by the path string).

    A name is a model line's (a *block*'s path) when another line's name is it followed by ``:``; the
    other lines' names are that path, ``:`` and a tensor name. Without a model line, a name whose part
    after the last ``:`` is a tensor of the model is that tensor's (a path may hold ``:``, as ``C:\\``
    does; a tensor name rarely does), and then other names with the same path are tensors too (missing
    ones). A block belongs to the file holding most of its tensors; a block of model lines only, to the
    model's one file, else to the file of the same base name.
    """
    where: dict[str, list[GGUFFile]] = {}
    for f in files:
        for t in f.tensors:
            where.setdefault(t.name, []).append(f)
    split = _split_names(entries, where)
    blocks: dict[str, list[tuple[HashEntry, str | None]]] = {}
    for entry in entries:
        path, tensor = split[entry.name]
        blocks.setdefault(path, []).append((entry, tensor))
    block_file = {path: _block_file(path, [t for _, t in lines if t is not None], files, where)
                  for path, lines in blocks.items()}
    tensor_lines: dict[tuple[int, str], list[HashEntry]] = {}
    model_lines: dict[int, list[HashEntry]] = {}
    layered: set[int] = set()
    missing: list[tuple[HashEntry, str, GGUFFile | None]] = []
    unmatched: list[HashEntry] = []
    index = {id(f): i for i, f in enumerate(files)}
    for path, lines in blocks.items():
        home = block_file[path]
        for entry, tensor in lines:
            if tensor is None:
                if home is None:
                    unmatched.append(entry)
                else:
                    model_lines.setdefault(index[id(home)], []).append(entry)
                continue
            holders = where.get(tensor, [])
            if home is not None:
                layered.add(index[id(home)])
            if not holders:
                missing.append((entry, tensor, home))
                continue
            holder = home if home is not None and any(h is home for h in holders) else holders[0]
            tensor_lines.setdefault((index[id(holder)], tensor), []).append(entry)
            layered.add(index[id(holder)])
    src = None if manifest is None else Path(manifest)
    plans = []
    for i, f in enumerate(files):
        chosen = {t.name: _strongest(tensor_lines[(i, t.name)], src) for t in f.tensors
                  if (i, t.name) in tensor_lines}
        model = _strongest(model_lines[i], src) if i in model_lines else None
        plans.append(FilePlan(f, chosen, model, extra=i in layered or model is None,
                              named=i in layered or model is not None))
    return LlamaHashPlan(tuple(plans), tuple(missing), tuple(unmatched))


def _split_names(entries: Sequence[HashEntry], where: Mapping[str, object]) -> dict[str, tuple[str, str | None]]:
    """Each name as (path, tensor), tensor None for a model line."""
    names = {e.name for e in entries}
    paths = {n[:i] for n in names for i in _colons(n) if n[:i] in names}
    split: dict[str, tuple[str, str | None]] = {}
    undecided = []
    for name in names:
        if name in paths:
            split[name] = (name, None)
            continue
        # The longest path of a model line it starts with (a tensor name may hold a ':' too).
        cut = next((i for i in reversed(_colons(name)) if name[:i] in paths), None)
        if cut is None and _colons(name) and name[_colons(name)[-1] + 1:] in where:
            cut = _colons(name)[-1]
        if cut is None:
            undecided.append(name)
        else:
            split[name] = (name[:cut], name[cut + 1:])
    tensor_paths = {path for path, tensor in split.values() if tensor is not None}
    for name in undecided:
        head, colon, tail = name.rpartition(":")
        split[name] = (head, tail) if colon and head in tensor_paths else (name, None)
    return split


def _colons(name: str) -> list[int]:
    return [i for i, c in enumerate(name) if c == ":"]


def _block_file(path: str, tensors: Sequence[str], files: Sequence[GGUFFile],
                where: Mapping[str, Sequence[GGUFFile]]) -> GGUFFile | None:
    votes = Counter(id(f) for name in tensors for f in where.get(name, ()))
    if votes:
        best = max(votes.values())
        leaders = [f for f in files if votes.get(id(f)) == best]
        return next((f for f in leaders if _base(f.path) == _base(path)), leaders[0])
    if tensors:         # tensor lines, none of them naming a tensor of the model
        return next((f for f in files if _base(f.path) == _base(path)), None)
    if len(files) == 1:
        return files[0]
    return next((f for f in files if _base(f.path) == _base(path)), None)


def _base(path: str) -> str:
    """The file name of a path typed on any OS (a manifest made on Windows names C:\\...\\m.gguf)."""
    return ntpath.basename(path)


def _strongest(lines: Sequence[HashEntry], manifest: Path | None) -> HashEntry:
    """The line of the strongest type; two lines of that type (two blocks naming one tensor) must agree."""
    best = min(lines, key=lambda e: (STRENGTH.index(e.type), e.line))
    for other in lines:
        if other.type == best.type and other.hex != best.hex:
            raise ManifestError(manifest, f"{quote(other.name)} gives another {other.type} than line {best.line} "
                                "for the same data", field=f"line {other.line}")
    return best
