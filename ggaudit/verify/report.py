"""What a verify found, as frozen data: :class:`VerifyReport` of :class:`Checked` files and
mismatches (:class:`Mismatch`), with its :class:`VerifyStats`. Every walker (:mod:`ggaudit.verify.walk`) returns one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from ..diagnostic import Artifact, Case, Diagnostic, Failure, Summary
from ..json_shape import json_key, json_record, report_json, to_json
from ..stores.registry import known_prefixes, store_class
from ..page import Block, Cell, FactTable, Heading, Table
from ..escaping import escape, escape_path
from ..wording import plural, verb

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
#: What a verify report checked besides a store's name: a checksum file, one file against a sha256 or its blob
#: name, or a manifest of either format.
OTHER_KINDS = ("sums", "file", "blob", "manifest", "llama-gguf-hash")


def report_kinds() -> tuple[str, ...]:
    """Every kind a verify report has: each store's (:meth:`~ggaudit.stores.registry.Store.report_kinds`: every
    store module is imported), then :data:`OTHER_KINDS`."""
    stores = [store_class(prefix) for prefix in known_prefixes()]
    return (*(kind for store in stores if store is not None for kind in store.report_kinds()), *OTHER_KINDS)
#: Every kind of diagnostic a verify report yields (ggaudit.kinds ids).
DIAGNOSTIC_KINDS = tuple(f"verify/{k}" for k in MISMATCH_KINDS)


@json_record
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

    kind: str = json_key(values=MISMATCH_KINDS)
    path: str
    subject: str
    expected: str | None = None
    actual: str | None = None
    offset: int | None = json_key(default=None, minimum=0)
    length: int | None = json_key(default=None, minimum=0)
    tensor: str | None = None
    rows: tuple[int, int] | None = json_key(default=None, minimum=0)
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


@json_record
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
    algorithm: str = json_key(values=ALGORITHMS)
    digest: str = json_key(pattern=DIGEST_PATTERN)
    size: int = json_key(minimum=0)
    ok: bool
    source: str = json_key(default=READ, values=(READ, CACHE))
    cached_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record
class VerifyStats:
    """``files`` checked (``cached``: of these, how many by a digest from the digest cache, not read again:
    only when the caller trusts the cache, ``trust_cache`` or ``quick``);
    ``unchecked``: files ``quick`` left unhashed for want of a cached digest, neither passed nor failed;
    against a manifest of tensors, ``tensors`` it names that were checked (in the files that opened) and
    of these, ``tensors_differing``: missing, re-shaped or with other data."""

    files: int = json_key(minimum=0)
    bytes_hashed: int = json_key(minimum=0)
    seconds: float = json_key(minimum=0, digits=6)
    cached: int = json_key(default=0, minimum=0)
    unchecked: int = json_key(default=0, minimum=0)
    tensors: int = json_key(default=0, minimum=0)
    tensors_differing: int = json_key(default=0, minimum=0)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record
class VerifyReport:
    """The result of a verify_* call; ``ok`` when nothing differs from what was expected."""

    SCHEMA: ClassVar[str] = SCHEMA
    JSON_DEF: ClassVar[str] = "verify_report"

    source: str
    kind: str = json_key(values=report_kinds)
    stopped_early: bool = False
    #: Nearly every tensor checked against the manifest differs: the manifest is another model's (or
    #: another build's), not this model damaged.
    another_model: bool = json_key(default=False, init=False)
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

    # What every reporter reads (ggaudit.diagnostic.Report): the wording is below.
    def summary(self, limit: int | None = None) -> Summary:
        return _summary(self, limit)

    def cases(self) -> Iterator[Case]:
        return _cases(self)

    def page(self, limit: int | None = None) -> list[Block]:
        return _page(self, limit)

    def to_json(self) -> dict[str, Any]:
        return report_json(self)


def not_read_again(cached_at: str) -> str:
    """What every report says of a file whose digest came from the digest cache."""
    return f"digest from the cache of {cached_at}, not read again"


# --- a verify in words (VerifyReport.summary, the diagnostics' messages) and as test cases -----------------

def describe_mismatch(m: Mismatch) -> list[str]:
    """fio style: where (file, offset, length; tensor, rows), what, then expected before actual."""
    where = [f"file {escape_path(m.path)}"]
    if m.offset is not None:
        where.append(f"offset {m.offset}")
    if m.length is not None:
        where.append(f"length {m.length}")
    place = ", ".join(where)
    if m.tensor is not None:
        place += f"; tensor {escape(m.tensor)}"
        if m.rows is not None:
            place += f", rows {m.rows[0]}-{m.rows[1]}"
    elif m.subject:
        place += f" ({escape_path(m.subject)})"
    lines = [f"MISMATCH {m.kind}: {place}: {escape(m.detail)}"]
    if m.expected is not None or m.actual is not None:
        lines.append(f"  expected: {escape(m.expected or '-')}")
        lines.append(f"  actual:   {escape(m.actual or '-')}")
    return lines


def _summary(r: VerifyReport, limit: int | None) -> Summary:
    listed = len(r.mismatches) if limit is None else min(limit, len(r.mismatches))
    counted = {"kind": r.kind, "stopped_early": r.stopped_early, "mismatches": len(r.mismatches),
               "listed": listed, "not_listed": len(r.mismatches) - listed}
    return Summary(headline=_headline(r), lines=tuple(_lines(r, listed)), files=tuple(_files(r)), counted=counted,
                   seconds=r.stats.seconds, warnings=r.warnings, noun="store" if r.kind == "ollama-store" else "model")


def _files(r: VerifyReport) -> Iterator[Artifact]:
    for c in r.checked:
        # A layout check's size, and that of all tensor data, are not the file's.
        length = c.size if c.algorithm != "gguf-layout" and c.subject != "all tensor data" else None
        source = digest_source(c)
        yield Artifact(path=c.path, length=length, description=source, properties=None if source is None else
                       {"digestSource": c.source, "digestCachedAt": c.cached_at})


def _lines(r: VerifyReport, listed: int) -> list[str]:
    """The files that matched, the first ``listed`` mismatches and how many more, whether the model looks
    like another one than the manifest's, then the summary."""
    lines = [f"verify {r.kind}: {escape_path(r.source)}"]
    for item in r.checked:
        if item.ok:
            digest = f" {item.digest}" if item.digest else ""    # gguf-layout: a structure check, no digest
            source = digest_source(item)
            lines.append(f"ok {item.algorithm}{digest}: file {escape_path(item.path)}, {plural(item.size, 'byte')} "
                         f"({escape_path(item.subject)}){'' if source is None else '; ' + source}")
    lines.extend(line for d in list(r.diagnostics())[:listed] for line in d.lines)
    if len(r.mismatches) > listed:
        rest = len(r.mismatches) - listed
        lines.append(f"... and {plural(rest, 'more mismatch', 'more mismatches')} (--limit)")
    if r.another_model:
        s = r.stats
        lines.append(f"{s.tensors_differing} of {plural(s.tensors, 'tensor')} {verb(s.tensors_differing)} from the "
                     f"manifest: this looks like another model (or another build of it), not damage to this one")
    stop = " (stopped at the first mismatch)" if r.stopped_early else ""
    stats = r.stats
    unchecked = f", {stats.unchecked} not hashed (quick)" if stats.unchecked else ""
    lines.append(f"summary: {plural(stats.files, 'file')} checked, {_cached_text(stats.cached)}, "
                 f"{plural(stats.bytes_hashed, 'byte')} hashed{unchecked}, "
                 f"{plural(len(r.mismatches), 'mismatch', 'mismatches')}{stop}")
    return lines


def digest_source(item: Checked) -> str | None:
    """``digest from the cache of DATE, not read again`` for a file whose digest the cache gave, else None
    (its bytes were read)."""
    return None if item.cached_at is None else not_read_again(item.cached_at)


def _cached_text(cached: int) -> str:
    """How many files' digests the cache gave: ``0 from the cache``, ``2 from the cache (not read again)``."""
    return f"{cached} from the cache" + (" (not read again)" if cached else "")


def _headline(r: VerifyReport) -> str:
    """``verify manifest a.gguf: 3 mismatches (tensor-data 2, sha256 1)``, or ``...: clean, 2 files checked``."""
    head = f"verify {r.kind} {escape_path(r.source)}"
    if r.ok:
        cached = f", {_cached_text(r.stats.cached)}" if r.stats.cached else ""
        return f"{head}: clean, {plural(r.stats.files, 'file')} checked{cached}"
    kinds: dict[str, int] = {}
    for m in r.mismatches:
        kinds[m.kind] = kinds.get(m.kind, 0) + 1
    found = ", ".join(f"{k} {n}" for k, n in kinds.items())
    other = "; looks like another model" if r.another_model else ""
    stop = " (stopped at the first mismatch)" if r.stopped_early else ""
    return f"{head}: {plural(len(r.mismatches), 'mismatch', 'mismatches')} ({found}){other}{stop}"


def _cases(r: VerifyReport) -> Iterator[Case]:
    """A case per (file, subject) checked or found wrong, in the order first met; every mismatch of it is a
    line of its failure."""
    checked: dict[tuple[str, str], bool] = {}
    sources: dict[tuple[str, str], list[str]] = {}
    for c in r.checked:
        checked[(c.path, c.subject)] = checked.get((c.path, c.subject), True) and c.ok
        source = digest_source(c)
        if source is not None:
            sources.setdefault((c.path, c.subject), []).append(source)
    wrong: dict[tuple[str, str], list[Diagnostic]] = {}
    for d in r.diagnostics():
        wrong.setdefault((str(d.file), d.extras["subject"]), []).append(d)
    for place in dict.fromkeys([*checked, *wrong]):
        path, subject = place
        found = wrong.get(place, [])
        failure = Failure.of(found) if found else None if checked[place] else \
            Failure(message="digest differs", kinds="digest", lines=(f"digest of {escape_path(subject)} differs",))
        yield Case(group=escape_path(path), name=escape_path(subject), failure=failure,
                   out=tuple(sources.get(place, [])))


def _page(r: VerifyReport, limit: int | None) -> list[Block]:
    s = r.stats
    facts = (("kind", r.kind), ("source", escape_path(r.source)), ("files checked", str(s.files)),
             ("from the digest cache (not read again)", str(s.cached)), ("bytes hashed", str(s.bytes_hashed)),
             ("mismatches", str(len(r.mismatches)) + (" (stopped at the first)" if r.stopped_early else "")),
             ("time", f"{s.seconds:.3f} s"))
    out: list[Block] = [Heading(text="Summary"), FactTable(rows=facts)]
    if r.mismatches:
        rows = ((Cell(text=m.kind), Cell(text=escape_path(m.path), css="mono"), Cell.number(m.offset),
                 Cell.number(m.length), Cell(text=escape(m.tensor or "-"), css="mono"),
                 Cell(text="-" if m.rows is None else f"{m.rows[0]}-{m.rows[1]}"), Cell(text=escape(m.detail)),
                 Cell(text=escape(m.expected or "-"), css="mono"), Cell(text=escape(m.actual or "-"), css="mono"))
                for m in r.mismatches[:limit])
        out += [Heading(text="Mismatches"), Table(head=("kind", "file", "offset", "length", "tensor", "rows", "detail",
                                                        "expected", "actual"), rows=rows, total=len(r.mismatches),
                                                  what="mismatches")]
    out += [Heading(text="Checked"), Table(
        head=("file", "what", "algorithm", "bytes", "ok", "digest"),
        rows=((Cell(text=escape_path(c.path), css="mono"), Cell(text=escape_path(c.subject)), Cell(text=c.algorithm),
               Cell.number(c.size), Cell(text="yes" if c.ok else "no"), Cell(text=digest_source(c) or "read now"))
              for c in r.checked), total=len(r.checked), what="files")]
    return out
