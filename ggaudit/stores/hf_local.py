"""A folder downloaded with ``huggingface-cli download --local-dir D``, offline.

huggingface_hub keeps, for each file it wrote to D, ``D/.cache/huggingface/download/<file>.metadata``: three
lines, the commit, the etag (the sha256 of the file for LFS files, git's blob sha1 for the others) and
the time the metadata was written. A file whose mtime is more than a second after that time was
changed since it was downloaded (huggingface_hub itself then ignores the metadata).
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ManifestError
from ..untrusted import OUTSIDE, confine, quote, real
from .expected import STALE, STORE, file_key
from .listing import WARNING, Expected, Problem, StoreEntry, StoreListing, leftovers
from .registry import Store, files_below, is_projector, one_model, opens_a_model
from .small_files import HEX64, read_text

log = logging.getLogger(__name__)

METADATA_FOLDER = (".cache", "huggingface", "download")
_SUFFIX = ".metadata"
_GIT_SHA1 = re.compile(r"[0-9a-fA-F]{40}")
#: huggingface_hub's allowance for an mtime that is not precise.
MTIME_SLACK_SECONDS = 1.0


@dataclass(frozen=True)
class LocalFile:
    """One file of the folder and what its download metadata promises.

    ``algorithm``/``expected`` are set when the etag is a digest; ``problem`` says why the file cannot be
    checked (no metadata, malformed metadata, an etag that is no digest, a link pointing out of the
    folder); ``stale`` that it was modified after its metadata was written.
    """

    name: str               # path inside the folder, '/'-separated, as stored (untrusted text)
    path: Path
    algorithm: str | None = None
    expected: str | None = None
    problem: str | None = None
    stale: bool = False
    linked_out: bool = False


@dataclass(frozen=True)
class LocalDownload:
    folder: Path
    files: tuple[LocalFile, ...]
    absent: tuple[LocalFile, ...]       # metadata whose file is not there
    incomplete: tuple[Path, ...]


def read_hf_local(folder: str | os.PathLike[str]) -> LocalDownload:
    """Every file of a ``--local-dir`` download with the digest its metadata gives; nothing outside
    ``folder`` is opened or walked (a link pointing out is listed with its problem)."""
    root = Path(folder)
    if not root.is_dir():
        raise ManifestError(root, "is not a folder (a huggingface-cli --local-dir download)")
    inside = real(root)
    meta = root.joinpath(*METADATA_FOLDER)
    problem = confine(meta, (inside,))
    if problem is not None:
        raise ManifestError(meta, "download metadata folder is a link pointing outside the folder; not followed"
                            if problem == OUTSIDE else f"download metadata folder {problem}")
    if not meta.is_dir():
        raise ManifestError(meta, "no download metadata: not a folder huggingface-cli download --local-dir wrote")
    files = _walk(root, skip=root / METADATA_FOLDER[0] / METADATA_FOLDER[1])
    listed = _walk(meta)
    metadata = {name[:-len(_SUFFIX)]: path for name, path in listed.items() if name.endswith(_SUFFIX)}
    present = tuple(_local_file(name, path, metadata.get(name), inside) for name, path in sorted(files.items()))
    absent = tuple(_local_file(name, root / name, metadata[name], inside, absent=True)
                   for name in sorted(metadata) if name not in files)
    incomplete = tuple(sorted(path for name, path in listed.items() if name.endswith(".incomplete")))
    return LocalDownload(root, present, absent, incomplete)


def _walk(folder: Path, skip: Path | None = None) -> dict[str, Path]:
    """Every non-folder entry below ``folder`` by its '/'-separated relative name; links are listed, not
    followed into folders; ``skip`` (a folder) is left out."""
    found: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        dirnames[:] = sorted(n for n in dirnames if here / n != skip)
        for name in filenames + [n for n in dirnames if (here / n).is_symlink()]:
            found[(here / name).relative_to(folder).as_posix()] = here / name
    return found


def _local_file(name: str, path: Path, metadata: Path | None, inside: Path, *, absent: bool = False) -> LocalFile:
    if not absent and confine(path, (inside,)) is not None:
        return LocalFile(name, path, problem="a link pointing outside the folder (or a loop): not followed",
                         linked_out=True)
    if metadata is None:
        return LocalFile(name, path, problem="no download metadata: not checked")
    if confine(metadata, (inside,)) is not None:
        return LocalFile(name, path, problem="its download metadata is a link pointing outside the folder: "
                                             "not checked")
    try:
        etag, timestamp = _parse_metadata(metadata)
    except ManifestError as err:
        return LocalFile(name, path, problem=f"download metadata unreadable ({err.message}): not checked")
    if HEX64.fullmatch(etag):
        algorithm = "sha256"
    elif _GIT_SHA1.fullmatch(etag):
        algorithm = "git-sha1"
    else:
        return LocalFile(name, path, problem=f"etag {quote(etag)} is not a digest: not checked")
    stale = not absent and _modified_after(path, timestamp)
    return LocalFile(name, path, algorithm, etag.lower(), stale=stale)


def _parse_metadata(path: Path) -> tuple[str, float]:
    """The etag and timestamp of a download metadata file (commit, etag, timestamp, one per line)."""
    lines = read_text(path, "download metadata").split("\n")
    if len(lines) < 3:
        raise ManifestError(path, "download metadata has fewer than three lines")
    try:
        timestamp = float(lines[2].strip())
    except ValueError:
        raise ManifestError(path, f"timestamp {quote(lines[2].strip())} is not a number", field="line 3") from None
    if not math.isfinite(timestamp):
        raise ManifestError(path, "timestamp is not finite", field="line 3")
    return lines[1].strip(), timestamp


def _modified_after(path: Path, timestamp: float) -> bool:
    try:
        return os.stat(path).st_mtime - MTIME_SLACK_SECONDS > timestamp
    except OSError:         # gone or unreadable: the check of its digest says so
        return False


def hf_local_entries(download: LocalDownload) -> list[StoreEntry]:
    """Each file of the folder, then each its metadata names that is absent: the etag (noted :data:`STALE`
    for a file modified since, and still checked, as huggingface_hub would not), a link out of the folder
    (verify's ``link``), or why it has none (a :data:`WARNING`: no download metadata, an etag no digest)."""
    entries = []
    for f in download.files + download.absent:
        path = os.fspath(f.path)
        if f.linked_out or f.problem is not None:
            entries.append(StoreEntry(path=path, subject=f.name, read=path, problem=Problem(
                kind="link" if f.linked_out else WARNING, subject=f.name, detail=f.problem or "")))
        elif f.algorithm is not None and f.expected is not None:
            entries.append(StoreEntry(path=path, subject=f.name, read=path, expected=Expected(
                algorithm=f.algorithm, digest=f.expected, source=STORE,
                what="the etag of its Hugging Face download metadata", note=STALE if f.stale else None)))
    return entries


def _local_empty(download: LocalDownload) -> str:
    """Why a ``--local-dir`` folder checked nothing, in words."""
    if not download.files:
        return "the folder holds no downloaded file"
    count = len(download.files)
    return f"none of its {count} file{'s' if count > 1 else ''} has download metadata giving a digest"


class HFLocalStore(Store, prefix="hf-local"):
    """``hf-local:DIR``: a ``huggingface-cli download --local-dir DIR`` folder, its files checked by the
    digests its download metadata keeps."""

    def expectations(self) -> LocalDownload:
        return read_hf_local(self.name)

    def entries(self) -> list[StoreEntry]:
        return hf_local_entries(self.expectations())

    def listing(self) -> StoreListing:
        """Each file against the etag of its download metadata (one without: a warning), then the leftovers
        of interrupted downloads."""
        download = self.expectations()
        return StoreListing(subject=os.fspath(self.name), kind="hf-local", items=tuple(hf_local_entries(download)),
                            empty=_local_empty(download), warnings=leftovers(download.incomplete))

    def redownload(self, damaged: Sequence[str]) -> str:
        download = self.expectations()
        repo = {file_key(f.path): f.name for f in download.files}     # as the repository names them
        names = " ".join(repo.get(file_key(path), os.path.basename(path)) for path in damaged)
        return (f"the download is damaged: download it again into its folder, replacing the copy: `hf download "
                f"REPO {names} --force-download --local-dir {download.folder}` (REPO: the repository it came from)")

    def model_files(self) -> list[str]:
        files = self.expectations().files
        model = one_model(str(self), [f.name for f in files if opens_a_model(f.name) and not is_projector(f.name)],
                          "open one by its path")
        chosen = [f for f in files if f.name == model]
        chosen += [f for f in files if is_projector(f.name) and f.path.parent == chosen[0].path.parent]
        for entry in chosen:
            if entry.linked_out:
                raise ManifestError(entry.path, entry.problem or "")
        return [os.fspath(f.path) for f in chosen]

    def relied_on(self) -> list[str]:
        """Every file of the folder, the download metadata below ``.cache/huggingface/download`` included."""
        return files_below(self.name)
