"""The sandboxed, instrumented render of chat templates (issue 33): what it refuses, its budget, that the
real templates render clean, and that nothing unsafe ever runs."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from ggaudit.format.templates import inputs as template_inputs
from ggaudit.format.templates.render import MAX_LINES, render_contexts, render_findings

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = sorted((ROOT / "tests" / "data" / "templates").glob("*.jinja"))
CORPUS = sorted((ROOT / "bench-data" / "templates" / "corpus").glob("*.jinja"))
U = "{% set u = '_' * 2 %}"


def findings(text: str) -> list[tuple[str, str, int, int, str]]:
    return [(f.rule, f.severity, f.line, f.column, f.seen) for f in render_findings("m.gguf", "k", text)]


# ----- attacks the sandbox refuses -------------------------------------------------------------------

ATTACKS = {
    "computed dunder": (U + "\n{{ ''[u ~ 'class' ~ u][u ~ 'mro' ~ u][1][u ~ 'subclasses' ~ u]() }}",
                        (2, 12, "attribute '__class__' of str")),
    "str.format walks attributes": ("{{ '{0.__class__.__init__.__globals__}'.format(messages) }}",
                                    (1, 8, "attribute '__class__' of list")),
    "map(attribute=) walks attributes": ("{% set x = [{'a': {'b': 1}}] %}\n{{ x|map(attribute='a.b.__class__')|list }}",
                                         (2, 25, "attribute '__class__' of int")),
    "attr() of a computed name": (U + "{{ messages|attr(u ~ 'class' ~ u) }}", (1, 44, "attribute '__class__' of list")),
    "dunder of a message": ("{% for m in messages %}{{ m.items }}{% endfor %}{{ (messages|first).__class__ }}",
                 (1, 69, "attribute '__class__' of dict")),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_is_blocked_where_it_stands(name: str) -> None:
    text, (line, column, seen) = ATTACKS[name]
    assert findings(text) == [("render-blocked", "error", line, column, seen)]


def test_finding_locates_the_file_offset_and_says_what() -> None:
    text = "hello\n" + U + "{{ ''[u ~ 'class' ~ u] }}"
    (found,) = render_findings("m.gguf", "tokenizer.chat_template", text, value_offset=100)
    assert (found.key, found.path, found.line) == ("tokenizer.chat_template", "m.gguf", 2)
    assert found.offset == 100 + 8 + text.index("class")
    assert "CVE-2024-34359" in found.detail


def test_one_finding_per_line_and_attempt_over_all_renders() -> None:
    text = "{% for m in messages %}{{ m.__class__ }}{% endfor %}\n{{ messages.__class__ }}"
    assert findings(text) == [("render-blocked", "error", 1, 29, "attribute '__class__' of dict"),
                              ("render-blocked", "error", 2, 13, "attribute '__class__' of list")]


def test_the_cve_chain_runs_no_process(tmp_path: Path) -> None:
    marker = tmp_path / "marker"        # written with / in the template: a \ would start a Jinja string escape
    text = (U + "{% for c in ''[u ~ 'class' ~ u][u ~ 'mro' ~ u][1][u ~ 'subclasses' ~ u]() %}"
            "{% if c[u ~ 'name' ~ u] == 'catch_warnings' %}"
            "{{ c()[u ~ 'module'][u ~ 'builtins'][u ~ 'import' ~ u]('os')"
            ".popen('touch " + marker.as_posix() + "').read() }}"
            "{% endif %}{% endfor %}")
    assert findings(text) == [("render-blocked", "error", 1, 42, "attribute '__class__' of str")]
    assert not marker.exists()


def test_an_unsafe_callable_is_refused_not_called(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    context = {"messages": [], "run": os.system}
    (found,) = render_contexts("m.gguf", "k", "{{ run('touch " + marker.as_posix() + "') }}", (context,))
    assert (found.rule, found.line, found.column) == ("render-blocked", 1, 1)
    assert found.seen in ("call of posix.system", "call of nt.system")
    assert not marker.exists()


class Spy:
    """An object whose private attributes record being read."""

    def __init__(self) -> None:
        self.read: list[str] = []

    @property
    def _secret(self) -> str:
        self.read.append("_secret")
        return "secret"

    @property
    def gi_frame(self) -> str:
        self.read.append("gi_frame")
        return "frame"


def test_no_private_attribute_is_ever_read() -> None:
    spy = Spy()
    text = ("{{ spy._secret }}\n{{ spy['_secret'] }}\n{{ spy|attr('_secret') }}\n{{ '{0._secret}'.format(spy) }}\n"
            "{{ [spy]|map(attribute='_secret')|list }}\n{{ spy.gi_frame }}")
    found = render_contexts("m.gguf", "k", text, ({"spy": spy},))
    assert spy.read == ["gi_frame"]     # a public name of an ordinary object is not internal
    assert [(f.line, f.seen) for f in found] == [(n, "attribute '_secret' of Spy") for n in range(1, 6)]


def test_mutating_methods_are_refused_without_a_finding() -> None:
    data: dict[str, Any] = {"messages": [], "ids": [1]}
    assert render_contexts("m.gguf", "k", "{% set _ = ids.append(2) %}{{ ids.pop(0) }}", (data,)) == ()
    assert data["ids"] == [1]


# ----- the budget ----------------------------------------------------------------------------------

UNBOUNDED = {
    "computed range": ("{% set n = 40000 %}\n{% for i in range(n * n) %}x{% endfor %}", 2, "range()"),
    "huge string": ("{% for c in 'x' * 10**9 %}{{ c }}{% endfor %}", 1, "str * 1000000000"),
    "nested loops": ("{% for i in range(100000) %}\n{% for j in range(100000) %}{% endfor %}{% endfor %}", 2,
                     f"more than {MAX_LINES} template lines run"),
    "macro recursion": ("{% macro f(n) %}\n{{ f(n + 1) }}\n{% endmacro %}\n{{ f(0) }}", 2, "recursion"),
    "doubling": ("{% set ns = namespace(s='x') %}\n{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 2, "a ~ concatenation"),
    "block doubling": ("{% set s = 'xx' %}" + "{% set s %}{{ s }}{{ s }}{% endset %}\n" * 30, 19, "a block's output"),
    "huge output": ("{% for i in range(100000) %}\n{{ 'x' * 100 }}{% endfor %}", 2, "the output"),
    "huge power": ("{{ 10 ** 1000000 }}", 1, "an integer"),
    "huge width": ("{{ 'x'|center(1000000000) }}", 1, "center() result"),
    "huge format width": ("\n{{ '{:>1000000000}'.format(1) }}", 2, "a format width"),
    "shared lists printed": ("{% set a = ['x' * 1000] %}" + "{% set a = [a, a, a, a] %}" * 8 + "\n{{ a }}", 2,
                             "an expression's text"),
}


@pytest.mark.parametrize("name", list(UNBOUNDED))
def test_unbounded_render_is_stopped_quickly(name: str) -> None:
    text, line, why = UNBOUNDED[name]
    started = time.perf_counter()
    (found,) = render_findings("m.gguf", "k", text)
    assert time.perf_counter() - started < 1.0
    assert (found.rule, found.severity, found.line, found.column) == ("unbounded", "error", line, 1)
    assert found.seen.startswith(why)


def test_trace_function_is_restored() -> None:
    before = sys.gettrace()
    render_findings("m.gguf", "k", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    assert sys.gettrace() is before


# ----- ordinary templates and inputs -------------------------------------------------------------------

@pytest.mark.parametrize("text", ["{{ raise_exception('no system role') }}", "{{ messages[0].content.strip() }}",
                                  "{{ undefined_name.x.y }}", "{{ 1 / 0 }}", "{% for x in %}", "{{ x|nosuchfilter }}",
                                  "{% include 'other' %}", "{{ " * 2000, ""])
def test_refusals_errors_and_syntax_are_not_render_findings(text: str) -> None:
    assert findings(text) == []


def test_transformers_tags_compile_and_run() -> None:
    text = ("{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% break %}{% endfor %}"
            "{{ messages.__class__ }}")
    assert [f.seen for f in render_findings("m.gguf", "k", text)] == ["attribute '__class__' of list"]


def test_threads_share_nothing() -> None:
    texts = [text for text, _ in ATTACKS.values()] + [p.read_text(encoding="utf-8") for p in COMMITTED[:4]]
    alone = [render_findings("m.gguf", "k", t) for t in texts]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda t: render_findings("m.gguf", "k", t), texts * 2)) == alone * 2


def test_engine_functions() -> None:
    assert template_inputs.tojson({"b": "é", "a": 1}, indent=2, sort_keys=True) == '{\n  "a": 1,\n  "b": "é"\n}'
    assert template_inputs.tojson([1, 2], separators=(",", ":"), ensure_ascii=True) == "[1,2]"
    assert template_inputs.from_json('{"a": [1]}') == {"a": [1]}
    assert template_inputs.strftime_now("%d %b %Y") == "01 Jan 2025"
    with pytest.raises(Exception, match="nope"):
        template_inputs.raise_exception("nope")


def test_contexts_carry_the_tokens() -> None:
    assert {c["bos_token"] for c in template_inputs.contexts("<B>", "</E>")} == {"<B>"}
    assert findings("{{ bos_token }}{% for m in messages %}{{ m.tool_calls[0].function.arguments|tojson }}"
                    "{{ m.reasoning_content }}{% endfor %}{{ tools|tojson(indent=2) }}{{ documents }}") == []


def test_findings_are_deterministic() -> None:
    texts = [text for text, _ in ATTACKS.values()] + [text for text, _, _ in UNBOUNDED.values()]
    first = [render_findings("m.gguf", "k", t) for t in texts]
    assert first == [render_findings("m.gguf", "k", t) for t in texts]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_templates_render_clean(path: Path) -> None:
    assert render_findings(str(path), "tokenizer.chat_template", path.read_text(encoding="utf-8")) == ()


@pytest.mark.skipif(not CORPUS, reason="bench-data/templates/corpus/ absent: run scripts/fetch_templates.py")
def test_corpus_templates_render_clean() -> None:
    dirty = {p.name: render_findings(str(p), "k", p.read_text(encoding="utf-8")) for p in CORPUS}
    assert {name: found for name, found in dirty.items() if found} == {}
