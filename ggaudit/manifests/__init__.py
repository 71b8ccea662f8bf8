"""Where expected digests come from, one module per source: the Ollama store (``ollama``), the
Hugging Face cache (``hf_cache``), checksum files (``sums``) and ggaudit's own tensor manifest
(``tensor``). This package re-exports their public names, so ``ggaudit.manifests.X`` keeps working.

Everything here parses and locates; nothing hashes except the tensor-manifest builder, which reads
each file once (see ``digest_gguf_file``). Every digest read from a manifest is validated before it
becomes part of a path, and every name read from a checksum file stays inside that file's folder.
"""

from __future__ import annotations

from ._common import MAX_MANIFEST_BYTES
from .hf_cache import HFFile, HFSnapshot, HFSpec, default_hf_cache, parse_hf_spec, read_hf_snapshot
from .ollama import (DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG, MEDIA_MODEL, MEDIA_PROJECTOR, OllamaLayer,
                     OllamaManifest, OllamaName, default_ollama_store, ollama_blob_path, ollama_partial_files,
                     parse_digest, parse_ollama_name, read_ollama_manifest)
from .sums import SumsEntry, read_sums
from .tensor import (DEFAULT_GROUP_BYTES, MANIFEST_FORMAT, MANIFEST_VERSION, FileDigest, TensorDigest,
                     TensorManifest, build_tensor_manifest, digest_gguf_file, read_tensor_manifest,
                     rows_per_group, tensor_manifest_to_json, write_tensor_manifest)

__all__ = [
    "MAX_MANIFEST_BYTES",
    "HFFile", "HFSnapshot", "HFSpec", "default_hf_cache", "parse_hf_spec", "read_hf_snapshot",
    "DEFAULT_HOST", "DEFAULT_NAMESPACE", "DEFAULT_TAG", "MEDIA_MODEL", "MEDIA_PROJECTOR", "OllamaLayer",
    "OllamaManifest", "OllamaName", "default_ollama_store", "ollama_blob_path", "ollama_partial_files",
    "parse_digest", "parse_ollama_name", "read_ollama_manifest",
    "SumsEntry", "read_sums",
    "DEFAULT_GROUP_BYTES", "MANIFEST_FORMAT", "MANIFEST_VERSION", "FileDigest", "TensorDigest", "TensorManifest",
    "build_tensor_manifest", "digest_gguf_file", "read_tensor_manifest", "rows_per_group",
    "tensor_manifest_to_json", "write_tensor_manifest",
]
