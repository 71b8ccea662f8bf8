#!/usr/bin/env python3
"""Time ``ggaudit check FILE`` against the least work any check must do, run in the same run.

    python scripts/bench_check.py [MODEL ...] [--big] [--size-gib 2.2] [--rounds 5] [--cache warm,cold,cold-file]
                                  [--keep]

The reference is a plain Python process that reads the same file once per read path and hashes one of the
reads with sha256, the least any check with a published digest must do: buffered reads + sha256, a copy of
every byte out of a read-only mapping, O_DIRECT reads (8 MiB at a time, one thread). Each round runs the
reference and then ``ggaudit check`` twice (the console script, from bytecode, as bench_startup.py does):
with nothing published (``check``) and with the file's sha256 given (``check --sha256``, the case of every
Ollama and Hugging Face model), each in a fresh process, rounds interleaved so a load that comes and goes on
the machine weighs on both alike. Printed per case: the best and the median wall time of the reference and
of check, their ratios (targets, judged on the medians, as bench_startup.py does: at most 1.15x with
nothing published, 1.3x with a published digest), the median CPU seconds (user + system, every thread), and
each process's peak RSS (the kernel's high-water mark of the child, ``ru_maxrss`` from ``wait4``, which is
its VmHWM at exit; it must not grow with the file's size). Then, in this process, check's mmap pass
(``ggaudit.evidence.read_pass`` through the mmap path, its consumers none) against a plain copy of every byte
out of a mapping into a 1 MiB buffer (target: at most 1.3x), the file warm.

Page cache: ``warm`` reads the file before every run; ``cold`` empties the page cache before every run: as
root ``sync; echo 3 > /proc/sys/vm/drop_caches``, else (not permitted) ``posix_fadvise(DONTNEED)`` on the
file, which drops only its pages; the output says which was used. drop_caches drops the programs' code too
(the interpreter's modules, numpy's libraries), so a cold run also reads those from the disk: ``cold-file``
drops only the file's pages (``posix_fadvise(DONTNEED)``), to tell the two costs apart.

With no MODEL: the real Gemma 3 270M Q4_K_M (253 MB; ``scripts/gather_real_models.py`` fetches it into
bench-data/real/). ``--big`` adds a GGUF of --size-gib GiB of real random bytes (finite scales, mixed
Q4_K/Q6_K/Q8_0/F32 tensors, written once under bench-data/, deleted afterwards unless --keep). The exit
status is 1 when a ratio misses the target.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan import _quantized_tensors, _write_model
from bench_startup import ggaudit_command

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "bench-data" / "real" / "gemma-3-270m-q4_k_m.gguf"
BIG = ROOT / "bench-data" / "bench_check.gguf"
#: The targets, as check's median over the reference's: with nothing published, and with a published digest.
TARGETS = {"check": 1.15, "check --sha256": 1.3}
#: check's mmap pass over a plain copy out of the mapping, the file warm.
MMAP_TARGET = 1.3
DROP_CACHES = "/proc/sys/vm/drop_caches"

#: The reference: every byte once per read path, one read hashed with sha256, 8 MiB at a time.
READ_EACH_PATH = """import hashlib, mmap, os, sys
path, chunk = sys.argv[1], 8 << 20
buffer = mmap.mmap(-1, chunk)
view = memoryview(buffer)
sha = hashlib.sha256()
fd = os.open(path, os.O_RDONLY)
while n := os.readv(fd, [buffer]):
    sha.update(view[:n])
os.close(fd)
fd = os.open(path, os.O_RDONLY)
mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
mapped = memoryview(mapping)
for start in range(0, len(mapping), chunk):
    n = min(chunk, len(mapping) - start)
    view[:n] = mapped[start:start + n]
mapped.release()
mapping.close()
os.close(fd)
fd, offset = os.open(path, os.O_RDONLY | os.O_DIRECT), 0
while n := os.preadv(fd, [buffer], offset):
    offset += n
os.close(fd)
"""


@dataclass(frozen=True)
class Run:
    seconds: float
    cpu_seconds: float      # user + system, all threads
    peak_rss_kib: int


def drop_method() -> str:
    """How this process can empty the page cache: "drop_caches" when it may write it, else "fadvise"."""
    try:
        os.sync()
        with open(DROP_CACHES, "w") as f:
            f.write("3\n")
    except OSError:
        return "fadvise"
    return "drop_caches"


def empty_cache(path: Path, method: str) -> None:
    if method == "drop_caches":
        os.sync()
        with open(DROP_CACHES, "w") as f:
            f.write("3\n")
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(8 << 20):
            pass


def run_once(argv: Sequence[str], env: dict[str, str]) -> Run:
    """One run of ``argv`` in a fresh process: its wall and CPU time and peak RSS (``wait4``'s rusage)."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert child.stderr is not None
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)}: exit {child.returncode}: {errors.decode(errors='replace')}")
    return Run(elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)


@dataclass(frozen=True)
class Summary:
    best: float         # wall seconds
    median: float
    cpu_seconds: float  # median
    peak_rss_kib: int   # the most of any run


def bench(path: Path, rounds: int, cache: str, method: str, env: dict[str, str]) -> dict[str, Summary]:
    """The reference's and check's runs over ``rounds`` interleaved rounds, summarized."""
    cases = {"reference": [sys.executable, "-c", READ_EACH_PATH, str(path)],
             "check": [*ggaudit_command(), "check", str(path)],
             "check --sha256": [*ggaudit_command(), "check", str(path), "--sha256", sha256_of(path)]}
    for argv in cases.values():     # one unmeasured run each: bytecode written, the file seen once
        run_once(argv, env)
    runs: dict[str, list[Run]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, argv in cases.items():
            if cache == "cold":
                empty_cache(path, method)
            elif cache == "cold-file":
                empty_cache(path, "fadvise")
            else:
                warm(path)
            runs[name].append(run_once(argv, env))
    return {name: Summary(min(r.seconds for r in each), statistics.median(r.seconds for r in each),
                          statistics.median(r.cpu_seconds for r in each), max(r.peak_rss_kib for r in each))
            for name, each in runs.items()}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def mmap_pass_against_copy(path: Path, rounds: int) -> tuple[float, float]:
    """The best seconds of check's mmap pass over ``path`` (its consumers none) and of a plain copy of every byte
    out of a mapping into a 1 MiB buffer, the file warm, rounds interleaved."""
    from ggaudit.evidence.read_pass import read_pass
    from ggaudit.evidence.readers import open_reader

    def plain_copy() -> None:
        chunk = 1 << 20
        buffer = mmap.mmap(-1, chunk)
        with (open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapping,
              memoryview(mapping) as mapped, memoryview(buffer) as view):
            for start in range(0, len(mapping), chunk):
                n = min(chunk, len(mapping) - start)
                view[:n] = mapped[start:start + n]
        buffer.close()

    def mmap_pass() -> None:
        with open_reader(str(path), "mmap") as reader:
            read_pass(reader, [])

    best = {"pass": float("inf"), "copy": float("inf")}
    warm(path)
    for _ in range(rounds):
        for name, run in (("pass", mmap_pass), ("copy", plain_copy)):
            started = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - started)
    return best["pass"], best["copy"]


def make_big(path: Path, size_gib: float) -> None:
    if path.exists() and abs(path.stat().st_size - size_gib * 2**30) < 2**28:
        return
    tensors = list(_quantized_tensors(int(size_gib * 2**30)))
    print(f"writing {path} ({size_gib:g} GiB, {len(tensors)} tensors) ...", flush=True)
    _write_model(path, tensors)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--big", action="store_true", help="add a written GGUF of --size-gib GiB")
    parser.add_argument("--size-gib", type=float, default=2.2)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (the median is shown)")
    parser.add_argument("--cache", default="warm,cold,cold-file",
                        help="page cache states, comma-separated: warm, cold, cold-file (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help=f"keep {BIG.relative_to(ROOT)} afterwards")
    args = parser.parse_args()
    models = list(args.models) or [MODEL]
    for model in models:
        if not model.is_file():
            raise SystemExit(f"{model}: not found; scripts/gather_real_models.py fetches the real models")
    if args.big:
        BIG.parent.mkdir(exist_ok=True)
        make_big(BIG, args.size_gib)
        models.append(BIG)
    method = drop_method() if "cold" in args.cache.split(",") else "none"
    missed = []
    print(f"ggaudit is {' '.join(ggaudit_command())}; cpus: {os.cpu_count()}; cold cache by: {method}; "
          f"{args.rounds} interleaved rounds; targets (medians, over the reference): "
          f"{', '.join(f'{case} <= {target:g}x' for case, target in TARGETS.items())}; "
          f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'file':34s} {'cache':9s} {'case':14s} {'reference s':>15s} {'check s':>15s} {'ratio':>13s} "
          f"{'cpu s':>11s} {'RSS MiB':>9s}")
    print(f"{'':34s} {'':9s} {'':14s} {'best median':>15s} {'best median':>15s} {'best median':>13s} "
          f"{'ref check':>11s} {'ref check':>9s}")
    try:
        with tempfile.TemporaryDirectory(prefix="ggaudit-bench-pyc-") as pycache:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env["PYTHONPYCACHEPREFIX"] = pycache
            for model in models:
                name = f"{model.name} ({model.stat().st_size / 1e9:.2f} GB)"
                for cache in args.cache.split(","):
                    found = bench(model, args.rounds, cache, method, env)
                    ref = found["reference"]
                    for case, target in TARGETS.items():
                        chk = found[case]
                        ratio = chk.median / ref.median
                        verdict = "ok" if ratio <= target else f"MISSES the {target:g}x target"
                        if ratio > target:
                            missed.append(f"{model.name} {cache} {case}")
                        print(f"{name:34s} {cache:9s} {case:14s} {ref.best:7.3f} {ref.median:7.3f} {chk.best:7.3f} "
                              f"{chk.median:7.3f} {chk.best / ref.best:5.2f}x {ratio:5.2f}x  {ref.cpu_seconds:5.2f} "
                              f"{chk.cpu_seconds:5.2f} {ref.peak_rss_kib / 1024:4.0f} {chk.peak_rss_kib / 1024:4.0f}  "
                              f"{verdict}", flush=True)
            # After every process's run: this process maps each file whole, and a child forked from it counts the
            # pages it then holds in its own peak RSS (the kernel keeps the high-water mark across exec).
            for model in models:
                in_pass, copy = mmap_pass_against_copy(model, args.rounds)
                ratio = in_pass / copy
                if ratio > MMAP_TARGET:
                    missed.append(f"{model.name} mmap pass")
                print(f"{f'{model.name} ({model.stat().st_size / 1e9:.2f} GB)':34s} {'warm':9s} {'mmap pass':14s} "
                      f"copy {copy:7.3f} pass {in_pass:7.3f} {ratio:5.2f}x (best)  "
                      + ("ok" if ratio <= MMAP_TARGET else f"MISSES the {MMAP_TARGET:g}x target"), flush=True)
    finally:
        if args.big and not args.keep:
            with contextlib.suppress(FileNotFoundError):
                BIG.unlink()
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
