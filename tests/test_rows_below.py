"""`ggaudit rows` right about the cause when the fault is below it (issue 26): the fault layer
(tests/faultlayer.c) preloaded under `python -m ggaudit rows` corrupts one read path of one model file
while the file on disk stays intact; then the classifier and the per-row decision with plain bytes.

The model is fixtures/ple_q8_0.gguf, copied: per_layer_token_embd.weight is Q8_0 (ggml's block_q8_0 in
ggml/src/ggml-common.h: `ggml_half d; int8_t qs[QK8_0];`, 34 bytes), 1024 rows of 170 bytes at offset
23712, so byte k of block b (k >= 2) holds column 32 * b + k - 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ggaudit.format.layout import open_model
from ggaudit.rows.classify import Classifier, Filled, RawRow
from ggaudit.rows.gather import Sample
from ggaudit.evidence.readers import POISON, SECTOR, BufferedReader, open_reader
from ggaudit.rows.table import RowTable
from ggaudit.rows.row_decision import AGREEMENT, BUFFERED, MANIFEST, decide_row
from ggaudit.verify.manifests.tensor import build_tensor_manifest, write_tensor_manifest
from fault_support import faulted_env, hexed, picked, rows, run_python
from gguf import GGMLQuantizationType as T
from platforms import needs_linux
from rows_support import make_table

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ple_q8_0.gguf"
PLE = "per_layer_token_embd.weight"
ROW, BLOCK, K, MASK = 100, 1, 6, 0x10
RB, BASE = 170, 23712


def at(row: int, byte: int = 0) -> int:
    return BASE + row * RB + byte


@pytest.fixture
def model(ddir: Path) -> Path:
    target = ddir / "model.gguf"
    shutil.copyfile(FIXTURE, target)
    return target


# --- item 1: the right bytes by evidence, not the buffered read --------------------------------------------

@needs_linux
def test_buffered_stack_wrong_blames_buffered_and_the_reference_read_not_the_paths_that_agree(model: Path) -> None:
    data, flip = model.read_bytes(), at(ROW, BLOCK * 34 + K)
    bad = bytearray(data)
    bad[flip] ^= MASK
    env = faulted_env(model, "buffered", "flip", offset=flip, mask=MASK)
    code, report = rows(model, env, "--ids", "99-101", "--modes", "buffered,mmap,direct")
    assert (code, report["mismatch_count"], report["nonfinite_rows"]) == (1, 2, 0)
    assert [picked(m, "mode", "stage", "row", "offset", "column", "reference", "expected", "actual")
            for m in report["mismatches"]] == [
        (mode, stage, ROW, flip, 32 * BLOCK + K - 2, AGREEMENT, hexed(data, flip), hexed(bad, flip))
        for mode, stage in (("buffered", "gather"), ("buffered", "reference"))]
    assert report["mismatches"][0]["delivered"] == [
        {"paths": ["reference", "buffered"], "bytes": hexed(bad, flip), "right": False},
        {"paths": ["mmap", "direct"], "bytes": hexed(data, flip), "right": True}]
    assert "the reference read is the odd one: mmap and direct delivered" in report["mismatches"][0]["detail"]


@needs_linux
def test_a_reference_read_wrong_once_is_the_odd_one_not_the_paths_that_delivered_the_row(ddir: Path) -> None:
    """The buffered stack flips a bit of the first read of row 7000 only: the reference read, made before the
    buffered gather (the table is larger than the 1 MiB the header parse reads, so the replay's read of the
    row is the first). The reference is read again for mmap and direct, right: every path delivered the
    file's bytes, and the one read that erred is named, with the file's bytes expected."""
    table = make_table(ddir, T.Q8_0, 160, 8000)
    row = 7000
    flip = table.offset(row) + BLOCK * 34 + K
    good = table.row(row)
    bad = bytearray(good)
    bad[BLOCK * 34 + K] ^= MASK
    env = faulted_env(table.path, "buffered", "flip", offset=flip, mask=MASK, times="once")
    code, report = rows(table.path, env, "--ids", f"{row - 1}-{row + 1}", "--modes", "buffered,mmap,direct")
    [m] = report["mismatches"]
    assert (code, picked(m, "kind", "mode", "stage", "row", "offset", "column", "reference", "expected", "actual")) == (
        1, ("garbage", "buffered", "reference", row, flip, 32 * BLOCK + K - 2, AGREEMENT,
            hexed(good, BLOCK * 34 + K), hexed(bad, BLOCK * 34 + K)))
    assert m["delivered"] == [{"paths": ["reference"], "bytes": hexed(bad, BLOCK * 34 + K), "right": False},
                              {"paths": ["buffered", "mmap", "direct"], "bytes": hexed(good, BLOCK * 34 + K),
                               "right": True}]
    assert m["detail"].endswith("the reference read is the odd one: buffered, mmap and direct delivered the row's "
                                "bytes (decided by agreement)")


@needs_linux
def test_a_buffered_stack_wrong_twice_is_found_and_not_passed_for_clean(ddir: Path) -> None:
    """The reference read and the buffered path's own read of row 7000 are both flipped, and agree; the later
    reads are right. Every path is compared with the row's one first reference read, so mmap and direct
    differ from it, agree with each other, and the buffered path is the one that erred (it passed for clean
    while each path was compared with a reference read of its own)."""
    table = make_table(ddir, T.Q8_0, 160, 8000)
    row, k = 7000, BLOCK * 34 + K
    flip, good = table.offset(row) + k, table.row(row)
    bad = bytearray(good)
    bad[k] ^= MASK
    env = faulted_env(table.path, "buffered", "flip", offset=flip, mask=MASK, times=2)
    code, report = rows(table.path, env, "--ids", f"{row - 1}-{row + 1}", "--modes", "buffered,mmap,direct")
    assert (code, report["ok"], report["unstable_count"]) == (1, False, 0)
    assert [picked(m, "mode", "stage", "row", "offset", "reference", "expected", "actual")
            for m in report["mismatches"]] == [
        ("buffered", stage, row, flip, AGREEMENT, hexed(good, k), hexed(bad, k)) for stage in ("gather", "reference")]
    assert report["mismatches"][0]["delivered"] == [
        {"paths": ["reference", "buffered"], "bytes": hexed(bad, k), "right": False},
        {"paths": ["mmap", "direct"], "bytes": hexed(good, k), "right": True}]


@needs_linux
def test_a_sweep_whose_reference_chunk_differs_from_the_first_paths_is_not_clean(ddir: Path) -> None:
    """`--all`: the buffered sweep's read of the chunk holding row 7000 and its reference read are both flipped
    and agree; mmap's and direct's reference reads are right. A sweep keeps no bytes, but each chunk's
    reference digest: the later ones differ from the first, an `unstable-read` of the chunk's rows."""
    import xxhash

    table = make_table(ddir, T.Q8_0, 160, 8000)
    row, k = 7000, BLOCK * 34 + K
    env = faulted_env(table.path, "buffered", "flip", offset=table.offset(row) + k, mask=MASK, times=2)
    code, report = rows(table.path, env, "--all", "--modes", "buffered,mmap,direct")
    assert (code, report["ok"], report["mismatch_count"], report["unstable_count"]) == (1, False, 0, 1)
    [u] = report["unstable"]
    assert u["row"] <= row < u["row"] + u["rows"]
    rb = table.tensor.row_bytes
    good = table.data[u["row"] * rb:(u["row"] + u["rows"]) * rb]
    bad = bytearray(good)
    bad[(row - u["row"]) * rb + k] ^= MASK
    assert (u["first"], u["later"]) == (f"{xxhash.xxh3_64_intdigest(bytes(bad)):016x}",
                                        f"{xxhash.xxh3_64_intdigest(good):016x}")


@needs_linux
def test_past_the_bytes_kept_a_reference_read_that_differs_from_the_first_is_said(ddir: Path) -> None:
    """With no first reads kept whole (KEPT_BYTES 0: a selection too large to keep), a later reference read of
    row 7000 that differs from its first is an `unstable-read` finding, with both reads' digests."""
    import xxhash

    table = make_table(ddir, T.Q8_0, 160, 8000)
    row, k = 7000, BLOCK * 34 + K
    good = table.row(row)
    bad = bytearray(good)
    bad[k] ^= MASK
    env = faulted_env(table.path, "buffered", "flip", offset=table.offset(row) + k, mask=MASK, times=2)
    child = ("import sys; import ggaudit.rows.reference_reads as first; first.KEPT_BYTES = 0; "
             "from ggaudit.cli import main; "
             "sys.argv = ['ggaudit'] + sys.argv[1:]; main()")
    done = run_python(["-c", child, "rows", table.path, "--json", "--ids", f"{row - 1}-{row + 1}",
                       "--modes", "buffered,mmap,direct"], env)
    report = json.loads(done.stdout)["models"][0]
    assert (done.code, report["ok"], report["delivered"], report["mismatch_count"]) == (1, False, False, 0)
    assert (report["unstable_count"], report["unstable"]) == (1, [
        {"row": row, "rows": 1, "first": f"{xxhash.xxh3_64_intdigest(bytes(bad)):016x}",
         "later": f"{xxhash.xxh3_64_intdigest(good):016x}"}])
    text = run_python(["-c", child, "rows", table.path, "--ids", f"{row - 1}-{row + 1}"], env).stdout
    assert f"unstable read: buffered (reference) file {table.path}, offset {table.offset(row)}" in text
    assert text.splitlines()[-1].startswith("result: 0 mismatches (none), 0 short reads, 1 unstable read;")


@needs_linux
def test_page_cache_against_direct_with_nothing_to_decide_gives_both_explanations(model: Path) -> None:
    data, flip = model.read_bytes(), at(ROW, BLOCK * 34 + K)
    env = faulted_env(model, "pagecache", "flip", offset=flip, mask=MASK)
    code, report = rows(model, env, "--ids", "100", "--modes", "buffered,mmap,direct")
    [m] = report["mismatches"]
    assert (code, m["mode"], m["stage"], m["reference"], m["offset"]) == (1, "direct", "gather", BUFFERED, flip)
    assert [(d["paths"], d["right"]) for d in m["delivered"]] == [(["reference", "buffered", "mmap"], None),
                                                                 (["direct"], None)]
    assert "either the page cache holds other bytes than the disk" in m["detail"]
    assert "or direct reads are wrong on this machine" in m["detail"]
    assert m["detail"].endswith("or direct reads are wrong on this machine")   # what decides: the next step
    assert m["actual"] == hexed(data, flip)      # direct delivered the file's bytes; nothing could say so


@needs_linux
def test_a_manifest_decides_the_page_cache_is_wrong(model: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "m.json"
    write_tensor_manifest(build_tensor_manifest(str(FIXTURE)), manifest)    # made where the model is intact
    data, flip = model.read_bytes(), at(ROW, BLOCK * 34 + K)
    env = faulted_env(model, "pagecache", "flip", offset=flip, mask=MASK)
    code, report = rows(model, env, "--ids", "100", "--modes", "buffered,mmap,direct", "--manifest", str(manifest))
    assert code == 1
    assert [picked(m, "mode", "stage", "reference", "expected") for m in report["mismatches"]] == [
        (mode, stage, MANIFEST, hexed(data, flip))
        for mode, stage in (("buffered", "gather"), ("mmap", "gather"), ("buffered", "reference"))]
    assert [(d["paths"], d["right"]) for d in report["mismatches"][0]["delivered"]] == [
        (["reference", "buffered", "mmap"], False), (["direct"], True)]


# --- item 2: a filled sector is not a short read ------------------------------------------------------------

@needs_linux
def test_a_sector_filled_below_the_read_is_filled_with_its_byte_and_sectors(model: Path) -> None:
    sector, byte = 80 * SECTOR, 0xFF    # 40960: bytes 78.. of row 101, all of rows 102 and 103, bytes ..79 of 104
    env = faulted_env(model, "direct", "fill", offset=sector, length=SECTOR, byte=byte)
    code, report = rows(model, env, "--ids", "101-104", "--modes", "direct")
    assert (code, report["short_read_count"], report["by_kind"]) == (1, 0, {"filled": 4})
    assert [picked(m, "row", "filled") for m in report["mismatches"]] == [
        (101, {"byte": byte, "offset": sector, "length": at(102) - sector, "sectors": [80, 80]}),
        (102, {"byte": byte, "offset": at(102), "length": RB, "sectors": [80, 80]}),
        (103, {"byte": byte, "offset": at(103), "length": RB, "sectors": [80, 80]}),
        (104, {"byte": byte, "offset": at(104), "length": sector + SECTOR - at(104), "sectors": [80, 80]})]


def test_the_classifier_tells_filled_sectors_from_poison_and_from_a_flip() -> None:
    t = open_model(FIXTURE).tensor(PLE)
    table = RowTable(t, FIXTURE.stat().st_size)
    want = FIXTURE.read_bytes()[at(102):at(103)]
    assert RawRow(table, 102, want, bytes(RB)).filled() == Filled(0, at(102), RB)
    assert RawRow(table, 102, want, b"\xff" * RB).filled() == Filled(0xFF, at(102), RB)
    assert RawRow(table, 102, want, bytes([POISON]) * RB).filled() is None   # poison: the read never landed
    one = bytearray(want)
    one[7] = 0 if want[7] else 1
    assert RawRow(table, 102, want, bytes(one)).filled() is None             # one byte changed, not a sector
    # row 101 crosses into sector 80 at its byte 78: zeros from there to its end fill that sector's part
    want101 = FIXTURE.read_bytes()[at(101):at(102)]
    tail = want101[:78] + bytes(RB - 78)
    assert RawRow(table, 101, want101, tail).filled() == Filled(0, 80 * SECTOR, RB - 78)
    assert RawRow(table, 101, want101, want101[:79] + bytes(RB - 79)).filled() is None  # starts mid-sector


def test_a_few_differing_bytes_are_spelled_out_bit_by_bit() -> None:
    """Words about values (item 6): a flipped bit reads as one, not as bytes from nowhere."""
    t = open_model(FIXTURE).tensor(PLE)
    table = RowTable(t, FIXTURE.stat().st_size)
    want = FIXTURE.read_bytes()[at(ROW):at(ROW + 1)]
    one, four, five = bytearray(want), bytearray(want), bytearray(want)
    one[40] ^= 0x10
    for i, mask in zip((3, 40, 41, 169), (0x01, 0x10, 0x81, 0xFF), strict=True):
        four[i] ^= mask
        five[i] ^= mask
    five[100] ^= 0x02
    assert RawRow(table, ROW, want, bytes(one)).flips() == "byte 40 xor 0x10 (1 bit flipped)"
    assert RawRow(table, ROW, want, bytes(four)).flips() == \
        "byte 3 xor 0x01, byte 40 xor 0x10, byte 41 xor 0x81, byte 169 xor 0xff (12 bits flipped)"
    assert RawRow(table, ROW, want, bytes(five)).flips() == ""           # more than 4 bytes: the hex says it
    assert RawRow(table, ROW, want, want[:-1]).flips() == ""
    with BufferedReader(str(FIXTURE)) as reference:
        m = Classifier(table, reference).mismatch(Sample(ROW, bytes(one)), want, "direct", "gather")
    assert (m.kind, m.detail) == ("garbage", "bytes found nowhere near the row: byte 40 xor 0x10 (1 bit flipped)")


# --- item 3: the cache blamed only for what it changed ----------------------------------------------------

@needs_linux
def test_a_hit_returning_what_a_wrong_miss_stored_inherits_the_misses_verdict(model: Path) -> None:
    env = faulted_env(model, "direct", "shift", offset=at(ROW), length=RB, shift=RB)   # row 101's bytes
    code, report = rows(model, env, "--ids", "99-101", "--modes", "direct", "--cache-rows", "16")
    found = {(m["stage"], m["kind"], m["other_row"]) for m in report["mismatches"]}
    assert (code, found) == (1, {(s, "misplaced", ROW + 1) for s in ("gather", "cache-miss", "cache-hit",
                                                                     "cache-pressure")})
    [hit] = [m for m in report["mismatches"] if m["stage"] == "cache-hit"]
    assert hit["detail"].startswith(f"cached from a wrong read (cache-miss, misplaced): the bytes of row {ROW + 1};")


# --- item 4: far offsets named -----------------------------------------------------------------------------

@needs_linux
def test_a_row_from_400_rows_away_is_misplaced_and_named(model: Path) -> None:
    env = faulted_env(model, "direct", "shift", offset=at(ROW), length=RB, shift=400 * RB)   # 68000 > 64 KiB
    code, report = rows(model, env, "--ids", "100", "--modes", "direct")
    [m] = report["mismatches"]
    assert (code, m["kind"], m["other_row"], m["other_offset"]) == (1, "misplaced", ROW + 400, at(ROW + 400))
    assert m["detail"].startswith(f"the bytes of row {ROW + 400}, 400 rows ({400 * RB} bytes) away: a wrong base or "
                                  "an overflowing index; nothing decides which bytes are the file's: either the page "
                                  "cache holds other bytes than the disk")    # what settling said stays


@needs_linux
def test_the_alignment_probes_buffer_delivered_again_is_named_as_a_previous_request(model: Path) -> None:
    with open_reader(str(model), "direct") as reader:
        align = reader.alignment.offset
    inside = at(ROW) % align          # the row's place in its aligned span, hence in the probe's buffer
    assert inside + RB <= align
    env = faulted_env(model, "direct", "stale", offset=at(ROW), times="once")
    code, report = rows(model, env, "--ids", "100", "--modes", "direct")
    [m] = report["mismatches"]
    assert (code, m["kind"], m["other_offset"]) == (1, "stale", inside)
    assert "alignment probe" in m["detail"] and "a previous request's buffer" in m["detail"]


# --- the decision with plain bytes ------------------------------------------------------------------------

A, B = b"right bytes", b"wrong bytes"


@pytest.mark.parametrize("delivered, manifest, right, reference", [
    ({"reference": B, "buffered": B, "mmap": A, "direct": A}, None, A, AGREEMENT),     # buffered stack wrong
    ({"reference": A, "buffered": A, "mmap": B, "direct": A}, None, A, AGREEMENT),     # mmap wrong
    ({"reference": A, "buffered": A, "mmap": A, "direct": B}, None, A, BUFFERED),      # undecidable
    ({"reference": B, "buffered": B, "mmap": B, "direct": A}, None, B, BUFFERED),      # undecidable
    ({"reference": B, "buffered": B, "mmap": B, "direct": A}, A, A, MANIFEST),
    ({"reference": B, "buffered": A, "mmap": A}, None, A, AGREEMENT),                  # the reference read alone
    ({"reference": B, "mmap": A}, None, B, BUFFERED),                                  # one path is no majority
])
def test_decide_row(delivered: dict[str, bytes], manifest: bytes | None, right: bytes, reference: str) -> None:
    truth = decide_row(delivered, None if manifest is None else manifest.__eq__)
    assert (truth.right, truth.reference) == (right, reference)
