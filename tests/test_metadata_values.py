"""``Model.metadata_values`` (issue 36, item 5): the metadata as plain Python values beside the typed
``Model.metadata`` (whose values are ``MetaValue``s, an array an ``ArrayValue`` of its length and first 16
elements): ``len(values["tokenizer.ggml.tokens"])`` works, every array is a tuple of all its elements."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ggaudit.errors import ReadError
from ggaudit.format.blocks import GGUFValueType as V
from ggaudit.format.build import Typed, write_gguf
from ggaudit.format.layout import ARRAY_HEAD, ArrayValue, MetaValue, open_model

TOKENS = [f"tok{i}" for i in range(40)] + ["caf\u00e9", ""]


def _model(tmp_path: Path) -> Path:
    path = tmp_path / "vocab.gguf"
    write_gguf(path, [], {
        "general.architecture": "llama", "llama.context_length": 4096, "general.flag": True,
        "llama.rope.freq_base": 10000.0, "tokenizer.ggml.tokens": TOKENS,
        "tokenizer.ggml.scores": Typed(V.FLOAT32, [0.5 * i for i in range(len(TOKENS))], is_array=True),
        "tokenizer.ggml.token_type": Typed(V.INT32, [1, -2, 3], is_array=True),
        "general.nested": Typed(V.ARRAY, [[1, 2], [3], []], is_array=True),
        "general.bools": Typed(V.BOOL, [True, False] * 20, is_array=True)})
    return path


def test_plain_values_beside_the_typed_ones(tmp_path: Path) -> None:
    model = open_model(_model(tmp_path))
    values = model.metadata_values
    tokens = values["tokenizer.ggml.tokens"]
    assert len(tokens) == 42 and tokens == tuple(TOKENS)     # past the parse's head of 16
    assert values["tokenizer.ggml.scores"] == tuple(0.5 * i for i in range(42))
    assert values["tokenizer.ggml.token_type"] == (1, -2, 3)
    assert values["general.nested"] == ((1, 2), (3,), ())
    assert values["general.bools"] == (True, False) * 20
    assert (values["general.architecture"], values["llama.context_length"], values["general.flag"],
            values["llama.rope.freq_base"]) == ("llama", 4096, True, 10000.0)
    assert list(values) == list(model.metadata) and len(values) == 9
    # The typed mapping is unchanged: MetaValue, an array's length and head only.
    typed = model.metadata["tokenizer.ggml.tokens"]
    assert isinstance(typed, MetaValue) and isinstance(typed.value, ArrayValue)
    assert (typed.value.count, typed.value.head) == (42, tuple(TOKENS[:ARRAY_HEAD]))


def test_the_values_are_read_only_and_read_once(tmp_path: Path) -> None:
    model = open_model(_model(tmp_path))
    values = model.metadata_values
    with pytest.raises(TypeError):
        values["general.architecture"] = "qwen2"      # type: ignore[index]
    assert model.metadata_values is values
    assert values["tokenizer.ggml.tokens"] is values["tokenizer.ggml.tokens"]
    with pytest.raises(KeyError):
        values["no.such.key"]


def test_a_file_rewritten_since_it_was_opened_gives_no_values_of_another_file(tmp_path: Path) -> None:
    path = _model(tmp_path)
    model = open_model(path)
    assert model.metadata_values["general.architecture"] == "llama"     # kept from the parse: no read
    data = path.read_bytes()
    path.write_bytes(data.replace(b"tok39", b"TOK39"))
    os.utime(path, ns=(1, 1))
    with pytest.raises(ReadError, match="since it was opened"):
        model.metadata_values["tokenizer.ggml.tokens"]
