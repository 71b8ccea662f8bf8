"""Hints to the OS about how a file will be read (posix_fadvise, madvise): only hints, so a refusal, and a
platform without them, change nothing."""

from __future__ import annotations

import contextlib
import mmap
import os


def advise(fd: int, offset: int, length: int, advice: str) -> None:
    """posix_fadvise(*advice*: "sequential" or "willneed") where the OS has it; only a hint, so a refusal
    and a platform without it (Windows, macOS) change nothing."""
    fn = getattr(os, "posix_fadvise", None)
    if fn is None:
        return
    with contextlib.suppress(OSError):
        fn(fd, offset, length, os.POSIX_FADV_SEQUENTIAL if advice == "sequential" else os.POSIX_FADV_WILLNEED)


def advise_mapping(mapping: mmap.mmap) -> None:
    """Ask the OS to fault a fresh mapping's pages in ahead of use (MADV_WILLNEED: read-ahead of the
    whole window at once instead of a fault per 64 KiB); only a hint, absent on Windows."""
    advice = getattr(mmap, "MADV_WILLNEED", None)
    if advice is not None and hasattr(mapping, "madvise"):
        with contextlib.suppress(OSError, ValueError):
            mapping.madvise(advice)
