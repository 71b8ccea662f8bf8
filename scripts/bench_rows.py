#!/usr/bin/env python3
"""Benchmark `ggaudit rows`: random single-row gathers per read path beside fio, and the --all sweep
beside a plain sequential read, all on one ~1.5 GB PLE-shaped file, measured in the same run; or, with
--table, `rows --all` of one model's table beside one read per path of that range and a compare.

    python scripts/bench_rows.py [--size-gb 1.5] [--seconds 2] [--reps 5] [--dir bench-data] [--keep]
    python scripts/bench_rows.py --table MODEL [--tensor token_embd.weight] [--reps 5]

Targets (issue 5): direct >= 0.9x fio --rw=randread --bs=4k --direct=1 at the same job count;
--all direct sweep >= 0.5x a plain sequential read. Every measurement starts with the file evicted
from the page cache (posix_fadvise DONTNEED), so buffered and mmap reads reach the disk too. fio runs
between the gathers, and each gather is set against the fio runs on either side of it.

Target (issue 37), --table: `check_rows(MODEL, tensor=..., select=RowSelection(all_rows=True))` (the library
call `rows --all` makes, opening the model and testing the rows' values included) <= 1.5x one read of the
table's range per path (buffered pread, a copy out of a mapping, O_DIRECT, 8 MiB at a time) with the mapped
and direct chunks compared with the buffered one, in the same process, warm and with the file's pages evicted
before each run; the two alternate (A B B A ...), and the ratio printed is the median of per-pair ratios.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ggaudit.format.build import encode_kv, encode_tensor_info
from ggaudit.format.layout import open_model
from ggaudit.evidence.readers import PAGE, open_reader, same_bytes
from ggaudit.rows.replay import RowSelection, RowsOptions, check_rows
from ggaudit.rows.table import RowTable
from ggaudit.rows.gather import SWEEP_CHUNK, Gatherer

NAME = "per_layer_token_embd.weight"
ROW_BYTES = 90  # IQ4_NL, ne0 = 160


def make_file(path: Path, size: int) -> None:
    """A GGUF with one IQ4_NL table of ~size bytes, streamed to disk in 64 MiB pieces."""
    n_rows = size // ROW_BYTES
    header = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + encode_kv("general.architecture", "gemma3n")
    header += encode_tensor_info(NAME, T.IQ4_NL, (160, n_rows), 0)
    header += bytes(-len(header) % 32)
    rng = np.random.default_rng(0)
    scale = np.frombuffer(np.float16(0.25).tobytes(), np.uint8)
    with open(path, "wb") as f:
        f.write(header)
        left = n_rows * 5  # blocks
        while left:
            n = min(left, (64 << 20) // 18)
            blocks = rng.integers(0, 256, size=(n, 18), dtype=np.uint8)
            blocks[:, 0:2] = scale
            f.write(blocks.tobytes())
            left -= n
        f.flush()
        os.fsync(f.fileno())


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def gather_rate(path: Path, table: RowTable, mode: str, rows: list[int], workers: int) -> tuple[float, int]:
    """Rows per second through the library's gather (pool, poison, threads), cold cache."""
    evict(path)
    with open_reader(str(path), mode) as reader:
        g = Gatherer(reader, table.tensor.offset, table.row_bytes, workers)
        try:
            start = time.perf_counter()
            for i in range(0, len(rows), 256):
                g.gather(rows[i:i + 256])
            seconds = time.perf_counter() - start
        finally:
            g.close()
    return len(rows) / seconds, g.reads


def raw_rate(path: Path, table: RowTable, rows: list[int], jobs: int) -> float:
    """The floor of Python's own cost: bare os.preadv of each row's aligned span, *jobs* threads, no checks."""
    with open_reader(str(path), "direct") as reader:
        spans = [reader.span(table.row_offset(r), table.row_bytes) for r in rows]
        fd = reader.fd  # type: ignore[attr-defined]

        def run(part: list[tuple[int, int]]) -> None:
            buf = mmap.mmap(-1, 1 << 16)
            view = memoryview(buf)
            for start, n in part:
                os.preadv(fd, [view[:n]], start)

        threads = [threading.Thread(target=run, args=(spans[i::jobs],)) for i in range(jobs)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return len(rows) / (time.perf_counter() - start)


def fio_iops(path: Path, jobs: int, seconds: int) -> float | None:
    if shutil.which("fio") is None:
        return None
    out = subprocess.run(["fio", "--name=rr", f"--filename={path}", "--rw=randread", "--bs=4k", "--direct=1",
                          "--ioengine=psync", f"--numjobs={jobs}", "--time_based", f"--runtime={seconds}",
                          "--group_reporting", "--output-format=json"], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)["jobs"][0]["read"]["iops"])


def plain_read(path: Path) -> float:
    """MB/s of a plain sequential buffered read in 8 MiB pieces, cold cache."""
    evict(path)
    buf = bytearray(8 << 20)
    fd = os.open(path, os.O_RDONLY)
    total, start = 0, time.perf_counter()
    try:
        while n := os.readv(fd, [buf]):
            total += n
    finally:
        os.close(fd)
    return total / (time.perf_counter() - start) / 1e6


def sweep_rate(path: Path, workers: int) -> float:
    """MB/s of the table through a direct sweep of all rows (`rows --all --modes direct`: reads, reference
    and compare)."""
    evict(path)
    start = time.perf_counter()
    report = check_rows(str(path), modes=["direct"], select=RowSelection(all_rows=True),
                        options=RowsOptions(workers=workers))
    seconds = time.perf_counter() - start
    assert report.ok, report.mismatches[:1]
    return report.n_rows * report.row_bytes / seconds / 1e6


def one_read_per_path(path: str, offset: int, length: int, chunk: int = SWEEP_CHUNK) -> bool:
    """What `rows --all` is measured against: [offset, offset + length) read once per path (buffered pread, a
    copy out of a read-only mapping, O_DIRECT over the aligned span), a chunk at a time, the mapped and direct
    chunks compared with the buffered one. True when every chunk agreed."""
    fd = os.open(path, os.O_RDONLY)
    direct = os.open(path, os.O_RDONLY | os.O_DIRECT)
    mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    whole = memoryview(mapped)
    buffers = [mmap.mmap(-1, chunk + 2 * PAGE) for _ in range(3)]
    b, m, d = (memoryview(x) for x in buffers)
    same = True
    try:
        for pos in range(offset, offset + length, chunk):
            n = min(chunk, offset + length - pos)
            os.preadv(fd, [b[:n]], pos)
            m[:n] = whole[pos:pos + n]
            start = pos - pos % PAGE
            os.preadv(direct, [d[:-(-(pos + n - start) // PAGE) * PAGE]], start)
            same &= same_bytes(b[:n], m[:n]) and same_bytes(b[:n], d[pos - start:pos - start + n])
    finally:
        for v in (whole, b, m, d):
            v.release()
        for x in (mapped, *buffers):
            x.close()
        os.close(fd)
        os.close(direct)
    return same


def bench_table(model: str, tensor: str, reps: int) -> None:
    """`rows --all` of *tensor* against one read per path of its range, warm and cold (see the docstring)."""
    t = open_model(model).tensor(tensor)
    length = t.n_rows * t.row_bytes
    print(f"{model}: {tensor}, {t.n_rows} rows of {t.row_bytes} bytes ({length / 1e6:.0f} MB) at offset "
          f"{t.offset}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")

    def rows_all() -> None:
        report = check_rows(model, tensor=tensor, select=RowSelection(all_rows=True))
        assert report.ok, report.mismatches[:1]

    def reference() -> None:
        assert one_read_per_path(t.path, t.offset, length)

    for cold in (False, True):
        times: dict[str, list[float]] = {"rows --all": [], "one read per path": []}
        for rep in range(reps):
            pair = [("rows --all", rows_all), ("one read per path", reference)]
            for name, run in (pair if rep % 2 == 0 else pair[::-1]):
                if cold:
                    evict(Path(t.path))
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
        ratios = [a / b for a, b in zip(times["rows --all"], times["one read per path"], strict=True)]
        print(f"{'cold' if cold else 'warm'}: rows --all {median(times['rows --all']):.3f} s, one read per path "
              f"{median(times['one read per path']):.3f} s: {median(ratios):.2f}x (per pair: "
              + ", ".join(f"{r:.2f}" for r in ratios) + ")")


def median(values: list[float]) -> float:
    return statistics.median(values)


def random_rows(table: RowTable, n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).choice(table.n_rows, size=n, replace=False).tolist()


def bench_gather(path: Path, table: RowTable, reps: int, seconds: int) -> None:
    """fio and the gathers interleaved: fio, the read paths, fio, the read paths, ..., fio. This disk's rate
    drifts by up to 2x within a minute here, so each run is set against the mean of the fio runs just
    before and after it, and the ratio printed is the median of those per-run ratios."""
    seed = 0
    modes = ("raw preadv", "direct", "buffered", "mmap")
    for jobs in (1, 2):
        fio = [fio_iops(path, jobs, seconds)]
        rates: dict[str, list[float]] = {m: [] for m in modes}
        ratios: dict[str, list[float]] = {m: [] for m in modes}
        for rep in range(reps):
            n = int((fio[-1] or 10000) * seconds)
            for mode in (modes if rep % 2 == 0 else modes[::-1]):
                seed += 1
                rows = random_rows(table, n, seed)
                rate = raw_rate(path, table, rows, jobs) if mode == "raw preadv" else \
                    gather_rate(path, table, mode, rows, jobs)[0]
                rates[mode].append(rate)
            fio.append(fio_iops(path, jobs, seconds))
            if fio[-1] is not None and fio[-2] is not None:
                reference = (fio[-2] + fio[-1]) / 2
                for mode in modes:
                    ratios[mode].append(rates[mode][-1] / reference)
        measured = [v for v in fio if v is not None]
        runs = ", ".join(f"{v:,.0f}" for v in measured)
        head = f"{median(measured):,.0f} IOPS (runs: {runs})" if measured else "fio not installed"
        print(f"jobs={jobs}: fio randread 4k direct: {head}")
        for mode in modes:
            ratio = f", {median(ratios[mode]):.2f}x fio (per run: " \
                    + ", ".join(f"{r:.2f}" for r in ratios[mode]) + ")" if ratios[mode] else ""
            what = "O_DIRECT loop" if mode == "raw preadv" else "gather"
            print(f"jobs={jobs}: {mode:10s} {what}: {median(rates[mode]):,.0f} rows/s{ratio}")


def bench_sweep(path: Path, reps: int) -> None:
    for _ in range(reps):
        plain = plain_read(path)
        sweeps = {w: sweep_rate(path, w) for w in (1, 2, 4)}
        print(f"plain sequential read: {plain:,.0f} MB/s; --all direct sweep: "
              + "; ".join(f"workers={w}: {v:,.0f} MB/s = {v / plain:.2f}x" for w, v in sweeps.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.5)
    ap.add_argument("--seconds", type=int, default=2, help="length of each fio run (and of each gather)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions, fio between them; medians are compared")
    ap.add_argument("--dir", type=Path, default=Path(__file__).resolve().parents[1] / "bench-data")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark file")
    ap.add_argument("--table", help="a model: time `rows --all` of its --tensor instead (issue 37)")
    ap.add_argument("--tensor", default="token_embd.weight", help="the table --table sweeps")
    args = ap.parse_args()
    if args.table:
        bench_table(args.table, args.tensor, args.reps)
        return
    args.dir.mkdir(exist_ok=True)
    path = args.dir / "bench-rows.gguf"
    try:
        if not path.exists():
            make_file(path, int(args.size_gb * 1e9))
        table = RowTable(open_model(path).tensor(NAME), path.stat().st_size)
        print(f"file {path}: {path.stat().st_size / 1e9:.2f} GB, {table.n_rows} rows of {ROW_BYTES} bytes; "
              f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        bench_gather(path, table, args.reps, args.seconds)
        bench_sweep(path, args.reps)
    finally:
        if not args.keep and path.exists():
            path.unlink()


if __name__ == "__main__":
    main()
