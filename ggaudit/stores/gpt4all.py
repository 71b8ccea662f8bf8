"""GPT4All's model folder, per OS, and the size and md5 a local ``models3.json``-style list gives.

The list is GPT4All's catalogue (a JSON array of ``{"filename", "filesize", "md5sum", ...}``): it names
models that may never have been downloaded, so only the files present are checked against it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping, Sequence

from ..errors import ManifestError, Param
from ..untrusted import confine, quote, real, shorten
from .expected import STORE
from .listing import Expected, StoreEntry, StoreListing
from .small_files import is_count, load_json
from .lmstudio import GGUFFolder, folder_entries, folder_model_files, gguf_folder, model_of
from .ollama import chosen_by, home_folder
from .registry import Store, files_below

log = logging.getLogger(__name__)

#: The catalogue files GPT4All has used, newest first; the first one present is read.
LIST_NAMES = ("models3.json", "models2.json", "models.json")
_MD5 = re.compile(r"[0-9a-fA-F]{32}")


def default_gpt4all_store(env: Mapping[str, str] | None = None, platform: str | None = None,
                          home: Path | None = None) -> Path:
    """Linux ``$XDG_DATA_HOME/nomic.ai/GPT4All`` (``~/.local/share``), macOS ``~/Library/Application
    Support/nomic.ai/GPT4All``, Windows ``%LOCALAPPDATA%\\nomic.ai\\GPT4All``."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    advice = ("pass ", Param("store"))
    if platform.startswith("win"):
        if env.get("LOCALAPPDATA"):
            return Path(env["LOCALAPPDATA"]) / "nomic.ai" / "GPT4All"
        home = home or Path(env.get("USERPROFILE") or home_folder(advice))
        return home / "AppData" / "Local" / "nomic.ai" / "GPT4All"
    home = home or Path(env.get("HOME") or home_folder(advice))
    if platform == "darwin":
        return home / "Library" / "Application Support" / "nomic.ai" / "GPT4All"
    data = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else home / ".local" / "share"
    return data / "nomic.ai" / "GPT4All"


@dataclass(frozen=True)
class ListedModel:
    """What the catalogue says of one file: its size and md5 (either may be absent)."""

    size: int | None
    md5: str | None
    field: str          # where in the list: "[3]"


@dataclass(frozen=True)
class GPT4AllFolder:
    folder: GGUFFolder
    listing: Path | None                # the catalogue read, if any
    listed: Mapping[str, ListedModel]   # by file name


def read_gpt4all(store: str | os.PathLike[str] | None = None, name: str = "") -> GPT4AllFolder:
    """The GGUF files of the GPT4All folder (``name``: only that model's, a file name or a split set's
    first shard's) and, where a catalogue is present, what it says of each."""
    root = Path(store) if store is not None else default_gpt4all_store()
    how = chosen_by(None if store is None else "store")
    if not root.is_dir():
        raise ManifestError(root, ("no GPT4All model folder here (", *how, ")"))
    listing = next((root / n for n in LIST_NAMES if (root / n).is_file()), None)
    if listing is not None and confine(listing, (real(root),)) is not None:
        raise ManifestError(listing, "model list is a link pointing outside the folder (or a loop); not followed")
    listed = _read_listing(listing) if listing is not None else {}
    folder = gguf_folder(root)
    return GPT4AllFolder(model_of(folder, name, how) if name else folder, listing, listed)


def _read_listing(path: Path) -> dict[str, ListedModel]:
    doc = load_json(path, "model list")
    if not isinstance(doc, list):
        raise ManifestError(path, "expected a JSON array of models")
    listed: dict[str, ListedModel] = {}
    for i, entry in enumerate(doc):
        field = f"[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
            raise ManifestError(path, "expected an object with a filename", field=field)
        listed.setdefault(entry["filename"], ListedModel(_size(entry.get("filesize"), path, field),
                                                         _md5(entry.get("md5sum"), path, field), field))
    return listed


def _size(value: object, path: Path, field: str) -> int | None:
    """GPT4All writes sizes as strings of digits; a number is accepted too."""
    if value is None:
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        return int(value)
    if is_count(value):
        return value
    shown = quote(value) if isinstance(value, str) else shorten(repr(value))
    raise ManifestError(path, f"filesize {shown} is not a size in bytes", field=f"{field}.filesize")


def _md5(value: object, path: Path, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _MD5.fullmatch(value):
        shown = quote(value) if isinstance(value, str) else type(value).__name__
        raise ManifestError(path, f"md5sum {shown} is not 32 hex digits", field=f"{field}.md5sum")
    return value.lower()


def gpt4all_entries(found: GPT4AllFolder) -> list[StoreEntry]:
    """Each GGUF of the folder (:func:`folder_entries`), with the md5 and size the list gives for its name
    when it gives an md5 (a size alone: its structure is checked)."""
    md5s = {name: Expected(algorithm="md5", digest=item.md5, source=STORE, what="GPT4All's model list's md5",
                           size=item.size) for name, item in found.listed.items() if item.md5 is not None}
    return folder_entries(found.folder, md5s)


class GPT4AllStore(Store, prefix="gpt4all"):
    """``gpt4all:FILE`` (one model of the folder) or ``gpt4all:`` (all of them); ``roots.store``: the
    folder. Its catalogue gives the size and md5 of the models it lists."""

    def expectations(self) -> GPT4AllFolder:
        return read_gpt4all(self.roots.store, self.name)

    def entries(self) -> list[StoreEntry]:
        return gpt4all_entries(self.expectations())

    def listing(self) -> StoreListing:
        """A file the model list describes against that size and md5; any other GGUF for structure, as LM
        Studio's; and, without a list, a warning that no digest was checked."""
        found = self.expectations()
        unlisted = () if found.listing is not None else (
            f"no model list ({', '.join(LIST_NAMES)}) in {os.fspath(found.folder.root)}: structure checked, "
            "no digests",)
        return StoreListing(subject=os.fspath(found.folder.root) + (f" {self.name}" if self.name else ""),
                       kind="gpt4all", items=tuple(gpt4all_entries(found)), empty="the folder holds no GGUF file",
                       warnings=unlisted)

    def redownload(self, damaged: Sequence[str]) -> str:
        names = ", ".join(os.path.basename(path) for path in damaged)
        return (f"the download is damaged: with GPT4All closed, delete {names} from its download folder, then "
                "download it again in GPT4All (Models, `+ Add Model`, search, `Download`)")

    def model_files(self) -> list[str]:
        return folder_model_files(self.expectations().folder, str(self), "name one as gpt4all:FILE")

    def relied_on(self) -> list[str]:
        """Every file of the folder: the models, the model list (each of its names, whichever is read), and
        what else GPT4All keeps there."""
        return files_below(Path(self.roots.store) if self.roots.store is not None else default_gpt4all_store())
