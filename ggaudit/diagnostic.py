"""One shape for every finding of every job: :class:`Diagnostic`, what ``report.diagnostics()`` yields.

Reporters that list findings without caring which job found them (SARIF, JUnit, a future ``--fail-on``)
read diagnostics only; the text and HTML reporters keep each report's own detail. Adding a job means
giving its report a ``diagnostics()`` method and registering its kinds in :mod:`ggaudit.kinds`.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .kinds import kind as registered

__all__ = ["Diagnostic", "Place"]


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
