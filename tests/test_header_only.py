"""What a header alone gives a verdict on: a vocabulary-only GGUF (no tensor; llama.cpp ships 19) is checked by
its tokenizer and chat-template checks, so it is clean (exit 0) or has findings (exit 1), never "nothing was
checked" (exit 2) unless it holds no vocabulary and no template either. A template's warnings and notes are
advice: listed, but a run fails on them only with ``--fail-on``; a template's error fails it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ggaudit.cli import main
from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, write_gguf

TOKENS = [f"t{i}" for i in range(10)]
LOOP = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
#: A template whose only finding is a warning (a URL) on line 1, column 1.
URL = "https://example.invalid/x " + LOOP
#: A template whose finding is an error: an attribute starting with _.
DUNDER = "{{ ''.__class__ }}"


def _vocab(path: Path, **meta: Any) -> Path:
    write_gguf(path, [], {"general.architecture": "llama", "tokenizer.ggml.model": "llama",
                          "tokenizer.ggml.tokens": TOKENS, "tokenizer.ggml.scores": [0.0] * len(TOKENS),
                          "tokenizer.ggml.token_type": [1] * len(TOKENS), **meta})
    return path


def _model(path: Path, template: str) -> Path:
    write_gguf(path, [TensorSpec("w", T.F32, (4,), bytes(16))], {"tokenizer.chat_template": template})
    return path


def _run(*args: Any) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_a_vocabulary_only_file_is_checked_by_its_header(tmp_path: Path) -> None:
    path = _vocab(tmp_path / "vocab.gguf", **{"tokenizer.chat_template": LOOP})
    result = _run("scan", path)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1:] == [
        "header checked: tokenizer.ggml.tokens, tokenizer.chat_template",
        "checked: 6 metadata keys parsed; a vocabulary of 10 tokens, 0 special-token ids; 1 chat template; no tensor "
        "data in the file",
        "result: clean: nothing wrong in tokenizer.ggml.tokens, tokenizer.chat_template; no tensor data to scan"]
    doc = json.loads(_run("scan", path, "--json").output)["models"][0]
    assert (doc["ok"], doc["tensors"], doc["header_checked"]) == (True, [],
                                                                  ["tokenizer.ggml.tokens", "tokenizer.chat_template"])


def test_check_of_a_vocabulary_only_file_says_what_held_nothing_wrong(tmp_path: Path) -> None:
    result = _run("check", _vocab(tmp_path / "vocab.gguf"))
    assert result.exit_code == 0, result.output
    assert ("- nothing wrong was found: every path delivered the same bytes and nothing is wrong in "
            "tokenizer.ggml.tokens (no tensor data), but nothing published says they are the publisher's"
            ) in result.output.splitlines()


def test_a_vocabulary_only_file_with_a_bad_special_token_is_a_finding(tmp_path: Path) -> None:
    result = _run("scan", _vocab(tmp_path / "vocab.gguf", **{"tokenizer.ggml.bos_token_id": 10}), "--json")
    assert result.exit_code == 1
    [finding] = json.loads(result.output)["models"][0]["metadata"]
    # llama.cpp logs "bad special token" and uses its default id: a warning, which fails a run as metadata does.
    assert (finding["key"], finding["value"], finding["severity"]) == ("tokenizer.ggml.bos_token_id", 10, "warning")


def test_a_header_without_vocabulary_or_template_checks_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.gguf"
    write_gguf(path, [], {"general.architecture": "llama"})
    result = _run("scan", path)
    assert result.exit_code == 2
    assert result.output == (f"ggaudit: error: {path}: holds no tensor, vocabulary or chat template; nothing was "
                             "checked\n")


@pytest.mark.parametrize(("fail_on", "status"), [(None, 0), ("template", 1), ("warning", 1), ("nonfinite", 0),
                                                 ("error", 0)])
def test_a_template_warning_is_advice_unless_fail_on_selects_it(tmp_path: Path, fail_on: str | None,
                                                                status: int) -> None:
    path = _model(tmp_path / "m.gguf", URL)
    result = _run("scan", path, "--json", *(["--fail-on", fail_on] if fail_on else []))
    assert result.exit_code == status, result.output
    doc = json.loads(result.output)["models"][0]
    assert doc["ok"] is True
    assert [(t["severity"], t["rule"], t["line"], t["column"]) for t in doc["templates"]] == [
        ("warning", "url", 1, 1)]


def test_the_text_report_lists_the_advice_and_says_how_it_fails_a_run(tmp_path: Path) -> None:
    result = _run("scan", _model(tmp_path / "m.gguf", URL))
    assert result.exit_code == 0
    assert result.output.splitlines()[-1] == ("result: clean: no non-finite values; 1 template warning (advice: a "
                                              "run fails on them with --fail-on template)")


def test_a_template_error_fails_the_run(tmp_path: Path) -> None:
    result = _run("scan", _model(tmp_path / "m.gguf", DUNDER), "--json")
    assert result.exit_code == 1
    doc = json.loads(result.output)["models"][0]
    assert doc["ok"] is False
    assert [(t["severity"], t["rule"], t["seen"]) for t in doc["templates"]] == [
        ("error", "underscore-attribute", "__class__")]


def test_junit_says_the_advice_and_fails_no_case_on_it(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    path = _model(tmp_path / "m.gguf", URL)
    result = _run("scan", path, "--format", "junit")
    assert result.exit_code == 0
    suite = ET.fromstring(result.output)
    assert suite.findall(".//failure") == []
    case = next(c for c in suite.iter("testcase") if c.get("name") == f"structure of {path}")
    assert (case.findtext("system-out") or "").startswith("template tokenizer.chat_template line 1 column 1 at file ")


def test_sarif_gives_the_advice_its_own_level(tmp_path: Path) -> None:
    result = _run("scan", _model(tmp_path / "m.gguf", URL), "--format", "sarif")
    assert result.exit_code == 0
    [sarif_result] = json.loads(result.output)["runs"][0]["results"]
    assert (sarif_result["ruleId"], sarif_result["level"]) == ("template", "warning")
