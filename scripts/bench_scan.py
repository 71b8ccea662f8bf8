#!/usr/bin/env python3
"""Benchmark ``ggaudit scan`` against a plain sequential read of the same file, both from a hot page cache.

    python scripts/bench_scan.py [MODEL ...] [--repeat 3] [--keep] [--only KIND] [--cli] [--libggml SO]

With no MODEL it writes three models of real random bytes (finite scales) in a temporary directory
(under bench-data/, gitignored, with --keep): about 1 GiB (--size-gib) of mixed Q4_K/Q6_K/Q8_0/F32 tensors,
as much of F32/F16 tensors, and a ~250 MB model shaped like a small real one (a Q8_0 embedding table of a
262,144-token vocabulary, whose header is written too); --only picks one. For each model it prints GB/s
of the plain read (an in-process read of the file in chunks into one reused numpy buffer: the limit for
work that must see every byte) and of the library's scan, measured interleaved in the same run, and their
ratio (targets: quantized >= 1.0x, all-float >= 0.8x), and peak RSS of a scanning process and its
workers (it must not grow with the file size). --cli adds the wall time of a ``ggaudit scan`` process
against a Python process that imports numpy and reads the file once (target: at most 2x), and
--libggml SO the time of ggml's own check (gguf_init_from_file + ggml_validate_row_data, as
``llama.cpp --check-tensors`` runs it; see ggml_reference.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType as T, GGUFValueType as V

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ggaudit.format.blocks import layout_of
from ggaudit.format.build import Typed, encode_kv, encode_tensor_info
from ggaudit.scan.run import scan
from bench_open import VOCAB, _tokens
from ggml_reference import Ggml

DATA_DIR = Path(__file__).resolve().parent.parent / "bench-data"
ALIGN = 32
READ_CHUNK = 8 << 20
_READ_BUFFER = np.empty(READ_CHUNK, np.uint8)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _tensor_bytes(ggml_type: T, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Random but finite data: random quant bytes with every float field set to a small finite value."""
    layout = layout_of(ggml_type)
    n_units = shape[0] // layout.block_size * shape[1]
    if ggml_type is T.F32:
        return rng.standard_normal(n_units, dtype=np.float32).view(np.uint8)
    if ggml_type is T.F16:
        return rng.standard_normal(n_units, dtype=np.float32).astype(np.float16).view(np.uint8)
    data = rng.integers(0, 256, n_units * layout.block_bytes, dtype=np.uint8)
    blocks = data.reshape(n_units, layout.block_bytes)
    for f in layout.fields:
        scales = rng.uniform(1e-4, 1e-2, n_units).astype(np.float16)
        blocks[:, f.offset:f.offset + 2] = scales.view(np.uint8).reshape(n_units, 2)
    return data


def _write_model(path: Path, tensors: Sequence[tuple[str, T, tuple[int, int]]],
                 metadata: dict[str, Any] | None = None) -> None:
    """Stream a GGUF to disk tensor by tensor, so writing 1 GiB needs one tensor in memory at a time."""
    meta = {"general.architecture": "bench", **(metadata or {})}
    rng = np.random.default_rng(7)
    sizes = [layout_of(t).block_bytes * (s[0] // layout_of(t).block_size) * s[1] for _, t, s in tensors]
    rel, pos = [], 0
    for size in sizes:
        rel.append(pos)
        pos = _align(pos + size)
    header = b"GGUF" + np.array([3], "<u4").tobytes() + np.array([len(tensors), len(meta)], "<u8").tobytes()
    header += b"".join(encode_kv(k, v) for k, v in meta.items())
    header += b"".join(encode_tensor_info(n, t, s, r) for (n, t, s), r in zip(tensors, rel, strict=False))
    with open(path, "wb") as out:
        out.write(header + bytes(_align(len(header)) - len(header)))
        for (_name, ggml_type, shape), size in zip(tensors, sizes, strict=False):
            data = _tensor_bytes(ggml_type, shape, rng)
            out.write(data.tobytes())
            out.write(bytes(_align(size) - size))


def _quantized_tensors(target: int) -> Iterator[tuple[str, T, tuple[int, int]]]:
    total, layer = 0, 0
    while total < target:
        for name, t in (("attn_q", T.Q4_K), ("attn_k", T.Q4_K), ("attn_v", T.Q6_K), ("attn_output", T.Q4_K),
                        ("ffn_gate", T.Q4_K), ("ffn_down", T.Q6_K), ("ffn_up", T.Q8_0)):
            yield f"blk.{layer}.{name}.weight", t, (4096, 4096)
            total += 4096 * 4096 // layout_of(t).block_size * layout_of(t).block_bytes
        yield f"blk.{layer}.attn_norm.weight", T.F32, (4096, 1)
        yield f"blk.{layer}.ffn_norm.weight", T.F32, (4096, 1)
        layer += 1


def _vocab_tensors(target: int) -> Iterator[tuple[str, T, tuple[int, int]]]:
    """About 250 MB whatever --size-gib says, shaped like a small real model (Gemma 3 270M): a Q8_0
    embedding table of 262,144 tokens (178 MB) and a few Q4_K/Q6_K layers; the vocabulary is written too."""
    yield "token_embd.weight", T.Q8_0, (640, VOCAB)
    for layer in range(6):
        yield f"blk.{layer}.ffn_up.weight", T.Q4_K, (2048, 4096)
        yield f"blk.{layer}.ffn_down.weight", T.Q6_K, (4096, 2048)
        yield f"blk.{layer}.attn_norm.weight", T.F32, (640, 1)


def _float_tensors(target: int) -> Iterator[tuple[str, T, tuple[int, int]]]:
    total, layer = 0, 0
    while total < target:
        yield f"blk.{layer}.ffn_up.weight", T.F16, (4096, 4096)
        yield f"blk.{layer}.ffn_down.weight", T.F32, (4096, 4096)
        total += 4096 * 4096 * 6
        layer += 1


def _plain_read(path: Path) -> int:
    view = memoryview(_READ_BUFFER)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(view):
            total += n
    return total


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# VmHWM, not ru_maxrss, for the probe itself: Linux carries ru_maxrss across exec, so the probe would
# report this process's peak (it held generated tensors). Workers are forked from the probe.
_RSS_PROBE = """
import resource, sys
sys.path.insert(0, {root!r})
from ggaudit.scan.run import scan
scan({path!r})
hwm = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print(hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _peak_rss_mib(path: Path) -> tuple[float, float]:
    """Peak RSS of a fresh process scanning ``path``, and of its largest worker, in MiB."""
    code = _RSS_PROBE.format(root=str(Path(__file__).resolve().parent.parent), path=str(path))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    own, children = (int(x) / 1024 for x in out.split())
    return own, children


def bench(path: Path, repeat: int, workers: int | None, ggml: Ggml | None) -> None:
    size = path.stat().st_size
    _plain_read(path)                       # make it hot
    report = scan(str(path), workers=workers)
    # Interleaved, best of each: the page cache and the other core are shared with whatever else runs.
    read_s = scan_s = ggml_s = float("inf")
    for _ in range(repeat):
        read_s = min(read_s, _timed(lambda: _plain_read(path)))
        scan_s = min(scan_s, _timed(lambda: scan(str(path), workers=workers)))
        if ggml is not None:
            ggml_s = min(ggml_s, _timed(lambda: ggml.check(path)))
    read_gbs, scan_gbs = size / read_s / 1e9, size / scan_s / 1e9
    own, children = _peak_rss_mib(path)
    print(f"{path.name}: {size / 1e9:.2f} GB, {len(report.tensors)} tensors, ok {report.ok}, "
          f"workers {report.stats.workers}")
    print(f"  plain read  {read_s * 1000:8.1f} ms  {read_gbs:6.2f} GB/s")
    print(f"  scan        {scan_s * 1000:8.1f} ms  {scan_gbs:6.2f} GB/s  ratio {scan_gbs / read_gbs:.2f}x")
    if ggml is not None:
        print(f"  ggml C      {ggml_s * 1000:8.1f} ms  {size / ggml_s / 1e9:6.2f} GB/s  "
              f"(gguf_init_from_file + ggml_validate_row_data, one thread); scan / ggml {scan_s / ggml_s:.2f}x")
    print(f"  peak RSS    scanning process {own:.0f} MiB, largest worker {children:.0f} MiB")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--workers", type=int, help="scan(workers=...): 0 scans in this process; default: it picks")
    parser.add_argument("--only", choices=sorted(_KINDS), help="generate only this model")
    parser.add_argument("--keep", action="store_true", help="keep generated models in bench-data/")
    parser.add_argument("--cli", action="store_true",
                        help="also time the ggaudit scan process against a python+numpy process reading the file")
    parser.add_argument("--libggml", type=Path, metavar="SO",
                        help="also time ggml's own check from this libggml-base (see ggml_reference.py)")
    args = parser.parse_args(argv)
    ggml = Ggml(args.libggml) if args.libggml else None
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as tmp:
        models = list(args.models) or _generate(Path(tmp), args)
        print(f"cpus {os.cpu_count()}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for path in models:
            bench(path, args.repeat, args.workers, ggml)
            if args.cli:
                bench_cli(path, args.repeat)
    return 0


_KINDS = {"quantized": _quantized_tensors, "float": _float_tensors, "vocab": _vocab_tensors}


def _vocabulary() -> dict[str, Any]:
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": _tokens(),
            "tokenizer.ggml.scores": Typed(V.FLOAT32, [-float(i) for i in range(VOCAB)], True),
            "tokenizer.ggml.token_type": Typed(V.INT32, [6] * 256 + [1] * (VOCAB - 256), True)}


#: The reference process of --cli: Python, numpy imported, the file read once in 8 MiB chunks.
_READ_ONCE = """import sys
import numpy as np
buf = np.empty(8 << 20, np.uint8)
with open(sys.argv[1], "rb", buffering=0) as f:
    while f.readinto(buf):
        pass
"""


def bench_cli(path: Path, repeat: int) -> None:
    """Wall time of the ``ggaudit scan`` process against a Python process that imports numpy and reads the
    file once, interleaved, medians (issue 15's target: at most 2x)."""
    ours = [sys.executable, "-m", "ggaudit", "scan", str(path)]
    reference = [sys.executable, "-c", _READ_ONCE, str(path)]
    times: dict[str, list[float]] = {"scan": [], "read": []}
    for _ in range(repeat + 1):         # the first round warms the page cache and is dropped
        for key, argv in (("read", reference), ("scan", ours)):
            t0 = time.perf_counter()
            status = subprocess.run(argv, stdout=subprocess.DEVNULL, check=False).returncode
            times[key].append(time.perf_counter() - t0)
            if status not in (0, 1):
                raise SystemExit(f"{argv}: exit {status}")
    scan_s, read_s = (statistics.median(times[k][1:]) for k in ("scan", "read"))
    print(f"  CLI wall    ggaudit scan {scan_s * 1000:7.1f} ms, python+numpy read once {read_s * 1000:7.1f} ms, "
          f"ratio {scan_s / read_s:.2f}x (target <= 2x)")


def _generate(tmp: Path, args: argparse.Namespace) -> list[Path]:
    """Write the synthetic models (real bytes: sparse files would not measure reads) unless kept ones exist."""
    where = DATA_DIR if args.keep else tmp
    where.mkdir(exist_ok=True)
    target = int(args.size_gib * (1 << 30))
    models = []
    for kind, gen in _KINDS.items():
        if args.only not in (None, kind):
            continue
        path = where / f"bench-{kind}.gguf"
        if not path.exists():
            t0 = time.perf_counter()
            _write_model(path, list(gen(target)), _vocabulary() if kind == "vocab" else None)
            print(f"wrote {path} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.1f} s")
        models.append(path)
    return models


if __name__ == "__main__":
    raise SystemExit(main())
