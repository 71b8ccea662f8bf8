"""Crafted GGUF files for the loader lane (tests/test_loader_differential.py): per architecture a tiny valid
model (F32 tensors of a few elements, so llama.cpp's loader really loads it: that proves the baseline right),
and the same model with one fault each, from the rules of ggaudit/format/loader_rules.py and consistency.py.

Shapes are those of src/models/<arch>.cpp ``load_arch_tensors`` (llama-cpp-python 0.3.36's llama.cpp).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ggaudit.format.blocks import GGMLQuantizationType as T, GGUFValueType as V
from ggaudit.format.build import TensorSpec, Typed, write_gguf

EMBD, HEADS, HEADS_KV, HEAD, FF, VOCAB, LAYERS, EXPERTS = 8, 2, 1, 4, 16, 8, 2, 2
Shapes = dict[str, tuple[int, ...]]


@dataclass
class Model:
    """A model being crafted: its tensors' shapes by name and its metadata."""

    arch: str
    shapes: Shapes
    meta: dict[str, Any] = field(default_factory=dict)

    def hp(self, name: str, value: Any) -> None:
        self.meta[f"{self.arch}.{name}"] = value

    def write(self, path: Path) -> Path:
        tensors = [TensorSpec(name, T.F32, shape, bytes(4 * _size(shape))) for name, shape in self.shapes.items()]
        write_gguf(path, tensors, {k: v for k, v in self.meta.items() if v is not None})
        return path


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _tokenizer(vocab: int = VOCAB) -> dict[str, Any]:
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": [f"t{i}" for i in range(vocab)],
            "tokenizer.ggml.scores": [0.0] * vocab, "tokenizer.ggml.token_type": Typed(V.INT32, [1] * vocab, True),
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}


def _layer(q: int, head: int, experts: int) -> Shapes:
    """One layer of llama's shapes: q ``q`` wide, k and v ``HEADS_KV x head``."""
    kv = HEADS_KV * head
    shapes: Shapes = {"attn_norm.weight": (EMBD,), "attn_q.weight": (EMBD, q), "attn_k.weight": (EMBD, kv),
                      "attn_v.weight": (EMBD, kv), "attn_output.weight": (q, EMBD), "ffn_norm.weight": (EMBD,)}
    if experts:
        return shapes | {"ffn_gate_inp.weight": (EMBD, experts), "ffn_gate_exps.weight": (EMBD, FF, experts),
                         "ffn_down_exps.weight": (FF, EMBD, experts), "ffn_up_exps.weight": (EMBD, FF, experts)}
    return shapes | {"ffn_gate.weight": (EMBD, FF), "ffn_down.weight": (FF, EMBD), "ffn_up.weight": (EMBD, FF)}


def _qk_norm(head: int) -> Shapes:
    return {"attn_q_norm.weight": (head,), "attn_k_norm.weight": (head,)}


#: Per architecture, the tensors each layer adds to llama's (given the head size), and q's width.
_EXTRA: dict[str, Callable[[int], Shapes]] = {
    "llama": lambda head: {}, "qwen2": lambda head: {}, "qwen3": _qk_norm,
    "gemma3": lambda head: _qk_norm(head) | {"post_attention_norm.weight": (EMBD,), "post_ffw_norm.weight": (EMBD,)}}
#: qwen2 sizes q by the embedding, not by the heads (models/qwen2.cpp).
_Q_IS_EMBD = frozenset({"qwen2"})


def baseline(arch: str, experts: int = 0, heads: int = HEADS) -> Model:
    """A valid tiny model of ``arch`` (llama with ``experts``: mixtral's layout)."""
    head = EMBD // heads        # load_hparams' default head size, rounded down as it rounds it
    q = EMBD if arch in _Q_IS_EMBD else heads * head
    shapes: Shapes = {"token_embd.weight": (EMBD, VOCAB), "output_norm.weight": (EMBD,)}
    for i in range(LAYERS):
        shapes |= {f"blk.{i}.{name}": shape for name, shape in (_layer(q, head, experts) | _EXTRA[arch](head)).items()}
    m = Model(arch, shapes, {"general.architecture": arch, "general.file_type": 0, **_tokenizer()})
    for name, value in (("context_length", 64), ("embedding_length", EMBD), ("block_count", LAYERS),
                        ("feed_forward_length", FF), ("attention.head_count", heads),
                        ("attention.head_count_kv", HEADS_KV), ("attention.layer_norm_rms_epsilon", 1e-5)):
        m.hp(name, value)
    if experts:
        m.hp("expert_count", experts)
        m.hp("expert_used_count", 1)
    return m


def _gpt2(m: Model, merges: list[str] | None) -> None:
    tokens = ["a", "b", "ab", "c", "d", "cd", "e", "f"]
    m.meta |= {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges}


#: The faults: id -> what it does to a baseline.
FAULTS: dict[str, Callable[[Model], None]] = {
    "baseline": lambda m: None,
    "rope-dimension-count-above-head": lambda m: m.hp("rope.dimension_count", HEAD * 2),
    "rope-dimension-count-below-head": lambda m: m.hp("rope.dimension_count", HEAD // 2),
    "expert-used-without-experts": lambda m: m.hp("expert_used_count", 1),
    "head-count-array-too-long": lambda m: m.hp("attention.head_count", [HEADS] * (LAYERS + 1)),
    "feed-forward-array-too-short": lambda m: m.hp("feed_forward_length", [FF]),
    "head-count-kv-array-per-layer": lambda m: m.hp("attention.head_count_kv", [HEADS_KV] * LAYERS),
    "missing-attn-q": lambda m: m.shapes.pop("blk.1.attn_q.weight"),
    "missing-ffn-down": lambda m: m.shapes.pop("blk.0.ffn_down.weight"),
    "missing-output-norm": lambda m: m.shapes.pop("output_norm.weight"),
    "context-length-zero": lambda m: m.hp("context_length", 0),
    "ffn-gate-wrong-shape": lambda m: m.shapes.update({"blk.1.ffn_gate.weight": (EMBD, FF - 4)}),
    "block-count-above-layers": lambda m: m.hp("block_count", LAYERS + 1),
    "block-count-below-layers": lambda m: m.hp("block_count", LAYERS - 1),
    "vocab-size-mismatch": lambda m: m.hp("vocab_size", VOCAB + 1),
    "token-embd-rows": lambda m: m.shapes.update({"token_embd.weight": (EMBD, VOCAB - 1)}),
    "special-token-out-of-range": lambda m: m.meta.update({"tokenizer.ggml.eos_token_id": VOCAB}),
    "gpt2-without-merges": lambda m: _gpt2(m, None),
    "gpt2-merges": lambda m: _gpt2(m, ["a b", "c d"]),
    "gpt2-merges-unknown-token": lambda m: _gpt2(m, ["a b", "c zz"]),
}

#: Faults that only make sense with experts, and the moe model they apply to.
MOE_FAULTS: dict[str, Callable[[Model], None]] = {
    "baseline": lambda m: None,
    "expert-used-above-count": lambda m: m.hp("expert_used_count", EXPERTS + 1),
    "expert-used-zero": lambda m: m.hp("expert_used_count", 0),
    "missing-router": lambda m: m.shapes.pop("blk.0.ffn_gate_inp.weight"),
}

ARCHS = ("llama", "qwen2", "qwen3", "gemma3")


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Path], Path]


def _case(case_id: str, make: Callable[[], Model], fault: Callable[[Model], None]) -> Case:
    def build(folder: Path) -> Path:
        m = make()
        fault(m)
        return m.write(folder / f"{case_id}.gguf")
    return Case(case_id, build)


def cases() -> Iterator[Case]:
    """Every crafted file: each fault on each architecture, the expert faults on a mixtral-shaped llama, and
    head counts that do not divide the embedding (3 heads of 8 / 3 = 2, the tensors sized by that)."""
    for arch in ARCHS:
        for fault_id, fault in FAULTS.items():
            yield _case(f"{arch}-{fault_id}", lambda arch=arch: baseline(arch), fault)     # type: ignore[misc]
    for fault_id, fault in MOE_FAULTS.items():
        yield _case(f"mixtral-{fault_id}", lambda: baseline("llama", EXPERTS), fault)
    for arch in ARCHS:
        yield _case(f"{arch}-head-count-not-dividing", lambda arch=arch: baseline(arch, heads=3),  # type: ignore[misc]
                    lambda m: None)
