"""The report of making a manifest (``ggaudit manifest``): the manifest made, and where it was written."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # a reporter naming this type loads neither manifest module
    from ...diagnostic import Diagnostic
    from .llama_hash import LlamaHashManifest
    from .tensor import TensorManifest


@dataclass(frozen=True, kw_only=True)
class ManifestWritten:
    """What ``ggaudit manifest`` made, as a report: the manifest, and where it was written (``-``, stdout,
    or a file's path). Its JSON is the manifest's own (``format``/``version`` name it, as in the file)."""

    output: str
    manifest: TensorManifest | LlamaHashManifest

    @property
    def ok(self) -> bool:
        return True

    def diagnostics(self) -> Iterator[Diagnostic]:
        """None: making a manifest finds nothing."""
        return iter(())

    def to_json(self) -> dict[str, Any]:
        from .llama_hash import LlamaHashManifest, llama_hash_to_json
        from .tensor import tensor_manifest_to_json

        if isinstance(self.manifest, LlamaHashManifest):
            return llama_hash_to_json(self.manifest)
        return tensor_manifest_to_json(self.manifest)
