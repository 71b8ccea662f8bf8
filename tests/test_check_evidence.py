"""``check``'s evidence tested from below (issue 32): the fault layer (tests/faultlayer.c) preloaded under
``python -m ggaudit check`` makes one read path deliver other bytes while ggaudit's code is right, and each
case must come out as what the evidence proves, no stronger:

* a device holding other bytes than the page cache (a lost write under a cached file: the layer's ``device``
  kind, direct reads flipped and the page cache's too once the page is evicted) is told from direct reads
  that are wrong (the ``direct`` kind) by the eviction test, and ``--no-evict`` leaves both explanations;
* a fault common to buffered and direct reads credits mmap, the one right path, once its second read is
  hashed, and blames buffered and direct path by path;
* a header read wrong once for the plan is found by the passes and the check planned again from their bytes;
* direct reads on a tmpfs, served by the page cache, are no witness of a device.

The model is fixtures/ple_q8_0.gguf, copied: byte 6 of block 1 of row 100 of per_layer_token_embd.weight is
quant qs[4] of that Q8_0 block (column 36).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ggaudit.format.layout import open_model
from fault_support import below, faulted_env, run_ggaudit
from platforms import needs_linux
from support import tmpfs_copy

pytestmark = needs_linux

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ple_q8_0.gguf"
PLE = "per_layer_token_embd.weight"
MASK = 0x10


def flip_offset() -> int:
    table = open_model(FIXTURE).tensor(PLE)
    return table.offset + 100 * table.row_bytes + 34 + 6


def hexed(data: bytes, at: int, mask: int = 0) -> str:
    window = bytearray(data[at:at + 16])
    window[0] ^= mask
    return window.hex(" ")


def check(model: Path, env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Exit code, report and the one file's entry of ``ggaudit check MODEL --json ARGS`` under ``env``."""
    done = run_ggaudit(["check", str(model), "--json", *args], env)
    assert done.code in (0, 1), done.stderr
    report = json.loads(done.stdout)["models"][0]
    return done.code, report, report["files"][0]


def codes(entry: dict[str, Any]) -> list[str]:
    return [c["code"] for c in entry["conclusions"]]


def conclusion(entry: dict[str, Any], code: str) -> dict[str, Any]:
    [found] = [c for c in entry["conclusions"] if c["code"] == code]
    return dict(found)


def text_of(entry: dict[str, Any], code: str) -> str:
    [found] = [c["text"] for c in entry["conclusions"] if c["code"] == code]
    return str(found)


@pytest.fixture
def model(ddir: Path) -> Path:
    copy = ddir / "model.gguf"
    shutil.copyfile(FIXTURE, copy)
    os.sync()       # written back: the pages of the copy are clean, as a model's long downloaded are
    return copy


SHA256 = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()


# --- a device holding other bytes than the page cache, told from a wrong direct path ------------------------

def test_a_lost_write_under_a_cached_file_is_the_device_holding_other_bytes(model: Path) -> None:
    data, at = FIXTURE.read_bytes(), flip_offset()
    code, report, entry = check(model, faulted_env(model, "device", "flip", offset=at, mask=MASK), "--sha256", SHA256)
    assert (code, report["verdict"], entry["verdict"], entry["reference"]) == (1, "damaged", "damaged", "published")
    assert (entry["right"], entry["wrong"], codes(entry)) == (["buffered", "mmap"], ["direct"],
                                                              ["matches-published", "device-differs"])
    assert entry["tested"]["eviction"] == {"paths": ["buffered", "direct"], "offset": at, "outcome": "device",
                                           "why": None, "cached": hexed(data, at), "device": hexed(data, at, MASK),
                                           "after": hexed(data, at, MASK)}
    assert text_of(entry, "device-differs").startswith("the file on disk differs from the sha256 given (--sha256): "
                                                       "the device holds other bytes than the page cache")
    assert report["next_steps"][0].startswith(f"the page cache may still hold the published bytes of {model}: copy "
                                              "it now, before a reboot empties the page cache")


def test_no_evict_leaves_both_explanations_of_direct_reads_that_differ(model: Path) -> None:
    at = flip_offset()
    code, report, entry = check(model, faulted_env(model, "device", "flip", offset=at, mask=MASK), "--sha256", SHA256,
                                "--no-evict")
    assert (code, report["verdict"], entry["decided"], entry["wrong"]) == (1, "read-path", False, ["direct"])
    words = text_of(entry, "read-path-differs")
    assert "either the device holds other bytes than the page cache" in words
    assert "or direct reads are wrong on this machine" in words
    assert words.endswith("the eviction test could not be made: not made (--no-evict): nothing was evicted")


def test_direct_reads_wrong_are_blamed_once_the_device_read_again_gives_the_published_bytes(model: Path) -> None:
    data, at = FIXTURE.read_bytes(), flip_offset()
    code, report, entry = check(model, faulted_env(model, "direct", "flip", offset=at, mask=MASK), "--sha256", SHA256)
    assert (code, report["verdict"], entry["decided"], entry["right"], entry["wrong"]) == (
        1, "read-path", True, ["buffered", "mmap"], ["direct"])
    assert entry["tested"]["eviction"]["outcome"] == "page-cache"
    assert entry["tested"]["eviction"]["after"] == hexed(data, at)
    assert text_of(entry, "read-path-differs").startswith(f"direct reads deliver wrong bytes on this machine for "
                                                          f"tensors {PLE}")
    # Where the paths first differ, exactly (issue 35): the flipped byte, and the command replaying its row.
    assert {k: v for k, v in conclusion(entry, "read-path-differs")["evidence"]["first"].items()} == {
        "offset": at, "tensor": PLE, "row": 100}
    assert report["next_steps"][0] == ("replay the rows where the paths first differ through each read path, to see "
                                       f"what each delivers: `ggaudit rows {model} --tensor {PLE} --ids 100 --modes "
                                       "buffered,mmap,direct`")
    assert [step.split(":")[0] for step in report["next_steps"][1:]] == ["engines reading with direct I/O get the "
                                                                         "wrong bytes"]


# --- a fault common to two paths: the one right path is proven, not blamed ---------------------------------

def test_a_fault_common_to_buffered_and_direct_credits_mmap_after_hashing_it(model: Path) -> None:
    at = flip_offset()
    env = below(faulted_env(model, "buffered", "flip", offset=at, mask=MASK), "direct", "flip", offset=at, mask=MASK)
    code, report, entry = check(model, env, "--sha256", SHA256)
    assert (code, report["verdict"], entry["reference"], entry["right"], entry["wrong"]) == (
        1, "read-path", "published", ["mmap"], ["buffered", "direct"])
    assert entry["tested"]["rehashed"] == [{"mode": "mmap", "digests": {"sha256": SHA256}, "why": None}]
    assert entry["tested"]["eviction"]["outcome"] == "page-cache"     # mmap after the eviction: the published bytes
    # The plan's read of the header, and the window it read ahead, is buffered's too: wrong past the header.
    assert codes(entry) == ["plan-read-differs", "matches-published", "read-path-differs"]
    assert text_of(entry, "plan-read-differs").endswith("they lie past the header, so the plan it made is right")
    assert not any("every read path" in c["text"] for c in entry["conclusions"])
    steps = report["next_steps"]
    assert any(step.startswith("engines reading the file with read calls") for step in steps)
    assert any(step.startswith("engines reading with direct I/O get the wrong bytes") for step in steps)
    assert not any(step.startswith("engines that map the file") for step in steps)


# --- the header the plan rests on is confirmed by the passes -----------------------------------------------

def architecture_byte() -> int:
    entry = open_model(FIXTURE).files[0].metadata["general.architecture"]
    return entry.offset + 8         # the value's first character, after its u64 length


def test_a_header_flipped_once_in_the_plans_read_is_planned_again_from_the_passes(model: Path) -> None:
    """The flip (``gemma3n`` read as ``Gemma3n``) hits only the first buffered read, the plan's: every pass
    delivers the published bytes, so the plan's read was wrong, and the check is planned again from them."""
    env = faulted_env(model, "buffered", "flip", offset=architecture_byte(), mask=0x20, times="once")
    code, report, entry = check(model, env, "--sha256", SHA256)
    assert (code, report["verdict"], entry["reference"]) == (1, "read-path", "published")
    assert codes(entry) == ["plan-read-differs", "matches-published", "read-paths-agree"]
    assert text_of(entry, "plan-read-differs").startswith("the read the check was planned from (positioned reads "
                                                          "of the header) delivered other bytes at offsets 0-")
    assert report["scans"][0]["metadata"] == []      # the architecture read again: no finding about it


def test_a_header_the_first_read_cannot_parse_is_read_through_the_device(model: Path) -> None:
    """A flipped tensor type makes the plan's header unreadable (its data runs past the end); direct reads
    parse it, and the check is planned from them instead of refusing an intact file with exit 2."""
    table = open_model(FIXTURE).tensor(PLE)
    type_at = table.info_offset + 8 + len(PLE) + 4 + 8 * len(table.shape)
    env = faulted_env(model, "buffered", "flip", offset=type_at, mask=0x01, times="once")
    code, report, entry = check(model, env, "--sha256", SHA256)
    assert (code, report["verdict"], entry["reference"], entry["wrong"]) == (1, "read-path", "published", [])
    assert text_of(entry, "plan-read-differs").startswith("the header as first read (positioned reads, to plan the "
                                                          "check) is not one ggaudit can read")
    assert text_of(entry, "plan-read-differs").endswith("the check was planned from the bytes direct reads delivered")


# --- direct reads that a filesystem serves from the page cache ---------------------------------------------

@pytest.fixture
def on_tmpfs() -> Iterator[Path]:
    with tmpfs_copy(FIXTURE) as copy:
        yield copy


def test_direct_reads_a_tmpfs_serves_from_the_page_cache_witness_no_device(on_tmpfs: Path) -> None:
    done = run_ggaudit(["check", str(on_tmpfs), "--json", "--sha256", SHA256], dict(os.environ))
    if done.code == 0 and "direct reads skipped" in done.stdout:
        pytest.skip("this kernel's tmpfs refuses O_DIRECT (before Linux 6.6): direct reads are skipped there")
    report = json.loads(done.stdout)["models"][0]
    entry = report["files"][0]
    assert (done.code, report["verdict"], entry["verdict"]) == (0, "cache-verified", "cache-verified")
    agree = next(c for c in entry["conclusions"] if c["code"] == "read-paths-agree")
    assert agree["evidence"]["independent"] is False
    assert "direct reads here come from the page cache too (" in agree["text"]
    assert report["conclusions"][-1]["code"] == "device-not-read"


# --- the real thing: a byte changed on a real device under the cached file ----------------------------------

def test_a_byte_changed_on_a_real_device_under_the_cached_file_is_told_by_the_eviction_test(tmp_path: Path) -> None:
    """An ext4 image on a loop device: the model written, synced and read (cached), then one byte changed ON
    THE DEVICE (the page cache keeps the old one). Buffered and mmap reads still deliver the published bytes,
    direct reads the device's; the eviction test reads the page again from the device and it gives the
    changed byte: the device holds other bytes than were published, not a wrong direct path."""
    from loopdev_support import ext4_loop

    data, at = FIXTURE.read_bytes(), flip_offset()
    with ext4_loop(tmp_path) as loop:
        copy = loop.mount / "model.gguf"
        copy.write_bytes(data)
        os.sync()
        assert copy.read_bytes() == data            # cached
        loop.flip_on_device(copy, at, MASK)
        code, report, entry = check(copy, dict(os.environ), "--sha256", SHA256)
    assert (code, report["verdict"], entry["right"], entry["wrong"]) == (1, "damaged", ["buffered", "mmap"],
                                                                         ["direct"])
    assert codes(entry) == ["matches-published", "device-differs"]
    assert entry["tested"]["eviction"] == {"paths": ["buffered", "direct"], "offset": at, "outcome": "device",
                                           "why": None, "cached": hexed(data, at), "device": hexed(data, at, MASK),
                                           "after": hexed(data, at, MASK)}


def test_padding_only_the_mapping_delivers_non_zero_is_the_paths_finding_not_the_files(model: Path) -> None:
    """One byte of the padding before the data section read as 0xff through the mapping only: the scan, which
    rides on the mmap pass, sees padding that is not zeros. mmap is decided wrong, so the file is scanned again
    through buffered reads, which find none: the finding is mmap's (read-path-structure), not the file's."""
    f = open_model(FIXTURE).files[0]
    at = f.header_end + 2
    assert at < f.data_offset and FIXTURE.read_bytes()[at] == 0
    code, report, entry = check(model, faulted_env(model, "mmap", "fill", offset=at, byte=0xFF), "--sha256", SHA256)
    assert (code, report["verdict"], entry["right"], entry["wrong"]) == (1, "read-path", ["buffered", "direct"],
                                                                         ["mmap"])
    assert [c["code"] for c in report["conclusions"] if c["code"] in ("structure", "read-path-structure")] == [
        "read-path-structure"]
    [through] = [c for c in report["conclusions"] if c["code"] == "read-path-structure"]
    assert {k: through["evidence"][k] for k in ("kind", "offset", "path")} == {"kind": "padding",
                                                                               "offset": f.header_end, "path": "mmap"}
    assert report["scans"][0]["structure"] == []
