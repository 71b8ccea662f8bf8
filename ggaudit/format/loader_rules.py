"""The hyperparameter and required-tensor rules of llama.cpp's loader (llama-cpp-python 0.3.36's vendored
llama.cpp), each a table per architecture, for ``consistency.check_metadata``.

Sources: ``src/llama-model.cpp`` ``llama_model_base::load_hparams`` (the GGML_ASSERTs on ``expert_count`` and
``expert_used_count``; "invalid n_rot" for llama), ``src/llama-model-loader.cpp`` ``get_key_or_arr`` ("key %s
has wrong array length; expected %u, got %u") and ``create_tensor`` ("missing tensor '%s'" for a tensor not
flagged TENSOR_NOT_REQUIRED), ``src/llama-model.cpp`` ``create_tensor_qkv`` (a fused ``attn_qkv`` stands for
q, k and v), ``src/models/<arch>.cpp`` ``load_arch_tensors`` (the tensors each layer requires),
``src/llama-context.cpp`` (a context of the model's own length fails when ``context_length`` is 0).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from .layout import ArrayValue, MetaValue, Tensor
from .metadata_finding import MetadataFinding


class Header(Protocol):
    """What consistency's header gives a rule: its keys, integer lookups and the finding factory."""

    arch: str

    def entry(self, key: str) -> MetaValue | None: ...

    def integer(self, key: str, layer: int = 0) -> int | None: ...

    def hp(self, name: str, layer: int = 0) -> int | None: ...

    def finding(self, key: str, expected: str, actual: str, tensor: str | None = None,
                severity: str = ...) -> MetadataFinding: ...


ERROR, WARNING = "error", "warning"
_LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")

#: Keys load_hparams reads with get_key_or_arr for every architecture: one value, or one per layer.
PER_LAYER_KEYS = ("feed_forward_length", "attention.head_count", "attention.head_count_kv", "expert_used_count")

# ----- required tensors per layer ------------------------------------------------------------------------
#: One requirement: the alternatives that satisfy it, each a set of names that must all be stored.
Requirement = tuple[tuple[str, ...], ...]

_QKV: Requirement = (("attn_qkv.weight",), ("attn_q.weight", "attn_k.weight", "attn_v.weight"))


def _one(name: str) -> Requirement:
    return ((name,),)


_NORMS = (_one("attn_norm.weight"), _one("ffn_norm.weight"))
_DENSE = (_one("ffn_gate.weight"), _one("ffn_down.weight"), _one("ffn_up.weight"))
_MOE = (_one("ffn_gate_inp.weight"),)
_QK_NORM = (_one("attn_q_norm.weight"), _one("attn_k_norm.weight"))
_POST = (_one("post_attention_norm.weight"), _one("post_ffw_norm.weight"))


def _llama(experts: int) -> Sequence[Requirement]:
    """models/llama.cpp: the expert tensors themselves are TENSOR_NOT_REQUIRED (merged or split), the router is."""
    return (*_NORMS, _QKV, _one("attn_output.weight"), *(_MOE if experts else _DENSE))


def _qwen(experts: int) -> Sequence[Requirement]:
    return (*_NORMS, _QKV, _one("attn_output.weight"), *_DENSE)


def _qwen3(experts: int) -> Sequence[Requirement]:
    return (*_qwen(experts), *_QK_NORM)


def _gemma2(experts: int) -> Sequence[Requirement]:
    return (*_qwen(experts), *_POST)


def _gemma3(experts: int) -> Sequence[Requirement]:
    return (*_gemma2(experts), *_QK_NORM)


#: Per architecture (load_arch_tensors of src/models/<arch>.cpp): the tensors every layer requires.
REQUIRED_PER_LAYER: Mapping[str, Callable[[int], Sequence[Requirement]]] = {
    "llama": _llama, "qwen2": _qwen, "qwen3": _qwen3, "gemma2": _gemma2, "gemma3": _gemma3}
#: Outside the layers, every architecture above requires the final norm (and the embedding: a file without it, or
#: without layers, is taken for a fragment, an adapter or a test's handful of tensors, not a model to load).
REQUIRED_TOP = ("output_norm.weight",)
EMBEDDING = "token_embd.weight"


def _layers_stored(tensors: Sequence[Tensor]) -> dict[int, set[str]]:
    layers: dict[int, set[str]] = {}
    for t in tensors:
        if (m := _LAYER.match(t.name)) is not None:
            layers.setdefault(int(m.group(1)), set()).add(m.group(2))
    return layers


def _missing(stored: set[str], need: Requirement) -> str | None:
    """The tensor a layer lacks for ``need`` (the last alternative's first absent name, as the loader asks for
    it), or None when an alternative is stored whole."""
    if any(all(name in stored for name in names) for names in need):
        return None
    return next(name for name in need[-1] if name not in stored)


def required_tensors(h: Header, tensors: Sequence[Tensor]) -> Iterator[MetadataFinding]:
    """Each tensor load_tensors requires and the file lacks: one finding per name, its layers counted
    (a layer with no tensor at all is block_count's finding), in a file that holds the token embedding."""
    rules = REQUIRED_PER_LAYER.get(h.arch)
    names = {t.name for t in tensors}
    layers = _layers_stored(tensors)
    if rules is None or EMBEDDING not in names or not layers:
        return
    key = f"{h.arch}.block_count"
    for name in REQUIRED_TOP:
        if name not in names:
            yield h.finding(key, f"tensor {name} (load_tensors requires it)", f"missing tensor '{name}'", name)
    experts = h.hp("expert_count") or 0
    lacking: dict[str, list[int]] = {}
    for layer, stored in sorted(layers.items()):
        for need in rules(experts):
            if (absent := _missing(stored, need)) is not None:
                lacking.setdefault(absent, []).append(layer)
    for suffix, where in lacking.items():
        first = f"blk.{where[0]}.{suffix}"
        yield h.finding(key, f"blk.N.{suffix} in every layer (load_tensors requires it)",
                        f"missing tensor '{first}'" + (f" (and in {len(where) - 1} more layers)"
                                                       if len(where) > 1 else ""), first)


# ----- hyperparameters ---------------------------------------------------------------------------------------

def _array_length(h: Header, key: str) -> int | None:
    entry = h.entry(key)
    return entry.value.count if entry is not None and isinstance(entry.value, ArrayValue) else None


def per_layer_arrays(h: Header) -> Iterator[MetadataFinding]:
    """get_key_or_arr: a per-layer key stored as an array holds exactly block_count elements."""
    n_layer = h.hp("block_count")
    if n_layer is None:
        return
    for name in PER_LAYER_KEYS:
        key = f"{h.arch}.{name}"
        n = _array_length(h, key)
        if n is not None and n != n_layer:
            yield h.finding(key, f"one value per layer: {n_layer} (block_count)",
                            f"key {key} has wrong array length; expected {n_layer}, got {n}")


def _used_max(h: Header) -> int | None:
    """expert_used_count, or the largest of its per-layer values the header decoded."""
    entry = h.entry(f"{h.arch}.expert_used_count")
    if entry is not None and isinstance(entry.value, ArrayValue):
        values = [v for v in entry.value.head if isinstance(v, int)]
        return max(values) if values else None
    return h.hp("expert_used_count")


def experts(h: Header) -> Iterator[MetadataFinding]:
    """load_hparams: GGML_ASSERT(n_expert_used_max <= n_expert), and n_expert_used_max > 0 when n_expert > 0."""
    used, count = _used_max(h), h.hp("expert_count") or 0
    key = f"{h.arch}.expert_used_count"
    if used is not None and used > count:
        yield h.finding(key, f"at most expert_count ({count}) experts used",
                        f"{used} used: GGML_ASSERT(n_expert_used_max <= hparams.n_expert) failed, the loader aborts")
    elif count > 0 and not used:
        yield h.finding(key, f"at least 1 of the {count} experts (expert_count) used",
                        f"{'no key' if used is None else used}: GGML_ASSERT(n_expert_used_max > 0) failed, "
                        "the loader aborts")


def _head_k(h: Header) -> int | None:
    """load_hparams: key_length, else n_embd / n_head (None: no heads)."""
    given = h.hp("attention.key_length")
    embd, head = h.hp("embedding_length"), h.hp("attention.head_count")
    if given is not None or embd is None or not head:
        return given
    return embd // head


#: Architectures that need rope.dimension_count to be the head size, and what refuses another: llama's
#: load_hparams, or the graph of the first decode (GGML_ASSERT(n_embd_head == n_rot) in src/models/<arch>.cpp).
ROPE_IS_HEAD: Mapping[str, str] = {
    "llama": "invalid n_rot: {n_rot}, expected {head} (the loader refuses it)",
    "qwen2": "{n_rot}: GGML_ASSERT(n_embd_head == n_rot) fails, the first decode aborts",
    "qwen3": "{n_rot}: GGML_ASSERT(n_embd_head == n_rot) fails, the first decode aborts"}


#: Any architecture: rope rotates the first n_rot dimensions of each head, so more than the head aborts the first
#: decode in ggml's rope (ggml/src/ggml-cpu/ops.cpp: GGML_ASSERT(n_dims <= ne0)).
ROPE_ABOVE_HEAD = "{n_rot}: GGML_ASSERT(n_dims <= ne0) fails in ggml's rope, the first decode aborts"


def rope_dimensions(h: Header) -> Iterator[MetadataFinding]:
    """rope.dimension_count other than the head size (``n_rot != n_embd_head_k``) where the architecture rotates
    whole heads; above it (``n_rot > n_embd_head_k``) in any architecture."""
    n_rot, head = h.hp("rope.dimension_count"), _head_k(h)
    if n_rot is None or head is None or n_rot == head:
        return
    reason = ROPE_IS_HEAD.get(h.arch) or (ROPE_ABOVE_HEAD if n_rot > head else None)
    if reason is not None:
        yield h.finding(f"{h.arch}.rope.dimension_count", f"the head size, {head}" if h.arch in ROPE_IS_HEAD else
                        f"at most the head size, {head}", reason.format(n_rot=n_rot, head=head))


def context_length(h: Header) -> Iterator[MetadataFinding]:
    """A warning: context_length 0 loads, but a context of the model's own length (n_ctx 0, the default of
    llama_context_default_params) fails: "n_ctx and model->hparams.n_ctx_train cannot both be zero"."""
    if h.hp("context_length") == 0:
        yield h.finding(f"{h.arch}.context_length", "the trained context length, above 0",
                        "0: a context of the default length fails (n_ctx and model->hparams.n_ctx_train cannot "
                        "both be zero)", severity=WARNING)


#: Architectures whose q (and attention output) is n_embd wide rather than n_head x head: with heads that do not
#: divide the embedding, the first decode's reshape of q into heads aborts (the lane's qwen2 case).
HEADS_MUST_DIVIDE: Mapping[str, str] = {
    "qwen2": "{embd} / {head} heads: q is {embd} wide, heads of {size}; GGML_ASSERT(ggml_nelements(a) == "
             "ne0*ne1*ne2) fails reshaping it, the first decode aborts"}
HEADS_ROUNDED = "{embd} / {head} heads: the loader rounds the head size down to {size} (it loads and runs)"


def head_division(h: Header) -> Iterator[MetadataFinding]:
    """Heads that do not divide the embedding, with no key_length: load_hparams takes ``n_embd / n_head``
    rounded down and loads; an error where the first decode then aborts (HEADS_MUST_DIVIDE), else a warning
    (the heads cover less than the embedding; the tensors' shapes, checked apart, follow the rounded size)."""
    embd, head = h.hp("embedding_length"), h.hp("attention.head_count")
    if embd is None or not head or embd % head == 0 or h.hp("attention.key_length") is not None:
        return
    fatal = HEADS_MUST_DIVIDE.get(h.arch)
    yield h.finding(f"{h.arch}.attention.head_count", f"a divisor of embedding_length {embd} (or a key_length)",
                    (fatal or HEADS_ROUNDED).format(embd=embd, head=head, size=embd // head),
                    severity=ERROR if fatal else WARNING)


#: The hyperparameter rules, each from load_hparams (every architecture).
HPARAM_RULES: tuple[Callable[[Header], Iterator[MetadataFinding]], ...] = (
    per_layer_arrays, experts, rope_dimensions, context_length, head_division)
