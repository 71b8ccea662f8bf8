"""Histograms of scale magnitudes (``scan(..., histograms=True)``): exact counts per power of two from the
stored exponent bits, the same in this process, in worker processes and in the hashed read; nothing when
off; the JSON validates."""

from __future__ import annotations

import json
import struct
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from jsonschema import Draft202012Validator

import ggaudit
from ggaudit.format.blocks import LAYOUTS, GGMLQuantizationType as T, decode_bits
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.scan.report import ScaleHistogram

from scan_support import finite_tensor, n_units, poke

SCHEMA = json.loads(resources.files("ggaudit").joinpath("schema/cli-output.schema.json").read_text("utf-8"))


def _f16(x: float) -> int:
    return int(np.float16(x).view(np.uint16))


def _q8_0(scales: list[int]) -> bytes:
    """Q8_0 blocks (34 bytes: f16 d, 32 int8) with the given d bits and quants 1."""
    return b"".join(struct.pack("<H", d) + bytes([1]) * 32 for d in scales)


#: d of each of 8 Q8_0 blocks: 1, 0.5 twice, 0.25, +0, -0, an f16 subnormal (2^-20), 60000 (2^15 <= x <
#: 2^16: the outlier), and NaN.
Q8_SCALES = [_f16(1.0), _f16(0.5), _f16(-0.5), _f16(0.25), 0x0000, 0x8000, 0x0010, _f16(60000.0), 0x7E00]
Q8_HIST = ScaleHistogram(field="d", encoding="f16", powers=((-2, 1), (-1, 2), (0, 1), (15, 1)), zero=2,
                         subnormal=1, nonfinite=1)
#: F32 elements: 1, -1, 3, 2^-126 (the least normal), +0, -0, a subnormal, +Inf.
F32_VALUES = [1.0, -1.0, 3.0, 2.0 ** -126, 0.0, -0.0, 1e-40, float("inf")]
F32_HIST = ScaleHistogram(field="value", encoding="f32", powers=((-126, 1), (0, 2), (1, 1)), zero=2, subnormal=1,
                          nonfinite=1)


def _q4_k(d: float, dmin: float) -> bytes:
    return struct.pack("<ee", d, dmin) + bytes(140)


def _model(path: Path) -> dict[str, int]:
    q8 = _q8_0(Q8_SCALES + [_f16(1.0)] * 3)       # 12 blocks: [64, 6] - 1.0 three more times
    specs = [TensorSpec("q8", T.Q8_0, (64, 6), q8),
             TensorSpec("f32", T.F32, (8,), np.array(F32_VALUES, "<f4").tobytes()),
             TensorSpec("q4k", T.Q4_K, (256, 2), _q4_k(2.0, -0.125) + _q4_k(3.0, 0.0)),
             TensorSpec("bf16", T.BF16, (2,), (np.array([1.5, -256.0], "<f4").view("<u4") >> 16)
                        .astype("<u2").tobytes()),
             TensorSpec("f64", T.F64, (1,), np.array([2.0 ** -1000], "<f8").tobytes()),
             TensorSpec("mxfp4", T.MXFP4, (32, 1), bytes([130]) + bytes(16)),
             TensorSpec("ints", T.I32, (4,), bytes(16))]
    return write_gguf(path, specs)


EXPECTED = {
    "q8": (ScaleHistogram(field="d", encoding="f16", powers=((-2, 1), (-1, 2), (0, 4), (15, 1)), zero=2,
                          subnormal=1, nonfinite=1),),
    "f32": (F32_HIST,),
    "q4k": (ScaleHistogram(field="d", encoding="f16", powers=((1, 2),)),
            ScaleHistogram(field="dmin", encoding="f16", powers=((-3, 1),), zero=1)),
    "bf16": (ScaleHistogram(field="value", encoding="bf16", powers=((0, 1), (8, 1))),),
    "f64": (ScaleHistogram(field="value", encoding="f64", powers=((-1000, 1),)),),
    "mxfp4": (ScaleHistogram(field="e", encoding="e8m0", powers=((3, 1),)),),
    "ints": None,
}


@pytest.mark.parametrize("how", [{"workers": 0}, {"workers": 1}, {"hashes": ("sha256",)}],
                         ids=["in-process", "worker", "hashed"])
def test_counts_per_power_of_two_are_exact_on_every_read_path(tmp_path: Path, how: dict[str, object]) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    report = ggaudit.scan(path, histograms=True, **how)  # type: ignore[arg-type]
    assert report.stats.workers == how.get("workers", 0)
    assert {t.name: t.histograms for t in report.tensors} == EXPECTED
    q8 = report.tensors[0]
    assert q8.histograms is not None and q8.histograms[0].total == 12 and q8.counts["nan"] == 1


def test_worker_pieces_add_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor cut into many tasks (one block each) still counts each block once."""
    from ggaudit.scan import workers

    monkeypatch.setattr(workers, "TASK_BYTES", 34)
    path = tmp_path / "m.gguf"
    _model(path)
    report = ggaudit.scan(path, histograms=True, workers=2, tensors=["q8"])
    assert report.tensors[0].histograms == EXPECTED["q8"]


def test_off_by_default_and_absent_from_json(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    report = ggaudit.scan(path, workers=0)
    assert all(t.histograms is None for t in report.tensors)
    assert all("histograms" not in t.to_json() for t in report.tensors)


def test_json_lists_them_and_validates(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    doc = {"schema": "ggaudit/cli-output/1", "status": "findings",
           "models": [ggaudit.scan(path, histograms=True, workers=0).to_json()]}
    assert not list(Draft202012Validator(SCHEMA).iter_errors(doc))
    f32 = next(t for t in doc["models"][0]["tensors"] if t["name"] == "f32")
    assert f32["histograms"] == [{"field": "value", "encoding": "f32", "zero": 2, "subnormal": 1, "nonfinite": 1,
                                  "powers": [{"exponent": -126, "count": 1}, {"exponent": 0, "count": 2},
                                             {"exponent": 1, "count": 1}]}]
    ints = next(t for t in doc["models"][0]["tensors"] if t["name"] == "ints")
    assert "histograms" not in ints


@pytest.mark.parametrize("ggml_type", [t for t, lay in LAYOUTS.items() if not lay.is_integer], ids=lambda t: t.name)
def test_every_type_agrees_with_the_decoded_values(tmp_path: Path, ggml_type: T) -> None:
    """Per field, the counts equal those of the decoded values bucketed by np.frexp (zeros and non-finite
    apart; subnormals by the format's own least normal)."""
    layout = LAYOUTS[ggml_type]
    shape = (layout.block_size * 4, 3)
    data = finite_tensor(ggml_type, shape, seed=7)
    poke(data, layout, 5, layout.fields[0], 0)     # a zero in every type
    path = tmp_path / "m.gguf"
    write_gguf(path, [TensorSpec("t", ggml_type, shape, bytes(data))])
    (t,) = ggaudit.scan(path, histograms=True, workers=0).tensors
    assert t.histograms is not None
    raw = np.frombuffer(bytes(data), np.uint8).reshape(n_units(layout, shape), layout.block_bytes)
    for f, h in zip(layout.fields, t.histograms, strict=True):
        from ggaudit.format.blocks import field_bits

        values = np.abs(decode_bits(f.encoding, field_bits(f, raw[:, f.offset:f.offset + f.size])))
        assert h.total == len(values) and h.field == f.name
        least_normal = {"f16": 2.0 ** -14, "iq1m_f16": 2.0 ** -14, "bf16": 2.0 ** -126, "f32": 2.0 ** -126,
                        "f64": 2.0 ** -1022, "e8m0": 0.0, "ue4m3": 2.0 ** -6, "e4m3": 2.0 ** -6}[h.encoding]
        normal = values[(values >= least_normal) & (values > 0)]
        exponents, counts = np.unique(np.frexp(normal)[1] - 1, return_counts=True)
        assert h.powers == tuple(zip(exponents.tolist(), counts.tolist(), strict=True))
        assert h.zero == int(np.count_nonzero(values == 0))
        assert h.subnormal == int(np.count_nonzero((values > 0) & (values < least_normal)))
