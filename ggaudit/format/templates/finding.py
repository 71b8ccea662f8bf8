"""What the chat-template checks report: :class:`TemplateFinding`, and :class:`TemplateText`, which places a
finding in the template (line, column) and the file (offset)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, ClassVar

from ...json_shape import json_key, json_record, to_json
from .rules import RULES, TemplateRule
from .text import Hit

__all__ = ["RULES", "TEMPLATE", "TemplateFinding", "TemplateRule", "TemplateText"]

#: The kind (ggaudit.kinds) of every finding here.
TEMPLATE = "template"


@json_record
class TemplateFinding:
    """One thing a chat template does or hides: ``key`` (the metadata key), ``rule`` (what kind of thing:
    ``underscore-attribute``, ``computed-name``, ``format-attribute``, ``forbidden-name``, ``import``,
    ``huge-range``, ``unknown-filter``, ``unknown-test``, ``syntax``; ``tag-characters``, ``bidi``,
    ``zero-width``, ``variation-selectors``, ``blob``, ``url``, ``instruction``, ``homoglyph``,
    ``conditional-injection``), ``severity`` (``error``: code execution or refusal; ``warning``: hidden
    content; ``note``: information), ``line``/``column`` in the template (1-based), ``offset`` in the file,
    ``seen`` (the template's text there; for tag characters and variation selectors, the text they decode to;
    for a computed name, the name computed) and ``detail`` (what it is, in words)."""

    JSON_DEF: ClassVar[str] = "template_finding"

    kind: str = json_key(default=TEMPLATE, values=(TEMPLATE,))
    severity: str = json_key(values=("error", "warning", "note"))
    path: str = json_key(name="file")
    key: str
    rule: TemplateRule = json_key(values=RULES)
    line: int = json_key(minimum=1)
    column: int = json_key(minimum=1)
    offset: int = json_key(minimum=0)
    seen: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


class TemplateText:
    """A template's text: where an index is (line, column, file offset), where a word next appears."""

    def __init__(self, path: str, key: str, text: str, value_offset: int) -> None:
        self.path, self.key, self.text = path, key, text
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.value_offset = value_offset + 8        # the string's u64 length comes first
        self.searched: dict[tuple[int, str], int] = {}

    def finding(self, index: int, rule: TemplateRule, severity: str, seen: str, detail: str) -> TemplateFinding:
        line = _bisect(self.starts, index)
        offset = self.value_offset + len(self.text[:index].encode("utf-8", "surrogatepass"))
        return TemplateFinding(path=self.path, key=self.key, rule=rule, severity=severity, line=line + 1,
                               column=index - self.starts[line] + 1, offset=offset, seen=seen, detail=detail)

    def find(self, lineno: int, needle: str) -> int:
        """Where ``needle`` next appears from line ``lineno`` (1-based) on, after any earlier find of it on
        that line: jinja2's nodes know their line, not their column."""
        start = self.searched.get((lineno, needle), self.starts[min(lineno, len(self.starts)) - 1])
        index = self.text.find(needle, start)
        if index < 0:
            index = start
        self.searched[(lineno, needle)] = index + 1
        return index

    def find_after(self, lineno: int, opener: str, needle: str) -> int:
        """Where ``needle`` first appears after the next ``opener`` from line ``lineno`` on (a key after its
        ``[``)."""
        at = self.find(lineno, opener)
        index = self.text.find(needle, at) if needle else -1
        return at if index < 0 else index

    def hits(self, lineno: int, hits: Iterator[Hit]) -> Iterator[TemplateFinding]:
        """Hits of a text rule in a piece of the template that starts on line ``lineno``."""
        for hit in hits:
            yield self.finding(self.find(lineno, hit.seen), hit.rule, hit.severity, hit.seen, hit.detail)


def _bisect(starts: list[int], index: int) -> int:
    lo, hi = 0, len(starts)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if starts[mid] <= index else (lo, mid)
    return lo

