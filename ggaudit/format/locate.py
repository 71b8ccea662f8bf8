"""Turn what a user typed as MODEL into file paths: a plain path, or ``ollama:NAME`` in the store."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..errors import ManifestError
from ..verify.stores.ollama import (MEDIA_MODEL, default_ollama_store, ollama_blob_path, parse_ollama_name,
                                    read_ollama_manifest)

log = logging.getLogger(__name__)

OLLAMA_PREFIX = "ollama:"


def resolve_model(spec: str, *, store: str | os.PathLike[str] | None = None) -> list[str]:
    """The GGUF file(s) ``spec`` names.

    ``ollama:NAME`` gives the blob of the model layer, then the projector's if the model has one
    (``store`` overrides the Ollama store root); anything else is a path and is returned as it is.
    Raises UsageError for a bad name, ManifestError for a missing or malformed manifest or a model
    without weights.
    """
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
