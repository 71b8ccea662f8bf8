"""ggaudit.format.layout: every malformed header fails with FormatError at the exact offset and field;
well-formed files (and split sets, from any shard) agree with gguf.GGUFReader."""

from __future__ import annotations

import dataclasses
import os
import struct
import time
import tracemalloc
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import gguf
import pytest
from gguf import GGMLQuantizationType as T, GGUFValueType as V
from hypothesis import HealthCheck, given, settings, strategies as st

from ggaudit.format.build import Typed, encode_kv, encode_string, encode_tensor_info, gguf_bytes, TensorSpec
from ggaudit.errors import FormatError, ReadError
from ggaudit.format.layout import (MAX_ARRAY_DEPTH, MAX_ARRAY_STRINGS, MAX_ARRAYS, MAX_KEPT_TEXT, MAX_METADATA,
                                   MAX_STRING, MAX_TENSORS, open_gguf, open_model)

from support import load_script
import itertools

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HEAD = 24  # magic, version, tensor count, metadata count


def head(n_tensors: int, n_kv: int, *, version: int = 3, magic: bytes = b"GGUF") -> bytes:
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def write(tmp_path: Path, data: bytes, name: str = "hostile.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def fails(path: Path, offset: int | None, field: str, opener: Any = open_gguf,
          culprit: Path | None = None) -> FormatError:
    """Open *path*, expect a FormatError about *culprit* (default: *path*) at *offset* in *field*."""
    with pytest.raises(FormatError) as info:
        opener(path)
    err = info.value
    assert (err.path, err.offset, err.field) == (str(culprit or path), offset, field), str(err)
    assert str(err).startswith(str(culprit or path)), "the message names the file first"
    return err


def kv_value_at(key: str, at: int = HEAD) -> int:
    """Offset of the value of a metadata pair whose key starts at *at*."""
    return at + len(encode_string(key)) + 4


def tensor_file(infos: Sequence[bytes], kvs: Sequence[bytes] = (), data: int = 1024,
                alignment: int = 32) -> tuple[bytes, list[int]]:
    """A GGUF with raw tensor infos and *data* zero bytes after the aligned header; info start offsets."""
    body = head(len(infos), len(kvs)) + b"".join(kvs)
    starts = []
    for info in infos:
        starts.append(len(body))
        body += info
    body += bytes(-len(body) % alignment)
    return body + bytes(data), starts


def info_fields(start: int, name: str, n_dims: int) -> dict[str, int]:
    """Absolute offsets of the fields of a tensor info starting at *start*."""
    n_dims_at = start + len(encode_string(name))
    out = {"n_dims": n_dims_at}
    out.update({f"ne[{d}]": n_dims_at + 4 + 8 * d for d in range(n_dims)})
    out["type"] = n_dims_at + 4 + 8 * n_dims
    out["offset"] = out["type"] + 4
    return out


# ---------------------------------------------------------------- fixed header

def test_bad_magic(tmp_path: Path) -> None:
    err = fails(write(tmp_path, head(0, 0, magic=b"GGML")), 0, "magic")
    assert err.message.startswith("not a GGUF file (its first bytes are b'GGML\\x03")


def test_empty_file(tmp_path: Path) -> None:
    fails(write(tmp_path, b""), 0, "magic")


@pytest.mark.parametrize("version", [0, 1, 4, 0xFFFF_FFFF])
def test_unsupported_version(tmp_path: Path, version: int) -> None:
    err = fails(write(tmp_path, head(0, 0, version=version)), 4, "version")
    assert f"version {version}" in err.message


@pytest.mark.parametrize("version", [2, 3])
def test_big_endian_file_is_detected(tmp_path: Path, version: int) -> None:
    data = b"GGUF" + struct.pack(">IQQ", version, 0, 0)
    err = fails(write(tmp_path, data), 4, "version")
    assert "big-endian" in err.message


def test_truncated_fixed_header(tmp_path: Path) -> None:
    fails(write(tmp_path, b"GGUF" + struct.pack("<I", 3) + b"\0\0"), 8, "tensor_count")


def test_tensor_count_that_cannot_fit(tmp_path: Path) -> None:
    fails(write(tmp_path, head(10**6, 0) + bytes(1000)), 8, "tensor_count")


def test_metadata_count_that_cannot_fit(tmp_path: Path) -> None:
    fails(write(tmp_path, head(0, 10**6) + bytes(1000)), 16, "metadata_kv_count")


def test_tensor_count_that_cannot_fit_after_the_metadata(tmp_path: Path) -> None:
    kv = encode_kv("general.name", "x" * 1000)
    tail = bytes(100)
    n_tensors = (len(kv) + len(tail)) // 32  # fits the whole file, not what the metadata leaves
    err = fails(write(tmp_path, head(n_tensors, 1) + kv + tail), 8, "tensor_count")
    assert "after the metadata" in err.message


# ---------------------------------------------------------------- metadata

def test_key_length_past_eof(tmp_path: Path) -> None:
    fails(write(tmp_path, head(0, 1) + struct.pack("<Q", 1000) + b"abcdefghijklm"), HEAD, "metadata[0].key")


@pytest.mark.parametrize("length", [1000, 1 << 62, (1 << 64) - 1])
def test_string_value_length_past_eof(tmp_path: Path, length: int) -> None:
    data = head(0, 1) + encode_string("k") + struct.pack("<IQ", V.STRING, length) + b"x" * 16
    fails(write(tmp_path, data), kv_value_at("k"), "metadata[k]")


def test_array_count_past_eof(tmp_path: Path) -> None:
    data = head(0, 1) + encode_string("k") + struct.pack("<IIQ", V.ARRAY, V.UINT32, 1 << 40) + bytes(64)
    fails(write(tmp_path, data), kv_value_at("k") + 4, "metadata[k]")


def test_string_in_array_head_past_eof(tmp_path: Path) -> None:
    items = encode_string("a") + encode_string("b")
    data = head(0, 1) + encode_string("k") + struct.pack("<IIQ", V.ARRAY, V.STRING, 3) + items
    data += struct.pack("<Q", 10**6) + bytes(16)
    fails(write(tmp_path, data), kv_value_at("k") + 12 + len(items), "metadata[k][2]")


def test_string_in_array_tail_past_eof(tmp_path: Path) -> None:
    # Past the decoded head, strings are only walked: the walk checks lengths too.
    items = b"".join(encode_string(f"tok{i}") for i in range(18))
    data = head(0, 1) + encode_string("k") + struct.pack("<IIQ", V.ARRAY, V.STRING, 20) + items
    data += struct.pack("<Q", 10**6) + bytes(16)
    fails(write(tmp_path, data), kv_value_at("k") + 12 + len(items), "metadata[k]")


@pytest.mark.parametrize("vtype", [13, 255, 0xFFFF_FFFF])
def test_unknown_metadata_value_type(tmp_path: Path, vtype: int) -> None:
    data = head(0, 1) + encode_string("k") + struct.pack("<I", vtype) + bytes(16)
    err = fails(write(tmp_path, data), kv_value_at("k") - 4, "metadata[k]")
    assert f"value type {vtype}" in err.message


def test_unknown_array_element_type(tmp_path: Path) -> None:
    data = head(0, 1) + encode_string("k") + struct.pack("<IIQ", V.ARRAY, 13, 1) + bytes(16)
    fails(write(tmp_path, data), kv_value_at("k"), "metadata[k]")


def test_arrays_nested_too_deep(tmp_path: Path) -> None:
    nested = struct.pack("<IQ", V.ARRAY, 1) * MAX_ARRAY_DEPTH + struct.pack("<IQ", V.UINT8, 1) + bytes(64)
    data = head(0, 1) + encode_string("k") + struct.pack("<I", V.ARRAY) + nested
    fails(write(tmp_path, data), kv_value_at("k") + 12 * MAX_ARRAY_DEPTH,
          "metadata[k]" + "[0]" * MAX_ARRAY_DEPTH)


def test_too_many_arrays(tmp_path: Path) -> None:
    # Each empty nested array is 12 bytes but costs a Python call: the count of arrays is capped.
    data = head(0, 1) + encode_string("k") + struct.pack("<IIQ", V.ARRAY, V.ARRAY, MAX_ARRAYS)
    data += struct.pack("<IQ", V.UINT8, 0) * MAX_ARRAYS
    # The outer array is the first; the inner one at index MAX_ARRAYS - 1 is one too many.
    fails(write(tmp_path, data), kv_value_at("k") + 12 + 12 * (MAX_ARRAYS - 1), f"metadata[k][{MAX_ARRAYS - 1}]")


def test_string_longer_than_the_limit_in_a_file_that_holds_it(tmp_path: Path) -> None:
    path = write(tmp_path, head(0, 1) + encode_string("k") + struct.pack("<IQ", V.STRING, MAX_STRING + 1))
    os.truncate(path, MAX_STRING + 4096)  # sparse
    err = fails(path, kv_value_at("k"), "metadata[k]")
    assert "absurd" in err.message


def test_kept_text_is_bounded(tmp_path: Path) -> None:
    # Strings that each pass MAX_STRING but together would be kept past MAX_KEPT_TEXT.
    n = MAX_STRING - 16
    count = MAX_KEPT_TEXT // n + 1
    path = tmp_path / "text.gguf"
    starts = []
    with open(path, "wb") as f:
        f.write(head(0, count))
        for i in range(count):
            f.write(encode_string(f"k{i}") + struct.pack("<IQ", V.STRING, n))
            starts.append(f.tell() - 8)
            f.seek(n, os.SEEK_CUR)  # a hole reads as n NUL bytes
        f.truncate()
    tracemalloc.start()
    try:
        fails(path, starts[-1], f"metadata[k{count - 1}]")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"peak {peak} bytes"


def test_duplicate_metadata_key(tmp_path: Path) -> None:
    first = encode_kv("general.name", "a")
    data = head(0, 2) + first + encode_kv("general.name", "b") + bytes(16)
    fails(write(tmp_path, data), HEAD + len(first), "metadata[general.name]")


@pytest.mark.parametrize("alignment", [Typed(V.UINT32, 0), Typed(V.UINT32, 48), Typed(V.UINT64, 64),
                                       Typed(V.INT32, 32), "32"], ids=repr)
def test_bad_alignment_value(tmp_path: Path, alignment: Any) -> None:
    data, _ = tensor_file([encode_tensor_info("w", T.F32, (8,), 0)], [encode_kv("general.alignment", alignment)])
    fails(write(tmp_path, data), kv_value_at("general.alignment"), "general.alignment")


@pytest.mark.parametrize("alignment, stored", [
    (Typed(V.UINT64, 64), "uint64"), (Typed(V.INT32, 32), "int32"), (Typed(V.UINT16, 32), "uint16"),
    (Typed(V.UINT8, 32), "uint8"), (Typed(V.INT64, 32), "int64"), (Typed(V.FLOAT32, 32.0), "float32"),
    (True, "bool"), ("32", "string"), ([32], "array")])
def test_an_alignment_stored_as_another_type_than_u32_is_refused_naming_that_type(tmp_path: Path, alignment: Any,
                                                                                  stored: str) -> None:
    # ggml's ggml/src/gguf.cpp (gguf_init_from_reader) refuses the file, not the value, whatever the value:
    # "key 'general.alignment' must be of type u32 but is u64". A power of two stored as u64 is no
    # "not a power of two (u32)".
    data, _ = tensor_file([encode_tensor_info("w", T.F32, (8,), 0)], [encode_kv("general.alignment", alignment)])
    err = fails(write(tmp_path, data), kv_value_at("general.alignment"), "general.alignment")
    assert err.message == f"alignment is stored as {stored}; GGUF requires uint32"


@pytest.mark.parametrize("value", [0, 48, 2**32 - 1])
def test_a_u32_alignment_that_is_not_a_power_of_two_says_so(tmp_path: Path, value: int) -> None:
    kv = encode_kv("general.alignment", Typed(V.UINT32, value))
    data, _ = tensor_file([encode_tensor_info("w", T.F32, (8,), 0)], [kv])
    err = fails(write(tmp_path, data), kv_value_at("general.alignment"), "general.alignment")
    assert err.message == f"alignment {value} is not a power of two"


# ---------------------------------------------------------------- tensor infos

def test_tensor_name_length_past_eof(tmp_path: Path) -> None:
    fails(write(tmp_path, head(1, 0) + struct.pack("<Q", 10**9) + bytes(40)), HEAD, "tensor[0].name")


@pytest.mark.parametrize("type_id", [4, 5, 99, 0xFFFF_FFFF])
def test_unknown_ggml_type(tmp_path: Path, type_id: int) -> None:
    data, (start,) = tensor_file([encode_tensor_info("w", type_id, (32,), 0)])
    err = fails(write(tmp_path, data), info_fields(start, "w", 1)["type"], "tensor[w].type")
    assert f"GGML type {type_id}" in err.message


@pytest.mark.parametrize("shape", [(), (32, 1, 1, 1, 1)], ids=["0-dims", "5-dims"])
def test_n_dims_outside_1_to_4(tmp_path: Path, shape: tuple[int, ...]) -> None:
    data, (start,) = tensor_file([encode_tensor_info("w", T.F32, shape, 0)])
    fails(write(tmp_path, data), info_fields(start, "w", 0)["n_dims"], "tensor[w].n_dims")


def test_huge_n_dims(tmp_path: Path) -> None:
    info = encode_string("w") + struct.pack("<I", 0xFFFF_FFFF) + bytes(64)
    data, (start,) = tensor_file([info])
    fails(write(tmp_path, data), info_fields(start, "w", 0)["n_dims"], "tensor[w].n_dims")


@pytest.mark.parametrize("shape,dim", [((32, 0), 1), ((0,), 0), ((-32, 2), 0), ((32, 2, -1), 2)])
def test_zero_or_negative_dimension(tmp_path: Path, shape: tuple[int, ...], dim: int) -> None:
    data, (start,) = tensor_file([encode_tensor_info("w", T.F32, shape, 0)])
    fails(write(tmp_path, data), info_fields(start, "w", len(shape))[f"ne[{dim}]"], f"tensor[w].ne[{dim}]")


@pytest.mark.parametrize("shape,dim", [((1 << 32, 1 << 32), 1), ((1 << 20, 1 << 20, 1 << 20, 1 << 20), 3),
                                       ((1 << 61, 2, 2), 2)])
def test_overflowing_dimensions(tmp_path: Path, shape: tuple[int, ...], dim: int) -> None:
    data, (start,) = tensor_file([encode_tensor_info("w", T.F32, shape, 0)])
    err = fails(write(tmp_path, data), info_fields(start, "w", len(shape))[f"ne[{dim}]"], f"tensor[w].ne[{dim}]")
    assert "overflow" in err.message


@pytest.mark.parametrize("ggml_type,ne0", [(T.Q4_0, 48), (T.Q4_K, 128), (T.NVFP4, 32), (T.Q1_0, 64)])
def test_ne0_not_a_multiple_of_the_block_size(tmp_path: Path, ggml_type: T, ne0: int) -> None:
    data, (start,) = tensor_file([encode_tensor_info("w", ggml_type, (ne0, 2), 0)])
    fails(write(tmp_path, data), info_fields(start, "w", 2)["ne[0]"], "tensor[w].ne[0]")


@pytest.mark.parametrize("rel", [1, 16, 31, 33])
def test_misaligned_tensor_offset(tmp_path: Path, rel: int) -> None:
    data, (start,) = tensor_file([encode_tensor_info("w", T.F32, (8,), rel)])
    fails(write(tmp_path, data), info_fields(start, "w", 1)["offset"], "tensor[w].offset")


def test_offset_misaligned_for_a_custom_alignment(tmp_path: Path) -> None:
    kv = encode_kv("general.alignment", Typed(V.UINT32, 64))
    infos = [encode_tensor_info("a", T.F32, (8,), 0), encode_tensor_info("b", T.F32, (8,), 32)]
    data, (_, start) = tensor_file(infos, [kv], alignment=64)
    fails(write(tmp_path, data), info_fields(start, "b", 1)["offset"], "tensor[b].offset")


def test_custom_alignment_is_honoured(tmp_path: Path) -> None:
    tensors = [TensorSpec("a", T.F32, (8,), bytes(32)), TensorSpec("b", T.F32, (8,), bytes(32))]
    data, offsets = gguf_bytes(tensors, {"general.name": "x"}, alignment=64)
    f = open_gguf(write(tmp_path, data))
    assert f.alignment == 64 and f.data_offset % 64 == 0
    assert {t.name: t.offset for t in f.tensors} == offsets == {"a": f.data_offset, "b": f.data_offset + 64}


def test_tensor_data_past_eof(tmp_path: Path) -> None:
    infos = [encode_tensor_info("a", T.F32, (32,), 0), encode_tensor_info("b", T.F32, (32, 4), 128)]
    data, (_, start) = tensor_file(infos, data=128 + 511)  # one byte short
    err = fails(write(tmp_path, data), info_fields(start, "b", 2)["offset"], "tensor[b].offset")
    assert "past the end" in err.message


def test_tensor_offset_far_past_eof(tmp_path: Path) -> None:
    data, (start,) = tensor_file([encode_tensor_info("w", T.F32, (8,), 1 << 62)])
    fails(write(tmp_path, data), info_fields(start, "w", 1)["offset"], "tensor[w].offset")


@pytest.mark.parametrize("rel_b", [0, 64, 96])
def test_overlapping_tensors(tmp_path: Path, rel_b: int) -> None:
    # a covers [0, 128); b starts inside it. Infos are listed b first: order in the table does not matter.
    infos = [encode_tensor_info("b", T.F32, (8,), rel_b), encode_tensor_info("a", T.F32, (32,), 0)]
    data, (start_b, start_a) = tensor_file(infos)
    name, start = ("b", start_b) if rel_b > 0 else ("a", start_a)  # the one that starts later is reported
    fails(write(tmp_path, data), info_fields(start, name, 1)["offset"], f"tensor[{name}].offset")


def test_adjacent_tensors_do_not_overlap(tmp_path: Path) -> None:
    infos = [encode_tensor_info("a", T.F32, (32,), 0), encode_tensor_info("b", T.F32, (8,), 128)]
    data, _ = tensor_file(infos)
    assert [t.offset for t in open_gguf(write(tmp_path, data)).tensors] == [len(data) - 1024, len(data) - 896]


def test_duplicate_tensor_names(tmp_path: Path) -> None:
    infos = [encode_tensor_info("w", T.F32, (8,), 0), encode_tensor_info("w", T.F32, (8,), 32)]
    data, (_, second) = tensor_file(infos)
    fails(write(tmp_path, data), second, "tensor[w]")


# ---------------------------------------------------------------- split sets

SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")


def shard(tmp_path: Path, name: str, tensors: Sequence[str], no: int | None, count: int, total: int,
          extra: dict[str, Any] | None = None) -> bytes:
    meta: dict[str, Any] = {"general.architecture": "llama"} if no == 0 else {}
    if no is not None:
        meta["split.no"] = Typed(V.UINT16, no)
    meta["split.count"] = Typed(V.UINT16, count)
    meta["split.tensors.count"] = Typed(V.INT32, total)
    meta.update(extra or {})
    data, _ = gguf_bytes([TensorSpec(t, T.F32, (8,), bytes(32)) for t in tensors], meta)
    write(tmp_path, data, name)
    return data


def value_offset(data: bytes, key: str) -> int:
    return data.index(encode_string(key)) + len(encode_string(key)) + 4


def test_missing_shard(tmp_path: Path) -> None:
    shard(tmp_path, "m-00001-of-00003.gguf", ["a"], 0, 3, 3)
    shard(tmp_path, "m-00003-of-00003.gguf", ["c"], 2, 3, 3)
    for start in ("m-00001-of-00003.gguf", "m-00003-of-00003.gguf"):
        fails(tmp_path / start, None, "split", open_model, tmp_path / "m-00002-of-00003.gguf")


def test_shard_from_a_different_set(tmp_path: Path) -> None:
    shard(tmp_path, "m-00001-of-00002.gguf", ["a", "b"], 0, 2, 4)
    other = shard(tmp_path, "m-00002-of-00002.gguf", ["x"], 1, 2, 3)
    fails(tmp_path / "m-00001-of-00002.gguf", value_offset(other, "split.tensors.count"), "split.tensors.count",
          open_model, tmp_path / "m-00002-of-00002.gguf")


def test_disagreeing_split_no(tmp_path: Path) -> None:
    shard(tmp_path, "m-00001-of-00002.gguf", ["a"], 0, 2, 2)
    second = shard(tmp_path, "m-00002-of-00002.gguf", ["b"], 0, 2, 2)
    fails(tmp_path / "m-00001-of-00002.gguf", value_offset(second, "split.no"), "split.no", open_model,
          tmp_path / "m-00002-of-00002.gguf")


def test_split_count_disagrees_with_the_name(tmp_path: Path) -> None:
    first = shard(tmp_path, "m-00001-of-00002.gguf", ["a"], 0, 3, 2)
    fails(tmp_path / "m-00001-of-00002.gguf", value_offset(first, "split.count"), "split.count", open_model)


def test_split_count_in_a_file_without_a_split_name(tmp_path: Path) -> None:
    data = shard(tmp_path, "model.gguf", ["a"], 0, 2, 2)
    fails(tmp_path / "model.gguf", value_offset(data, "split.count"), "split.count", open_model)


def test_disagreeing_split_count(tmp_path: Path) -> None:
    shard(tmp_path, "m-00001-of-00002.gguf", ["a"], 0, 2, 2)
    second = shard(tmp_path, "m-00002-of-00002.gguf", ["b"], 1, 3, 2)
    fails(tmp_path / "m-00001-of-00002.gguf", value_offset(second, "split.count"), "split.count", open_model,
          tmp_path / "m-00002-of-00002.gguf")


def test_shard_without_split_no(tmp_path: Path) -> None:
    shard(tmp_path, "m-00001-of-00002.gguf", ["a"], 0, 2, 2)
    shard(tmp_path, "m-00002-of-00002.gguf", ["b"], None, 2, 2)
    fails(tmp_path / "m-00001-of-00002.gguf", None, "split.no", open_model, tmp_path / "m-00002-of-00002.gguf")


def test_split_tensor_total_disagrees_with_the_shards(tmp_path: Path) -> None:
    first = shard(tmp_path, "m-00001-of-00002.gguf", ["a"], 0, 2, 5)
    shard(tmp_path, "m-00002-of-00002.gguf", ["b"], 1, 2, 5)
    fails(tmp_path / "m-00002-of-00002.gguf", value_offset(first, "split.tensors.count"), "split.tensors.count",
          open_model, tmp_path / "m-00001-of-00002.gguf")


def test_tensor_stored_in_two_shards(tmp_path: Path) -> None:
    shard(tmp_path, "m-00001-of-00002.gguf", ["a", "b"], 0, 2, 3)
    second = shard(tmp_path, "m-00002-of-00002.gguf", ["b"], 1, 2, 3)
    fails(tmp_path / "m-00001-of-00002.gguf", second.index(encode_string("b") + struct.pack("<I", 1)),
          "tensor[b]", open_model, tmp_path / "m-00002-of-00002.gguf")


# ---------------------------------------------------------------- agreement with gguf.GGUFReader

FIXTURE_FILES = sorted(p.name for p in FIXTURES.glob("*.gguf"))


check_real_gguf = load_script("check_real_gguf")


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_layout_matches_gguf_reader(name: str) -> None:
    """The same comparison scripts/check_real_gguf.py runs on third-party files (llama.cpp's own GGUFs)."""
    path = FIXTURES / name
    ours = open_gguf(path)
    assert check_real_gguf.header_differences(ours, gguf.GGUFReader(path)) == []
    assert ours.size == path.stat().st_size
    for t, r in zip(ours.tensors, gguf.GGUFReader(path).tensors, strict=False):
        rows = int(r.n_elements) // int(r.shape[0])
        assert (t.n_rows, t.row_bytes) == (rows, int(r.n_bytes) // rows)
        assert t.path == str(path) and type(t.offset) is int


def test_the_comparison_with_gguf_reader_names_each_difference() -> None:
    path = FIXTURES / "ple_iq4_nl.gguf"
    ours, ref = open_gguf(path), gguf.GGUFReader(path)
    ple = ours.tensors[1]
    moved = dataclasses.replace(ple, offset=ple.offset + 32)
    key = "general.architecture"
    renamed = dataclasses.replace(ours.metadata[key], value="llama")
    changed = dataclasses.replace(ours, tensors=(ours.tensors[0], moved),
                                  metadata={**ours.metadata, key: renamed})
    assert check_real_gguf.header_differences(changed, ref) == [
        f"tensor 'per_layer_token_embd.weight': {(ple.name, ple.ggml_type, ple.shape, ple.offset + 32, ple.nbytes)}"
        f" != {(ple.name, ple.ggml_type, ple.shape, ple.offset, ple.nbytes)}",
        "general.architecture: 'llama' != 'gemma3n'",
    ]


@pytest.mark.parametrize("given", ["split-00001-of-00002.gguf", "split-00002-of-00002.gguf"])
def test_split_set_opens_from_any_shard(given: str) -> None:
    model = open_model(FIXTURES / given)
    shards = [FIXTURES / "split-00001-of-00002.gguf", FIXTURES / "split-00002-of-00002.gguf"]
    assert [f.path for f in model.files] == [str(p) for p in shards]
    expected = []
    for p in shards:
        ref = gguf.GGUFReader(p)
        expected += [(t.name, str(p), int(t.data_offset), int(t.n_bytes)) for t in ref.tensors]
    assert [(t.name, t.path, t.offset, t.nbytes) for t in model.tensors] == expected
    assert model.architecture == "llama" and model.source == str(FIXTURES / given)
    assert model.tensor("blk.0.ffn_down.weight").path == str(shards[1])


def test_single_file_model() -> None:
    model = open_model(FIXTURES / "ple_iq4_nl.gguf")
    assert len(model.files) == 1 and model.architecture == "gemma3n"
    ple = model.tensor("per_layer_token_embd.weight")
    assert (ple.ggml_type, ple.row_bytes, ple.n_rows, ple.blocks_per_row) == (T.IQ4_NL, 90, 1024, 5)
    assert ple.row_offset(1023) == ple.offset + 1023 * 90 == ple.end - 90


def test_string_array_longer_than_the_read_window(tmp_path: Path) -> None:
    # ~1.6 MB of strings of varied length: the walk crosses the 1 MiB window edge mid-string.
    tokens = [f"tok{i}" + "x" * (i % 7) for i in range(120_000)]
    meta = {"tokenizer.ggml.tokens": tokens, "general.name": "after"}
    data, offsets = gguf_bytes([TensorSpec("w", T.F32, (8,), bytes(32))], meta)
    assert len(data) > 1_500_000
    f = open_gguf(write(tmp_path, data))
    arr = f.metadata["tokenizer.ggml.tokens"].value
    assert (arr.elem_type, arr.count, arr.head) == (V.STRING, len(tokens), tuple(tokens[:len(arr.head)]))
    assert f.meta("general.name") == "after"
    assert f.metadata["general.name"].offset == data.index(encode_string("after"))
    assert [t.offset for t in f.tensors] == [offsets["w"]]


def test_version_2_is_read(tmp_path: Path) -> None:
    data, _ = gguf_bytes([TensorSpec("w", T.F16, (16, 2), bytes(64))], {"general.name": "v2"}, version=2)
    f = open_gguf(write(tmp_path, data))
    assert f.version == 2 and f.tensors[0].shape == (16, 2)


# ---------------------------------------------------------------- hostile input at large

_HEADERS = {name: (FIXTURES / name).read_bytes() for name in
            ("all_types.gguf", "split-00002-of-00002.gguf", "ple_q8_0.gguf")}
_INTERESTING = [0, 1, 2, 31, 32, 0x7F, 0xFF, 0xFFFF, 1 << 31, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, 1 << 63,
                (1 << 64) - 1]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from(sorted(_HEADERS)))
    data = bytearray(_HEADERS[name])
    header_end = open_gguf(FIXTURES / name).data_offset
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, header_end - 1))
        if draw(st.booleans()):
            data[at] = draw(st.integers(0, 255))
        else:
            word = draw(st.sampled_from(_INTERESTING)).to_bytes(8, "little")
            data[at:at + 8] = word[:len(data[at:at + 8])]
    if draw(st.booleans()):
        del data[draw(st.integers(0, len(data))):]
    return bytes(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated())
def test_mutated_headers_only_raise_format_errors(tmp_path: Path, data: bytes) -> None:
    path = write(tmp_path, data, "mutated.gguf")
    try:
        f = open_gguf(path)
    except (FormatError, ReadError) as err:
        assert err.offset is None or 0 <= err.offset <= len(data), str(err)
        assert err.field and "\n" not in str(err)
        return
    ends = sorted((t.offset, t.end) for t in f.tensors)
    assert all(end <= len(data) for _, end in ends)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(ends))


@pytest.mark.parametrize("counts", [(1 << 40, 0), (0, 1 << 40), (1 << 64) - 1], ids=["tensors", "kvs", "both"])
def test_huge_claims_are_rejected_fast_in_bounded_memory(tmp_path: Path, counts: Any) -> None:
    n_tensors, n_kv = counts if isinstance(counts, tuple) else (counts, counts)
    path = tmp_path / "claims.gguf"
    path.write_bytes(head(n_tensors, n_kv))
    os.truncate(path, 64 << 20)  # sparse: 64 MiB of claimed room
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(FormatError) as info:
            open_gguf(path)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.field in ("tensor_count", "metadata_kv_count")
    assert peak < 64 << 20, f"peak {peak} bytes"
    assert elapsed < 1.0, f"{elapsed:.3f} s"


def test_huge_array_claim_is_rejected_fast_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "array.gguf"
    path.write_bytes(head(0, 1) + encode_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", V.ARRAY, V.STRING,
                                                                                        1 << 40))
    os.truncate(path, 64 << 20)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        err = fails(path, kv_value_at("tokenizer.ggml.tokens") + 4, "metadata[tokenizer.ggml.tokens]")
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "cannot fit" in err.message
    assert peak < 64 << 20 and elapsed < 1.0


def test_more_tensors_than_the_limit_fail_before_any_is_parsed(tmp_path: Path) -> None:
    # Room for every claimed entry, so only the cap can refuse it; parsing them would take seconds.
    path = write(tmp_path, head(MAX_TENSORS + 1, 0) + bytes(32 * (MAX_TENSORS + 1)))
    start = time.perf_counter()
    err = fails(path, 8, "tensor_count")
    assert time.perf_counter() - start < 0.5
    assert err.message == f"{MAX_TENSORS + 1} tensors is more than ggaudit reads (limit {MAX_TENSORS})"


def test_more_metadata_pairs_than_the_limit_fail_before_any_is_parsed(tmp_path: Path) -> None:
    # Room for every claimed pair, so only the cap can refuse it: two million tiny pairs took 30 s.
    path = write(tmp_path, head(0, MAX_METADATA + 1) + bytes(13 * (MAX_METADATA + 1)))
    start = time.perf_counter()
    err = fails(path, 16, "metadata_kv_count")
    assert time.perf_counter() - start < 0.5
    assert err.message == f"{MAX_METADATA + 1} metadata pairs is more than ggaudit reads (limit {MAX_METADATA})"


def test_more_array_strings_than_the_limit_fail_before_they_are_walked(tmp_path: Path) -> None:
    small = encode_string("a") + struct.pack("<IIQ", V.ARRAY, V.STRING, 3) + encode_string("x") * 3
    count = MAX_ARRAY_STRINGS - 3 + 1  # with the first array's 3, one string too many
    big = encode_string("b") + struct.pack("<IIQ", V.ARRAY, V.STRING, count)
    data = head(0, 2) + small + big
    path = write(tmp_path, data + bytes(8 * count))  # room for every claimed (empty) string
    start = time.perf_counter()
    err = fails(path, len(data) - 8, "metadata[b]")
    assert time.perf_counter() - start < 0.5
    assert err.message == f"the header's arrays hold more than {MAX_ARRAY_STRINGS} strings"
