"""Turn what a user typed as MODEL into file paths: a plain path, ``ollama:NAME`` in the Ollama store, or
``hf:ORG/NAME[@REV][:FILE]`` in the Hugging Face cache; and open it as a Model."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Union

from ..errors import ManifestError, UsageError
from .layout import Model
from .layout import open_model as open_path
from ..untrusted import quote, shorten
from ..verify.stores.hf_cache import HFFile, read_hf_snapshot
from ..verify.stores.ollama import (MEDIA_MODEL, default_ollama_store, ollama_blob_path, parse_ollama_name,
                                    read_ollama_manifest)

log = logging.getLogger(__name__)

OLLAMA_PREFIX = "ollama:"
HF_PREFIX = "hf:"
#: What a model is named by: a path, a store name, or a model already opened.
Target = Union[str, "os.PathLike[str]", Model]


def open_model(target: Target, *, store: str | os.PathLike[str] | None = None,
               hf_cache: str | os.PathLike[str] | None = None) -> Model:
    """Open what ``target`` names as one model: a GGUF file (any shard of a split set opens the set),
    ``ollama:NAME`` (the model layer's blob; ``store`` overrides the store root), ``hf:ORG/NAME[@REV]``
    (the one GGUF model of that cached snapshot; ``:FILE`` names one when there are several), or a
    Model, returned as it is."""
    if isinstance(target, Model):
        return target
    return open_path(resolve_model(target_text(target, "model"), store=store, hf_cache=hf_cache)[0])


def target_text(target: object, field: str) -> str:
    """``target`` (a path or a store name) as text; a UsageError naming the parameter ``field`` for
    anything else (an opened Model is the caller's to handle)."""
    if not isinstance(target, (str, os.PathLike)):
        raise UsageError(None, f"must be a path, ollama:NAME, hf:ORG/NAME or a Model, not {type(target).__name__}",
                         field=field)
    return os.fspath(target)


def resolve_model(spec: str, *, store: str | os.PathLike[str] | None = None,
                  hf_cache: str | os.PathLike[str] | None = None) -> list[str]:
    """The GGUF file(s) ``spec`` names.

    ``ollama:NAME`` gives the blob of the model layer, then the projector's if the model has one
    (``store`` overrides the Ollama store root); ``hf:ORG/NAME[@REV][:FILE]`` the snapshot's GGUF file
    (the first shard of a split set); anything else is a path and is returned as it is.
    Raises UsageError for a bad name, ManifestError for a missing or malformed manifest or a model
    without weights.
    """
    if spec.startswith(HF_PREFIX):
        return [_hf_model_file(spec[len(HF_PREFIX):], hf_cache)]
    if not spec.startswith(OLLAMA_PREFIX):
        return [spec]
    manifest = read_ollama_manifest(spec[len(OLLAMA_PREFIX):], store)
    layers = manifest.model_layers()
    if not layers:
        raise ManifestError(manifest.path, f"model {manifest.name} has no layer of type {MEDIA_MODEL}",
                            field="layers")
    return [os.fspath(ollama_blob_path(manifest.store, layer.digest)) for layer in layers]


def description_files(spec: str, *, store: str | os.PathLike[str] | None = None) -> list[str]:
    """The files besides the GGUF files that a run on ``spec`` reads to find them: the Ollama manifest of
    ``ollama:NAME`` (an output must not replace it either), none for a plain path."""
    if not spec.startswith(OLLAMA_PREFIX):
        return []
    root = Path(store) if store is not None else default_ollama_store()
    return [os.fspath(parse_ollama_name(spec[len(OLLAMA_PREFIX):]).manifest_path(root))]


_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


def _hf_model_file(spec: str, cache: str | os.PathLike[str] | None) -> str:
    """The path, inside the snapshot, of the GGUF model ``ORG/NAME[@REV][:FILE]`` names."""
    repo, _, wanted = spec.partition(":")
    snapshot = read_hf_snapshot(repo, cache)
    models = [f for f in snapshot.files if f.name.lower().endswith(".gguf") and _first_shard(f.name)]
    if wanted:
        models = [f for f in snapshot.files if f.name == wanted]
    if len(models) != 1:
        names = ", ".join(quote(f.name) for f in models[:4]) + (", ..." if len(models) > 4 else "")
        where = f"hf:{snapshot.spec.repo_id}@{snapshot.commit[:12]}"
        if wanted:
            raise UsageError(None, f"{where} has no file {quote(wanted)}", field="model")
        raise UsageError(None, f"{where} holds {len(models)} GGUF models{': ' + names if models else ''}; "
                               f"name one as hf:{shorten(repo)}:FILE", field="model")
    return _openable(models[0])


def _first_shard(name: str) -> bool:
    """A whole model, or the first shard of a split set (which opens the set)."""
    shard = _SHARD.search(name)
    return shard is None or shard.group(1) == "00001"


def _openable(entry: HFFile) -> str:
    if entry.blob is None:      # a broken link or one leaving the cache: never opened
        raise ManifestError(entry.link, entry.problem or "not a file of the snapshot", field="snapshot")
    return os.fspath(entry.link)
