"""Real model stores laid out in a folder, for tests of ``verify`` over every store (issue 13): an Ollama
store with a damaged blob, an orphan, tensor and draft layers; a ``--local-dir`` download; LM Studio's
and GPT4All's folders. Digests are computed here with hashlib, independently of ggaudit."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T

from ggaudit.format.build import TensorSpec, gguf_bytes
from ggaudit.stores.registry import known_prefixes, store_module

#: Every store's module by its prefix, as the registry finds them (each module named for its prefix): what a
#: command on a plain path must not load.
STORE_MODULES = {prefix: store_module(prefix) for prefix in known_prefixes()}

MEDIA_MODEL = "application/vnd.ollama.image.model"
MEDIA_PROJECTOR = "application/vnd.ollama.image.projector"
MEDIA_TENSOR = "application/vnd.ollama.image.tensor"
MEDIA_DRAFT = "application/vnd.ollama.image.draft"
MEDIA_CONFIG = "application/vnd.docker.container.image.v1+json"
CHAT_CONFIG, IMAGEGEN_CONFIG = b'{"chat": 1}', b'{"img": 2}'


def gguf(seed: int, rows: int = 8) -> bytes:
    rng = np.random.default_rng(seed)
    data, _ = gguf_bytes([TensorSpec("token_embd.weight", T.F16, (32, rows),
                                     rng.standard_normal(32 * rows).astype("<f2").tobytes())],
                         {"general.architecture": "llama"})
    return data


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def flip(path: Path, at: int) -> None:
    """Change one byte of ``path`` in place."""
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x01]))


@dataclass
class OllamaStore:
    root: Path
    blobs: dict[str, Path]       # role -> blob
    orphan: Path

    def blob(self, role: str) -> Path:
        return self.blobs[role]


def _blob(root: Path, content: bytes) -> tuple[str, Path]:
    path = root / "blobs" / f"sha256-{sha256(content)}"
    path.write_bytes(content)
    return sha256(content), path


def _model(root: Path, name: str, layers: list[dict[str, object]], config: bytes) -> None:
    cdigest, _ = _blob(root, config)
    manifest = {"schemaVersion": 2, "config": {"mediaType": MEDIA_CONFIG, "digest": f"sha256:{cdigest}",
                                                "size": len(config)}, "layers": layers}
    path = root / "manifests" / "registry.ollama.ai" / "library" / name / "latest"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))


def ollama_everything(root: Path) -> OllamaStore:
    """``chat``: a model layer (damaged on disk) and a draft layer; ``imagegen``: two tensor layers (named,
    as Ollama's per-tensor models do) and no model layer; one blob no manifest names."""
    (root / "blobs").mkdir(parents=True)
    blobs: dict[str, Path] = {}
    chat = []
    for role, media, content in (("chat.model", MEDIA_MODEL, gguf(1)), ("chat.draft", MEDIA_DRAFT, gguf(2))):
        digest, blobs[role] = _blob(root, content)
        chat.append({"mediaType": media, "digest": f"sha256:{digest}", "size": len(content)})
    _model(root, "chat", chat, CHAT_CONFIG)
    blobs["chat.config"] = root / "blobs" / f"sha256-{sha256(CHAT_CONFIG)}"
    tensors = []
    for role, tensor, content in (("imagegen.t0", "vae/conv.weight", b"\x01" * 40),
                                  ("imagegen.t1", "text/embed.weight", b"\x02" * 24)):
        digest, blobs[role] = _blob(root, content)
        tensors.append({"mediaType": MEDIA_TENSOR, "digest": f"sha256:{digest}", "size": len(content),
                        "name": tensor, "dtype": "BF16", "shape": [len(content) // 2]})
    _model(root, "imagegen", tensors, IMAGEGEN_CONFIG)
    blobs["imagegen.config"] = root / "blobs" / f"sha256-{sha256(IMAGEGEN_CONFIG)}"
    _, orphan = _blob(root, b"left behind by a lost manifest")
    flip(blobs["chat.model"], 100)
    return OllamaStore(root, blobs, orphan)


@dataclass
class LocalDir:
    root: Path
    good: Path
    damaged: Path
    stale: Path
    unlisted: Path
    gone: Path


def _metadata(root: Path, name: str, etag: str, timestamp: float) -> None:
    meta = root / ".cache" / "huggingface" / "download" / f"{name}.metadata"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(f"{'c' * 40}\n{etag}\n{timestamp}\n")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hf_local_dir(root: Path) -> LocalDir:
    """``huggingface-cli download --local-dir`` as huggingface_hub lays it out: model.gguf (good, an LFS
    file: etag = sha256), sub/weights.bin (damaged after download), README.md (a small file, etag = git's
    blob sha1, touched after download), notes.txt (no metadata), gone.bin (metadata, no file)."""
    root.mkdir(parents=True)
    (root / "sub").mkdir()
    written = 1_700_000_000.0
    files = {"model.gguf": gguf(3), "sub/weights.bin": b"w" * 300, "README.md": b"# readme\n",
             "gone.bin": b"never here"}
    for name, data in files.items():
        etag = git_blob_sha1(data) if name == "README.md" else sha256(data)
        _metadata(root, name, etag, written)
        if name != "gone.bin":
            (root / name).write_bytes(data)
            os.utime(root / name, (written, written))
    (root / "notes.txt").write_text("mine\n")
    flip(root / "sub" / "weights.bin", 7)
    os.utime(root / "sub" / "weights.bin", (written, written))
    os.utime(root / "README.md", (written + 60, written + 60))
    return LocalDir(root, root / "model.gguf", root / "sub" / "weights.bin", root / "README.md", root / "notes.txt",
                    root / "gone.bin")


def lmstudio_models(root: Path) -> dict[str, Path]:
    """<root>/pub/good/good.gguf, pub/trunc/trunc.gguf (its last 10 bytes cut), and a split set of three
    of which the second shard is absent."""
    paths = {"good": root / "pub" / "good" / "good.gguf", "trunc": root / "pub" / "trunc" / "trunc.gguf",
             "split1": root / "pub" / "split" / "m-00001-of-00003.gguf",
             "split3": root / "pub" / "split" / "m-00003-of-00003.gguf"}
    for i, path in enumerate(paths.values()):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gguf(10 + i))
    data = paths["trunc"].read_bytes()
    paths["trunc"].write_bytes(data[:-10])
    return paths


def gpt4all_folder(root: Path) -> dict[str, Path]:
    """good.gguf (size and md5 listed, right), badmd5.gguf (md5 wrong), badsize.gguf (size wrong),
    other.gguf (not listed: structure only), and models3.json also listing a model never downloaded."""
    root.mkdir(parents=True)
    paths = {name: root / f"{name}.gguf" for name in ("good", "badmd5", "badsize", "other")}
    for i, path in enumerate(paths.values()):
        path.write_bytes(gguf(20 + i))
    listing = [{"filename": f"{name}.gguf", "filesize": str(path.stat().st_size),
                "md5sum": hashlib.md5(path.read_bytes()).hexdigest(), "name": name}
               for name, path in paths.items() if name != "other"]
    listing[1]["md5sum"] = "0" * 32
    listing[2]["filesize"] = str(paths["badsize"].stat().st_size + 1)
    listing.append({"filename": "never.gguf", "filesize": "123", "md5sum": "1" * 32})
    (root / "models3.json").write_text(json.dumps(listing))
    return paths
