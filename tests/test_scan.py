"""ggaudit.scan.run: every GGML type, a fault at a known place is found with exactly that tensor, row,
column, block, field, offset and bits; counts, limits, outliers, FP8 overrides, --deep agreement."""

from __future__ import annotations

import re
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
import gguf.quants

from ggaudit.scan import run as scan_module
from ggaudit.scan import kernel as kernel
from ggaudit.scan import workers as workers_module
from ggaudit.format.blocks import LAYOUTS, BlockLayout, Encoding, FloatField
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.io.fan_out import read_through
from ggaudit.io.hashing import Sha256
from ggaudit.errors import UsageError
from ggaudit.format.layout import open_model
from ggaudit.scan.report import Finding
from ggaudit.scan.run import ScanConsumer, deep_supported, scan

from scan_support import FLOAT_TYPES, INTEGER_TYPES, NONFINITE_BITS, QUANT_TYPES, finite_tensor, poke

ROWS = 3
CASES = [(t, f.name) for t in FLOAT_TYPES + QUANT_TYPES for f in LAYOUTS[t].fields
         if NONFINITE_BITS[f.encoding]]
#: Where the faults of each kind go: (row, block) in a [2 blocks, 3 rows] tensor, not in file order.
PLACES = {"nan": (2, 1), "+inf": (0, 0), "-inf": (1, 1)}


def _shape(layout: BlockLayout) -> tuple[int, int]:
    return (8 if layout.is_float_elements else 2 * layout.block_size, ROWS)


def _field(layout: BlockLayout, name: str) -> FloatField:
    return next(f for f in layout.fields if f.name == name)


def _expect(name: str, path: Path, layout: BlockLayout, offset: int, row: int, block: int, f: FloatField,
            kind: str, bits: int) -> dict[str, Any]:
    per_row = _shape(layout)[0] // layout.block_size
    unit = row * per_row + block
    column = block if layout.is_float_elements else block * layout.block_size + f.first_col
    size = 2 if f.encoding is Encoding.IQ1M_F16 else f.size
    return {"tensor": name, "path": str(path), "kind": kind, "row": row, "column": column,
            "width": 1 if layout.is_float_elements else f.width, "block": block, "field": f.name,
            "offset": offset + unit * layout.block_bytes + f.offset, "bits": f"0x{bits:0{2 * size}x}"}


def _got(finding: Finding) -> dict[str, Any]:
    return {k: getattr(finding, k) for k in ("tensor", "path", "kind", "row", "column", "width", "block",
                                              "field", "offset", "bits")}


def _write(path: Path, tensors: list[tuple[str, T, tuple[int, ...], bytes]]) -> dict[str, int]:
    return write_gguf(path, [TensorSpec(n, t, s, bytes(d)) for n, t, s, d in tensors])


def _neighbours() -> list[tuple[str, T, tuple[int, ...], bytes]]:
    return [("before.weight", T.F32, (8, 1), finite_tensor(T.F32, (8, 1), 11))]


@pytest.mark.parametrize("ggml_type,field_name", CASES, ids=lambda x: x.name if isinstance(x, T) else x)
def test_every_type_reports_exact_positions(tmp_path: Path, ggml_type: T, field_name: str) -> None:
    layout = LAYOUTS[ggml_type]
    f = _field(layout, field_name)
    shape = _shape(layout)
    data = finite_tensor(ggml_type, shape, seed=int(ggml_type))
    per_row = shape[0] // layout.block_size
    for kind, bits in NONFINITE_BITS[f.encoding].items():
        row, block = PLACES[kind]
        poke(data, layout, row * per_row + block, f, bits)
    path = tmp_path / "m.gguf"
    offsets = _write(path, [*_neighbours(), ("w.weight", ggml_type, shape, data)])

    report = scan(path)

    expected = sorted((_expect("w.weight", path, layout, offsets["w.weight"], *PLACES[kind], f, kind, bits)
                       for kind, bits in NONFINITE_BITS[f.encoding].items()), key=lambda e: e["offset"])
    (before, target) = report.tensors
    assert before.total == 0 and before.findings == ()
    assert [_got(x) for x in target.findings] == expected
    assert target.counts == {k: int(k in NONFINITE_BITS[f.encoding]) for k in ("nan", "+inf", "-inf")} | {"outlier": 0}
    assert not report.ok


@pytest.mark.parametrize("workers", [0, 2])
def test_clean_model_of_every_type_has_no_findings(tmp_path: Path, workers: int) -> None:
    path = tmp_path / "clean.gguf"
    tensors = [(f"t.{t.name.lower()}", t, _shape(LAYOUTS[t]), finite_tensor(t, _shape(LAYOUTS[t]), int(t)))
               for t in FLOAT_TYPES + INTEGER_TYPES + QUANT_TYPES]
    _write(path, tensors)
    report = scan(path, workers=workers)
    assert report.ok
    assert report.stats.workers == workers
    checks = {t.name: t.check for t in report.tensors}
    assert {n for n, c in checks.items() if c == "not applicable"} == {f"t.{t.name.lower()}" for t in INTEGER_TYPES}
    assert checks["t.q4_k"] == "block fields" and checks["t.f16"] == "elements"
    assert all(t.max_abs is not None and t.max_abs > 0 for t in report.tensors if t.check != "not applicable")


def test_several_faults_in_one_tensor_are_all_counted_and_listed_in_file_order(tmp_path: Path) -> None:
    layout = LAYOUTS[T.F16]
    data = finite_tensor(T.F16, (64, 10), 2)
    planted = {(r, c): "nan" if (r + c) % 3 == 0 else "+inf" if (r + c) % 3 == 1 else "-inf"
               for r in range(10) for c in (1, 30, 63)}
    for (r, c), kind in planted.items():
        poke(data, layout, r * 64 + c, layout.fields[0], NONFINITE_BITS[Encoding.F16][kind])
    path = tmp_path / "m.gguf"
    _write(path, [("w", T.F16, (64, 10), data)])
    (t,) = scan(path, limit=100).tensors
    kinds = list(planted.values())
    assert t.counts == {"nan": kinds.count("nan"), "+inf": kinds.count("+inf"), "-inf": kinds.count("-inf"),
                        "outlier": 0}
    assert t.total == 30 and all(kinds.count(k) for k in ("nan", "+inf", "-inf"))
    assert [(x.row, x.column, x.kind) for x in t.findings] == [(r, c, k) for (r, c), k in sorted(planted.items())]
    (limited,) = scan(path, limit=4).tensors
    assert limited.counts == t.counts and limited.findings == t.findings[:4] and limited.truncated
    (silent,) = scan(path, limit=0).tensors
    assert silent.counts == t.counts and silent.findings == ()


def test_subnormals_are_normal_data(tmp_path: Path) -> None:
    sub16 = np.arange(0x400 - 512, 0x400, dtype=np.uint16)         # the largest 512 f16 subnormals
    sub32 = np.arange(1, 513, dtype=np.uint32) | np.uint32(0x80000000)       # negative subnormals
    q6k = bytearray(finite_tensor(T.Q6_K, (256, 4), 1))
    for unit in range(4):
        poke(q6k, LAYOUTS[T.Q6_K], unit, LAYOUTS[T.Q6_K].fields[0], 0x0001 + unit)   # tiny subnormal d
    path = tmp_path / "m.gguf"
    _write(path, [("f16", T.F16, (512, 1), sub16.tobytes()), ("f32", T.F32, (512, 1), sub32.tobytes()),
                  ("q6k", T.Q6_K, (256, 4), q6k)])
    report = scan(path)
    assert report.ok
    assert report.tensors[0].max_abs == float(np.uint16(0x3FF).view(np.float16))


def test_max_abs_finds_a_planted_outlier_beside_nans(tmp_path: Path) -> None:
    layout = LAYOUTS[T.F32]
    data = finite_tensor(T.F32, (16, 4), 3)
    poke(data, layout, 2 * 16 + 5, layout.fields[0], int(np.float32(-7.92e6).view(np.uint32)))
    poke(data, layout, 3 * 16 + 0, layout.fields[0], 0x7FC00000)
    path = tmp_path / "m.gguf"
    offsets = _write(path, [("w", T.F32, (16, 4), data)])
    (plain,) = scan(path).tensors
    assert plain.counts["outlier"] == 0 and plain.max_abs == float(np.float32(7.92e6))
    (t,) = scan(path, max_abs=1000.0).tensors
    assert t.counts == {"nan": 1, "+inf": 0, "-inf": 0, "outlier": 1}
    outlier = t.findings[0]
    assert (outlier.kind, outlier.row, outlier.column, outlier.offset, outlier.bits) == \
        ("outlier", 2, 5, offsets["w"] + (2 * 16 + 5) * 4, "0xcaf1b300")
    assert outlier.value == float(np.float32(-7.92e6))


@pytest.mark.parametrize("ggml_type,field_name,bits,value", [
    (T.F16, "value", 0x3C01, 1.0009765625),       # the f16 right after 1.0
    (T.Q4_K, "dmin", 0x3C01, 1.0009765625),
    (T.Q8_K, "d", 0x3F800001, float(np.uint32(0x3F800001).view(np.float32))),
    (T.MXFP4, "e", 128, 2.0),
    (T.NVFP4, "d[2]", 0x40, 2.0),                 # UE4M3 exponent 8 -> 2^1
    (T.IQ1_M, "d", 0x3C01, 1.0009765625),
])
def test_outlier_threshold_is_exact(tmp_path: Path, ggml_type: T, field_name: str, bits: int, value: float) -> None:
    layout = LAYOUTS[ggml_type]
    f = _field(layout, field_name)
    shape = _shape(layout)
    data = finite_tensor(ggml_type, shape, 4)
    small = {Encoding.UE4M3: 0x08, Encoding.E8M0: 120}.get(f.encoding)
    if small is not None:                          # random 1-byte scales can be large: tame them
        for unit in range(shape[0] // layout.block_size * ROWS):
            for other in layout.fields:
                poke(data, layout, unit, other, small)
    poke(data, layout, 4 if layout.is_float_elements else 3, f, bits)
    path = tmp_path / "m.gguf"
    _write(path, [("w", ggml_type, shape, data)])
    (t,) = scan(path, max_abs=value).tensors
    assert t.total == 0                            # |x| == X is not an outlier
    (t,) = scan(path, max_abs=1.0).tensors
    assert t.counts["outlier"] == 1 and t.findings[0].field == field_name and t.findings[0].value == value


def test_fp8_override_finds_0x7f_and_0xff(tmp_path: Path) -> None:
    data = bytearray(np.random.default_rng(5).integers(0, 0x7E, 40 * 3, dtype=np.uint8).tobytes())
    data[1 * 40 + 3] = 0x7F
    data[2 * 40 + 0] = 0xFF
    path = tmp_path / "m.gguf"
    offsets = _write(path, [("per_layer_token_embd.weight", T.I8, (40, 3), data)])
    (plain,) = scan(path).tensors
    assert plain.check == "not applicable" and plain.total == 0 and plain.max_abs is None
    (t,) = scan(path, as_fp8=["per_layer_token_embd.weight"]).tensors
    assert t.encoding == "fp8_e4m3" and t.check == "elements"
    base = offsets["per_layer_token_embd.weight"]
    assert [_got(x) for x in t.findings] == [
        {"tensor": "per_layer_token_embd.weight", "path": str(path), "kind": "nan", "row": 1, "column": 3,
         "width": 1, "block": 3, "field": "value", "offset": base + 43, "bits": "0x7f"},
        {"tensor": "per_layer_token_embd.weight", "path": str(path), "kind": "nan", "row": 2, "column": 0,
         "width": 1, "block": 0, "field": "value", "offset": base + 80, "bits": "0xff"}]
    assert t.counts["nan"] == 2


def test_fp8_override_must_name_an_i8_tensor(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _write(path, _neighbours())
    with pytest.raises(UsageError, match=re.escape("before.weight is F32: only an I8 tensor")):
        scan(path, as_fp8=["before.weight"])
    with pytest.raises(UsageError, match="no tensor named 'nope'"):
        scan(path, as_fp8=["nope"])


def test_bad_options_are_usage_errors(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _write(path, _neighbours())
    with pytest.raises(UsageError, match="max_abs: must be a finite number"):
        scan(path, max_abs=float("nan"))
    with pytest.raises(UsageError, match="max_abs: must be a finite number"):
        scan(path, max_abs=-1.0)
    with pytest.raises(UsageError, match="limit: must be >= 0"):
        scan(path, limit=-1)
    with pytest.raises(UsageError, match="workers: must be >= 0, not -1"):
        scan(path, workers=-1)


def test_tensor_globs_select_and_must_match(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _write(path, [(f"blk.{i}.{n}.weight", T.F32, (8, 1), finite_tensor(T.F32, (8, 1), i))
                  for i in range(2) for n in ("attn_q", "ffn_up")])
    report = scan(path, tensors=["blk.*.ffn_up.weight", "blk.0.attn_q.weight"])
    assert [t.name for t in report.tensors] == ["blk.0.attn_q.weight", "blk.0.ffn_up.weight", "blk.1.ffn_up.weight"]
    with pytest.raises(UsageError, match=re.escape("no tensor matches 'blk.9.*'")):
        scan(path, tensors=["blk.*", "blk.9.*"])


def _multi_fault_model(path: Path) -> None:
    tensors = []
    for t in (T.F32, T.BF16, T.Q4_K, T.Q8_0, T.IQ1_M, T.MXFP4, T.Q8_K):
        layout = LAYOUTS[t]
        shape = (layout.block_size * 4 if not layout.is_float_elements else 300, 40)
        data = finite_tensor(t, shape, int(t))
        f = layout.fields[-1]
        for i, kind in enumerate(NONFINITE_BITS[f.encoding]):
            for unit in range(3 + i, shape[0] // layout.block_size * 40, 37 + 5 * i):
                poke(data, layout, unit, f, NONFINITE_BITS[f.encoding][kind])
        tensors.append((f"m.{t.name.lower()}", t, shape, data))
    _write(path, tensors)


def test_worker_processes_and_streamed_reads_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    _multi_fault_model(path)
    reference = scan(path, workers=0, limit=1000)
    assert not reference.ok
    monkeypatch.setattr(workers_module, "TASK_BYTES", 3000)          # tensors cut across many tasks
    options = {"deep": True, "max_abs": 0.5, "limit": 50}
    with workers_module.reader_pool():     # one pool for both two-worker scans: a process start is seconds on Wine
        assert scan(path, workers=2, limit=1000).tensors == reference.tensors
        assert scan(path, workers=2, **options).tensors == scan(path, workers=0, **options).tensors
    assert scan(path, workers=1, limit=7).tensors == scan(path, workers=0, limit=7).tensors
    monkeypatch.setattr(scan_module, "STREAM_CHUNK_BYTES", 1001)   # chunks cut blocks anywhere
    assert scan(path, workers=0, limit=1000).tensors == reference.tensors


def test_fail_fast_stops_at_the_first_finding_in_file_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    _multi_fault_model(path)
    full = scan(path, limit=1)
    first = min((t.findings[0] for t in full.tensors if t.findings), key=lambda x: x.offset)
    for workers in (0, 2):
        monkeypatch.setattr(workers_module, "TASK_BYTES", 3000)
        report = scan(path, fail_fast=True, workers=workers)
        assert not report.complete and not report.ok
        found = [x for t in report.tensors for x in t.findings]
        assert found == [first]
        assert [t.name for t in report.tensors] == ["m.f32"]
        assert report.tensors[0].counts[first.kind] == 1 and not report.tensors[0].complete
        assert report.warnings[-1] == "fail_fast: stopped at the first finding; 6 tensors not scanned"


def _gguf_nonfinite_blocks(path: Path, name: str) -> set[tuple[int, int]]:
    """(row, block) of every block gguf.quants decodes to a non-finite value: the independent view."""
    t = open_model(path).tensor(name)
    raw = np.fromfile(path, np.uint8, count=t.nbytes, offset=t.offset)
    with np.errstate(all="ignore"):
        values = gguf.quants.dequantize(raw, t.ggml_type).reshape(t.n_rows, t.blocks_per_row, t.block_size)
    return {(int(r), int(b)) for r, b in np.argwhere(~np.isfinite(values).all(axis=2))}


def test_deep_agrees_with_the_fast_scan_position_for_position(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    tensors = []
    for t in QUANT_TYPES:
        layout = LAYOUTS[t]
        shape = (layout.block_size * 3, 4)
        data = finite_tensor(t, shape, int(t) + 100)
        for unit, f in zip((1, 5, 10), layout.fields, strict=False):
            for _kind, bits in list(NONFINITE_BITS[f.encoding].items())[:1]:
                poke(data, layout, unit, f, bits)
        tensors.append((f"d.{t.name.lower()}", t, shape, data))
    _write(path, tensors)
    fast, deep = scan(path, limit=100), scan(path, deep=True, limit=100)
    assert fast.tensors == tuple(t.__class__(**{**t.__dict__, "deep": False}) for t in deep.tensors)
    assert not fast.ok
    for t in deep.tensors:
        if deep_supported(T[t.type]):
            assert t.deep
            assert {(x.row, x.block) for x in t.findings} == _gguf_nonfinite_blocks(path, t.name), t.name
    assert deep.warnings == tuple(f"deep: gguf.quants cannot decode {n}; 1 tensor of that type checked by "
                                  "block fields only" for n in ("Q1_0", "Q8_1", "Q8_K"))


def _mxfp4_row(e_and_nibbles: list[tuple[int, int]]) -> bytes:
    return b"".join(bytes([e] + [n | (n << 4)] * 16) for e, n in e_and_nibbles)


def test_mxfp4_scale_overflow_is_reported_and_deep_agrees(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    blocks = [(120, 7), (0xFE, 3), (0xFE, 12), (0xFC, 7), (0xFD, 6), (0xFF, 1)]
    offsets = _write(path, [("x", T.MXFP4, (32 * len(blocks), 1), _mxfp4_row(blocks))])
    (t,) = scan(path).tensors
    got = [(x.block, x.kind, x.cause, x.bits, x.offset) for x in t.findings]
    assert got == [(2, "-inf", "overflow", "0xfe", offsets["x"] + 2 * 17),
                   (4, "+inf", "overflow", "0xfd", offsets["x"] + 4 * 17),
                   (5, "nan", "field", "0xff", offsets["x"] + 5 * 17)]
    (d,) = scan(path, deep=True).tensors
    assert d.findings == t.findings
    # gguf decodes 0xFF with values of magnitude <= 0.5 as finite: the one documented difference.
    assert _gguf_nonfinite_blocks(path, "x") == {(0, 2), (0, 4)}


def test_deep_reports_what_the_fields_cannot_explain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    offsets = _write(path, [("x", T.MXFP4, (64, 1), _mxfp4_row([(120, 7), (0xFE, 12)]))])
    monkeypatch.setattr(kernel, "OVERFLOW_KEY", {})          # blind the fast scan to overflow
    assert scan(path).ok
    (t,) = scan(path, deep=True).tensors
    (x,) = t.findings
    assert (x.kind, x.cause, x.row, x.block, x.column, x.field, x.offset, x.bits) == \
        ("-inf", "decoded", 0, 1, 32, "decoded", offsets["x"] + 17, "0xff800000")


FIXTURE_FAULTS = [   # from fixtures/README.md, written by scripts/make_fixtures.py
    ("all_types-f32-nan.gguf", "types.f32.weight", "nan", 3, 100, 100, 1, "value", 9744, "0x7fc00000"),
    ("all_types-q4_k-inf.gguf", "types.q4_k.weight", "+inf", 5, 1, 256, 256, "d", 155088, "0x7c00"),
    ("all_types-mxfp4-nan.gguf", "types.mxfp4.weight", "nan", 2, 7, 224, 32, "e", 182295, "0xff"),
]
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize("fault", FIXTURE_FAULTS, ids=lambda f: f[0])
def test_fixture_faults_are_found_where_the_fixture_readme_says(fault: tuple[Any, ...]) -> None:
    path = FIXTURES / fault[0]
    fast, deep = scan(path), scan(path, deep=True)
    found = [x for t in fast.tensors for x in t.findings]
    assert [(x.tensor, x.kind, x.row, x.block, x.column, x.width, x.field, x.offset, x.bits) for x in found] \
        == [fault[1:]]
    assert [x for t in deep.tensors for x in t.findings] == found


def test_clean_fixtures_have_no_findings() -> None:
    for p in [FIXTURES / n for n in ("all_types.gguf", "ple_iq4_nl.gguf", "ple_q8_0.gguf")]:
        assert scan(p, deep=True).ok, p
    # The split set's values and structure are clean; it is a fragment of a llama, whose loader refuses it for the
    # tensors its one layer lacks (and output.weight's absence is allowed: the embedding is tied).
    split = scan(FIXTURES / "split-00001-of-00002.gguf", deep=True)
    assert (split.structure, [t.name for t in split.tensors if t.total]) == ((), [])
    # (attn_q stands for the attention's q, k and v, which a fused attn_qkv would replace.)
    assert sorted(m.tensor or "" for m in split.metadata) == [
        "blk.0.attn_output.weight", "blk.0.attn_q.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_norm.weight",
        "blk.0.ffn_up.weight"]


def test_split_set_reports_the_shard_and_its_offsets(tmp_path: Path) -> None:
    layout = LAYOUTS[T.Q8_0]
    data = finite_tensor(T.Q8_0, (64, 2), 9)
    poke(data, layout, 3, layout.fields[0], 0xFC00)
    meta = lambda no: {"split.no": no, "split.count": 2, "split.tensors.count": 2}   # noqa: E731
    first, second = tmp_path / "m-00001-of-00002.gguf", tmp_path / "m-00002-of-00002.gguf"
    write_gguf(first, [TensorSpec("a", T.F32, (8, 1), bytes(finite_tensor(T.F32, (8, 1), 1)))], meta(0))
    offsets = write_gguf(second, [TensorSpec("b", T.Q8_0, (64, 2), bytes(data))], meta(1))
    report = scan(first)
    assert report.files == (str(first), str(second))
    (x,) = [x for t in report.tensors for x in t.findings]
    assert (x.path, x.tensor, x.kind, x.row, x.block, x.column, x.offset) == \
        (str(second), "b", "-inf", 1, 1, 32, offsets["b"] + 3 * 34)


def test_progress_reaches_the_total(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _multi_fault_model(path)
    for workers in (0, 2):
        seen: list[tuple[int, int]] = []
        report = scan(path, workers=workers, progress=lambda done, total, seen=seen: seen.append((done, total)))
        assert seen and seen[-1] == (report.stats.bytes, report.stats.bytes)
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_scan_consumer_shares_one_read_with_a_digest(tmp_path: Path) -> None:
    # The streamed path is a digests chunk consumer: a sha256 of the file and the scan in one pass.
    path = tmp_path / "m.gguf"
    _multi_fault_model(path)
    model = open_model(path)
    plans, _ = scan_module.make_plans(list(model.tensors), set(), False)
    consumer = ScanConsumer(plans, kernel.Options(None, 1000, False))
    sha = Sha256()
    read_through(path, [sha, consumer], chunk_size=4093)
    assert sha.hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
    reference = scan(path, limit=1000)
    assert [tuple(consumer.accs[i].findings) for i in range(len(plans))] == [t.findings for t in reference.tensors]


@pytest.mark.parametrize("workers", [0, 2])
def test_positions_are_python_ints_never_numpy_ints(tmp_path: Path, workers: int) -> None:
    path = tmp_path / "m.gguf"
    _multi_fault_model(path)
    report = scan(path, workers=workers, deep=True, max_abs=0.5, limit=1000)
    findings = [x for t in report.tensors for x in t.findings]
    assert {x.cause for x in findings} >= {"field"} and len(findings) > 100
    for x in findings:
        assert {type(getattr(x, k)) for k in ("row", "column", "width", "block", "offset", "size")} == {int}, x
        assert x.value is None or type(x.value) is float, x
    for t in report.tensors:
        assert (type(t.offset), type(t.nbytes)) == (int, int) and type(t.max_abs) is float, t.name
        assert {type(n) for n in t.counts.values()} == {int} and {type(n) for n in t.shape} == {int}, t.name


def test_json_is_strict_json_even_with_nan_and_inf(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _multi_fault_model(path)
    doc = scan(path, max_abs=0.5, deep=True).to_json()
    text = json.dumps(doc, allow_nan=False)
    kinds = {f["kind"] for t in json.loads(text)["tensors"] for f in t["findings"]}
    assert kinds == {"nan", "+inf", "-inf", "outlier"}
    assert doc["ok"] is False and doc["counts"]["nan"] > 0


@pytest.mark.parametrize("encoding", ["F16", "BF16", "F32", "F64"])
def test_read_only_top_key_equals_the_masked_maximum_for_any_bits(encoding: str) -> None:
    codec = kernel.CODECS[Encoding[encoding]]
    rng = np.random.default_rng(7)
    width = np.dtype(codec.unit).itemsize
    sign = codec.mask + 1
    for case in range(200):
        n = int(rng.integers(1, 64))
        raw = rng.integers(0, 256, size=n * width, dtype=np.uint8).view(codec.unit).reshape(n, 1).copy()
        if case % 4 == 1:
            raw |= np.array(sign, dtype=codec.unit)            # every value negative (sign bit set)
        elif case % 4 == 2:
            raw &= np.array(codec.mask, dtype=codec.unit)      # every value non-negative
        elif case % 4 == 3:
            raw[:] = np.array(sign, dtype=codec.unit)          # all -0.0
        assert kernel._top_key(codec, raw) == int((raw & np.array(codec.mask, dtype=codec.unit)).max()), (case, raw)
