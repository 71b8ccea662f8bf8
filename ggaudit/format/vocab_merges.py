"""A BPE vocabulary's merges (``tokenizer.ggml.merges``, "A B" strings) against its tokens
(``tokenizer.ggml.tokens``): the layout keeps only each array's length and head, so both arrays are read
again here from the byte regions their values occupy, once each.

llama.cpp (src/llama-vocab.cpp, ``llama_vocab::impl::load``, the ``gpt2`` branch) splits each merge at its
first space after the first byte into a pair and ranks the pairs; it never looks the halves up in the
vocabulary, so a merge naming an unknown token loads, and only tokenization meets it. A warning, then.

Each region is read once and hashed with numpy (a 64-bit hash of every string from its u64 words, the
vocabulary's sorted, each merge's halves looked up): memory a few arrays of one word per string. The string
offsets are found with numpy where every string is shorter than 256 bytes (their length fields then have bytes
1..7 zero, so candidates are found at once and followed run by run), else by a sequential walk.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..io import opening, positioned
from ..errors import ReadError
from .blocks import GGUFValueType
from .layout import ArrayValue, MetaValue
from .metadata_finding import MetadataFinding

if TYPE_CHECKING:
    from .loader_rules import Header

_U64 = struct.Struct("<Q")
#: The array's element type (u32) and count (u64) before its strings.
_ARRAY_HEAD = 12
#: Unknown merges named in a finding, the first ones in the file's order.
_SHOWN = 3


def _string_array(entry: MetaValue | None) -> ArrayValue | None:
    value = None if entry is None else entry.value
    return value if isinstance(value, ArrayValue) and value.elem_type is GGUFValueType.STRING else None


def _read_region(path: str, entry: MetaValue) -> bytes:
    fd, _ = opening.open_readonly(path)
    try:
        return positioned.pread(fd, entry.nbytes - _ARRAY_HEAD, entry.offset + _ARRAY_HEAD)
    finally:
        os.close(fd)


def _walk(buf: bytes, count: int) -> tuple[list[int], list[int]]:
    """The starts and ends of the strings' bytes, walked one at a time; stops early at a string that runs past."""
    starts, ends, pos = [], [], 0
    for _ in range(count):
        if pos + 8 > len(buf):
            break
        n = _U64.unpack_from(buf, pos)[0]
        if pos + 8 + n > len(buf):
            break
        starts.append(pos + 8)
        ends.append(pos + 8 + n)
        pos += 8 + n
    return starts, ends


def _chain(buf: bytes, count: int) -> Any:
    """The candidate indices of the strings when every one is shorter than 256 bytes, None otherwise: the walk
    goes run by run (a run: candidates each ending where the next starts), stepping over the false candidates
    (eight bytes inside a string that look like a short length) between runs."""
    import numpy as np

    heads = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, offset=0, strides=(1,))
    cand = np.flatnonzero(heads < 256)
    nxt = cand + 8 + np.frombuffer(buf, np.uint8)[cand]
    breaks = np.flatnonzero(nxt[:-1] != cand[1:])
    if not len(cand) or cand[0] != 0:
        return None
    pieces, i, walked = [], 0, 0
    while walked < count:
        k = int(np.searchsorted(breaks, i))
        take = min((int(breaks[k]) if k < len(breaks) else len(cand) - 1) - i + 1, count - walked)
        pieces.append((i, i + take))
        walked += take
        target = int(nxt[i + take - 1])
        if walked == count:
            return np.concatenate([np.arange(a, b) for a, b in pieces]), cand, nxt, target
        i = int(np.searchsorted(cand, target))
        if i >= len(cand) or int(cand[i]) != target:
            return None     # a string of 256 bytes or more: not a candidate
    return None


def _spans(buf: bytes, count: int) -> tuple[Any, Any]:
    """Each string's (starts, ends) as arrays: by the candidates' chain, else walked one by one."""
    import numpy as np

    found = _chain(buf, count) if len(buf) >= 8 and count else None
    if found is not None:
        index, cand, nxt, end = found
        if end == len(buf):
            return cand[index] + 8, nxt[index]
    starts, ends = _walk(buf, count)
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


#: A string's hash: its bytes as little-endian u64 words (the last one zero-padded), word j times the j-th power
#: of an odd constant, summed mod 2**64, then mixed with the length. Computed for all strings at once.
_R, _L = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F


def _hashes(buf: bytes, starts: Any, ends: Any) -> Any:
    """Every string's hash, word column by word column: the j-th words of the strings longer than 8 j bytes."""
    import numpy as np

    words_at = np.ndarray((len(buf) + 1,), dtype="<u8", buffer=buf + bytes(8), offset=0, strides=(1,))
    left = (ends - starts).astype(np.int64)
    acc = left.astype(np.uint64) * np.uint64(_L)
    live, at, power = np.arange(len(starts)), starts.astype(np.int64), _R
    while len(live):
        words = words_at[at]
        short = left < 8        # the last, partial word: only the string's own bytes count
        words[short] &= (np.uint64(1) << (left[short].astype(np.uint64) * np.uint64(8))) - np.uint64(1)
        acc[live] += words * np.uint64(power)
        power = power * _R % (1 << 64)
        going = left > 8
        live, at, left = live[going], at[going] + 8, left[going] - 8
    return acc


class _HashSet:
    """A set of u64 hashes as an open-addressing table (linear probing, a quarter full), filled and probed for all
    keys at once: each round places or probes the keys still waiting, so a lookup costs a few gathers where a
    sorted search costs a cache miss per level (memory: 4 words per token, proportional to the vocabulary)."""

    def __init__(self, keys: Any) -> None:
        import numpy as np

        self.np = np
        self.mask = (1 << max(4, (4 * len(keys)).bit_length())) - 1
        self.table = np.zeros(self.mask + 1, dtype=np.uint64)
        self.used = np.zeros(self.mask + 1, dtype=bool)
        pending, slots = keys, self._slots(keys)
        while len(pending):
            empty = ~self.used[slots]
            self.table[slots[empty]] = pending[empty]
            self.used[slots[empty]] = True
            placed = self.table[slots] == pending      # written this round (the last of a tie), or already there
            pending, slots = pending[~placed], (slots[~placed] + 1) & self.mask

    def _slots(self, keys: Any) -> Any:
        np = self.np
        return ((keys ^ (keys >> np.uint64(29))) & np.uint64(self.mask)).astype(np.int64)

    def contains(self, keys: Any) -> Any:
        np = self.np
        found = np.zeros(len(keys), dtype=bool)
        waiting, slots = np.arange(len(keys)), self._slots(keys)
        while len(waiting):
            used = self.used[slots]
            hit = used & (self.table[slots] == keys[waiting])
            found[waiting[hit]] = True
            going = used & ~hit
            waiting, slots = waiting[going], (slots[going] + 1) & self.mask
        return found


def _unknown(merges: bytes, count: int, tokens: _HashSet) -> tuple[int, list[bytes]]:
    """How many merges have halves that are not both tokens (split as llama-vocab.cpp does: at the first space
    after the first byte), and the first few; ``tokens``: the vocabulary's hashes."""
    import numpy as np

    starts, ends = _spans(merges, count)
    spaces = np.flatnonzero(np.frombuffer(merges, np.uint8) == 0x20)
    at = np.searchsorted(spaces, starts + 1)
    cut = spaces[np.minimum(at, max(len(spaces) - 1, 0))] if len(spaces) else ends
    split = (at < len(spaces)) & (cut < ends)
    cut = np.where(split, cut, ends)
    halves = _hashes(merges, np.concatenate((starts, np.minimum(cut + 1, ends))), np.concatenate((cut, ends)))
    known = tokens.contains(halves)
    bad = ~split | ~known[:len(starts)] | ~known[len(starts):]
    first = zip(starts[bad][:_SHOWN].tolist(), ends[bad][:_SHOWN].tolist(), strict=True)
    return int(bad.sum()), [merges[s:e] for s, e in first]


def _token_hashes(buf: bytes, count: int) -> _HashSet:
    starts, ends = _spans(buf, count)
    return _HashSet(_hashes(buf, starts, ends))


def unknown_merges(h: Header, path: str) -> Iterator[MetadataFinding]:
    """A warning per file: merges naming a token the vocabulary lacks (the first few shown, all counted)."""
    tokens_entry, merges_entry = h.entry("tokenizer.ggml.tokens"), h.entry("tokenizer.ggml.merges")
    tokens, merges = _string_array(tokens_entry), _string_array(merges_entry)
    if tokens is None or merges is None or not merges.count or tokens_entry is None or merges_entry is None:
        return
    try:
        vocab = _token_hashes(_read_region(path, tokens_entry), tokens.count)
        n_bad, shown_bad = _unknown(_read_region(path, merges_entry), merges.count, vocab)
    except (OSError, ReadError):
        return      # the file went away after its header was read: the scan reports unreadable files itself
    if n_bad:
        shown = ", ".join(repr(_text(m)) for m in shown_bad)
        yield h.finding("tokenizer.ggml.merges", "merges of two tokens of tokenizer.ggml.tokens",
                        f"{n_bad} of {merges.count} merges name a token not in the vocabulary (the loader loads "
                        f"them; tokenization falls back): {shown}", severity="warning")


def _text(raw: bytes) -> Any:
    return raw.decode("utf-8", errors="surrogateescape")
