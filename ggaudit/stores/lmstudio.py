"""LM Studio's model folder: ``<root>/<publisher>/<model>/*.gguf``. It keeps no digests, so what can be
checked offline is structure: each GGUF opens and its split sets are complete.

The GGUF listing here (files, split sets, links confined to the folder) serves GPT4All's folder too.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping

from ..errors import ManifestError, Param, UsageError
from ..untrusted import OUTSIDE, confine, quote, real
from .listing import Expected, Problem, StoreEntry, StoreListing
from .ollama import chosen_by, home_folder
from .registry import Store, files_below, is_projector, one_model, opens_a_model

log = logging.getLogger(__name__)

_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._ -]{0,254}")
SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def default_lmstudio_store(env: Mapping[str, str] | None = None, platform: str | None = None,
                           home: Path | None = None) -> Path:
    """``~/.lmstudio/models``, or the older ``~/.cache/lm-studio/models`` when only that one exists."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    advice = ("pass ", Param("store"))
    variable = "USERPROFILE" if platform.startswith("win") else "HOME"
    home = home or Path(env.get(variable) or home_folder(advice))
    current = home / ".lmstudio" / "models"
    older = home / ".cache" / "lm-studio" / "models"
    return older if not current.is_dir() and older.is_dir() else current


@dataclass(frozen=True)
class GGUFEntry:
    """A GGUF file of a store folder: its name there ('/'-separated), its path, and why it must not be
    opened (a link pointing out of the folder, a loop), if so."""

    name: str
    path: Path
    problem: str | None = None


@dataclass(frozen=True)
class MissingShard:
    """A shard a split set's names say exists and that is not there."""

    name: str
    path: Path
    number: int
    count: int


@dataclass(frozen=True)
class GGUFFolder:
    root: Path
    files: tuple[GGUFEntry, ...]
    missing: tuple[MissingShard, ...]


def parse_lmstudio_spec(text: str) -> tuple[str, str] | None:
    """``PUBLISHER/MODEL`` as its two parts; empty text (``lmstudio:``) is the whole store (None)."""
    if not text:
        return None
    parts = text.split("/")
    if len(parts) != 2 or not all(_PART.fullmatch(p) and set(p) != {"."} for p in parts):
        raise UsageError(None, f"LM Studio model {quote(text)} is not PUBLISHER/MODEL")
    return parts[0], parts[1]


def read_lmstudio(spec: str, store: str | os.PathLike[str] | None = None) -> GGUFFolder:
    """The GGUF files of ``lmstudio:`` (every model) or ``lmstudio:PUBLISHER/MODEL``."""
    return gguf_folder(*lmstudio_folder(spec, store))


def lmstudio_folder(spec: str, store: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """The store's root and the folder ``spec`` names in it (the root itself for ``lmstudio:``), checked to
    be a folder inside the store."""
    root = Path(store) if store is not None else default_lmstudio_store()
    how = chosen_by(None if store is None else "store")
    if not root.is_dir():
        raise ManifestError(root, ("no LM Studio model folder here (", *how, ")"))
    parts = parse_lmstudio_spec(spec)
    folder = root if parts is None else root.joinpath(*parts)
    if confine(folder, (real(root),)) is not None:
        raise ManifestError(folder, "model folder is a link pointing outside the store (or a loop); not followed")
    if not folder.is_dir():
        raise ManifestError(folder, (f"model {quote(spec)} is not in the LM Studio folder {root} (", *how, ")"))
    return root, folder


def gguf_folder(root: Path, folder: Path | None = None) -> GGUFFolder:
    """Every ``*.gguf`` below ``folder`` (default ``root``), named relative to ``root``, and the shards its
    split sets lack. Links are listed, never followed out of ``root``."""
    inside = real(root)
    found: list[GGUFEntry] = []
    for dirpath, dirnames, filenames in os.walk(folder or root):
        here = Path(dirpath)
        dirnames.sort()
        for name in sorted(filenames + [n for n in dirnames if (here / n).is_symlink()]):
            if name.lower().endswith(".gguf"):
                found.append(_entry(root, here / name, inside))
    return GGUFFolder(root, tuple(found), _missing_shards(root, found))


def _entry(root: Path, path: Path, inside: Path) -> GGUFEntry:
    name = path.relative_to(root).as_posix()
    problem = confine(path, (inside,))
    if problem is None:
        return GGUFEntry(name, path)
    said = "a link pointing outside the folder" if problem == OUTSIDE else problem
    return GGUFEntry(name, path, f"{said}: not followed")


def _missing_shards(root: Path, found: list[GGUFEntry]) -> tuple[MissingShard, ...]:
    """Per split set (``NAME-0000k-of-0000n.gguf`` in one folder), each of its n shards not found."""
    sets: dict[tuple[Path, str, int], set[int]] = {}
    for entry in found:
        match = SHARD.search(entry.path.name)
        if match and int(match[2]) >= 1:
            key = (entry.path.parent, entry.path.name[:match.start()], int(match[2]))
            sets.setdefault(key, set()).add(int(match[1]))
    missing = []
    for (parent, stem, count), have in sorted(sets.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        for k in range(1, count + 1):
            if k not in have:
                path = parent / f"{stem}-{k:05d}-of-{count:05d}.gguf"
                missing.append(MissingShard(path.relative_to(root).as_posix(), path, k, count))
    return tuple(missing)


def model_of(folder: GGUFFolder, name: str, how: tuple[str | Param, ...] | None = None) -> GGUFFolder:
    """The part of ``folder`` that is its model ``name``: that file, or every shard of its split set (and
    the shards the set lacks); ManifestError when no GGUF file of the folder has that name (``how``: how the
    folder was chosen, :func:`~.ollama.chosen_by`, said with it)."""
    entry = next((e for e in folder.files if e.name == name), None)
    if entry is None:
        raise ManifestError(folder.root / name, (f"model {quote(name)} is not in the folder {folder.root}",
                                                 *(() if how is None else (" (", *how, ")"))))
    shard = SHARD.search(entry.name)
    if shard is None:
        return GGUFFolder(folder.root, (entry,), ())
    stem = entry.name[:shard.start()]
    mine = re.compile(re.escape(stem) + rf"-\d{{5}}-of-{shard[2]}\.gguf", re.IGNORECASE)
    return GGUFFolder(folder.root, tuple(e for e in folder.files if mine.fullmatch(e.name)),
                      tuple(m for m in folder.missing if mine.fullmatch(m.name)))


def folder_model_files(folder: GGUFFolder, where: str, hint: str) -> list[str]:
    """The one GGUF model of ``folder`` (its first shard, if split), then the projectors beside it."""
    model = one_model(where, [e.name for e in folder.files if opens_a_model(e.name) and not is_projector(e.name)],
                      hint)
    chosen = [e for e in folder.files if e.name == model]
    chosen += [e for e in folder.files if is_projector(e.name) and e.path.parent == chosen[0].path.parent]
    for entry in chosen:
        if entry.problem is not None:
            raise ManifestError(entry.path, entry.problem)
    return [os.fspath(e.path) for e in chosen]


def folder_entries(folder: GGUFFolder, listed: Mapping[str, Expected] | None = None) -> list[StoreEntry]:
    """Each GGUF of an app's folder, then each shard its split sets lack (verify's ``missing``): what *listed*
    gives for its name (GPT4All's list: md5 and size), a link out of the folder (``link``), or nothing (its
    structure is what can be checked)."""
    entries = []
    for e in folder.files:
        path, expected = os.fspath(e.path), (listed or {}).get(e.name)
        problem = None if e.problem is None else Problem(kind="link", subject=e.name, detail=e.problem)
        entries.append(StoreEntry(path=path, subject=e.name, read=path, problem=problem,
                                  expected=expected if problem is None else None))
    return entries + [StoreEntry(path=os.fspath(m.path), subject=m.name, read=os.fspath(m.path), problem=Problem(
        kind="missing", subject=m.name, detail=f"shard {m.number} of {m.count} of a split set not found"))
        for m in folder.missing]


class LMStudioStore(Store, prefix="lmstudio"):
    """``lmstudio:PUBLISHER/MODEL`` (a model's folder) or ``lmstudio:`` (every model); ``roots.store``: the
    models folder. LM Studio keeps no digests: what is checked is each GGUF's structure."""

    #: Its engine maps the model file by default (llama.cpp's loader, ``use_mmap``).
    ENGINE = ("LM Studio", "mmap")

    def expectations(self) -> GGUFFolder:
        return read_lmstudio(self.name, self.roots.store)

    def entries(self) -> list[StoreEntry]:
        """No digest: only what is wrong before a byte is read (a link out, a shard missing)."""
        return folder_entries(self.expectations())

    def listing(self) -> StoreListing:
        """Each GGUF checked for structure: the header parses and the file holds every tensor's data; and
        each split set for its shards."""
        folder = self.expectations()
        return StoreListing(subject=os.fspath(folder.root) + (f" {self.name}" if self.name else ""), kind="lmstudio",
                       items=tuple(folder_entries(folder)), empty="the folder holds no GGUF file")

    def model_files(self) -> list[str]:
        return folder_model_files(self.expectations(), str(self), "open one by its path")

    def relied_on(self) -> list[str]:
        """Every file of the model's folder (of the whole store, for ``lmstudio:``): whatever LM Studio keeps
        beside the GGUF files too."""
        return files_below(lmstudio_folder(self.name, self.roots.store)[1])
