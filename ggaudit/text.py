"""Escaping of untrusted text (tensor names, metadata strings, manifest fields) for terminals."""

from __future__ import annotations

import os

_SAFE_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(ch: str) -> str:
    if ch in _SAFE_ESCAPES:
        return _SAFE_ESCAPES[ch]
    code = ord(ch)
    # C0, DEL, C1 controls and the Unicode line/paragraph separators and bidi overrides can all
    # rearrange or hide what a terminal shows, so they never reach it raw.
    if code < 0x20 or 0x7F <= code < 0xA0 or code in (0x2028, 0x2029) or 0x202A <= code <= 0x202E \
            or 0x2066 <= code <= 0x2069:
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return ch


def escape(text: str) -> str:
    """Return *text* with control characters shown as backslash escapes, safe for a terminal."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_escape_char(ch) for ch in text)


def escape_path(path: str, sep: str = os.sep) -> str:
    """*path* escaped for a terminal. Where the separator is a backslash (Windows), it cannot be part of a
    name, so it is shown as it is, once: ``fixtures\\all_types.gguf``, not doubled."""
    if sep != "\\":
        return escape(path)
    return sep.join(escape(part) for part in path.split(sep))
