"""ggaudit tested from below: the fault layer (tests/faultlayer.c) preloaded under `python -m ggaudit`
corrupts what one read path delivers of one model file while the file on disk stays intact, as a storage
stack, a VM disk path, a filter driver or bad RAM under the page cache would. Each command must name the
path, the bytes and where they are, and (`check`) say which bytes are right and what decided it.

The model is fixtures/ple_q8_0.gguf, copied: per_layer_token_embd.weight is Q8_0, whose 34-byte block is
an fp16 scale d then 32 int8 quants (ggml's block_q8_0 in ggml/src/ggml-common.h: `ggml_half d;
int8_t qs[QK8_0];`), so byte k of a block (k >= 2) holds column 32 * block + k - 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash

from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, gguf_bytes
from ggaudit.format.layout import open_model
from ggaudit.verify.manifests.tensor import build_tensor_manifest, write_tensor_manifest
from fault_support import faulted_env, run_ggaudit
from ollama_support import ollama_store
from platforms import needs_linux
from support import tmpfs_copy
from rows_support import supports_direct

pytestmark = needs_linux

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ple_q8_0.gguf"
PLE = "per_layer_token_embd.weight"
ROW, BLOCK, K = 100, 1, 6        # byte 6 of block 1 of row 100: quant qs[4], column 36
MASK = 0x10
ALL = ["buffered", "mmap", "direct"]


def flip_offset() -> int:
    table = open_model(FIXTURE).tensor(PLE)
    return table.offset + ROW * table.row_bytes + BLOCK * 34 + K


def flipped(data: bytes, offset: int) -> bytes:
    out = bytearray(data)
    out[offset] ^= MASK
    return bytes(out)


def models(done: Any) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = json.loads(done.stdout)["models"]
    return result


def test_rows_names_the_direct_path_and_the_exact_row_block_column_and_bytes(ddir: Path) -> None:
    model = ddir / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    data, at = model.read_bytes(), flip_offset()
    env = faulted_env(model, "direct", "flip", offset=at, mask=MASK)
    done = run_ggaudit(["rows", str(model), "--ids", "99-101", "--modes", "buffered,mmap,direct", "--json"], env)
    assert done.code == 1, done.stderr
    report = models(done)[0]
    assert (report["rows_checked"], report["mismatch_count"]) == (3, 1)
    found = report["mismatches"][0]
    picked = {k: found[k] for k in ("mode", "file", "tensor", "row", "block", "column", "offset", "byte",
                                    "differing", "expected", "actual")}
    assert picked == {"mode": "direct", "file": str(model), "tensor": PLE, "row": ROW, "block": BLOCK,
                      "column": 32 * BLOCK + K - 2, "offset": at, "byte": BLOCK * 34 + K, "differing": 1,
                      "expected": data[at:at + 16].hex(" "), "actual": flipped(data, at)[at:at + 16].hex(" ")}


def _projector() -> bytes:
    data, _ = gguf_bytes([TensorSpec("mm.weight", T.F32, (16, 4), np.arange(64, dtype="<f4").tobytes())],
                         {"general.architecture": "clip"})
    return data


def test_verify_reports_the_sha256_of_what_the_buffered_path_delivered(tmp_path: Path) -> None:
    data, at = FIXTURE.read_bytes(), flip_offset()
    root = tmp_path / "ollama"
    blob, projector = ollama_store(root, data, _projector(), name="clef-flash")
    env = faulted_env(blob, "buffered", "flip", offset=at, mask=MASK)
    done = run_ggaudit(["verify", "ollama:clef-flash", "--store", str(root), "--json"], env)
    assert done.code == 1, done.stderr
    report = models(done)[0]
    assert [(c["path"], c["ok"], c["source"]) for c in report["checked"]] == [(str(blob), False, "read"),
                                                                              (str(projector), True, "read")]
    [m] = report["mismatches"]
    assert {k: m[k] for k in ("kind", "path", "expected", "actual", "offset", "length")} == {
        "kind": "sha256", "path": str(blob), "expected": hashlib.sha256(data).hexdigest(),
        "actual": hashlib.sha256(flipped(data, at)).hexdigest(), "offset": 0, "length": len(data)}


def test_scan_reports_the_nan_that_bad_ram_under_the_page_cache_delivers(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    table = open_model(model).tensor(PLE)
    d_of_block_2 = table.offset + ROW * table.row_bytes + 2 * 34    # fp16 0xffff is a NaN
    env = faulted_env(model, "pagecache", "fill", offset=d_of_block_2, length=2, byte=0xFF)
    done = run_ggaudit(["scan", str(model), "--json"], env)
    assert done.code == 1, done.stderr
    [ple] = [t for t in models(done)[0]["tensors"] if t["name"] == PLE]
    assert [{k: f[k] for k in ("kind", "row", "block", "column", "field", "offset", "bits")}
            for f in ple["findings"]] == [{"kind": "nan", "row": ROW, "block": 2, "column": 64, "field": "d",
                                           "offset": d_of_block_2, "bits": "0xffff"}]
    assert run_ggaudit(["scan", str(model)], dict(os.environ)).code == 0   # the file itself holds no NaN


# --- `ggaudit check` on a real Ollama store layout: issue 25, item 3, cases (a)-(f) ------------------------


@pytest.fixture
def store(ddir: Path) -> tuple[Path, Path]:
    """library/clef-flash:latest with the fixture as its model layer; the store root and the model blob."""
    root = ddir / "ollama"
    blob, _ = ollama_store(root, FIXTURE.read_bytes(), _projector(), name="clef-flash")
    return root, blob


def check(root: Path, env: dict[str, str], *more: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Exit code, the report, and its model file's entry, of `ggaudit check ollama:clef-flash --json`."""
    done = run_ggaudit(["check", "ollama:clef-flash", "--store", str(root), "--json", *more], env)
    assert done.code in (0, 1), done.stderr
    report = models(done)[0]
    return done.code, report, report["files"][0]


def fingerprints(entry: dict[str, Any]) -> dict[str, str]:
    return {p["mode"]: p["xxh3_128"] for p in entry["paths"]}


def conclusion(entry: dict[str, Any], code: str) -> dict[str, Any]:
    [found] = [c for c in entry["conclusions"] if c["code"] == code]
    return dict(found)


def whole_table_differs() -> dict[str, Any]:
    """The PLE table's one row group (it is smaller than a group), as a read-path-differs conclusion lists it."""
    table = open_model(FIXTURE).tensor(PLE)
    return {"tensor": PLE, "rows": [0, table.n_rows - 1], "offset": table.offset, "length": table.nbytes,
            "kind": "tensor-data"}


def evidence_of(found: dict[str, Any]) -> dict[str, Any]:
    """A conclusion's evidence but the file it is about (the file entry it sits in names it already)."""
    return {k: v for k, v in found["evidence"].items() if k != "file"}


def test_check_a_every_path_agrees_and_matches_published_intact(store: tuple[Path, Path]) -> None:
    root, blob = store
    code, report, entry = check(root, dict(os.environ))
    assert (code, report["verdict"], report["reference"], entry["path"]) == (0, "intact", "published", str(blob))
    assert (entry["right"], entry["wrong"], [c["code"] for c in entry["conclusions"]]) == (
        ALL, [], ["matches-published", "read-paths-agree"])
    assert fingerprints(entry) == dict.fromkeys(ALL, xxhash.xxh3_128_hexdigest(FIXTURE.read_bytes()))


def test_check_b_every_path_agrees_none_matches_the_file_on_disk_is_damaged(store: tuple[Path, Path]) -> None:
    root, blob = store
    data, at = FIXTURE.read_bytes(), flip_offset()
    blob.write_bytes(flipped(data, at))      # damaged on disk: no fault layer, every path reads the same
    code, report, entry = check(root, dict(os.environ))
    assert (code, report["verdict"], report["reference"], entry["wrong"]) == (1, "damaged", "published", ALL)
    evidence = conclusion(entry, "differs-from-published")["evidence"]
    assert {k: evidence[k] for k in ("algorithm", "expected", "actual", "paths")} == {
        "algorithm": "sha256", "expected": hashlib.sha256(data).hexdigest(),
        "actual": hashlib.sha256(flipped(data, at)).hexdigest(), "paths": ALL}
    assert conclusion(entry, "read-paths-agree")["evidence"]["paths"] == ALL
    assert any("`ollama pull clef-flash`" in step for step in report["next_steps"])


def test_check_b_a_manifest_of_the_model_file_names_the_tensor_and_rows_in_its_ollama_blob(
        store: tuple[Path, Path], tmp_path: Path) -> None:
    """The manifest was made from the model file (ple_q8_0.gguf); the store keeps it as sha256-<hex> beside a
    projector: matched by content identity (size, tensors and their offsets), not by name."""
    root, blob = store
    manifest = tmp_path / "model.manifest.json"
    write_tensor_manifest(build_tensor_manifest(FIXTURE), manifest)
    data, at = FIXTURE.read_bytes(), flip_offset()
    blob.write_bytes(flipped(data, at))
    code, report, entry = check(root, dict(os.environ), "--manifest", str(manifest))
    assert (code, report["verdict"], report["reference"]) == (1, "damaged", "published")
    assert entry["manifest"] == {"algorithm": "sha256", "digest": hashlib.sha256(data).hexdigest(),
                                 "source": f"the manifest's sha256 of {FIXTURE.name} (its tensors are this file's, "
                                           "at the same offsets)", "note": None}
    table = open_model(FIXTURE).tensor(PLE)
    per_group = (1 << 20) // table.row_bytes      # the manifest's row groups: 1 MiB of whole rows
    first = ROW // per_group * per_group
    last = min(first + per_group, table.n_rows) - 1
    assert conclusion(entry, "differs-from-published")["evidence"]["tensors"] == [
        {"tensor": PLE, "rows": [first, last], "offset": table.offset + first * table.row_bytes,
         "length": (last - first + 1) * table.row_bytes, "kind": "tensor-data"}]
    assert f"the bytes that differ: {PLE} rows {first}-{last}" in conclusion(entry, "differs-from-published")["text"]
    assert report["files"][1]["manifest"] is None      # the projector: not in the manifest


@pytest.mark.parametrize("path_kind, wrong, right, words", [
    # (c) the mapping delivers other bytes; buffered and direct match what was published
    ("mmap", ["mmap"], ["buffered", "direct"], "reading through a memory mapping on this machine delivers other "
                                               "bytes for tensors per_layer_token_embd.weight; the file on disk is "
                                               "intact"),
    # (d) bad RAM (or a filter driver, a VM layer) under the page cache: buffered and mmap agree, direct is right
    ("pagecache", ["buffered", "mmap"], ["direct"], "the page cache holds other bytes than the disk for tensors "
                                                    "per_layer_token_embd.weight"),
    # (e) direct reads are wrong on this machine; the page cache matches what was published
    ("direct", ["direct"], ["buffered", "mmap"], "direct reads deliver wrong bytes on this machine for tensors "
                                                 "per_layer_token_embd.weight"),
])
def test_check_c_d_e_the_published_digest_names_the_path_that_deviates(
        store: tuple[Path, Path], path_kind: str, wrong: list[str], right: list[str], words: str) -> None:
    root, blob = store
    data, at = FIXTURE.read_bytes(), flip_offset()
    code, report, entry = check(root, faulted_env(blob, path_kind, "flip", offset=at, mask=MASK))
    assert (code, report["verdict"], report["reference"]) == (1, "read-path", "published")
    assert (entry["right"], entry["wrong"], entry["decided"]) == (right, wrong, True)
    assert conclusion(entry, "matches-published")["evidence"]["paths"] == right
    differs = conclusion(entry, "read-path-differs")
    assert evidence_of(differs) == {"paths": wrong, "agree": right, "reference": "published", "decided": True,
                                    "tensors": [PLE], "first": {"offset": at, "tensor": PLE, "row": ROW},
                                    "where": [whole_table_differs()]}
    assert differs["text"].startswith(words)
    assert fingerprints(entry) == {m: xxhash.xxh3_128_hexdigest(flipped(data, at) if m in wrong else data)
                                   for m in ALL}
    first = run_ggaudit(["check", "ollama:clef-flash", "--store", str(root)],
                        faulted_env(blob, path_kind, "flip", offset=at, mask=MASK)).stdout.splitlines()[0]
    assert first.startswith("ollama:clef-flash: ")       # the model as the user named it, not the blob
    # Ollama maps the file: whether that path read right is what Ollama got (issue 35).
    assert first.endswith("; Ollama reads through mmap by default, " + (
        "one of the paths that delivered the wrong bytes: Ollama gets them" if "mmap" in wrong else
        "which delivered the right bytes: Ollama gets the file's bytes"))


def test_check_f_nothing_published_page_cache_against_direct_gives_both_explanations_with_no_evict(
        ddir: Path) -> None:
    model = ddir / "model.gguf"         # a plain file: no store, so nothing published
    shutil.copyfile(FIXTURE, model)
    env = faulted_env(model, "direct", "flip", offset=flip_offset(), mask=MASK)
    done = run_ggaudit(["check", str(model), "--json", "--no-evict"], env)
    assert done.code == 1, done.stderr
    report = models(done)[0]
    entry = report["files"][0]
    assert (report["verdict"], report["reference"], entry["right"], entry["wrong"], entry["decided"]) == (
        "read-path", None, [], ["direct"], False)
    assert [c["code"] for c in entry["conclusions"]] == ["no-published-reference", "read-path-differs"]
    differs = conclusion(entry, "read-path-differs")
    assert evidence_of(differs) == {"paths": ["direct"], "agree": ["buffered", "mmap"], "reference": None,
                                    "decided": False, "tensors": [PLE], "where": [whole_table_differs()],
                                    "first": {"offset": flip_offset(), "tensor": PLE, "row": ROW}}
    assert "either the page cache holds other bytes than the disk" in differs["text"]
    assert "or direct reads are wrong on this machine" in differs["text"]
    assert differs["text"].endswith("; the eviction test could not be made: not made (--no-evict): nothing was "
                                    "evicted")
    steps = " ".join(report["next_steps"])
    assert "`ggaudit manifest MODEL" in steps and "`ggaudit check MODEL --manifest" in steps


def test_check_f_nothing_published_the_eviction_test_narrows_but_does_not_decide(ddir: Path) -> None:
    """Direct reads flipped below the process, the page cache right, nothing published: the page where they
    first differ is evicted and read again through the page cache, now from the device, and gives the page
    cache's bytes. That rules out a page cache holding bytes the disk lacks, but not a path changing every read
    through the page cache: with nothing published, direct reads are not blamed."""
    model = ddir / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    data, at = FIXTURE.read_bytes(), flip_offset()
    done = run_ggaudit(["check", str(model), "--json"], faulted_env(model, "direct", "flip", offset=at, mask=MASK))
    assert done.code == 1, done.stderr
    report = models(done)[0]
    entry = report["files"][0]
    assert (report["verdict"], report["reference"], entry["right"], entry["wrong"], entry["decided"]) == (
        "read-path", None, [], ["direct"], False)
    assert entry["tested"]["eviction"] == {"paths": ["buffered", "direct"], "offset": at, "outcome": "page-cache",
                                           "why": None, "cached": data[at:at + 16].hex(" "),
                                           "device": flipped(data, at)[at:at + 16].hex(" "),
                                           "after": data[at:at + 16].hex(" ")}
    assert conclusion(entry, "read-path-differs")["text"].startswith(
        f"direct reads deliver other bytes than buffered and mmap reads for tensors {PLE}, and the page cache, read "
        "again from the device once its pages were evicted, gives what it gave before: either direct reads are "
        "wrong on this machine, or every read through the page cache is changed on its way")


def test_check_f_a_manifest_made_where_the_model_works_decides(ddir: Path, tmp_path: Path) -> None:
    model = ddir / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    manifest = tmp_path / "model.manifest.json"
    assert run_ggaudit(["manifest", str(FIXTURE), "-o", str(manifest)], dict(os.environ)).code == 0
    env = faulted_env(model, "direct", "flip", offset=flip_offset(), mask=MASK)
    done = run_ggaudit(["check", str(model), "--manifest", str(manifest), "--json"], env)
    assert done.code == 1, done.stderr
    report = models(done)[0]
    entry = report["files"][0]
    assert (report["verdict"], report["reference"], entry["right"], entry["wrong"], entry["decided"]) == (
        "read-path", "manifest", ["buffered", "mmap"], ["direct"], True)
    assert conclusion(entry, "read-path-differs")["evidence"]["paths"] == ["direct"]


def test_check_nan_that_only_the_mapping_delivers_is_blamed_on_the_read_path_not_the_file(
        store: tuple[Path, Path]) -> None:
    """A fill of 0xff over one block's fp16 scale d on the mmap path only: the scan rides on the mmap pass
    and sees a NaN there (fp16 0xffff), which buffered and direct reads, matching the published digest, do
    not deliver. The verdict is read-path, and the NaN is said to come through the mapping, not the file."""
    root, blob = store
    table = open_model(FIXTURE).tensor(PLE)
    d_of_block_2 = table.offset + ROW * table.row_bytes + 2 * 34
    code, report, entry = check(root, faulted_env(blob, "mmap", "fill", offset=d_of_block_2, length=2, byte=0xFF))
    assert (code, report["verdict"], report["reference"]) == (1, "read-path", "published")
    assert (entry["right"], entry["wrong"]) == (["buffered", "direct"], ["mmap"])
    codes = [c["code"] for c in report["conclusions"]]
    assert "stored-nonfinite" not in codes and codes.count("read-path-nonfinite") == 1
    [through] = [c for c in report["conclusions"] if c["code"] == "read-path-nonfinite"]
    assert [{k: f[k] for k in ("tensor", "file", "row", "block", "column", "field", "offset", "bits")}
            for f in through["evidence"]["findings"]] == [
        {"tensor": PLE, "file": str(blob), "row": ROW, "block": 2, "column": 64, "field": "d", "offset": d_of_block_2,
         "bits": "0xffff"}]
    assert {k: through["evidence"][k] for k in ("count", "path", "agree", "decided")} == {
        "count": 1, "path": "mmap", "agree": ["buffered", "direct"], "decided": True}
    assert through["text"] == (
        f"1 non-finite value in 1 tensor (first: tensor {PLE} row {ROW} column 64, bits 0xffff) came through mmap "
        "reads, which deliver other bytes of this tensor than buffered and direct reads on this machine: they show "
        "what that read path delivered, not what the file holds; the file's bytes are what buffered and direct read")


# --- a filesystem that refuses direct I/O: the path is skipped, and the verdict names the paths compared -----

def assert_direct_skipped(done: Any, model: Path, why: str) -> None:
    """`check --json` of a model whose direct reads the filesystem refuses: the skipped entry, the warning,
    the paths compared, and the verdict (nothing published, buffered and mmap agree: unverified, exit 0)."""
    assert done.code == 0, done.stderr
    report = models(done)[0]
    [entry] = report["files"]
    assert entry["skipped"] == [{"mode": "direct", "reason": why}]
    assert [p["mode"] for p in entry["paths"]] == ["buffered", "mmap"]
    assert report["modes"] == ["buffered", "mmap"]
    assert report["warnings"] == [f"direct reads skipped: {why}; compared: buffered, mmap"]
    assert (report["verdict"], conclusion(entry, "read-paths-agree")["evidence"]) == (
        "unverified", {"paths": ["buffered", "mmap"], "independent": False})


def test_check_direct_refused_at_every_read_is_skipped_with_a_warning_and_the_paths_compared(tmp_path: Path) -> None:
    """The fault layer fails every direct read of the file with EINVAL, as a filesystem that takes O_DIRECT
    at open and refuses each read does: the reader's probe read says so, and check goes on without it."""
    model = tmp_path / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    env = faulted_env(model, "direct", "einval", offset=0, length=model.stat().st_size)
    done = run_ggaudit(["check", str(model), "--json"], env)
    assert_direct_skipped(done, model, "direct reads fail with EINVAL even when aligned")


@needs_linux
def test_check_a_read_cut_short_below_is_not_called_a_changed_file(tmp_path: Path) -> None:
    """Every buffered read reaching offset 40000 returns only the bytes before it (the layer's `short`) while
    the file keeps its size: the one line says the read stopped short below ggaudit, not that it changed."""
    model = tmp_path / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    size = model.stat().st_size
    done = run_ggaudit(["check", str(model), "--modes", "buffered"], faulted_env(model, "buffered", "short",
                                                                                 offset=40000))
    assert (done.code, done.stdout) == (2, "")
    assert done.stderr == (f"ggaudit: error: {model}: offset 40000: buffered read returned no bytes before the end "
                           f"of the file (it is still {size} bytes): the read stopped short below ggaudit\n")


@pytest.fixture
def tmpfs_model() -> Any:
    """The model on a tmpfs (/dev/shm), in a folder of its own removed afterwards; skipped where the tmpfs
    takes O_DIRECT (Linux 6.6 and later: "shmem: add support for O_DIRECT" accepts it at open and reads)."""
    with tmpfs_copy(FIXTURE) as model:
        if supports_direct(model.parent):
            pytest.skip(f"the tmpfs takes direct reads on this kernel ({os.uname().release}): nothing refuses them")
        yield model


def test_check_on_a_tmpfs_that_refuses_o_direct_skips_direct_reads(tmpfs_model: Path) -> None:
    done = run_ggaudit(["check", str(tmpfs_model), "--json"], dict(os.environ))
    assert_direct_skipped(done, tmpfs_model, "the filesystem refuses direct I/O (open with O_DIRECT: EINVAL)")
