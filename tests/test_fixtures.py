"""The bundled fixtures: reproducible byte for byte, and every fault exactly where fixtures/README.md says."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from gguf import quants

from ggaudit.format.blocks import LAYOUTS, GGMLQuantizationType as T, decode_bits, field_bits, layout_of
from ggaudit.format.layout import Tensor, open_gguf, open_model

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
PAGE = 4096


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_fixtures", ROOT / "scripts" / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


make_fixtures = _load_script()


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("fixtures")
    return out, make_fixtures.build_all(out)


def _readme_faults() -> list[dict[str, str]]:
    text = (FIXTURES / "README.md").read_text(encoding="utf-8")
    section = text.split("## Faults", 1)[1]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")), strict=True)) for ln in lines[2:]]


def _rows(t: Tensor, path: Path) -> np.ndarray:
    with open(path, "rb") as f:
        f.seek(t.offset)
        return np.frombuffer(f.read(t.nbytes), dtype=np.uint8).reshape(t.n_rows, t.row_bytes)


def test_regenerated_fixtures_are_byte_identical(regenerated: tuple[Path, dict]) -> None:
    out, files = regenerated
    assert sorted(files) == sorted(p.name for p in FIXTURES.glob("*.gguf"))
    for name in [*files, "README.md"]:
        assert (out / name).read_bytes() == (FIXTURES / name).read_bytes(), f"{name} differs: rerun make_fixtures"


def test_fixtures_stay_small() -> None:
    assert sum(p.stat().st_size for p in FIXTURES.iterdir()) < 4 << 20


def test_readme_lists_the_faults_build_all_returns(regenerated: tuple[Path, dict]) -> None:
    _, files = regenerated
    faults = [f for fs in files.values() for f in fs]
    listed = _readme_faults()
    assert [(r["file"], r["tensor"], int(r["row"]), int(r["block"]), r["field"], int(r["offset"]))
            for r in listed] == [(f.file, f.tensor, f.row, f.block, f.field, f.offset) for f in faults]
    assert {f.kind for f in faults} == {"NaN F32 element", "+Inf fp16 d in a Q4_K block",
                                        "E8M0 0xFF (NaN) scale in an MXFP4 block",
                                        "flipped quant byte (xor 0xff) in a page-crossing row"}


@pytest.mark.parametrize("row", _readme_faults(), ids=lambda r: r["file"])
def test_fault_bytes_sit_at_the_readme_offset(row: dict[str, str]) -> None:
    faulty = (FIXTURES / row["file"]).read_bytes()
    clean = (FIXTURES / row["clean copy"]).read_bytes()
    offset, length = int(row["offset"]), int(row["length"])
    assert faulty[offset:offset + length].hex() == row["after"]
    assert clean[offset:offset + length].hex() == row["before"]
    diff = np.flatnonzero(np.frombuffer(faulty, np.uint8) != np.frombuffer(clean, np.uint8))
    assert diff.tolist() == list(range(offset, offset + length))


@pytest.mark.parametrize("row", _readme_faults(), ids=lambda r: r["file"])
def test_fault_offset_agrees_with_layout(row: dict[str, str]) -> None:
    t = open_gguf(FIXTURES / row["file"]).tensors
    tensor = next(x for x in t if x.name == row["tensor"])
    block, r = int(row["block"]), int(row["row"])
    start = tensor.row_offset(r) + block * tensor.block_bytes
    fields = {f.name: f.offset for f in layout_of(tensor.ggml_type).fields}
    match = re.fullmatch(r"qs\[(\d+)\]", row["field"])
    within = 2 + int(match[1]) if match else fields[row["field"]]  # IQ4_NL: qs follows the f16 d
    assert int(row["offset"]) == start + within


_NONFINITE = {
    "all_types-f32-nan.gguf": (T.F32, "types.f32.weight", 3, [100]),
    "all_types-q4_k-inf.gguf": (T.Q4_K, "types.q4_k.weight", 5, list(range(256, 512))),
    "all_types-mxfp4-nan.gguf": (T.MXFP4, "types.mxfp4.weight", 2, list(range(224, 256))),
}


@pytest.mark.parametrize("name", sorted(_NONFINITE))
def test_float_faults_decode_non_finite_exactly_at_their_columns(name: str) -> None:
    ggml_type, tensor_name, row, cols = _NONFINITE[name]
    tensor = open_gguf(FIXTURES / name).tensors
    t = next(x for x in tensor if x.name == tensor_name)
    assert t.ggml_type is ggml_type
    with np.errstate(over="ignore", invalid="ignore"):
        values = quants.dequantize(_rows(t, FIXTURES / name), ggml_type).reshape(t.n_rows, t.n_cols)
    bad = np.argwhere(~np.isfinite(values)).tolist()
    if ggml_type is T.MXFP4:
        # ggml (and gguf) decode E8M0 0xFF as the finite 2^127, not NaN: only the products that
        # overflow (|q| >= 2) turn infinite, zeros stay zero. They all lie inside the faulty block.
        assert bad and all(r == row and c in cols for r, c in bad)
    else:
        assert bad == [[row, c] for c in cols]


def test_flipped_byte_changes_two_columns_of_a_page_crossing_row(regenerated: tuple[Path, dict]) -> None:
    (fault,) = regenerated[1]["ple_iq4_nl-flip.gguf"]
    clean_t = open_model(FIXTURES / fault.clean).tensor(fault.tensor)
    faulty_t = open_model(FIXTURES / fault.file).tensor(fault.tensor)
    assert clean_t.ggml_type is T.IQ4_NL and clean_t.row_bytes == 90 and clean_t.n_cols == 160
    start = clean_t.row_offset(fault.row)
    end = start + clean_t.row_bytes
    assert start // PAGE != (end - 1) // PAGE, "the faulty row must straddle a page"
    assert fault.row >= 100 and all((clean_t.row_offset(r) // PAGE == (clean_t.row_offset(r) + 89) // PAGE)
                                    for r in range(100, fault.row))
    assert start <= fault.offset < end
    clean = quants.dequantize(_rows(clean_t, FIXTURES / fault.clean), T.IQ4_NL)
    faulty = quants.dequantize(_rows(faulty_t, FIXTURES / fault.file), T.IQ4_NL)
    assert np.argwhere(clean != faulty).tolist() == [[fault.row, c] for c in fault.columns]
    assert np.isfinite(faulty).all()


def test_all_types_holds_every_layout_type_with_finite_values() -> None:
    f = open_gguf(FIXTURES / "all_types.gguf")
    by_type = {t.ggml_type: t for t in f.tensors}
    assert set(by_type) == set(LAYOUTS)
    for ggml_type, t in by_type.items():
        assert t.shape == (512, 8)
        raw = _rows(t, f.path)
        facts = layout_of(ggml_type)
        blocks = raw.reshape(-1, facts.block_bytes)
        for field in facts.fields:
            bits = field_bits(field, blocks[:, field.offset:field.offset + field.size])
            assert np.isfinite(decode_bits(field.encoding, bits)).all(), (ggml_type.name, field.name)
        try:
            values = quants.dequantize(raw, ggml_type)
        except NotImplementedError:
            continue
        assert np.isfinite(values).all(), ggml_type.name
        assert np.abs(values).max() > 0, ggml_type.name


def test_ple_fixtures_have_many_page_crossing_rows() -> None:
    for name, ggml_type, row_bytes in (("ple_iq4_nl.gguf", T.IQ4_NL, 90), ("ple_q8_0.gguf", T.Q8_0, 170)):
        model = open_model(FIXTURES / name)
        ple = model.tensor("per_layer_token_embd.weight")
        assert (ple.ggml_type, ple.shape, ple.row_bytes) == (ggml_type, (160, 1024), row_bytes)
        crossing = [r for r in range(ple.n_rows)
                    if ple.row_offset(r) // PAGE != (ple.row_offset(r) + row_bytes - 1) // PAGE]
        assert len(crossing) > 20
        assert model.tensor("token_embd.weight").shape == (64, 256)
        assert model.metadata["tokenizer.ggml.tokens"].value.count == 256
