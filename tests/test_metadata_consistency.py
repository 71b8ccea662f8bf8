"""Metadata that contradicts the tensors (kind ``metadata``): each contradiction on a small built llama, named by
key, value, tensor and what contradicts it; the real models and llama.cpp's vocabulary files are clean
(scripts/check_real_gguf.py runs every one of them).

The shapes are llama.cpp's: src/llama-model.cpp ``load_tensors``, case LLM_ARCH_LLAMA (llama-cpp-python
0.3.36's vendored llama.cpp): ``attn_q {n_embd, n_embd_head_k * n_head}``, ``attn_k {n_embd, n_embd_k_gqa}``,
``ffn_gate {n_embd, n_ff}``, ``ffn_gate_inp {n_embd, n_expert}``; ``token_embd {n_embd, n_vocab}`` with
``n_vocab = vocab.n_tokens()``; heads default to ``n_embd / n_head`` (``load_hparams``); a special-token id
``>= n_tokens`` is llama-vocab.cpp's "bad special token".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ggaudit.cli import main
from ggaudit.format.blocks import GGMLQuantizationType as T, GGUFValueType as V
from ggaudit.format.build import TensorSpec, Typed, write_gguf
from ggaudit.format.consistency import check_metadata
from ggaudit.format.layout import open_model
from ggaudit.scan.run import scan

N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB, N_LAYER = 8, 2, 1, 16, 6, 2


def _f32(name: str, *shape: int) -> TensorSpec:
    n = 1
    for d in shape:
        n *= d
    return TensorSpec(name, T.F32, shape, bytes(4 * n))


def _meta(**changes: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "general.architecture": "llama", "general.file_type": 0, "llama.block_count": N_LAYER,
        "llama.embedding_length": N_EMBD, "llama.feed_forward_length": N_FF, "llama.attention.head_count": N_HEAD,
        "llama.attention.head_count_kv": N_HEAD_KV, "llama.vocab_size": N_VOCAB, "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [f"t{i}" for i in range(N_VOCAB)],
        "tokenizer.ggml.scores": [0.0] * N_VOCAB, "tokenizer.ggml.token_type": Typed(V.INT32, [1] * N_VOCAB, True),
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    meta.update(changes)
    return {k: v for k, v in meta.items() if v is not None}


def _tensors(**shapes: tuple[int, ...]) -> list[TensorSpec]:
    """The tensors of a 2-layer llama, ``shapes`` replacing some (by name, ``.`` as ``__``)."""
    head = N_EMBD // N_HEAD
    names = {"token_embd.weight": (N_EMBD, N_VOCAB), "output_norm.weight": (N_EMBD,)}
    for i in range(N_LAYER):
        names |= {f"blk.{i}.attn_norm.weight": (N_EMBD,), f"blk.{i}.attn_q.weight": (N_EMBD, head * N_HEAD),
                  f"blk.{i}.attn_k.weight": (N_EMBD, head * N_HEAD_KV),
                  f"blk.{i}.attn_v.weight": (N_EMBD, head * N_HEAD_KV),
                  f"blk.{i}.attn_output.weight": (head * N_HEAD, N_EMBD), f"blk.{i}.ffn_norm.weight": (N_EMBD,),
                  f"blk.{i}.ffn_gate.weight": (N_EMBD, N_FF), f"blk.{i}.ffn_down.weight": (N_FF, N_EMBD),
                  f"blk.{i}.ffn_up.weight": (N_EMBD, N_FF)}
    names |= {k.replace("__", "."): v for k, v in shapes.items()}
    return [_f32(name, *shape) for name, shape in names.items()]


def _found(tmp_path: Path, tensors: list[TensorSpec] | None = None, **meta: Any) -> list[dict[str, Any]]:
    path = tmp_path / "m.gguf"
    write_gguf(path, _tensors() if tensors is None else tensors, _meta(**meta))
    return [{k: v for k, v in f.to_json().items() if k not in ("file", "offset")}
            for f in check_metadata(open_model(path))]


def test_a_consistent_model_has_no_finding(tmp_path: Path) -> None:
    assert _found(tmp_path) == []


def test_block_count_above_the_layers_stored(tmp_path: Path) -> None:
    assert _found(tmp_path, **{"llama.block_count": 3}) == [
        {"kind": "metadata", "severity": "error", "key": "llama.block_count", "value": 3, "tensor": None,
         "expected": "tensors for each of layers 0..2", "actual": "none for 1 of them, the first layer 2"}]


def test_a_layer_past_block_count(tmp_path: Path) -> None:
    assert _found(tmp_path, **{"llama.block_count": 1}) == [
        {"kind": "metadata", "severity": "error", "key": "llama.block_count", "value": 1,
         "tensor": "blk.1.attn_norm.weight", "expected": "layers 0..0",
         "actual": "tensors of 1 more layer, the first of layer 1"}]



def test_a_block_count_of_2_to_the_64_is_counted_not_walked(tmp_path: Path) -> None:
    # The value is the file's: walking 0..block_count for the missing layers would never end.
    huge = 2**64 - 1
    assert _found(tmp_path, **{"llama.block_count": Typed(V.UINT64, huge)}) == [
        {"kind": "metadata", "severity": "error", "key": "llama.block_count", "value": huge, "tensor": None,
         "expected": f"tensors for each of layers 0..{huge - 1}",
         "actual": f"none for {huge - N_LAYER} of them, the first layer {N_LAYER}"}]

def test_vocabulary_against_token_embd_rows_and_vocab_size(tmp_path: Path) -> None:
    tokens = [f"t{i}" for i in range(N_VOCAB + 1)]
    found = _found(tmp_path, **{"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": [0.0] * 7,
                                "tokenizer.ggml.token_type": Typed(V.INT32, [1] * 7, True)})
    assert found == [
        {"kind": "metadata", "severity": "warning", "key": "llama.vocab_size", "value": 6, "tensor": None,
         "expected": "6 tokens", "actual": "7 tokens in tokenizer.ggml.tokens"},
        {"kind": "metadata", "severity": "error", "key": "tokenizer.ggml.tokens", "value": "array[7]",
         "tensor": "token_embd.weight", "expected": "a row per token: 7 rows (ne[1])",
         "actual": "6 rows, shape [8, 6]"}]


def test_scores_token_type_and_merges(tmp_path: Path) -> None:
    found = _found(tmp_path, **{"tokenizer.ggml.scores": [0.0] * 5,
                                "tokenizer.ggml.token_type": Typed(V.INT32, [1] * 9, True),
                                "tokenizer.ggml.model": "gpt2"})
    assert [(f["key"], f["value"], f["expected"], f["actual"]) for f in found] == [
        ("tokenizer.ggml.scores", "array[5]", "one entry per token (6)",
         "5 entries for 6 tokens in tokenizer.ggml.tokens"),
        ("tokenizer.ggml.token_type", "array[9]", "one entry per token (6)",
         "9 entries for 6 tokens in tokenizer.ggml.tokens"),
        ("tokenizer.ggml.model", "gpt2", "tokenizer.ggml.merges for a gpt2 (BPE) vocabulary", "no merges")]


@pytest.mark.parametrize("key", ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
                                 "tokenizer.ggml.eot_token_id", "tokenizer.ggml.seperator_token_id"])
def test_a_special_token_id_past_the_vocabulary(tmp_path: Path, key: str) -> None:
    # A warning: llama-vocab.cpp logs "bad special token" and keeps its default id (the loader lane loads it).
    assert _found(tmp_path, **{key: N_VOCAB}) == [
        {"kind": "metadata", "severity": "warning", "key": key, "value": 6, "tensor": None,
         "expected": "a token id in 0..5", "actual": "6, outside 6 tokens in tokenizer.ggml.tokens"}]


def test_head_count_contradicts_attn_q(tmp_path: Path) -> None:
    # head_count 4 with key_length unset: heads of 8 / 4 = 2, q = 4 x 2 = 8 (still 8) -- so give key_length 4.
    found = _found(tmp_path, **{"llama.attention.key_length": 8})
    assert found[0] == {
        "kind": "metadata", "severity": "error", "key": "llama.attention.head_count", "value": 2,
        "tensor": "blk.0.attn_q.weight", "expected": "ne[1] = 16 (attention.head_count 2 x attention.key_length 8)",
        "actual": "ne[1] = 8, shape [8, 8]"}


def test_head_count_kv_contradicts_attn_k(tmp_path: Path) -> None:
    found = _found(tmp_path, **{"llama.attention.head_count_kv": 2})
    assert found == [{"kind": "metadata", "severity": "error", "key": "llama.attention.head_count_kv", "value": 2,
                      "tensor": f"blk.{i}.attn_{kv}.weight",
                      "expected": "ne[1] = 8 (attention.head_count_kv 2 x embedding_length 8 / attention.head_count 2)",
                      "actual": "ne[1] = 4, shape [8, 4]"} for i in range(N_LAYER) for kv in "kv"]


def test_embedding_length_and_feed_forward_length(tmp_path: Path) -> None:
    tensors = _tensors(blk__1__ffn_gate__weight=(N_EMBD, 12), output_norm__weight=(9,))
    found = _found(tmp_path, tensors)
    assert [(f["key"], f["value"], f["tensor"], f["expected"], f["actual"]) for f in found] == [
        ("llama.embedding_length", 8, "output_norm.weight", "ne[0] = 8 (embedding_length 8)", "ne[0] = 9, shape [9]"),
        ("llama.feed_forward_length", 16, "blk.1.ffn_gate.weight", "ne[1] = 16 (feed_forward_length 16)",
         "ne[1] = 12, shape [8, 12]")]


def test_expert_count_contradicts_the_router(tmp_path: Path) -> None:
    tensors = [*_tensors(), *(_f32(f"blk.{i}.ffn_gate_inp.weight", N_EMBD, 4) for i in range(N_LAYER))]
    found = _found(tmp_path, tensors, **{"llama.expert_count": 8, "llama.expert_used_count": 2})
    assert [(f["key"], f["value"], f["tensor"], f["actual"]) for f in found] == [
        ("llama.expert_count", 8, f"blk.{i}.ffn_gate_inp.weight", "ne[1] = 4, shape [8, 4]") for i in range(N_LAYER)]


def test_file_type_naming_a_type_no_tensor_has_is_a_warning(tmp_path: Path) -> None:
    assert _found(tmp_path, **{"general.file_type": 15}) == [
        {"kind": "metadata", "severity": "warning", "key": "general.file_type", "value": 15, "tensor": None,
         "expected": "tensors of Q4_K (the main type of file type 15)", "actual": "tensors of F32 only"}]


def test_a_vocabulary_only_file_gets_the_tokenizer_checks_only(tmp_path: Path) -> None:
    # block_count 32 and no layer stored is a vocabulary file, not a contradiction; the bad eos id is one.
    found = _found(tmp_path, [], **{"llama.block_count": 32, "tokenizer.ggml.eos_token_id": 99})
    assert [(f["key"], f["value"]) for f in found] == [("tokenizer.ggml.eos_token_id", 99)]


def test_scan_reports_it_with_the_value_offset_and_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    key = "llama.rope.dimension_count"
    write_gguf(path, _tensors(), _meta(**{key: 8}))
    entry = open_model(path).metadata[key]
    report = scan(str(path))
    assert not report.ok and [(m.key, m.offset) for m in report.metadata] == [(key, entry.offset)]
    [d] = list(report.diagnostics())
    assert (d.kind, d.severity, d.field, d.offset) == ("metadata", "error", key, entry.offset)
    result = CliRunner().invoke(main, ["scan", "--format", "json", str(path)])
    assert result.exit_code == 1
    [model] = json.loads(result.output)["models"]
    assert model["metadata"][0]["value"] == 8 and model["metadata"][0]["offset"] == entry.offset
    text = CliRunner().invoke(main, ["scan", str(path)])
    assert text.exit_code == 1
    assert (f"metadata {key} = 8 at file {path} offset {entry.offset}: expected the head size, 4, got invalid "
            "n_rot: 8, expected 4 (the loader refuses it)") in text.output
    assert "1 metadata finding" in text.output


def test_check_exits_1_on_a_block_count_its_tensors_contradict(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, _tensors(), _meta(**{"llama.block_count": 5}))
    offset = open_model(path).metadata["llama.block_count"].offset
    result = CliRunner().invoke(main, ["check", "--json", str(path)])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    [model] = doc["models"]
    assert (doc["status"], model["ok"], model["verdict"]) == ("findings", False, "unverified")
    [c] = [c for c in model["conclusions"] if c["code"] == "metadata"]
    assert (c["evidence"]["key"], c["evidence"]["value"], c["evidence"]["offset"], c["evidence"]["actual"]) == (
        "llama.block_count", 5, offset, "none for 3 of them, the first layer 2")
    # Every path agreeing is not "nothing wrong" when the header contradicts the tensors.
    assert "nothing-wrong" not in [c["code"] for c in model["conclusions"]]
    text = CliRunner().invoke(main, ["check", str(path)])
    assert text.exit_code == 1 and "nothing wrong was found" not in text.stdout
    # The first line, the verdict, says so too: the bytes agreeing is not the whole answer.
    assert text.stdout.splitlines()[0] == (f"{path}: unverified: no published reference, so the file can only be "
                                           "checked against itself; buffered, mmap and direct reads agree; but the "
                                           "scan found metadata findings (below)")
    assert f"metadata llama.block_count = 5 at file {path} offset {offset}: expected tensors for each" in text.stdout


# ----- the loader's rules (ggaudit/format/loader_rules.py, vocab_merges.py), each proved by scripts/loader_lane.sh --

def _full(tmp_path: Path, key: str, tensors: list[TensorSpec] | None = None, **meta: Any) -> list[dict[str, Any]]:
    """The findings on ``key``, with the offset its value is stored at checked."""
    path = tmp_path / "m.gguf"
    write_gguf(path, _tensors() if tensors is None else tensors, _meta(**meta))
    model = open_model(path)
    found = [f.to_json() for f in check_metadata(model) if f.key == key]
    for f in found:
        assert (f.pop("file"), f.pop("offset")) == (str(path), model.metadata[key].offset)
    return found


def _row(key: str, value: Any, expected: str, actual: str, tensor: str | None = None,
         severity: str = "error") -> dict[str, Any]:
    return {"kind": "metadata", "severity": severity, "key": key, "value": value, "tensor": tensor,
            "expected": expected, "actual": actual}


def test_llama_rope_dimension_count_other_than_the_head(tmp_path: Path) -> None:
    key = "llama.rope.dimension_count"
    assert _full(tmp_path, key, **{key: 2}) == [_row(key, 2, "the head size, 4",
                                                     "invalid n_rot: 2, expected 4 (the loader refuses it)")]


def test_rope_dimension_count_above_the_head_in_any_architecture(tmp_path: Path) -> None:
    meta = {k.replace("llama.", "gemma3."): v for k, v in _meta().items()}
    key = "gemma3.rope.dimension_count"
    assert _full(tmp_path, key, **(meta | {"general.architecture": "gemma3", key: 6})) == [
        _row(key, 6, "at most the head size, 4",
             "6: GGML_ASSERT(n_dims <= ne0) fails in ggml's rope, the first decode aborts")]


def test_expert_used_count_above_expert_count(tmp_path: Path) -> None:
    key = "llama.expert_used_count"
    assert _full(tmp_path, key, **{key: 1}) == [_row(
        key, 1, "at most expert_count (0) experts used",
        "1 used: GGML_ASSERT(n_expert_used_max <= hparams.n_expert) failed, the loader aborts")]
    assert _full(tmp_path, key, **{key: 0, "llama.expert_count": 4}) == [_row(
        key, 0, "at least 1 of the 4 experts (expert_count) used",
        "0: GGML_ASSERT(n_expert_used_max > 0) failed, the loader aborts")]


def test_a_per_layer_array_not_block_count_long(tmp_path: Path) -> None:
    key = "llama.attention.head_count"
    assert _full(tmp_path, key, **{key: [N_HEAD] * 3}) == [_row(
        key, "array[3]", "one value per layer: 2 (block_count)",
        "key llama.attention.head_count has wrong array length; expected 2, got 3")]


def test_a_required_tensor_missing_from_a_layer(tmp_path: Path) -> None:
    tensors = [t for t in _tensors() if t.name not in ("blk.1.attn_q.weight", "output_norm.weight")]
    assert _full(tmp_path, "llama.block_count", tensors) == [
        _row("llama.block_count", 2, "tensor output_norm.weight (load_tensors requires it)",
             "missing tensor 'output_norm.weight'", "output_norm.weight"),
        _row("llama.block_count", 2, "blk.N.attn_q.weight in every layer (load_tensors requires it)",
             "missing tensor 'blk.1.attn_q.weight'", "blk.1.attn_q.weight")]


def test_a_fused_qkv_stands_for_q_k_and_v(tmp_path: Path) -> None:
    tensors = [t for t in _tensors() if t.name.split(".")[-2] not in ("attn_q", "attn_k", "attn_v")]
    tensors += [_f32(f"blk.{i}.attn_qkv.weight", N_EMBD, 16) for i in range(N_LAYER)]
    assert _full(tmp_path, "llama.block_count", tensors) == []


def test_heads_that_do_not_divide_the_embedding(tmp_path: Path) -> None:
    # The tensors' shapes contradict the rounded heads too (findings of their own): only the division's here.
    def division(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [f for f in found if f["expected"].startswith("a divisor")]

    key = "llama.attention.head_count"
    assert division(_full(tmp_path, key, **{key: 3})) == [_row(
        key, 3, "a divisor of embedding_length 8 (or a key_length)",
        "8 / 3 heads: the loader rounds the head size down to 2 (it loads and runs)", severity="warning")]
    meta = {k.replace("llama.", "qwen2."): v for k, v in _meta().items()}
    key = "qwen2.attention.head_count"
    assert division(_full(tmp_path, key, **(meta | {"general.architecture": "qwen2", key: 3}))) == [_row(
        key, 3, "a divisor of embedding_length 8 (or a key_length)",
        "8 / 3 heads: q is 8 wide, heads of 2; GGML_ASSERT(ggml_nelements(a) == ne0*ne1*ne2) fails reshaping it, "
        "the first decode aborts")]


def test_context_length_zero_is_a_warning(tmp_path: Path) -> None:
    key = "llama.context_length"
    assert _full(tmp_path, key, **{key: 0}) == [_row(
        key, 0, "the trained context length, above 0", "0: a context of the default length fails (n_ctx and "
        "model->hparams.n_ctx_train cannot both be zero)", severity="warning")]


def test_merges_naming_tokens_not_in_the_vocabulary(tmp_path: Path) -> None:
    key = "tokenizer.ggml.merges"
    merges = ["t0 t1", "t2 zz", "t3 t4", "nospace", "t5 t0"]
    assert _full(tmp_path, key, **{"tokenizer.ggml.model": "gpt2", key: merges}) == [_row(
        key, "array[5]", "merges of two tokens of tokenizer.ggml.tokens",
        "2 of 5 merges name a token not in the vocabulary (the loader loads them; tokenization falls back): "
        "'t2 zz', 'nospace'", severity="warning")]


def test_scan_looks_merges_up_only_when_deep(tmp_path: Path) -> None:
    # The one metadata check that costs milliseconds (a warning the loader accepts): scan --deep's.
    key = "tokenizer.ggml.merges"
    path = tmp_path / "m.gguf"
    write_gguf(path, _tensors(), _meta(**{"tokenizer.ggml.model": "gpt2", key: ["t0 t1", "t2 zz"]}))
    assert [m.key for m in scan(path).metadata] == []
    assert [(m.key, m.severity) for m in scan(path, deep=True).metadata] == [(key, "warning")]


def test_a_long_vocabulary_is_walked_at_once_and_one_by_one_alike(tmp_path: Path) -> None:
    # 5000 tokens (numpy's candidates form the chain), then one token of 300 bytes (its length field has a
    # nonzero byte 1: the sequential walk): the same unknown merge found either way.
    key = "tokenizer.ggml.merges"
    for long in ("", "x" * 300):
        tokens = [f"t{i}" for i in range(5000)] + ([long] if long else [])
        meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": None,
                "tokenizer.ggml.token_type": None, "llama.vocab_size": None, key: ["t1 t2", "t4999 q"]}
        [f] = _full(tmp_path, key, [], **meta)
        assert f["actual"].startswith("1 of 2 merges") and f["actual"].endswith("'t4999 q'")
