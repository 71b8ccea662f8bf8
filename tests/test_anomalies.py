"""scan --anomalies: block scales far outside their tensor's model, found at their exact place.

Models are written with struct-level tools (ggaudit.format.build) from weights quantized by gguf.quants:
rows and input channels of different magnitudes, as in real layers. A flip changes exactly one stored
exponent bit of one block's scale in a copy; every test names the tensor, row, block, field, offset and
the raw bits it expects.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as GT
from gguf.quants import quantize

import ggaudit
from ggaudit.cli import main
from ggaudit.format.blocks import Encoding, GGMLQuantizationType as T, layout_of
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.scan import anomalies as A
from ggaudit.scan import run as scan_run
from ggaudit.scan import scales

#: (name, type, rows, columns): a min type (decided by centering) and two x = d*q types (by isolation).
TENSORS = (("blk.0.ffn_up.weight", T.Q4_1, 384, 512), ("blk.0.attn_q.weight", T.Q8_0, 512, 256),
           ("blk.0.ffn_down.weight", T.Q5_0, 256, 384))


def _weights(rows: int, cols: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    row_scale = np.exp2(rng.normal(0.0, 0.4, rows))[:, None]
    col_scale = np.exp2(rng.normal(0.0, 0.4, cols))[None, :]
    w: np.ndarray = (rng.normal(0.0, 0.02, (rows, cols)) * row_scale * col_scale).astype(np.float32)
    return w


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("anomalies") / "model.gguf"
    specs = [TensorSpec(name, t, (cols, rows), quantize(_weights(rows, cols, i), GT(t)).tobytes())
             for i, (name, t, rows, cols) in enumerate(TENSORS)]
    specs.append(TensorSpec("output_norm.weight", T.F32, (256,), np.ones(256, np.float32).tobytes()))
    write_gguf(path, specs, {"general.architecture": "llama"})
    return path


def _field(path: Path, tensor: str, field: str, row: int, block: int) -> tuple[int, int]:
    """(absolute offset, stored bits) of one block's field."""
    t = ggaudit.open_model(str(path)).tensor(tensor)
    layout = layout_of(t.ggml_type)
    f = next(f for f in layout.fields if f.name == field)
    offset = t.offset + (row * (t.n_cols // layout.block_size) + block) * layout.block_bytes + f.offset
    with open(path, "rb") as fh:
        fh.seek(offset)
        return offset, int.from_bytes(fh.read(2), "little")


def _flipped(model: Path, tmp_path: Path, flips: list[tuple[str, str, int, int, int]]) -> tuple[Path, list[int]]:
    """A copy of ``model`` with each (tensor, field, row, block, bit) flipped; the offsets, in order."""
    copy = tmp_path / "flipped.gguf"
    copy.write_bytes(model.read_bytes())
    offsets = []
    for tensor, field, row, block, bit in flips:
        offset, bits = _field(copy, tensor, field, row, block)
        with open(copy, "r+b") as fh:
            fh.seek(offset)
            fh.write((bits ^ (1 << bit)).to_bytes(2, "little"))
        offsets.append(offset)
    return copy, offsets


def _anomalies(report: ggaudit.ScanReport) -> list[tuple[str, int, int, int, str, int, str]]:
    return [(t.name, f.row, f.block, f.column, f.field, f.offset, f.bits) for t in report.tensors for f in t.findings
            if f.kind == "anomaly"]


# ----- the clean model, and one flip per decision path -------------------------------------------------

def test_the_clean_model_has_no_anomaly(model: Path) -> None:
    report = ggaudit.scan(str(model), anomalies=True)
    assert report.ok and report.anomalies
    assert report.counts == {"nan": 0, "+inf": 0, "-inf": 0, "outlier": 0, "anomaly": 0}
    assert report.to_json()["anomalies"] is True
    assert "anomalies" not in ggaudit.scan(str(model)).to_json()


@pytest.mark.parametrize(("tensor", "field", "row", "block", "bit"), [
    ("blk.0.ffn_up.weight", "d", 100, 3, 13),      # Q4_1 scale x256 or /256: centering
    ("blk.0.ffn_up.weight", "m", 7, 15, 12),       # Q4_1 minimum x16 or /16: centering
    ("blk.0.attn_q.weight", "d", 300, 5, 14),      # Q8_0: isolation, 65536x
    ("blk.0.attn_q.weight", "d", 1, 0, 13),
    ("blk.0.ffn_down.weight", "d", 255, 11, 13),   # Q5_0, the last block of the tensor
])
def test_a_flipped_exponent_bit_is_found_at_its_offset(model: Path, tmp_path: Path, tensor: str, field: str,
                                                      row: int, block: int, bit: int) -> None:
    _, bits = _field(model, tensor, field, row, block)
    copy, (offset,) = _flipped(model, tmp_path, [(tensor, field, row, block, bit)])
    report = ggaudit.scan(str(copy), anomalies=True)
    size = 32
    assert _anomalies(report) == [(tensor, row, block, block * size, field, offset, f"0x{bits ^ (1 << bit):04x}")]
    f = next(f for t in report.tensors for f in t.findings)
    assert f.cause == "statistic" and f.size == 2 and f.width == 32
    assert (f.score or 0) * (1 if (bits ^ (1 << bit)) & 0x7FFF > bits & 0x7FFF else -1) > A.CANDIDATE_THRESHOLD
    assert f.typical is not None and f.typical[0] < f.expected < f.typical[1] * 4     # type: ignore[operator]
    assert report.counts["anomaly"] == 1 and not report.ok


def test_without_the_option_a_flip_is_not_reported(model: Path, tmp_path: Path) -> None:
    copy, _ = _flipped(model, tmp_path, [("blk.0.attn_q.weight", "d", 300, 5, 14)])
    report = ggaudit.scan(str(copy))
    # A plain scan's counts (and JSON) are as they were before anomalies existed.
    assert report.ok and report.counts == {"nan": 0, "+inf": 0, "-inf": 0, "outlier": 0}
    assert "anomaly" not in report.tensors[1].counts


def test_every_read_path_gives_the_same_findings(model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # In-process (chunks that cut rows: a row waits for the next chunk), reader processes with tasks that
    # split every tensor, the hashed single read, and the large-tensor path (fitted on strips, scored as
    # read) all find the same three flips.
    flips = [("blk.0.ffn_up.weight", "d", 200, 9, 13), ("blk.0.attn_q.weight", "d", 10, 2, 13),
             ("blk.0.ffn_down.weight", "d", 77, 4, 14)]
    copy, offsets = _flipped(model, tmp_path, flips)
    _same_on_every_read_path(copy, offsets, monkeypatch)


def test_every_read_path_finds_the_same_lone_flips(quiet_model: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Row and position reaches come from pieces merged in any order: a lone flip (row 301) is found and
    # one beside a real outlier (row 300) is not, however the tensor is cut.
    copy, offsets = _flipped(quiet_model, tmp_path, [(QUIET[0], "d", 301, 2, 12), (QUIET[0], "d", 300, 2, 12)])
    _same_on_every_read_path(copy, offsets[:1], monkeypatch)


def _same_on_every_read_path(copy: Path, offsets: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_run, "STREAM_CHUNK_BYTES", 4099)
    streamed = _anomalies(ggaudit.scan(str(copy), anomalies=True, workers=0))
    assert [f[5] for f in streamed] == offsets
    from ggaudit.scan import workers
    monkeypatch.setattr(workers, "TASK_BYTES", 3000)
    assert _anomalies(ggaudit.scan(str(copy), anomalies=True, workers=2)) == streamed
    assert _anomalies(ggaudit.scan(str(copy), anomalies=True, hashes=("sha256",))) == streamed
    monkeypatch.setattr(scales, "COLLECT_MAX_BLOCKS", 100)
    assert _anomalies(ggaudit.scan(str(copy), anomalies=True, workers=0)) == streamed


def test_the_same_bit_flipped_in_several_blocks_of_a_d_times_q_tensor(model: Path, tmp_path: Path) -> None:
    # Three flips stand together, apart from the real tail: all three are above the first gap.
    copy, offsets = _flipped(model, tmp_path, [("blk.0.attn_q.weight", "d", row, 1, 14) for row in (20, 40, 60)])
    assert [f[5] for f in _anomalies(ggaudit.scan(str(copy), anomalies=True))] == offsets


def test_a_flip_to_infinity_is_the_nan_scan_s_finding_not_an_anomaly(model: Path, tmp_path: Path) -> None:
    copy = tmp_path / "inf.gguf"
    copy.write_bytes(model.read_bytes())
    offset, _ = _field(copy, "blk.0.attn_q.weight", "d", 5, 5)
    with open(copy, "r+b") as fh:
        fh.seek(offset)
        fh.write((0x7C00).to_bytes(2, "little"))
    report = ggaudit.scan(str(copy), anomalies=True)
    assert report.counts == {"nan": 0, "+inf": 1, "-inf": 0, "outlier": 0, "anomaly": 0}


def test_fail_fast_stops_before_anomalies_are_decided(model: Path, tmp_path: Path) -> None:
    copy, _ = _flipped(model, tmp_path, [("blk.0.attn_q.weight", "d", 300, 5, 14)])
    report = ggaudit.scan(str(copy), anomalies=True, fail_fast=True)
    assert report.counts["anomaly"] == 1 and report.complete


# ----- the model on arrays with known answers ------------------------------------------------------------

def _grid(rows: int, per_row: int, fields: int = 1) -> np.ndarray:
    """f16 keys that are exactly row effect + position effect (whole log2 steps), as (fields, blocks, rows)."""
    row = (np.arange(rows) % 5 - 2) * 1024
    col = (np.arange(per_row) % 3 - 1) * 1024
    keys = (15 << 10) + row[None, :] + col[:, None]
    return np.repeat(keys[None], fields, axis=0).astype(np.uint16)


def _fitted(keys: np.ndarray, minimum: bool = False) -> A.GroupModel:
    names = ("d", "m")[:keys.shape[0]]
    model = A.unfitted(0, names, Encoding.F16, 0x7C00, keys.shape[1], minimum)
    return A.fit([model], keys[None])[0]


def test_an_additive_grid_is_fitted_exactly_and_scores_nothing() -> None:
    keys = _grid(101, 9)
    model = _fitted(keys)
    assert np.array_equal(model.positions, [[-1024.0, 0.0, 1024.0] * 3])
    assert model.spreads.tolist() == [A.SPREAD_FLOOR * 1024]     # type: ignore[union-attr]
    acc = A.AnomalyAcc()
    A.score([model], keys[None], [0], [acc])
    assert acc.extremes == {} and acc.doubtful == []


@pytest.mark.parametrize(("steps", "up"), [(16, True), (-8, False), (4, True)])
def test_a_moved_block_is_the_extreme_of_its_direction_with_its_exact_residual(steps: int, up: bool) -> None:
    keys = _grid(101, 9)
    model = _fitted(keys)
    keys[0, 4, 50] = int(keys[0, 4, 50]) + steps * 1024
    acc = A.AnomalyAcc()
    A.score([model], keys[None], [1000], [acc])
    (s,) = acc.extremes[("d", up)]
    assert (s.unit, s.field, s.residual) == (1000 + 50 * 9 + 4, "d", steps * 1024.0)
    assert s.predicted == float(keys[0, 4, 50]) - steps * 1024


def test_zero_and_non_finite_scales_are_left_out() -> None:
    keys = _grid(31, 9)
    model = _fitted(keys)
    keys[0, 0, 0], keys[0, 1, 1], keys[0, 2, 2] = 0, 0x7C00, 0x7E00
    acc = A.AnomalyAcc()
    A.score([model], keys[None], [0], [acc])
    assert acc.extremes == {}


def test_a_row_of_two_blocks_has_no_row_effect() -> None:
    # Fewer than MIN_ROW_BLOCKS blocks per row: a row median would follow the flip; the positions'
    # medians over all rows model the tensor instead.
    keys = _grid(64, 2)
    model = _fitted(keys)
    assert not model.rows_model
    keys[0, 1, 10] += 16 * 1024
    acc = A.AnomalyAcc()
    A.score([model], keys[None], [0], [acc])
    # Row 10's own effect (10 % 5 - 2 = -2 steps) stays in its residual: nothing models it.
    assert [(s.unit, s.residual) for s in acc.extremes[("d", True)]] == [(21, 14 * 1024.0)]


def test_tensors_fitted_together_are_fitted_as_each_alone() -> None:
    rng = np.random.default_rng(3)
    stack = np.stack([_grid(80, 12) + rng.integers(0, 300, (1, 12, 80)).astype(np.uint16) for _ in range(3)])
    model = A.unfitted(0, ("d",), Encoding.F16, 0x7C00, 12, False)
    together = A.fit([model] * 3, stack)
    for t in range(3):
        alone = A.fit([model], stack[t:t + 1])[0]
        assert np.array_equal(alone.positions, together[t].positions)
        assert alone.spreads.tolist() == together[t].spreads.tolist()     # type: ignore[union-attr]
        assert alone.typical == together[t].typical


def test_pieces_merged_in_any_order_keep_the_most_extreme() -> None:
    def piece(units: range) -> A.AnomalyAcc:
        acc = A.AnomalyAcc()
        for unit in units:
            acc.offer(A.Suspect(unit=unit, field="d", residual=float(unit % 7), predicted=0.0), True)
        return acc

    one, other = A.AnomalyAcc(), A.AnomalyAcc()
    for acc, order in ((one, (range(0, 20), range(20, 40))), (other, (range(20, 40), range(0, 20)))):
        for units in order:
            acc.merge(piece(units))
    kept = [(s.residual, s.unit) for s in one.extremes[("d", True)]]
    assert kept == [(s.residual, s.unit) for s in other.extremes[("d", True)]]
    assert kept == [(6.0, 6), (6.0, 13), (6.0, 20), (6.0, 27), (6.0, 34), (5.0, 5), (5.0, 12), (5.0, 19)]


def test_column_tails_merged_in_any_order_keep_each_position_s_most_extreme() -> None:
    one, other = A.AnomalyAcc(per_row=3), A.AnomalyAcc(per_row=3)
    pieces = [(np.array([0, 0, 2, 0]), np.array([5.0, 9.0, 1.0, 7.0])),
              (np.array([0, 0, 1]), np.array([8.0, 6.0, 2.0]))]
    for acc, order in ((one, pieces), (other, pieces[::-1])):
        for positions, magnitudes in order:
            part = A.AnomalyAcc(per_row=3)
            part.column_tails("d", True, 3, positions, magnitudes)
            acc.merge(part)
    assert one.column_tops[("d", True)].tolist() == other.column_tops[("d", True)].tolist() == [
        [9.0, 8.0, 7.0, 6.0], [2.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


#: A Q8_0 tensor whose real lower tail (position 5 of every fifth row quiet, /32) is longer than a flip
#: by /16: the flip is not the most extreme of its direction, only alone in its row and position.
QUIET = ("blk.0.attn_v.weight", 512, 256, 5)


@pytest.fixture(scope="module")
def quiet_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    name, rows, cols, position = QUIET
    w = _weights(rows, cols, 7) * 2.5
    w[::5, 32 * position:32 * position + 32] /= 32
    path = tmp_path_factory.mktemp("quiet") / "model.gguf"
    write_gguf(path, [TensorSpec(name, T.Q8_0, (cols, rows), quantize(w, GT.Q8_0).tobytes())],
               {"general.architecture": "llama"})
    return path


def test_a_real_tail_supported_by_its_position_is_not_an_anomaly(quiet_model: Path) -> None:
    report = ggaudit.scan(str(quiet_model), anomalies=True)
    assert report.ok and report.counts["anomaly"] == 0


def test_a_flip_inside_the_real_tail_is_found_alone_in_its_row_and_position(
        quiet_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name, _, _, position = QUIET
    row, block = 301, 2                                    # a row without a quiet block
    _, bits = _field(quiet_model, name, "d", row, block)
    assert bits & (1 << 12) and block != position          # the flip divides the scale by 16
    copy, (offset,) = _flipped(quiet_model, tmp_path, [(name, "d", row, block, 12)])
    assert _anomalies(ggaudit.scan(str(copy), anomalies=True)) == [
        (name, row, block, block * 32, "d", offset, f"0x{bits ^ (1 << 12):04x}")]
    monkeypatch.setattr(A, "LONE_DOWN", 100.0)             # the isolation test alone misses it
    assert _anomalies(ggaudit.scan(str(copy), anomalies=True)) == []


def test_a_flip_in_a_row_that_holds_a_real_outlier_is_not_alone(quiet_model: Path, tmp_path: Path) -> None:
    # Row 300 has a quiet block at position 5: a /16 block beside it is what real tails look like.
    _, bits = _field(quiet_model, QUIET[0], "d", 300, 2)
    assert bits & (1 << 12)
    copy, _ = _flipped(quiet_model, tmp_path, [(QUIET[0], "d", 300, 2, 12)])
    assert _anomalies(ggaudit.scan(str(copy), anomalies=True)) == []


def test_centering_is_the_median_against_the_largest_magnitude() -> None:
    blocks = np.array([[-3.0, -1.0, 0.0, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0, 8.0], [0.0] * 5])
    assert A.centering(blocks).tolist() == [0.0, 0.375, 0.0]


@pytest.mark.parametrize(("name", "expected"), [("Q4_1", True), ("Q5_1", True), ("Q2_K", True), ("Q4_K", True),
                                                ("Q5_K", True), ("Q4_0", False), ("Q8_0", False), ("Q6_K", False),
                                                ("IQ4_XS", False), ("MXFP4", False)])
def test_types_with_a_minimum(name: str, expected: bool) -> None:
    assert A.has_minimum(layout_of(T[name])) is expected


def test_magnitudes_of_keys_per_encoding() -> None:
    cases = ((Encoding.F16, 0x3C00, 1.0), (Encoding.BF16, 0x3F80, 1.0), (Encoding.E8M0, 127, 1.0),
             (Encoding.E8M0, 130, 8.0), (Encoding.F16, 0x0001, 2 ** -24))
    for encoding, key, value in cases:
        model = A.unfitted(0, ("d",), encoding, 0x7C00 if encoding is Encoding.F16 else 0xFFFF, 8, False)
        assert A.magnitude(model, key) == value


# ----- the command line ----------------------------------------------------------------------------------

def test_cli_lines_and_exit_status(model: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    clean = runner.invoke(main, ["scan", "--anomalies", str(model)])
    assert clean.exit_code == 0, clean.output
    assert clean.output.splitlines()[-1] == "result: clean: no non-finite values or anomalous scales"
    copy, (offset,) = _flipped(model, tmp_path, [("blk.0.attn_q.weight", "d", 300, 5, 14)])
    _, bits = _field(copy, "blk.0.attn_q.weight", "d", 300, 5)
    result = runner.invoke(main, ["scan", "--anomalies", str(copy)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[1] == ("tensor blk.0.attn_q.weight (Q8_0 [256, 512]): nan 0, +inf 0, -inf 0, outlier 0, anomaly 1; "
                        + lines[1].split("; ")[1])
    head = (f"  anomaly at file {copy} offset {offset}, length 2: tensor blk.0.attn_q.weight, row 300, block 5, "
            f"columns 160..191, field d: expected |d| near ")
    assert lines[2].startswith(head) and f"got 0x{bits:04x} (" in lines[2]
    assert lines[2].endswith(" spreads from its row and position")
    assert lines[3].startswith("note: an anomaly is a likely, not a certain, flipped bit")
    assert lines[4] == ("result: findings in 1 of 4 tensors: nan 0, +inf 0, -inf 0, outlier 0, anomaly 1")
    doc = json.loads(runner.invoke(main, ["scan", "--anomalies", "--json", str(copy)]).output)
    finding = doc["models"][0]["tensors"][1]["findings"][0]
    assert (finding["kind"], finding["offset"], finding["bits"], finding["cause"]) == ("anomaly", offset,
                                                                                   f"0x{bits:04x}", "statistic")
    assert set(finding) >= {"score", "expected", "typical"}


def test_cli_refuses_anomalies_on_dask() -> None:
    result = CliRunner().invoke(main, ["scan", "--anomalies", "--dask", "local:1", "x.gguf"])
    assert result.exit_code == 2
    assert result.output.endswith("error: --anomalies: reads blocks again where the results are merged: not on a "
                                  "Dask cluster\n")


def test_an_mxfp4_shared_exponent_is_modelled_too(tmp_path: Path) -> None:
    # E8M0 keys are exact log2 (one unit per power of two): a flipped bit 3 multiplies the block by 256.
    path = tmp_path / "mxfp4.gguf"
    rows, cols = 256, 256
    write_gguf(path, [TensorSpec("blk.0.ffn_up_exps.weight", T.MXFP4, (cols, rows),
                                 quantize(_weights(rows, cols, 9), GT.MXFP4).tobytes())], {})
    assert ggaudit.scan(str(path), anomalies=True).ok
    t = ggaudit.open_model(str(path)).tensor("blk.0.ffn_up_exps.weight")
    offset = t.offset + (40 * (cols // 32) + 6) * 17
    data = bytearray(path.read_bytes())
    before = data[offset]
    data[offset] ^= 1 << 3
    path.write_bytes(bytes(data))
    report = ggaudit.scan(str(path), anomalies=True)
    assert _anomalies(report) == [("blk.0.ffn_up_exps.weight", 40, 6, 192, "e", offset, f"0x{before ^ 8:02x}")]


def test_rows_of_takes_the_same_keys_as_the_fancy_index_it_replaces() -> None:
    """Scoring gathers the rows worth a look a tensor at a time (issue 37): the same keys, in the same order
    (pairs, fields, blocks), as ``keys[tensors, :, :, rows]``, for one tensor and for a batch whose pairs
    skip a tensor and hold one row of another."""
    keys = np.arange(4 * 2 * 3 * 5, dtype=np.uint16).reshape(4, 2, 3, 5)      # tensors, fields, blocks, rows
    for tensors, rows in (([0, 0, 0], [0, 2, 4]), ([0, 0, 2, 3, 3], [1, 3, 0, 2, 4]), ([1], [4])):
        t, r = np.array(tensors), np.array(rows)
        got = A._rows_of(keys, t, r)
        assert got.flags.c_contiguous and got.shape == (len(rows), 2, 3)
        assert np.array_equal(got, keys[t, :, :, r])
    # One pair spelled out: tensor 2, row 0 holds its fields' blocks at that row.
    assert A._rows_of(keys, np.array([2]), np.array([0]))[0].tolist() == [[60, 65, 70], [75, 80, 85]]
