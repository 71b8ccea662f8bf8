"""Where expected digests come from: the Ollama store, the Hugging Face cache, checksum files, and
ggaudit's own tensor manifest.

Everything here parses and locates; nothing hashes except the tensor-manifest builder, which reads
each file once (see ``digest_gguf_file``). Every digest read from a manifest is validated before it
becomes part of a path, and every name read from a checksum file stays inside that file's folder.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .digests import ChunkConsumer, Segment, SegmentDigests, Sha256, read_through
from .errors import ManifestError, UsageError

if TYPE_CHECKING:   # layout may import locate, which imports this module: no import cycle at run time
    from .layout import GGUFFile, Model

log = logging.getLogger(__name__)

MAX_MANIFEST_BYTES = 64 << 20
"""Refuse manifest and checksum files larger than this: they are small text, never model-sized."""

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def _read_text(path: Path, what: str) -> str:
    """Read a small text file, refusing huge ones and reporting undecodable bytes with their offset."""
    # O_NONBLOCK so a FIFO cannot hang the open; only regular files are read.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ManifestError(path, f"{what} is not a regular file")
        if st.st_size > MAX_MANIFEST_BYTES:     # refuse before reading: no 64 MiB buffer for nothing
            raise ManifestError(path, f"{what} is larger than {MAX_MANIFEST_BYTES} bytes")
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(path, f"{what} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ManifestError(path, f"{what} is not UTF-8 text", offset=err.start) from None


def _load_json(path: Path, what: str) -> Any:
    text = _read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ManifestError(path, f"{what} is not JSON: {err.msg}", offset=err.pos) from None
    except RecursionError:      # absurdly deep nesting: hostile, never a real manifest
        raise ManifestError(path, f"{what} nests too deeply") from None


def parse_digest(value: object, *, path: str | os.PathLike[str], field: str) -> str:
    """The 64 lowercase hex digits of a ``sha256:<64 hex>`` digest, or ManifestError.

    This is the only way a digest from a manifest reaches a path, so nothing like ``../`` ever can.
    """
    if not isinstance(value, str) or not value.startswith("sha256:") \
            or not _HEX64.fullmatch(value[len("sha256:"):]):
        shown = value if isinstance(value, str) else type(value).__name__
        raise ManifestError(path, f"digest {shown!r} is not of the form sha256:<64 hex digits>",
                            field=field)
    return value[len("sha256:"):].lower()


# --- Ollama store -----------------------------------------------------------------------------

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
MEDIA_MODEL = "application/vnd.ollama.image.model"
MEDIA_PROJECTOR = "application/vnd.ollama.image.projector"

_NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HOST_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}(:[0-9]{1,5})?")
_TAG_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class OllamaName:
    """A fully qualified Ollama model name: ``host/namespace/model:tag``."""

    host: str
    namespace: str
    model: str
    tag: str

    def __str__(self) -> str:
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    def manifest_path(self, store: Path) -> Path:
        return store / "manifests" / self.host / self.namespace / self.model / self.tag


def parse_ollama_name(text: str) -> OllamaName:
    """Parse ``name``, ``name:tag``, ``ns/name:tag`` or ``host/ns/name:tag`` with Ollama's defaults."""
    rest, tag = text, DEFAULT_TAG
    last_slash = text.rfind("/")
    if ":" in text[last_slash + 1:]:
        rest, tag = text.rsplit(":", 1)
    parts = rest.split("/")
    if len(parts) > 3:
        raise UsageError(None, f"model name {text!r} has more than host/namespace/name:tag")
    host, namespace = DEFAULT_HOST, DEFAULT_NAMESPACE
    if len(parts) == 3:
        host, namespace, model = parts
    elif len(parts) == 2:
        namespace, model = parts
    else:
        (model,) = parts
    for kind, value, pattern in (("host", host, _HOST_PART), ("namespace", namespace, _NAME_PART),
                                 ("model", model, _NAME_PART), ("tag", tag, _TAG_PART)):
        # '.' and '..' match the patterns' character sets but would walk the store; refuse them.
        if not pattern.fullmatch(value) or set(value) <= {"."}:
            raise UsageError(None, f"model name {text!r}: bad {kind} {value!r}")
    return OllamaName(host, namespace, model, tag)


def default_ollama_store(env: Mapping[str, str] | None = None, platform: str | None = None,
                         home: Path | None = None) -> Path:
    """The store Ollama itself would use: ``$OLLAMA_MODELS``, else the platform default.

    On Linux the per-user ``~/.ollama/models`` wins when it exists; otherwise the system service's
    ``/usr/share/ollama/.ollama/models`` (where the install script puts it) if that exists.
    """
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if env.get("OLLAMA_MODELS"):
        return Path(env["OLLAMA_MODELS"])
    if platform.startswith("win"):
        home = home or Path(env.get("USERPROFILE") or Path.home())
        return home / ".ollama" / "models"
    home = home or Path(env.get("HOME") or Path.home())
    user = home / ".ollama" / "models"
    service = Path("/usr/share/ollama/.ollama/models")
    if platform.startswith("linux") and not user.is_dir() and service.is_dir():
        return service
    return user


@dataclass(frozen=True)
class OllamaLayer:
    """One blob an Ollama manifest refers to (a layer, or the config)."""

    media_type: str
    digest: str         # 64 lowercase hex digits, validated
    size: int
    field: str          # where in the manifest: "config", "layers[2]"


@dataclass(frozen=True)
class OllamaManifest:
    name: OllamaName
    path: Path
    store: Path
    config: OllamaLayer | None
    layers: tuple[OllamaLayer, ...]

    @property
    def blobs(self) -> tuple[OllamaLayer, ...]:
        """Every blob to check: the layers, then the config."""
        return self.layers + ((self.config,) if self.config else ())

    def model_layers(self) -> tuple[OllamaLayer, ...]:
        """The weights: the model layer(s), then the projector(s), in manifest order."""
        models = tuple(l for l in self.layers if l.media_type == MEDIA_MODEL)
        return models + tuple(l for l in self.layers if l.media_type == MEDIA_PROJECTOR)


def read_ollama_manifest(name: str | OllamaName, store: str | os.PathLike[str] | None = None
                         ) -> OllamaManifest:
    """Find and parse the manifest of ``name`` in ``store`` (default: ``default_ollama_store()``)."""
    parsed = parse_ollama_name(name) if isinstance(name, str) else name
    root = Path(store) if store is not None else default_ollama_store()
    path = parsed.manifest_path(root)
    if not path.is_file():
        raise ManifestError(path, f"model {parsed} is not in the Ollama store {root}")
    doc = _load_json(path, "manifest")
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        raise ManifestError(path, "expected an object with a list of layers", field="layers")
    layers = tuple(_ollama_layer(entry, path, f"layers[{i}]") for i, entry in enumerate(doc["layers"]))
    config = _ollama_layer(doc["config"], path, "config") if doc.get("config") is not None else None
    return OllamaManifest(parsed, path, root, config, layers)


def _ollama_layer(entry: object, path: Path, field: str) -> OllamaLayer:
    if not isinstance(entry, dict):
        raise ManifestError(path, "expected an object", field=field)
    digest = parse_digest(entry.get("digest"), path=path, field=f"{field}.digest")
    size = entry.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ManifestError(path, f"size {size!r} is not a non-negative integer", field=f"{field}.size")
    media_type = entry.get("mediaType", "")
    if not isinstance(media_type, str):
        raise ManifestError(path, "mediaType is not a string", field=f"{field}.mediaType")
    return OllamaLayer(media_type, digest, size, field)


def ollama_blob_path(store: Path, digest: str) -> Path:
    """The blob file of a validated hex digest: ``blobs/sha256-<hex>``, or the old ``sha256:<hex>``.

    Returns the new-style path when neither exists, for the report to name.
    """
    if not _HEX64.fullmatch(digest):
        raise ManifestError(None, f"digest {digest!r} is not 64 hex digits", field="digest")
    new = store / "blobs" / f"sha256-{digest}"
    old = store / "blobs" / f"sha256:{digest}"
    path = old if not new.exists() and old.exists() else new
    # A blob that is a link out of the store is reported, never followed: the store is what was named.
    if path.is_symlink():
        root = store.resolve()
        target = path.resolve()
        # The blobs folder itself may be a link (moved to a bigger disk): its own files are fine.
        inside = target.parent == (store / "blobs").resolve() or root in target.parents
        if not inside:
            raise ManifestError(path, f"blob is a link pointing outside the store: {os.readlink(path)}",
                                field="digest")
    return path


def ollama_partial_files(store: Path) -> tuple[Path, ...]:
    """Leftovers of interrupted pulls: ``blobs/sha256-<hex>-partial`` and ``-partial-N`` files."""
    blobs = store / "blobs"
    if not blobs.is_dir():
        return ()
    return tuple(sorted(p for p in blobs.iterdir() if "-partial" in p.name))


# --- Hugging Face cache (offline) -------------------------------------------------------------

_HF_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REVISION = re.compile(r"[A-Za-z0-9._/-]{1,255}")


@dataclass(frozen=True)
class HFSpec:
    repo_id: str        # ORG/NAME
    revision: str       # a branch or tag name, or a 40-hex commit

    @property
    def folder(self) -> str:
        return "models--" + self.repo_id.replace("/", "--")


def parse_hf_spec(text: str) -> HFSpec:
    """Parse ``ORG/NAME[@REVISION]`` (the ``hf:`` prefix already removed); revision defaults to main."""
    repo, _, revision = text.partition("@")
    revision = revision or "main"
    parts = repo.split("/")
    if len(parts) != 2 or not all(_HF_PART.fullmatch(p) and set(p) != {"."} for p in parts):
        raise UsageError(None, f"Hugging Face repo {text!r} is not ORG/NAME[@REVISION]")
    if not _REVISION.fullmatch(revision) or ".." in revision.split("/"):
        raise UsageError(None, f"Hugging Face revision {revision!r} is not a safe ref name")
    return HFSpec(repo, revision)


def default_hf_cache(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    return (home or Path.home()) / ".cache" / "huggingface" / "hub"


@dataclass(frozen=True)
class HFFile:
    """One file of a cached snapshot and the blob its link names.

    ``algorithm`` is ``sha256`` for large (LFS) files, whose blob is named by its sha256, and
    ``git-sha1`` for small files, named by git's blob hash. ``problem`` says why it cannot be hashed
    (a broken link, a link leaving the cache, a copy instead of a link) and is None otherwise.
    """

    name: str           # path inside the snapshot, as stored (untrusted text)
    link: Path
    blob: Path | None
    algorithm: str | None
    expected: str | None
    problem: str | None


@dataclass(frozen=True)
class HFSnapshot:
    spec: HFSpec
    repo_dir: Path
    commit: str
    files: tuple[HFFile, ...]
    incomplete: tuple[Path, ...]


def read_hf_snapshot(spec: str | HFSpec, cache: str | os.PathLike[str] | None = None) -> HFSnapshot:
    """Locate ``spec``'s snapshot in the cache and list its files with the digest each must have."""
    parsed = parse_hf_spec(spec) if isinstance(spec, str) else spec
    root = Path(cache) if cache is not None else default_hf_cache()
    repo_dir = root / parsed.folder
    if not repo_dir.is_dir():
        raise ManifestError(repo_dir, f"{parsed.repo_id} is not in the Hugging Face cache {root}")
    commit = _hf_commit(repo_dir, parsed.revision)
    snapshot = repo_dir / "snapshots" / commit
    if not snapshot.is_dir():
        raise ManifestError(snapshot, f"revision {parsed.revision} ({commit}) has no snapshot")
    blobs = (repo_dir / "blobs").resolve()
    files = tuple(_hf_file(snapshot, link, blobs) for link in _walk(snapshot))
    incomplete = tuple(sorted(p for p in (repo_dir / "blobs").glob("*.incomplete")))
    return HFSnapshot(parsed, repo_dir, commit, files, incomplete)


def _hf_commit(repo_dir: Path, revision: str) -> str:
    if _COMMIT.fullmatch(revision):
        return revision
    ref = repo_dir / "refs" / revision
    if not ref.is_file():
        raise ManifestError(ref, f"revision {revision!r} is not cached (no refs/{revision})")
    commit = _read_text(ref, "ref").strip()
    if not _COMMIT.fullmatch(commit):
        raise ManifestError(ref, f"ref does not hold a 40-hex commit: {commit[:80]!r}")
    return commit


def _walk(folder: Path) -> list[Path]:
    """Every non-directory entry below ``folder`` (links included, not followed into folders)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        found.extend(Path(dirpath) / n for n in filenames)
        # os.walk lists links to folders among dirnames without descending; a snapshot has none.
        found.extend(Path(dirpath) / n for n in dirnames if (Path(dirpath) / n).is_symlink())
    return sorted(found)


def _hf_file(snapshot: Path, link: Path, blobs: Path) -> HFFile:
    name = link.relative_to(snapshot).as_posix()
    if not link.is_symlink():
        return HFFile(name, link, None, None, None, "not a link to a blob (cannot check a copy)")
    target = link.resolve()
    if target.parent != blobs:
        return HFFile(name, link, None, None, None, f"link points outside the cache's blobs: "
                      f"{os.readlink(link)}")
    if not target.is_file():
        return HFFile(name, link, target, None, None, "broken link: blob missing")
    if _HEX64.fullmatch(target.name):
        return HFFile(name, link, target, "sha256", target.name.lower(), None)
    if _COMMIT.fullmatch(target.name):
        return HFFile(name, link, target, "git-sha1", target.name, None)
    return HFFile(name, link, target, None, None, "blob name is not a digest")


# --- checksum files ---------------------------------------------------------------------------

_GNU_LINE = re.compile(r"(?P<hex>[0-9a-fA-F]+) [ *](?P<name>.+)")
_TAG_LINE = re.compile(r"(?P<algo>[A-Za-z0-9-]+) ?\((?P<name>.+)\) ?= (?P<hex>[0-9a-fA-F]+)")
_SHA256_TAGS = {"SHA256", "SHA2-256", "SHA-256"}


@dataclass(frozen=True)
class SumsEntry:
    """One line of a checksum file: the name as written, where it resolves, and the sha256."""

    name: str
    path: Path
    sha256: str
    line: int


def read_sums(path: str | os.PathLike[str]) -> tuple[SumsEntry, ...]:
    """Parse a sha256 checksum file: GNU, BSD ``--tag`` or OpenSSL lines, hex in any case.

    Blank lines and ``#`` comments are skipped. Names resolve relative to the file's folder; a name
    that is absolute or leads outside that folder (``..``, or a link pointing out) is a ManifestError.
    """
    sums = Path(path)
    folder = sums.parent.resolve()
    entries = []
    for number, raw in enumerate(_read_text(sums, "checksum file").split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, hexdigest = _parse_sums_line(line, sums, number)
        entries.append(SumsEntry(name, _confined(folder, name, sums, number), hexdigest.lower(), number))
    if not entries:
        raise ManifestError(sums, "no checksum lines found")
    return tuple(entries)


def _parse_sums_line(line: str, sums: Path, number: int) -> tuple[str, str]:
    escaped = line.startswith("\\")
    body = line[1:] if escaped else line
    field = f"line {number}"
    tagged = _TAG_LINE.fullmatch(body)
    if tagged and not _GNU_LINE.fullmatch(body):
        if tagged["algo"].upper() not in _SHA256_TAGS:
            raise ManifestError(sums, f"algorithm {tagged['algo']!r} is not sha256", field=field)
        name, hexdigest = tagged["name"], tagged["hex"]
    elif (gnu := _GNU_LINE.fullmatch(body)):
        name, hexdigest = gnu["name"], gnu["hex"]
    else:
        raise ManifestError(sums, "not a GNU, BSD or OpenSSL checksum line", field=field)
    if len(hexdigest) != 64:
        raise ManifestError(sums, f"digest has {len(hexdigest)} hex digits, sha256 has 64", field=field)
    return (_unescape(name, sums, field) if escaped else name), hexdigest


def _unescape(name: str, sums: Path, field: str) -> str:
    """Undo coreutils' escaping of names holding a backslash, newline or carriage return."""
    out, i = [], 0
    while i < len(name):
        ch = name[i]
        if ch == "\\":
            nxt = name[i + 1:i + 2]
            if nxt not in ("\\", "n", "r"):
                raise ManifestError(sums, f"bad escape \\{nxt} in name", field=field)
            out.append({"\\": "\\", "n": "\n", "r": "\r"}[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _confined(folder: Path, name: str, sums: Path, number: int) -> Path:
    candidate = Path(name)
    if "\0" in name or candidate.is_absolute() or candidate.drive or ".." in candidate.parts:
        raise ManifestError(sums, f"name {name!r} leaves the checksum file's folder",
                            field=f"line {number}")
    resolved = (folder / candidate).resolve()
    if resolved != folder and folder not in resolved.parents:
        raise ManifestError(sums, f"name {name!r} resolves outside the checksum file's folder",
                            field=f"line {number}")
    return folder / candidate


# --- ggaudit's tensor manifest ----------------------------------------------------------------

MANIFEST_FORMAT = "ggaudit-tensor-manifest"
MANIFEST_VERSION = 1
DEFAULT_GROUP_BYTES = 1 << 20


@dataclass(frozen=True)
class FileDigest:
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
    files: tuple[FileDigest, ...]
    tensors: tuple[TensorDigest, ...]
    created_by: str = ""
    version: int = MANIFEST_VERSION


def rows_per_group(row_bytes: int, group_bytes: int = DEFAULT_GROUP_BYTES) -> int:
    """Whole rows per group: as many as fit in ``group_bytes``, at least one."""
    return max(1, group_bytes // row_bytes) if row_bytes > 0 else 1


def digest_gguf_file(gguf_file: GGUFFile, group_bytes: int = DEFAULT_GROUP_BYTES,
                     extra: Sequence[ChunkConsumer] = ()) -> tuple[FileDigest, tuple[TensorDigest, ...]]:
    """sha256 of one GGUF file and xxh3-128 of each of its tensors and row groups, in ONE read.

    ``extra`` chunk consumers (a scanner, say) ride along on the same read.
    """
    tensors = gguf_file.tensors
    sha = Sha256()
    plan = [(t, rows_per_group(t.row_bytes, group_bytes)) for t in tensors]
    segments = SegmentDigests(Segment(str(i), t.offset, t.nbytes, max(1, rpg * t.row_bytes))
                              for i, (t, rpg) in enumerate(plan))
    read_through(gguf_file.path, [sha, segments, *extra], end=gguf_file.size)
    check_unchanged(gguf_file)
    results = segments.results()
    name = os.path.basename(gguf_file.path)
    digests = tuple(
        TensorDigest(t.name, name, t.ggml_type.name, tuple(int(d) for d in t.shape), int(t.offset),
                     int(t.nbytes), int(t.row_bytes), int(t.n_rows), rpg,
                     results[str(i)].digest, results[str(i)].groups)
        for i, (t, rpg) in enumerate(plan))
    return FileDigest(name, int(gguf_file.size), sha.hexdigest()), digests


def check_unchanged(gguf_file: GGUFFile) -> None:
    """The digests describe the file that was opened: refuse them if it was replaced or resized since."""
    gguf_file.identity.check(gguf_file.path, "while it was being read")


def build_tensor_manifest(model: Model, group_bytes: int = DEFAULT_GROUP_BYTES) -> TensorManifest:
    """The tensor manifest of a model (a file or a split set), each file read once."""
    from . import __version__

    files, tensors = [], []
    for gguf_file in model.files:
        file_digest, tensor_digests = digest_gguf_file(gguf_file, group_bytes)
        files.append(file_digest)
        tensors.extend(tensor_digests)
    return TensorManifest(group_bytes, tuple(files), tuple(tensors), f"ggaudit {__version__}")


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


def write_tensor_manifest(manifest: TensorManifest, path: str | os.PathLike[str]) -> None:
    """Write the manifest as JSON, atomically (a temporary file renamed into place)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(tensor_manifest_to_json(manifest), f, indent=1)
        f.write("\n")
    os.replace(tmp, target)


def read_tensor_manifest(path: str | os.PathLike[str]) -> TensorManifest:
    """Parse and validate a tensor manifest; anything malformed is a ManifestError naming the field."""
    src = Path(path)
    doc = _load_json(src, "tensor manifest")
    check = _Checker(src)
    check.that(isinstance(doc, dict), "format", "not a JSON object")
    check.that(doc.get("format") == MANIFEST_FORMAT, "format", f"is not {MANIFEST_FORMAT!r}")
    check.that(doc.get("version") == MANIFEST_VERSION, "version",
               f"{doc.get('version')!r} is not supported (this ggaudit reads {MANIFEST_VERSION})")
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
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= (1 if positive else 0)
        self.that(ok, f"{where}{key}", f"{value!r} is not a {'positive' if positive else 'non-negative'} integer")
        return value

    def text(self, obj: dict[str, Any], key: str, where: str) -> str:
        value = obj.get(key)
        self.that(isinstance(value, str), f"{where}{key}", "is not a string")
        return value

    def hexdigest(self, obj: dict[str, Any], key: str, where: str, digits: int) -> str:
        return self.hexvalue(obj.get(key), f"{where}{key}", digits)

    def hexvalue(self, value: object, field: str, digits: int) -> str:
        ok = isinstance(value, str) and re.fullmatch(f"[0-9a-f]{{{digits}}}", value) is not None
        self.that(ok, field, f"is not {digits} lowercase hex digits")
        return value  # type: ignore[return-value]

    def list(self, obj: dict[str, Any], key: str, where: str = "") -> list[Any]:
        value = obj.get(key)
        self.that(isinstance(value, list), f"{where}{key}", "is not a list")
        return value

    def obj(self, value: object, field: str) -> dict[str, Any]:
        self.that(isinstance(value, dict), field, "is not an object")
        return value  # type: ignore[return-value]


def _check_tensor_files(check: _Checker, files: tuple[FileDigest, ...],
                        tensors: tuple[TensorDigest, ...]) -> None:
    """Every tensor belongs to a listed file, and no name repeats where it would be ambiguous."""
    names = [f.name for f in files]
    check.that(len(set(names)) == len(names), "files", "a file name appears twice")
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(tensors):
        check.that(t.file in names, f"tensors[{i}].file", f"{t.file!r} is not one of the files")
        check.that((t.file, t.name) not in seen, f"tensors[{i}].name", f"{t.name!r} appears twice in {t.file!r}")
        seen.add((t.file, t.name))


def _file_entry(check: _Checker, entry: object, field: str) -> FileDigest:
    e = check.obj(entry, field)
    where = f"{field}."
    name = check.text(e, "name", where)
    check.that(name not in ("", ".", "..") and "/" not in name and "\\" not in name, f"{where}name",
               "is not a plain file name")
    return FileDigest(name, check.count(e, "size", where), check.hexdigest(e, "sha256", where, 64))


def _tensor_entry(check: _Checker, entry: object, field: str) -> TensorDigest:
    e = check.obj(entry, field)
    w = f"{field}."
    shape = check.list(e, "shape", w)
    check.that(all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape),
               f"{w}shape", "is not a list of non-negative integers")
    groups = tuple(check.hexvalue(g, f"{w}row_groups[{i}]", 32)
                   for i, g in enumerate(check.list(e, "row_groups", w)))
    digest = TensorDigest(check.text(e, "name", w), check.text(e, "file", w), check.text(e, "type", w),
                          tuple(shape), check.count(e, "offset", w), check.count(e, "nbytes", w),
                          check.count(e, "row_bytes", w), check.count(e, "n_rows", w),
                          check.count(e, "rows_per_group", w, positive=True),
                          check.hexdigest(e, "xxh3_128", w, 32), groups)
    expected_groups = -(-digest.n_rows // digest.rows_per_group) if digest.nbytes else 0
    check.that(len(groups) == expected_groups, f"{w}row_groups",
               f"has {len(groups)} entries, {expected_groups} expected for {digest.n_rows} rows")
    return digest
