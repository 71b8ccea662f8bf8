"""Metadata that contradicts the tensors a file holds: what llama.cpp's loader refuses (or warns about) when
the header's promises and the tensors disagree, found before an engine says "cannot open model".

Checked for every architecture: ``<arch>.block_count`` against the ``blk.N`` tensors stored (the loader
creates layers ``0 .. block_count-1`` and refuses a missing tensor or one too many); the vocabulary
(``tokenizer.ggml.tokens``) against the rows of ``token_embd`` and ``output``, the lengths of ``scores`` and
``token_type``, a BPE vocabulary's ``merges``; ``<arch>.vocab_size``, every special-token id in range and
``general.file_type`` against the tensor types present (warnings: the loader loads such files). For llama,
qwen2/3 (MoE too), gemma 2/3/3n, phi3 and deepseek2 (mistral and mixtral are ``llama``), also each tensor's shape
where the loader fixes it from ``embedding_length``, ``head_count``, ``head_count_kv``, ``feed_forward_length``,
``expert_count`` and their kin. A vocabulary-only file (no tensors) gets the tokenizer checks only.

The loader's hyperparameter rules (rope dimensions, experts, per-layer arrays, context length, heads that do not
divide the embedding) and required tensors are ``loader_rules``' tables; the merges against the vocabulary,
``vocab_merges``. scripts/loader_lane.sh holds every rule against llama.cpp's own loader (tests/loader_cases.py).

Sources (llama.cpp as vendored by llama-cpp-python 0.3.36, whose loader the lane builds): ``src/llama-model.cpp``
``llama_model_base::load_hparams`` (head sizes default to ``n_embd / n_head``; ``head_count_kv`` to
``head_count``; per-layer arrays) and ``src/models/<arch>.cpp`` ``load_arch_tensors`` (each
``create_tensor(tn(...), {ne0, ne1, ...})``); ``src/llama-arch.cpp`` (tensor names: ``post_attention_norm``,
``post_ffw_norm``); ``src/llama-model-loader.cpp`` ``check_tensor_dims`` (a shape must match exactly, trailing
axes 1); ``src/llama-vocab.cpp`` ``llama_vocab::impl::load`` ("bad special token ... using default id" for an
id ``>= n_tokens``: a warning; "cannot find tokenizer merges" for a ``gpt2`` vocabulary without merges).

Only the header is read (the parser keeps each array's length, not its strings), so the checks cost
microseconds whatever the vocabulary's size; only a BPE vocabulary's tokens and merges are read again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .layout import ArrayValue, MetaValue, Model, Tensor
from .loader_rules import HPARAM_RULES, required_tensors
from .metadata_finding import ERROR, WARNING, MetadataFinding
from .vocab_merges import unknown_merges

__all__ = ["FILE_TYPE_MAIN", "SPECIAL_TOKEN_KEYS", "check_metadata"]

#: llama-vocab.cpp's special-token keys (``seperator`` is llama.cpp's spelling).
SPECIAL_TOKEN_KEYS = tuple(f"tokenizer.ggml.{name}_token_id" for name in (
    "bos", "eos", "eot", "eom", "unknown", "seperator", "padding", "cls", "mask", "fim_pre", "fim_suf", "fim_mid",
    "fim_pad", "fim_rep", "fim_sep", "prefix", "suffix", "middle"))

#: ``general.file_type`` (llama.h ``llama_ftype``) -> the GGML type llama-quant.cpp gives most tensors:
#: a file of that file type holds at least one tensor of it.
FILE_TYPE_MAIN = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
                  11: "Q3_K", 12: "Q3_K", 13: "Q3_K", 14: "Q4_K", 15: "Q4_K", 16: "Q5_K", 17: "Q5_K", 18: "Q6_K",
                  19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K", 22: "IQ3_S", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
                  26: "IQ3_S", 27: "IQ3_S", 28: "IQ2_S", 29: "IQ2_S", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
                  36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4"}

_LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")
#: Architectures whose vocabulary is not the rows of token_embd/output (audio codes).
_NO_VOCAB_ROWS = frozenset({"wavtokenizer-dec"})


class _Header:
    """The metadata of a model as the loader reads it: ``<arch>.`` keys, per-layer arrays, defaults."""

    def __init__(self, model: Model) -> None:
        self.path = model.files[0].path
        self.meta: Mapping[str, MetaValue] = model.metadata
        self.arch = model.architecture or ""

    def entry(self, key: str) -> MetaValue | None:
        return self.meta.get(key)

    def shown(self, key: str) -> Any:
        """A key's value as a finding shows it: an array by its length (``array[N]``)."""
        value = self.meta[key].value
        return f"array[{value.count}]" if isinstance(value, ArrayValue) else value

    def finding(self, key: str, expected: str, actual: str, tensor: str | None = None,
                severity: str = ERROR) -> MetadataFinding:
        entry = self.meta.get(key)
        return MetadataFinding(path=self.path, key=key, value=None if entry is None else self.shown(key),
                               offset=None if entry is None else entry.offset, tensor=tensor, expected=expected,
                               actual=actual, severity=severity)

    def integer(self, key: str, layer: int = 0) -> int | None:
        """An integer key, or its element for ``layer`` when it is a per-layer array (None: absent, not an
        integer, or an element past the array's decoded head)."""
        entry = self.meta.get(key)
        value = None if entry is None else entry.value
        if isinstance(value, ArrayValue):
            value = value.head[layer] if layer < len(value.head) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def hp(self, name: str, layer: int = 0) -> int | None:
        return self.integer(f"{self.arch}.{name}", layer)


# ----- tensor shapes from hyperparameters ----------------------------------------------------------

@dataclass(frozen=True)
class _Dim:
    """An axis length the loader expects, the key that fixes it, and how (``head_count 9 x key_length 64``)."""

    value: int
    key: str
    how: str


def _dim(h: _Header, name: str, layer: int = 0) -> _Dim | None:
    value = h.hp(name, layer)
    return None if value is None else _Dim(value, f"{h.arch}.{name}", f"{name} {value}")


def _times(a: _Dim | None, b: _Dim | None, factor: int = 1) -> _Dim | None:
    if a is None or b is None:
        return None
    return _Dim(a.value * b.value * factor, a.key, f"{a.how} x {b.how}" + (f" x {factor}" if factor != 1 else ""))


def _scaled(a: _Dim | None, factor: int) -> _Dim | None:
    return None if a is None else _Dim(a.value * factor, a.key, f"{factor} x {a.how}")


def _plus(a: _Dim | None, b: _Dim | None) -> _Dim | None:
    if a is None or b is None:
        return None
    return _Dim(a.value + b.value, b.key, f"{a.how} + {b.how}")


class _Dims:
    """The loader's hyperparameters of one layer (load_hparams' defaults included)."""

    def __init__(self, h: _Header, layer: int) -> None:
        self.h, self.layer = h, layer
        self.embd = _dim(h, "embedding_length")
        self.head = _dim(h, "attention.head_count", layer)
        self.head_kv = _dim(h, "attention.head_count_kv", layer) or self.head
        self.ff = _dim(h, "feed_forward_length", layer)
        self.expert = _dim(h, "expert_count")
        self.head_k = self._head_size("attention.key_length")
        self.head_v = self._head_size("attention.value_length")

    def _head_size(self, name: str) -> _Dim | None:
        """``key_length``/``value_length``, else ``n_embd / n_head`` (load_hparams)."""
        given = _dim(self.h, name)
        if given is not None or self.embd is None or self.head is None or not self.head.value:
            return given
        return _Dim(self.embd.value // self.head.value, self.embd.key,
                    f"embedding_length {self.embd.value} / attention.head_count {self.head.value}")

    @property
    def q(self) -> _Dim | None:
        return _times(self.head, self.head_k)

    @property
    def k_gqa(self) -> _Dim | None:
        return _times(self.head_kv, self.head_k)

    @property
    def v_gqa(self) -> _Dim | None:
        return _times(self.head_kv, self.head_v)


Shape = tuple[_Dim | None, ...]
#: Per architecture: a tensor's name (``blk.N.`` removed) -> its shape from one layer's hyperparameters.
Rules = Mapping[str, Callable[[_Dims], Shape]]

_EMBD: Rules = {
    "output_norm.weight": lambda d: (d.embd,), "attn_norm.weight": lambda d: (d.embd,),
    "ffn_norm.weight": lambda d: (d.embd,),
}
_ATTENTION: Rules = {
    "attn_q.weight": lambda d: (d.embd, d.q), "attn_k.weight": lambda d: (d.embd, d.k_gqa),
    "attn_v.weight": lambda d: (d.embd, d.v_gqa), "attn_output.weight": lambda d: (d.q, d.embd),
}
_DENSE_FFN: Rules = {
    "ffn_gate.weight": lambda d: (d.embd, d.ff), "ffn_up.weight": lambda d: (d.embd, d.ff),
    "ffn_down.weight": lambda d: (d.ff, d.embd),
}
_QK_NORM: Rules = {"attn_q_norm.weight": lambda d: (d.head_k,), "attn_k_norm.weight": lambda d: (d.head_k,)}
#: llama-arch.cpp's names: LLM_TENSOR_ATTN_POST_NORM "post_attention_norm", LLM_TENSOR_FFN_POST_NORM "post_ffw_norm".
_POST_NORM: Rules = {"post_attention_norm.weight": lambda d: (d.embd,), "post_ffw_norm.weight": lambda d: (d.embd,)}


def _experts(ff: Callable[[_Dims], _Dim | None]) -> Rules:
    """The routed experts of a mixture-of-experts layer, each ``ff`` wide."""
    return {"ffn_gate_inp.weight": lambda d: (d.embd, d.expert),
            "ffn_gate_exps.weight": lambda d: (d.embd, ff(d), d.expert),
            "ffn_up_exps.weight": lambda d: (d.embd, ff(d), d.expert),
            "ffn_down_exps.weight": lambda d: (ff(d), d.embd, d.expert)}


def _expert_ff(d: _Dims) -> _Dim | None:
    """qwen3moe: ``expert_feed_forward_length``, else ``n_ff / n_expert_used``."""
    given = _dim(d.h, "expert_feed_forward_length")
    used = d.h.hp("expert_used_count")
    if given is not None or d.ff is None or not used:
        return given
    return _Dim(d.ff.value // used, d.ff.key, f"feed_forward_length {d.ff.value} / expert_used_count {used}")


def _llama(d: _Dims) -> Rules:
    """llama (mistral, mixtral): dense layers without ``expert_count``, experts ``feed_forward_length`` wide."""
    return {**_EMBD, **_ATTENTION, **(_experts(lambda d: d.ff) if d.expert and d.expert.value else _DENSE_FFN),
            "attn_q.bias": lambda d: (d.embd,), "attn_output.bias": lambda d: (d.embd,)}


def _qwen2(d: _Dims) -> Rules:
    """qwen2 sizes q and the output by ``n_embd``, k and v by ``n_embd_v_gqa`` (its biases too)."""
    return {**_EMBD, **_DENSE_FFN, "attn_q.weight": lambda d: (d.embd, d.embd),
            "attn_k.weight": lambda d: (d.embd, d.v_gqa), "attn_v.weight": lambda d: (d.embd, d.v_gqa),
            "attn_output.weight": lambda d: (d.embd, d.embd), "attn_q.bias": lambda d: (d.embd,),
            "attn_k.bias": lambda d: (d.v_gqa,), "attn_v.bias": lambda d: (d.v_gqa,)}


def _qwen3(d: _Dims) -> Rules:
    return {**_EMBD, **_ATTENTION, **_QK_NORM, **_DENSE_FFN, "attn_k.weight": lambda d: (d.embd, d.v_gqa),
            "attn_v.weight": lambda d: (d.embd, d.v_gqa)}


def _qwen3moe(d: _Dims) -> Rules:
    return {**_qwen3(d), **_experts(_expert_ff)}


def _gemma(d: _Dims) -> Rules:
    return {**_EMBD, **_ATTENTION, **_POST_NORM, **_DENSE_FFN}


def _gemma3(d: _Dims) -> Rules:
    return {**_gemma(d), **_QK_NORM}


def _gemma3n(d: _Dims) -> Rules:
    """gemma3n's feed-forward widths are per layer: only the attention and the norms are fixed here."""
    return {**_EMBD, **_ATTENTION, **_POST_NORM, **_QK_NORM}


def _phi3(d: _Dims) -> Rules:
    """phi3: one fused qkv (``n_embd + 2 n_embd_gqa``), the up projection twice ``n_ff`` (gate and up)."""
    return {**_EMBD, "attn_qkv.weight": lambda d: (d.embd, _plus(d.embd, _scaled(d.v_gqa, 2))),
            "attn_output.weight": lambda d: (d.embd, d.embd), "ffn_down.weight": lambda d: (d.ff, d.embd),
            "ffn_up.weight": lambda d: (d.embd, _scaled(d.ff, 2))}


def _deepseek2(d: _Dims) -> Rules:
    """deepseek2: low-rank attention (its ranks fix the norms and ``q_a``), ``leading_dense_block_count``
    dense layers, then routed experts ``expert_feed_forward_length`` wide."""
    lead = d.h.hp("leading_dense_block_count") or 0
    ffn = _DENSE_FFN if d.layer < lead else _experts(lambda d: _dim(d.h, "expert_feed_forward_length"))
    return {**_EMBD, **ffn,
            "attn_q_a.weight": lambda d: (d.embd, _dim(d.h, "attention.q_lora_rank")),
            "attn_q_a_norm.weight": lambda d: (_dim(d.h, "attention.q_lora_rank"),),
            "attn_kv_a_norm.weight": lambda d: (_dim(d.h, "attention.kv_lora_rank"),)}


#: The architectures whose tensor shapes are checked, from load_tensors' cases.
ARCHITECTURES: Mapping[str, Callable[[_Dims], Rules]] = {
    "llama": _llama, "qwen2": _qwen2, "qwen3": _qwen3, "qwen3moe": _qwen3moe, "gemma2": _gemma,
    "gemma3": _gemma3, "gemma3n": _gemma3n, "phi3": _phi3, "deepseek2": _deepseek2}
#: Tensors outside the layers, the same in every architecture above (their rows, the vocabulary: _vocab_rows).
_TOP: Rules = {"token_embd.weight": lambda d: (d.embd, None), "output.weight": lambda d: (d.embd, None),
               "output_norm.weight": lambda d: (d.embd,)}


# ----- the checks --------------------------------------------------------------------------------

def _count(h: _Header, key: str) -> int | None:
    """An array key's length (None: absent or not an array)."""
    entry = h.entry(key)
    return entry.value.count if entry is not None and isinstance(entry.value, ArrayValue) else None


def _tokenizer(h: _Header) -> Iterator[MetadataFinding]:
    n_vocab = _count(h, "tokenizer.ggml.tokens")
    if n_vocab is None:
        return
    vocab = f"{n_vocab} tokens in tokenizer.ggml.tokens"
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        n = _count(h, key)
        if n is not None and n != n_vocab:
            yield h.finding(key, f"one entry per token ({n_vocab})", f"{n} entries for {vocab}")
    size = h.hp("vocab_size")
    if size is not None and size != n_vocab:
        # A warning: the loader sizes the model by the tokens; vocab_size only names the model's type.
        yield h.finding(f"{h.arch}.vocab_size", f"{size} tokens", vocab, severity=WARNING)
    if h.entry("tokenizer.ggml.model") is not None and h.shown("tokenizer.ggml.model") == "gpt2" and \
            not _count(h, "tokenizer.ggml.merges"):
        yield h.finding("tokenizer.ggml.model", "tokenizer.ggml.merges for a gpt2 (BPE) vocabulary",
                        "no merges" if h.entry("tokenizer.ggml.merges") is None else "an empty merges array")
    for key in SPECIAL_TOKEN_KEYS:
        token = h.integer(key)
        if token is not None and not 0 <= token < n_vocab:
            # A warning: llama-vocab.cpp logs "bad special token" and keeps its default id; the model loads.
            yield h.finding(key, f"a token id in 0..{n_vocab - 1}", f"{token}, outside {vocab}", severity=WARNING)


def _layers(h: _Header, tensors: Sequence[Tensor]) -> Iterator[MetadataFinding]:
    """``block_count`` against the layers stored: an index past it, or a layer below it with no tensor."""
    key = f"{h.arch}.block_count"
    n_layer = h.integer(key)
    if n_layer is None:
        return
    stored: dict[int, str] = {}
    for t in tensors:
        if (m := _LAYER.match(t.name)) is not None:
            stored.setdefault(int(m.group(1)), t.name)
    if not stored:
        return      # no layer tensors at all (a projector, an embedding-only file): nothing to count
    beyond = sorted(i for i in stored if i >= n_layer)
    if beyond:
        yield h.finding(key, f"layers 0..{n_layer - 1}",
                        f"tensors of {len(beyond)} more layer{'s' if len(beyond) > 1 else ''}, the first of "
                        f"layer {beyond[0]}", tensor=stored[beyond[0]])
    # Counted from the layers stored, never by walking 0..block_count: the value is the file's (up to 2**64).
    missing = n_layer - (len(stored) - len(beyond))
    if missing > 0:
        first = next(i for i in range(n_layer) if i not in stored)     # within len(stored) + 1 steps
        yield h.finding(key, f"tensors for each of layers 0..{n_layer - 1}",
                        f"none for {missing} of them, the first layer {first}")


def _vocab_rows(h: _Header, tensors: Sequence[Tensor]) -> Iterator[MetadataFinding]:
    """token_embd and output hold a row per token: ``{n_embd, n_vocab}`` in every load_tensors case."""
    n_vocab = _count(h, "tokenizer.ggml.tokens")
    if n_vocab is None or h.arch in _NO_VOCAB_ROWS:
        return
    for t in tensors:
        if t.name in ("token_embd.weight", "output.weight") and len(t.shape) >= 2 and t.shape[1] != n_vocab:
            yield h.finding("tokenizer.ggml.tokens", f"a row per token: {n_vocab} rows (ne[1])",
                            f"{t.shape[1]} rows, shape {_shape(t.shape)}", tensor=t.name)


def _shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def _shapes(h: _Header, tensors: Sequence[Tensor]) -> Iterator[MetadataFinding]:
    """Each tensor against the shape load_tensors gives it, where the architecture fixes it."""
    rules_of = ARCHITECTURES.get(h.arch)
    if rules_of is None:
        return
    dims_by_layer: dict[int, tuple[_Dims, Rules]] = {}
    for t in tensors:
        m = _LAYER.match(t.name)
        layer, name = (int(m.group(1)), m.group(2)) if m else (0, t.name)
        if m is None and name not in _TOP:
            continue
        if layer not in dims_by_layer:
            d = _Dims(h, layer)
            dims_by_layer[layer] = d, rules_of(d)
        d, rules = dims_by_layer[layer]
        rule = rules.get(name) if m else _TOP[name]
        if rule is not None:
            yield from _axes(h, t, rule(d))


def _axes(h: _Header, t: Tensor, expected: Shape) -> Iterator[MetadataFinding]:
    """The first axis of ``t`` whose length is not the one its key fixes (an axis not fixed is skipped);
    axes past the expected ones must be 1 (check_tensor_dims)."""
    for axis, want in enumerate(expected):
        if want is None:
            continue
        got = t.shape[axis] if axis < len(t.shape) else 1
        if got != want.value:
            yield h.finding(want.key, f"ne[{axis}] = {want.value} ({want.how})",
                            f"ne[{axis}] = {got}, shape {_shape(t.shape)}", tensor=t.name)
            return
    known = [w for w in expected if w is not None]
    if len(known) == len(expected) and any(n != 1 for n in t.shape[len(expected):]):
        yield h.finding(known[0].key, f"{len(known)} axes, shape {_shape([w.value for w in known])}",
                        f"shape {_shape(t.shape)}", tensor=t.name)


def _file_type(h: _Header, tensors: Sequence[Tensor]) -> Iterator[MetadataFinding]:
    """A warning: ``general.file_type`` names a quantization none of the tensors is stored in."""
    ftype = h.integer("general.file_type")
    main = FILE_TYPE_MAIN.get(ftype) if ftype is not None else None
    present = {t.ggml_type.name for t in tensors}
    if main is None or not tensors or main in present:
        return
    yield h.finding("general.file_type", f"tensors of {main} (the main type of file type {ftype})",
                    "tensors of " + ", ".join(sorted(present)) + " only", severity=WARNING)


def check_metadata(model: Model, *, merges: bool = True) -> tuple[MetadataFinding, ...]:
    """Every metadata key of ``model`` that contradicts its tensors or its vocabulary, tokenizer first.
    A model without tensors (a vocabulary-only file) gets the tokenizer checks only. ``merges``: also read a
    BPE vocabulary's tokens and merges again and look each merge's halves up (``vocab_merges``: a warning the
    loader accepts, and the one check here that costs milliseconds: some 20 for 49,152 tokens)."""
    h = _Header(model)
    found = [*_tokenizer(h), *(unknown_merges(h, h.path) if merges else ())]
    tensors = model.tensors
    if tensors:
        for rule in HPARAM_RULES:
            found.extend(rule(h))
        for check in (_layers, required_tensors, _vocab_rows, _shapes, _file_type):
            found.extend(check(h, tensors))
    return tuple(found)
