"""Mixture-of-experts tensors (issue 13): a finding in ``blk.N.ffn_*_exps`` names its expert, and every
finding is counted per expert.

llama.cpp stores the experts of a layer as one 3-D tensor ``[ne0, ne1, n_expert]`` (2-D for their
biases, ``[ne0, n_expert]``): the expert is the last axis, so with rows counted across all experts (as a
finding's ``row`` is), the expert of row ``r`` is ``r // ne1``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.format.blocks import LAYOUTS
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.scan import workers as workers_module
from ggaudit.scan.report import ExpertCounts
from ggaudit.scan.run import scan

from support import run_cli
from scan_support import NONFINITE_BITS, finite_tensor, poke

UP = "blk.0.ffn_up_exps.weight"
NE0, NE1, EXPERTS = 8, 4, 8
NAN32, INF32 = 0x7FC00000, 0x7F800000
COUNTS_ZERO = {"nan": 0, "+inf": 0, "-inf": 0, "outlier": 0}


def _f32_experts(path: Path, poison: dict[tuple[int, int, int], int]) -> int:
    """An F32 expert tensor [8, 4, 8] with the given (expert, row in expert, column) -> bits; its offset."""
    values = np.ones((EXPERTS, NE1, NE0), dtype="<f4")
    bits = values.view("<u4")
    for (expert, row, column), b in poison.items():
        bits[expert, row, column] = b
    offsets = write_gguf(path, [TensorSpec(UP, T.F32, (NE0, NE1, EXPERTS), values.tobytes())],
                         {"general.architecture": "qwen3moe"})
    return offsets[UP]


def test_a_nan_in_expert_5_names_expert_5(tmp_path: Path) -> None:
    path = tmp_path / "moe.gguf"
    offset = _f32_experts(path, {(5, 2, 3): NAN32})
    result = run_cli(["scan", path])
    assert result.exit_code == 1, result.output
    at = offset + ((5 * NE1 + 2) * NE0 + 3) * 4
    assert result.stdout.splitlines()[1:] == [
        f"tensor {UP} (F32 [8, 4, 8]): nan 1, +inf 0, -inf 0, outlier 0; max finite |x| 1",
        f"  nan at file {path} offset {at}, length 4: tensor {UP}, expert 5, row 22, column 3: "
        "expected finite, got 0x7fc00000 (nan)",
        "  experts with findings: 1 of 8",
        "  expert 5: nan 1, +inf 0, -inf 0, outlier 0",
        "result: findings in 1 of 1 tensor: nan 1, +inf 0, -inf 0, outlier 0"]
    doc = json.loads(run_cli(["scan", path, "--json"]).stdout)["models"][0]["tensors"][0]
    assert (doc["n_experts"], doc["experts"]) == (8, [{"expert": 5, "counts": {**COUNTS_ZERO, "nan": 1}}])
    assert (doc["findings"][0]["expert"], doc["findings"][0]["row"]) == (5, 22)


def test_every_finding_is_counted_in_its_expert_beyond_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "moe.gguf"
    _f32_experts(path, {(5, 0, 0): NAN32, (5, 3, 7): NAN32, (5, 1, 1): INF32, (0, 0, 0): INF32,
                        (7, 3, 7): 0xFF800000})
    report = scan(path, limit=1)
    t = report.tensors[0]
    assert [f.expert for f in t.findings] == [0]
    assert t.experts == (ExpertCounts(expert=0, counts={**COUNTS_ZERO, "+inf": 1}),
                         ExpertCounts(expert=5, counts={**COUNTS_ZERO, "nan": 2, "+inf": 1}),
                         ExpertCounts(expert=7, counts={**COUNTS_ZERO, "-inf": 1}))
    assert sum(e.total for e in t.experts) == t.total == 5
    lines = run_cli(["scan", path, "--limit", "1"]).stdout.splitlines()
    assert lines[3:8] == ["  ... 4 more not listed (--limit)", "  experts with findings: 3 of 8",
                          "  expert 0: nan 0, +inf 1, -inf 0, outlier 0",
                          "  expert 5: nan 2, +inf 1, -inf 0, outlier 0",
                          "  expert 7: nan 0, +inf 0, -inf 1, outlier 0"]


def test_outliers_are_counted_per_expert(tmp_path: Path) -> None:
    path = tmp_path / "moe.gguf"
    _f32_experts(path, {(6, 0, 0): int(np.float32(9.0).view(np.uint32))})
    t = scan(path, max_abs=2.0).tensors[0]
    assert t.experts == (ExpertCounts(expert=6, counts={**COUNTS_ZERO, "outlier": 1}),)


def _q4k_experts(path: Path, units: list[int], experts: int = 6, ne1: int = 3) -> None:
    layout = LAYOUTS[T.Q4_K]
    shape = (2 * layout.block_size, ne1, experts)                  # 2 blocks a row
    data = finite_tensor(T.Q4_K, shape, 7)
    for unit in units:
        poke(data, layout, unit, layout.fields[0], NONFINITE_BITS[layout.fields[0].encoding]["nan"])
    write_gguf(path, [TensorSpec("blk.3.ffn_down_exps.weight", T.Q4_K, shape, bytes(data)),
                      TensorSpec("blk.3.ffn_down_shexp.weight", T.Q4_K, shape[:2], bytes(data[:2 * 3 * 144]))])


def test_quantized_experts_by_block_rows_and_every_read_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "moe.gguf"
    # 2 blocks a row, 3 rows an expert: 6 blocks an expert. Units 31 and 35: expert 5; unit 6: expert 1.
    _q4k_experts(path, [6, 31, 35])
    reference = scan(path, workers=0)
    t = reference.tensors[0]
    assert (t.n_experts, [(f.expert, f.row, f.block) for f in t.findings]) == (6, [(1, 3, 0), (5, 15, 1), (5, 17, 1)])
    assert t.experts == (ExpertCounts(expert=1, counts={**COUNTS_ZERO, "nan": 1}),
                         ExpertCounts(expert=5, counts={**COUNTS_ZERO, "nan": 2}))
    shared = reference.tensors[1]           # the shared expert is one matrix: no experts
    assert (shared.name, shared.n_experts, shared.experts) == ("blk.3.ffn_down_shexp.weight", None, ())
    monkeypatch.setattr(workers_module, "TASK_BYTES", 1000)        # the tensor cut across tasks
    assert scan(path, workers=2).tensors == reference.tensors
    assert scan(path, hashes=("sha256",)).tensors == reference.tensors
    assert scan(path, deep=True).tensors[0].experts == t.experts


def test_fail_fast_counts_its_one_finding_in_its_expert(tmp_path: Path) -> None:
    path = tmp_path / "moe.gguf"
    _q4k_experts(path, [31, 35])
    t = scan(path, fail_fast=True).tensors[0]
    assert t.experts == (ExpertCounts(expert=5, counts={**COUNTS_ZERO, "nan": 1}),)


def test_expert_biases_are_two_dimensional(tmp_path: Path) -> None:
    path = tmp_path / "moe.gguf"
    bias = np.zeros((4, 16), dtype="<f4")             # 4 experts of 16 values: one row each
    bias[2, 9] = np.nan
    write_gguf(path, [TensorSpec("blk.1.ffn_gate_exps.bias", T.F32, (16, 4), bias.tobytes())])
    t = scan(path).tensors[0]
    assert (t.n_experts, t.findings[0].expert, t.findings[0].row) == (4, 2, 2)


def test_other_tensors_have_no_experts(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    values = np.ones((2, 4, 8), dtype="<f4")
    values[1, 0, 0] = np.nan
    write_gguf(path, [TensorSpec("blk.0.attn_k.weight", T.F32, (8, 4, 2), values.tobytes()),
                      TensorSpec("ffn_up_exps_notes", T.F32, (8, 4, 2), values.tobytes())])
    report = scan(path)
    assert [(t.n_experts, t.experts, t.findings[0].expert) for t in report.tensors] == [(None, (), None)] * 2
    doc = report.to_json()["tensors"][0]
    assert (doc["n_experts"], doc["experts"], doc["findings"][0]["expert"]) == (None, [], None)
    assert "expert" not in run_cli(["scan", path]).stdout
