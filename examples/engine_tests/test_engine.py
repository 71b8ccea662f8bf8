"""An engine's tests of the model files it loads, written from docs/engine-tests.md alone: the model holds
nothing non-finite and a token for each embedding row, the rows the engine gathers arrive intact through the
engine's own reader, the file is the one its manifest was made of, and a broken or missing file fails with an
exception the engine catches. The checks that pass on a sound model are shown failing too, on a model with the
fault planted (a NaN, a reader one row off, a flipped bit), so that none of them passes by default."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import ggaudit

N_VOCAB, N_EMBD = 512, 64                # token_embd.weight: 512 rows of 64 F16 values, 128 bytes a row
PROMPT = [0, 1, 2, 17, 255, 17, 256, 511]   # the token IDs the engine gathers for a prompt (17 twice)


class EngineReader(ggaudit.Reader):
    """The engine's own positioned reads (seek, then readinto) as the buffered read path."""

    mode = "buffered"
    skew = 0                             # bytes the engine's offset arithmetic is off by

    def __init__(self, path: str) -> None:
        super().__init__(path, os.path.getsize(path))
        self.file = open(path, "rb")  # noqa: SIM115 (the reader's file, open until close())
        self.lock = threading.Lock()

    def read_into(self, view: memoryview, offset: int) -> int:
        with self.lock:
            self.file.seek(offset + self.skew)
            return self.file.readinto(view) or 0

    def close(self) -> None:
        self.file.close()


class OneRowOffReader(EngineReader):
    """An engine bug: every read lands one row further into the file."""

    skew = N_EMBD * 2


def write_model(path: Path, *, nan_at: tuple[int, int] | None = None) -> Path:
    """A model whose token table holds seeded values, a token for each row; with ``nan_at`` (row, column), a NaN
    there."""
    table = np.random.default_rng(7).standard_normal((N_VOCAB, N_EMBD)).astype(np.float16)
    if nan_at is not None:
        table[nan_at] = np.nan
    spec = ggaudit.TensorSpec("token_embd.weight", ggaudit.GGMLQuantizationType.F16, (N_EMBD, N_VOCAB),
                              table.tobytes())
    vocabulary = [f"<t{i}>" for i in range(N_VOCAB)]
    ggaudit.write_gguf(path, [spec], {"general.architecture": "llama", "tokenizer.ggml.model": "llama",
                                      "tokenizer.ggml.tokens": vocabulary})
    return path


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_model(tmp_path / "model.gguf")


def test_the_model_holds_nothing_non_finite(model: Path) -> None:
    report = ggaudit.scan(model, deep=True)
    assert report.ok, report.summary().lines
    assert report.counts == {"nan": 0, "+inf": 0, "-inf": 0, "outlier": 0}


def test_a_nan_in_the_model_is_found_at_its_row_and_column(tmp_path: Path) -> None:
    report = ggaudit.scan(write_model(tmp_path / "nan.gguf", nan_at=(300, 5)))
    found = [(f.kind, f.tensor, f.row, f.column) for t in report.tensors for f in t.findings]
    assert not report.ok and found == [("nan", "token_embd.weight", 300, 5)]


def test_the_vocabulary_has_one_embedding_row_per_token(model: Path) -> None:
    opened = ggaudit.open_model(model)
    tokens = opened.metadata_values["tokenizer.ggml.tokens"]
    assert len(tokens) == opened.tensor("token_embd.weight").shape[1] == N_VOCAB and tokens[17] == "<t17>"


def rows_through(reader: type[EngineReader], model: Path) -> ggaudit.RowsReport:
    """The prompt's rows gathered, cached and prefetched through ``reader`` as the buffered read path."""
    def engine_reader(path: str, mode: str) -> ggaudit.Reader:    # a ggaudit.ReaderFactory: every mode asked
        return reader(path)

    options = ggaudit.RowsOptions(reader_factory=engine_reader, cache_rows=4, prefetch=True)
    return ggaudit.check_rows(model, PROMPT, modes=("buffered",), options=options)


def test_the_rows_the_engine_gathers_arrive_intact_through_its_reader(model: Path) -> None:
    report = rows_through(EngineReader, model)
    assert report.ok and report.mismatches == () and report.given_ids is not None
    assert (report.given_ids.count, report.rows_checked, report.given_ids.repeated) == (8, 7, (17,))


def test_a_reader_one_row_off_delivers_the_next_rows_bytes(model: Path) -> None:
    report = rows_through(OneRowOffReader, model)
    row_17 = [m for m in report.mismatches if m.row == 17 and m.stage == "gather"]
    assert not report.ok and [(m.mode, m.kind, m.other_row) for m in row_17] == [("buffered", "misplaced", 18)]


def test_the_file_is_the_one_its_manifest_was_made_of(model: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "model.manifest.json"
    ggaudit.write_manifest(ggaudit.build_manifest(model), manifest)
    assert ggaudit.verify(model, manifest=manifest).ok
    data = bytearray(model.read_bytes())
    data[ggaudit.open_model(model).tensor("token_embd.weight").row_offset(17) + 3] ^= 0x40   # one bit of row 17
    model.write_bytes(data)
    report = ggaudit.verify(model, manifest=manifest)
    assert not report.ok
    assert [(m.kind, m.tensor) for m in report.mismatches] == [("sha256", None), ("tensor-data", "token_embd.weight")]


def test_a_truncated_download_is_a_format_error_naming_the_tensor_cut_short(model: Path) -> None:
    model.write_bytes(model.read_bytes()[:-1000])
    with pytest.raises(ggaudit.FormatError) as raised:
        ggaudit.scan(model)
    assert raised.value.path == str(model) and raised.value.field == "tensor[token_embd.weight].offset"


def test_a_wrong_path_is_a_file_not_found_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model.gguf"
    with pytest.raises(FileNotFoundError) as raised:
        ggaudit.open_model(missing)
    assert raised.value.errno == errno.ENOENT and raised.value.filename == str(missing)
    assert isinstance(raised.value, ggaudit.ReadError)


def test_a_missing_manifest_is_a_file_not_found_error(model: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ggaudit.verify(model, manifest=tmp_path / "no-such.manifest.json")
