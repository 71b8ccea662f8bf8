"""What a check's decision works on and gives, as data: what a file should be (:class:`Expectation`), what
each read path delivered of it (:class:`Observed`), what the active tests found (:class:`Probes`) and the
decision itself (:class:`FileDecision`, its :class:`Conclusion` s). :mod:`.decide` makes the decision,
:mod:`.words` says it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ..evidence.decide import AGREEMENT, MANIFEST, PUBLISHED
from ..evidence.paths import DEVICE, read_path
from ..verify.manifests.tensor import TensorDigest
from ..verify.report import Mismatch

__all__ = ["AGREEMENT", "CACHE_VERIFIED", "DAMAGED", "INTACT", "MANIFEST", "NONFINITE", "PUBLISHED", "READ_PATH",
           "STRUCTURE", "UNVERIFIED", "VERDICTS", "Conclusion", "Eviction", "Expectation", "FileDecision", "LineDigest",
           "ManifestLines", "Needs", "Observed", "Probes", "Verdict"]

#: What each verdict is, worst first: a file verdict and a report's verdict are one of these. CACHE_VERIFIED:
#: what was published matched, but only as the page cache delivers it (the device was not read past it).
#: STRUCTURE: the bytes are read right (or agree) and hold bytes no tensor owns that should not be there.
#: (Final: a type checker knows each constant is its Verdict.)
DAMAGED: Final = "damaged"
READ_PATH: Final = "read-path"
NONFINITE: Final = "nonfinite"
STRUCTURE: Final = "structure"
UNVERIFIED: Final = "unverified"
CACHE_VERIFIED: Final = "cache-verified"
INTACT: Final = "intact"
VERDICTS = (DAMAGED, READ_PATH, NONFINITE, STRUCTURE, UNVERIFIED, CACHE_VERIFIED, INTACT)
#: A verdict, for type checkers: one of VERDICTS (tests/test_api.py holds them equal).
Verdict = Literal["damaged", "read-path", "nonfinite", "structure", "unverified", "cache-verified", "intact"]


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """A digest the whole file should have: ``algorithm`` (sha256, md5, git-sha1), ``digest`` (hex),
    ``source`` (PUBLISHED or MANIFEST), ``what`` it is, in words (``the Ollama manifest's layer digest``), and
    ``note``: what qualifies it (a download modified since), None when nothing does."""

    algorithm: str
    digest: str
    source: str
    what: str
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "digest": self.digest, "source": self.what, "note": self.note}


@dataclass(frozen=True, kw_only=True)
class Observed:
    """What one read path delivered of one file: ``fingerprint`` (xxh3-128 of every byte, on every path),
    ``digests`` (the expectations' algorithms, on the paths that computed them), ``tensors`` (each tensor's
    xxh3-128 and its row groups'), ``regions`` (xxh3-128 of each run of bytes no tensor owns, by (offset,
    length)), and where its bytes came from (``source``: "" for the path's own, or PAGE_CACHE where the
    filesystem serves even direct reads from it, ``source_why`` saying why)."""

    mode: str
    fingerprint: str
    digests: Mapping[str, str] = field(default_factory=dict)
    tensors: tuple[TensorDigest, ...] = ()
    #: With a llama-gguf-hash manifest: each tensor's digest of the type its line gives, by name, and the
    #: model line's (None when it is not compared); None without one.
    lines: Mapping[str, str] | None = None
    model_line: str | None = None
    regions: Mapping[tuple[int, int], str] = field(default_factory=dict)
    #: xxh3-128 of each read the plan's header was parsed from (GGUFFile.header_reads), as this path
    #: delivered those bytes.
    header: tuple[str, ...] = ()
    source: str = ""
    source_why: str | None = None

    @property
    def reads(self) -> str:
        """Where this path's bytes of the file came from: PAGE_CACHE or DEVICE."""
        return self.source or read_path(self.mode).reads

    @property
    def from_device(self) -> bool:
        return self.reads == DEVICE


@dataclass(frozen=True)
class LineDigest:
    """One line of a llama-gguf-hash manifest: its type (xxh64, xxh3, sha1, sha256, uuid), digest, line number."""

    algorithm: str
    digest: str
    line: int

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "digest": self.digest, "line": self.line}


@dataclass(frozen=True, kw_only=True)
class ManifestLines:
    """What a llama-gguf-hash manifest says of one file: per tensor the line compared (of the strongest type
    it gives), the model line (every tensor's bytes in header order) or None, why that line is not compared
    (``model_why``, None when it is), the tensors its lines name that the file lacks (``missing``) and the
    file's tensors no line names (``unnamed``), and ``what`` the manifest is, in words. It gives one digest
    per tensor: a difference is located to a tensor, never to rows."""

    tensors: Mapping[str, LineDigest]
    model: LineDigest | None
    model_why: str | None
    missing: tuple[str, ...]
    unnamed: tuple[str, ...]
    what: str
    source: str = MANIFEST

    @property
    def compared_model(self) -> LineDigest | None:
        return self.model if self.model_why is None else None

    @property
    def comparable(self) -> bool:
        """Whether a line can be compared here (a tensor's, or the model line)."""
        return bool(self.tensors or self.compared_model or self.missing or self.unnamed)


@dataclass(frozen=True, kw_only=True)
class Eviction:
    """The eviction test: where the page cache (``cached``, a page-cache path) and the device (``device``, the
    direct path) first differ (``offset``), that page evicted and read again through the page cache, now from
    the device. ``outcome``: "device" (the read after the eviction gave the device's bytes), "page-cache" (it
    gave the page cache's), "neither"; "gone" when, read again, the two paths delivered the same bytes
    (the device's first read was wrong once: nothing is evicted); None when the test could not be made
    (``why``). The 16 bytes from
    ``offset`` as each read gave them, in hex: the page cache's, the device's, and after the eviction."""

    cached: str
    device: str
    offset: int | None
    outcome: str | None
    why: str | None = None
    cached_hex: str = ""
    device_hex: str = ""
    after_hex: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"paths": [self.cached, self.device], "offset": self.offset, "outcome": self.outcome, "why": self.why,
                "cached": self.cached_hex, "device": self.device_hex, "after": self.after_hex}


@dataclass(frozen=True, kw_only=True)
class Probes:
    """What the active tests found, given back to the decision: a second whole read of the paths whose digest
    of what was published none of their reads computed (``rehashed``: mode -> what it delivered, or why it
    gave nothing to go on), and the eviction test."""

    rehashed: Mapping[str, Observed | str] = field(default_factory=dict)
    eviction: Eviction | None = None


@dataclass(frozen=True, kw_only=True)
class Needs:
    """The tests that could decide what the reads alone do not: hash a second read of ``rehash`` (paths
    whose digest of what was published no read computed), and the eviction test between a page-cache path and
    the device's (``evict``)."""

    rehash: tuple[str, ...] = ()
    evict: tuple[str, str] | None = None

    def __bool__(self) -> bool:
        return bool(self.rehash or self.evict)


@dataclass(frozen=True, kw_only=True)
class Conclusion:
    """One thing the check concluded: ``code`` (docs/json.md lists them), ``text`` (a sentence, untrusted
    names exact: escaped when shown) and ``evidence`` (its exact parts, as JSON)."""

    code: str
    text: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "text": self.text, "evidence": dict(self.evidence)}


@dataclass(frozen=True, kw_only=True)
class FileDecision:
    """The decision for one file: its ``verdict``, what decided it (``reference``: PUBLISHED, MANIFEST,
    AGREEMENT, or None when nothing could), the paths whose bytes are right and those that deviate
    (``decided`` False: the deviation is seen but which side is right is not known), the conclusions, and the
    tests that could still decide (``needs``)."""

    path: str
    verdict: Verdict
    reference: str | None
    right: tuple[str, ...]
    wrong: tuple[str, ...]
    decided: bool
    conclusions: tuple[Conclusion, ...]
    differences: tuple[Mismatch, ...] = ()   # tensors and row ranges where the file differs from the manifest
    needs: Needs = field(default_factory=Needs)
    tested: Probes | None = None
