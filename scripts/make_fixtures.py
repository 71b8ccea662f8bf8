"""Write ggaudit's small deterministic GGUF fixtures into fixtures/, with fixtures/README.md.

Run ``python scripts/make_fixtures.py [--out DIR]``. The same code always writes the same bytes:
payloads come from a fixed PCG64 stream (raw bits only, so numpy's distribution code cannot change
them), quantized with ``gguf.quants.quantize`` where gguf has a quantizer, else random bytes with every
float field (as ggaudit.format.blocks places them) overwritten by controlled finite values. Each faulty copy
differs from its clean original in exactly one field or byte; its position is computed here and
written to the README, and :func:`build_all` returns it for tests.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import struct
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
from gguf import GGUFValueType, quants

from ggaudit.format.blocks import LAYOUTS, BlockLayout, Encoding, FloatField, GGMLQuantizationType as T, layout_of
from ggaudit.format.build import TensorSpec, Typed, gguf_bytes

SEED = 0x66617564  # any constant; changing it changes every fixture
PAGE = 4096
ALL_TYPES_NE0 = 512  # a multiple of every block size (32, 64, 128, 256): two 256-blocks per row
ALL_TYPES_ROWS = 8
PLE_NE0 = 160
PLE_ROWS = 1024
VOCAB = 256
EMBD = 64
#: Types gguf.quants can quantize; the rest get random bytes with controlled float fields.
QUANTIZABLE = frozenset({T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.TQ1_0, T.TQ2_0, T.MXFP4})


@dataclass(frozen=True)
class Fault:
    """One injected fault: where it sits and which bits it replaced."""

    file: str              # the faulty fixture
    clean: str             # the fixture it is a copy of (identical outside [offset, offset + length))
    kind: str
    tensor: str
    row: int
    block: int             # block index within the row
    column: int            # first column whose decoded value the fault affects
    columns: tuple[int, ...]  # every affected column, when not a contiguous block (else empty)
    width: int             # columns the faulty field covers
    field: str
    offset: int            # absolute file offset of the first changed byte
    length: int
    before: bytes
    after: bytes


# ---------------------------------------------------------------- deterministic payloads

def _stream(*key: int) -> np.random.PCG64:
    return np.random.PCG64(np.random.SeedSequence([SEED, *key]))


def _raw(bitgen: np.random.PCG64, n: int) -> np.ndarray:
    """*n* random bytes straight from the bit generator."""
    words = bitgen.random_raw(-(-n // 8)).astype("<u8")
    return words.view(np.uint8)[:n].copy()


def _unit(bitgen: np.random.PCG64, n: int) -> np.ndarray:
    """*n* float64 values in [0, 1) with 24 bits each (exact in float32)."""
    u = _raw(bitgen, 4 * n).view("<u4")
    return (u >> 8).astype(np.float64) / (1 << 24)


def _weights(bitgen: np.random.PCG64, rows: int, cols: int) -> np.ndarray:
    """Weight-like float32 values: uniform in [-1, 1) times a per-row magnitude in [0.05, 1)."""
    x = _unit(bitgen, rows * cols) * 2.0 - 1.0
    mag = 0.05 + 0.95 * _unit(bitgen, rows)
    return (x.reshape(rows, cols) * mag[:, None]).astype(np.float32)


def _f16_bits(u: np.ndarray) -> np.ndarray:
    """fp16 bits of scales spread log-uniformly over [1e-3, 1e-1]."""
    return (1e-3 * 100.0 ** u).astype(np.float16).view(np.uint16)


def _field_bytes(field: FloatField, u: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Controlled finite bytes for one field in each of len(u) blocks; *low* is the field's random bytes."""
    enc = field.encoding
    if enc is Encoding.F16:
        return _f16_bits(u).astype("<u2").view(np.uint8).reshape(-1, 2)
    if enc is Encoding.F32:
        return (1e-3 * 100.0 ** u).astype("<f4").view(np.uint8).reshape(-1, 4)
    if enc is Encoding.E8M0:
        return (120 + (u * 11).astype(np.uint8)).reshape(-1, 1)  # 2^-7 .. 2^3
    if enc is Encoding.UE4M3:
        exp = 4 + (u * 6).astype(np.uint8)  # 2^-3 .. 2^2, bit 7 clear, never the 0x7F special
        return ((exp << 3) | (low[:, 0] & 7)).reshape(-1, 1)
    if enc is Encoding.IQ1M_F16:
        # The scale's four nibbles go to the top of the four u16 words; their low 12 bits stay random.
        h = _f16_bits(u).astype(np.uint16)
        words = low.copy().view("<u2").reshape(-1, 4) & 0x0FFF
        for i in range(4):
            words[:, i] |= ((h >> (4 * i)) & 0xF) << 12
        return words.view(np.uint8).reshape(-1, 8)
    raise ValueError(f"no controlled value for {enc}")


def _random_blocks(t: T, bitgen: np.random.PCG64, n_bytes: int) -> bytes:
    facts = layout_of(t)
    blocks = _raw(bitgen, n_bytes).reshape(-1, facts.block_bytes)
    for field in facts.fields:
        span = slice(field.offset, field.offset + field.size)
        blocks[:, span] = _field_bytes(field, _unit(bitgen, len(blocks)), blocks[:, span])
    return blocks.tobytes()


def payload(t: T, ne0: int, rows: int, key: int) -> bytes:
    """The bytes of a [ne0, rows] tensor of type *t*: always the same for the same arguments."""
    facts = layout_of(t)
    bitgen = _stream(int(t), ne0, rows, key)
    n_bytes = ne0 // facts.block_size * facts.block_bytes * rows
    if facts.is_integer:
        return _raw(bitgen, n_bytes).tobytes()
    x = _weights(bitgen, rows, ne0)
    if t is T.F32:
        return x.astype("<f4").tobytes()
    if t is T.F16:
        return x.astype("<f2").tobytes()
    if t is T.F64:
        return x.astype("<f8").tobytes()
    if t in QUANTIZABLE:
        return np.ascontiguousarray(quants.quantize(x, t)).view(np.uint8).tobytes()
    return _random_blocks(t, bitgen, n_bytes)


def spec(name: str, t: T, ne0: int, rows: int, key: int = 0) -> TensorSpec:
    return TensorSpec(name, t, (ne0, rows), payload(t, ne0, rows, key))


# ---------------------------------------------------------------- metadata

def _tokens(n: int) -> list[str]:
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    words = ["\u2581the", "\u2581of", "\u2581and", "\u2581to", "\u2581caf\u00e9", "\u2581\u65e5\u672c",
             "\u2581na\u00efve", "\u2581\U0001f600"]
    out = specials + words
    out += [f"<0x{i:02X}>" for i in range(n - len(out))]
    return out[:n]


def _metadata(arch: str, name: str, vocab: int, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "general.architecture": arch,
        "general.name": name,
        "general.file_type": Typed(GGUFValueType.UINT32, 7),
        f"{arch}.context_length": 2048,
        f"{arch}.embedding_length": EMBD,
        f"{arch}.block_count": 1,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": _tokens(vocab),
        "tokenizer.ggml.scores": Typed(GGUFValueType.FLOAT32, [-float(i) for i in range(vocab)], True),
        "tokenizer.ggml.token_type": Typed(GGUFValueType.INT32, [3] * 4 + [1] * (vocab - 4), True),
        "tokenizer.ggml.bos_token_id": 2,
        "tokenizer.ggml.eos_token_id": 1,
    }
    meta.update(extra or {})
    return meta


# ---------------------------------------------------------------- fixtures

@dataclass(frozen=True)
class Built:
    """One fixture file: its bytes, tensors' absolute offsets and a one-line description."""

    name: str
    data: bytes
    offsets: Mapping[str, int]
    tensors: Mapping[str, TensorSpec]
    about: str


def _gguf(name: str, about: str, tensors: Sequence[TensorSpec], meta: Mapping[str, Any]) -> Built:
    data, offsets = gguf_bytes(tensors, meta)
    return Built(name, data, offsets, {t.name: t for t in tensors}, about)


def type_tensor_name(t: T) -> str:
    return f"types.{t.name.lower()}.weight"


def all_types() -> Built:
    tensors = [spec(type_tensor_name(t), t, ALL_TYPES_NE0, ALL_TYPES_ROWS) for t in LAYOUTS]
    return _gguf("all_types.gguf", f"one [{ALL_TYPES_NE0}, {ALL_TYPES_ROWS}] tensor of every GGML type "
                 "in ggaudit.format.blocks.LAYOUTS, all values finite", tensors,
                 _metadata("llama", "ggaudit all types", 32))


def ple(t: T) -> Built:
    tag = t.name.lower()
    tensors = [spec("token_embd.weight", T.Q8_0, EMBD, VOCAB, 1),
               spec("per_layer_token_embd.weight", t, PLE_NE0, PLE_ROWS, 2)]
    row_bytes = PLE_NE0 // layout_of(t).block_size * layout_of(t).block_bytes
    return _gguf(f"ple_{tag}.gguf", f"per_layer_token_embd.weight [{PLE_NE0}, {PLE_ROWS}] {t.name} "
                 f"({row_bytes}-byte rows) and token_embd.weight [{EMBD}, {VOCAB}] Q8_0",
                 tensors, _metadata("gemma3n", f"ggaudit PLE {t.name}", VOCAB))


def split_set() -> list[Built]:
    shards = [[spec("token_embd.weight", T.Q8_0, EMBD, VOCAB, 3), spec("blk.0.attn_norm.weight", T.F32, EMBD, 1, 4)],
              [spec("blk.0.ffn_down.weight", T.Q4_0, EMBD, EMBD, 5), spec("output_norm.weight", T.F32, EMBD, 1, 6)]]
    total = sum(len(s) for s in shards)
    out = []
    for k, tensors in enumerate(shards):
        split = {"split.no": Typed(GGUFValueType.UINT16, k), "split.count": Typed(GGUFValueType.UINT16, len(shards)),
                 "split.tensors.count": Typed(GGUFValueType.INT32, total)}
        meta = _metadata("llama", "ggaudit split", VOCAB, split) if k == 0 else split
        name = f"split-{k + 1:05d}-of-{len(shards):05d}.gguf"
        out.append(_gguf(name, f"shard {k + 1} of a {len(shards)}-shard split set ({len(tensors)} of "
                         f"{total} tensors)", tensors, meta))
    return out


# ---------------------------------------------------------------- faults

def _field_fault(clean: Built, name: str, kind: str, t: T, row: int, block: int, field_name: str,
                 after: bytes) -> tuple[Built, Fault]:
    tensor = clean.tensors[type_tensor_name(t)]
    facts: BlockLayout = layout_of(t)
    field = next(f for f in facts.fields if f.name == field_name)
    row_bytes = tensor.shape[0] // facts.block_size * facts.block_bytes
    offset = clean.offsets[tensor.name] + row * row_bytes + block * facts.block_bytes + field.offset
    column = block * facts.block_size + field.first_col
    return _patch(clean, name, Fault(name, clean.name, kind, tensor.name, row, block, column, (), field.width,
                                     field.name, offset, len(after), b"", after))


def _patch(clean: Built, name: str, fault: Fault) -> tuple[Built, Fault]:
    data = bytearray(clean.data)
    before = bytes(data[fault.offset:fault.offset + fault.length])
    if before == fault.after:
        raise AssertionError(f"{name}: the fault does not change any byte")
    data[fault.offset:fault.offset + fault.length] = fault.after
    about = f"copy of {clean.name} with one fault: {fault.kind}"
    fault = replace(fault, before=before)
    return Built(name, bytes(data), clean.offsets, clean.tensors, about), fault


def crosses_page(offset: int, row_bytes: int, row: int) -> bool:
    first = offset + row * row_bytes
    return first // PAGE != (first + row_bytes - 1) // PAGE


def first_page_crossing_row(offset: int, row_bytes: int, n_rows: int, start: int) -> int:
    """The first row at or after *start* whose bytes span a PAGE boundary."""
    for row in range(start, n_rows):
        if crosses_page(offset, row_bytes, row):
            return row
    raise ValueError("no row crosses a page")


def _ple_flip(clean: Built, name: str) -> tuple[Built, Fault]:
    # A flipped quant byte (not a scale) keeps every value finite: only digests and row replay see it.
    # It sits just past the page boundary so a read that drops the second page misses it.
    tensor = clean.tensors["per_layer_token_embd.weight"]
    facts = layout_of(tensor.ggml_type)
    row_bytes = PLE_NE0 // facts.block_size * facts.block_bytes
    base = clean.offsets[tensor.name]
    row = first_page_crossing_row(base, row_bytes, PLE_ROWS, 100)
    row_start = base + row * row_bytes
    in_row = (row_start // PAGE + 1) * PAGE - row_start
    block, in_block = divmod(in_row, facts.block_bytes)
    in_block = max(in_block, 2)  # skip the f16 d, land on qs[j]
    j = in_block - 2
    offset = row_start + block * facts.block_bytes + in_block
    # IQ4_NL qs[j] packs column j (low nibble) and column j + 16 (high nibble) of its block.
    cols = (block * facts.block_size + j, block * facts.block_size + j + 16)
    after = bytes([clean.data[offset] ^ 0xFF])
    return _patch(clean, name, Fault(name, clean.name, "flipped quant byte (xor 0xff) in a page-crossing row",
                                     tensor.name, row, block, cols[0], cols, 1, f"qs[{j}]", offset, 1, b"",
                                     after))


def faulty_copies(types: Built, ple_iq4nl: Built) -> list[tuple[Built, Fault]]:
    return [
        _field_fault(types, "all_types-f32-nan.gguf", "NaN F32 element", T.F32, 3, 100, "value",
                     struct.pack("<I", 0x7FC00000)),
        _field_fault(types, "all_types-q4_k-inf.gguf", "+Inf fp16 d in a Q4_K block", T.Q4_K, 5, 1, "d",
                     struct.pack("<H", 0x7C00)),
        _field_fault(types, "all_types-mxfp4-nan.gguf", "E8M0 0xFF (NaN) scale in an MXFP4 block", T.MXFP4, 2, 7,
                     "e", b"\xff"),
        _ple_flip(ple_iq4nl, "ple_iq4_nl-flip.gguf"),
    ]


# ---------------------------------------------------------------- output

def _readme(built: Sequence[Built], faults: Sequence[Fault]) -> str:
    return "\n".join([*_readme_files(built), *_readme_ple(built), *_readme_faults(faults)])


def _readme_files(built: Sequence[Built]) -> list[str]:
    lines = ["# Fixtures", "",
             "Written by `python scripts/make_fixtures.py`; do not edit by hand (this file is generated too).",
             "`tests/test_fixtures.py` regenerates everything and checks the bytes are identical.",
             "Offsets are absolute file offsets in bytes; rows index ne1, columns ne0, blocks count within",
             "the row. Each faulty copy differs from its clean original only in `length` bytes at `offset`.",
             "", "## Files", "", "| file | bytes | sha256 | contents |", "|---|---|---|---|"]
    for b in built:
        lines.append(f"| {b.name} | {len(b.data)} | {hashlib.sha256(b.data).hexdigest()} | {b.about} |")
    return lines


def _readme_ple(built: Sequence[Built]) -> list[str]:
    lines = ["", "## Tensors of the PLE fixtures", "",
             "| file | tensor | type | shape | offset | row bytes | rows crossing a 4096-byte page |",
             "|---|---|---|---|---|---|---|"]
    for b in built:
        if not (b.name.startswith("ple_") and "-" not in b.name):
            continue
        for t in b.tensors.values():
            facts = layout_of(t.ggml_type)
            rb = t.shape[0] // facts.block_size * facts.block_bytes
            off = b.offsets[t.name]
            crossing = sum(crosses_page(off, rb, r) for r in range(t.shape[1]))
            lines.append(f"| {b.name} | {t.name} | {t.ggml_type.name} | {list(t.shape)} | {off} | {rb} | {crossing} |")
    return lines


def _columns(f: Fault) -> str:
    if f.columns:
        return ", ".join(map(str, f.columns))
    return f"{f.column}..{f.column + f.width - 1}" if f.width > 1 else str(f.column)


def _readme_faults(faults: Sequence[Fault]) -> list[str]:
    lines = ["", "## Faults", "",
             "| file | clean copy | fault | tensor | row | block | column | field | offset | length | before | after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in faults:
        cells = (f.file, f.clean, f.kind, f.tensor, f.row, f.block, _columns(f), f.field, f.offset, f.length,
                 f.before.hex(), f.after.hex())
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += ["", "`before`/`after` are the raw bytes in file order (little-endian). `column` is the range of",
              "columns the faulty field scales, or the columns whose nibbles the flipped byte holds.", ""]
    return lines


def build() -> tuple[list[Built], list[Fault]]:
    """Every fixture in memory, and the faults injected into the faulty copies."""
    types, iq4, q8 = all_types(), ple(T.IQ4_NL), ple(T.Q8_0)
    pairs = faulty_copies(types, iq4)
    return [types, iq4, q8, *split_set(), *(b for b, _ in pairs)], [f for _, f in pairs]


def build_all(out_dir: str | os.PathLike[str]) -> dict[str, tuple[Fault, ...]]:
    """Write every fixture and README.md into *out_dir*; return each file name with its faults."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    built, faults = build()
    for b in built:
        (out / b.name).write_bytes(b.data)
    (out / "README.md").write_text(_readme(built, faults), encoding="utf-8", newline="\n")
    return {b.name: tuple(f for f in faults if f.file == b.name) for b in built}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "fixtures"))
    args = parser.parse_args(argv)
    files = build_all(args.out)
    total = sum((Path(args.out) / name).stat().st_size for name in files)
    print(f"wrote {len(files)} fixtures ({total} bytes) and README.md to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
