"""Issue 15: reader processes only where they pay, and one pool for a run of several scans."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.io import processes
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.scan import run as scan_module
from ggaudit.scan import workers as workers_module
from ggaudit.scan.run import AUTO_WORKERS_MIN_BYTES, scan
from ggaudit.scan.workers import reader_pool
from support import assert_one_line_error, run_cli


def _model(path: Path, nan_at: int) -> Path:
    """One F16 tensor of 64 x 32 elements with a NaN at element ``nan_at``."""
    data = np.ones(64 * 32, np.float16)
    data[nan_at] = np.float16("nan")
    write_gguf(path, [TensorSpec("w", T.F16, (64, 32), data.view(np.uint8).tobytes())])
    return path


def _worker_pids() -> set[int]:
    shared = workers_module._SHARED.get()
    assert shared is not None and shared.pool is not None
    return set(shared.pool._processes)       # the executor's own table of its workers


def test_scans_in_a_reader_pool_share_its_workers_and_find_the_same(tmp_path: Path) -> None:
    a, b = _model(tmp_path / "a.gguf", 70), _model(tmp_path / "b.gguf", 1000)
    alone = [scan(p, workers=2).tensors for p in (a, b)]
    with reader_pool():
        first = scan(a, workers=2)
        pids = _worker_pids()
        second = scan(b, workers=2)
        assert _worker_pids() == pids and len(pids) >= 1
    assert [first.tensors, second.tensors] == alone
    assert [(f.row, f.column) for f in second.tensors[0].findings] == [(1000 // 64, 1000 % 64)]
    assert multiprocessing.active_children() == []


def test_a_failure_in_a_reader_pool_leaves_no_worker(tmp_path: Path) -> None:
    a = _model(tmp_path / "a.gguf", 70)
    with pytest.raises(ZeroDivisionError), reader_pool():
        scan(a, workers=2)
        pids = _worker_pids()
        1 / 0  # noqa: B018 (the block ends in an exception)
    assert multiprocessing.active_children() == []
    if os.name != "nt":         # no process by those ids any more (killed, and reaped)
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


def test_without_a_reader_pool_a_scan_leaves_no_worker(tmp_path: Path) -> None:
    scan(_model(tmp_path / "a.gguf", 70), workers=2)
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize(("total", "cores", "expected"), [
    (AUTO_WORKERS_MIN_BYTES - 1, 8, 0),       # small: starting workers costs more than they save
    (AUTO_WORKERS_MIN_BYTES, 1, 0),           # one core: a worker only adds a process
    (AUTO_WORKERS_MIN_BYTES, 2, 2),
    (AUTO_WORKERS_MIN_BYTES * 40, 64, 2),
])
def test_workers_are_picked_from_the_size_and_the_cores_available(monkeypatch: pytest.MonkeyPatch, total: int,
                                                                  cores: int, expected: int) -> None:
    monkeypatch.setattr(processes, "available_cores", lambda: cores)
    assert scan_module._workers(None, total) == expected
    assert scan_module._workers(1, total) == 1       # asked for: as asked


def test_available_cores_is_this_process_affinity() -> None:
    affinity = getattr(os, "sched_getaffinity", None)
    expected = len(affinity(0)) if affinity is not None else os.cpu_count()
    assert processes.available_cores() == expected


def test_cli_workers_scan_several_models_alike(tmp_path: Path) -> None:
    a, b = str(_model(tmp_path / "a.gguf", 70)), str(_model(tmp_path / "b.gguf", 1000))
    pooled = run_cli(["scan", a, b, "--workers", "2", "--json"])
    in_process = run_cli(["scan", a, b, "--workers", "0", "--json"])
    assert pooled.exit_code == in_process.exit_code == 1
    docs = [json.loads(r.stdout)["models"] for r in (pooled, in_process)]
    assert [m["stats"]["workers"] for m in docs[0]] == [2, 2]
    assert [m["stats"]["workers"] for m in docs[1]] == [0, 0]
    for doc in docs:
        for m in doc:
            m.pop("stats")
    assert docs[0] == docs[1]


def test_cli_workers_are_not_for_jobs(tmp_path: Path) -> None:
    a = str(_model(tmp_path / "a.gguf", 70))
    assert_one_line_error(run_cli(["scan", a, a, "--jobs", "2", "--workers", "2"]),
                          "--jobs N reads each model in its own thread: not with --workers")
