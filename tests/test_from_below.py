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
from fault_support import faulted_env, run_ggaudit
from ollama_support import ollama_store
from platforms import needs_linux

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
                                    "tensors": [PLE]}
    assert differs["text"].startswith(words)
    assert fingerprints(entry) == {m: xxhash.xxh3_128_hexdigest(flipped(data, at) if m in wrong else data)
                                   for m in ALL}
    first = run_ggaudit(["check", "ollama:clef-flash", "--store", str(root)],
                        faulted_env(blob, path_kind, "flip", offset=at, mask=MASK)).stdout.splitlines()[0]
    assert first.startswith("ollama:clef-flash: ")       # the model as the user named it, not the blob


def test_check_f_nothing_published_page_cache_against_direct_gives_both_explanations(ddir: Path) -> None:
    model = ddir / "model.gguf"         # a plain file: no store, so nothing published
    shutil.copyfile(FIXTURE, model)
    env = faulted_env(model, "direct", "flip", offset=flip_offset(), mask=MASK)
    done = run_ggaudit(["check", str(model), "--json"], env)
    assert done.code == 1, done.stderr
    report = models(done)[0]
    entry = report["files"][0]
    assert (report["verdict"], report["reference"], entry["right"], entry["wrong"], entry["decided"]) == (
        "read-path", None, [], ["direct"], False)
    assert [c["code"] for c in entry["conclusions"]] == ["no-published-reference", "read-path-differs"]
    differs = conclusion(entry, "read-path-differs")
    assert evidence_of(differs) == {"paths": ["direct"], "agree": ["buffered", "mmap"], "reference": None,
                                    "decided": False, "tensors": [PLE]}
    assert "either the page cache holds other bytes than the disk" in differs["text"]
    assert "or direct reads are wrong on this machine" in differs["text"]
    steps = " ".join(report["next_steps"])
    assert "`ggaudit manifest MODEL" in steps and "`ggaudit check MODEL --manifest" in steps


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
