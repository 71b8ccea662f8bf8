"""For engine developers: an engine's rows already in memory compared with ``check_rows(...,
against=(ids, rows))``, checked as a capture file's are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ggaudit.errors import UsageError
from ggaudit.format.layout import open_model
from ggaudit.rows import replay as R
from ggaudit.rows.gather import BufferPool, RowCache
from ggaudit.evidence.readers import Reader, open_reader
from rows_support import Wrapped
from support import run_cli, write_small_model

ROW = 68            # write_small_model: Q8_0, 64 columns = 2 blocks of 34 bytes
EMB = "token_embd.weight"


def _rows_of(model: Path, ids: list[int]) -> np.ndarray:
    offset, data = open_model(model).tensor(EMB).offset, model.read_bytes()
    return np.stack([np.frombuffer(data[offset + r * ROW:offset + (r + 1) * ROW], np.uint8) for r in ids])


def test_arrays_in_memory_are_a_capture(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    ids = [3, 7, 11]
    rows = _rows_of(model, ids)
    clean = R.check_rows(model, against=(ids, rows), modes=())
    assert clean.ok and (clean.capture.file, clean.capture.kind, clean.capture.rows) == ("(arrays in memory)", "raw", 3)
    rows[1, 40] ^= 0x01
    report = R.check_rows(model, against=(np.array(ids), rows), modes=())
    (m,) = report.mismatches
    offset = open_model(model).tensor(EMB).offset
    assert (m.mode, m.row, m.byte, m.offset, m.differing) == ("capture", 7, 40, offset + 7 * ROW + 40, 1)


def test_arrays_in_memory_are_refused_as_a_file_is(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    rows = _rows_of(model, [3, 7])
    with pytest.raises(UsageError) as short:
        R.check_rows(model, against=([3, 7], rows[:, :60]), modes=())
    assert short.value.field == "rows" and "expected uint8[2, 68] (raw)" in short.value.message
    with pytest.raises(UsageError) as three:
        R.check_rows(model, against=([3, 7], rows, rows), modes=())   # type: ignore[arg-type]
    assert three.value.field == "against" and "not a tuple of 3" in three.value.message


def test_capture_arrays_of_any_names_are_told_apart_by_shape(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    rows = _rows_of(model, [3, 7])
    rows[1, 5] ^= 0x80
    np.savez(tmp_path / "any.npz", gathered=rows, token_ids=np.array([3, 7], np.int32))
    structured = np.zeros(2, dtype=[("tok", "<i8"), ("emb", "u1", (ROW,))])
    structured["tok"], structured["emb"] = [3, 7], rows
    np.save(tmp_path / "any.npy", structured)
    offset = open_model(model).tensor(EMB).offset
    for name in ("any.npz", "any.npy"):
        (m,) = R.check_rows(model, against=str(tmp_path / name), modes=()).mismatches
        assert (m.row, m.byte, m.offset) == (7, 5, offset + 7 * ROW + 5), name
    # Two arrays of the same shape do not say which holds the IDs.
    np.savez(tmp_path / "same.npz", a=np.array([3, 7]), b=np.array([3, 7]))
    with pytest.raises(UsageError, match="told apart by shape"):
        R.check_rows(model, against=str(tmp_path / "same.npz"), modes=())


def test_ids_files_as_json_lists_and_one_column_csv(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    (tmp_path / "ids.json").write_text("[\n  3,\n  7, 11\n]\n")
    (tmp_path / "ids.csv").write_text("3\n7\n11\n")
    (tmp_path / "header.csv").write_text("token_id\n3,7\n11\n")
    (tmp_path / "bad.json").write_text('[\n  3,\n  "x"\n]\n')
    for name in ("ids.json", "ids.csv", "header.csv"):
        result = run_cli(["rows", model, "--ids-file", tmp_path / name, "--modes", "buffered", "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["models"][0]["choice"]["listed"] == [[3, 3], [7, 7], [11, 11]], name
    bad = run_cli(["rows", model, "--ids-file", tmp_path / "bad.json", "--modes", "buffered"])
    assert bad.exit_code == 2 and bad.stderr.startswith("ggaudit: error: ") and "bad.json" in bad.stderr
    assert bad.stderr.endswith(" line 3: '\"x\"' is not a row ID or a range like 4170-4200\n")


def test_capture_arrays_named_by_option(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    rows = _rows_of(model, [3, 7])
    rows[0, 9] ^= 0x04
    # A third array (the engine's logits, say) makes the shapes alone ambiguous: the names decide.
    np.savez(tmp_path / "cap.npz", tok=np.array([3, 7]), emb=rows, extra=np.zeros((2, ROW), np.uint8))
    offset = open_model(model).tensor(EMB).offset
    report = R.check_rows(model, against=str(tmp_path / "cap.npz"), modes=(),
                          options=R.RowsOptions(capture_arrays=("tok", "emb")))
    (m,) = report.mismatches
    assert (m.row, m.byte, m.offset) == (3, 9, offset + 3 * ROW + 9)
    cli = run_cli(["rows", model, "--against", tmp_path / "cap.npz", "--capture-arrays", "tok,emb", "--json"])
    assert cli.exit_code == 1 and json.loads(cli.stdout)["models"][0]["mismatches"][0]["row"] == 3
    with pytest.raises(UsageError) as missing:
        R.check_rows(model, against=str(tmp_path / "cap.npz"), modes=(),
                     options=R.RowsOptions(capture_arrays=("ids", "emb")))
    assert (missing.value.field, missing.value.message) == (
        "capture_arrays", "the capture has no array 'ids' (found 'tok', 'emb', 'extra')")
    usage = run_cli(["rows", model, "--against", tmp_path / "cap.npz", "--capture-arrays", "tok"])
    assert usage.exit_code == 2 and usage.stderr == \
        "ggaudit: error: --capture-arrays: must name the IDs and the rows arrays, as IDS,ROWS\n"


class _Flipped(Wrapped):
    """Delivers every read with its first byte flipped: the gather's first row mismatches."""

    def read_into(self, view: memoryview, offset: int) -> int:
        n = self.inner.read_into(view, offset)
        view[0] ^= 0xFF
        return n


def test_the_stages_say_they_ran_the_callers_cache_and_ring(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")

    def exercised(**factories: Any) -> R.Exercised:
        options = R.RowsOptions(cache_rows=2, prefetch=True, **factories)
        said = R.check_rows(model, [3, 7, 11], modes=("buffered",), options=options).exercised
        assert said is not None
        return said

    stages = ("cache-miss", "cache-hit", "cache-pressure", "prefetch")
    callers = exercised(cache_factory=lambda capacity, table: RowCache(capacity),
                        pool_factory=lambda reader, size: BufferPool(reader, size))
    assert callers == R.Exercised(stages=stages, cache="caller", buffer_ring="caller")
    assert callers.text == "the cache and prefetch stages ran the caller's row cache and buffer ring"
    cache_only = exercised(cache_factory=lambda capacity, table: RowCache(capacity))
    assert (cache_only.cache, cache_only.buffer_ring) == ("caller", "ggaudit")
    assert cache_only.text == ("the cache and prefetch stages ran the caller's row cache and ggaudit's own buffer "
                               "ring (ggaudit's: what a correct one delivers, not the engine's)")
    ring_only = exercised(pool_factory=lambda reader, size: BufferPool(reader, size))
    assert ring_only.to_json()["text"] == (
        "the cache and prefetch stages ran the caller's buffer ring and ggaudit's own row cache (ggaudit's: what a "
        "correct one delivers, not the engine's)")


def test_a_replay_stopped_before_the_cache_stages_says_nothing_of_them(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")

    def flipped(path: str, mode: str) -> Reader:
        return _Flipped(open_reader(path, mode))

    options = R.RowsOptions(cache_rows=2, prefetch=True, fail_fast=True, reader_factory=flipped)
    report = R.check_rows(model, [3, 7], modes=("mmap",), options=options)
    assert [(m.row, m.stage) for m in report.mismatches] == [(3, "gather")] and report.exercised is None
