"""What each chat engine gives a template: the filters, tests and globals it adds on top of jinja2's (or, for
llama.cpp, which does not use jinja2, all it has). One frozen table; the template check asks it whether a
filter or test is provided by any engine (:func:`providers`).

Sources (read for this table, December 2026):

- jinja2 3.1: ``jinja2.defaults.DEFAULT_FILTERS``, ``DEFAULT_TESTS``, ``DEFAULT_NAMESPACE`` (a test compares
  :data:`JINJA2` with the installed jinja2's).
- transformers: ``src/transformers/utils/chat_template_utils.py`` ``_compile_jinja_template``: an
  ``ImmutableSandboxedEnvironment`` with ``jinja2.ext.loopcontrols`` and its ``AssistantTracker`` (the
  ``{% generation %}`` tag); ``filters["tojson"]`` (``ensure_ascii``, ``indent``, ``separators``, ``sort_keys``
  keywords), ``globals["raise_exception"]``, ``globals["strftime_now"]``.
- vLLM 0.33.0: ``vllm/renderers/hf.py`` renders with the tokenizer's ``apply_chat_template`` (transformers' own
  environment above) and parses with the same extensions (``AssistantTracker``, ``loopcontrols``).
- llama-cpp-python 0.3.36: ``llama_cpp/llama_chat_format.py`` ``Jinja2ChatFormatter``: an
  ``ImmutableSandboxedEnvironment`` with ``IgnoreGenerationTags`` and ``loopcontrols``, ``filters["tojson"]``,
  and ``raise_exception``/``strftime_now`` passed to ``render``.
- llama.cpp (the copy vendored in llama-cpp-python 0.3.36): ``common/jinja/value.cpp`` ``global_builtins()``
  (globals and the ``test_is_*`` tests) and the per-type ``get_builtins()`` tables (a filter is also a method:
  ``x|upper`` and ``x.upper()`` are one entry), plus the aliases of ``runtime.cpp`` ``apply_filter``
  (``count``, ``d``, ``e``, ``trim``).

``from_json``, which the DeepSeek V3.2/V4 templates llama.cpp ships in ``models/templates/`` use, is in none of
these tables (nor in ``common/jinja``'s, where ``global_from_json`` is C++ that fills the render's inputs): the
templates use it only for a tool call whose arguments are a JSON string, which llama.cpp passes as an object, so
the branch is not taken there. It is a note (an unknown filter), not an error; the render provides it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ENGINES", "JINJA2", "Engine", "providers"]


@dataclass(frozen=True, kw_only=True)
class Engine:
    """One engine: the filters, tests and globals a template rendered by it may use."""

    name: str
    filters: frozenset[str]
    tests: frozenset[str]
    globals: frozenset[str]


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


JINJA2 = Engine(
    name="jinja2",
    filters=_names("""abs attr batch capitalize center count d default dictsort e escape filesizeformat first float
        forceescape format groupby indent int items join last length list lower map max min pprint random reject
        rejectattr replace reverse round safe select selectattr slice sort string striptags sum title tojson trim
        truncate unique upper urlencode urlize wordcount wordwrap xmlattr"""),
    tests=_names("""!= < <= == > >= boolean callable defined divisibleby eq equalto escaped even false filter float
        ge greaterthan gt in integer iterable le lessthan lower lt mapping ne none number odd sameas sequence string
        test true undefined upper"""),
    globals=_names("cycler dict joiner lipsum namespace range"))

#: What transformers adds to jinja2 (vLLM renders through it; llama-cpp-python mirrors it).
_TRANSFORMERS_GLOBALS = _names("raise_exception strftime_now")

ENGINES: tuple[Engine, ...] = (
    Engine(name="transformers", filters=JINJA2.filters, tests=JINJA2.tests,
           globals=JINJA2.globals | _TRANSFORMERS_GLOBALS),
    Engine(name="vLLM", filters=JINJA2.filters, tests=JINJA2.tests, globals=JINJA2.globals | _TRANSFORMERS_GLOBALS),
    Engine(name="llama-cpp-python", filters=JINJA2.filters, tests=JINJA2.tests,
           globals=JINJA2.globals | _TRANSFORMERS_GLOBALS),
    Engine(name="llama.cpp",
           filters=_names("""abs append capitalize count d default dictsort e endswith escape first float format
               get indent int items join keys last length list lower lstrip map max min pop reject
               rejectattr replace reverse rsplit rstrip safe select selectattr slice sort split startswith string
               strip sum title tojson trim truncate unique upper values wordcount"""),
           tests=_names("""boolean callable defined divisibleby eq equalto escaped even false filter float ge
               greaterthan gt in integer iterable lessthan lower lt mapping ne none number odd sameas sequence
               string test true undefined upper"""),
           globals=_names("dict namespace raise_exception range strftime_now tojson")),
)

_WHAT: dict[str, Callable[[Engine], frozenset[str]]] = {
    "filter": lambda e: e.filters, "test": lambda e: e.tests, "global": lambda e: e.globals}


def providers(what: str, name: str) -> tuple[str, ...]:
    """The engines whose ``what`` (``filter``, ``test`` or ``global``) of that name a template may use."""
    names = _WHAT[what]
    return tuple(e.name for e in ENGINES if name in names(e))
