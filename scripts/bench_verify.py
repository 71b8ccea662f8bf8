"""Benchmark `verify` (sha256), `manifest` (sha256 + per-tensor/row-group xxh3) and `scan --sha256`
(NaN scan + sha256 from one read) against hashlib.

Builds a GGUF of about --size-gb GiB under bench-data/ (gitignored), reads it once so it is hot in
the page cache, then times, interleaved and best of --repeat:

* reference: ``hashlib.file_digest(f, "sha256")``, the standard library hashing the same file;
* verify:    ``ggaudit.verify.verify_sums`` on a checksum file naming it (one sha256 pass);
* manifest:  ``build_tensor_manifest`` (sha256 of the file + xxh3-128 per tensor and per row group,
             from one read);
* scan+sha:  ``scan(model, hashes=("sha256",))``, what ``ggaudit scan --sha256`` runs (the scan of
             every block's scales and the file's sha256, from one read);

and prints each as a ratio of the reference's throughput (targets: verify >= 0.95, manifest >= 0.90,
scan+sha >= 0.90).
The file is deleted afterwards unless --keep is given.

``--cache`` measures the digest cache instead: an Ollama-shaped store of --store-mb MB of blobs in a
temporary folder, ``verify("ollama:bench", cache=...)`` run once (every blob hashed and stored) and then
--repeat times more (every digest from the cache), each run's wall time and the ratio first / best cached.

    python scripts/bench_verify.py [--size-gb 2] [--repeat 5] [--keep]
    python scripts/bench_verify.py --cache [--store-mb 400] [--blobs 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import json
import struct
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable

import numpy as np
from gguf import GGMLQuantizationType as T

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ggaudit.format.build import encode_kv, encode_tensor_info
from ggaudit.format.layout import open_model
from ggaudit.verify.manifests.tensor import build_tensor_manifest
from ggaudit.scan.run import scan
from ggaudit.verify.dispatch import verify
from ggaudit.verify.walk.sums import verify_sums

COLS = 4096                                  # Q4_K: 16 blocks of 144 bytes per row
ROW_BYTES = COLS // 256 * 144
ROWS = 14_000                                # ~32 MB per tensor
ALIGN = 32


def make_model(path: Path, size_bytes: int) -> None:
    """Write a GGUF of Q4_K tensors, streamed tensor by tensor (never the whole file in memory)."""
    n = max(1, size_bytes // (ROWS * ROW_BYTES))
    nbytes = ROWS * ROW_BYTES
    header = b"GGUF" + struct.pack("<IQQ", 3, n, 1) + encode_kv("general.architecture", "llama")
    header += b"".join(encode_tensor_info(f"blk.{i}.ffn_up.weight", T.Q4_K, (COLS, ROWS), i * nbytes)
                       for i in range(n))
    header += bytes(-len(header) % ALIGN)
    block = np.random.default_rng(0).integers(0, 256, nbytes, np.uint8)
    with open(path, "wb") as f:
        f.write(header)
        for i in range(n):
            block[:8] = np.frombuffer(struct.pack("<Q", i), np.uint8)   # no two tensors alike
            f.write(block.tobytes())


def reference(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def timed(fn: Callable[[], object], times: list[tuple[float, float]]) -> object:
    """Run ``fn``, appending (wall seconds, CPU seconds of all this process's threads)."""
    start, cpu = time.perf_counter(), time.process_time()
    result = fn()
    times.append((time.perf_counter() - start, time.process_time() - cpu))
    return result


def make_store(root: Path, total_bytes: int, blobs: int) -> None:
    """An Ollama store holding one model, ``bench``, of ``blobs`` layers of random bytes."""
    (root / "blobs").mkdir(parents=True)
    rng = np.random.default_rng(1)
    layers = []
    for _ in range(blobs):
        content = rng.integers(0, 256, total_bytes // blobs, np.uint8).tobytes()
        digest = hashlib.sha256(content).hexdigest()
        (root / "blobs" / f"sha256-{digest}").write_bytes(content)
        layers.append({"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                       "size": len(content)})
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / "bench" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))


def bench_cache(store_mb: int, blobs: int, repeat: int) -> int:
    with tempfile.TemporaryDirectory(dir=ROOT / "bench-data") as tmp:
        store, cache = Path(tmp) / "store", Path(tmp) / "cache"
        make_store(store, store_mb * 10**6, blobs)
        time.sleep(0.2)     # past the window in which the cache does not trust fresh stamps
        runs = []
        for i in range(repeat + 1):
            start = time.perf_counter()
            report = verify("ollama:bench", store=store, cache=cache)
            runs.append(time.perf_counter() - start)
            assert report.ok and report.stats.cached == (blobs if i else 0), report.stats
        print(f"store: {blobs} blobs, {store_mb} MB (just written: in the page cache for every run), "
              f"cpus: {os.cpu_count()}")
        print(f"first run (hash, store): {runs[0]:.3f} s; cached runs: " + " ".join(f"{r * 1000:.1f} ms"
                                                                                    for r in runs[1:]))
        print(f"ratio first / best cached: {runs[0] / min(runs[1:]):.0f}x")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep bench-data/bench_verify.gguf afterwards")
    parser.add_argument("--cache", action="store_true", help="measure the digest cache: first run vs cached runs")
    parser.add_argument("--store-mb", type=int, default=400, help="with --cache: MB of blobs in the store")
    parser.add_argument("--blobs", type=int, default=8, help="with --cache: blobs in the store")
    args = parser.parse_args()
    if args.cache:
        (ROOT / "bench-data").mkdir(exist_ok=True)
        return bench_cache(args.store_mb, args.blobs, args.repeat)

    folder = ROOT / "bench-data"
    folder.mkdir(exist_ok=True)
    path = folder / "bench_verify.gguf"
    sums = folder / "bench_verify.sha256"
    try:
        if not path.exists() or abs(path.stat().st_size - args.size_gb * 2**30) > 2**28:
            make_model(path, int(args.size_gb * 2**30))
        size = path.stat().st_size
        digest = reference(path)                    # also warms the page cache
        sums.write_text(f"{digest}  {path.name}\n")
        timings: dict[str, list[tuple[float, float]]] = {"reference": [], "verify": [], "manifest": [],
                                                         "scan+sha": []}
        for _ in range(args.repeat):
            timed(lambda: reference(path), timings["reference"])
            report = timed(lambda: verify_sums(sums), timings["verify"])
            assert report.ok, report  # type: ignore[attr-defined]
            built = timed(lambda: build_tensor_manifest(open_model(path)), timings["manifest"])
            assert built.files[0].sha256 == digest  # type: ignore[attr-defined]
            scanned = timed(lambda: scan(open_model(path), hashes=("sha256",)), timings["scan+sha"])
            assert scanned.digests[0].digests["sha256"] == digest  # type: ignore[attr-defined]
        ref = min(w for w, _ in timings["reference"])
        print(f"file: {path} ({size / 1e9:.2f} GB, {len(built.tensors)} tensors), "  # type: ignore[attr-defined]
              f"cpus: {os.cpu_count()}, load avg: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'what':<10} {'best s':>8} {'GB/s':>7} {'ratio':>6} {'cpu s':>7}   all runs (wall s)")
        for name, runs in timings.items():
            best, cpu = min(runs)
            print(f"{name:<10} {best:8.3f} {size / best / 1e9:7.2f} {ref / best:6.2f} {cpu:7.3f}   "
                  + " ".join(f"{w:.3f}" for w, _ in runs))
        print("targets: verify >= 0.95, manifest >= 0.90, scan+sha >= 0.90 (ratio = best reference wall time"
              " / best wall time; cpu = CPU seconds of the best run, all threads)")
    finally:
        sums.unlink(missing_ok=True)
        if not args.keep:
            path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
