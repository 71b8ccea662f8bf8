"""Turn what a user typed as MODEL into file paths, through the store registry: a plain path, or a name
of a registered store (``ollama:NAME``, ``hf:ORG/NAME[@REV][:FILE]``, ``hf-local:DIR``,
``lmstudio:PUBLISHER/MODEL``, ``gpt4all:FILE``); and open it as a Model."""

from __future__ import annotations

import os
from typing import Union

from ..errors import UsageError
from ..format.layout import Model
from ..format.layout import open_model as open_path
from .registry import Roots, Store, find_store, refuse_unknown_name

#: What a model is named by: a path, a store name, or a model already opened.
Target = Union[str, "os.PathLike[str]", Model]


def open_model(target: Target, *, store: str | os.PathLike[str] | None = None,
               hf_cache: str | os.PathLike[str] | None = None) -> Model:
    """Open what ``target`` names as one model: a GGUF file (any shard of a split set opens the set), a
    store's name (see :func:`resolve_model`; ``store`` overrides the store's root, ``hf_cache`` the
    Hugging Face cache's), or a Model, returned as it is.

    Raises:
        UsageError: ``target`` is no path, name or Model; a name of no known store.
        FormatError: a file that is no well-formed GGUF, or shards that do not make one split set (a shard
            missing included: the set is incomplete, not a file not found), naming the offset and the field.
        ReadError: a file that cannot be opened or read, or that changed while its header was read. One the OS
            refused is also the standard exception of that error (``FileNotFoundError``, ``PermissionError``,
            else ``OSError``, with ``errno``, ``strerror`` and ``filename``).
        ManifestError: what a store says of the name (an Ollama manifest, a snapshot) is missing, malformed or
            unsafe, or the name is not in the store (the message says how the store's folder was chosen).
    """
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

    A store's name gives its model's file (a split set's first shard), then the files that go with it
    (an Ollama model's or a folder's projector): ``ollama:NAME`` the blob of the model layer, then the
    projector's (``store`` overrides the Ollama store root); ``hf:ORG/NAME[@REV][:FILE]`` the snapshot's
    GGUF file; ``hf-local:DIR``, ``lmstudio:PUBLISHER/MODEL`` and ``gpt4all:FILE`` the GGUF model of
    that folder. Anything else is a path and is returned as it is. Raises UsageError for a bad name, an
    unknown prefix or a name standing for several models; ManifestError for a missing or malformed
    manifest or a model without weights.
    """
    found = find_target(spec, Roots(store, hf_cache))
    return [spec] if found is None else found.model_files()


def find_target(text: str, roots: Roots, field: str = "model") -> Store | None:
    """The store ``text`` (a MODEL or TARGET as typed) names, or None when it is a path: the one place every
    command looks a name up. A path that is no file, but a bare name a store holds (``clef-flash`` in
    Ollama's store), is the UsageError ``did you mean ollama:clef-flash?``; see
    :func:`~.registry.find_store` for a prefix that is none."""
    found = find_store(text, roots, field=field)
    if found is None and not os.path.lexists(text):
        refuse_unknown_name(text, roots)
    return found


def distinct_models(paths: list[str]) -> list[str]:
    """``paths`` with each split set once: a shard of a set already named (``m-00002-of-00002.gguf`` after
    ``m-00001-of-00002.gguf``, as a shell glob gives them) is that model again, not another (any shard opens
    the whole set). Files that are no shard are kept as given, repeats included."""
    from ..format.layout import named_shards

    seen: set[str] = set()
    kept = []
    for path in paths:
        shards = named_shards(path)
        key = None if shards is None else os.path.normcase(os.path.abspath(shards[0]))
        if key is None or key not in seen:
            kept.append(path)
        if key is not None:
            seen.add(key)
    return kept


def description_files(spec: str, *, store: str | os.PathLike[str] | None = None) -> list[str]:
    """Every file of the store a run on ``spec`` depends on (:meth:`~.registry.Store.relied_on`: manifests,
    refs, download metadata, model lists and the files they name), which no output may replace either; none
    for a plain path."""
    found = find_store(spec, Roots(store))
    return [] if found is None else found.relied_on()
