"""A file that is not a GGUF (issue 35, section 4): one line naming the file, offset 0 and the field (magic),
exit 2, saying "not a GGUF file" with its first bytes escaped and bounded, and, when the bytes say what the
file is (a safetensors or PyTorch checkpoint, an executable, an Ollama manifest, a Git LFS pointer, a web
page, llama.cpp's formats before GGUF), what it looks like: each signature of the one table shown on a file
laid out as that format lays it out."""

from __future__ import annotations

import json
import pickle
import struct
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from ggaudit.errors import FormatError
from ggaudit.format import signatures
from ggaudit.format.layout import open_gguf

from ollama_support import ollama_store
from support import assert_one_line_error, run_cli, write_small_model


def _safetensors(path: Path) -> None:
    """As the safetensors format lays a file out: the JSON header's length (u64 LE), the header, the data."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + struct.pack("<2f", 1.0, 2.0))


def _torch_zip(path: Path) -> None:
    """torch.save's layout since 1.6: a zip whose first member is ``archive/data.pkl``."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"w": [1.0, 2.0]}, protocol=2))
        archive.writestr("archive/version", "3\n")


def _elf(path: Path) -> None:
    path.write_bytes(Path(sys.executable).resolve().read_bytes()[:4096] if sys.platform.startswith("linux")
                     else b"\x7fELF\x02\x01\x01\x00" + bytes(56))


def _pe(path: Path) -> None:
    """A DOS stub's header as every Windows executable begins: 'MZ', then e_lfanew at 0x3c."""
    path.write_bytes(b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff" + bytes(46) + struct.pack("<I", 64)
                     + b"PE\x00\x00")


def _ollama_manifest(path: Path) -> None:
    store = path.parent / "ollama-store"
    model = write_small_model(path.parent / "for-ollama.gguf").read_bytes()
    ollama_store(store, model, model)
    path.write_bytes((store / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "latest").read_bytes())


def _lfs_pointer(path: Path) -> None:
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "4d" * 32 + "\nsize 4368\n")


def _web_page(path: Path) -> None:
    path.write_text("\n<!DOCTYPE html>\n<html><head><title>404</title></head><body>Not Found</body></html>\n")


def _ggjt(path: Path) -> None:
    """llama.cpp's GGJT v3 file: the uint32 magic 0x67676a74 and the version, little-endian."""
    path.write_bytes(struct.pack("<II", 0x67676A74, 3) + bytes(64))


#: Each file kind, how to make one, and what the error says it looks like.
KINDS: dict[str, tuple[Callable[[Path], None], str]] = {
    "safetensors": (_safetensors, "a safetensors file"),
    "torch-zip": (_torch_zip, "a zip archive (PyTorch's torch.save writes one: .pt, .pth, .bin)"),
    "pickle-2": (lambda p: p.write_bytes(pickle.dumps({"w": 1}, protocol=2)),
                 "a Python pickle (older PyTorch checkpoints are one)"),
    "pickle-5": (lambda p: p.write_bytes(pickle.dumps({"w": 1}, protocol=5)),
                 "a Python pickle (older PyTorch checkpoints are one)"),
    "elf": (_elf, "an ELF executable or library"),
    "pe": (_pe, "a Windows executable (PE)"),
    "ollama-manifest": (_ollama_manifest,
                        "an Ollama manifest (name the model as ollama:NAME: its weights are a blob it lists)"),
    "lfs-pointer": (_lfs_pointer, "a Git LFS pointer, not the file it points to (`git lfs pull` fetches that)"),
    "web-page": (_web_page, "a web page (HTML), not a download's file"),
    "ggjt": (_ggjt, "a GGML, GGMF or GGJT file (llama.cpp's format before GGUF)"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_file_of_another_format_says_what_it_looks_like(kind: str, tmp_path: Path) -> None:
    make, what = KINDS[kind]
    path = tmp_path / "model.gguf"
    make(path)
    head = path.read_bytes()[:16]
    more = "..." if path.stat().st_size > 16 else ""
    result = run_cli(["info", path])
    assert assert_one_line_error(result) == (
        f"ggaudit: error: {path}: offset 0: magic: not a GGUF file (its first bytes are {head!r}{more}; a GGUF "
        f"starts with b'GGUF'): it looks like {what}")


def test_every_signature_is_shown_on_a_file_of_its_own(tmp_path: Path) -> None:
    """Each sample matches its own signature and no other; and the table holds no signature without a sample."""
    matched = {}
    for kind, (make, _) in KINDS.items():
        make(tmp_path / kind)
        head = (tmp_path / kind).read_bytes()[:signatures.HEAD]
        matched[kind] = [s.what for s in signatures.SIGNATURES if s.matches(head)]
    assert {kind: len(whats) for kind, whats in matched.items()} == dict.fromkeys(KINDS, 1)
    assert {whats[0] for whats in matched.values()} == {s.what for s in signatures.SIGNATURES}


def test_bytes_no_signature_knows_are_only_quoted(tmp_path: Path) -> None:
    path = tmp_path / "noise.bin"
    path.write_bytes(b"NOPE")
    with pytest.raises(FormatError) as caught:
        open_gguf(path)
    err = caught.value
    assert (err.offset, err.field) == (0, "magic")
    assert err.message == "not a GGUF file (its first bytes are b'NOPE'; a GGUF starts with b'GGUF')"


def test_the_bytes_quoted_are_escaped_and_bounded(tmp_path: Path) -> None:
    path = tmp_path / "evil.gguf"
    path.write_bytes("\x1b[2J\u202eEVIL".encode() + b"\x00" * (1 << 20))
    line = assert_one_line_error(run_cli(["scan", path]))
    assert line == (f"ggaudit: error: {path}: offset 0: magic: not a GGUF file (its first bytes are "
                    "b'\\x1b[2J\\xe2\\x80\\xaeEVIL\\x00\\x00\\x00\\x00\\x00'...; a GGUF starts with b'GGUF')")
    assert line.isprintable()


def test_a_file_that_ends_inside_the_magic_is_cut_short_and_one_that_cannot_be_a_gguf_is_not(tmp_path: Path) -> None:
    (tmp_path / "gg").write_bytes(b"GG")
    (tmp_path / "ab").write_bytes(b"ab")
    with pytest.raises(FormatError) as short:
        open_gguf(tmp_path / "gg")
    assert short.value.message == "needs 4 bytes but the file has 2 left (truncated?)"
    with pytest.raises(FormatError) as other:
        open_gguf(tmp_path / "ab")
    assert (other.value.offset, other.value.field, other.value.message) == (
        0, "magic", "not a GGUF file (its first bytes are b'ab'; a GGUF starts with b'GGUF')")


def test_a_gguf_is_still_read(tmp_path: Path) -> None:
    assert [t.name for t in open_gguf(write_small_model(tmp_path / "m.gguf")).tensors] == ["token_embd.weight"]


def test_a_safetensors_length_out_of_its_bounds_is_not_taken_for_one() -> None:
    assert signatures.recognised(struct.pack("<Q", 100_000_001) + b"{}") is None
    assert signatures.recognised(struct.pack("<Q", 1) + b"{") is None
    assert signatures.recognised(struct.pack("<Q", 2) + b"{}") == "a safetensors file"
