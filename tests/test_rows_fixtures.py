"""`ggaudit rows` on the committed PLE fixtures (IQ4_NL 90-byte and Q8_0 170-byte rows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ggaudit.rows import replay as R
from ggaudit.format.layout import open_model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLE = "per_layer_token_embd.weight"


@pytest.mark.parametrize("name,row_bytes,crossing", [("ple_iq4_nl.gguf", 90, 23), ("ple_q8_0.gguf", 170, 42)])
def test_all_paths_agree_on_the_fixture(name: str, row_bytes: int, crossing: int) -> None:
    path = str(FIXTURES / name)
    swept = R.check_rows(path, select=R.RowSelection(all_rows=True), options=R.RowsOptions(workers=2))
    assert swept.ok and swept.rows_checked == 1024 and swept.row_bytes == row_bytes
    assert swept.geometry.page == crossing
    crossed = R.check_rows(path, select=R.RowSelection(page_crossing=True),
                           options=R.RowsOptions(workers=2, batch=16, cache_rows=8))
    assert crossed.ok and crossed.rows_checked == crossing == crossed.geometry.page
    assert [s.mode for s in crossed.stats] == ["buffered", "mmap", "direct"]
    assert all(s.cache_hits and s.cache_evictions for s in crossed.stats)
    token = R.check_rows(path, tensor="token_embd.weight", modes=["direct"], select=R.RowSelection(all_rows=True))
    assert token.ok and token.n_rows == 256


def test_capture_of_the_clean_fixture_pins_the_flipped_byte(tmp_path: Path) -> None:
    clean = open_model(FIXTURES / "ple_iq4_nl.gguf").tensor(PLE)
    data = (FIXTURES / "ple_iq4_nl.gguf").read_bytes()
    ids = np.arange(90, 111)
    rows = np.stack([np.frombuffer(data[clean.row_offset(r):clean.row_offset(r) + 90], np.uint8) for r in ids])
    np.savez(tmp_path / "engine.npz", ids=ids, rows=rows)
    # fixtures/README.md: row 100, block 3, columns 96 and 112, offset 32768, 3a -> c5.
    report = R.check_rows(str(FIXTURES / "ple_iq4_nl-flip.gguf"), against=str(tmp_path / "engine.npz"))
    (m,) = report.mismatches
    assert (m.row, m.block, m.column, m.offset, m.differing) == (100, 3, 96, 32768, 1)
    assert m.expected.split()[0] == "c5" and m.actual.split()[0] == "3a"
    assert report.capture.mismatched_rows == 1 and report.mismatch_geometry.page == 1


def test_a_table_in_the_second_shard_of_a_split_set() -> None:
    first = str(FIXTURES / "split-00001-of-00002.gguf")
    report = R.check_rows(first, tensor="blk.0.ffn_down.weight", select=R.RowSelection(all_rows=True),
                          options=R.RowsOptions(workers=2))
    assert report.ok and report.file == str(FIXTURES / "split-00002-of-00002.gguf")
    assert (report.n_rows, report.row_bytes, report.table_offset) == (64, 36, 256)
    default = R.check_rows(first, range(256), options=R.RowsOptions(cache_rows=64))
    assert default.ok and default.tensor == "token_embd.weight" and default.file == first
