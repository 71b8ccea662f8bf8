"""`ggaudit rows` decided by the file's published digest (issue 26, item 1) when the read paths dispute a row
and nothing else decides: the whole file read through each path in turn until one gives the digest, below the
process (tests/faultlayer.c) on a content-addressed blob whose name is its sha256, and with `--sha256`. And a
capture compared with the rows' decided bytes, not with a reference read found wrong.

The model is fixtures/ple_q8_0.gguf, copied: per_layer_token_embd.weight is Q8_0, 1024 rows of 170 bytes at
offset 23712 (tests/test_rows_below.py says how its bytes map to columns).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from ggaudit.errors import UsageError
from ggaudit.stores.published_digest import PublishedDigest
from ggaudit.evidence.readers import Reader, open_reader
from ggaudit.rows.replay import RowsOptions, check_rows
from ggaudit.rows.row_decision import BUFFERED, PUBLISHED
from fault_support import faulted_env, hexed, picked, rows, run_ggaudit
from platforms import needs_linux
from rows_support import Wrapped

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ple_q8_0.gguf"
ROW, MASK, RB, BASE = 100, 0x10, 170, 23712
FLIP = BASE + ROW * RB + 34 + 6      # block 1, byte 6: column 36
NAMED = "the sha256 its file name gives (a content-addressed blob)"


@pytest.fixture
def blob(ddir: Path) -> Path:
    """The model as a content-addressed blob: its name is its sha256 (as Ollama's and the HF cache's are)."""
    digest = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    target = ddir / f"sha256-{digest}"
    shutil.copyfile(FIXTURE, target)
    return target


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@needs_linux
def test_the_page_cache_wrong_against_direct_is_decided_by_the_blobs_name(blob: Path) -> None:
    data = blob.read_bytes()
    bad = bytearray(data)
    bad[FLIP] ^= MASK
    env = faulted_env(blob, "pagecache", "flip", offset=FLIP, mask=MASK)
    code, report = rows(blob, env, "--ids", "99-101", "--modes", "buffered,mmap,direct")
    assert code == 1
    assert [picked(m, "mode", "stage", "row", "offset", "column", "reference", "expected", "actual")
            for m in report["mismatches"]] == [
        (mode, stage, ROW, FLIP, 36, PUBLISHED, hexed(data, FLIP), hexed(bad, FLIP))
        for mode, stage in (("buffered", "gather"), ("mmap", "gather"), ("buffered", "reference"))]
    assert [(d["paths"], d["right"]) for d in report["mismatches"][0]["delivered"]] == [
        (["reference", "buffered", "mmap"], False), (["direct"], True)]
    assert f"decided by {NAMED}: the whole file read through direct gives its sha256" in \
        report["mismatches"][0]["detail"]
    assert report["published"] == {
        "algorithm": "sha256", "digest": sha256_of(data), "what": NAMED, "proven_by": "direct", "rows": [ROW],
        "reads": [{"mode": "direct", "digest": sha256_of(data), "error": None}]}
    said = f"{NAMED} decides 1 disputed row: the whole file read through direct gives its sha256"
    text = run_ggaudit(["rows", str(blob), "-o", "-", "-o", str(blob.parent / "r.html"), "--ids", "100",
                        "--modes", "buffered,mmap,direct"], env)
    assert (text.code, text.stdout.count("\npublished: ")) == (1, 1)
    assert f"published: {said}\n" in text.stdout
    assert f"<td>published digest</td><td>{said}</td>" in (blob.parent / "r.html").read_text(encoding="utf-8")


@needs_linux
def test_direct_wrong_is_decided_by_the_buffered_whole_file_read_after_the_direct_one_fails(blob: Path) -> None:
    """The engine's case: direct reads deliver a NaN scale, the page cache the file's bytes. The direct path's
    whole-file read suffers the same fault, gives another sha256, and the buffered one decides."""
    data = blob.read_bytes()
    scale = BASE + ROW * RB + 34        # block 1's f16 scale: 0xffff is a NaN
    env = faulted_env(blob, "direct", "fill", offset=scale, length=2, byte=0xFF)
    code, report = rows(blob, env, "--ids", "100", "--modes", "buffered,mmap,direct")
    [m] = report["mismatches"]
    assert (code, m["mode"], m["stage"], m["row"], m["reference"]) == (1, "direct", "gather", ROW, PUBLISHED)
    nan_scale = "ff ff " + hexed(data, scale + 2)[:-6]
    assert (m["offset"], m["expected"], m["actual"]) == (scale, hexed(data, scale), nan_scale)
    assert [(d["paths"], d["right"]) for d in m["delivered"]] == [
        (["reference", "buffered", "mmap"], True), (["direct"], False)]
    published = report["published"]
    assert (published["proven_by"], published["rows"]) == ("buffered", [ROW])
    assert [r["mode"] for r in published["reads"]] == ["direct", "buffered"]
    assert published["reads"][0]["digest"] not in (None, sha256_of(data))
    assert published["reads"][1] == {"mode": "buffered", "digest": sha256_of(data), "error": None}
    assert "decided by the sha256 its file name gives" in m["detail"]


@needs_linux
def test_a_sha256_no_read_gives_decides_nothing_and_says_so(blob: Path) -> None:
    data = blob.read_bytes()
    other = sha256_of(data + b"\0")
    env = faulted_env(blob, "pagecache", "flip", offset=FLIP, mask=MASK)
    code, report = rows(blob, env, "--ids", "100", "--modes", "buffered,mmap,direct", "--sha256", other.upper())
    [m] = report["mismatches"]
    assert (code, m["mode"], m["reference"], m["actual"]) == (1, "direct", BUFFERED, hexed(data, FLIP))
    assert "the sha256 given (--sha256) decides nothing: no whole-file read gives it (direct gives another, " \
           "buffered gives another, mmap gives another)" in m["detail"]
    assert "either the page cache holds other bytes than the disk" in m["detail"]
    assert "or direct reads are wrong on this machine; the sha256 given (--sha256) decides nothing" in m["detail"]
    assert (report["published"]["proven_by"], report["published"]["digest"]) == (None, other)
    assert [r["mode"] for r in report["published"]["reads"]] == ["direct", "buffered", "mmap"]


def test_rows_agreeing_read_nothing_more_and_a_wrong_sha256_is_one_line(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    shutil.copyfile(FIXTURE, model)
    report = check_rows(model, [ROW], modes=("buffered", "mmap"), published="0" * 64)
    assert (report.ok, report.published) == (True, None)     # nothing disputed: no whole-file read
    done = run_ggaudit(["rows", str(model), "--ids", "1", "--sha256", "abc"], None)
    assert (done.code, done.stdout) == (2, "")
    assert done.stderr.strip().splitlines() == ["ggaudit: error: --sha256: 'abc' is not a sha256: 64 hex digits"]
    with pytest.raises(UsageError, match="published: 'xyz' is not a sha256"):
        check_rows(model, [ROW], published="xyz")


@needs_linux
def test_a_capture_is_compared_with_the_decided_bytes_not_the_wrong_reference_read(ddir: Path) -> None:
    """The buffered stack flips a bit of row 100 on every positioned read, the reference read's too; mmap and
    direct agree on the file's bytes, and the engine's capture (made from them) holds those: it is right."""
    model = ddir / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    data = model.read_bytes()
    ids = np.array([99, 100, 101], dtype=np.int64)
    capture = ddir / "capture.npz"
    np.savez(capture, ids=ids, rows=np.frombuffer(data, np.uint8)[BASE:BASE + 1024 * RB].reshape(1024, RB)[ids])
    env = faulted_env(model, "buffered", "flip", offset=FLIP, mask=MASK)
    code, report = rows(model, env, "--ids", "99-101", "--modes", "buffered,mmap,direct", "--against", str(capture))
    assert code == 1
    assert [picked(m, "mode", "stage", "row") for m in report["mismatches"]] == [
        ("buffered", "gather", ROW), ("buffered", "reference", ROW)]
    assert (report["capture"]["rows"], report["capture"]["mismatched_rows"]) == (3, 0)


@needs_linux
def test_an_ollama_stores_manifest_gives_the_digest_of_its_model_layer(ddir: Path) -> None:
    from ollama_support import ollama_store

    data = FIXTURE.read_bytes()
    model, _ = ollama_store(ddir / "ollama", data, b"projector bytes")
    env = faulted_env(model, "pagecache", "flip", offset=FLIP, mask=MASK)
    code, report = rows("ollama:tiny", env, "--store", str(ddir / "ollama"), "--ids", "100")
    assert (code, report["file"]) == (1, str(model))
    assert [picked(m, "mode", "stage", "reference") for m in report["mismatches"]] == [
        ("buffered", "gather", PUBLISHED), ("mmap", "gather", PUBLISHED), ("buffered", "reference", PUBLISHED)]
    assert picked(report["published"], "what", "digest", "proven_by") == (
        "the Ollama manifest's digest of its application/vnd.ollama.image.model layer", sha256_of(data), "direct")


class _FlipsOneByte(Wrapped):
    """A read path delivering byte FLIP with bit 0x10 flipped, in every read that covers it."""

    def read_into(self, view: memoryview, offset: int) -> int:
        n = self.inner.read_into(view, offset)
        if offset <= FLIP < offset + n:
            view[FLIP - offset] ^= MASK
        return n


@pytest.mark.parametrize("algorithm", ["md5", "git-sha1"])
def test_a_published_md5_or_git_blob_id_decides_too(tmp_path: Path, algorithm: str) -> None:
    """GPT4All publishes md5s, a Hugging Face download's etag of a small file is git's blob id."""
    model = tmp_path / "m.gguf"
    shutil.copyfile(FIXTURE, model)
    data = model.read_bytes()
    digest = hashlib.md5(data).hexdigest() if algorithm == "md5" else \
        hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def factory(path: str, mode: str) -> Reader:
        inner = open_reader(path, mode)
        return _FlipsOneByte(inner) if mode == "mmap" else inner

    published = PublishedDigest(algorithm=algorithm, digest=digest, what=f"a {algorithm} given")
    report = check_rows(model, [ROW], modes=("mmap",), published=published,
                        options=RowsOptions(reader_factory=factory))
    [m] = report.mismatches
    assert (m.mode, m.stage, m.row, m.offset, m.reference) == ("mmap", "gather", ROW, FLIP, PUBLISHED)
    assert report.published is not None
    assert [(t.mode, t.digest == digest) for t in report.published.tried] == [("buffered", True)]


@pytest.mark.parametrize("chunk", [1, 7, 170, 171, 4096])
def test_the_rows_kept_from_a_whole_file_pass_are_theirs_however_the_chunks_cut_them(chunk: int) -> None:
    from ggaudit.format.layout import open_model
    from ggaudit.rows.digest_proof import RowCopies
    from ggaudit.rows.table import RowTable

    table = RowTable(open_model(FIXTURE).tensor("per_layer_token_embd.weight"), FIXTURE.stat().st_size)
    data = FIXTURE.read_bytes()
    wanted = [0, 99, 100, 1023]
    copies = RowCopies(table, [*wanted, 100])
    for lo in range(0, len(data), chunk):
        copies.update(lo, memoryview(data)[lo:lo + chunk])
    assert {r: bytes(b) for r, b in copies.got.items()} == {r: data[BASE + r * RB:BASE + (r + 1) * RB] for r in wanted}
