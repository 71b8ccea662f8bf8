"""What a file that is not a GGUF is, by its first bytes: one table of the signatures of the files people
mistake for one (a safetensors or PyTorch checkpoint, an executable, an Ollama manifest, a Git LFS pointer,
a web page saved in place of a download, llama.cpp's formats before GGUF), for the words of the error."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

#: How many of a file's first bytes the signatures look at (an Ollama manifest's keys are in its first KiB).
HEAD = 4096
#: How many of them the error quotes: enough to recognise a format by, never a screenful.
SHOWN = 16
#: safetensors caps its JSON header at 100 MB: a larger length is no safetensors header.
_SAFETENSORS_MAX_HEADER = 100_000_000


@dataclass(frozen=True)
class Signature:
    """``matches(head)``: whether a file's first bytes (up to :data:`HEAD`) are ``what``'s, in words."""

    what: str
    matches: Callable[[bytes], bool]


def _starts(*prefixes: bytes) -> Callable[[bytes], bool]:
    return lambda head: head.startswith(prefixes)


def _safetensors(head: bytes) -> bool:
    """An 8-byte little-endian length of the JSON header, then the header's opening brace."""
    if len(head) < 9:
        return False
    (length,) = struct.unpack_from("<Q", head)
    return 2 <= length <= _SAFETENSORS_MAX_HEADER and head[8:9] == b"{"


def _pickle(head: bytes) -> bool:
    """The PROTO opcode (0x80) and a protocol of 2 to 5, as pickle.dump (and torch.save before 1.6) begins."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _ollama_manifest(head: bytes) -> bool:
    """A JSON object with an Ollama (OCI) manifest's keys."""
    return head.lstrip().startswith(b"{") and b'"schemaVersion"' in head and b'"layers"' in head


def _html(head: bytes) -> bool:
    return head.lstrip().lower().startswith((b"<!doctype html", b"<html"))


#: The first that matches says what the file is.
SIGNATURES = (
    Signature("a safetensors file", _safetensors),
    Signature("a zip archive (PyTorch's torch.save writes one: .pt, .pth, .bin)", _starts(b"PK\x03\x04")),
    Signature("a Python pickle (older PyTorch checkpoints are one)", _pickle),
    Signature("an ELF executable or library", _starts(b"\x7fELF")),
    Signature("a Windows executable (PE)", _starts(b"MZ")),
    Signature("an Ollama manifest (name the model as ollama:NAME: its weights are a blob it lists)", _ollama_manifest),
    Signature("a Git LFS pointer, not the file it points to (`git lfs pull` fetches that)",
              _starts(b"version https://git-lfs.github.com/spec/")),
    Signature("a web page (HTML), not a download's file", _html),
    # ggml's uint32 magics, written little-endian: 'ggml', 'ggmf', 'ggjt' (models), 'ggla' (LoRA adapters).
    Signature("a GGML, GGMF or GGJT file (llama.cpp's format before GGUF)",
              _starts(b"lmgg", b"fmgg", b"tjgg", b"algg")),
)


def recognised(head: bytes) -> str | None:
    """What the file beginning with ``head`` is, in words, when a signature says so; else None."""
    return next((s.what for s in SIGNATURES if s.matches(head)), None)


def not_gguf(head: bytes, size: int, magic: bytes) -> str:
    """The words of the error of a file of ``size`` bytes beginning with ``head`` and not with ``magic``:
    its first bytes escaped (at most :data:`SHOWN`), and what they say it is, when they do."""
    shown = repr(head[:SHOWN]) + ("..." if size > SHOWN else "")
    what = recognised(head)
    return (f"not a GGUF file (its first bytes are {shown}; a GGUF starts with {magic!r})"
            + ("" if what is None else f": it looks like {what}"))
