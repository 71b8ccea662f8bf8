"""check computes a published digest once (issue 37): on the device's pass, which runs beside the page cache's,
else on the first page-cache pass; a path that delivered other bytes is hashed again only then (the decision's
rehash test), and the verdict and its evidence are what they were when every path hashed.

The model is fixtures/ple_q8_0.gguf, copied; faults from below come from tests/faultlayer.c (as in
tests/test_check_evidence.py).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ggaudit.check.run import check as check_library
from ggaudit.evidence.paths import digest_path
from ggaudit.evidence.readers import DirectIOUnavailable
from ggaudit.format.layout import open_model
from fault_support import faulted_env, run_ggaudit
from platforms import needs_linux

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ple_q8_0.gguf"
SHA256 = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
PLE = "per_layer_token_embd.weight"
#: The module itself: ``ggaudit.check`` is the function once its package is imported.
check_run = importlib.import_module("ggaudit.check.run")


@pytest.fixture
def model(ddir: Path) -> Path:
    copy = ddir / "model.gguf"
    shutil.copyfile(FIXTURE, copy)
    if hasattr(os, "sync"):     # written back: the pages of the copy are clean (Windows has no os.sync)
        os.sync()
    return copy


def flip_offset() -> int:
    table = open_model(FIXTURE).tensor(PLE)
    return table.offset + 100 * table.row_bytes + 34 + 6


def check_json(model: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = run_ggaudit(["check", str(model), "--json", *args], env)
    assert done.code in (0, 1), done.stderr
    return dict(json.loads(done.stdout)["models"][0]["files"][0])


def test_the_digest_rides_on_the_device_path_else_the_first() -> None:
    assert digest_path(("buffered", "mmap", "direct")) == "direct"
    assert digest_path(("mmap", "direct")) == "direct"
    assert digest_path(("buffered", "mmap")) == "buffered"
    assert digest_path(("mmap",)) == "mmap"


def test_paths_that_agree_hash_the_published_digest_once_and_nothing_again(model: Path) -> None:
    report = check_library(str(model), sha256=SHA256)
    [entry] = report.files
    assert (entry.decision.verdict, entry.decision.right) == ("intact", ("buffered", "mmap", "direct"))
    assert {r.stats.mode: dict(r.digests) for r in entry.reads} == {
        "buffered": {}, "mmap": {}, "direct": {"sha256": SHA256}}
    assert entry.decision.tested is None        # no second read: every path delivered the digested bytes
    assert entry.result(entry.expectations[0]) == "matched"


@needs_linux
def test_a_path_that_delivered_other_bytes_is_hashed_again_and_the_verdict_is_unchanged(model: Path) -> None:
    at = flip_offset()
    entry = check_json(model, faulted_env(model, "direct", "flip", offset=at, mask=0x10), "--sha256", SHA256)
    assert (entry["verdict"], entry["reference"], entry["right"], entry["wrong"], entry["decided"]) == (
        "read-path", "published", ["buffered", "mmap"], ["direct"], True)
    # direct's own pass computed the digest (not the published one); buffered's bytes, unlike direct's, were
    # hashed again to prove them the published ones
    assert {p["mode"]: p["digests"] for p in entry["paths"]} == {
        "buffered": {}, "mmap": {}, "direct": {"sha256": hashlib.sha256(flipped(at)).hexdigest()}}
    assert entry["tested"]["rehashed"] == [{"mode": "buffered", "digests": {"sha256": SHA256}, "why": None}]
    assert [e["result"] for e in entry["expectations"]] == ["matched"]      # by buffered's second read
    assert [c["code"] for c in entry["conclusions"]] == ["matches-published", "read-path-differs"]


def test_a_filesystem_refusing_direct_io_moves_the_digest_to_the_first_page_cache_pass(
        model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened = check_run.open_reader

    def refusing_direct(path: str, mode: str) -> Any:
        if mode == "direct":
            raise DirectIOUnavailable(path, "the filesystem refuses direct I/O (a test)")
        return opened(path, mode)

    monkeypatch.setattr(check_run, "open_reader", refusing_direct)
    [entry] = check_library(str(model), sha256=SHA256).files
    assert (entry.decision.verdict, dict(entry.skipped)) == (
        "cache-verified", {"direct": "the filesystem refuses direct I/O (a test)"})
    assert {r.stats.mode: dict(r.digests) for r in entry.reads} == {"buffered": {"sha256": SHA256}, "mmap": {}}
    assert entry.decision.tested is None


def flipped(at: int) -> bytes:
    data = bytearray(FIXTURE.read_bytes())
    data[at] ^= 0x10
    return bytes(data)
