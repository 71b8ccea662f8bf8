"""The Hugging Face cache, offline: each file of a snapshot and the digest its blob's name promises."""

from __future__ import annotations

import logging
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping, Sequence

from ..errors import ManifestError, UsageError
from ..untrusted import OUTSIDE, confine, quote, real, shorten
from .expected import STORE, file_key
from .listing import Expected, Problem, StoreEntry, StoreListing, leftovers
from .small_files import HEX64, read_text
from .ollama import chosen_by, home_folder
from .registry import Roots, Store, files_below, is_projector, one_model, opens_a_model

log = logging.getLogger(__name__)

_HF_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REVISION = re.compile(r"[A-Za-z0-9._/-]{1,255}")


@dataclass(frozen=True)
class HFSpec:
    repo_id: str        # ORG/NAME
    revision: str       # a branch or tag name, or a 40-hex commit

    @property
    def folder(self) -> str:
        return "models--" + self.repo_id.replace("/", "--")


def parse_hf_spec(text: str) -> HFSpec:
    """Parse ``ORG/NAME[@REVISION]`` (the ``hf:`` prefix already removed); revision defaults to main."""
    repo, _, revision = text.partition("@")
    revision = revision or "main"
    parts = repo.split("/")
    if len(parts) != 2 or not all(_HF_PART.fullmatch(p) and set(p) != {"."} for p in parts):
        raise UsageError(None, f"Hugging Face repo {quote(text)} is not ORG/NAME[@REVISION]")
    if not _REVISION.fullmatch(revision) or ".." in revision.split("/"):
        raise UsageError(None, f"Hugging Face revision {quote(revision)} is not a safe ref name")
    return HFSpec(repo, revision)


def default_hf_cache(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    return (home or home_folder("set HF_HUB_CACHE or HF_HOME")) / ".cache" / "huggingface" / "hub"


@dataclass(frozen=True)
class HFFile:
    """One file of a cached snapshot and the blob its link names.

    ``algorithm`` is ``sha256`` for large (LFS) files, whose blob is named by its sha256, and
    ``git-sha1`` for small files, named by git's blob hash. ``problem`` says why it cannot be hashed
    (a broken link, a link leaving the cache, a copy instead of a link) and is None otherwise.
    """

    name: str           # path inside the snapshot, as stored (untrusted text)
    link: Path
    blob: Path | None
    algorithm: str | None
    expected: str | None
    problem: str | None


@dataclass(frozen=True)
class HFSnapshot:
    spec: HFSpec
    repo_dir: Path
    commit: str
    files: tuple[HFFile, ...]
    incomplete: tuple[Path, ...]


def read_hf_snapshot(spec: str | HFSpec, cache: str | os.PathLike[str] | None = None) -> HFSnapshot:
    """Locate ``spec``'s snapshot in the cache and list its files with the digest each must have.

    Nothing outside the repository's folder is read or walked: a ref, snapshot or blobs folder that
    is a link pointing out of it (or a loop) is a ManifestError; a file of the snapshot linking out is
    listed with its problem and never opened.
    """
    parsed = parse_hf_spec(spec) if isinstance(spec, str) else spec
    root = Path(cache) if cache is not None else default_hf_cache()
    repo_dir = root / parsed.folder
    _require_inside(repo_dir, real(root), "repository folder", "the cache")
    if not repo_dir.is_dir():
        how = chosen_by(None if cache is None else "hf_cache", ("HF_HUB_CACHE", "HF_HOME"))
        raise ManifestError(repo_dir, (f"{parsed.repo_id} is not in the Hugging Face cache {root} (", *how, ")"))
    inside = real(repo_dir)
    commit = _hf_commit(repo_dir, inside, parsed.revision)
    snapshot = repo_dir / "snapshots" / commit
    _require_inside(snapshot, inside, "snapshot", "the repository folder")    # os.walk would follow it
    if not snapshot.is_dir():
        raise ManifestError(snapshot, f"revision {parsed.revision} ({commit}) has no snapshot")
    _require_inside(repo_dir / "blobs", inside, "blobs folder", "the repository folder")
    blobs = real(repo_dir / "blobs")
    # Ordered by the repository path, not by Path (which ignores case on Windows): the same order everywhere.
    files = tuple(sorted((_hf_file(snapshot, link, blobs) for link in _walk(snapshot)), key=lambda f: f.name))
    incomplete = tuple(sorted(p for p in (repo_dir / "blobs").glob("*.incomplete")))
    return HFSnapshot(parsed, repo_dir, commit, files, incomplete)


def _require_inside(path: Path, root: Path, what: str, where: str) -> None:
    """ManifestError, before anything opens or walks *path*, unless it stays inside *root* (real)."""
    problem = confine(path, (root,))
    if problem == OUTSIDE:
        raise ManifestError(path, f"{what} is a link pointing outside {where}; not followed")
    if problem is not None:
        raise ManifestError(path, f"{what} {problem}")


def _hf_commit(repo_dir: Path, inside: Path, revision: str) -> str:
    if _COMMIT.fullmatch(revision):
        return revision
    ref = repo_dir / "refs" / revision
    _require_inside(ref, inside, "ref", "the repository folder")
    if not ref.is_file():
        raise ManifestError(ref, f"revision {quote(revision)} is not cached (no refs/{revision})")
    commit = read_text(ref, "ref").strip()
    if not _COMMIT.fullmatch(commit):
        raise ManifestError(ref, f"ref does not hold a 40-hex commit: {quote(commit)}")
    return commit


def _walk(folder: Path) -> list[Path]:
    """Every non-directory entry below ``folder`` (links included, not followed into folders)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        found.extend(Path(dirpath) / n for n in filenames)
        # os.walk lists links to folders among dirnames without descending; a snapshot has none.
        found.extend(Path(dirpath) / n for n in dirnames if (Path(dirpath) / n).is_symlink())
    return found


def _hf_file(snapshot: Path, link: Path, blobs: Path) -> HFFile:
    name = link.relative_to(snapshot).as_posix()
    if not link.is_symlink():
        return HFFile(name, link, None, None, None, "not a link to a blob (cannot check a copy)")
    problem = confine(link, (blobs,))
    if problem is not None and problem != OUTSIDE:
        return HFFile(name, link, None, None, None, f"link {problem}")
    target = real(link)
    if problem == OUTSIDE or target.parent != blobs:
        return HFFile(name, link, None, None, None, f"link points outside the cache's blobs: "
                      f"{os.readlink(link)}")
    if not target.is_file():
        return HFFile(name, link, target, None, None, "broken link: blob missing")
    if HEX64.fullmatch(target.name):
        return HFFile(name, link, target, "sha256", target.name.lower(), None)
    if _COMMIT.fullmatch(target.name):
        return HFFile(name, link, target, "git-sha1", target.name, None)
    return HFFile(name, link, target, None, None, "blob name is not a digest")


def hf_entries(snapshot: HFSnapshot) -> list[StoreEntry]:
    """Each file of a snapshot: the digest its blob's name gives (its blob is what is read), or why it cannot
    be checked, verify's ``link`` (a link out of the cache, a broken link, a blob whose name is no digest: a
    ``.incomplete`` download)."""
    entries = []
    for f in snapshot.files:
        link = os.fspath(f.link)
        if f.problem is not None:
            entries.append(StoreEntry(path=link, subject=f.name, read=link,
                                      problem=Problem(kind="link", subject=f.name, detail=f.problem)))
        elif f.blob is not None and f.algorithm is not None and f.expected is not None:
            entries.append(StoreEntry(path=link, subject=f.name, read=os.fspath(f.blob), expected=Expected(
                algorithm=f.algorithm, digest=f.expected, source=STORE, what="the Hugging Face cache's blob name")))
    return entries


class HFStore(Store, prefix="hf"):
    """``hf:ORG/NAME[@REV][:FILE]``: a snapshot of the Hugging Face cache (``roots.hf_cache``), offline; each
    file checked by the digest its blob's name promises. ``:FILE`` names the model among several."""

    def expectations(self) -> HFSnapshot:
        return read_hf_snapshot(self.name, self.roots.hf_cache)

    @classmethod
    def holds(cls, name: str, roots: Roots) -> bool:
        try:
            root = Path(roots.hf_cache) if roots.hf_cache is not None else default_hf_cache()
            return (root / parse_hf_spec(name).folder / "snapshots").is_dir()
        except (UsageError, OSError, ValueError):     # not ORG/NAME, or no cache to look in
            return False

    def model_files(self) -> list[str]:
        """The path, inside the snapshot, of the GGUF model ``ORG/NAME[@REV][:FILE]`` names; without ``:FILE``,
        then the projectors (``mmproj-*.gguf``) beside it, as a folder's model is opened."""
        repo, _, wanted = self.name.partition(":")
        snapshot = read_hf_snapshot(repo, self.roots.hf_cache)
        where = f"hf:{snapshot.spec.repo_id}@{snapshot.commit[:12]}"
        if not wanted:
            models = [f.name for f in snapshot.files if opens_a_model(f.name) and not is_projector(f.name)]
            model = one_model(where, models, f"name one as hf:{shorten(repo)}:FILE")
            beside = [f for f in snapshot.files if is_projector(f.name)            # names are slash-joined
                      and posixpath.dirname(f.name) == posixpath.dirname(model)]
            return [_openable(f) for f in [next(f for f in snapshot.files if f.name == model), *beside]]
        named = [f for f in snapshot.files if f.name == wanted]
        if len(named) != 1:
            raise UsageError(None, f"{where} has no file {quote(wanted)}", field="model")
        return [_openable(named[0])]

    def entries(self) -> list[StoreEntry]:
        """Every file of the snapshot (``:FILE`` aside: the others are the repository's too)."""
        return hf_entries(read_hf_snapshot(self.name.partition(":")[0], self.roots.hf_cache))

    def listing(self) -> StoreListing:
        """Every file of the snapshot against its blob's name; a blob several links name is read once, said
        once; then the leftovers of interrupted downloads."""
        snapshot = self.expectations()
        return StoreListing(subject=f"{snapshot.spec.repo_id}@{snapshot.commit}", kind="hf",
                            items=tuple(hf_entries(snapshot)), empty="the snapshot holds no file", once=True,
                            warnings=leftovers(snapshot.incomplete))

    def redownload(self, damaged: Sequence[str]) -> str:
        snapshot = self.expectations()
        repo = {file_key(f.link): f.name for f in snapshot.files}      # as the repository names them
        names = " ".join(repo.get(file_key(path), os.path.basename(path)) for path in damaged)
        revision = "" if snapshot.spec.revision == "main" else f" --revision {snapshot.spec.revision}"
        return (f"the download is damaged: download it again, replacing the cached copy: `hf download "
                f"{snapshot.spec.repo_id} {names}{revision} --force-download`")

    def relied_on(self) -> list[str]:
        """Every ref of the repository (a report over ``refs/main`` leaves the cache without its revision),
        then each file of the snapshot: its link and the blob it names. The refs are named even when the
        snapshot cannot be read; a refs folder that is a link out of the repository is the run's to report."""
        spec = parse_hf_spec(self.name.partition(":")[0])
        root = Path(self.roots.hf_cache) if self.roots.hf_cache is not None else default_hf_cache()
        repo_dir = root / spec.folder
        refs = [] if confine(repo_dir / "refs", (real(repo_dir),)) is not None else files_below(repo_dir / "refs")
        try:
            snapshot = read_hf_snapshot(spec, root)
        except ManifestError:
            return refs
        return refs + [os.fspath(path) for e in snapshot.files for path in (e.link, e.blob) if path is not None]


def _openable(entry: HFFile) -> str:
    if entry.blob is None:      # a broken link or one leaving the cache: never opened
        raise ManifestError(entry.link, entry.problem or "not a file of the snapshot", field="snapshot")
    return os.fspath(entry.link)
