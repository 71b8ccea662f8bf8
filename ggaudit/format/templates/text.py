"""The text rules of the chat-template check: what a template's characters hide (invisible characters, blobs,
URLs) and what its words say to the model (instructions, homoglyphs). Pure functions of a string yielding
:class:`Hit` (``at``: index in that string, rule, severity, seen, detail); ggaudit.format.templates places them in the
template and the file. Every rule is a compiled regular expression or ``str.translate``: one pass of C code,
not a Python loop per character.

URLs: one inside a Jinja comment (``{# ... #}``) is never rendered, so the model never reads it (vLLM's own
templates cite where they were adapted from there): a note. One in rendered text or a string is a warning.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterator
from typing import NamedTuple

from .rules import TemplateRule

__all__ = ["ERROR", "NOTE", "WARNING", "Hit", "comment_spans", "hidden", "homoglyphs", "instructions"]

ERROR, WARNING, NOTE = "error", "warning", "note"


class Hit(NamedTuple):
    at: int
    rule: TemplateRule
    severity: str
    seen: str
    detail: str


# Runs of invisible characters, as regular expressions: found in one pass of re's C loop, not a Python loop
# per character (a template of 20,000 characters costs microseconds, not milliseconds).
_TAGS = re.compile("[\U000E0000-\U000E007F]+")
_BIDI = re.compile("[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]+")
_ZERO_WIDTH = re.compile("[\u180E\u200B-\u200D\u2060-\u2064\uFEFF]+")
#: U+FE00..FE0F and U+E0100..E01EF: one after an emoji picks its style; two or more in a row are a payload.
_SELECTORS = re.compile("[\uFE00-\uFE0F\U000E0100-\U000E01EF]{2,}")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{80,}={0,2}")
_HEX = re.compile(r"(?<![0-9A-Za-z])[0-9A-Fa-f]{64,}(?![0-9A-Za-z])")
_URL = re.compile(r"\b(?:https?|ftp|file|javascript)://[^\s'\"<>{}]+|\bwww\.[a-z0-9-]+\.[a-z]{2,}[^\s'\"<>{}]*",
                  re.IGNORECASE)
#: Jinja's comments (default delimiters): never rendered.
_COMMENT = re.compile(r"\{#.*?#\}", re.DOTALL)
#: Text that addresses the model with instructions to override, hide or deceive. Keeping something from the user
#: counts when what is kept is named as a secret: Qwen3-Coder's "do not tell the user about function calls" is
#: not one.
_INSTRUCTION = re.compile(
    r"\b(?:ignore|disregard|forget|override)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|all|system|your)\b"
    r"[^.\n]{0,20}?\b(?:instructions?|rules|prompts?|guidelines)\b"
    r"|\b(?:do not|don't|never)\s+(?:tell|reveal|mention|inform|disclose|show)\b[^.\n]{0,30}?\b(?:the user|anyone)\b"
    r"[^.\n]{0,20}?\b(?:that|this|these|what|who|where|the (?:password|secret|code|key|truth|instructions?)|"
    r"about (?:this|these|the|your) (?:instructions?|prompt|rules|system|secret))\b"
    r"|\bwithout (?:telling|informing|alerting|notifying) the user\b"
    r"|\b(?:new|hidden|secret) instructions?\b"
    r"|\bsystem (?:prompt )?override\b",
    re.IGNORECASE)

# Homoglyphs (UTS #39): a word mixing Latin letters with Cyrillic or Greek ones, and the Cyrillic and Greek
# letters that look like Latin ones (the confusables a reader takes for Latin), folded to Latin for the
# instruction rule.
_LATIN = "A-Za-z\u00C0-\u024F\u1E00-\u1EFF"
_LOOKALIKE = "\u0370-\u03FF\u0400-\u052F\u1F00-\u1FFF"
_NOT_LATIN = re.compile(f"[{_LOOKALIKE}]")
_MIXED_WORD = re.compile(
    rf"(?<![^\W\d_])[^\W\d_]*(?:[{_LATIN}][^\W\d_]*[{_LOOKALIKE}]|[{_LOOKALIKE}][^\W\d_]*[{_LATIN}])[^\W\d_]*")
#: (Cyrillic and Greek letters, the Latin ones they look like), written as escapes: ruff (RUF001) and a reader
#: would take them for Latin.
_LOOKALIKE_PAIRS = (
    ("\u0430\u0435\u043E\u0440\u0441\u0443\u0445\u0456\u0458\u0455", "aeopcyxijs"),
    ("\u04BB\u0501\u051B\u051D\u04CF\u03B1\u03BF\u03C1\u03BD\u03B9", "hdqwlaopvi"),
    ("\u03BA\u03C4\u03C5\u03C7\u03B5", "ktuxe"),
    ("\u0410\u0412\u0415\u041A\u041C\u041D\u041E\u0420\u0421\u0422", "ABEKMHOPCT"),
    ("\u0425\u0406\u0408\u0405\u04AE\u0500\u0391\u0392\u0395\u0396", "XIJSYDABEZ"),
    ("\u0397\u0399\u039A\u039C\u039D\u039F\u03A1\u03A4\u03A5\u03A7", "HIKMNOPTYX"),
)
_CONFUSABLES = str.maketrans("".join(c for c, _ in _LOOKALIKE_PAIRS), "".join(la for _, la in _LOOKALIKE_PAIRS))


def _is_pictograph(ch: str) -> bool:
    cp = ord(ch)
    return cp >= 0x1F000 or 0x2600 <= cp < 0x27C0 or unicodedata.category(ch) == "So"


def _selector_byte(ch: str) -> int:
    """The byte a variation selector carries: 0..15 for U+FE00..FE0F, then 16..255."""
    cp = ord(ch)
    return cp - 0xFE00 if cp <= 0xFE0F else cp - 0xE0100 + 16


def _code_points(run: str) -> str:
    return ", ".join(f"U+{ord(c):04X}" for c in run)


def comment_spans(text: str) -> list[tuple[int, int]]:
    """Where the Jinja comments are: (start, end) in order."""
    return [m.span() for m in _COMMENT.finditer(text)]


def _inside(spans: list[tuple[int, int]], index: int) -> bool:
    at = bisect.bisect_left(spans, (index + 1, 0)) - 1     # the last comment starting at or before index
    return at >= 0 and index < spans[at][1]


def hidden(text: str) -> Iterator[Hit]:
    """Invisible characters, blobs and URLs anywhere in the template's text."""
    yield from _invisible(text)
    yield from _blobs(text)
    yield from _urls(text)


def _invisible(text: str) -> Iterator[Hit]:
    for m in _TAGS.finditer(text):
        shown = "".join(chr(ord(c) - 0xE0000) for c in m.group() if 0xE0020 <= ord(c) <= 0xE007E)
        yield Hit(m.start(), "tag-characters", WARNING, shown,
                  f"{len(m.group())} invisible Unicode tag characters, which spell {shown!r}")
    for m in _BIDI.finditer(text):
        yield Hit(m.start(), "bidi", WARNING, m.group(),
                  f"bidi control {_code_points(m.group())}: the text shown is not the order it is read in")
    for m in _ZERO_WIDTH.finditer(text):
        start, end = m.span()
        if m.group().strip("\u200d") == "" and start > 0 and end < len(text) and \
                _is_pictograph(text[start - 1]) and _is_pictograph(text[end]):
            continue    # a zero-width joiner inside an emoji sequence
        yield Hit(start, "zero-width", WARNING, m.group(), f"zero-width character {_code_points(m.group())}")
    for m in _SELECTORS.finditer(text):
        shown = bytes(_selector_byte(c) for c in m.group()).decode("utf-8", "backslashreplace")
        yield Hit(m.start(), "variation-selectors", WARNING, shown,
                  f"{len(m.group())} variation selectors in a row, a payload of bytes that reads {shown!r}")


def _blobs(text: str) -> Iterator[Hit]:
    for m in _HEX.finditer(text):
        yield Hit(m.start(), "blob", WARNING, m.group(), f"a hex blob of {len(m.group())} characters")
    for m in _BASE64.finditer(text):
        blob = m.group()
        if any(c.isdigit() for c in blob) and any(c.isupper() for c in blob) and any(c.islower() for c in blob) \
                and not _HEX.fullmatch(blob):
            yield Hit(m.start(), "blob", WARNING, blob, f"a base64 blob of {len(blob)} characters")


def _urls(text: str) -> Iterator[Hit]:
    urls = list(_URL.finditer(text))
    comments = comment_spans(text) if urls else []
    for m in urls:
        if _inside(comments, m.start()):
            yield Hit(m.start(), "url", NOTE, m.group(), "a URL in a Jinja comment, which is never rendered")
        else:
            yield Hit(m.start(), "url", WARNING, m.group(), "a URL: a template has no reason to hold one")


def instructions(text: str, where: str) -> Iterator[Hit]:
    """Instructions to the model to override, hide or deceive, in ``text`` (rendered text or a string of the
    template: ``where`` says which)."""
    for m in _INSTRUCTION.finditer(text):
        yield Hit(m.start(), "instruction", WARNING, m.group(), f"{where} that instructs the model")


def homoglyphs(text: str, where: str) -> Iterator[Hit]:
    """Instructions written with Cyrillic or Greek letters that look like Latin ones, and words mixing Latin
    with Cyrillic or Greek letters (a word all in one script is real text, not a finding)."""
    if _NOT_LATIN.search(text) is None:
        return
    folded = text.translate(_CONFUSABLES)
    spans = []
    for m in _INSTRUCTION.finditer(folded):
        start, end = m.span()
        if text[start:end] != m.group():
            spans.append((start, end))
            yield Hit(start, "homoglyph", WARNING, text[start:end],
                      f"{where} that instructs the model in look-alike letters ({_lookalikes(text[start:end])}); "
                      f"it reads {m.group()!r}")
    for m in _MIXED_WORD.finditer(text):
        if not any(start <= m.start() < end for start, end in spans):
            yield Hit(m.start(), "homoglyph", WARNING, m.group(),
                      f"a word mixing Latin with Cyrillic or Greek letters ({_lookalikes(m.group())}) in {where}")


def _lookalikes(word: str) -> str:
    return _code_points("".join(_NOT_LATIN.findall(word)))
