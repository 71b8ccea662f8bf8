"""One entry point for every kind of verification: :func:`verify` picks the check from what it is given."""

from __future__ import annotations

import os

from ..errors import UsageError
from ..format.layout import Model
from ..format.locate import HF_PREFIX, OLLAMA_PREFIX, Target, resolve_model
from .run import (VerifyReport, verify_blob, verify_hf, verify_ollama, verify_sums,
                  verify_tensor_manifest)


def verify(target: Target | None = None, *, manifest: str | os.PathLike[str] | None = None,
           sums: str | os.PathLike[str] | None = None, store: str | os.PathLike[str] | None = None,
           hf_cache: str | os.PathLike[str] | None = None, fail_fast: bool = False) -> VerifyReport:
    """Check bytes against the digests they should have, and say where they differ.

    - ``verify(model, manifest=F)``: a model (path, ``ollama:NAME``, ``hf:ORG/NAME``, or a Model)
      against a tensor manifest; differences are localised to tensors and row ranges.
    - ``verify("ollama:NAME")``: every layer and the config of an Ollama model (``store``: its root).
    - ``verify("hf:ORG/NAME[@REV]")``: every file of a cached Hugging Face snapshot, offline.
    - ``verify(sums=F)``: every file a sha256 checksum file names.
    - ``verify(path)``: a content-addressed blob (``sha256-<hex>``) against the digest in its name.

    A file the expectations name that is absent is a "missing" mismatch, not an error.
    """
    if sums is not None:
        if target is not None or manifest is not None:
            raise UsageError(None, "takes no target and no manifest", field="sums")
        return verify_sums(sums, fail_fast=fail_fast)
    if target is None:
        raise UsageError(None, "give a model (a path, ollama:NAME, hf:ORG/NAME or a Model) or sums",
                         field="target")
    if manifest is not None:
        path = target.source if isinstance(target, Model) else resolve_model(
            _text(target), store=store, hf_cache=hf_cache)[0]
        return verify_tensor_manifest(path, manifest, fail_fast=fail_fast)
    if isinstance(target, Model):
        raise UsageError(None, "an opened model is checked against a manifest: give manifest", field="target")
    text = _text(target)
    if text.startswith(OLLAMA_PREFIX):
        return verify_ollama(text[len(OLLAMA_PREFIX):], store, fail_fast=fail_fast)
    if text.startswith(HF_PREFIX):
        return verify_hf(text[len(HF_PREFIX):], hf_cache, fail_fast=fail_fast)
    return verify_blob(text)


def _text(target: str | os.PathLike[str]) -> str:
    if not isinstance(target, (str, os.PathLike)):
        raise UsageError(None, f"must be a path, ollama:NAME, hf:ORG/NAME or a Model, not "
                               f"{type(target).__name__}", field="target")
    return os.fspath(target)
