"""Which file of a model each entry of ggaudit's tensor manifest describes: the one rule ``verify`` and
``check`` both match by, so a file one of them checks the other cannot leave out.

A file is its entry's by name; else, a file whose name is no split-set shard's (a copy, an Ollama blob), by
content identity: the one entry left of its size whose tensors' names, types, shapes and offsets are the
file's; else, when the manifest describes one file and nothing else matched, the model's own file (not a
shard) in its place, if they share a tensor (a damaged or edited copy: its differences are findings). A
file no entry names is a finding (verify's ``file-extra``); a manifest naming nothing of the model is
NothingChecked. Nothing outside the model's folder is opened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...errors import GGAuditError, NothingChecked
from ...format.layout import GGUFFile, named_shards, open_gguf
from ...untrusted import confine, sibling_roots
from ..manifests.tensor import ManifestFile, TensorManifest

__all__ = ["BY_CONTENT", "BY_NAME", "IN_PLACE", "ManifestMatch", "match_manifest"]

#: How a file was matched to its entry: its name, its tensors' layout, or checked in a single file's place.
BY_NAME, BY_CONTENT, IN_PLACE = "name", "content", "in-place"

#: A file's tensors, their bytes aside: name, type, shape and offset of each, sorted.
_Layout = list[tuple[str, str, tuple[int, ...], int]]


@dataclass(frozen=True, kw_only=True)
class ManifestMatch:
    """Each file of the model (by path; a split set's shards by their names) and its entry, None for none
    (``files``), how each matched file was matched (``how``), each entry of the manifest in its order and
    where its file is (``located``: the model's file it matched, else its name next to the model's first
    file), and the model's files no entry names (``extra``)."""

    files: Mapping[str, ManifestFile | None]
    how: Mapping[str, str]
    located: tuple[tuple[ManifestFile, str], ...]
    extra: tuple[str, ...]

    @property
    def renamed(self) -> list[tuple[ManifestFile, str]]:
        """The entries checked against a file of another name (to say so), in the manifest's order."""
        return [(e, path) for e, path in self.located if self.how.get(path, BY_NAME) != BY_NAME]


def match_manifest(manifest: TensorManifest, files: Sequence[str | os.PathLike[str] | GGUFFile], *,
                   manifest_path: str | os.PathLike[str] | None = None, target: str | None = None) -> ManifestMatch:
    """Match *files* (the model's, its first file first: a path opens nothing until it must be matched by
    content; a GGUFFile is not opened again) to *manifest*'s entries, by the rule above. NothingChecked
    (naming *manifest_path*, and *target*, by default the first file) when no file matches."""
    model = _model_files(files)
    given = next(iter(model))
    by_name: dict[str, str] = {}
    for path in model:      # a second file of one name is the first again (one path given twice)
        by_name.setdefault(os.path.basename(path), path)
    entries = {e.name: e for e in manifest.files}
    matched = {path: (entries[name], BY_NAME) for name, path in by_name.items() if name in entries}
    _by_content(manifest, model, [p for p in by_name.values() if p not in matched], given, matched)
    if not matched:
        matched = _in_place(manifest, model, given, manifest_path, target or given)
    where = {e.name: path for path, (e, _) in matched.items()}
    folder = os.path.dirname(given)
    return ManifestMatch(files={path: matched[path][0] if path in matched else None for path in model},
                         how={path: how for path, (_, how) in matched.items()},
                         located=tuple((e, where.get(e.name, os.path.join(folder, e.name))) for e in manifest.files),
                         extra=tuple(path for path in by_name.values() if path not in matched))


def _model_files(files: Sequence[str | os.PathLike[str] | GGUFFile]) -> dict[str, GGUFFile | None]:
    """Each path given and, for a shard of a split set, every shard its name says the set has (found by name,
    as opening the set finds them), each once, with its opened layout where one was given."""
    if not files:
        raise ValueError("a model has at least one file")
    opened = {f.path: f for f in files if isinstance(f, GGUFFile)}
    paths = [f.path if isinstance(f, GGUFFile) else os.fspath(f) for f in files]
    return {shard: opened.get(shard) for path in paths for shard in named_shards(path) or [path]}


def _by_content(manifest: TensorManifest, model: Mapping[str, GGUFFile | None], left: Sequence[str], given: str,
                matched: dict[str, tuple[ManifestFile, str]]) -> None:
    """Match each file of *left* whose name is no shard's to the one entry not yet matched of its size whose
    tensors are its own, at the same offsets (a manifest made from ``model.gguf``, checked against the blob
    it was pulled as); a file that cannot be opened is matched by nothing here."""
    candidates = [p for p in left if named_shards(p) is None]
    if not candidates:
        return
    layouts = {e.name: _manifest_layout(manifest, e.name) for e in manifest.files}
    for path in candidates:
        f = model[path] or _header(path, given)
        if f is None:
            continue
        taken, layout = {e.name for e, _ in matched.values()}, _file_layout(f)
        same = [e for e in manifest.files if e.name not in taken and e.size == f.size and layouts[e.name] == layout]
        if len(same) == 1:
            matched[path] = (same[0], BY_CONTENT)


def _in_place(manifest: TensorManifest, model: Mapping[str, GGUFFile | None], given: str,
              manifest_path: str | os.PathLike[str] | None, target: str) -> dict[str, tuple[ManifestFile, str]]:
    """A manifest of one file matched by nothing: the model's own file (no shard) checked in its place (a copy
    edited or damaged) when they share a tensor, or one of them has none (its header does not parse: the
    check says so); else NothingChecked."""
    names = [f.name for f in manifest.files]
    if len(names) != 1 or named_shards(given) is not None:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "") if names else "none"
        raise NothingChecked(manifest_path, f"names no file of {target} (the manifest's files: {shown}); "
                                            "nothing was checked")
    f = model[given] or _header(given, given)
    have = set() if f is None else {t.name for t in f.tensors}
    wanted = {t.name for t in manifest.tensors}
    if have and wanted and not have & wanted:
        raise NothingChecked(manifest_path, f"names no tensor of {target}, which would be checked in place of "
                                            f"{names[0]}; nothing was checked")
    return {given: (manifest.files[0], IN_PLACE)}


def _header(path: str, given: str) -> GGUFFile | None:
    """*path*'s layout, or None when it cannot be opened, or must not be: a file next to the model that is a
    link out of its folder (the model's own file is the user's to name, wherever it leads)."""
    if path != given and confine(path, sibling_roots(given)) is not None:
        return None
    try:
        return open_gguf(path)
    except (GGAuditError, OSError):
        return None


def _file_layout(f: GGUFFile) -> _Layout:
    return sorted((t.name, t.ggml_type.name, tuple(t.shape), t.offset) for t in f.tensors)


def _manifest_layout(manifest: TensorManifest, name: str) -> _Layout:
    return sorted((t.name, t.ggml_type, tuple(t.shape), t.offset) for t in manifest.tensors if t.file == name)
