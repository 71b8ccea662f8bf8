"""Folders that keep models without digests of their own: LM Studio's (each GGUF checked for structure)
and GPT4All's (a file its model list describes against that size and md5; any other for structure)."""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import FormatError
from ...format.layout import open_gguf
from ...io import Progress
from ...stores.expected import StoreEntry
from ...stores.gpt4all import gpt4all_entries, read_gpt4all
from ...stores.lmstudio import folder_entries, read_lmstudio
from ..cache import DigestCache
from ..collect import Collector, check_entry, finish, problem_mismatch, regular_file
from ..report import Checked, Mismatch, VerifyReport


def verify_lmstudio(spec: str = "", store: str | os.PathLike[str] | None = None, *,
                    fail_fast: bool = False, progress: Progress | None = None,
                    digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check LM Studio's models (``spec`` empty: all; else ``PUBLISHER/MODEL``) offline. LM Studio keeps
    no digests, so each GGUF is checked for structure: the header parses and the file holds every
    tensor's data; and each split set for its shards."""
    folder = read_lmstudio(spec, store)
    out = Collector(fail_fast, digest_cache, progress=progress)
    _check_folder(folder_entries(folder), out)
    return finish(out, os.fspath(folder.root) + (f" {spec}" if spec else ""), "lmstudio",
                  empty="the folder holds no GGUF file")


def verify_gpt4all(store: str | os.PathLike[str] | None = None, *, name: str = "", fail_fast: bool = False,
                   progress: Progress | None = None, digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check GPT4All's model folder offline (``name``: only that model, a file of it): a file its local
    model list (``models3.json``) describes against that size and md5; any other GGUF for structure, as
    :func:`verify_lmstudio`."""
    found = read_gpt4all(store, name)
    out = Collector(fail_fast, digest_cache, progress=progress)
    _check_folder(gpt4all_entries(found), out)
    if found.listing is None:
        out.warnings.append(f"no model list ({', '.join(('models3.json', 'models2.json', 'models.json'))}) in "
                            f"{os.fspath(found.folder.root)}: structure checked, no digests")
    return finish(out, os.fspath(found.folder.root) + (f" {name}" if name else ""), "gpt4all",
                  empty="the folder holds no GGUF file")


def _check_folder(entries: list[StoreEntry], out: Collector) -> None:
    """Each GGUF of a folder as the store lists it (what check expects of it too): against its md5 and size
    when the list gives them, else its structure; a link out and a shard its split set lacks as mismatches."""
    out.plan(e.read for e in entries if e.problem is None and e.expected is not None)
    for entry in entries:
        if out.full:
            return
        if entry.problem is not None:
            out.mismatches.append(problem_mismatch(entry))
        elif entry.expected is not None:
            check_entry(entry, out)
        else:
            _check_structure(Path(entry.read), entry.subject, out)


def _check_structure(path: Path, subject: str, out: Collector) -> None:
    """The file opens as GGUF: its header parses and it holds every tensor's data (a ``header`` mismatch
    at the offending offset otherwise)."""
    identity = regular_file(path, subject, "", out)
    if identity is None:
        return
    try:
        open_gguf(path)
    except FormatError as err:
        out.mismatches.append(Mismatch(kind="header", path=os.fspath(path), subject=subject, offset=err.offset,
                                       detail=err.message))
        return
    out.checked.append(Checked(path=os.fspath(path), subject=subject, algorithm="gguf-layout", digest="",
                               size=identity.size, ok=True))
