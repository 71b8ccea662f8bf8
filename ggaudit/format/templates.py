"""Chat templates (``tokenizer.chat_template`` and ``tokenizer.chat_template.NAME``) that run code or hide
instructions.

Engines render the template with Jinja (llama-cpp-python with jinja2: CVE-2024-34359, code execution from
a GGUF's template; llama.cpp with minja; LM Studio, transformers). Here it is parsed with jinja2 and never
rendered: nothing from the file is executed. Errors (code execution or refusal) are found in its syntax
tree: attribute or item access to a name starting with ``_`` (``__class__``, ``__globals__``, ...), the
objects that reach Python internals (``self``, ``cycler``, ``joiner``, ``lipsum``, ``config``, ``request``,
``namespace`` other than called), ``import``/``include``/``extends``, ``range()`` of a huge constant, filters
and tests that chat engines do not provide, and a template that does not parse. Warnings (hidden content)
are found in its text: Unicode tag characters (decoded: the hidden text is shown), bidi controls,
zero-width characters, variation-selector payloads, long base64 or hex blobs, URLs, and plain text outside
any tag that gives the model instructions. Each finding has the template's line and column (1-based) and
its absolute file offset.

``namespace(...)`` called is allowed: real templates (Qwen2.5, Llama 3.x) keep loop state in one, and every
engine provides it; any other use of the name is an error.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .layout import MetaValue, Model

if TYPE_CHECKING:
    from jinja2 import nodes

__all__ = ["TEMPLATE", "TemplateFinding", "check_template", "check_templates", "is_template_key", "template_keys"]

#: The kind (ggaudit.kinds) of every finding here.
TEMPLATE = "template"
ERROR, WARNING = "error", "warning"

#: The filters chat engines provide (jinja2's, which transformers and llama-cpp-python render with, and
#: minja's): a template using another is refused by them, or relies on an engine-specific one. ``attr`` is
#: attribute access by string, checked like ``.name``.
FILTERS = frozenset((
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "items", "join", "last",
    "length", "list", "lower", "map", "max", "min", "pprint", "random", "reject", "rejectattr", "replace", "reverse",
    "round", "safe", "select", "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"))
TESTS = frozenset((
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter", "float",
    "ge", "gt", "greaterthan", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none",
    "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper"))
#: Names whose objects lead from a template to Python internals (jinja2's globals, Flask's).
FORBIDDEN_NAMES = frozenset(("self", "cycler", "joiner", "namespace", "lipsum", "config", "request"))
#: Filters whose string arguments name attributes (``map(attribute=...)``, ``selectattr('x')``).
_ATTRIBUTE_FILTERS = frozenset(("attr", "map", "selectattr", "rejectattr", "sort", "groupby", "unique", "sum",
                                "min", "max"))
#: Most elements a ``range()`` of constants may produce (real templates range over the messages).
MAX_RANGE = 100_000

# Runs of invisible characters, as regular expressions: found in one pass of re's C loop, not a Python loop
# per character (a template of 20,000 characters costs microseconds, not milliseconds).
_TAGS = re.compile("[\U000E0000-\U000E007F]+")
_BIDI = re.compile("[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]+")
_ZERO_WIDTH = re.compile("[\u180E\u200B-\u200D\u2060-\u2064\uFEFF]+")
#: U+FE00..FE0F and U+E0100..E01EF: one after an emoji picks its style; two or more in a row are a payload.
_SELECTORS = re.compile("[\uFE00-\uFE0F\U000E0100-\U000E01EF]{2,}")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{80,}={0,2}")
_HEX = re.compile(r"(?<![0-9A-Za-z])[0-9A-Fa-f]{64,}(?![0-9A-Za-z])")
_URL = re.compile(r"\b(?:https?|ftp|file|javascript)://[^\s'\"<>{}]+|\bwww\.[a-z0-9-]+\.[a-z]{2,}[^\s'\"<>{}]*",
                  re.IGNORECASE)
#: Plain text that addresses the model with instructions to override, hide or deceive.
_INSTRUCTION = re.compile(
    r"\b(?:ignore|disregard|forget|override)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|all|system|your)\b"
    r"[^.\n]{0,20}?\b(?:instructions?|rules|prompts?|guidelines)\b"
    r"|\b(?:do not|don't|never)\s+(?:tell|reveal|mention|inform|disclose|show)\b[^.\n]{0,30}?\b(?:the user|anyone)\b"
    r"|\bwithout (?:telling|informing|alerting|notifying) the user\b"
    r"|\b(?:new|hidden|secret) instructions?\b"
    r"|\bsystem (?:prompt )?override\b",
    re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class TemplateFinding:
    """One thing a chat template does or hides: ``key`` (the metadata key), ``rule`` (what kind of thing:
    ``underscore-attribute``, ``forbidden-name``, ``import``, ``huge-range``, ``unknown-filter``,
    ``unknown-test``, ``syntax``; ``tag-characters``, ``bidi``, ``zero-width``, ``variation-selectors``,
    ``blob``, ``url``, ``instruction``), ``severity`` (``error``: code execution or refusal; ``warning``:
    hidden content), ``line``/``column`` in the template (1-based), ``offset`` in the file, ``seen`` (the
    template's text there; for tag characters and variation selectors, the text they decode to) and
    ``detail`` (what it is, in words)."""

    path: str
    key: str
    rule: str
    severity: str
    line: int
    column: int
    offset: int
    seen: str
    detail: str
    kind: str = TEMPLATE

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "file": self.path, "key": self.key,
                "rule": self.rule, "line": self.line, "column": self.column, "offset": self.offset,
                "seen": self.seen, "detail": self.detail}


class _Source:
    """A template's text: where an index is (line, column, file offset), where a word next appears."""

    def __init__(self, path: str, key: str, text: str, value_offset: int) -> None:
        self.path, self.key, self.text = path, key, text
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.value_offset = value_offset + 8        # the string's u64 length comes first
        self.searched: dict[tuple[int, str], int] = {}

    def finding(self, index: int, rule: str, severity: str, seen: str, detail: str) -> TemplateFinding:
        line = _bisect(self.starts, index)
        offset = self.value_offset + len(self.text[:index].encode("utf-8", "surrogatepass"))
        return TemplateFinding(path=self.path, key=self.key, rule=rule, severity=severity, line=line + 1,
                               column=index - self.starts[line] + 1, offset=offset, seen=seen, detail=detail)

    def find(self, lineno: int, needle: str) -> int:
        """Where ``needle`` next appears from line ``lineno`` (1-based) on, after any earlier find of it on
        that line: jinja2's nodes know their line, not their column."""
        start = self.searched.get((lineno, needle), self.starts[min(lineno, len(self.starts)) - 1])
        index = self.text.find(needle, start)
        if index < 0:
            index = start
        self.searched[(lineno, needle)] = index + 1
        return index


def _bisect(starts: list[int], index: int) -> int:
    lo, hi = 0, len(starts)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if starts[mid] <= index else (lo, mid)
    return lo


# ----- code: the syntax tree ---------------------------------------------------------------------

def _environment() -> Any:
    """A jinja2 environment that parses what transformers' chat environment parses: loop controls
    (``{% break %}``) and its ``{% generation %}`` block."""
    from jinja2 import Environment, nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}    # noqa: RUF012 -- jinja2.ext.Extension declares a set

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    return Environment(extensions=["jinja2.ext.loopcontrols", Generation])


def _const_text(node: nodes.Node) -> str | None:
    """A string the expression always is (a constant, or constants joined with ``~`` or ``+``), else None."""
    from jinja2 import nodes as n

    if isinstance(node, n.Const):
        return node.value if isinstance(node.value, str) else None
    parts: list[nodes.Node] = list(node.nodes) if isinstance(node, n.Concat) else \
        [node.left, node.right] if isinstance(node, n.Add) else []
    texts = [_const_text(p) for p in parts]
    return "".join(t for t in texts if t is not None) if parts and None not in texts else None


def _const_int(node: nodes.Node) -> int | None:
    from jinja2 import nodes as n

    if isinstance(node, n.Const) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, n.Neg):
        inner = _const_int(node.node)
        return None if inner is None else -inner
    if isinstance(node, (n.Mul, n.Pow)):
        a, b = _const_int(node.left), _const_int(node.right)
        if a is None or b is None or (isinstance(node, n.Pow) and not 0 <= b <= 64):
            return None
        return a * b if isinstance(node, n.Mul) else a ** b
    return None


def _walk(tree: nodes.Template) -> Iterator[tuple[nodes.Node, frozenset[str]]]:
    """Every node under ``tree``, in pre-order (a call before the name it calls), with the parameters of the
    macros around it: there a name is the caller's argument (functionary's ``namespace='functions'``), not
    jinja2's global of that name."""
    from jinja2 import nodes as n

    none: frozenset[str] = frozenset()
    stack = [(c, none) for c in tree.iter_child_nodes()][::-1]
    while stack:
        node, params = stack.pop()
        yield node, params
        if isinstance(node, (n.Macro, n.CallBlock)):
            inner = params | {a.name for a in node.args}
            # A call block's call is made where it stands; its body (like a macro's) sees the parameters.
            outer = {id(c) for c in (node.call, *node.args, *node.defaults)} if isinstance(node, n.CallBlock) else set()
            kids = [(c, params if id(c) in outer else inner) for c in node.iter_child_nodes()]
        else:
            kids = [(c, params) for c in node.iter_child_nodes()]
        stack.extend(reversed(kids))


def _code(src: _Source, tree: nodes.Template) -> Iterator[TemplateFinding]:
    from jinja2 import nodes as n

    called_namespace: set[int] = set()      # pre-order: a call is met before the name it calls

    def error(node: nodes.Node, needle: str, rule: str, detail: str) -> TemplateFinding:
        return src.finding(src.find(node.lineno, needle), rule, ERROR, needle, detail)

    def underscore(node: nodes.Node, name: str, how: str) -> TemplateFinding:
        return error(node, name, "underscore-attribute",
                     f"{how} {name!r}, a name starting with _: the way out of the template into Python "
                     "(CVE-2024-34359)")

    for node, params in _walk(tree):
        if isinstance(node, n.Getattr) and node.attr.startswith("_"):
            yield underscore(node, node.attr, "attribute")
        elif isinstance(node, n.Getitem) and (key := _const_text(node.arg)) is not None and key.startswith("_"):
            yield underscore(node, key if isinstance(node.arg, n.Const) else key[:1], "item")
        elif isinstance(node, n.Name) and node.name in FORBIDDEN_NAMES and id(node) not in called_namespace and \
                node.ctx == "load" and node.name not in params:
            yield error(node, node.name, "forbidden-name",
                        f"{node.name!r}: an object whose attributes reach Python internals")
        elif isinstance(node, n.Name) and node.name.startswith("__"):
            yield underscore(node, node.name, "name")
        elif isinstance(node, (n.Import, n.FromImport, n.Include, n.Extends)):
            word = {n.Import: "import", n.FromImport: "import", n.Include: "include", n.Extends: "extends"}[type(node)]
            yield error(node, word, "import", f"{{% {word} %}}: loads another template, which engines refuse")
        elif isinstance(node, n.Call):
            if isinstance(node.node, n.Name) and node.node.name == "namespace":
                called_namespace.add(id(node.node))
            yield from _call(src, node, error)
        elif isinstance(node, (n.Filter, n.Test)):
            yield from _filter(src, node, error, underscore)


def _call(src: _Source, node: nodes.Call, error: Any) -> Iterator[TemplateFinding]:
    """``range()`` of constants that would make more than MAX_RANGE elements (a render that never ends)."""
    from jinja2 import nodes as n

    if not (isinstance(node.node, n.Name) and node.node.name == "range") or not node.args:
        return
    bounds = [_const_int(a) for a in node.args]
    if None in bounds or len(bounds) > 3 or (len(bounds) == 3 and bounds[2] == 0):
        return
    size = len(range(*[b for b in bounds if b is not None]))
    if size > MAX_RANGE:
        yield error(node, "range", "huge-range", f"range() of {size} elements (more than {MAX_RANGE}): a render "
                    "that exhausts time or memory")


def _filter(src: _Source, node: nodes.Filter | nodes.Test, error: Any, underscore: Any) -> Iterator[TemplateFinding]:
    from jinja2 import nodes as n

    is_filter = isinstance(node, n.Filter)
    known, what = (FILTERS, "filter") if is_filter else (TESTS, "test")
    if node.name not in known:
        yield error(node, node.name, f"unknown-{what}", f"{what} {node.name!r}, which chat engines do not provide")
        return
    if not is_filter or node.name not in _ATTRIBUTE_FILTERS:
        return
    args = [*node.args, *(kw.value for kw in node.kwargs)]
    if node.name == "attr" and args and _const_text(args[0]) is None:
        yield error(node, "attr", "underscore-attribute", "attr() of a name computed at render time: any "
                    "attribute, those starting with _ included")
    for arg in args:
        text = _const_text(arg)
        if text is not None and text.startswith("_"):
            yield underscore(node, text, f"{node.name}() of attribute")
    if node.name == "map" and node.args and (inner := _const_text(node.args[0])) is not None and \
            not any(kw.key == "attribute" for kw in node.kwargs) and inner not in FILTERS:
        yield error(node, inner, "unknown-filter", f"map() of filter {inner!r}, which chat engines do not provide")


# ----- hidden content: the text ------------------------------------------------------------------

def _is_pictograph(ch: str) -> bool:
    cp = ord(ch)
    return cp >= 0x1F000 or 0x2600 <= cp < 0x27C0 or unicodedata.category(ch) == "So"


def _selector_byte(ch: str) -> int:
    """The byte a variation selector carries: 0..15 for U+FE00..FE0F, then 16..255."""
    cp = ord(ch)
    return cp - 0xFE00 if cp <= 0xFE0F else cp - 0xE0100 + 16


def _code_points(run: str) -> str:
    return ", ".join(f"U+{ord(c):04X}" for c in run)


def _hidden(src: _Source) -> Iterator[TemplateFinding]:
    text = src.text
    for m in _TAGS.finditer(text):
        hidden = "".join(chr(ord(c) - 0xE0000) for c in m.group() if 0xE0020 <= ord(c) <= 0xE007E)
        yield src.finding(m.start(), "tag-characters", WARNING, hidden,
                          f"{len(m.group())} invisible Unicode tag characters, which spell {hidden!r}")
    for m in _BIDI.finditer(text):
        yield src.finding(m.start(), "bidi", WARNING, m.group(),
                          f"bidi control {_code_points(m.group())}: the text shown is not the order it is read in")
    for m in _ZERO_WIDTH.finditer(text):
        start, end = m.span()
        if m.group().strip("\u200d") == "" and start > 0 and end < len(text) and \
                _is_pictograph(text[start - 1]) and _is_pictograph(text[end]):
            continue    # a zero-width joiner inside an emoji sequence
        yield src.finding(start, "zero-width", WARNING, m.group(), f"zero-width character {_code_points(m.group())}")
    for m in _SELECTORS.finditer(text):
        shown = bytes(_selector_byte(c) for c in m.group()).decode("utf-8", "backslashreplace")
        yield src.finding(m.start(), "variation-selectors", WARNING, shown,
                          f"{len(m.group())} variation selectors in a row, a payload of bytes that reads {shown!r}")
    yield from _blobs(src)


def _blobs(src: _Source) -> Iterator[TemplateFinding]:
    text = src.text
    for m in _HEX.finditer(text):
        yield src.finding(m.start(), "blob", WARNING, m.group(), f"a hex blob of {len(m.group())} characters")
    for m in _BASE64.finditer(text):
        blob = m.group()
        if any(c.isdigit() for c in blob) and any(c.isupper() for c in blob) and any(c.islower() for c in blob) \
                and not _HEX.fullmatch(blob):
            yield src.finding(m.start(), "blob", WARNING, blob, f"a base64 blob of {len(blob)} characters")
    for m in _URL.finditer(text):
        yield src.finding(m.start(), "url", WARNING, m.group(), "a URL: a template has no reason to hold one")


def _instructions(src: _Source, tree: nodes.Template) -> Iterator[TemplateFinding]:
    """Plain text (outside every tag: the tree's TemplateData, so the template is not lexed a second time)
    that gives the model instructions to override, hide or deceive."""
    from jinja2 import nodes as n

    for data in tree.find_all(n.TemplateData):
        for m in _INSTRUCTION.finditer(data.data):
            yield src.finding(src.find(data.lineno, m.group()), "instruction", WARNING, m.group(),
                              "plain text outside any tag that instructs the model, rendered into every prompt")


def check_template(path: str, key: str, text: str, value_offset: int = 0) -> tuple[TemplateFinding, ...]:
    """Every finding of one template: its code (parsed, never rendered), then what it hides.
    ``value_offset``: where the key's value (its u64 length, then the text) is in the file."""
    from jinja2 import TemplateSyntaxError

    src = _Source(path, key, text, value_offset)
    env = _environment()
    found = list(_hidden(src))
    try:
        tree = env.parse(text)
    except TemplateSyntaxError as err:
        line = max(1, min(err.lineno or 1, len(src.starts)))
        found.insert(0, src.finding(src.starts[line - 1], "syntax", ERROR, err.message or "",
                                    f"does not parse: {err.message}; engines refuse it"))
        return tuple(found)
    return (*_code(src, tree), *found, *_instructions(src, tree))


def template_keys(model: Model) -> list[tuple[str, MetaValue]]:
    """The chat templates of a model: ``tokenizer.chat_template`` and ``tokenizer.chat_template.NAME``."""
    return [(k, v) for k, v in model.metadata.items() if is_template_key(k) and isinstance(v.value, str)]


def is_template_key(key: str) -> bool:
    return key == "tokenizer.chat_template" or key.startswith("tokenizer.chat_template.")


def check_templates(model: Model) -> tuple[TemplateFinding, ...]:
    """Every finding of every chat template of ``model`` (none without one: jinja2 is then not imported)."""
    path = model.files[0].path
    return tuple(f for key, v in template_keys(model) for f in check_template(path, key, v.value, v.offset))
