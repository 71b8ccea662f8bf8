"""No false positives on real chat templates: every template of the corpus scripts/fetch_templates.py writes
(llama.cpp's, vLLM's and the ggml-vocab GGUFs' of the pinned sdists; in bench-data/templates/corpus, or the
folder GGAUDIT_TEMPLATE_CORPUS names) and every committed one (tests/data/templates/) has no error and no
warning; notes (an engine-specific filter, a URL in a comment) are information and allowed. The vocabulary-only
GGUFs the script keeps beside it (``vocab/``: llama.cpp's 19) each get a verdict from their header: clean, exit 0.
scripts/templates_lane.sh fetches them and runs this file, a skip failing the lane."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from click.testing import CliRunner

from ggaudit.cli import main
from ggaudit.format.templates import check_template

REPO = Path(__file__).resolve().parent.parent
COMMITTED = sorted((REPO / "tests" / "data" / "templates").glob("*.jinja"))
CORPUS = Path(os.environ.get("GGAUDIT_TEMPLATE_CORPUS", REPO / "bench-data" / "templates" / "corpus"))
FETCHED = sorted(CORPUS.glob("*.jinja")) if CORPUS.is_dir() else []
VOCAB = sorted(CORPUS.parent.joinpath("vocab").rglob("ggml-vocab-*.gguf"))


def _errors_and_warnings(path: Path) -> list[tuple[str, str, int, int, str]]:
    return [(f.severity, f.rule, f.line, f.column, f.seen)
            for f in check_template(path.name, "tokenizer.chat_template", path.read_text("utf-8"))
            if f.severity != "note"]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_a_committed_template_has_no_error_or_warning(path: Path) -> None:
    assert _errors_and_warnings(path) == []


@pytest.mark.skipif(not FETCHED, reason=f"no corpus at {CORPUS}: run scripts/fetch_templates.py "
                                        "(or set GGAUDIT_TEMPLATE_CORPUS)")
@pytest.mark.parametrize("path", FETCHED, ids=lambda p: p.name)
def test_a_fetched_template_has_no_error_or_warning(path: Path) -> None:
    assert _errors_and_warnings(path) == []


@pytest.mark.skipif(not VOCAB, reason=f"no vocabulary files beside {CORPUS}: run scripts/fetch_templates.py")
@pytest.mark.parametrize("path", VOCAB, ids=lambda p: p.name)
def test_a_vocabulary_only_file_gets_a_clean_verdict_from_its_header(path: Path) -> None:
    import json

    result = CliRunner().invoke(main, ["scan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)["models"][0]
    assert (doc["ok"], doc["tensors"], doc["metadata"]) == (True, [], [])
    assert "tokenizer.ggml.tokens" in doc["header_checked"]
    assert [t for t in doc["templates"] if t["severity"] != "note"] == []

