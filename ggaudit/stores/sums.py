"""sha256 checksum files (GNU, BSD ``--tag``, OpenSSL); every name stays inside the file's folder (or
the base folder given)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ManifestError
from ..untrusted import OUTSIDE, confine, quote, real
from .small_files import read_text

log = logging.getLogger(__name__)

#: Most lines a checksum file may have (a model repository's lists a few dozen files).
MAX_SUMS_LINES = 1 << 16
_GNU_LINE = re.compile(r"(?P<hex>[0-9a-fA-F]+) [ *](?P<name>.+)")
_TAG_LINE = re.compile(r"(?P<algo>[A-Za-z0-9-]+) ?\((?P<name>.+)\) ?= (?P<hex>[0-9a-fA-F]+)")
_SHA256_TAGS = {"SHA256", "SHA2-256", "SHA-256"}


@dataclass(frozen=True)
class SumsEntry:
    """One line of a checksum file: the name as written, where it resolves, and the sha256.

    ``problem`` says why the file must not be opened (a link pointing out of the folder, a symlink
    loop) and is None otherwise; such a line is one reported entry among the others.
    """

    name: str
    path: Path
    sha256: str
    line: int
    problem: str | None = None


def read_sums(path: str | os.PathLike[str], base: str | os.PathLike[str] | None = None) -> tuple[SumsEntry, ...]:
    """Parse a sha256 checksum file: GNU, BSD ``--tag`` or OpenSSL lines, hex in any case.

    Blank lines and ``#`` comments are skipped. Names resolve relative to ``base`` (default: the file's
    folder); a name that is absolute or climbs out of it (``..``) makes the file a ManifestError; a name
    that is a link pointing out of that folder, or a symlink loop, is an entry whose ``problem`` says so.
    """
    sums = Path(path)
    folder = real(sums.parent if base is None else base)
    where = "the checksum file's folder" if base is None else "the base folder"
    problems: dict[str, str | None] = {}    # per name: 65,536 lines naming one file resolve it once
    entries = []
    text = read_text(sums, "checksum file")
    # Refused before the lines are split: 60 MiB of newlines made a 600 MB list of empty lines.
    if text.count("\n") > MAX_SUMS_LINES:
        raise ManifestError(sums, f"checksum file has more than {MAX_SUMS_LINES} lines")
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, hexdigest = _parse_sums_line(line, sums, number)
        target = _confined(folder, name, sums, number, where)
        if name not in problems:
            problems[name] = confine(target, (folder,))
        entries.append(SumsEntry(name, target, hexdigest.lower(), number, _problem_text(problems[name], where)))
    if not entries:
        raise ManifestError(sums, "no checksum lines found")
    return tuple(entries)


def _parse_sums_line(line: str, sums: Path, number: int) -> tuple[str, str]:
    escaped = line.startswith("\\")
    body = line[1:] if escaped else line
    field = f"line {number}"
    tagged = _TAG_LINE.fullmatch(body)
    if tagged and not _GNU_LINE.fullmatch(body):
        if tagged["algo"].upper() not in _SHA256_TAGS:
            raise ManifestError(sums, f"algorithm {quote(tagged['algo'])} is not sha256", field=field)
        name, hexdigest = tagged["name"], tagged["hex"]
    elif (gnu := _GNU_LINE.fullmatch(body)):
        name, hexdigest = gnu["name"], gnu["hex"]
    else:
        raise ManifestError(sums, "not a GNU, BSD or OpenSSL checksum line", field=field)
    if len(hexdigest) != 64:
        raise ManifestError(sums, f"digest has {len(hexdigest)} hex digits, sha256 has 64", field=field)
    return (_unescape(name, sums, field) if escaped else name), hexdigest


def _unescape(name: str, sums: Path, field: str) -> str:
    """Undo coreutils' escaping of names holding a backslash, newline or carriage return."""
    out, i = [], 0
    while i < len(name):
        ch = name[i]
        if ch == "\\":
            nxt = name[i + 1:i + 2]
            if nxt not in ("\\", "n", "r"):
                raise ManifestError(sums, f"bad escape \\{nxt} in name", field=field)
            out.append({"\\": "\\", "n": "\n", "r": "\r"}[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _confined(folder: Path, name: str, sums: Path, number: int, where: str) -> Path:
    """The path *name* gives in *folder*; ManifestError if the name itself leaves it (its links are
    judged apart, by ``confine``: a file is not malformed because of where a link on disk leads)."""
    candidate = Path(name)
    # root as well as drive: on Windows "/etc/passwd" is not absolute (no drive) but starts at the root.
    if "\0" in name or candidate.is_absolute() or candidate.drive or candidate.root or ".." in candidate.parts:
        raise ManifestError(sums, f"name {quote(name)} leaves {where}",
                            field=f"line {number}")
    return folder / candidate


def _problem_text(problem: str | None, where: str) -> str | None:
    if problem == OUTSIDE:
        return f"resolves outside {where} (a link pointing out): not followed"
    return problem
