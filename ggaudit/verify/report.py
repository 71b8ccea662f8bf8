"""What a verify found, as frozen data: :class:`VerifyReport` of :class:`Checked` files and
mismatches (:class:`Mismatch`), with its :class:`VerifyStats`. Every walker (:mod:`ggaudit.verify.walk`) returns one."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from ..diagnostic import Diagnostic
from ..json_shape import key, report_json, to_json
from .lines import describe_mismatch

#: The ``schema`` of :meth:`VerifyReport.to_json`.
SCHEMA = "ggaudit/verify-report/1"

#: A model whose tensors differ from a manifest's nearly all (this share of those checked, and at least
#: this many) is another model, or another build of it, rather than a damaged copy: VerifyReport.another_model.
ANOTHER_MODEL_SHARE = 0.9
ANOTHER_MODEL_MIN_TENSORS = 8


#: Every kind of Mismatch (see its docstring); its diagnostic's kind is ``verify/`` and this.
MISMATCH_KINDS = ("missing", "not-a-file", "size", "sha256", "git-sha1", "md5", "link", "header", "orphan",
                  "file-extra", "tensor-data", "tensor-missing", "tensor-extra", "tensor-layout", "model-data",
                  "structure")
#: What a verify report checked: a store's name (its prefix without the colon; ``ollama-store``: the whole
#: Ollama store), a checksum file, one file against a sha256 or its blob name, or a manifest of either format.
REPORT_KINDS = ("ollama", "ollama-store", "hf", "hf-local", "lmstudio", "gpt4all", "sums", "file", "blob", "manifest",
                "llama-gguf-hash")
#: Every kind of diagnostic a verify report yields (ggaudit.kinds ids).
DIAGNOSTIC_KINDS = tuple(f"verify/{k}" for k in MISMATCH_KINDS)


@dataclass(frozen=True, kw_only=True)
class Mismatch:
    """One thing that is not as expected. Where, then what was expected and what was found.

    ``kind`` is one of: missing, not-a-file, size, sha256, git-sha1, md5, link, header, orphan, file-extra,
    tensor-data, tensor-missing, tensor-extra, tensor-layout, model-data, structure. file-extra: a file of
    the model that the manifest does not name (not read: ``offset``/``length`` span the whole file).
    ``expected``/``actual`` hold hex digests (or sizes, types, shapes as text). For tensor-data,
    ``offset``/``length`` give the absolute span of the differing row groups and ``rows`` the first and
    last row (inclusive). model-data is a llama-gguf-hash model line: the digest of all of a file's tensor
    data, spanning its first to its last tensor.
    """

    JSON_DEF: ClassVar[str] = "verify_mismatch"

    kind: str = key(enum=MISMATCH_KINDS)
    path: str
    subject: str
    expected: str | None = None
    actual: str | None = None
    offset: int | None = key(None, minimum=0)
    length: int | None = key(None, minimum=0)
    tensor: str | None = None
    rows: tuple[int, int] | None = key(None, minimum=0)
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


#: Where a Checked file's digest came from: its bytes, read now, or the digest cache (not read again).
READ, CACHE = "read", "cache"
#: What a Checked file's digest is of: its bytes (or the parts git and GPT4All hash), or its layout.
ALGORITHMS = ("sha256", "git-sha1", "md5", "gguf-layout", "sha1", "xxh64", "xxh3", "uuid")
#: A digest in lowercase hex (none: a layout check), or a UUID (a manifest's model id).
DIGEST_PATTERN = "^([0-9a-f]*|[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12})$"
#: The UTC time a cached digest was computed at.
CACHED_AT_PATTERN = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"


@dataclass(frozen=True, kw_only=True)
class Checked:
    """A file checked; ``ok`` says whether its digest matched. ``source``: READ (its bytes were read now)
    or CACHE (the digest cache's digest, computed at ``cached_at``, UTC ISO 8601: the file was not read
    again, so damage below the filesystem since then is not seen)."""

    JSON_DEF: ClassVar[str] = "checked"
    #: A digest read now has no cache time; one from the cache has the time it was computed.
    JSON_EXTRA: ClassVar[dict[str, Any]] = {"oneOf": [
        {"properties": {"source": {"const": READ}, "cached_at": {"type": "null"}}},
        {"properties": {"source": {"const": CACHE}, "cached_at": {"type": "string", "pattern": CACHED_AT_PATTERN}}}]}

    path: str
    subject: str
    algorithm: str = key(enum=ALGORITHMS)
    digest: str = key(pattern=DIGEST_PATTERN)
    size: int = key(minimum=0)
    ok: bool
    source: str = key(READ, enum=(READ, CACHE))
    cached_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@dataclass(frozen=True, kw_only=True)
class VerifyStats:
    """``files`` checked (``cached``: of these, how many by a digest from the digest cache, not read again:
    only when the caller trusts the cache, ``trust_cache`` or ``quick``);
    ``unchecked``: files ``quick`` left unhashed for want of a cached digest, neither passed nor failed;
    against a manifest of tensors, ``tensors`` it names that were checked (in the files that opened) and
    of these, ``tensors_differing``: missing, re-shaped or with other data."""

    files: int = key(minimum=0)
    bytes_hashed: int = key(minimum=0)
    seconds: float = key(minimum=0, digits=6)
    cached: int = key(0, minimum=0)
    unchecked: int = key(0, minimum=0)
    tensors: int = key(0, minimum=0)
    tensors_differing: int = key(0, minimum=0)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@dataclass(frozen=True, kw_only=True)
class VerifyReport:
    """The result of a verify_* call; ``ok`` when nothing differs from what was expected."""

    SCHEMA: ClassVar[str] = SCHEMA
    JSON_DEF: ClassVar[str] = "verify_report"

    source: str
    kind: str = key(enum=REPORT_KINDS)
    stopped_early: bool = False
    #: Nearly every tensor checked against the manifest differs: the manifest is another model's (or
    #: another build's), not this model damaged.
    another_model: bool = key(False, init=False)
    checked: tuple[Checked, ...]
    mismatches: tuple[Mismatch, ...]
    warnings: tuple[str, ...]
    stats: VerifyStats

    def __post_init__(self) -> None:
        n, differing = self.stats.tensors, self.stats.tensors_differing
        another = differing >= ANOTHER_MODEL_MIN_TENSORS and differing >= ANOTHER_MODEL_SHARE * n
        object.__setattr__(self, "another_model", another)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def diagnostics(self) -> Iterator[Diagnostic]:
        """Each mismatch, in the order found."""
        for m in self.mismatches:
            yield Diagnostic(kind=f"verify/{m.kind}", message="\n".join(describe_mismatch(m)), file=m.path,
                             offset=m.offset, length=m.length, tensor=m.tensor,
                             row=None if m.rows is None else m.rows[0], extras=m.to_json())

    def to_json(self) -> dict[str, Any]:
        return report_json(self)


def not_read_again(cached_at: str) -> str:
    """What every report says of a file whose digest came from the digest cache."""
    return f"digest from the cache of {cached_at}, not read again"
