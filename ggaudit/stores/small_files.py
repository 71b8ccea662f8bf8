"""What every source of expected digests shares: reading small untrusted text and JSON files."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any, TypeGuard

from ..io import opening
from ..errors import ManifestError

log = logging.getLogger(__name__)

MAX_MANIFEST_BYTES = 64 << 20
"""Refuse manifest and checksum files larger than this: they are small text, never model-sized."""

#: Most objects and arrays, and most strings, a JSON manifest may hold. Parsed, each costs 50 to 200 bytes,
#: so a 64 MiB file of "{}," would take 1.6 GB; a tensor manifest of a 1 TB model holds about a million
#: strings (one per row group) and a few objects per tensor.
MAX_JSON_CONTAINERS = 1 << 20
MAX_JSON_STRINGS = 1 << 22

HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def read_text(path: Path, what: str) -> str:
    """Read a small text file, refusing huge ones and reporting undecodable bytes with their offset."""
    # Opened without blocking, so a FIFO cannot hang the open; only regular files are read.
    fd = _open(path, what)
    try:
        st = os.fstat(fd)   # before open(): it would raise IsADirectoryError for a folder
        if stat.S_ISDIR(st.st_mode):
            raise ManifestError(path, f"{what} is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise ManifestError(path, f"{what} is not a regular file")
        if st.st_size > MAX_MANIFEST_BYTES:     # refuse before reading: no 64 MiB buffer for nothing
            raise ManifestError(path, f"{what} is larger than {MAX_MANIFEST_BYTES} bytes")
        with open(fd, "rb", closefd=False) as f:
            data = f.read(st.st_size + 1)  # not MAX_MANIFEST_BYTES + 1: read() allocates what it is asked for
    finally:
        os.close(fd)
    if len(data) > st.st_size:
        raise ManifestError(path, f"{what} grew while being read (changed while reading?)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ManifestError(path, f"{what} is not UTF-8 text", offset=err.start) from None


def _open(path: Path, what: str) -> int:
    try:
        return opening.open_fd(path)
    except OSError as err:
        reason = opening.open_error(path, err).message   # Windows refuses a folder with EACCES: says so
        if reason == "is a directory":
            raise ManifestError(path, f"{what} {reason}") from None
        raise ManifestError.for_os_error(path, f"cannot open {what}: {err.strerror or err}", err) from None


def load_json(path: Path, what: str) -> Any:
    text = read_text(path, what)
    # Counted on the text (brackets and quotes inside strings count too: an upper bound), so a hostile
    # file is refused before the parser allocates anything for it.
    if text.count("{") + text.count("[") > MAX_JSON_CONTAINERS:
        raise ManifestError(path, f"{what} holds more than {MAX_JSON_CONTAINERS} objects and arrays")
    if text.count('"') > 2 * MAX_JSON_STRINGS:
        raise ManifestError(path, f"{what} holds more than {MAX_JSON_STRINGS} strings")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ManifestError(path, f"{what} is not JSON: {err.msg}", offset=err.pos) from None
    except ValueError:          # an integer of more digits than Python converts (int_max_str_digits)
        raise ManifestError(path, f"{what} holds an integer of more than {_max_int_digits()} digits",
                            offset=_long_integer_at(text)) from None
    except RecursionError:      # absurdly deep nesting: hostile, never a real manifest
        raise ManifestError(path, f"{what} nests too deeply") from None


def is_count(value: object, minimum: int = 0) -> TypeGuard[int]:
    """A JSON integer (not a bool, which Python counts as one) of at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _max_int_digits() -> int:
    return getattr(sys, "get_int_max_str_digits", lambda: 4300)()


def _long_integer_at(text: str) -> int | None:
    """Where the first JSON number longer than Python converts starts (strings skipped), if found."""
    number = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d{' + str(_max_int_digits() + 1) + r',}(?![\d.eE])')
    return next((m.start() for m in number.finditer(text) if not m.group().startswith('"')), None)

