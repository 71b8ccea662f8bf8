"""ggaudit.scan.run when the file misbehaves: shrinks during a mapped scan (SIGBUS in a worker), a worker
dies, the file changes between opening and scanning, or shrinks under a streamed read."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

from ggaudit.scan import run as scan_module
from ggaudit.scan import workers as workers_module
from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.errors import ReadError
from ggaudit.format.layout import open_model
from ggaudit.scan.run import scan

from scan_support import finite_tensor

needs_fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="patching workers needs fork")


def _model(path: Path, ggml_type: T = T.F32) -> int:
    """Two 1 MiB tensors of float elements (F32) or of quantized blocks (Q8_0)."""
    if ggml_type is T.F32:
        data = np.random.default_rng(0).standard_normal(512 * 512).astype("<f4").tobytes()
        shape = (512, 512)
    else:
        data = bytes(finite_tensor(T.Q8_0, (1024, 964), 0))
        shape = (1024, 964)
    write_gguf(path, [TensorSpec("a", ggml_type, shape, data), TensorSpec("b", ggml_type, shape, data)])
    return path.stat().st_size


@needs_fork
def test_sigbus_in_a_worker_becomes_a_read_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    _model(path, T.Q8_0)
    real = workers_module.scan_pieces

    def shrink_then_scan(task, opts, mm, base):  # type: ignore[no-untyped-def]
        os.truncate(task.path, 4096)             # the window is mapped: touching it now raises SIGBUS
        return real(task, opts, mm, base)

    monkeypatch.setattr(workers_module, "scan_pieces", shrink_then_scan)
    with pytest.raises(ReadError, match="file changed during scan: a reader process was killed"):
        scan(path, workers=2)


def test_a_worker_killed_by_a_signal_becomes_a_read_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    monkeypatch.setattr(workers_module, "TASK_BYTES", 8192)

    def kill_workers(done: int, total: int) -> None:
        for child in multiprocessing.active_children():
            child.kill()    # SIGKILL; TerminateProcess on Windows (a child that already exited is no error)

    with pytest.raises(ReadError, match="file changed during scan"):
        scan(path, workers=2, progress=kill_workers)


@pytest.mark.parametrize("ggml_type", [T.F32, T.Q8_0], ids=["f32", "q8_0"])
def test_file_shrinking_during_a_worker_scan_is_a_read_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             ggml_type: T) -> None:
    path = tmp_path / "m.gguf"
    size = _model(path, ggml_type)
    monkeypatch.setattr(workers_module, "TASK_BYTES", 8192)
    with pytest.raises(ReadError, match="file changed during scan") as err:
        scan(path, workers=2, progress=lambda done, total: os.truncate(path, size // 2))
    assert str(path) in str(err.value)


def test_file_shrinking_during_a_streamed_scan_is_a_read_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    size = _model(path)
    monkeypatch.setattr(scan_module, "STREAM_CHUNK_BYTES", 65536)
    with pytest.raises(ReadError, match="shrank or was replaced"):
        scan(path, workers=0, progress=lambda done, total: os.truncate(path, size // 2))


def test_file_changed_after_opening_is_a_read_error(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    model = open_model(path)
    with open(path, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ReadError, match="file changed since it was opened"):
        scan(model)
