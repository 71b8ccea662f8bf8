"""Time opening a model with ggaudit.format.layout.open_model and with gguf.GGUFReader, in the same run.

    python scripts/bench_open.py [FILE] [--repeat N]

With no FILE, a ~250 MB model with a 262,144-entry vocabulary (tokens, f32 scores, i32 token types)
and a handful of tensors is synthesized once under bench-data/ and used. Both openers run on a warm
page cache (ggaudit first, best of --repeat; GGUFReader once: it takes seconds). The target is
ggaudit < 0.3 s on the synthesized model.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time
from pathlib import Path
from collections.abc import Callable, Sequence

import numpy as np
from gguf import GGMLQuantizationType as T, GGUFReader, GGUFValueType as V

from ggaudit.format.blocks import layout_of
from ggaudit.format.build import Typed, encode_kv, encode_tensor_info
from ggaudit.format.layout import open_model
from ggml_reference import Ggml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "bench-data" / "bench-open-262k.gguf"
VOCAB = 262_144
EMBD = 640
ALIGN = 32
TARGET_S = 0.3
# (name, type, shape): ~250 MB in all, dominated by the embedding table as in small real models.
TENSORS = (
    ("token_embd.weight", T.Q8_0, (EMBD, VOCAB)),
    ("blk.0.attn_q.weight", T.Q4_K, (EMBD * 4, 2048)),
    ("blk.0.ffn_up.weight", T.Q6_K, (EMBD * 4, 16384)),
    ("blk.0.ffn_down.weight", T.Q4_K, (8192, EMBD * 8)),
    ("blk.0.attn_norm.weight", T.F32, (EMBD,)),
    ("output_norm.weight", T.F32, (EMBD,)),
)


def _nbytes(ggml_type: T, shape: Sequence[int]) -> int:
    facts = layout_of(ggml_type)
    rows = 1
    for ne in shape[1:]:
        rows *= ne
    return shape[0] // facts.block_size * facts.block_bytes * rows


def _tokens() -> list[str]:
    # Lengths and scripts vary like a real SentencePiece vocabulary: bytes, word pieces, CJK.
    rng = np.random.default_rng(262144)
    pieces = ["\u2581the", "ing", "\u2581\u65e5\u672c", "tion", "\u2581na\u00efve", "er", "\u2581model", "s"]
    lengths = rng.integers(0, 4, VOCAB)
    out = [f"<0x{i:02X}>" for i in range(256)]
    out += [f"{pieces[i % len(pieces)]}{i}" + "x" * int(lengths[i]) for i in range(256, VOCAB)]
    return out


def synthesize(path: Path) -> None:
    """Write the benchmark model to *path* (streamed; never the whole file in memory)."""
    meta = {
        "general.architecture": "gemma3",
        "general.name": "ggaudit bench 262k vocabulary",
        "gemma3.context_length": 32768,
        "gemma3.embedding_length": EMBD,
        "gemma3.block_count": 1,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": _tokens(),
        "tokenizer.ggml.scores": Typed(V.FLOAT32, [-float(i) for i in range(VOCAB)], True),
        "tokenizer.ggml.token_type": Typed(V.INT32, [6] * 256 + [1] * (VOCAB - 256), True),
    }
    infos, rel, sizes = [], 0, []
    for name, ggml_type, shape in TENSORS:
        infos.append(encode_tensor_info(name, ggml_type, shape, rel))
        sizes.append(_nbytes(ggml_type, shape))
        rel += -(-sizes[-1] // ALIGN) * ALIGN
    header = b"GGUF" + struct.pack("<IQQ", 3, len(TENSORS), len(meta))
    header += b"".join(encode_kv(k, v) for k, v in meta.items()) + b"".join(infos)
    header += bytes(-len(header) % ALIGN)
    chunk = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(header)
        for size in sizes:
            left = -(-size // ALIGN) * ALIGN
            while left:
                n = min(left, len(chunk))
                f.write(chunk[:n])
                left -= n
    os.replace(tmp, path)


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path, help=f"model to open (default: synthesize {DEFAULT.name})")
    parser.add_argument("--repeat", type=int, default=5, help="ggaudit runs; the best is reported")
    parser.add_argument("--libggml", type=Path, metavar="SO",
                        help="also time ggml's gguf_init_from_file from this libggml-base (see ggml_reference.py)")
    args = parser.parse_args(argv)
    path = args.file or DEFAULT
    if args.file is None and not path.exists():
        print(f"synthesizing {path} ...", file=sys.stderr)
        synthesize(path)
    model = open_model(path)
    size = model.size
    vocab = model.metadata.get("tokenizer.ggml.tokens")
    n_vocab = vocab.value.count if vocab is not None else 0
    ours = _best(lambda: open_model(path), args.repeat)
    theirs = _best(lambda: GGUFReader(path), 1)
    print(f"file: {path} ({size / 1e6:.1f} MB, {len(model.tensors)} tensors, {n_vocab} vocabulary entries)")
    print(f"ggaudit open_model: {ours * 1000:9.1f} ms (best of {args.repeat})")
    print(f"gguf.GGUFReader:    {theirs * 1000:9.1f} ms")
    print(f"ratio GGUFReader/ggaudit: {theirs / ours:.1f}x")
    if args.libggml is not None:
        ggml = Ggml(args.libggml)
        c_open = _best(lambda: ggml.open(path), args.repeat)
        print(f"ggml gguf_init_from_file: {c_open * 1000:9.1f} ms (best of {args.repeat}); "
              f"ggaudit/ggml {ours / c_open:.2f}x (target < 1)")
    if args.file is None:
        print(f"target ggaudit < {TARGET_S * 1000:.0f} ms: {'met' if ours < TARGET_S else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
