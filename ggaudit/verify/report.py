"""What a verify found, as frozen data: :class:`VerifyReport` of :class:`Checked` files and
mismatches (:class:`Mismatch`), with its :class:`VerifyStats`. Every walker (:mod:`ggaudit.verify.walk`) returns one."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..diagnostic import Diagnostic
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

    kind: str
    path: str
    subject: str
    expected: str | None = None
    actual: str | None = None
    offset: int | None = None
    length: int | None = None
    tensor: str | None = None
    rows: tuple[int, int] | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "subject": self.subject, "expected": self.expected,
                "actual": self.actual, "offset": self.offset, "length": self.length, "tensor": self.tensor,
                "rows": None if self.rows is None else list(self.rows), "detail": self.detail}


#: Where a Checked file's digest came from: its bytes, read now, or the digest cache (not read again).
READ, CACHE = "read", "cache"


@dataclass(frozen=True, kw_only=True)
class Checked:
    """A file checked; ``ok`` says whether its digest matched. ``source``: READ (its bytes were read now)
    or CACHE (the digest cache's digest, computed at ``cached_at``, UTC ISO 8601: the file was not read
    again, so damage below the filesystem since then is not seen)."""

    path: str
    subject: str
    algorithm: str
    digest: str
    size: int
    ok: bool
    source: str = READ
    cached_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "subject": self.subject, "algorithm": self.algorithm, "digest": self.digest,
                "size": self.size, "ok": self.ok, "source": self.source, "cached_at": self.cached_at}


@dataclass(frozen=True, kw_only=True)
class VerifyStats:
    """``files`` checked (``cached``: of these, how many by a digest from the digest cache, not read again:
    only when the caller trusts the cache, ``trust_cache`` or ``quick``);
    ``unchecked``: files ``quick`` left unhashed for want of a cached digest, neither passed nor failed;
    against a manifest of tensors, ``tensors`` it names that were checked (in the files that opened) and
    of these, ``tensors_differing``: missing, re-shaped or with other data."""

    files: int
    bytes_hashed: int
    seconds: float
    cached: int = 0
    unchecked: int = 0
    tensors: int = 0
    tensors_differing: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "bytes_hashed": self.bytes_hashed, "seconds": round(self.seconds, 6),
                "cached": self.cached, "unchecked": self.unchecked, "tensors": self.tensors,
                "tensors_differing": self.tensors_differing}


@dataclass(frozen=True, kw_only=True)
class VerifyReport:
    """The result of a verify_* call; ``ok`` when nothing differs from what was expected."""

    source: str
    kind: str                               # ollama, hf, sums, blob, manifest
    checked: tuple[Checked, ...]
    mismatches: tuple[Mismatch, ...]
    warnings: tuple[str, ...]
    stats: VerifyStats
    stopped_early: bool = False

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def another_model(self) -> bool:
        """Nearly every tensor checked against the manifest differs: the manifest is another model's (or
        another build's), not this model damaged."""
        n, differing = self.stats.tensors, self.stats.tensors_differing
        return differing >= ANOTHER_MODEL_MIN_TENSORS and differing >= ANOTHER_MODEL_SHARE * n

    def diagnostics(self) -> Iterator[Diagnostic]:
        """Each mismatch, in the order found."""
        for m in self.mismatches:
            yield Diagnostic(kind=f"verify/{m.kind}", message="\n".join(describe_mismatch(m)), file=m.path,
                             offset=m.offset, length=m.length, tensor=m.tensor,
                             row=None if m.rows is None else m.rows[0], extras=m.to_json())

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "tool_version": __version__, "ok": self.ok, "source": self.source,
                "kind": self.kind, "stopped_early": self.stopped_early, "another_model": self.another_model,
                "checked": [c.to_json() for c in self.checked],
                "mismatches": [m.to_json() for m in self.mismatches], "warnings": list(self.warnings),
                "stats": self.stats.to_json()}


def not_read_again(cached_at: str) -> str:
    """What every report says of a file whose digest came from the digest cache."""
    return f"digest from the cache of {cached_at}, not read again"
