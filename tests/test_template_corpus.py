"""No false positives on real chat templates: every template of the corpus scripts/fetch_templates.py writes
(llama.cpp's, vLLM's and the ggml-vocab GGUFs' of the pinned sdists; in bench-data/templates/corpus, or the
folder GGAUDIT_TEMPLATE_CORPUS names) and every committed one (tests/data/templates/) has no error and no
warning; notes (an engine-specific filter, a URL in a comment) are information and allowed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ggaudit.format.templates import check_template

REPO = Path(__file__).resolve().parent.parent
COMMITTED = sorted((REPO / "tests" / "data" / "templates").glob("*.jinja"))
CORPUS = Path(os.environ.get("GGAUDIT_TEMPLATE_CORPUS", REPO / "bench-data" / "templates" / "corpus"))
FETCHED = sorted(CORPUS.glob("*.jinja")) if CORPUS.is_dir() else []


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
