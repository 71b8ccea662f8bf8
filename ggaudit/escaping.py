"""Escaping of untrusted text (tensor names, metadata strings, manifest fields) for terminals."""

from __future__ import annotations

import os
import re
import unicodedata

_SAFE_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

#: Categories that can rearrange, hide or fake what a terminal shows: controls (C0, DEL, C1), format
#: characters (zero-width spaces and joiners, bidi marks and overrides, the soft hyphen, U+FEFF, ...),
#: surrogates, private-use and unassigned code points, and the line and paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

#: Characters in other categories that still show as nothing, or as a space, so two different names
#: could look the same: spaces other than U+0020, the combining grapheme joiner, the Mongolian free
#: variation selectors, the Hangul fillers, the blank braille pattern and the variation selectors.
_LOOKALIKE = re.compile("[\u00a0\u034f\u115f\u1160\u1680\u180b-\u180f\u2000-\u200a\u202f\u205f\u2800"
                        "\u3000\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]")

#: Names decoded with errors="surrogateescape" hold an undecodable byte 0xNN as U+DCNN; it is shown as
#: \xNN, and a real backslash is doubled, so the two never look alike.
_BYTE_SURROGATES = range(0xDC80, 0xDD00)


def _escape_char(ch: str) -> str:
    if ch in _SAFE_ESCAPES:
        return _SAFE_ESCAPES[ch]
    code = ord(ch)
    if code in _BYTE_SURROGATES:
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x20 or 0x7F <= code < 0xA0:
        return f"\\x{code:02x}"
    if unicodedata.category(ch) in _HIDDEN_CATEGORIES or _LOOKALIKE.match(ch):
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return ch


def _is_plain(text: str) -> bool:
    # isprintable() is False for every hidden category and for spaces other than U+0020.
    return text.isprintable() and _LOOKALIKE.search(text) is None


def escape(text: str) -> str:
    """Return *text* with control, invisible and bidi characters shown as backslash escapes (and the
    backslash doubled), safe for a terminal: two different strings never look the same."""
    if "\\" not in text and _is_plain(text):
        return text
    return "".join(_escape_char(ch) for ch in text)


def escape_message(text: str) -> str:
    """*text* made safe for a terminal like :func:`escape`, but with backslashes left as they are.

    For the prose of an error message: it quotes names with ``repr()`` or :func:`escape` and paths as
    typed, so escaping it once more must change nothing (the function is idempotent), while whatever
    it quotes raw still cannot reach the terminal as a control, invisible or bidi character.
    """
    if _is_plain(text):
        return text
    return "".join(ch if ch == "\\" else _escape_char(ch) for ch in text)


def escape_path(path: str, sep: str = os.sep) -> str:
    """*path* escaped for a terminal. Where the separator is a backslash (Windows), it cannot be part of a
    name, so it is shown as it is, once: ``fixtures\\all_types.gguf``, not doubled."""
    if sep != "\\":
        return escape(path)
    return sep.join(escape(part) for part in path.split(sep))
