"""Resource bounds on hostile headers (issue 6).

Every count and length read from a file is checked against the bytes that remain before anything is
allocated or looped over, so a header that lies is rejected at once, with little memory, whatever it
claims. Where a header does hold what it claims (millions of tiny nested arrays, many 16 MiB strings)
the work ggaudit keeps in memory or does in Python is capped. Each case asserts the exact offset and
field, and the time and traced memory it took. Big files here are sparse: holes cost no disk.
"""

from __future__ import annotations

import os
import struct
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import pytest

from ggaudit.format import layout
from ggaudit.format.build import write_gguf
from ggaudit.errors import FormatError, ManifestError
from ggaudit.stores.small_files import MAX_MANIFEST_BYTES
from ggaudit.stores.ollama import parse_ollama_name, read_ollama_manifest
from ggaudit.stores.sums import read_sums
from ggaudit.verify.manifests.tensor import read_tensor_manifest
from ggaudit.stores.small_files import MAX_JSON_CONTAINERS, MAX_JSON_STRINGS
from ggaudit.stores.sums import MAX_SUMS_LINES
from ggaudit.format.layout import open_gguf

from support import RICH_METADATA, all_types_specs, assert_one_line_error, run_cli, walk_header

MiB = 1 << 20
#: The issue's bound for rejecting any malformed header; time is a generous hang guard (CI is shared).
MEMORY_BOUND = 64 * MiB
TIME_BOUND = 2.0


def s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def head(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def kv_array(key: bytes, etype: int, count: int) -> bytes:
    return s(key) + struct.pack("<IIQ", 9, etype, count)


def tensor_info(name: bytes, dims: list[int], ggml_type: int = 0, offset: int = 0) -> bytes:
    return (s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<q", d) for d in dims)
            + struct.pack("<IQ", ggml_type, offset))


def nested_arrays(depth: int, fanout: int) -> bytes:
    """An array of ``fanout`` arrays of ... of empty u32 arrays, ``depth`` levels below the top."""
    if depth == 0:
        return struct.pack("<IQ", 4, 0)
    return struct.pack("<IQ", 9, fanout) + nested_arrays(depth - 1, fanout) * fanout


@dataclass(frozen=True)
class Case:
    id: str
    data: bytes
    size: int           # the file is extended (sparsely) to this many bytes
    offset: int
    field: str
    says: str


_STR_AT = 24                    # the first metadata key's length field
_ARRAY_COUNT_AT = 24 + 8 + 1 + 4 + 4    # key "k", value type, element type, then the count
_TENSOR_AT = 24                 # the first tensor info when there is no metadata

CASES = [
    Case("tensor-count-2^40", head(1 << 40, 0), 64 * MiB, 8, "tensor_count", "cannot fit"),
    Case("kv-count-2^63", head(0, 1 << 63), 64 * MiB, 16, "metadata_kv_count", "cannot fit"),
    Case("key-length-2^64-1", head(0, 1) + struct.pack("<Q", (1 << 64) - 1), 64 * MiB, _STR_AT,
         "metadata[0].key", "absurd"),
    Case("key-length-past-eof", head(0, 1) + struct.pack("<Q", 9 * MiB), 8 * MiB, _STR_AT,
         "metadata[0].key", "runs past the end"),
    Case("key-length-over-limit", head(0, 1) + struct.pack("<Q", layout.MAX_STRING + 1), 64 * MiB, _STR_AT,
         "metadata[0].key", "absurd"),
    Case("u8-array-count-2^62", head(0, 1) + kv_array(b"k", 0, 1 << 62), 64 * MiB, _ARRAY_COUNT_AT,
         "metadata[k]", "cannot fit"),
    Case("string-array-count-2^60", head(0, 1) + kv_array(b"k", 8, 1 << 60), 64 * MiB, _ARRAY_COUNT_AT,
         "metadata[k]", "cannot fit"),
    Case("array-array-count-2^61", head(0, 1) + kv_array(b"k", 9, 1 << 61), 64 * MiB, _ARRAY_COUNT_AT,
         "metadata[k]", "cannot fit"),
    Case("n-dims-2^32-1", head(1, 0) + s(b"t") + struct.pack("<I", (1 << 32) - 1), 64 * MiB, _TENSOR_AT + 9,
         "tensor[t].n_dims", "outside 1..4"),
    Case("dims-overflow", head(1, 0) + tensor_info(b"t", [1 << 40, 1 << 40]), 64 * MiB, _TENSOR_AT + 9 + 4 + 8,
         "tensor[t].ne[1]", "overflow"),
    Case("tensor-offset-2^64-32", head(1, 0) + tensor_info(b"t", [32], 0, (1 << 64) - 32), 64 * MiB,
         _TENSOR_AT + 9 + 4 + 8 + 4, "tensor[t].offset", "past the end"),
    # All zeros: key "" of type u8 = 0, then the same key again (tensor and pair counts within the caps,
    # so the metadata is parsed).
    Case("zero-filled-64MiB", head(layout.MAX_TENSORS, layout.MAX_METADATA), 64 * MiB, _STR_AT + 8 + 4 + 1,
         "metadata[]", "duplicate metadata key"),
    Case("metadata-count-2^20", head(0, 1 << 20), 64 * MiB, 16, "metadata_kv_count", "more than ggaudit reads"),
]


def _run(func: Callable[[], object]) -> BaseException | None:
    try:
        func()
    except BaseException as err:   # the test decides what was acceptable
        return err
    return None


def _measure(func: Callable[[], object]) -> tuple[BaseException | None, float, int]:
    """The error, the wall time of an untraced run, and the traced peak of a second run."""
    start = time.perf_counter()
    raised = _run(func)
    elapsed = time.perf_counter() - start
    tracemalloc.start()
    again = _run(func)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert type(again) is type(raised) and str(again) == str(raised)
    return raised, elapsed, peak


def _write(path: Path, data: bytes, size: int) -> Path:
    with open(path, "wb") as f:
        f.write(data)
        f.truncate(max(size, len(data)))
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_count_or_length_is_rejected_at_once(case: Case, tmp_path: Path) -> None:
    path = _write(tmp_path / f"{case.id}.gguf", case.data, case.size)
    err, elapsed, peak = _measure(lambda: open_gguf(path))
    assert isinstance(err, FormatError), repr(err)
    assert (err.offset, err.field) == (case.offset, case.field), str(err)
    assert case.says in err.message, str(err)
    assert elapsed < TIME_BOUND, elapsed
    # Nothing sized by the claim: at most the 1 MiB read window and small change.
    assert peak < 4 * MiB, peak


def test_cli_rejects_the_2_40_tensor_header_in_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "huge.gguf", CASES[0].data, CASES[0].size)
    assert_one_line_error(run_cli(["info", path]), str(path), "offset 8: tensor_count")


def test_arrays_nested_too_deep_are_rejected(tmp_path: Path) -> None:
    depth = layout.MAX_ARRAY_DEPTH + 1
    data = head(0, 1) + s(b"k") + struct.pack("<I", 9) + nested_arrays(depth, 1)
    path = _write(tmp_path / "deep.gguf", data, 0)
    with pytest.raises(FormatError) as caught:
        open_gguf(path)
    assert "nested deeper" in caught.value.message
    assert caught.value.field == "metadata[k]" + "[0]" * (depth - 1)


def test_millions_of_tiny_nested_arrays_are_capped_in_time(tmp_path: Path) -> None:
    # 16^5 (a million) empty arrays in 12 MiB: before the cap this took ~60 s and 114 MiB to walk.
    data = head(0, 1) + s(b"k") + struct.pack("<I", 9) + nested_arrays(5, 16)
    path = _write(tmp_path / "nested.gguf", data, 0)
    start = time.perf_counter()
    err = _run(lambda: open_gguf(path))
    elapsed = time.perf_counter() - start
    assert isinstance(err, FormatError), repr(err)
    assert f"more than {layout.MAX_ARRAYS} arrays" in err.message
    assert err.field is not None and err.field.startswith("metadata[k][")
    assert elapsed < TIME_BOUND, elapsed


def test_walking_nested_arrays_keeps_memory_flat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Peak memory does not grow with the arrays walked: only heads near the top are kept.

    tracemalloc makes the walk ~15x slower, so this runs at a lowered cap, twice, and compares.
    """
    data = head(0, 1) + s(b"k") + struct.pack("<I", 9) + nested_arrays(5, 16)
    path = _write(tmp_path / "nested.gguf", data, 0)
    peaks = []
    for cap in (2_000, 8_000):
        monkeypatch.setattr(layout, "MAX_ARRAYS", cap)
        tracemalloc.start()
        err = _run(lambda: open_gguf(path))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert isinstance(err, FormatError) and f"more than {cap} arrays" in err.message
    assert peaks[1] < 4 * MiB and peaks[1] < 2 * peaks[0], peaks


def test_a_few_nested_arrays_still_open_with_bounded_heads(tmp_path: Path) -> None:
    data = head(0, 1) + s(b"k") + struct.pack("<I", 9) + nested_arrays(3, 4)
    path = _write(tmp_path / "few.gguf", data, 0)
    value = open_gguf(path).metadata["k"].value
    assert value.count == 4 and len(value.head) == 4
    assert value.head[0].count == 4 and len(value.head[0].head) == 4
    assert value.head[0].head[0].count == 4 and value.head[0].head[0].head == ()   # below HEAD_DEPTH


def test_many_maximal_strings_are_capped_in_memory(tmp_path: Path) -> None:
    # Eight 16 MiB string values (sparse: the bodies are holes, read as NUL) then a cut: before the
    # cap every one was decoded and kept, 144 MiB for a header that was going to be rejected anyway.
    n = 8
    path = tmp_path / "strings.gguf"
    with open(path, "wb") as f:
        f.write(head(0, n + 1))
        for i in range(n):
            f.write(s(f"k{i}".encode()) + struct.pack("<IQ", 8, layout.MAX_STRING))
            f.seek(layout.MAX_STRING, 1)
        f.write(struct.pack("<Q", 5))
    err, elapsed, peak = _measure(lambda: open_gguf(path))
    assert isinstance(err, FormatError), repr(err)
    assert "strings total more than" in err.message
    assert peak < MEMORY_BOUND, peak
    assert elapsed < TIME_BOUND, elapsed


def test_one_long_string_within_the_limits_is_kept_whole(tmp_path: Path) -> None:
    text = b"x" * (3 * MiB + 7)     # longer than the 1 MiB read window
    path = tmp_path / "long.gguf"
    path.write_bytes(head(0, 1) + s(b"chat") + struct.pack("<I", 8) + s(text))
    assert open_gguf(path).metadata["chat"].value == text.decode()


def test_truthful_tensor_count_costs_time_linear_in_the_header(tmp_path: Path) -> None:
    """A header that really holds N tensor infos is walked, once: doubling N about doubles the time."""
    def build(n: int) -> Path:
        infos = b"".join(tensor_info(b"%07d" % i, [32], 0, 0) for i in range(n))
        return _write(tmp_path / f"t{n}.gguf", head(n, 0) + infos, 0)

    def timed(path: Path) -> float:
        start = time.perf_counter()
        err = _run(lambda: open_gguf(path))
        assert isinstance(err, FormatError)      # every tensor claims data past the end of the file
        assert err.field == "tensor[0000000].offset"
        return time.perf_counter() - start

    small, big = build(2_500), build(20_000)
    t_small = min(timed(small) for _ in range(3))
    t_big = timed(big)
    assert t_big < max(8 * 4 * t_small, 0.5), (t_small, t_big)   # 8x the work: far from quadratic


def _manifest_reader(kind: str, folder: Path) -> tuple[Path, Callable[[], object]]:
    """Where a file of *kind* goes in *folder*, and the call that reads it."""
    if kind == "ollama-manifest":
        path = parse_ollama_name("m:latest").manifest_path(folder)
        path.parent.mkdir(parents=True)
        return path, lambda: read_ollama_manifest("m:latest", folder)
    path = folder / "manifest.txt"
    return path, (lambda: read_sums(path)) if kind == "sums" else (lambda: read_tensor_manifest(path))


@pytest.mark.parametrize("kind", ["sums", "tensor-manifest", "ollama-manifest"])
def test_huge_manifest_or_sums_file_is_refused_before_reading(kind: str, tmp_path: Path) -> None:
    path, call = _manifest_reader(kind, tmp_path)
    _write(path, b"0" * 64 + b"  x\n", 1 << 30)         # 1 GiB, sparse
    err, elapsed, peak = _measure(call)
    assert isinstance(err, ManifestError), repr(err)
    assert f"larger than {MAX_MANIFEST_BYTES} bytes" in err.message and err.path == str(path)
    assert peak < 1 * MiB, peak
    assert elapsed < TIME_BOUND


_CONTAINERS = ("{}," * MAX_JSON_CONTAINERS).encode()    # with the brackets around: one too many
_STRINGS = ('"",' * (MAX_JSON_STRINGS + 1)).encode()


@pytest.mark.parametrize("kind, body, message", [
    ("sums", b"# x\n" * (MAX_SUMS_LINES + 1), f"checksum file has more than {MAX_SUMS_LINES} lines"),
    ("sums", b"\n" * (MAX_SUMS_LINES + 1), f"checksum file has more than {MAX_SUMS_LINES} lines"),
    ("tensor-manifest", b"[" + _CONTAINERS + b"[]]",
     f"tensor manifest holds more than {MAX_JSON_CONTAINERS} objects and arrays"),
    ("ollama-manifest", b"[" + _CONTAINERS + b"[]]",
     f"manifest holds more than {MAX_JSON_CONTAINERS} objects and arrays"),
    ("tensor-manifest", b"[" + _STRINGS + b'""]', f"tensor manifest holds more than {MAX_JSON_STRINGS} strings"),
], ids=["sums-comments", "sums-blank", "tensor-manifest-objects", "ollama-manifest-objects", "tensor-manifest-strings"])
def test_manifest_or_sums_file_of_many_tiny_items_is_refused_before_it_is_parsed(
        kind: str, body: bytes, message: str, tmp_path: Path) -> None:
    """Small enough to be read, but parsing every item would cost far more memory than the file: 60 MiB
    of newlines made a 600 MB list, a 64 MiB file of "{}," would parse into 1.6 GB."""
    path, call = _manifest_reader(kind, tmp_path)
    path.write_bytes(body)
    err, elapsed, peak = _measure(call)
    assert isinstance(err, ManifestError), repr(err)
    assert err.message == message and err.path == str(path)
    assert peak < 3 * len(body) + MiB, (peak, len(body))   # the text, decoded once: nothing per item
    assert elapsed < TIME_BOUND


def test_every_count_length_dim_and_offset_of_a_real_header_survives_hostile_values(tmp_path: Path) -> None:
    """Systematic: each such field of a well-formed header (from an independent walk), set in turn to
    boundary values, is rejected (or accepted) quickly and with little memory; never anything else."""
    write_gguf(tmp_path / "rich.gguf", all_types_specs()[8:12], RICH_METADATA, alignment=64)
    data = (tmp_path / "rich.gguf").read_bytes()
    VALUES = (len(data), (1 << 32) - 1, (1 << 63) - 1, (1 << 64) - 1)
    fields, per_array = [], {}
    for leaf in walk_header(data).leaves:
        # Every field outside arrays; inside an array, its first two elements stand for the rest.
        seen = per_array[leaf.guards] = per_array.get(leaf.guards, 0) + 1
        if leaf.kind and (not leaf.guards or seen <= 2):
            fields.append(leaf)
    assert {leaf.kind for leaf in fields} == {"count", "length", "dim", "offset"}
    path = tmp_path / "patched.gguf"
    slowest, worst_peak, rejected = 0.0, 0, 0
    tracemalloc.start()
    try:
        for leaf in fields:
            width = 4 if leaf.kind == "count" and leaf.section == "tensor" else 8
            for value in VALUES:
                patched = bytearray(data)
                patched[leaf.start:leaf.start + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
                path.write_bytes(bytes(patched))
                tracemalloc.reset_peak()
                start = time.perf_counter()
                err = _run(lambda: open_gguf(path))
                slowest = max(slowest, time.perf_counter() - start)
                worst_peak = max(worst_peak, tracemalloc.get_traced_memory()[1])
                assert err is None or isinstance(err, FormatError), (leaf, value, repr(err))
                rejected += err is not None
    finally:
        tracemalloc.stop()
    assert rejected > 0.9 * len(fields) * len(VALUES)
    assert slowest < TIME_BOUND, slowest
    assert worst_peak < 4 * MiB, worst_peak


def test_a_manifest_that_grows_while_it_is_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the size found before reading is read, so a file growing meanwhile is said to have changed
    instead of being parsed cut short."""
    path = tmp_path / "SHA256SUMS"
    path.write_text("0" * 64 + "  a.gguf\n" + "1" * 64 + "  b.gguf\n")
    real_fstat = os.fstat

    def fstat_before_growth(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                               st.st_size - 20, int(st.st_atime), int(st.st_mtime), int(st.st_ctime)))

    monkeypatch.setattr(os, "fstat", fstat_before_growth)
    with pytest.raises(ManifestError) as err:
        read_sums(path)
    assert err.value.message == "checksum file grew while being read (changed while reading?)"
    assert err.value.path == str(path)
