"""A real Ollama-shaped store in a folder, for tests of ``ollama:NAME``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MEDIA_MODEL = "application/vnd.ollama.image.model"
MEDIA_PROJECTOR = "application/vnd.ollama.image.projector"


def ollama_store(root: Path, model: bytes, projector: bytes, name: str = "tiny") -> tuple[Path, Path]:
    """Lay out library/NAME:latest with a model and a projector layer; returns the two blob paths."""
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    layers, paths = [], []
    for media, content in ((MEDIA_MODEL, model), (MEDIA_PROJECTOR, projector)):
        digest = hashlib.sha256(content).hexdigest()
        paths.append(root / "blobs" / f"sha256-{digest}")
        paths[-1].write_bytes(content)
        layers.append({"mediaType": media, "digest": f"sha256:{digest}", "size": len(content)})
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return paths[0], paths[1]
