#!/usr/bin/env python3
"""Benchmark scans on Dask (ggaudit.fleet) against the single-process scan of the same files.

    python scripts/bench_fleet.py [MODEL ...] [--models 4] [--size-mib 256] [--task-mib 64] [--repeat 3]

With no MODEL it writes --models models of --size-mib MiB of mixed Q4_K/Q6_K/Q8_0/F32 tensors (real random
bytes, finite scales) in a temporary directory. Each configuration scans every model, from a hot page
cache, interleaved --repeat times; the best time counts. Configurations: ``scan(workers=0)`` model after
model in this process (the reference), then a LocalCluster of 1 and of 2 worker processes (one thread
each) running :func:`ggaudit.fleet.scan_on` with tasks of --task-mib. Printed: GB/s, the ratio to the
reference, tasks run and the overhead per task (the cluster's time minus the reference's time spread
over its workers, divided by the tasks each worker ran). Needs ``pip install 'ggaudit[dask]'``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from distributed import Client, LocalCluster

from bench_scan import _quantized_tensors, _write_model
from ggaudit.fleet import scan_on
from ggaudit.format.layout import open_model
from ggaudit.scan.run import scan
from ggaudit.scan.workers import make_tasks
from ggaudit.scan.run import make_plans


def _best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _tasks(paths: Sequence[str], task_bytes: int) -> int:
    n = 0
    for path in paths:
        m = open_model(path)
        plans, _ = make_plans(list(m.tensors), set(), False)
        n += sum(1 for _ in make_tasks(plans, {f.path: f.identity for f in m.files}, task_bytes))
    return n


def _ok(outcomes: Sequence[object]) -> None:
    assert all(getattr(o, "error", None) is None for o in outcomes), outcomes


def bench(paths: list[str], task_bytes: int, repeat: int) -> None:
    nbytes = sum(Path(p).stat().st_size for p in paths)
    for p in paths:                      # the page cache, hot for every configuration
        Path(p).read_bytes()
    tasks = _tasks(paths, task_bytes)
    local = _best(lambda: [scan(p, workers=0) for p in paths], repeat)
    print(f"{len(paths)} models, {nbytes / 1e9:.2f} GB, {tasks} tasks of {task_bytes >> 20} MiB")
    print(f"single process  {nbytes / local / 1e9:6.2f} GB/s  {local:7.3f} s")
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                          silence_logs=50) as cluster, Client(cluster) as client:
            _ok(scan_on(client, paths[:1], task_bytes=task_bytes))     # workers import ggaudit once
            took = _best(lambda c=client: _ok(scan_on(c, paths, task_bytes=task_bytes)), repeat)
        per_task = (took - local / workers) / (tasks / workers)
        print(f"dask {workers} worker{'s' if workers > 1 else ' '}  {nbytes / took / 1e9:6.2f} GB/s  {took:7.3f} s  "
              f"{local / took:5.2f}x single  overhead {per_task * 1e3:6.2f} ms/task")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--models", dest="count", type=int, default=4)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--task-mib", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if args.models:
        bench(args.models, args.task_mib << 20, args.repeat)
        return 0
    with tempfile.TemporaryDirectory(prefix="ggaudit-bench-fleet-") as tmp:
        paths = []
        for i in range(args.count):
            path = Path(tmp) / f"model-{i}.gguf"
            _write_model(path, list(_quantized_tensors(args.size_mib << 20)))
            paths.append(str(path))
        bench(paths, args.task_mib << 20, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
