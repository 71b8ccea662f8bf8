"""What every reporter reads of every report (:class:`Report`, the interface every report has), in shapes that
name no job: :class:`Diagnostic`, one finding
(what ``report.diagnostics()`` yields); :class:`Summary`, what the report says of itself (its lines, its
one-line headline, the files it read, what it counted: ``report.summary()``); :class:`Case`, one thing it
checked, passed or failed (``report.cases()``). A reporter reads these and nothing else, so a new report
type needs no reporter edit, and a new finding kind is its line in :mod:`ggaudit.kinds` and the code that
finds it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from .kinds import kind as registered

if TYPE_CHECKING:
    from .page import Block

__all__ = ["Artifact", "Case", "Diagnostic", "Failure", "Place", "Report", "Summary"]


@dataclass(frozen=True, kw_only=True)
class Place:
    """Another place a finding involves, and what it is there (diff: ``the same block in a (expected)``)."""

    what: str
    file: str
    offset: int | None = None
    length: int | None = None
    tensor: str | None = None


@dataclass(frozen=True, kw_only=True)
class Diagnostic:
    """One finding, located as exactly as its job knows it.

    ``kind``: an id of :data:`ggaudit.kinds.KINDS`, whose severity ``severity`` is unless given.
    ``message``: the text report's line(s) for it, escaped for a terminal, lines joined with ``\\n``.
    ``file``/``offset``/``length``: the absolute byte region (``offset`` None: the file as a whole);
    ``tensor``, ``row``, ``column``, ``block``, ``field`` (a block's float field, ``value`` for an element,
    or a metadata key), ``expert``: the place inside the model, None where it does not apply.
    ``extras``: the finding's exact parts as its report's JSON gives them (names unescaped: raw bits,
    expected and actual, counts), read-only. ``related``: other places it involves.
    """

    kind: str
    message: str
    severity: str = ""
    file: str | None = None
    offset: int | None = None
    length: int | None = None
    tensor: str | None = None
    row: int | None = None
    column: int | None = None
    block: int | None = None
    field: str | None = None
    expert: int | None = None
    extras: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)   # (``field`` is a name here)
    related: tuple[Place, ...] = ()

    def __post_init__(self) -> None:
        known = registered(self.kind)     # an unregistered kind fails here, where it is made
        if not self.severity:
            object.__setattr__(self, "severity", known.severity)
        object.__setattr__(self, "extras", MappingProxyType(dict(self.extras)))

    @property
    def lines(self) -> list[str]:
        """The message's lines (a multi-line finding: its first line says what, the rest where and how)."""
        return self.message.split("\n")


@dataclass(frozen=True, kw_only=True)
class Artifact:
    """A file a report read, as a log of the run lists it: its ``length`` when known, and when its digest was
    not computed now (a cache gave it) a ``description`` saying so and ``properties`` giving it exactly."""

    path: str
    length: int | None = None
    description: str | None = None
    properties: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Summary:
    """What a report says of itself, for every reporter: ``lines``, the text report (``limit``: how many of
    its mismatches it lists); ``headline``, the same in one line (``-q``, a CI log, the page's verdict);
    ``files``, what it read; ``counted``, what it counts but may not list (``--limit``), by name;
    ``seconds`` it took; ``warnings`` for stderr; ``noun``, what its target is (``model``, or ``store`` for
    a store searched as a whole); ``whole_when_quiet``: the report is itself the output asked for (a manifest
    on stdout), so ``-q`` keeps every line."""

    headline: str
    lines: tuple[str, ...]
    files: tuple[Artifact, ...] = ()
    counted: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    seconds: float = 0.0
    warnings: tuple[str, ...] = ()
    noun: str = "model"
    whole_when_quiet: bool = False

    @property
    def quiet_lines(self) -> tuple[str, ...]:
        return self.lines if self.whole_when_quiet else (self.headline,)


@dataclass(frozen=True, kw_only=True)
class Failure:
    """Why a :class:`Case` failed: its first line, the kinds of what failed it, and every line."""

    message: str
    kinds: str
    lines: tuple[str, ...]

    @classmethod
    def of(cls, found: Sequence[Diagnostic], lines: Sequence[str] | None = None) -> Failure:
        """The failure these diagnostics make: the first one's first line, their kinds (without the job's
        prefix: ``sha256``, ``misplaced``), and ``lines``, else every line of them."""
        kinds = ",".join(dict.fromkeys(d.kind.rpartition("/")[2] for d in found))
        return cls(message=found[0].lines[0], kinds=kinds,
                   lines=tuple(lines if lines is not None else (line for d in found for line in d.lines)))


@dataclass(frozen=True, kw_only=True)
class Case:
    """One thing a report checked (a file's structure, a group of tensors, a read path): passed, ``failure``,
    or ``skipped`` (why); ``out``: what is said of it either way; ``group``: what it belongs to (a file, a
    tensor), as test reports group their cases; None: the target itself."""

    name: str
    group: str | None = None
    seconds: float = 0.0
    failure: Failure | None = None
    skipped: str | None = None
    out: tuple[str, ...] = ()


class Report(Protocol):
    """What every report is (ScanReport, VerifyReport, RowsReport, CheckReport, DiffReport, ModelInfo,
    ManifestWritten), and all a reporter reads of one: ``ok`` when nothing was found, its JSON, which begins
    with ``schema`` and ``tool_version``, its findings in one shape (:class:`~ggaudit.diagnostic.Diagnostic`;
    none for a report that finds nothing), what it says of itself (:class:`~ggaudit.diagnostic.Summary`; its
    text lists the first ``limit`` mismatches, None: all), what it checked (a
    :class:`~ggaudit.diagnostic.Case` each), and what it shows on a page (:mod:`ggaudit.page`'s blocks)."""

    @property
    def ok(self) -> bool: ...

    def to_json(self) -> dict[str, Any]: ...

    def diagnostics(self) -> Iterator[Diagnostic]: ...

    def summary(self, limit: int | None = None) -> Summary: ...

    def cases(self) -> Iterator[Case]: ...

    def page(self, limit: int | None = None) -> Sequence[Block]: ...
