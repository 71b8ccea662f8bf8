"""Two rules for paths and text that come from a store, a folder or a manifest, kept in one place.

``confine``: where a path leads once its links are followed, and whether that stays inside the store or
folder it was found in. Nothing outside is opened, walked or quoted; a symlink loop is an answer, not
a RuntimeError (``Path.resolve`` before Python 3.13) or an endless walk.

``quote``: untrusted input quoted in a message, cut to a few dozen characters, so a 60 MiB line of a
checksum file never becomes a 60 MB error line.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from collections.abc import Iterable

#: What ``confine`` says about a path that cannot be followed to its end because a link leads back.
LOOP = "is a symlink loop"
#: What ``confine`` says about a path whose links lead out of every root.
OUTSIDE = "resolves outside"
#: What ``confine`` says about a path holding a NUL byte, which no OS call accepts.
NUL = "holds a NUL byte"

#: Characters of untrusted input a message quotes before cutting it.
QUOTE_CHARS = 40

_ERROR_CANT_RESOLVE_FILENAME = 1921     # Windows' word for a loop of reparse points


def real(path: str | os.PathLike[str]) -> Path:
    """*path* with every link followed as far as it goes (a root to compare against; never raises on
    a loop, which is judged by ``confine``)."""
    return Path(os.path.realpath(path))


def confine(path: str | os.PathLike[str], roots: Iterable[Path]) -> str | None:
    """None when *path*, links followed, is one of *roots* or inside one (roots given as ``real`` made
    them); else why not: ``LOOP``, ``OUTSIDE`` or ``NUL``. A link whose target is missing is judged by where it
    would lead, so a dangling link out is still "outside" and a dangling link in is left to the caller
    to report as missing."""
    try:
        target = Path(os.path.realpath(path, strict=True))
    except ValueError:          # an embedded NUL: no such file can exist, and nothing is followed
        return NUL
    except RuntimeError:        # Path-style loop detection on some Pythons
        return LOOP
    except OSError as err:
        if err.errno == errno.ELOOP or getattr(err, "winerror", None) == _ERROR_CANT_RESOLVE_FILENAME:
            return LOOP
        target = Path(os.path.realpath(path))    # missing (or unreadable) part: where it would lead
    if any(target == root or root in target.parents for root in roots):
        return None
    return OUTSIDE


def sibling_roots(given: str | os.PathLike[str]) -> tuple[Path, ...]:
    """Where the files found next to *given* (the shards of its split set, the files of its manifest) may
    lead: its folder, and the folder its own link leads to, since a Hugging Face snapshot links every
    shard into the repository's blobs/. The file the user named is theirs to name, wherever it leads."""
    return real(os.path.dirname(given) or "."), real(given).parent


def shorten(text: str, limit: int = QUOTE_CHARS) -> str:
    """*text* cut to *limit* characters, with the full length said: ``abc... (N chars)``."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of *text*, cut to *limit* characters with the full length said: ``'abc'... (N chars)``."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} chars)"
