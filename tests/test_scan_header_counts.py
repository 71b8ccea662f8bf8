"""A file with no tensor (a vocabulary-only file: llama.cpp ships 19) is a report, not an exception, when its header's
checks ran (issue 36, item 5): the report says what they covered, counted (the metadata keys, the vocabulary and
what is checked against it, the merges, the chat templates), and that the file holds no tensor data; exit 0 when
nothing is wrong. A file where nothing ran stays NothingChecked (exit 2). A scan of a model with tensors says
nothing new, in the text or the JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

import ggaudit
from ggaudit.errors import NothingChecked
from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.scan.report import HeaderChecks

from support import run_cli
from test_json_schema import SCHEMA

TOKENS = ["a", "b", "c", "ab", "abc", "<s>", "</s>"]
LOOP = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def _vocab(path: Path, **meta: Any) -> Path:
    """A BPE vocabulary-only file: 7 tokens, 2 merges, bos and eos ids, a chat template; 10 metadata keys."""
    write_gguf(path, [], {"general.architecture": "llama", "tokenizer.ggml.model": "gpt2",
                          "tokenizer.ggml.tokens": TOKENS, "tokenizer.ggml.token_type": [1] * len(TOKENS),
                          "tokenizer.ggml.merges": ["a b", "ab c"], "tokenizer.ggml.bos_token_id": 5,
                          "tokenizer.ggml.eos_token_id": 6, "tokenizer.chat_template": LOOP,
                          "general.name": "vocab", "general.alignment": 32, **meta})
    return path


def test_a_vocabulary_only_file_is_a_report_of_what_its_header_checks_covered(tmp_path: Path) -> None:
    report = ggaudit.scan(_vocab(tmp_path / "vocab.gguf"))
    assert report.ok and report.tensors == () and report.stats.bytes == 0
    assert report.header_checked == ("tokenizer.ggml.tokens", "tokenizer.chat_template")
    assert report.header_checks == HeaderChecks(metadata_keys=10, tokens=7, special_tokens=2, merges=2,
                                                merges_looked_up=False, templates=1)


def test_the_text_says_the_counts_and_that_no_tensor_data_was_there(tmp_path: Path) -> None:
    path = _vocab(tmp_path / "vocab.gguf")
    result = run_cli(["scan", path])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"model {path}: 0 tensors, 0 bytes of tensor data scanned in 1 file",
        "header checked: tokenizer.ggml.tokens, tokenizer.chat_template",
        "checked: 10 metadata keys parsed; a vocabulary of 7 tokens, 2 special-token ids, 2 merges (not looked up: "
        "--deep does); 1 chat template; no tensor data in the file",
        "result: clean: nothing wrong in tokenizer.ggml.tokens, tokenizer.chat_template; no tensor data to scan"]
    deep = run_cli(["scan", path, "--deep"])
    assert deep.exit_code == 0 and ("checked: 10 metadata keys parsed; a vocabulary of 7 tokens, 2 special-token ids, "
                                    "2 merges (each looked up in it); 1 chat template; no tensor data in the file"
                                    ) in deep.output.splitlines()


def test_the_json_says_the_counts(tmp_path: Path) -> None:
    result = run_cli(["scan", _vocab(tmp_path / "vocab.gguf"), "--json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert list(Draft202012Validator(SCHEMA).iter_errors(doc)) == []
    [model] = doc["models"]
    assert (model["ok"], model["tensors"], model["stats"]["bytes"]) == (True, [], 0)
    assert model["header_checks"] == {"metadata_keys": 10, "tokens": 7, "special_tokens": 2, "merges": 2,
                                      "merges_looked_up": False, "templates": 1}


def test_a_finding_in_a_vocabulary_only_file_is_exit_1_with_the_counts(tmp_path: Path) -> None:
    """A merge naming a token the vocabulary lacks, found with --deep: a warning that fails the run."""
    path = _vocab(tmp_path / "vocab.gguf", **{"tokenizer.ggml.merges": ["a b", "x y"]})
    result = run_cli(["scan", path, "--deep", "--json"])
    assert result.exit_code == 1
    [model] = json.loads(result.stdout)["models"]
    assert [(m["key"], m["severity"]) for m in model["metadata"]] == [("tokenizer.ggml.merges", "warning")]
    assert model["header_checks"]["merges_looked_up"] is True


def test_a_template_without_a_vocabulary_is_checked_by_itself(tmp_path: Path) -> None:
    path = tmp_path / "template.gguf"
    write_gguf(path, [], {"general.architecture": "llama", "tokenizer.chat_template": LOOP})
    report = ggaudit.scan(path)
    assert report.header_checks == HeaderChecks(metadata_keys=2, templates=1)
    assert run_cli(["scan", path]).output.splitlines()[2] == (
        "checked: 2 metadata keys parsed; 1 chat template; no tensor data in the file")


def test_a_file_where_no_check_ran_stays_nothing_checked(tmp_path: Path) -> None:
    """Keys, but no tensor, vocabulary or template: no check had anything to check."""
    path = tmp_path / "keys.gguf"
    write_gguf(path, [], {"general.architecture": "llama", "tokenizer.ggml.bos_token_id": 1})
    with pytest.raises(NothingChecked):
        ggaudit.scan(path)
    assert run_cli(["scan", path]).exit_code == 2


@pytest.mark.parametrize("tokens", [[], "t0 t1 t2"], ids=["empty", "a string"])
def test_a_vocabulary_the_checks_cannot_read_checks_nothing(tmp_path: Path, tokens: Any) -> None:
    """It said "clean: nothing wrong in tokenizer.ggml.tokens", exit 0, though no tokenizer check had a length to
    read: an empty array, or a string where the tokens' array belongs."""
    path = tmp_path / "vocab.gguf"
    write_gguf(path, [], {"general.architecture": "llama", "tokenizer.ggml.tokens": tokens})
    with pytest.raises(NothingChecked, match="holds no tensor, vocabulary or chat template; nothing was checked"):
        ggaudit.scan(path)
    assert run_cli(["scan", path]).exit_code == 2


def test_a_model_with_tensors_says_nothing_new(tmp_path: Path) -> None:
    """Its counts are in the library's report; its text and JSON are what they were."""
    path = tmp_path / "m.gguf"
    write_gguf(path, [TensorSpec("token_embd.weight", T.F32, (4, 7), bytes(4 * 28))],
               {"general.architecture": "llama", "tokenizer.ggml.tokens": TOKENS})
    report = ggaudit.scan(path)
    assert report.header_checks == HeaderChecks(metadata_keys=2, tokens=7)
    assert "header_checks" not in report.to_json()
    lines = run_cli(["scan", path]).output.splitlines()
    assert not any(line.startswith(("checked:", "header checked:")) for line in lines)
