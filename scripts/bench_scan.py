#!/usr/bin/env python3
"""Benchmark ``ggaudit scan`` against a plain sequential read of the same file, both from a hot page cache.

    python scripts/bench_scan.py [MODEL ...] [--repeat 3] [--keep]

With no MODEL it writes two models of about 1 GiB (--size-gib) of real random bytes in a temporary
directory (under bench-data/, gitignored, with --keep): one of mixed Q4_K/Q6_K/Q8_0/F32 tensors and one
of F32/F16 tensors (--only picks one). For each model it prints GB/s of the plain read (an in-process
read of the file in chunks into one reused numpy buffer: the limit for work that must see every byte)
and of the scan, measured interleaved in the same run, and their ratio. Targets: quantized >= 1.0x,
all-float >= 0.8x. Peak RSS of this process
and of the scan's worker processes is printed too: it must not grow with the file size.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from gguf import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ggaudit.format.blocks import layout_of
from ggaudit.format.build import encode_kv, encode_tensor_info
from ggaudit.scan.run import scan

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


def _write_model(path: Path, tensors: Sequence[tuple[str, T, tuple[int, int]]]) -> None:
    """Stream a GGUF to disk tensor by tensor, so writing 1 GiB needs one tensor in memory at a time."""
    rng = np.random.default_rng(7)
    sizes = [layout_of(t).block_bytes * (s[0] // layout_of(t).block_size) * s[1] for _, t, s in tensors]
    rel, pos = [], 0
    for size in sizes:
        rel.append(pos)
        pos = _align(pos + size)
    header = b"GGUF" + np.array([3], "<u4").tobytes() + np.array([len(tensors), 1], "<u8").tobytes()
    header += encode_kv("general.architecture", "bench")
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


def bench(path: Path, repeat: int, workers: int | None) -> None:
    size = path.stat().st_size
    _plain_read(path)                       # make it hot
    report = scan(str(path), workers=workers)
    # Interleaved, best of each: the page cache and the other core are shared with whatever else runs.
    read_s = scan_s = float("inf")
    for _ in range(repeat):
        read_s = min(read_s, _timed(lambda: _plain_read(path)))
        scan_s = min(scan_s, _timed(lambda: scan(str(path), workers=workers)))
    read_gbs, scan_gbs = size / read_s / 1e9, size / scan_s / 1e9
    own, children = _peak_rss_mib(path)
    print(f"{path.name}: {size / 1e9:.2f} GB, {len(report.tensors)} tensors, ok {report.ok}, "
          f"workers {report.stats.workers}")
    print(f"  plain read  {read_s * 1000:8.1f} ms  {read_gbs:6.2f} GB/s")
    print(f"  scan        {scan_s * 1000:8.1f} ms  {scan_gbs:6.2f} GB/s  ratio {scan_gbs / read_gbs:.2f}x")
    print(f"  peak RSS    scanning process {own:.0f} MiB, largest worker {children:.0f} MiB")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--workers", type=int, help="scan(workers=...): 0 scans in this process; default: it picks")
    parser.add_argument("--only", choices=sorted(_KINDS), help="generate only this model")
    parser.add_argument("--keep", action="store_true", help="keep generated models in bench-data/")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as tmp:
        models = list(args.models) or _generate(Path(tmp), args)
        print(f"cpus {os.cpu_count()}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for path in models:
            bench(path, args.repeat, args.workers)
    return 0


_KINDS = {"quantized": _quantized_tensors, "float": _float_tensors}


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
            _write_model(path, list(gen(target)))
            print(f"wrote {path} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.1f} s")
        models.append(path)
    return models


if __name__ == "__main__":
    raise SystemExit(main())
